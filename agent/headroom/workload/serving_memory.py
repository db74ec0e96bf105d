"""How serving runtimes size their KV cache at start-up: vLLM (per version), SGLang, TGI.

Pure functions; the arithmetic follows each runtime's own start-up accounting, step by step, as read in
its source (file and line of every rule and constant: docs/sizing.md, "Runtime accounting"). Figures
the source cannot give (CUDA context, NCCL buffers, the sampler's live set) are named constants in
``sizing.OverheadConstants`` with the evidence for their values.

``kv_layout`` describes the KV cache per token per GPU as groups of layers; ``vllm_kv`` turns the KV
memory into vLLM's blocks, "GPU KV cache size: N tokens" and "Maximum concurrency for L tokens per
request: X.XXx"; ``vllm_request_bytes`` is what one request takes under the same rules. The budget
arithmetic per runtime (``RuntimeReport``) is in ``sizing.runtime._runtime_report``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GIB = 1024**3


class RuntimeSettingError(ValueError):
    """A runtime setting or model layout the accounting cannot follow; ``field`` names the profile key."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ------------------------------------------------------------------------------------- KV layout
@dataclass(frozen=True)
class KVGroup:
    layers: int  # layers of this kind on one GPU (pipeline stage)
    bytes_per_token: int  # per layer per GPU: 2 x kv_heads x head_dim x bytes (MLA: 1 x latent width)
    window: int | None = None  # sliding-window layers: tokens attended to


@dataclass(frozen=True)
class StateGroup:
    """Hybrid models' recurrent layers (Mamba, gated delta net): one state per sequence, whatever its length."""

    layers: int  # layers of this kind on one GPU (pipeline stage)
    bytes_per_sequence: int  # per layer per GPU: conv state + SSM state (vLLM's MambaSpec page before padding)
    blocks_per_request: int  # vLLM's blocks per request in "align" mode: 2 + prefill checkpoints (Mamba2: 1)


@dataclass(frozen=True)
class KVLayout:
    groups: tuple[KVGroup, ...]
    description: str
    state: StateGroup | None = None

    @property
    def bytes_per_token(self) -> int:
        """Every KV layer, one token, one GPU: what a full-context token costs."""
        return sum(g.layers * g.bytes_per_token for g in self.groups)

    def sequence_bytes(self, tokens: int, block_size: int | None = None) -> int:
        """KV bytes one sequence of ``tokens`` holds: sliding-window layers keep at most the window."""
        total = 0
        for g in self.groups:
            t = min(tokens, g.window) if g.window else tokens
            if block_size:
                t = _cdiv(t, block_size) * block_size
            total += g.layers * g.bytes_per_token * t
        if self.state:
            total += self.state.layers * self.state.bytes_per_sequence
        return total


