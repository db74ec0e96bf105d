"""The estimate: a profile's plan (what does not depend on the load), ``estimate`` and the capacity searches.

``_plan`` puts the components together (weights, training state, adapter, overhead, then the KV cache and
activations as functions of concurrency and context) from ``formulas.py`` and, for a serving runtime,
``runtime.py``; ``estimate`` applies the load, the budget (vLLM's reservation, else the GPU's memory) and
searches the largest concurrency and context that fit. ``with_load`` changes a profile's load.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from headroom.jsontypes import YamlDict
from headroom.units import format_bytes
from headroom.workload.profiles import Kind, Optimizer, Precision, Quantization, Training, WorkloadProfile
from headroom.workload.serving_memory import (
    KVLayout,
    RuntimeSettingError,
    tgi_rules,
    vllm_request_bytes,
    vllm_rules,
    vllm_state_block_size,
)
from headroom.workload.sizing.formulas import (
    _assumed_hidden,
    _ceil_div,
    _ffn_per_token,
    _largest_layer_params,
    architecture_params,
    inference_activation_bytes,
    lora_adapter_params,
    sharded_training_state,
    training_activation_bytes,
    training_state_bytes_per_param,
    weight_bytes,
)
from headroom.workload.sizing.runtime import (
    _RUNTIMES,
    _activation_tokens,
    _kv_layout,
    _runtime_non_torch,
    _runtime_report,
    _sampler_bytes_per_logit,
    _tgi_warmup_logits_bytes,
    _vllm_cpu_report,
    _vllm_mla_absorbed_bytes,
)
from headroom.workload.sizing.types import DEFAULTS, Component, Estimate, OverheadConstants, SizingError

_SEARCH_LIMIT = 1 << 40  # upper bound for capacity searches (tokens or sequences)


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

    def need(what: str, fields: YamlDict) -> bool:
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
        assert params is not None and wprec is not None  # need() said both are given
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
            assert lora is not None and lora.rank is not None  # need() said lora.rank is given
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
                assert block is not None  # runtime vllm sets the block size
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
        assert arch.layers is not None and hidden is not None  # need("activations") refused one without
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
    assert context is not None  # _plan refused a profile without context.max (need "KV cache" / "activations")
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
