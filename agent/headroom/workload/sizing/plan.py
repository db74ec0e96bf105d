"""Memory model: how many bytes a declared workload needs per GPU, and how much load fits.

Pure functions over ``headroom.workload.profiles.WorkloadProfile``; bytes are ints; nothing reads the host.
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
               gradient checkpointing, plus FP32 logits; inference: one decoder layer's live set over
               the batched-token budget (chunked prefill), not concurrency x context.
- overhead     CUDA context and runtime overhead per GPU (OverheadConstants, configurable).
- runtimes     vLLM (per version), SGLang, TGI: their own start-up accounting (serving_memory): budget,
               weights, profile-run activation peak, non-torch memory, KV blocks, KV tokens and the
               fractional maximum concurrency they print.
- sharding     ZeRO 1-3 / FSDP over the data-parallel ranks, optimizer and parameter offload.

``estimate(profile, gpu_memory_bytes, gpus)`` returns an ``Estimate``: per-GPU components, whether it
fits, the margin, the largest concurrency at max context and the largest context at the declared
concurrency. Missing inputs raise ``SizingError`` naming all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from headroom.units import GIB, format_bytes
from headroom.workload.profiles import (
    LORA_ALL_LINEAR,
    Architecture,
    Kind,
    Optimizer,
    Precision,
    Quantization,
    QuantizationSpec,
    Sharding,
    StateKind,
    Training,
    WorkloadProfile,
)
from headroom.workload.serving_memory import (
    KVLayout,
    RuntimeReport,
    RuntimeSettingError,
    StateGroup,
    kv_layout,
    sglang_chunked_prefill,
    sglang_mem_fraction,
    state_bytes,
    tgi_rules,
    vllm_defaults,
    vllm_kv,
    vllm_request_bytes,
    vllm_rules,
    vllm_state_block_size,
)

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
    # runtime accounting (docs/sizing.md "Runtime accounting": the evidence for each value)
    vllm_cuda_context_bytes: int = 330 * MIB  # non-torch memory present before the worker's first snapshot
    vllm_non_torch_bytes: int = 32 * MIB  # non-torch growth during load and profile at TP 1 (cuBLAS workspace)
    nccl_bytes: int = 512 * MIB  # NCCL and custom all-reduce buffers per GPU at tensor parallel > 1
    cuda_graph_bytes: int = 512 * MIB  # graph pools captured after the KV cache is sized (outside the budget)
    # the profile run's sampler over max_num_seqs x vocabulary logits, bytes live per logit: sorted top-k/top-p
    # (vLLM 0.5-0.16) and in-place Triton top-k/top-p (0.17+); docs/sizing.md "Runtime accounting"
    sampler_bytes_per_logit: int = 39
    sampler_triton_bytes_per_logit: int = 15
    vllm_recent_non_torch_bytes: int = 256 * MIB  # non-torch growth at TP 1 measured with vLLM 0.18-0.19
    vllm_recent_comm_bytes: int = 1894 * MIB  # its growth at tensor parallel > 1 (0.19: 2.07-2.13 GiB in all)
    tgi_max_batch_prefill_tokens: int = 4096  # TGI's default warm-up prefill
    tgi_logit_bytes: int = 2  # the warm-up prefill's 16-bit logits over every prefill token (prefill_logprobs)
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
    max_concurrency: float | None = None  # the runtime's "Maximum concurrency for N tokens per request" (x)
    runtime_report: dict[str, Any] | None = None  # serving_memory.RuntimeReport.to_dict(): the runtime's own figures
    parallel: tuple[int, int, int] = (1, 1, 1)  # tensor, pipeline, data: the layout gpus_needed comes from

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
    quantized = max(params - unquantized_params, 0)
    data = dense_bytes(quantized, precision)
    if method == Quantization.NONE:  # plain fp8 / int8 checkpoints (per-tensor or per-channel scales only)
        return data + dense_bytes(min(unquantized_params, params), unquantized_precision)
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

    The largest live set of one decoder layer is at the MLP's down projection: the residual, the normed
    input and the down projection's output (3 x hidden) plus the gate/up output and its activated
    product (3 x intermediate / tensor) per token, in the compute precision; plus FP32 logits for the
    last token of each sequence. intermediate defaults to 4 x hidden. Checked against vLLM's measured
    profile peaks (docs/sizing.md: 2.07 and 2.99 GiB for Llama 3.1 8B at 20 000 and 29 000 tokens).
    """
    ffn = intermediate if intermediate is not None else 4 * hidden
    per_token = 3 * hidden + _ceil_div(3 * ffn, tensor)
    logits = sequences * vocab * logits_bytes if vocab else 0
    return dense_bytes(tokens * per_token, compute) + logits


# ------------------------------------------------------------------------------ ZeRO / FSDP
def _largest_layer_params(arch: Architecture, params: int) -> int:
    """Parameters of the largest single module (what ZeRO-3 / FSDP gathers at once): the embedding or LM
    head, or the largest linear layer; params / layers when the shapes are unknown."""
    h = arch.effective_hidden_size
    sizes = []
    if h is not None:
        if arch.vocab_size:
            sizes.append(arch.vocab_size * h)
        if arch.intermediate_size:
            sizes.append(h * arch.intermediate_size)
        if arch.heads and arch.effective_head_dim:
            sizes.append(h * arch.heads * arch.effective_head_dim)
    if sizes:
        return max(sizes)
    return params // arch.layers if arch.layers else 0