def kv_layout(layers: int, kv_heads: int, head_dim: int, element_bits: int, tensor: int = 1, pipeline: int = 1,
              sliding_window: int | None = None, sliding_layers: int | None = None, kv_layers: int | None = None,
              mla_width: int | None = None, replicate_heads: str = "ceil", align_bytes: int = 1) -> KVLayout:  # fmt: skip
    """The KV cache of one GPU as groups of layers.

    kv_heads per GPU: ceil(kv_heads / tensor), at least 1 (``replicate_heads="floor"``: vLLM's
    max(1, kv_heads // tensor)); layers per GPU: ceil(layers / pipeline). MLA (``mla_width`` = kv_lora_rank
    + qk_rope_head_dim) caches one latent vector per token per layer, the same on every tensor rank;
    ``align_bytes`` rounds that entry up (vLLM 0.7 aligns MLA entries to 256 bytes).
    """
    stage = _cdiv(kv_layers if kv_layers is not None else layers, pipeline)
    if mla_width:
        per = _cdiv(_cdiv(mla_width * element_bits, 8), align_bytes) * align_bytes
        what = f"MLA latent {mla_width} x {element_bits // 8 or 0.5} B" + (f" aligned to {per} B" if per * 8 !=
                                                                           mla_width * element_bits else "")
    else:
        heads = max(1, kv_heads // tensor) if replicate_heads == "floor" else max(1, _cdiv(kv_heads, tensor))
        per = _cdiv(2 * heads * head_dim * element_bits, 8)
        what = f"2 x {heads} KV heads x {head_dim}"
    sliding = 0
    if sliding_window:
        sliding = min(stage, _cdiv(sliding_layers if sliding_layers is not None else layers, pipeline))
    groups = []
    if stage - sliding:
        groups.append(KVGroup(stage - sliding, per))
    if sliding:
        groups.append(KVGroup(sliding, per, sliding_window))
    desc = f"{stage} KV layers per GPU, {what} per layer"
    if sliding:
        desc += f", {sliding} of them with a {sliding_window}-token window"
    return KVLayout(tuple(groups), desc)


def state_bytes(kind: str, tensor: int, conv_dim: int, conv_kernel: int, groups: int, heads: int, head_dim: int,
                state_size: int, conv_bits: int, ssm_bits: int) -> int:  # fmt: skip
    """One layer's recurrent state per sequence per GPU, as vLLM 0.32 shapes it
    (model_executor/layers/mamba/mamba_utils.py:180-301, ``MambaStateShapeCalculator``): the conv state
    (channels / tensor, kernel - 1) and the SSM state (heads / tensor, head_dim, state_size); Mamba2's channels
    add 2 x groups x state_size, groups replicated up to the tensor degree when it does not divide them
    (``extra_groups_for_head_shards``); mamba1's SSM state is (channels / tensor, state_size), i.e. head_dim 1."""
    if kind == "mamba2":
        groups = groups if groups % tensor == 0 else tensor  # n_groups + (tp - n_groups)
        conv_dim = conv_dim + 2 * groups * state_size
    for what, n in (("state_conv_dim", conv_dim), ("state_heads", heads)):
        if n % tensor:
            raise RuntimeSettingError("parallel.tensor", f"parallel.tensor: {tensor} does not divide the recurrent "
                                                         f"state's {what} ({n}); vLLM shards it evenly")  # fmt: skip
    conv = conv_dim // tensor * (conv_kernel - 1) * conv_bits // 8
    return conv + heads // tensor * head_dim * state_size * ssm_bits // 8


# ------------------------------------------------------------------------------------ versions
def parse_version(text: str, field: str = "runtime.version") -> tuple[int, ...]:
    m = re.match(r"^\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", text or "")
    if not m:
        raise RuntimeSettingError(field, f"{field}: cannot read version {text!r}; expected e.g. 0.8.5")
    return tuple(int(x) for x in m.groups() if x is not None)


@dataclass(frozen=True)
class VllmRules:
    """One range of vLLM versions whose start-up accounting is the same (docs/sizing.md lists the source)."""

    name: str  # the range, e.g. "0.9-0.11 (V1)"
    first: tuple[int, ...]
    engine: str  # V0 or V1
    counts_cuda_context: bool  # is the CUDA context inside the non-KV memory subtracted from the budget?
    mla_latent: bool  # DeepSeek MLA cached as one latent vector (else as full K/V of head size 256)
    hybrid_groups: bool  # full + sliding-window layers in separate KV groups (the 0.9+ hybrid allocator)
    window_in_concurrency: bool  # the printed max concurrency accounts for sliding windows
    a100_small_defaults: bool = False  # A100s keep the < 70 GiB serve defaults
    triton_sampler: bool = False  # the profile's top-k/top-p masks logits in place (Triton) instead of sorting
    large_comm_buffers: bool = False  # the larger non-torch memory measured from 0.17 (all-reduce fusion buffers)
    mla_absorbed_weights: bool = False  # MLA keeps W_Q x W_UK and W_UV x W_O as 16-bit weights (0.7 V0)
    mla_align_bytes: int = 1  # MLA cache entries rounded up to this many bytes (0.7 V0: 256)
    state_pages: bool = False  # hybrid Mamba / linear-attention layers paged next to attention (read in 0.32)
    tokens_from_concurrency: bool = False  # "KV cache size: N tokens" = int(max concurrency x max_model_len)


VLLM_RULES = (
    VllmRules("0.5-0.6.3 (V0)", (0, 5), "V0", False, False, False, False),
    VllmRules("0.6.4-0.6.6 (V0)", (0, 6, 4), "V0", True, False, False, False),
    VllmRules("0.7 (V0)", (0, 7), "V0", False, True, False, False, mla_absorbed_weights=True, mla_align_bytes=256),
    VllmRules("0.8 (V1)", (0, 8), "V1", True, True, False, False),
    VllmRules("0.9-0.16 (V1)", (0, 9), "V1", False, True, True, True, True),
    VllmRules("0.17-0.19 (V1)", (0, 17), "V1", False, True, True, True, True, True, True),
    VllmRules("0.32 (V1)", (0, 32), "V1", False, True, True, True, True, True, True, state_pages=True,
              tokens_from_concurrency=True),
)


VLLM_LAST_READ = (0, 32)  # the newest release whose source the rules were checked against
VLLM_UNREAD = ((0, 20), (0, 31))  # released between two versions read: their neighbour's rules, with a note
# vLLM 0.32 hybrid (Mamba) models: the attention block is a multiple of the attention backend's kernel block
# (FlashAttention: MultipleOf(16), v1/attention/backends/flash_attn.py:355-365) large enough that one attention
# page holds a Mamba state (platforms/interface.py:1060-1095)
VLLM_KERNEL_BLOCK = 16


def vllm_rules(version: str | None) -> tuple[VllmRules, str | None]:
    """(the rules for ``version``, a note when the version is outside the documented ranges)."""
    if not version:
        return VLLM_RULES[-1], f"runtime.version not given: vLLM {VLLM_RULES[-1].name} accounting assumed"
    v = parse_version(version)
    if v < VLLM_RULES[0].first:
        raise RuntimeSettingError("runtime.version", f"runtime.version: vLLM {version} predates the documented "
                                               f"accounting (from {'.'.join(map(str, VLLM_RULES[0].first))})")  # fmt: skip
    rules = [r for r in VLLM_RULES if r.first <= v][-1]
    if VLLM_UNREAD[0] <= v[:2] <= VLLM_UNREAD[1]:
        return rules, (f"vLLM {version} was not read (between 0.19 and 0.32): {rules.name} accounting assumed")
    if v[:2] > VLLM_LAST_READ:
        return rules, (f"vLLM {version} is newer than the versions read (up to "
                       f"{'.'.join(map(str, VLLM_LAST_READ))}): {rules.name} accounting assumed")  # fmt: skip
    return rules, None


def vllm_defaults(rules: VllmRules, max_model_len: int, device_memory: int,
                  device_name: str = "") -> tuple[int, int, str]:  # fmt: skip
    """(max_num_batched_tokens, max_num_seqs, why) as the version chooses them for `vllm serve`."""
    if rules.engine == "V0":
        if max_model_len > 32768:  # chunked prefill on by default for long contexts
            return 512, 256, "V0, chunked prefill (max_model_len > 32768): 512 tokens, 256 sequences"
        return max(max_model_len, 2048), 256, "V0: max(max_model_len, 2048) tokens, 256 sequences"
    if rules.a100_small_defaults and "a100" in device_name.lower():
        return 2048, 256, "V1 serve on an A100: 2048 tokens, 256 sequences"
    if device_memory >= 70 * GIB:
        return 8192, 1024, "V1 serve on a >= 70 GiB GPU: 8192 tokens, 1024 sequences"
    return 2048, 256, "V1 serve on a < 70 GiB GPU: 2048 tokens, 256 sequences"


@dataclass(frozen=True)
class TgiRules:
    """One range of TGI versions whose warm-up accounting is the same (docs/sizing.md lists the source)."""

    name: str
    first: tuple[int, ...]
    wiggle_room: float  # TGI_WIGGLE_ROOM (a literal 0.95 in 2.0-2.2's warmup)
    block_size: int  # the default attention backend's block: paged 16, flashinfer (default from 2.3) 1
    # the warm-up's prefill log-softmax overwrites the logits (from 2.4: `torch.log_softmax(out, -1, out=out)`,
    # v2.4.0 flash_causal_lm.py:2046) or allocates a second copy (`torch.log_softmax(out, -1)`: v1.4.5 :1051,
    # v2.0.4 :1142, v2.1.1 :1381, v2.2.0 :1504, v2.3.1 :1730); at tensor parallel > 1 neither: see tgi_logit_copies
    logits_in_place: bool
    # 3.x: the KV cache gets the free memory less (1 - MEMORY_FRACTION x TGI_WIGGLE_ROOM) of the card's total
    # (`get_free_memory(self.device, MEMORY_FRACTION * TGI_WIGGLE_ROOM)`, v3.0.0 flash_causal_lm.py:1584, v3.3.0
    # :1556); before 3.0 the wiggle room multiplies the free memory (v2.4.0 :1532-1540)
    reserve_of_total: bool
    # the launcher's max_batch_prefill_tokens when not given: 1.x a 4096 default (v1.4.5 launcher/src/main.rs:239);
    # 2.x max_input_tokens + 50 = 4145, max_input_tokens defaulting to min(max_position_embeddings, 4096) - 1
    # (v2.4.0 launcher/src/main.rs:1673-1736); 3.x the card's compute-optimal size, capped by max_position_embeddings
    # and VRAM, or 4096 when the card or the model's FLOPs are unknown (v3.0.0 launcher/src/main.rs:2030-2056): the
    # fallback is what headroom assumes, so give --max-num-batched-tokens as the launcher printed it
    default_prefill: int


TGI_RULES = (
    TgiRules("1.x", (1,), 1.0, 16, False, False, 4096),
    TgiRules("2.0-2.2", (2, 0), 0.95, 16, False, False, 4145),
    TgiRules("2.3", (2, 3), 0.95, 1, False, False, 4145),
    TgiRules("2.4", (2, 4), 0.90, 1, True, False, 4145),
    TgiRules("3.0", (3, 0), 0.95, 1, True, True, 4096),
    TgiRules("3.1-3.2", (3, 1), 0.93, 1, True, True, 4096),
    TgiRules("3.3", (3, 3), 0.90, 1, True, True, 4096),
)
TGI_LAST_READ = (3, 3)


def tgi_rules(version: str | None) -> tuple[TgiRules, str | None]:
    """(the rules for ``version``, a note when the version is not given or outside the documented ranges)."""
    if not version:
        return TGI_RULES[-1], f"runtime.version not given: TGI {TGI_RULES[-1].name} accounting assumed"
    v = parse_version(version)
    if v < TGI_RULES[0].first:
        raise RuntimeSettingError("runtime.version", f"runtime.version: TGI {version} predates the documented "
                                                     "accounting (from 1.0)")  # fmt: skip
    rules = [r for r in TGI_RULES if r.first <= v][-1]
    if v[:2] > TGI_LAST_READ:
        return rules, f"TGI {version} is newer than the versions read (up to 3.3): {rules.name} accounting assumed"
    return rules, None


def tgi_logit_copies(rules: TgiRules, tensor: int) -> int:
    """Full (gathered) 16-bit logits the warm-up's prefill log-softmax holds at once. At tensor parallel > 1
    TensorParallelHead returns `world_out.T`, a transposed view (v2.4.0 layers/tensor_parallel.py:88-104, the same
    from v1.0.0 to v3.3.x), so PyTorch's CUDA log-softmax copies its input to a contiguous tensor (host_softmax:
    `input_.contiguous()`, aten/src/ATen/native/cuda/SoftMax.cu) and writes a new tensor (before 2.4) or, given
    `out=` a non-contiguous tensor, a contiguous temporary it copies back (log_softmax_out's `output_temp`,
    aten/src/ATen/native/SoftMax.cpp): three copies in every version. At TP 1 the logits are contiguous: one copy
    from 2.4 (in place), two before."""
    if tensor > 1:
        return 3
    return 1 if rules.logits_in_place else 2


def tgi_blocks(rules: TgiRules, free: int, total: int, held: int, block_bytes: int) -> int:
    """KV blocks TGI's warmup sets: ``free`` is the card's free memory after the warm-up prefill (its ``held``
    blocks allocated, the caching allocator still holding the prefill's peak: no empty_cache before the reading),
    at CUDA_MEMORY_FRACTION 1.0. Before 3.0 `int(free x TGI_WIGGLE_ROOM // block bytes) + held`; from 3.0
    `int((free - (1 - TGI_WIGGLE_ROOM) x total) // block bytes) + held` (utils/import_utils.py:13-17)."""
    if rules.reserve_of_total:
        kv = max(free - (1 - rules.wiggle_room) * total, 0)
    else:
        kv = max(free, 0) * rules.wiggle_room
    return int(kv // block_bytes) + held


SGLANG_MEM_FRACTION = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))  # (tp x pp at least, fraction)
MIB = 1024**2


