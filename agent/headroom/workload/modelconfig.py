"""Read a Hugging Face model's ``config.json`` (and its safetensors headers) into profile fields, offline.

Small API, shared by ``headroom estimate`` and (later) automatic workload profiles:

- ``read_model_config(path)``: ``path`` is a ``config.json`` or the directory holding it. Returns a
  ``ModelConfig`` whose ``fields`` is a profile mapping fragment (``params``, ``precision``,
  ``quantization``, ``architecture``) that ``profiles.profile_from_dict`` validates like any other.
- ``find_cached_model(name)``: ``ORG/NAME`` -> the snapshot directory in the local Hugging Face cache
  (``HF_HUB_CACHE``, ``HF_HOME/hub``, ``~/.cache/huggingface/hub``); nothing is downloaded.

Every problem raises ``ModelConfigError`` naming the config.json field (or cache path) at fault.
The parameter count comes from the safetensors headers when the weight files are present (exact: the
tensor shapes, quantized tensors unpacked), else from ``model.safetensors.index.json``'s total size,
else from the architecture. Which config fields map to which profile key: docs/sizing.md, "Model
configs".
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headroom.safeio import excerpt


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
    fields: dict[str, Any]  # profile mapping fragment
    params_from: str  # "safetensors headers", "safetensors index", "architecture"
    notes: tuple[str, ...] = ()
    max_context: int | None = None  # max_position_embeddings: vLLM's default max_model_len


_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}
_ST_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4, "I16": 2,
             "I8": 1, "U8": 1, "BOOL": 1}  # fmt: skip
_ENCODERS = {"bert", "roberta", "xlm-roberta", "distilbert", "deberta", "deberta-v2", "electra", "mpnet",
             "nomic_bert", "modernbert", "camembert", "albert"}  # fmt: skip
_ATTENTION_FREE = {"mamba", "mamba2", "rwkv", "rwkv5", "rwkv6"}
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gemma3_text", "bert", "roberta", "xlm-roberta"}
_QUANT_AUX = (".qzeros", ".scales", ".g_idx", ".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map",
              ".quant_state", "weight_scale", "input_scale", "weight_scale_inv", "weight_zero_point",
              ".SCB", "weight_format")  # fmt: skip


def _first(cfg: Mapping[str, Any], *keys: str) -> Any:
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
MAX_TENSOR_DIM = 2**40  # one dimension of one safetensors tensor
_LIMITS = {
    "num_hidden_layers": MAX_LAYERS, "hidden_size": MAX_WIDTH, "num_attention_heads": MAX_WIDTH,
    "num_key_value_heads": MAX_WIDTH, "head_dim": MAX_WIDTH, "intermediate_size": MAX_FFN, "vocab_size": MAX_VOCAB,
    "num_local_experts": MAX_EXPERTS, "num_experts_per_tok": MAX_EXPERTS, "moe_intermediate_size": MAX_FFN,
    "kv_lora_rank": MAX_WIDTH, "qk_rope_head_dim": MAX_WIDTH, "qk_nope_head_dim": MAX_WIDTH, "v_head_dim": MAX_WIDTH,
    "q_lora_rank": MAX_WIDTH, "sliding_window": MAX_TOKENS, "sliding_window_pattern": MAX_LAYERS,
    "attn_layer_period": MAX_LAYERS, "attn_layer_offset": MAX_LAYERS, "full_attention_interval": MAX_LAYERS,
    "first_k_dense_replace": MAX_LAYERS, "n_shared_experts": MAX_EXPERTS, "max_position_embeddings": MAX_TOKENS,
}  # fmt: skip


def _int(cfg: Mapping[str, Any], where: str, *keys: str, required: bool = False, minimum: int = 1) -> int | None:
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


def _quote(v: Any) -> str:
    """A value from config.json as an error message quotes it: short (a 400-digit number is not repeated)."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10**15:
        return f"a {len(str(abs(v)))}-digit number"
    text = repr(v)
    return text if len(text) <= 32 else f"{text[:32]}... ({len(text)} characters)"