def sharded_training_state(params: int, per: dict[str, int], data: int, split: int, tr: Training | None,
                           wprec: Precision, gprec: Precision, optimizer: Optimizer, largest_layer: int,
                           notes: list[str]) -> list[Component]:  # fmt: skip
    """Per-GPU weights, gradients, optimizer state and master weights under ZeRO 1-3 / FSDP over ``data``
    ranks (after the tensor x pipeline ``split``), with optimizer (and parameter) offload to host memory.

    ZeRO-1 shards optimizer state and master weights, ZeRO-2 also gradients, ZeRO-3 / FSDP full shard also
    the weights, which are gathered one module at a time: 2 x the largest module's 16-bit weights stay
    resident (current and prefetched; DeepSpeed's estimator counts the same 4 B x largest layer).
    Optimizer offload moves optimizer state, master weights and gradient partitions to host memory.
    """
    sharding = tr.sharding if tr else Sharding.NONE
    stage = sharding.stage
    offload_opt = bool(tr and tr.offload_optimizer)
    offload_params = bool(tr and tr.offload_params)

    def part(key: str, from_stage: int) -> int:
        total = _ceil_div(params * per[key], split)
        return _ceil_div(total, data) if stage >= from_stage else total

    out = []
    host = 0
    weights = part("weights", 3)
    if stage == 3:
        gathered = 2 * largest_layer * per["weights"]
        if offload_params:
            host += weights
            weights = 0
        out.append(Component("weights", weights + gathered, f"{wprec.value}, sharded over {data} + "
                                                            f"{format_bytes(gathered)} gathered"))  # fmt: skip
    else:
        out.append(Component("weights", weights, wprec.value))
    grads = part("gradients", 2)
    opt, mw = part("optimizer_state", 1), part("master_weights", 1)
    if offload_opt:  # ZeRO-Offload: gradient partitions go to the host optimizer as they are reduced
        host += opt + mw + grads
        opt = mw = grads = 0
    out.append(Component("gradients", grads, gprec.value + (" (offloaded)" if offload_opt else
                                                            f", / {data}" if stage >= 2 else "")))  # fmt: skip
    out.append(Component("optimizer_state", opt, optimizer.value + (" (offloaded)" if offload_opt else
                                                                  f", / {data}" if stage >= 1 else "")))  # fmt: skip
    if per["master_weights"]:
        out.append(Component("master_weights", mw, "fp32 copy" + (" (offloaded)" if offload_opt else "")))
    if stage and data == 1:
        notes.append(f"sharding {sharding.value} over data parallel 1 shards nothing: set parallel.data")
    if host:
        notes.append(f"host memory per rank for offloaded state: {format_bytes(host)}")
    return out


# ------------------------------------------------------------------------- inference helpers
_RUNTIMES = ("vllm", "sglang", "tgi")  # runtimes whose own start-up accounting is modelled


def architecture_params(arch: Architecture) -> int | None:
    """Parameters implied by a Llama-style architecture (attention, gated MLP or all experts, norms,
    embeddings); None when a dimension is missing or the layout is MLA (give params then)."""
    h, hd, heads, kv = arch.effective_hidden_size, arch.effective_head_dim, arch.heads, arch.effective_kv_heads
    if None in (arch.layers, h, hd, heads, kv, arch.vocab_size) or arch.kv_lora_rank is not None:
        return None
    attn = h * heads * hd * 2 + 2 * h * kv * hd
    if arch.experts:
        mlp = arch.experts * (3 * h * arch.moe_intermediate_size + h)
    elif arch.intermediate_size is not None:
        mlp = 3 * h * arch.intermediate_size
    else:
        return None
    return arch.layers * (attn + mlp + 2 * h) + h + arch.vocab_size * h * (1 if arch.tie_embeddings else 2)


def _ffn_per_token(arch: Architecture, tensor: int) -> int | None:
    """The MLP width a token passes through: the dense intermediate, or experts_per_token x expert width
    plus the expert outputs before they are summed (fused MoE); None when unknown (4 x hidden assumed)."""
    dense = arch.intermediate_size
    if arch.experts and arch.moe_intermediate_size:
        k = arch.experts_per_token or 1
        moe = k * arch.moe_intermediate_size + _ceil_div(k * (arch.effective_hidden_size or 0) * tensor, 3)
        return max(dense or 0, moe)
    return dense


def _assumed_hidden(p: WorkloadProfile, notes: list[str]) -> int | None:
    """hidden_size when neither it nor heads x head_dim is given: ~sqrt(params / (12 x layers)) (a dense
    transformer has ~12 h^2 parameters per layer), rounded to a multiple of 128, stated as an assumption."""
    arch = p.architecture
    if p.params is None or not arch.layers:
        return None
    h = max(128, round((p.params / (12 * arch.layers)) ** 0.5 / 128) * 128)
    notes.append(f"hidden_size not given: assuming {h} (~sqrt(params / (12 x layers))) for activations only")
    return h