SGLANG_RESERVED_FROM = (0, 4, 8)  # the release that sizes the default fraction by memory reserved per GPU


def _sglang_reserved(version: str | None) -> bool:
    return not version or parse_version(version) >= SGLANG_RESERVED_FROM


def sglang_mem_fraction(parallel_size: int, device_memory: int, version: str | None = None) -> float:
    """SGLang's default mem_fraction_static. 0.4.6 (server_args.py:247-267): by tp x pp on GPUs up to 80 GiB,
    0.88 above, above 96 GiB raised towards leaving 18 GiB. From 0.4.8 (0.4.9 server_args.py:280-319):
    (memory - reserved) / memory, rounded to 3 places, reserving (2.8 + tp x pp / 10) GiB below 35 GiB,
    (9.5 + tp x pp / 2) below 90, (12 + tp x pp / 2) below 160, else 32 GiB. ``version`` None: the newest."""
    gpu_mem = device_memory / MIB
    if _sglang_reserved(version):
        if gpu_mem < 35 * 1024:
            reserved = 2.8 + parallel_size / 10
        elif gpu_mem < 90 * 1024:
            reserved = 9.5 + parallel_size / 2
        elif gpu_mem < 160 * 1024:
            reserved = 12 + parallel_size / 2
        else:
            reserved = 32
        return round((gpu_mem - reserved * 1024) / gpu_mem, 3)
    if device_memory and gpu_mem > 81920:
        frac = 0.88
    else:
        frac = next(f for n, f in SGLANG_MEM_FRACTION if parallel_size >= n)
    if gpu_mem > 96 * 1024:
        frac = min(frac + 48 * 1024 * (1 - frac) / gpu_mem, (gpu_mem - 1024 * 18) / gpu_mem)
    return frac


