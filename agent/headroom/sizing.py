"""Memory model: how many bytes a declared workload needs per GPU, and how much load fits.

Pure functions over ``headroom.profiles.WorkloadProfile``; bytes are ints; nothing reads the host.
Every constant and approximation is documented in docs/sizing.md, with its source. In short:

- weights      params x bits / 8; GPTQ/AWQ add an FP16 scale and a packed zero per group of 128;
               NF4 adds an FP32 absmax per 64 weights, or with double quantization an 8-bit one plus
               an FP32 constant per 256 blocks (~0.127 bit/param); embeddings stay unquantized.
- kv_cache     2 x layers x kv_heads x head_dim x bytes x tokens x sequences (vLLM: whole 16-token
               blocks); per GPU: kv_heads / tensor (at least 1), layers / pipeline.
- training     per trained parameter: weights + gradients + optimizer moments + FP32 master copy;
               16 B/param for FP16/BF16 + AdamW with 16-bit gradients, 18 B/param with FP32 gradients.
- adapter      LoRA/QLoRA: rank x (d_in + d_out) per adapted matrix per layer, with its own
               gradients, optimizer state and master copy.
- activations  training: Korthikanti et al. 2022 per layer s*b*h*(10 + 24/t + 5*a*s/(h*t)) bytes
               (no s^2 term with FlashAttention), or 2*s*b*h per layer plus one full layer with
               gradient checkpointing, plus FP32 logits; inference: one decoder layer's live set.
- overhead     CUDA context and runtime overhead per GPU (OverheadConstants, configurable).
- vLLM         reserves gpu_memory_utilization x card memory; KV gets what is left after weights,
               activation peak and overhead; capacities use that reservation as the budget.

``estimate(profile, gpu_memory_bytes, gpus)`` returns an ``Estimate``: per-GPU components, whether it
fits, the margin, the largest concurrency at max context and the largest context at the declared
concurrency. Missing inputs raise ``SizingError`` naming all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from headroom.profiles import (
    LORA_ALL_LINEAR,
    Architecture,
    Kind,
    Optimizer,
    Precision,
    Quantization,
    QuantizationSpec,
    Training,
    WorkloadProfile,
)
from headroom.units import GIB, format_bytes

MIB = 1024**2
_SEARCH_LIMIT = 1 << 40  # upper bound for capacity searches (tokens or sequences)


class SizingError(ValueError):
    """The profile lacks inputs a component needs; ``missing`` lists the profile keys, ``message`` says why."""

    def __init__(self, message: str, missing: tuple[str, ...] = ()):
        super().__init__(message)
        self.missing = missing


@dataclass(frozen=True)
class OverheadConstants:
    """Per-GPU constants the model cannot derive (documented in docs/sizing.md; configurable)."""

    cuda_context_bytes: int = 512 * MIB  # per process per GPU; domain.md: 0.3-0.7 GiB
    runtime_overhead_bytes: int = 512 * MIB  # allocator slack, cuBLAS workspaces, NCCL buffers
    cpu_runtime_overhead_bytes: int = 512 * MIB  # host runtime for cpu-inference
    vllm_gpu_memory_utilization: float = 0.9  # vLLM's default
    vllm_block_size: int = 16  # vLLM's default KV block, tokens
    vllm_min_batched_tokens: int = 2048  # vLLM: max_num_batched_tokens = max(max_model_len, 2048)
    vllm_max_num_seqs: int = 256  # vLLM's default; its start-up profile samples logits for this many
    gptq_awq_group_size: int = 128
    nf4_block_size: int = 64  # weights per absmax constant (bitsandbytes)
    nf4_double_quant_block_size: int = 256  # first-level constants per second-level FP32 constant
    logits_bytes: int = 4  # logits are upcast to FP32 for softmax / loss


DEFAULTS = OverheadConstants()
_NO_QUANTIZATION = QuantizationSpec()


@dataclass(frozen=True)
class Component:
    name: str  # weights, kv_cache, gradients, optimizer_state, master_weights, adapter, activations ...
    bytes: int  # per GPU (the largest share when split unevenly)
    note: str = ""


@dataclass(frozen=True)
class Estimate:
    profile: str
    kind: str
    components: tuple[Component, ...]
    needed_bytes: int  # per GPU: the sum of components
    gpus_needed: int  # tensor x pipeline x data
    gpus_available: int | None
    gpu_memory_bytes: int | None  # per GPU as given (host RAM for cpu-inference)
    budget_bytes: int | None  # what the load must fit in: the vLLM reservation, else gpu_memory_bytes
    vllm_reservation_bytes: int | None  # gpu_memory_utilization x gpu_memory_bytes, vLLM only
    expected_usage_bytes: int  # per GPU as NVML would show: the vLLM reservation, else needed_bytes
    fits: bool | None  # None when the memory is not known
    margin_bytes: int | None  # budget - needed: positive = spare, negative = missing
    concurrency: int  # sequences (inference) or micro-batch (training) the estimate assumes
    context: int  # tokens per sequence the estimate assumes
    concurrency_label: str  # "concurrent sequences" or "micro-batch"
    max_concurrency_at_max_context: int | None
    max_context_at_concurrency: int | None
    kv_bytes_per_token: int | None  # per GPU, for one token of one sequence
    kv_capacity_tokens: int | None  # tokens the KV budget holds (vLLM's "GPU KV cache size")
    notes: tuple[str, ...] = ()

    @property
    def total_bytes(self) -> int:
        """Across all the workload's GPUs: needed per GPU x GPUs (an upper bound where shares are uneven)."""
        return self.needed_bytes * max(self.gpus_needed, 1)

    def component(self, name: str) -> int:
        """Bytes per GPU of the named component, 0 when the estimate has none by that name."""
        return next((c.bytes for c in self.components if c.name == name), 0)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; bytes are ints."""
        out: dict[str, Any] = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "components"}
        out["components"] = [{"name": c.name, "bytes": c.bytes, "note": c.note} for c in self.components]
        out["notes"] = list(self.notes)
        out["total_bytes"] = self.total_bytes
        return out


# -------------------------------------------------------------------------------- building blocks
def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def dense_bytes(count: int, precision: Precision) -> int:
    """Bytes for ``count`` elements stored in ``precision`` (int4 packs two per byte, rounded up)."""
    return _ceil_div(count * precision.bits, 8)


def weight_bytes(
    params: int,
    precision: Precision,
    quantization: QuantizationSpec = _NO_QUANTIZATION,
    unquantized_params: int = 0,
    unquantized_precision: Precision = Precision.BF16,
    constants: OverheadConstants = DEFAULTS,
) -> int:
    """Bytes of the model weights: the quantized part at ``precision`` plus its quantization constants,
    plus ``unquantized_params`` (embeddings, LM head) at ``unquantized_precision``."""
    method = quantization.method
    if method == Quantization.NONE:
        return dense_bytes(params, precision)
    quantized = max(params - unquantized_params, 0)
    data = dense_bytes(quantized, precision)
    if method in (Quantization.GPTQ, Quantization.AWQ):
        groups = _ceil_div(quantized, quantization.group_size or constants.gptq_awq_group_size)
        consts = _ceil_div(groups * (16 + precision.bits), 8)  # FP16 scale + packed zero point per group
    else:  # NF4
        blocks = _ceil_div(quantized, constants.nf4_block_size)
        if quantization.double_quant is False:
            consts = blocks * 4  # FP32 absmax per block
        else:
            consts = blocks + _ceil_div(blocks, constants.nf4_double_quant_block_size) * 4
    return data + consts + dense_bytes(min(unquantized_params, params), unquantized_precision)


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, precision: Precision) -> int:
    """K and V for one token of one sequence: 2 x layers x kv_heads x head_dim x bytes per element."""
    return dense_bytes(2 * layers * kv_heads * head_dim, precision)


def kv_cache_bytes(per_token: int, tokens: int, sequences: int, block_size: int | None = None) -> int:
    """KV cache for ``sequences`` of ``tokens`` each; with a block size (vLLM) each sequence takes whole blocks."""
    if block_size:
        tokens = _ceil_div(tokens, block_size) * block_size
    return per_token * tokens * sequences


def training_state_bytes_per_param(
    precision: Precision, gradient_precision: Precision, optimizer: Optimizer, master_weights: bool
) -> dict[str, int]:
    """Bytes per trained parameter by part: weights, gradients, optimizer_state, master_weights.

    FP16 weights + FP16 gradients + AdamW + FP32 master = 2 + 2 + 8 + 4 = 16; with FP32 gradients 18
    (transformers' model_memory_anatomy accounting: 6 for the two weight copies, 4 gradients, 8 AdamW).
    """
    return {
        "weights": precision.bits // 8,
        "gradients": gradient_precision.bits // 8,
        "optimizer_state": optimizer.state_bytes_per_param,
        "master_weights": 4 if master_weights else 0,
    }


def lora_module_shapes(arch: Architecture) -> dict[str, tuple[int | None, int | None]]:
    """(d_in, d_out) per known LoRA target module name; None where the architecture does not say."""
    h, hd = arch.effective_hidden_size, arch.effective_head_dim
    q = arch.heads * hd if arch.heads is not None and hd is not None else None
    kv = arch.effective_kv_heads * hd if arch.effective_kv_heads is not None and hd is not None else None
    ffn = arch.intermediate_size
    return {
        "q_proj": (h, q),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (q, h),
        "gate_proj": (h, ffn),
        "up_proj": (h, ffn),
        "down_proj": (ffn, h),
        "qkv_proj": (h, None if q is None or kv is None else q + 2 * kv),
        "gate_up_proj": (h, None if ffn is None else 2 * ffn),
    }


_ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_adapter_params(arch: Architecture, rank: int, target_modules: tuple[str, ...]) -> int:
    """Adapter parameters: layers x sum over target modules of rank x (d_in + d_out).

    Raises SizingError naming unknown modules and the architecture fields the shapes need.
    """
    modules = _ALL_LINEAR if LORA_ALL_LINEAR in target_modules else target_modules
    shapes = lora_module_shapes(arch)
    unknown = [m for m in modules if m not in shapes]
    if unknown:
        raise SizingError(
            f"LoRA adapter size: no known shape for target module(s) {', '.join(unknown)}; "
            f"known: {', '.join(shapes)}; or give lora.params",
            ("lora.params",),
        )
    missing = [] if arch.layers is not None else ["architecture.layers"]
    for m in modules:
        d_in, d_out = shapes[m]
        if d_in is None or d_out is None:
            needs = _module_needs(m, arch)
            missing += [n for n in needs if n not in missing]
    if missing:
        raise SizingError(
            f"LoRA adapter size needs {', '.join(missing)}; missing: {', '.join(missing)}", tuple(missing)
        )
    return arch.layers * sum(rank * (shapes[m][0] + shapes[m][1]) for m in modules)


def _module_needs(module: str, arch: Architecture) -> list[str]:
    needs = []
    if arch.effective_hidden_size is None:
        needs.append("architecture.hidden_size")
    if module in ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj"):
        if arch.heads is None:
            needs.append("architecture.heads")
        if arch.effective_head_dim is None and "architecture.head_dim" not in needs:
            needs.append("architecture.head_dim")
    if module in ("gate_proj", "up_proj", "down_proj", "gate_up_proj") and arch.intermediate_size is None:
        needs.append("architecture.intermediate_size")
    return needs


def training_activation_bytes(
    layers: int,
    hidden: int,
    heads: int,
    seq: int,
    micro_batch: int,
    tensor: int = 1,
    checkpointing: bool = False,
    flash_attention: bool = True,
    compute: Precision = Precision.BF16,
    vocab: int | None = None,
    logits_bytes: int = 4,
) -> int:
    """Activation memory per GPU for one micro-batch (Korthikanti et al. 2022, 16-bit activations).

    Per layer without recomputation: s*b*h*(10 + 24/t + 5*a*s/(h*t)) bytes; FlashAttention removes the
    5*a*s/(h*t) term. With full checkpointing: 2*s*b*h per layer (the stored layer inputs) plus one
    layer's full activations while it is recomputed. FP32 compute doubles it. Plus s*b*vocab FP32
    logits when the vocabulary is known. Pipeline parallelism does not reduce it: with 1F1B the first
    stage keeps ``pipeline`` micro-batches of its layers in flight.
    """
    sbh = seq * micro_batch * hidden
    per_layer = sbh * (10 * tensor + 24) // tensor
    if not flash_attention:
        per_layer += 5 * heads * seq * seq * micro_batch // tensor
    scale = compute.bits / 16
    if checkpointing:
        stored = layers * 2 * sbh + per_layer
    else:
        stored = layers * per_layer
    logits = seq * micro_batch * vocab * logits_bytes if vocab else 0
    return int(stored * scale) + logits


def inference_activation_bytes(
    tokens: int,
    sequences: int,
    hidden: int,
    intermediate: int | None,
    tensor: int = 1,
    compute: Precision = Precision.BF16,
    vocab: int | None = None,
    logits_bytes: int = 4,
) -> int:
    """Peak temporary memory of one forward pass over ``tokens`` tokens (our approximation).

    The largest live set of one decoder layer is the MLP step: residual and normed input (2 x hidden)
    plus gate, up and their product (3 x intermediate / tensor) per token, in the compute precision;
    plus FP32 logits for the last token of each sequence. intermediate defaults to 4 x hidden.
    """
    ffn = intermediate if intermediate is not None else 4 * hidden
    per_token = 2 * hidden + _ceil_div(3 * ffn, tensor)
    logits = sequences * vocab * logits_bytes if vocab else 0
    return dense_bytes(tokens * per_token, compute) + logits


# ------------------------------------------------------------------------------------- estimation
@dataclass(frozen=True)
class _Plan:
    """Everything about a profile that does not depend on concurrency and context."""

    profile: WorkloadProfile
    constants: OverheadConstants
    static: tuple[Component, ...]  # weights, training state, adapter, overhead: per GPU
    variable: Callable[[int, int], tuple[Component, ...]]  # (concurrency, context) -> per GPU
    kv_per_token: int | None  # per GPU
    block_size: int | None
    notes: tuple[str, ...]


def _plan(p: WorkloadProfile, c: OverheadConstants) -> _Plan:
    arch, par = p.architecture, p.parallel
    notes: list[str] = []
    missing: list[str] = []
    reasons: list[str] = []

    def need(what: str, fields: dict[str, Any]) -> bool:
        absent = [k for k, v in fields.items() if v is None]
        if absent:
            reasons.append(f"{what} needs {', '.join(fields)}; missing: {', '.join(absent)}")
            missing.extend(a for a in absent if a not in missing)
        return not absent

    split = par.tensor * par.pipeline
    compute = p.effective_compute_precision
    wprec = p.weight_precision
    quant = p.effective_quantization
    static: list[Component] = []

    # weights
    if need("weights", {"params": p.params, "precision": wprec}):
        unquantized = 0
        if quant.method != Quantization.NONE:
            h, v = arch.effective_hidden_size, arch.vocab_size
            if h is not None and v is not None:
                unquantized = v * h * (1 if arch.tie_embeddings else 2)
            else:
                notes.append(
                    "vocab_size or hidden_size unknown: embeddings counted as quantized (lower bound)"
                )
        total = weight_bytes(p.params, wprec, quant, unquantized, compute, c)
        label = wprec.value if quant.method == Quantization.NONE else f"{quant.method.value} {wprec.value}"
        if p.kind.is_adapter:
            label += ", frozen"
        static.append(Component("weights", _ceil_div(total, split), label))

    # training state
    tr = p.training
    optimizer = tr.optimizer if tr and tr.optimizer else Optimizer.ADAMW
    if (p.kind.is_full_training or p.kind.is_adapter) and not (tr and tr.optimizer):
        notes.append("training.optimizer not declared: assuming adamw")
    if p.kind.is_full_training and p.params is not None and wprec is not None:
        gprec = tr.gradient_precision if tr and tr.gradient_precision else wprec
        master = tr.master_weights if tr and tr.master_weights is not None else wprec not in (Precision.FP32,)
        per = training_state_bytes_per_param(wprec, gprec, optimizer, master)
        static.append(Component("gradients", _ceil_div(p.params * per["gradients"], split), gprec.value))
        static.append(
            Component("optimizer_state", _ceil_div(p.params * per["optimizer_state"], split), optimizer.value)
        )
        if master:
            static.append(
                Component("master_weights", _ceil_div(p.params * per["master_weights"], split), "fp32 copy")
            )
    if p.kind.is_adapter:
        lora = p.lora
        adapter_params = None
        if lora is not None and lora.params is not None:
            adapter_params = lora.params
        elif need("LoRA adapter size", {"lora.rank": lora.rank if lora else None}):
            targets = lora.target_modules or ("q_proj", "v_proj")
            if not lora.target_modules:
                notes.append(
                    "lora.target_modules not declared: assuming q_proj, v_proj (PEFT's Llama default)"
                )
            try:
                adapter_params = lora_adapter_params(arch, lora.rank, targets)
            except SizingError as exc:
                reasons.append(str(exc))
                missing.extend(m for m in exc.missing if m not in missing)
        if adapter_params is not None:
            aprec = lora.precision if lora else Precision.FP32
            gprec = tr.gradient_precision if tr and tr.gradient_precision else aprec
            master = tr.master_weights if tr and tr.master_weights is not None else aprec != Precision.FP32
            per = training_state_bytes_per_param(aprec, gprec, optimizer, master)
            static.append(
                Component(
                    "adapter",
                    _ceil_div(adapter_params * sum(per.values()), split),
                    f"{adapter_params} params x {sum(per.values())} B",
                )
            )

    # overhead
    if p.kind == Kind.CPU_INFERENCE:
        static.append(Component("runtime_overhead", c.cpu_runtime_overhead_bytes, "host runtime"))
    else:
        static.append(Component("cuda_context", c.cuda_context_bytes, "per process"))
        static.append(Component("runtime_overhead", c.runtime_overhead_bytes, "allocator, workspaces"))

    # variable part: KV cache and activations
    kv_per_token = None
    block = None
    vllm = p.runtime.is_vllm
    hidden = arch.effective_hidden_size
    if p.kind.is_inference:
        need("KV cache", {"context.max": p.context.max})
        kv_heads, hd = arch.effective_kv_heads, arch.effective_head_dim
        if need("KV cache", {"architecture.layers": arch.layers, "architecture.kv_heads": kv_heads,
                             "architecture.head_dim": hd}):  # fmt: skip
            kv_per_token = kv_bytes_per_token(
                _ceil_div(arch.layers, par.pipeline),
                max(1, _ceil_div(kv_heads, par.tensor)),
                hd,
                p.effective_kv_cache_precision,
            )
        need("activations", {"architecture.hidden_size": hidden})
        if arch.intermediate_size is None:
            notes.append("intermediate_size unknown: activations assume 4 x hidden_size")
        if vllm:
            block = p.runtime.block_size or c.vllm_block_size
        if p.concurrency is None:
            notes.append("concurrency not declared: assuming 1 sequence")
    else:
        need("activations", {"architecture.layers": arch.layers, "architecture.hidden_size": hidden,
                             "context.max": p.context.max})  # fmt: skip
        flash = tr.flash_attention if tr else True
        if not flash:
            need("activations without flash attention", {"architecture.heads": arch.heads})
        if arch.vocab_size is None:
            notes.append("vocab_size unknown: logits left out of activations")
        if not (tr and tr.micro_batch):
            notes.append("training.micro_batch not declared: assuming 1")

    if reasons:
        raise SizingError(f"cannot size workload {p.name!r}: " + "; ".join(reasons), tuple(missing))

    def variable(concurrency: int, context: int) -> tuple[Component, ...]:
        if p.kind.is_inference:
            kv = kv_cache_bytes(kv_per_token, context, concurrency, block)
            if p.runtime.max_num_batched_tokens:
                tokens = p.runtime.max_num_batched_tokens
            elif vllm:
                tokens = max(context, c.vllm_min_batched_tokens)
            else:
                tokens = context * concurrency
            # vLLM measures its activation peak once at start-up, independent of the load it then serves
            act = inference_activation_bytes(
                tokens, c.vllm_max_num_seqs if vllm else concurrency, hidden, arch.intermediate_size, par.tensor, compute, arch.vocab_size,
                c.logits_bytes,
            )  # fmt: skip
            return (
                Component(
                    "kv_cache",
                    kv,
                    f"{p.effective_kv_cache_precision.value}, {concurrency} x {context} tokens",
                ),
                Component("activations", act, f"forward pass over {tokens} tokens"),
            )
        act = training_activation_bytes(
            arch.layers, hidden, arch.heads or 1, context, concurrency, par.tensor,
            bool(tr and tr.gradient_checkpointing), tr.flash_attention if tr else True, compute,
            arch.vocab_size, c.logits_bytes,
        )  # fmt: skip
        how = "checkpointed" if tr and tr.gradient_checkpointing else "stored"
        return (Component("activations", act, f"{how}, micro-batch {concurrency} x {context} tokens"),)

    return _Plan(p, c, tuple(static), variable, kv_per_token, block, tuple(notes))


def _needed(plan: _Plan, concurrency: int, context: int) -> int:
    return sum(x.bytes for x in plan.static) + sum(x.bytes for x in plan.variable(concurrency, context))


def _largest(fits: Callable[[int], bool]) -> int:
    """The largest n >= 0 with fits(n), for fits monotonic non-increasing in truth; 0 when fits(1) fails."""
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi < _SEARCH_LIMIT and fits(hi):
        lo, hi = hi, hi * 2
    if hi >= _SEARCH_LIMIT and fits(hi):
        return hi
    while hi - lo > 1:  # fits(lo) and not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def estimate(
    profile: WorkloadProfile,
    gpu_memory_bytes: int | None = None,
    gpus: int | None = None,
    overhead: OverheadConstants = DEFAULTS,
) -> Estimate:
    """Return the per-GPU memory estimate of ``profile`` and what fits in ``gpu_memory_bytes`` per GPU.

    ``gpu_memory_bytes`` is the memory of one GPU (for cpu-inference: the host RAM budget); ``gpus`` the
    number of GPUs the workload has (default: len(profile.gpus) when listed). The estimate assumes the
    declared concurrency (inference) or training.micro_batch at context.max, 1 when not declared.
    Raises SizingError when inputs a component needs are missing.
    """
    p = profile
    plan = _plan(p, overhead)
    if p.kind.is_inference:
        concurrency, label = p.concurrency or 1, "concurrent sequences"
    else:
        concurrency, label = (
            (p.training.micro_batch if p.training and p.training.micro_batch else 1),
            "micro-batch",
        )
    context = p.context.max
    components = plan.static + plan.variable(concurrency, context)
    order = ("weights", "kv_cache", "gradients", "optimizer_state", "master_weights", "adapter", "activations",
             "cuda_context", "runtime_overhead")  # fmt: skip
    components = tuple(sorted(components, key=lambda x: order.index(x.name)))
    needed = sum(x.bytes for x in components)
    notes = list(plan.notes)

    available = gpus if gpus is not None else (len(p.gpus) if p.gpus else None)
    gpus_needed = p.parallel.gpus if p.kind != Kind.CPU_INFERENCE else 0
    reservation = None
    budget = gpu_memory_bytes
    if p.runtime.is_vllm and p.kind == Kind.INFERENCE:
        util = p.runtime.gpu_memory_utilization or overhead.vllm_gpu_memory_utilization
        if gpu_memory_bytes is not None:
            reservation = int(gpu_memory_bytes * util)
            budget = reservation
        else:
            notes.append("GPU memory unknown: the vLLM reservation cannot be computed")
    expected = reservation if reservation is not None else needed

    fits = margin = max_conc = max_ctx = kv_capacity = None
    if budget is not None:
        margin = budget - needed
        fits = margin >= 0
        if available is not None and available < gpus_needed:
            fits = False
            notes.append(f"needs {gpus_needed} GPUs (tensor x pipeline x data) but has {available}")
        max_conc = _largest(lambda n: _needed(plan, n, context) <= budget)
        max_ctx = _largest(lambda s: _needed(plan, concurrency, s) <= budget)
        if plan.kv_per_token:
            free = budget - _needed(plan, 0, context)
            unit = plan.kv_per_token * (plan.block_size or 1)
            kv_capacity = max(free, 0) // unit * (plan.block_size or 1)

    return Estimate(
        profile=p.name, kind=p.kind.value, components=components, needed_bytes=needed, gpus_needed=gpus_needed,
        gpus_available=available, gpu_memory_bytes=gpu_memory_bytes, budget_bytes=budget,
        vllm_reservation_bytes=reservation, expected_usage_bytes=expected, fits=fits, margin_bytes=margin,
        concurrency=concurrency, context=context, concurrency_label=label,
        max_concurrency_at_max_context=max_conc, max_context_at_concurrency=max_ctx,
        kv_bytes_per_token=plan.kv_per_token, kv_capacity_tokens=kv_capacity, notes=tuple(notes),
    )  # fmt: skip


def with_load(
    profile: WorkloadProfile, concurrency: int | None = None, context: int | None = None
) -> WorkloadProfile:
    """A copy of ``profile`` with another concurrency (or micro-batch for training kinds) and/or context.max."""
    p = profile
    if context is not None:
        p = replace(p, context=replace(p.context, max=context))
    if concurrency is not None:
        if p.kind.is_inference:
            p = replace(p, concurrency=concurrency)
        else:
            p = replace(p, training=replace(p.training or Training(), micro_batch=concurrency))
    return p


# --------------------------------------------------------------------------------------- printing
def format_table(e: Estimate) -> str:
    """A readable per-GPU breakdown: component, bytes, GiB (2 decimals), share %, then verdict lines."""
    rows = [("component", "bytes", "GiB", "share", "")]
    for x in e.components:
        share = f"{100 * x.bytes / e.needed_bytes:.1f}%" if e.needed_bytes else "-"
        rows.append((x.name, f"{x.bytes:,}".replace(",", " "), f"{x.bytes / GIB:.2f}", share, x.note))
    rows.append(
        (
            "total per GPU",
            f"{e.needed_bytes:,}".replace(",", " "),
            f"{e.needed_bytes / GIB:.2f}",
            "100.0%",
            "",
        )
    )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for i, r in enumerate(rows):
        cells = [r[0].ljust(widths[0])] + [r[k].rjust(widths[k]) for k in (1, 2, 3)]
        lines.append(("  ".join(cells) + ("  " + r[4] if r[4] else "")).rstrip())
        if i == 0 or i == len(rows) - 2:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    where = f"{e.gpus_needed} GPU(s)" if e.gpus_needed else "host RAM"
    lines.append(
        f"workload {e.profile} ({e.kind}): {e.concurrency} {e.concurrency_label} x {e.context} tokens, {where}"
    )
    if e.vllm_reservation_bytes is not None:
        lines.append(f"vLLM reserves {format_bytes(e.vllm_reservation_bytes)} of {format_bytes(e.gpu_memory_bytes)} "
                     f"per GPU (gpu_memory_utilization); that is the expected GPU memory use")  # fmt: skip
    if e.fits is None:
        lines.append("fits: unknown (GPU memory not given)")
    elif e.fits:
        lines.append(
            f"fits: yes, {format_bytes(e.margin_bytes)} to spare per GPU of {format_bytes(e.budget_bytes)}"
        )
    elif e.margin_bytes is not None and e.margin_bytes < 0:
        lines.append(
            f"does not fit: short by {format_bytes(-e.margin_bytes)} per GPU of {format_bytes(e.budget_bytes)}"
        )
    else:
        lines.append("does not fit")
    if e.max_concurrency_at_max_context is not None:
        lines.append(
            f"largest {e.concurrency_label} at {e.context} tokens: {e.max_concurrency_at_max_context}"
        )
        lines.append(
            f"largest context at {e.concurrency} {e.concurrency_label}: {e.max_context_at_concurrency} tokens"
        )
    if e.kv_capacity_tokens is not None:
        lines.append(
            f"KV cache capacity: {e.kv_capacity_tokens} tokens ({e.kv_bytes_per_token} B/token per GPU)"
        )
    lines.extend(f"note: {n}" for n in e.notes)
    return "\n".join(lines)


__all__ = [
    "DEFAULTS",
    "Component",
    "Estimate",
    "OverheadConstants",
    "SizingError",
    "dense_bytes",
    "estimate",
    "format_table",
    "inference_activation_bytes",
    "kv_bytes_per_token",
    "kv_cache_bytes",
    "lora_adapter_params",
    "training_activation_bytes",
    "training_state_bytes_per_param",
    "weight_bytes",
    "with_load",
]
