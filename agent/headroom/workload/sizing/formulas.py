"""The memory model's building blocks: the bytes of each part of a workload, by formula, whatever the runtime.

Weights (quantization constants included), the KV cache per token, training state per parameter, LoRA adapters,
activations in training (Korthikanti et al. 2022) and inference, ZeRO / FSDP sharding and offload, and the
parameters an architecture implies. Pure functions of their arguments; docs/sizing.md gives each formula's source.
"""

from __future__ import annotations

from headroom.units import format_bytes
from headroom.workload.profiles import (
    LORA_ALL_LINEAR,
    Architecture,
    Optimizer,
    Precision,
    Quantization,
    QuantizationSpec,
    Sharding,
    Training,
    WorkloadProfile,
)
from headroom.workload.sizing.types import DEFAULTS, Component, OverheadConstants, SizingError

_NO_QUANTIZATION = QuantizationSpec()


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
    assert arch.layers is not None  # a missing dimension raised above
    per_layer = 0
    for m in modules:
        d_in, d_out = shapes[m]
        assert d_in is not None and d_out is not None  # a missing dimension raised above
        per_layer += rank * (d_in + d_out)
    return arch.layers * per_layer


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
    stored = layers * 2 * sbh + per_layer if checkpointing else layers * per_layer
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


def architecture_params(arch: Architecture) -> int | None:
    """Parameters implied by a Llama-style architecture (attention, gated MLP or all experts, norms,
    embeddings); None when a dimension is missing or the layout is MLA (give params then)."""
    h, hd, heads, kv = arch.effective_hidden_size, arch.effective_head_dim, arch.heads, arch.effective_kv_heads
    layers, vocab = arch.layers, arch.vocab_size
    if layers is None or h is None or hd is None or heads is None or kv is None or vocab is None:
        return None
    if arch.kv_lora_rank is not None:
        return None
    attn = h * heads * hd * 2 + 2 * h * kv * hd
    if arch.experts:
        if arch.moe_intermediate_size is None:  # the experts' width unknown
            return None
        mlp = arch.experts * (3 * h * arch.moe_intermediate_size + h)
    elif arch.intermediate_size is not None:
        mlp = 3 * h * arch.intermediate_size
    else:
        return None
    return layers * (attn + mlp + 2 * h) + h + vocab * h * (1 if arch.tie_embeddings else 2)


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
    h: int = max(128, round((p.params / (12 * arch.layers)) ** 0.5 / 128) * 128)
    notes.append(f"hidden_size not given: assuming {h} (~sqrt(params / (12 x layers))) for activations only")
    return h