def sglang_chunked_prefill(device_memory: int, version: str | None = None) -> int:
    """SGLang's default chunked_prefill_size: 0.4.6 (server_args.py:270-277) 2048 below 25 000 MiB, else 8192;
    from 0.4.8 (0.4.9 server_args.py:331-339) 2048 below 35 GiB, 8192 below 160 GiB, else 16384."""
    gpu_mem = device_memory / MIB
    if _sglang_reserved(version):
        return 2048 if gpu_mem < 35 * 1024 else 8192 if gpu_mem < 160 * 1024 else 16384
    return 2048 if device_memory and gpu_mem < 25_000 else 8192


# ------------------------------------------------------------------------------------- report
@dataclass(frozen=True)
class RuntimeReport:
    runtime: str  # e.g. "vLLM 0.9-0.11 (V1)"
    budget_bytes: int  # what the runtime lets weights + non-KV + KV take
    weights_bytes: int
    activation_bytes: int  # counted inside the budget (vLLM's profile-run peak; 0 for SGLang)
    non_torch_bytes: int  # counted inside the budget
    kv_available_bytes: int
    block_size: int
    blocks: int
    kv_tokens: int  # the runtime's "GPU KV cache size: N tokens"
    max_model_len: int
    max_concurrency: float  # the runtime's "Maximum concurrency for L tokens per request: X.XXx"
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "notes"} | {"notes": list(self.notes)}