def _kv_layout(p: WorkloadProfile, rt: str | None, notes: list[str], need: Callable[..., bool]) -> KVLayout | None:
    arch, par = p.architecture, p.parallel
    mla = arch.kv_lora_rank is not None
    kv_heads, hd = arch.effective_kv_heads, arch.effective_head_dim
    fields: dict[str, Any] = {"architecture.layers": arch.layers}
    if not mla:
        fields |= {"architecture.kv_heads": kv_heads, "architecture.head_dim": hd}
    if not need("KV cache", fields):
        return None
    bits = p.effective_kv_cache_precision.bits
    replicate, align = "ceil", 1
    mla_width = arch.kv_lora_rank + arch.qk_rope_head_dim if mla else None
    sliding = arch.sliding_window
    if rt == "vllm":
        rules, _ = vllm_rules(p.runtime.version)
        replicate, align = "floor", rules.mla_align_bytes
        hybrid = arch.state_kind is not None or (arch.kv_layers is not None and arch.kv_layers < arch.layers)
        if hybrid and arch.state_kind is None:
            raise SizingError(f"cannot size workload {p.name!r} for vLLM: hybrid layout (only {arch.kv_layers} of "
                              f"{arch.layers} layers hold a KV cache, the rest keep recurrent state) without the "
                              "state's shape: give architecture.state_kind and its state_* fields (docs/sizing.md "
                              "\"KV layouts\"), or drop runtime vllm for the plain estimate",
                              ("architecture.state_kind",))  # fmt: skip
        if hybrid and not rules.state_pages:
            raise SizingError(f"cannot size workload {p.name!r} for vLLM {rules.name}: hybrid layout (attention + "
                              f"{arch.state_kind.value} layers): this version's state pages were not read (modelled "
                              "from vLLM 0.32); give --runtime-version 0.32 or later, or drop runtime vllm",
                              ("runtime.version",))  # fmt: skip
        if hybrid and (sliding or mla or arch.kv_layers == 0):
            what = "sliding-window" if sliding else "MLA" if mla else "no attention"
            raise SizingError(f"cannot size workload {p.name!r} for vLLM: a {arch.state_kind.value} hybrid with "
                              f"{what} layers is not modelled (only full attention + one recurrent state kind)",
                              ("architecture.state_kind",))  # fmt: skip
        if mla and not rules.mla_latent:  # V0 before 0.7 cached DeepSeek's K/V in full, head size padded to 256
            mla_width, hd, kv_heads = None, 256, kv_heads or arch.heads
            notes.append(f"vLLM {rules.name} caches MLA models as full K/V (head size 256), not the latent")
        if sliding and not rules.hybrid_groups:
            notes.append(f"vLLM {rules.name} allocates sliding-window layers like full-attention ones")
            sliding = None
    elif rt in ("sglang", "tgi") and (sliding or arch.state_kind is not None or
                                      (arch.kv_layers is not None and arch.kv_layers < arch.layers)):  # fmt: skip
        if arch.state_kind is not None or (arch.kv_layers is not None and arch.kv_layers < arch.layers):
            raise SizingError(f"cannot size workload {p.name!r} for {rt}: hybrid layout (attention + recurrent "
                              "layers) is not modelled for this runtime", ("architecture.kv_layers",))  # fmt: skip
        notes.append(f"{rt}: sliding-window layers counted like full-attention ones")
        sliding = None
    layout = kv_layout(arch.layers, kv_heads or 1, hd or 0, bits, par.tensor, par.pipeline, sliding,
                       arch.sliding_window_layers, arch.kv_layers, mla_width, replicate, align)  # fmt: skip
    if arch.state_kind is not None and arch.effective_state_layers:
        layout = _with_state(p, layout, rt)
    elif arch.kv_layers is not None and arch.kv_layers < (arch.layers or 0):
        notes.append("recurrent state of the non-attention layers not counted (architecture.state_kind not given)")
    if mla_width or sliding or arch.kv_layers is not None or layout.state:
        notes.append(f"KV layout: {layout.description}")
    return layout


def _with_state(p: WorkloadProfile, layout: KVLayout, rt: str | None) -> KVLayout:
    """``layout`` plus the recurrent state of a hybrid model's Mamba / gated-delta-net layers: conv state in the
    model's dtype (vLLM's mamba_cache_dtype "auto"), SSM state in ``state_precision`` else the same."""
    a, par = p.architecture, p.parallel
    conv_bits = p.effective_compute_precision.bits
    ssm_bits = a.state_precision.bits if a.state_precision else conv_bits
    per = state_bytes(a.state_kind.value, par.tensor, a.state_conv_dim, a.state_conv_kernel, a.state_groups or 0,
                      a.state_heads, a.state_head_dim, a.state_size, conv_bits, ssm_bits)  # fmt: skip
    # vLLM 0.32 enables prefix caching for hybrid models (config/model.py:2259-2261), so Mamba layers run in
    # "align" mode (model_executor/models/config.py:685-687): 2 blocks per request (v1/kv_cache_interface.py:1076-
    # 1080) plus Mamba2's prefill checkpoint (model_executor/layers/mamba/mamba_mixer2.py:1098-1107)
    blocks = 3 if a.state_kind == StateKind.MAMBA2 else 2
    state = StateGroup(_ceil_div(a.effective_state_layers, par.pipeline), per, blocks)
    desc = f"{layout.description}; {state.layers} {a.state_kind.value} layers with a {per}-byte state per sequence"
    return replace(layout, state=state, description=desc)


