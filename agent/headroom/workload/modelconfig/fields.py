"""What reading a model config gives and refuses: the result, the error, and each integer field read within bounds.

``ModelConfig`` (the profile fragment and where its values came from), ``ModelConfigError`` (the config key or
path at fault; ``NotCached``), ``_int`` (one integer field under any of its aliases, bounded by ``_LIMITS``:
``MAX_LAYERS`` ... ``MAX_TOKENS``) and ``_refused`` (a file problem as a ModelConfigError).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, overload

from headroom.jsontypes import JsonMapping, JsonValue, YamlDict
from headroom.safeio import FileRefused


class ModelConfigError(ValueError):
    """A config.json or cache problem; ``field`` is the config key (or path) at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class NotCached(ModelConfigError):
    """The model is not in the local Hugging Face cache (the only ModelConfigError a shipped table may answer)."""


@dataclass(frozen=True)
class ModelConfig:
    source: str  # the config.json read
    model_type: str | None
    layout: str  # dense, moe, sliding-window, mla, hybrid, encoder (comma-joined when several)
    encoder_only: bool  # no KV cache: serve it as kind embedding
    fields: YamlDict  # profile mapping fragment
    params_from: str  # "safetensors headers", "safetensors index", "architecture"
    notes: tuple[str, ...] = ()
    max_context: int | None = None  # max_position_embeddings: vLLM's default max_model_len


def _first(cfg: JsonMapping, *keys: str) -> JsonValue:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return None


# The largest value each integer field may have (the first key of a field names its aliases too). A config.json
# is written by whoever started the process, so a number is bounded before the memory model multiplies it. The caps
# are far above every real config (the largest in tests/fixtures/hf: 94 layers, hidden size 8 192, intermediate size
# 36 864, vocabulary 262 208, 256 experts, context 163 840; Llama 3.1 405B has 126 layers, Llama 4 Scout a context of
# 10 485 760) and low enough that every figure the memory model derives from them is a finite float. A value above
# its cap refuses the model with the field named (docs/sizing.md, "Model configs").
MAX_LAYERS = 4096
MAX_WIDTH = 2**18  # hidden size, heads, head dims, LoRA ranks of MLA
MAX_FFN = 2**21  # intermediate sizes
MAX_VOCAB = 2**23
MAX_EXPERTS = 2**16
MAX_TOKENS = 2**31 - 1  # context lengths and sliding windows
MAX_PARAMS = 10**15  # parameters in one checkpoint (the largest published: about 2 x 10^12)
MAX_CHECKPOINT_BYTES = 2**60  # bytes of weights in one checkpoint
_LIMITS = {
    "num_hidden_layers": MAX_LAYERS, "hidden_size": MAX_WIDTH, "num_attention_heads": MAX_WIDTH,
    "num_key_value_heads": MAX_WIDTH, "head_dim": MAX_WIDTH, "intermediate_size": MAX_FFN, "vocab_size": MAX_VOCAB,
    "num_local_experts": MAX_EXPERTS, "num_experts_per_tok": MAX_EXPERTS, "moe_intermediate_size": MAX_FFN,
    "kv_lora_rank": MAX_WIDTH, "qk_rope_head_dim": MAX_WIDTH, "qk_nope_head_dim": MAX_WIDTH, "v_head_dim": MAX_WIDTH,
    "q_lora_rank": MAX_WIDTH, "sliding_window": MAX_TOKENS, "sliding_window_pattern": MAX_LAYERS,
    "attn_layer_period": MAX_LAYERS, "attn_layer_offset": MAX_LAYERS, "full_attention_interval": MAX_LAYERS,
    "first_k_dense_replace": MAX_LAYERS, "n_shared_experts": MAX_EXPERTS, "max_position_embeddings": MAX_TOKENS,
    # hybrid models' recurrent state (Mamba, gated delta net)
    "mamba_d_state": MAX_WIDTH, "ssm_state_size": MAX_WIDTH, "mamba_d_conv": MAX_WIDTH, "conv_kernel": MAX_WIDTH,
    "linear_conv_kernel_dim": MAX_WIDTH, "mamba_n_groups": MAX_WIDTH, "n_groups": MAX_WIDTH,
    "mamba_n_heads": MAX_WIDTH, "mamba_num_heads": MAX_WIDTH, "mamba_d_head": MAX_WIDTH, "mamba_head_dim": MAX_WIDTH,
    "linear_num_key_heads": MAX_WIDTH, "linear_num_value_heads": MAX_WIDTH, "linear_key_head_dim": MAX_WIDTH,
    "linear_value_head_dim": MAX_WIDTH, "mamba_expand": MAX_WIDTH, "mamba_d_ssm": MAX_FFN,
}  # fmt: skip


@overload
def _int(cfg: JsonMapping, where: str, *keys: str, required: Literal[True], minimum: int = 1) -> int: ...
@overload
def _int(cfg: JsonMapping, where: str, *keys: str, required: bool = False, minimum: int = 1) -> int | None: ...
def _int(cfg: JsonMapping, where: str, *keys: str, required: bool = False, minimum: int = 1) -> int | None:
    """The integer under the first of ``keys`` config.json has, bounded; None when none (``required``: refused)."""
    v = _first(cfg, *keys)
    if v is None:
        if required:
            raise ModelConfigError(where + keys[0], f"required by the memory model; not in config.json (also looked "
                                                    f"for {', '.join(keys[1:]) or 'no alias'})")  # fmt: skip
        return None
    key = next(k for k in keys if cfg.get(k) is not None)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ModelConfigError(where + key, f"expected {what}; got {_quote(v)}")
    limit = _LIMITS.get(keys[0], MAX_TOKENS)
    if v > limit:
        raise ModelConfigError(where + key, f"{_quote(v)} is out of range: at most {limit} is modelled "
                                            "(docs/sizing.md, \"Model configs\")")  # fmt: skip
    return v


def _quote(v: JsonValue) -> str:
    """A value from config.json as an error message quotes it: short (a 400-digit number is not repeated)."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10**15:
        return f"a {len(str(abs(v)))}-digit number"
    text = repr(v)
    return text if len(text) <= 32 else f"{text[:32]}... ({len(text)} characters)"


def _refused(exc: OSError, path: str) -> ModelConfigError:
    """A file problem as a ModelConfigError: FileRefused says why (no content), others by their errno's text."""
    if isinstance(exc, FileRefused):
        return ModelConfigError(path, str(exc.strerror))
    if isinstance(exc, FileNotFoundError):
        return ModelConfigError(path, "not found")
    return ModelConfigError(path, f"cannot read: {exc.strerror or type(exc).__name__}")