def vllm_request_bytes(rules: VllmRules, layout: KVLayout, block_size: int, tokens: int,
                       max_num_batched_tokens: int) -> int:  # fmt: skip
    """KV bytes vLLM sets aside for one request of ``tokens`` tokens: whole blocks on every layer; under the
    0.9+ hybrid allocator a sliding-window layer holds cdiv(min(window - 1 + batched, tokens), block) + 1
    blocks and the groups are padded to the same number of layers (as ``vllm_kv`` counts them)."""
    if layout.state is not None:
        n_attn, n_state, group = _vllm_state_groups(layout)
        return (n_attn * _cdiv(tokens, block_size) + n_state * layout.state.blocks_per_request) * \
            layout.groups[0].bytes_per_token * block_size * group
    page = layout.groups[0].bytes_per_token * block_size if layout.groups else 0
    full = sum(g.layers for g in layout.groups if not g.window)
    sliding = [g for g in layout.groups if g.window]
    n_sliding = sum(g.layers for g in sliding)
    full_blocks = _cdiv(tokens, block_size)
    if not rules.hybrid_groups or not n_sliding:
        return full_blocks * page * (full + n_sliding)
    window = sliding[0].window
    assert window is not None  # the sliding groups are the ones with a window
    sw_blocks = _cdiv(min(window - 1 + max_num_batched_tokens, tokens), block_size) + 1
    if not full:
        return sw_blocks * page * n_sliding
    group = min(full, n_sliding)
    return (_cdiv(full, group) * full_blocks + _cdiv(n_sliding, group) * sw_blocks) * page * group