def _runtime_non_torch(p: WorkloadProfile, rt: str, c: OverheadConstants) -> tuple[int, str]:
    """Non-torch memory the runtime subtracts inside its budget: (bytes, what it is)."""
    context, recent = True, False
    if rt == "vllm":
        rules, _ = vllm_rules(p.runtime.version)
        context, recent = rules.counts_cuda_context, rules.large_comm_buffers
    total = (c.vllm_recent_non_torch_bytes if recent else c.vllm_non_torch_bytes) + \
        (c.vllm_cuda_context_bytes if context else 0)
    what = ["CUDA context"] if context else []
    what.append("cuBLAS workspace")
    if p.parallel.tensor > 1 or p.parallel.pipeline > 1:
        total += c.vllm_recent_comm_bytes if recent and p.parallel.tensor > 1 else c.nccl_bytes
        what.append("NCCL/all-reduce buffers")
    return total, ", ".join(what) + " (counted by the runtime)"


def _vllm_mla_absorbed_bytes(p: WorkloadProfile, rt: str | None, compute: Precision, wprec: Precision | None) -> int:
    """vLLM 0.7's MLA matrix absorption (attention/backends/mla/utils.py:297-380, on by default): per layer and
    rank, W_Q x W_UK (q_in x heads x kv_lora_rank), W_UV x W_O (heads x kv_lora_rank x hidden) and W_QR
    (q_in x heads x qk_rope_head_dim), kept next to the loaded weights in the activation dtype (FP8 weights
    are requantized to FP8); q_in is q_lora_rank, else hidden_size."""
    a = p.architecture
    if rt != "vllm" or not (a.kv_lora_rank and a.qk_rope_head_dim and a.heads and a.layers):
        return 0
    rules, _ = vllm_rules(p.runtime.version)
    h = a.effective_hidden_size
    if not rules.mla_absorbed_weights or h is None:
        return 0
    heads = _ceil_div(a.heads, p.parallel.tensor)
    q_in = a.q_lora_rank or h
    elements = q_in * heads * a.kv_lora_rank + heads * a.kv_lora_rank * h + q_in * heads * a.qk_rope_head_dim
    per = 1 if wprec == Precision.FP8 else compute.bits // 8
    return _ceil_div(a.layers, p.parallel.pipeline) * elements * per


def _sampler_bytes_per_logit(p: WorkloadProfile, rt: str | None, c: OverheadConstants) -> int:
    """Bytes the runtime's sampler holds per logit at its peak (vLLM's profile run: docs/sizing.md)."""
    if rt != "vllm":
        return c.logits_bytes
    rules, _ = vllm_rules(p.runtime.version)
    return c.sampler_triton_bytes_per_logit if rules.triton_sampler else c.sampler_bytes_per_logit


def _tgi_warmup_logits_bytes(p: WorkloadProfile, tokens: int, vocab: int, c: OverheadConstants) -> int:
    """TGI's warm-up prefill returns logprobs of every prompt token: the logits gathered over the vocabulary,
    the local shard (tensor parallel) and, before 2.4, the log-softmax's copy (docs/sizing.md "TGI")."""
    rules, _ = tgi_rules(p.runtime.version)
    logits = tokens * vocab * c.tgi_logit_bytes
    shard = _ceil_div(logits, p.parallel.tensor) if p.parallel.tensor > 1 else 0
    return logits * (1 if rules.logits_in_place else 2) + shard


def _activation_tokens(p: WorkloadProfile, c: OverheadConstants, rt: str | None, concurrency: int, context: int,
                       device_memory: int, device_name: str = "") -> tuple[int, int, str]:  # fmt: skip
    """(tokens in one forward pass, sequences whose logits are sampled, why): the batched-token budget of
    chunked prefill, not concurrency x context."""
    r = p.runtime
    if rt == "vllm":
        rules, _ = vllm_rules(r.version)
        d_tokens, d_seqs, why = vllm_defaults(rules, p.context.max or context, device_memory, device_name)
        tokens = r.max_num_batched_tokens or d_tokens
        seqs = min(r.max_num_seqs or d_seqs, tokens)
        return tokens, seqs, "max_num_batched_tokens" if r.max_num_batched_tokens else why
    if rt == "sglang":
        return r.max_num_batched_tokens or sglang_chunked_prefill(device_memory, r.version), 0, "chunked_prefill_size"
    if rt == "tgi":
        return r.max_num_batched_tokens or c.tgi_max_batch_prefill_tokens, 0, "max_batch_prefill_tokens"
    if r.max_num_batched_tokens:
        return r.max_num_batched_tokens, concurrency, "max_num_batched_tokens"
    if not p.kind.has_kv_cache:  # embedding: every request in one batch
        return context * concurrency, 0, f"{concurrency} x {context} tokens per batch"
    return context, concurrency, "one sequence prefilled at a time; set max_num_batched_tokens for chunked prefill"


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
    layout: KVLayout | None = None  # the KV cache per GPU, by groups of layers
    runtime: str | None = None  # vllm, sglang or tgi when its own accounting applies
    device_name: str = ""  # the GPU model, where a runtime's defaults depend on it