def _load_json(path: Path, what: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ModelConfigError(str(path), f"no {what} there") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelConfigError(str(path), f"cannot read {what}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ModelConfigError(str(path), f"{what} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ModelConfigError(str(path), f"{what} must be a JSON object")
    return data


def read_model_config(path: str | os.PathLike[str]) -> ModelConfig:
    """Read ``path`` (a config.json, or a directory holding one) into a ``ModelConfig``."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    return model_config_from(_load_json(p, "config.json"), str(p), p.parent)


def model_config_from(top: Mapping[str, Any], source: str, directory: Path | None = None) -> ModelConfig:
    """A ``ModelConfig`` from config.json's parsed content; ``directory`` holds its safetensors (None: none, the
    parameters come from the architecture). ``source`` names where the values came from."""
    if top.get("is_encoder_decoder"):
        raise ModelConfigError("is_encoder_decoder", f"encoder-decoder models ({top.get('model_type')}) are not "
                                                     "modelled: their cross-attention KV cache has another layout")  # fmt: skip
    # multimodal and some newer configs nest the language model's fields in text_config
    cfg = top.get("text_config") if isinstance(top.get("text_config"), dict) else top
    where = "text_config." if cfg is not top else ""
    model_type = str(cfg.get("model_type") or top.get("model_type") or "") or None
    if model_type in _ATTENTION_FREE:
        raise ModelConfigError(where + "model_type", f"{model_type} is attention-free (recurrent state, no KV "
                                                     "cache): not modelled")  # fmt: skip
    notes: list[str] = []
    layers = _int(cfg, where, "num_hidden_layers", "n_layer", "num_layers", "n_layers", required=True)
    hidden = _int(cfg, where, "hidden_size", "n_embd", "d_model", "dim", required=True)
    heads = _int(cfg, where, "num_attention_heads", "n_head", "n_heads", required=True)
    if cfg.get("multi_query") is True and cfg.get("new_decoder_architecture") is not True:
        kv_heads: int | None = 1
    else:
        kv_heads = _int(cfg, where, "num_key_value_heads", "n_head_kv", "num_kv_heads", "multi_query_group_num")
    head_dim = _int(cfg, where, "head_dim")
    arch: dict[str, Any] = {"layers": layers, "heads": heads, "hidden_size": hidden}
    for key, value in (("kv_heads", kv_heads), ("head_dim", head_dim),
                       ("intermediate_size", _int(cfg, where, "intermediate_size", "ffn_dim", "n_inner")),
                       ("vocab_size", _int(cfg, where, "vocab_size", "padded_vocab_size"))):  # fmt: skip
        if value is not None:
            arch[key] = value
    tie = _first(cfg, "tie_word_embeddings")
    if tie is None:  # the transformers config class's default: True for Gemma, False for Llama-style ones
        tie = top.get("tie_word_embeddings", model_type in _TIED_BY_DEFAULT)
    arch["tie_embeddings"] = bool(tie)
    layout: list[str] = []

    # mixture of experts: every expert is loaded
    experts = _int(cfg, where, "num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
    if experts is not None and experts > 1:
        arch["experts"] = experts
        per_token = _int(cfg, where, "num_experts_per_tok", "moe_top_k", "top_k")
        if per_token is not None:
            arch["experts_per_token"] = per_token
        moe_ffn = _int(cfg, where, "moe_intermediate_size")
        arch["moe_intermediate_size"] = moe_ffn if moe_ffn is not None else arch.get("intermediate_size")
        if arch["moe_intermediate_size"] is None:
            raise ModelConfigError(where + "moe_intermediate_size", "a mixture-of-experts config needs the expert "
                                                                    "width (moe_intermediate_size or intermediate_size)")  # fmt: skip
        layout.append("moe")

    # MLA (DeepSeek V2/V3): one latent vector plus the RoPE key per token per layer
    if cfg.get("kv_lora_rank") is not None:
        arch["kv_lora_rank"] = _int(cfg, where, "kv_lora_rank")
        arch["qk_rope_head_dim"] = _int(cfg, where, "qk_rope_head_dim", required=True)
        q_rank = _int(cfg, where, "q_lora_rank")
        if q_rank is not None:
            arch["q_lora_rank"] = q_rank
        layout.append("mla")

    # sliding-window layers
    window = _int(cfg, where, "sliding_window", "attention_window_size")
    layer_types = cfg.get("layer_types") if isinstance(cfg.get("layer_types"), list) else None
    if window is not None and cfg.get("use_sliding_window") is not False:
        if layer_types is not None:
            sliding = sum(1 for t in layer_types if "sliding" in str(t))
        elif model_type == "gemma2":  # alternating local/global, local first
            sliding = (layers + 1) // 2
        elif cfg.get("sliding_window_pattern") is not None or model_type in ("gemma3", "gemma3_text", "cohere2"):
            pattern = _int(cfg, where, "sliding_window_pattern") or 6  # every pattern-th layer is global
            sliding = layers - layers // pattern
        else:
            sliding = layers
        if sliding:
            arch["sliding_window"] = window
            arch["sliding_window_layers"] = sliding
            layout.append("sliding-window")

    # hybrid models: only some layers hold a KV cache
    kv_layers = None
    block_types = cfg.get("layers_block_type")
    if isinstance(block_types, list):
        kv_layers = sum(1 for t in block_types if str(t) == "attention")
    elif cfg.get("attn_layer_period") is not None:
        period, offset = _int(cfg, where, "attn_layer_period"), _int(cfg, where, "attn_layer_offset", minimum=0) or 0
        kv_layers = sum(1 for i in range(layers) if i % period == offset)
    elif cfg.get("full_attention_interval") is not None:
        kv_layers = layers // _int(cfg, where, "full_attention_interval")
    elif layer_types is not None and any("attention" not in str(t) or "linear" in str(t) for t in layer_types):
        kv_layers = sum(1 for t in layer_types if "attention" in str(t) and "linear" not in str(t))
    if kv_layers is not None and kv_layers < layers:
        arch["kv_layers"] = kv_layers
        layout.append("hybrid")
        notes.append(f"hybrid model: {kv_layers} of {layers} layers hold a KV cache; the other layers' recurrent "
                     "state (per sequence, independent of its length) is not counted")  # fmt: skip

    encoder = model_type in _ENCODERS or _is_encoder_architecture(top.get("architectures"))
    if encoder:
        layout.append("encoder")
    fields: dict[str, Any] = {"architecture": arch}
    fields.update(_precision_fields(cfg, top, where))
    params, params_from = _safetensors_params(directory, fields) if directory is not None else (None, "architecture")
    if params is None and "mla" in layout:
        params, params_from = _mla_params(cfg, arch, where), "config (MLA layout)"
    if params is not None and params > MAX_PARAMS:
        raise ModelConfigError(params_from, f"{_quote(params)} parameters is out of range: at most {MAX_PARAMS:.0e} "
                                            "are modelled")  # fmt: skip
    if fields.get("weight_bytes", 0) > MAX_CHECKPOINT_BYTES:
        raise ModelConfigError(params_from, f"{_quote(fields['weight_bytes'])} bytes of weights is out of range: at "
                                            f"most {MAX_CHECKPOINT_BYTES} are modelled")  # fmt: skip
    if params is not None:
        fields["params"] = params
    return ModelConfig(source=source, model_type=model_type, layout=",".join(layout) or "dense",
                       encoder_only=encoder, fields=fields, params_from=params_from if params else "architecture",
                       notes=tuple(notes), max_context=_int(cfg, where, "max_position_embeddings", "n_positions",
                                                            "max_sequence_length", "seq_length"))  # fmt: skip


def _mla_params(cfg: Mapping[str, Any], arch: Mapping[str, Any], where: str = "") -> int | None:
    """DeepSeek V2/V3 parameters from the config: low-rank query and latent KV projections, dense layers
    before ``first_k_dense_replace``, routed + shared experts and the router after, untied embeddings."""
    h, layers, heads, vocab = arch["hidden_size"], arch["layers"], arch["heads"], arch.get("vocab_size")
    def optional(key: str) -> int | None:  # an integer bounded like the others; None when it is not one
        return _int(cfg, where, key, minimum=0) if isinstance(cfg.get(key), int) else None

    nope, rope, v = optional("qk_nope_head_dim"), arch["qk_rope_head_dim"], optional("v_head_dim")
    kv_rank, q_rank = arch["kv_lora_rank"], arch.get("q_lora_rank")
    if not all(isinstance(x, int) for x in (nope, v, vocab)):
        return None
    q = h * heads * (nope + rope) if not q_rank else h * q_rank + q_rank + q_rank * heads * (nope + rope)
    attn = q + h * (kv_rank + rope) + kv_rank + kv_rank * heads * (nope + v) + heads * v * h
    dense_layers = min(_int(cfg, where, "first_k_dense_replace", minimum=0) or 0, layers) if arch.get("experts") else layers
    dense = 3 * h * (arch.get("intermediate_size") or 0)
    moe = 0
    if arch.get("experts"):
        width = arch["moe_intermediate_size"]
        moe = (arch["experts"] + (_int(cfg, where, "n_shared_experts", minimum=0) or 0)) * 3 * h * width + arch["experts"] * h
    embeddings = vocab * h * (1 if arch.get("tie_embeddings") else 2)
    return layers * (attn + 2 * h) + dense_layers * dense + (layers - dense_layers) * moe + embeddings + h


def _is_encoder_architecture(architectures: Any) -> bool:
    if not isinstance(architectures, list) or not architectures:
        return False
    names = [str(a) for a in architectures]
    if any(n.endswith(("ForCausalLM", "ForConditionalGeneration", "LMHeadModel")) for n in names):
        return False
    return all(n.endswith(("ForMaskedLM", "ForSequenceClassification", "ForTokenClassification")) for n in names)


def _precision_fields(cfg: Mapping[str, Any], top: Mapping[str, Any], where: str) -> dict[str, Any]:
    """precision / quantization profile keys from torch_dtype and quantization_config."""
    out: dict[str, Any] = {}
    dtype = _first(cfg, "torch_dtype", "dtype") or _first(top, "torch_dtype", "dtype")
    if dtype is not None:
        if str(dtype) not in _DTYPES:
            raise ModelConfigError(where + "torch_dtype", f"unknown dtype {dtype!r}; known: {', '.join(_DTYPES)}")
        out["compute_precision"] = _DTYPES[str(dtype)]
        out["precision"] = out["compute_precision"]
    q = top.get("quantization_config") or cfg.get("quantization_config")
    if q is None:
        return out
    if not isinstance(q, dict):
        raise ModelConfigError("quantization_config", "expected a JSON object")
    method = str(q.get("quant_method") or ("bitsandbytes" if "load_in_4bit" in q or "load_in_8bit" in q else ""))
    bits = q.get("bits")
    if method in ("gptq", "awq"):
        if bits not in (4, 8) or (method == "awq" and bits != 4):
            raise ModelConfigError("quantization_config.bits", f"{method} with {bits!r} bits is not modelled "
                                                               f"({'4' if method == 'awq' else '4 or 8'} are)")  # fmt: skip
        out["precision"] = f"int{bits}"
        spec: dict[str, Any] = {"method": method}
        group = q.get("group_size", q.get("q_group_size"))
        if isinstance(group, int) and group > 0:  # -1: one group per output channel (the default)
            if group > MAX_WIDTH:
                raise ModelConfigError("quantization_config.group_size", f"{_quote(group)} is out of range: at most "
                                                                         f"{MAX_WIDTH} is modelled")  # fmt: skip
            spec["group_size"] = group
        out["quantization"] = spec
    elif method in ("fp8", "fbgemm_fp8"):
        out["precision"] = "fp8"
    elif method == "bitsandbytes":
        if q.get("load_in_4bit"):
            if q.get("bnb_4bit_quant_type", "fp4") != "nf4":
                raise ModelConfigError("quantization_config.bnb_4bit_quant_type",
                                       f"{q.get('bnb_4bit_quant_type')!r} is not modelled (nf4 is)")
            out["precision"] = "int4"
            out["quantization"] = {"method": "nf4", "double_quant": bool(q.get("bnb_4bit_use_double_quant", False))}
        elif q.get("load_in_8bit"):
            out["precision"] = "int8"
        else:
            raise ModelConfigError("quantization_config", "bitsandbytes without load_in_4bit or load_in_8bit")
    elif method == "compressed-tensors":
        groups = q.get("config_groups") if isinstance(q.get("config_groups"), dict) else {}
        weights = [g.get("weights") for g in groups.values() if isinstance(g, dict) and isinstance(g.get("weights"), dict)]
        if not weights:
            raise ModelConfigError("quantization_config.config_groups", "no weights scheme found")
        w = weights[0]
        kind, nbits = w.get("type"), w.get("num_bits")
        if kind == "float" and nbits == 8:
            out["precision"] = "fp8"
        elif kind == "int" and nbits == 8:
            out["precision"] = "int8"
        elif kind == "int" and nbits == 4:
            out["precision"] = "int4"
            spec = {"method": "gptq"}
            if isinstance(w.get("group_size"), int) and 0 < w["group_size"] <= MAX_WIDTH:
                spec["group_size"] = w["group_size"]
            out["quantization"] = spec
        else:
            raise ModelConfigError("quantization_config.config_groups", f"weights of type {kind!r} with "
                                                                        f"{nbits!r} bits are not modelled")  # fmt: skip
    else:
        raise ModelConfigError("quantization_config.quant_method", f"{method or 'missing'!r} is not modelled; known: "
                               "gptq, awq, fp8, fbgemm_fp8, bitsandbytes, compressed-tensors")  # fmt: skip
    return out


# ---------------------------------------------------------------------------------- safetensors
def safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of one .safetensors file: {tensor name: {dtype, shape, data_offsets}, __metadata__}."""
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise ModelConfigError(str(path), "truncated safetensors file (no header length)")
            (size,) = struct.unpack("<Q", raw)
            if size > 100 * 1024 * 1024:
                raise ModelConfigError(str(path), f"safetensors header of {size} bytes is implausible")
            header = json.loads(f.read(size))
    except OSError as exc:
        raise ModelConfigError(str(path), f"cannot read: {exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelConfigError(str(path), f"safetensors header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ModelConfigError(str(path), "safetensors header must be a JSON object")
    return header


def _elements(name: str, info: Mapping[str, Any]) -> int:
    """The number of elements of one safetensors tensor; ModelConfigError for a shape that is not a short list of
    sizes up to MAX_TENSOR_DIM (the header is the checkpoint owner's: it bounds nothing by itself)."""
    shape = info.get("shape", [])
    if not isinstance(shape, list) or len(shape) > 16 or not all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_TENSOR_DIM for d in shape):
        raise ModelConfigError("safetensors header", f"tensor {excerpt(name)}: shape is not a list of at most 16 "
                                                     f"sizes of at most {MAX_TENSOR_DIM}")  # fmt: skip
    n = 1
    for d in shape:
        n *= d
    return n


def _tensor_params(name: str, info: Mapping[str, Any], bits: int | None) -> int:
    """Logical parameters in one tensor: packed quantized weights unpacked, quantization constants skipped."""
    if any(marker in name for marker in _QUANT_AUX):
        return 0
    n = _elements(name, info)
    dtype = info.get("dtype")
    if name.endswith(".qweight") and dtype == "I32" and bits:
        return n * (32 // bits)
    if dtype == "U8" and bits == 4:  # bitsandbytes 4-bit: two weights per byte
        return n * 2
    return n


def _tensor_bytes(name: str, info: Mapping[str, Any]) -> int:
    return _elements(name, info) * _ST_BYTES.get(str(info.get("dtype")), 0)


def _safetensors_params(directory: Path, fields: dict[str, Any]) -> tuple[int | None, str]:
    """(parameters, where from); with the weight files present also sets fields["weight_bytes"]."""
    precision = str(fields.get("precision", ""))
    bits = 4 if precision == "int4" else 8 if precision == "int8" else None
    index_path = directory / "model.safetensors.index.json"
    files: list[Path] = []
    index = None
    if index_path.exists():
        index = _load_json(index_path, "model.safetensors.index.json")
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict):
            raise ModelConfigError("weight_map", f"{index_path} has no weight_map object")
        files = [directory / name for name in sorted(set(map(str, weight_map.values())))]
    elif (directory / "model.safetensors").exists():
        files = [directory / "model.safetensors"]
    if files and all(f.exists() for f in files):
        total = stored = 0
        for f in files:
            for name, info in safetensors_header(f).items():
                if name != "__metadata__" and isinstance(info, dict):
                    total += _tensor_params(name, info, bits)
                    stored += _tensor_bytes(name, info)
        if stored and precision != "fp32":  # runtimes serve FP32 checkpoints in 16 bits: not as stored
            fields["weight_bytes"] = stored
        return total, "safetensors headers"
    if index is not None and "quantization" not in fields and precision in ("bf16", "fp16", "fp32", "fp8"):
        metadata = index.get("metadata")
        size = metadata.get("total_size") if isinstance(metadata, dict) else None
        if isinstance(size, int) and size > 0:
            per = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}[precision]
            return size // per, "safetensors index"
    return None, "architecture"