def vllm_kv(rules: VllmRules, layout: KVLayout, available: int, block_size: int, max_model_len: int,
            max_num_batched_tokens: int) -> tuple[int, int, float]:  # fmt: skip
    """(blocks, KV tokens, max concurrency) as the version computes them from the available memory."""
    available = max(available, 0)
    if layout.state is not None:  # 0.32: one pool of equal pages, attention and Mamba groups draw from it
        n_attn, n_state, group = _vllm_state_groups(layout)
        blocks = available // (layout.groups[0].bytes_per_token * block_size * group)
        conc = blocks / (n_attn * _cdiv(max_model_len, block_size) + n_state * layout.state.blocks_per_request)
        return blocks, int(conc * max_model_len), conc
    page = {g.bytes_per_token * block_size for g in layout.groups}
    if len(page) != 1:
        raise RuntimeSettingError("architecture", "layers with different KV sizes per token are not modelled for vLLM")
    page_size = page.pop()
    full = sum(g.layers for g in layout.groups if not g.window)
    sliding = [g for g in layout.groups if g.window]
    n_sliding = sum(g.layers for g in sliding)
    window = sliding[0].window if sliding else None

    def sliding_blocks() -> int:  # blocks one request can hold on a sliding-window layer (0.9+ SlidingWindowSpec)
        assert window is not None  # called only when there are sliding-window layers
        return _cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block_size) + 1

    if not rules.hybrid_groups or not (full and n_sliding):
        layers = full + n_sliding
        blocks = available // page_size // layers
        tokens = blocks * block_size
        if rules.window_in_concurrency and n_sliding and not full:
            conc = blocks / sliding_blocks()
        elif rules.window_in_concurrency:
            conc = blocks / _cdiv(max_model_len, block_size)
        else:
            return blocks, tokens, tokens / max_model_len
        return blocks, int(conc * max_model_len) if rules.tokens_from_concurrency else tokens, conc
    group = min(full, n_sliding)  # hybrid allocator: layers grouped so every group has `group` layers
    n_full, n_sw = _cdiv(full, group), _cdiv(n_sliding, group)
    blocks = available // page_size // group
    tokens = blocks // (n_full + n_sw) * block_size
    per_request = n_full * _cdiv(max_model_len, block_size) + n_sw * sliding_blocks()
    if rules.tokens_from_concurrency:
        tokens = int(blocks / per_request * max_model_len)
    return blocks, tokens, blocks / per_request


def _vllm_state_groups(layout: KVLayout) -> tuple[int, int, int]:
    """(attention groups, state groups, layers per group) as vLLM 0.32 groups a hybrid model's layers
    (v1/core/kv_cache_utils.py:1466-1500): the smaller layer count per kind, or the larger when it is under
    1.5 x the smaller; each kind padded to whole groups."""
    assert layout.state is not None
    n_attn = sum(g.layers for g in layout.groups)
    n_state = layout.state.layers
    group = min(n_attn, n_state)
    if max(n_attn, n_state) < group * 1.5:
        group = max(n_attn, n_state)
    return _cdiv(n_attn, group), _cdiv(n_state, group), group


def vllm_state_block_size(layout: KVLayout, block_size: int) -> int:
    """The attention block vLLM 0.32 sets for a hybrid model: the smallest multiple of the kernel block (at least
    the requested block) whose attention page holds one Mamba state; the Mamba page is padded to it
    (platforms/interface.py:1079-1095)."""
    assert layout.state is not None
    align = max(VLLM_KERNEL_BLOCK, block_size)
    one = layout.groups[0].bytes_per_token
    needed = align * _cdiv(layout.state.bytes_per_sequence, align * one)
    return max(block_size, VLLM_KERNEL_BLOCK * _cdiv(needed, VLLM_KERNEL_BLOCK))