def _plan(p: WorkloadProfile, c: OverheadConstants, device_memory: int = 0, device_name: str = "") -> _Plan:
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
    params = p.params
    if params is None and wprec is not None:
        params = architecture_params(arch)
        if params is not None:
            notes.append(f"params not given: {params} derived from the architecture")
    if need("weights", {"params": params, "precision": wprec}):
        unquantized = 0
        if quant.method != Quantization.NONE or wprec.bits < compute.bits:  # embeddings stay 16-bit
            h, v = arch.effective_hidden_size, arch.vocab_size
            if h is not None and v is not None:
                unquantized = v * h * (1 if arch.tie_embeddings else 2)
                # vLLM quantizes LinearBase layers and routed experts only (0.32 quantization/fp8.py:177-208):
                # the norms (two per layer and the final one) stay in the model's dtype as well
                unquantized += (2 * (arch.layers or 0) + 1) * h
            else:
                notes.append(
                    "vocab_size or hidden_size unknown: embeddings counted as quantized (lower bound)"
                )
        total = weight_bytes(params, wprec, quant, unquantized, compute, c)
        label = wprec.value if quant.method == Quantization.NONE else f"{quant.method.value} {wprec.value}"
        if p.weight_bytes is not None and p.kind != Kind.FINETUNE_QLORA:  # the checkpoint's own tensor bytes
            total, label = p.weight_bytes, label + ", as stored"
        if p.kind.is_adapter:
            label += ", frozen"
        per_gpu = _ceil_div(total, split)
        serving = p.runtime.name if p.kind == Kind.INFERENCE else None
        absorbed = _vllm_mla_absorbed_bytes(p, serving, compute, wprec)
        if absorbed:
            per_gpu += absorbed
            label += f", + {format_bytes(absorbed)} of MLA-absorbed matrices (vLLM 0.7)"
        static.append(Component("weights", per_gpu, label))

    # training state
    tr = p.training
    optimizer = tr.optimizer if tr and tr.optimizer else Optimizer.ADAMW
    if (p.kind.is_full_training or p.kind.is_adapter) and not (tr and tr.optimizer):
        notes.append("training.optimizer not declared: assuming adamw")
    if p.kind.is_full_training and params is not None and wprec is not None:
        gprec = tr.gradient_precision if tr and tr.gradient_precision else wprec
        master = tr.master_weights if tr and tr.master_weights is not None else wprec not in (Precision.FP32,)
        per = training_state_bytes_per_param(wprec, gprec, optimizer, master)
        static[:] = [x for x in static if x.name != "weights"]
        static.extend(sharded_training_state(params, per, par.data, split, tr, wprec, gprec, optimizer,
                                             _largest_layer_params(arch, params), notes))  # fmt: skip
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

    # overhead: a serving runtime's own accounting replaces the generic allowances (serving_memory)
    rt = p.runtime.name if p.kind == Kind.INFERENCE and p.runtime.name in _RUNTIMES else None
    if p.kind == Kind.CPU_INFERENCE:
        static.append(Component("runtime_overhead", c.cpu_runtime_overhead_bytes, "host runtime"))
    elif rt is None:
        static.append(Component("cuda_context", c.cuda_context_bytes, "per process"))
        static.append(Component("runtime_overhead", c.runtime_overhead_bytes, "allocator, workspaces"))
    else:
        counted, parts = _runtime_non_torch(p, rt, c)
        static.append(Component("non_torch", counted, parts))

    # variable part: KV cache and activations
    layout = None
    block = None
    hidden = arch.effective_hidden_size
    if p.kind.is_inference:
        if p.kind.has_kv_cache:
            need("KV cache", {"context.max": p.context.max})
            layout = _kv_layout(p, rt, notes, need)
        elif p.context.max is None:
            need("activations", {"context.max": p.context.max})
        if hidden is None:
            hidden = _assumed_hidden(p, notes)
        if hidden is None:
            notes.append("activations left out: hidden_size unknown (give hidden_size, or heads with head_dim, "
                         "or params with layers)")  # fmt: skip
        elif arch.intermediate_size is None and arch.moe_intermediate_size is None:
            notes.append("intermediate_size unknown: activations assume 4 x hidden_size")
        if rt == "vllm":
            block = p.runtime.block_size or c.vllm_block_size
            if layout is not None and layout.state is not None:
                block = vllm_state_block_size(layout, block)
                notes.append(f"vLLM: attention block of {block} tokens, so that one attention page holds a "
                             f"{layout.state.bytes_per_sequence}-byte recurrent state (padded to it); prefix caching "
                             f"on (the default for hybrid models): {layout.state.blocks_per_request} state blocks per "
                             "request")  # fmt: skip
        elif rt == "tgi":
            block = p.runtime.block_size or tgi_rules(p.runtime.version)[0].block_size
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

    ffn = _ffn_per_token(arch, par.tensor)

    def variable(concurrency: int, context: int) -> tuple[Component, ...]:
        if p.kind.is_inference:
            out = []
            if layout is not None and rt == "vllm":
                rules, _ = vllm_rules(p.runtime.version)
                batched = _activation_tokens(p, c, rt, concurrency, context, device_memory, device_name)[0]
                kv = vllm_request_bytes(rules, layout, block, context, batched) * concurrency
            elif layout is not None:
                kv = layout.sequence_bytes(context, block) * concurrency
            if layout is not None:
                out.append(Component("kv_cache", kv, f"{p.effective_kv_cache_precision.value}, {concurrency} x "
                                                     f"{context} tokens"))  # fmt: skip
            if hidden is not None:
                tokens, seqs, how = _activation_tokens(p, c, rt, concurrency, context, device_memory, device_name)
                forward = inference_activation_bytes(tokens, 0, hidden, ffn, par.tensor, compute)
                sampler = seqs * (arch.vocab_size or 0) * _sampler_bytes_per_logit(p, rt, c)
                if rt == "tgi":  # the warm-up asks for prefill logprobs: logits of every prefill token
                    seqs, sampler = tokens, _tgi_warmup_logits_bytes(p, tokens, arch.vocab_size or 0, c)
                out.append(Component("activations", max(forward, sampler),
                                     f"forward pass over {tokens} tokens ({how})" if forward >= sampler
                                     else f"sampler over {seqs} x {arch.vocab_size} logits"))  # fmt: skip
            return tuple(out)
        act = training_activation_bytes(
            arch.layers, hidden, arch.heads or 1, context, concurrency, par.tensor,
            bool(tr and tr.gradient_checkpointing), tr.flash_attention if tr else True, compute,
            arch.vocab_size, c.logits_bytes,
        )  # fmt: skip
        how = "checkpointed" if tr and tr.gradient_checkpointing else "stored"
        return (Component("activations", act, f"{how}, micro-batch {concurrency} x {context} tokens"),)

    return _Plan(p, c, tuple(static), variable, layout.bytes_per_token if layout else None, block, tuple(notes),
                 layout, rt, device_name)  # fmt: skip


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
    gpu_name: str | None = None,
) -> Estimate:
    """Return the per-GPU memory estimate of ``profile`` and what fits in ``gpu_memory_bytes`` per GPU.

    ``gpu_memory_bytes`` is the memory of one GPU (for cpu-inference: the host RAM budget); ``gpus`` the
    number of GPUs the workload has (default: len(profile.gpus) when listed). The estimate assumes the
    declared concurrency (inference) or training.micro_batch at context.max, 1 when not declared.
    Raises SizingError when inputs a component needs are missing.
    """
    try:
        return _estimate(profile, gpu_memory_bytes, gpus, overhead, gpu_name or "")
    except RuntimeSettingError as exc:
        raise SizingError(f"cannot size workload {profile.name!r}: {exc}", (exc.field,)) from None