# ----------------------------------------------------------------------------------------- cache
def cache_dirs(env: Mapping[str, str] | None = None) -> list[Path]:
    """Where the Hugging Face hub cache may be, in huggingface_hub's order of precedence."""
    env = os.environ if env is None else env
    if env.get("HF_HUB_CACHE"):
        return [Path(env["HF_HUB_CACHE"]).expanduser()]
    if env.get("HF_HOME"):
        return [Path(env["HF_HOME"]).expanduser() / "hub"]
    base = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return [base / "huggingface" / "hub"]


def find_cached_model(name: str, env: Mapping[str, str] | None = None) -> Path:
    """The snapshot directory of ``ORG/NAME`` in the local cache (refs/main first, else the newest one)."""
    parts = name.strip().split("/")
    if len(parts) != 2 or not all(parts):
        raise ModelConfigError("--model", f"expected ORG/NAME as on the Hugging Face hub; got {name!r}")
    searched = []
    for root in cache_dirs(env):
        repo = root / f"models--{parts[0]}--{parts[1]}"
        searched.append(str(repo))
        if not repo.is_dir():
            continue
        ref = repo / "refs" / "main"
        if ref.is_file():
            snap = repo / "snapshots" / ref.read_text(encoding="utf-8").strip()
            if (snap / "config.json").exists():
                return snap
        snaps = sorted((s for s in (repo / "snapshots").glob("*") if (s / "config.json").exists()),
                       key=lambda s: s.stat().st_mtime, reverse=True)  # fmt: skip
        if snaps:
            return snaps[0]
        raise ModelConfigError("--model", f"{repo} holds no snapshot with a config.json")
    raise NotCached("--model", f"{name} is not in the local Hugging Face cache (looked in "
                                      f"{', '.join(searched)}; set HF_HUB_CACHE or HF_HOME, or use --model-config PATH); "
                                      "nothing is downloaded")  # fmt: skip


__all__ = ["ModelConfig", "ModelConfigError", "NotCached", "cache_dirs", "find_cached_model", "model_config_from", "read_model_config",
           "safetensors_header"]  # fmt: skip
