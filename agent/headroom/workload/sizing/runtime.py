"""The memory model by serving runtime: how vLLM, SGLang and TGI lay out, budget and report their memory.

Which KV layout each runtime allocates (sliding-window, MLA, hybrid recurrent state), the non-torch memory it
counts, vLLM's MLA-absorbed matrices, the sampler's and TGI's warm-up logits, the tokens of one forward pass
(chunked prefill), and the runtime's own start-up figures (``RuntimeReport``: budget, KV blocks, maximum
concurrency; vLLM's CPU build too). The rules per version are in ``headroom.workload.serving_memory``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from headroom.jsontypes import YamlDict
from headroom.units import format_bytes
from headroom.workload.profiles import Precision, StateKind, WorkloadProfile
from headroom.workload.serving_memory import (
    KVLayout,
    RuntimeReport,
    RuntimeSettingError,
    StateGroup,
    kv_layout,
    sglang_chunked_prefill,
    sglang_mem_fraction,
    state_bytes,
    tgi_blocks,
    tgi_logit_copies,
    tgi_rules,
    vllm_defaults,
    vllm_kv,
    vllm_rules,
    vllm_state_block_size,
)
from headroom.workload.sizing.formulas import _ceil_div
from headroom.workload.sizing.types import Component, OverheadConstants, SizingError

if TYPE_CHECKING:
    from headroom.workload.sizing.plan import _Plan


# ------------------------------------------------------------------------- inference helpers
_RUNTIMES = ("vllm", "sglang", "tgi")  # runtimes whose own start-up accounting is modelled


def _kv_layout(p: WorkloadProfile, rt: str | None, notes: list[str], need: Callable[..., bool]) -> KVLayout | None:
    arch, par = p.architecture, p.parallel
    mla = arch.kv_lora_rank is not None
    kv_heads, hd = arch.effective_kv_heads, arch.effective_head_dim
    fields: YamlDict = {"architecture.layers": arch.layers}
    if not mla:
        fields |= {"architecture.kv_heads": kv_heads, "architecture.head_dim": hd}
    if not need("KV cache", fields):
        return None
    assert arch.layers is not None  # need() said it is given
    bits = p.effective_kv_cache_precision.bits
    replicate, align = "ceil", 1
    mla_width = None
    if arch.kv_lora_rank is not None:  # mla
        assert arch.qk_rope_head_dim is not None  # the profile schema gives both MLA fields or neither
        mla_width = arch.kv_lora_rank + arch.qk_rope_head_dim
    state_name = arch.state_kind.value if arch.state_kind is not None else None  # None: no recurrent state
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
                              f"{state_name} layers): this version's state pages were not read (modelled "
                              "from vLLM 0.32); give --runtime-version 0.32 or later, or drop runtime vllm",
                              ("runtime.version",))  # fmt: skip
        if hybrid and (sliding or mla or arch.kv_layers == 0):
            what = "sliding-window" if sliding else "MLA" if mla else "no attention"
            raise SizingError(f"cannot size workload {p.name!r} for vLLM: a {state_name} hybrid with "
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
    # called with state_kind given; the profile schema requires the state's shape with it
    assert a.state_kind is not None and a.state_conv_dim is not None and a.state_conv_kernel is not None
    assert a.state_heads is not None and a.state_head_dim is not None and a.state_size is not None
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
    """TGI's warm-up prefill returns logprobs of every prompt token: the logits gathered over the vocabulary, the
    log-softmax's copies (``tgi_logit_copies``: 1 or 2 at TP 1, 3 at tensor parallel) and the local shard the
    caching allocator keeps (docs/sizing.md "TGI")."""
    rules, _ = tgi_rules(p.runtime.version)
    logits = tokens * vocab * c.tgi_logit_bytes
    shard = _ceil_div(logits, p.parallel.tensor) if p.parallel.tensor > 1 else 0
    return logits * tgi_logit_copies(rules, p.parallel.tensor) + shard


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
        return r.max_num_batched_tokens or tgi_rules(r.version)[0].default_prefill, 0, "max_batch_prefill_tokens"
    if r.max_num_batched_tokens:
        return r.max_num_batched_tokens, concurrency, "max_num_batched_tokens"
    if not p.kind.has_kv_cache:  # embedding: every request in one batch
        return context * concurrency, 0, f"{concurrency} x {context} tokens per batch"
    return context, concurrency, "one sequence prefilled at a time; set max_num_batched_tokens for chunked prefill"


def _runtime_report(plan: _Plan, components: tuple[Component, ...], total: int, max_model_len: int,
                    c: OverheadConstants) -> RuntimeReport:  # fmt: skip
    """The runtime's own start-up figures (docs/sizing.md, "Runtime accounting")."""
    p, layout = plan.profile, plan.layout
    assert layout is not None  # _estimate asks for a runtime report only with a KV layout
    get = {x.name: x.bytes for x in components}
    weights, act, non_torch = get.get("weights", 0), get.get("activations", 0), get.get("non_torch", 0)
    notes: list[str] = []
    if plan.runtime == "vllm":
        assert plan.block_size is not None  # _plan sets it for runtime vllm
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
        assert plan.block_size is not None  # _plan sets it for runtime tgi
        budget = total  # CUDA_MEMORY_FRACTION 1.0
        available = max(budget - weights - act - non_torch, 0)
        # warmup: the free memory after a max_batch_prefill_tokens prefill (its blocks held) by version's rule,
        # plus those blocks (flash_causal_lm.py, warmup; serving_memory.tgi_blocks)
        prefill = _activation_tokens(p, c, "tgi", 1, max_model_len, total)[0]
        held = _ceil_div(prefill, plan.block_size)
        block_bytes = layout.bytes_per_token * plan.block_size
        tgi, note = tgi_rules(p.runtime.version)
        if note:
            notes.append(note)
        blocks = tgi_blocks(tgi, available - held * block_bytes, total, held, block_bytes)
        tokens = blocks * plan.block_size
        conc, name, block = tokens / max_model_len, f"TGI {tgi.name}", plan.block_size
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