def _estimate(p: WorkloadProfile, gpu_memory_bytes: int | None, gpus: int | None, overhead: OverheadConstants,
              gpu_name: str) -> Estimate:  # fmt: skip
    plan = _plan(p, overhead, gpu_memory_bytes or 0, gpu_name)
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
             "non_torch", "cuda_context", "runtime_overhead")  # fmt: skip
    components = tuple(sorted(components, key=lambda x: order.index(x.name)))
    needed = sum(x.bytes for x in components)
    notes = list(plan.notes)

    available = gpus if gpus is not None else (len(p.gpus) if p.gpus else None)
    gpus_needed = p.parallel.gpus if p.kind != Kind.CPU_INFERENCE else 0
    reservation = None
    budget = gpu_memory_bytes
    report = None
    if plan.runtime == "vllm":
        util = p.runtime.gpu_memory_utilization or overhead.vllm_gpu_memory_utilization
        if gpu_memory_bytes is not None:
            reservation = int(gpu_memory_bytes * util)
            budget = reservation
        else:
            notes.append("GPU memory unknown: the vLLM reservation cannot be computed")
    if plan.runtime and gpu_memory_bytes is not None and plan.layout is not None:
        report = _runtime_report(plan, components, gpu_memory_bytes, context, overhead)
        notes.extend(report.notes)
    elif p.kind == Kind.CPU_INFERENCE and p.runtime.is_vllm and plan.layout is not None:
        report = _vllm_cpu_report(p, plan.layout, context, overhead)
        if report is None:
            notes.append("vLLM's CPU build sizes its KV cache from --kv-cache-memory-bytes or VLLM_CPU_KVCACHE_SPACE, "
                         "else from the host's memory less its own resident size at start-up (not modelled): give "
                         "runtime.kv_cache_memory_bytes (--kv-cache-memory) for its capacity")  # fmt: skip
        else:
            notes.extend(report.notes)
    expected = reservation if reservation is not None else needed

    fits = margin = max_conc = max_ctx = kv_capacity = None
    if budget is not None:
        margin = budget - needed
        fits = margin >= 0
        if available is not None and available < gpus_needed:
            fits = False  # the decisive problem: format_table / fit_lines say it first
        max_conc = _largest(lambda n: _needed(plan, n, context) <= budget)
        max_ctx = _largest(lambda s: _needed(plan, concurrency, s) <= budget)
        if report is not None:
            kv_capacity = report.kv_tokens
            if report.max_concurrency < concurrency:
                notes.append(f"{report.runtime} reports a maximum concurrency of {report.max_concurrency:.2f} for "
                             f"{context} tokens, below the {concurrency} sequences declared")  # fmt: skip
        elif plan.kv_per_token:
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
        max_concurrency=report.max_concurrency if report else None, runtime_report=report.to_dict() if report else None,
        parallel=(p.parallel.tensor, p.parallel.pipeline, p.parallel.data),
    )  # fmt: skip


def _runtime_report(plan: _Plan, components: tuple[Component, ...], total: int, max_model_len: int,
                    c: OverheadConstants) -> RuntimeReport:  # fmt: skip
    """The runtime's own start-up figures (docs/sizing.md, "Runtime accounting")."""
    p, layout = plan.profile, plan.layout
    get = {x.name: x.bytes for x in components}
    weights, act, non_torch = get.get("weights", 0), get.get("activations", 0), get.get("non_torch", 0)
    notes: list[str] = []
    if plan.runtime == "vllm":
        rules, note = vllm_rules(p.runtime.version)
        if note:
            notes.append(note)
        budget = int(total * (p.runtime.gpu_memory_utilization or c.vllm_gpu_memory_utilization))
        available = budget - weights - act - non_torch
        if p.runtime.kv_cache_memory_bytes:  # --kv-cache-memory-bytes: no profiling (0.32 gpu_worker.py:649-671)
            available = p.runtime.kv_cache_memory_bytes
            notes.append(f"vLLM: KV cache of {format_bytes(available)} as --kv-cache-memory-bytes sets it; the "
                         "utilization budget is not checked")  # fmt: skip
        tokens_budget = _activation_tokens(p, c, "vllm", 1, max_model_len, total, plan.device_name)[0]
        blocks, tokens, conc = vllm_kv(rules, layout, available, plan.block_size, max_model_len, tokens_budget)
        outside = [f"CUDA graphs ~{format_bytes(c.cuda_graph_bytes)} (captured after the KV cache is sized)"]
        if not rules.counts_cuda_context:
            outside.insert(0, f"CUDA context ~{format_bytes(c.vllm_cuda_context_bytes)}")
        notes.append(f"vLLM {rules.name}: NVML will show the reservation plus what it does not count: "
                     + ", ".join(outside))  # fmt: skip
        name, block = f"vLLM {rules.name}", plan.block_size
    elif plan.runtime == "sglang":
        frac = p.runtime.mem_fraction_static or sglang_mem_fraction(p.parallel.tensor * p.parallel.pipeline, total,
                                                                     p.runtime.version)
        budget = int(total * frac)
        # profile_max_num_token: (free after load) - (free before load) x (1 - fraction); free before load
        # is the card less the CUDA context and NCCL (model_runner.py:470, 816-819)
        available = max(int((total - non_torch) * frac) - weights, 0)
        act = 0  # SGLang keeps activations and CUDA graphs in the (1 - mem_fraction_static) remainder
        blocks = tokens = available // layout.bytes_per_token
        conc, name, block = tokens / max_model_len, f"SGLang (mem_fraction_static {frac:.3g})", 1
    else:
        budget = total  # CUDA_MEMORY_FRACTION 1.0
        available = max(budget - weights - act - non_torch, 0)
        # warmup: free memory after a max_batch_prefill_tokens prefill x wiggle room // block bytes, plus the
        # blocks that prefill batch already holds (flash_causal_lm.py, warmup)
        prefill = _activation_tokens(p, c, "tgi", 1, max_model_len, total)[0]
        held = _ceil_div(prefill, plan.block_size)
        block_bytes = layout.bytes_per_token * plan.block_size
        rules, note = tgi_rules(p.runtime.version)
        if note:
            notes.append(note)
        blocks = int(max(available - held * block_bytes, 0) * rules.wiggle_room) // block_bytes + held
        tokens = blocks * plan.block_size
        conc, name, block = tokens / max_model_len, f"TGI {rules.name}", plan.block_size
    if available <= 0:
        notes.append(f"{name}: nothing left for the KV cache ({format_bytes(available)} after weights and profiling)")
    return RuntimeReport(name, budget, weights, act, non_torch, available, block, blocks, tokens, max_model_len,
                         conc, tuple(notes))  # fmt: skip


VLLM_CPU_BLOCK_SIZE = 128  # vLLM's CPU build, when --block-size is not given (0.32 platforms/cpu.py:291-292)


def _vllm_cpu_report(p: WorkloadProfile, layout: KVLayout, max_model_len: int,
                     c: OverheadConstants) -> RuntimeReport | None:  # fmt: skip
    """vLLM's CPU build: the KV cache is the size --kv-cache-memory-bytes (or VLLM_CPU_KVCACHE_SPACE GiB,
    0.32 platforms/cpu.py:323-327) sets (v1/worker/cpu_worker.py:213-232), cut into blocks as on a GPU, and it
    prints "CPU KV cache size: N tokens" (v1/core/kv_cache_utils.py:2311-2335). None when the size is not given."""
    kv = p.runtime.kv_cache_memory_bytes
    if not kv:
        return None
    rules, note = vllm_rules(p.runtime.version)
    if layout.state is not None and not rules.state_pages:
        raise RuntimeSettingError("runtime.version", f"runtime.version: vLLM {rules.name}'s state pages were not "
                                                     "read (hybrid models are modelled from vLLM 0.32)")  # fmt: skip
    block = p.runtime.block_size or VLLM_CPU_BLOCK_SIZE
    if layout.state is not None:
        block = vllm_state_block_size(layout, block)
    batched = p.runtime.max_num_batched_tokens or max_model_len
    blocks, tokens, conc = vllm_kv(rules, layout, kv, block, max_model_len, batched)
    notes = [note] if note else []
    notes.append(f"vLLM {rules.name} on CPU: KV cache {format_bytes(kv)} (--kv-cache-memory-bytes), block {block}")
    return RuntimeReport(f"vLLM {rules.name} (CPU)", kv, 0, 0, 0, kv, block, blocks, tokens, max_model_len, conc,
                         tuple(notes))  # fmt: skip


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
def layout_text(parallel: tuple[int, int, int]) -> str:
    """'tensor parallel 4', 'tensor parallel 2 x pipeline parallel 2', 'data parallel 8'; '' for one GPU."""
    return " x ".join(f"{what} parallel {n}" for what, n in zip(("tensor", "pipeline", "data"), parallel, strict=True)
                      if n > 1)  # fmt: skip


def gpu_shortfall(e: Estimate) -> str | None:
    """'tensor parallel 4 needs 4 GPUs, 2 given' when fewer GPUs are available than the layout needs, else None."""
    if e.gpus_available is None or e.gpus_available >= e.gpus_needed:
        return None
    layout = layout_text(e.parallel) or "the layout"
    return f"{layout} needs {e.gpus_needed} GPUs, {e.gpus_available} given"


def fit_lines(e: Estimate) -> list[str]:
    """The verdict, the decisive problem first: too few GPUs for the layout, then memory per GPU against the budget
    (vLLM's reservation, else the GPU's memory)."""
    short = gpu_shortfall(e)
    memory = None
    if e.margin_bytes is not None and e.budget_bytes is not None:
        need, have = format_bytes(e.needed_bytes), format_bytes(e.budget_bytes)
        budget = (f"vLLM's {have} reservation" if e.vllm_reservation_bytes is not None
                  else f"the {have} host RAM budget" if e.gpus_needed == 0 else f"the GPU's {have}")  # fmt: skip
        per = "" if e.gpus_needed == 0 else " per GPU"
        if e.margin_bytes >= 0:
            memory = f"needs {need}{per} of {budget}: {format_bytes(e.margin_bytes)} to spare"
        else:
            memory = f"needs {need}{per}, {format_bytes(-e.margin_bytes)} more than {budget}"
    if short is not None:
        return [f"does not fit: {short}"] + ([f"memory: {memory}"] if memory else [])
    if e.fits is None:
        return ["fits: unknown (GPU memory not given)"]
    if e.fits:
        return [f"fits: {memory}" if memory else "fits"]
    return [f"does not fit: {memory}" if memory else "does not fit"]


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
    lines.extend(fit_lines(e))
    if e.max_concurrency_at_max_context is not None:
        lines.append(
            f"largest {e.concurrency_label} at {e.context} tokens: {e.max_concurrency_at_max_context}"
        )
        lines.append(
            f"largest context at {e.concurrency} {e.concurrency_label}: {e.max_context_at_concurrency} tokens"
        )
    r = e.runtime_report
    if r is not None:
        device = "CPU" if e.kind == Kind.CPU_INFERENCE.value else "GPU"  # vLLM names the pool (kv_cache_utils.py:2311)
        if device == "CPU":
            lines.append(f"{r['runtime']}: KV {format_bytes(r['kv_available_bytes'])} (--kv-cache-memory-bytes)")
        else:
            lines.append(f"{r['runtime']}: budget {format_bytes(r['budget_bytes'])} - weights "
                         f"{format_bytes(r['weights_bytes'])} - activation peak {format_bytes(r['activation_bytes'])}"
                         f" - non-torch {format_bytes(r['non_torch_bytes'])} = KV "
                         f"{format_bytes(r['kv_available_bytes'])}")  # fmt: skip
        lines.append(f"{device} KV cache size: {r['kv_tokens']:,} tokens ({r['blocks']} blocks of {r['block_size']})")
        lines.append(f"Maximum concurrency for {r['max_model_len']:,} tokens per request: {r['max_concurrency']:.2f}x")
    elif e.kv_capacity_tokens is not None:
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
    "fit_lines",
    "format_table",
    "gpu_shortfall",
    "inference_activation_bytes",
    "kv_bytes_per_token",
    "kv_cache_bytes",
    "lora_adapter_params",
    "training_activation_bytes",
    "training_state_bytes_per_param",
    "weight_bytes",
    "with_load",
]
