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
import re
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headroom.safeio import Confine, FileRefused, Tree, Within, show

# Caps on what is read of a model's files (docs/serving.md, "Model files"): each well above the largest real file
# of its kind, and low enough that a hostile one costs little memory or time. Every file is read through
# safeio.Tree: regular files only, never blocking, size-capped, symlinks resolved inside the process's root.
# config.json: LLM configs are 1-10 KB; the largest real ones are image classifiers' label maps (ImageNet-21k:
# 21 843 id2label and label2id entries, about 1 MB). Parsed whole: json.loads of 2 MiB costs at most ~25 ms and,
# for the worst shape ("[{},{},...]", 24 bytes of objects per input byte), ~50 MiB
MODEL_CONFIG_BYTES = 2 * 1024 * 1024
# model.safetensors.index.json: about 95 bytes a weight_map entry (measured on public index files: WizardLM-2-8x22B's,
# 56 layers x 8 experts, is 162 187 bytes; Falcon-180B's 52 265); DeepSeek-V3's 91 k entries make ~9 MB, Kimi-K2's
# ~138 k (384 experts x 60 layers x 3 projections x weight and scale) ~13 MB; Llama-3.1-405B's 1 138 ~0.1 MB.
# Scanned incrementally (only the shard names are kept): memory is the bytes read
MODEL_INDEX_BYTES = 32 * 1024 * 1024
# a safetensors header: ~120 bytes a tensor; a 5 GB shard of DeepSeek-V3 holds ~560 tensors (~70 KB), and all 91 k of
# its tensors in one file would make ~11 MB. The format's own limit is 100 MB (safetensors MAX_HEADER_SIZE), which a
# 95 MB hostile header used to reach: 944 MiB and the interpreter held 9.5 s. Scanned incrementally, tensor by
# tensor, never whole: memory is the bytes read, and the scan lets other threads run
SAFETENSORS_HEADER_BYTES = 16 * 1024 * 1024
TENSOR_ENTRY_BYTES = 4096  # one tensor's {dtype, shape, data_offsets} (real ones: ~60 bytes)
TENSOR_DIMS = 8  # dimensions of one tensor (real checkpoints: at most 5, a 3-D convolution's)
TENSOR_ELEMENTS = 1 << 50  # elements of one tensor (the largest real ones, embeddings, are ~2**32)
INDEX_METADATA_BYTES = 64 * 1024  # the index's "metadata" object (real ones: {"total_size": N}, ~30 bytes)
MODEL_SHARDS = 2048  # distinct files in a weight_map (DeepSeek-V3: 163, Llama-3.1-405B: 191)
REF_BYTES = 256  # a hub cache's refs/main: a 40-character commit hash
SNAPSHOTS = 1024  # entries of a cache repository's snapshots/ looked at (one per revision downloaded)


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


def _load_json(tree: Tree, path: tuple[str, ...], what: str, within: Within = None) -> dict[str, Any]:
    """A small JSON object file (config.json), read whole through the tree (MODEL_CONFIG_BYTES at most)."""
    try:
        raw = tree.read(path, MODEL_CONFIG_BYTES, within)
        data = json.loads(raw)
    except FileNotFoundError:
        raise ModelConfigError(show(path), f"no {what} there") from None
    except FileRefused as exc:
        raise ModelConfigError(show(path), str(exc.strerror)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelConfigError(show(path), f"cannot read {what}: {exc.strerror if isinstance(exc, OSError) else exc}"
                               ) from None
    except json.JSONDecodeError as exc:
        raise ModelConfigError(show(path), f"{what} is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise ModelConfigError(show(path), f"{what} must be a JSON object")
    return data


def _refused(exc: OSError, path: str) -> ModelConfigError:
    """A file problem as a ModelConfigError: FileRefused says why (no content), others by their errno's text."""
    if isinstance(exc, FileRefused):
        return ModelConfigError(path, str(exc.strerror))
    if isinstance(exc, FileNotFoundError):
        return ModelConfigError(path, "not found")
    return ModelConfigError(path, f"cannot read: {exc.strerror or type(exc).__name__}")


def read_model_config(path: str | os.PathLike[str], tree: Tree | None = None, confine: bool = False) -> ModelConfig:
    """Read ``path`` (a config.json, or a directory holding one) into a ``ModelConfig``. ``tree``: the files as
    a process sees them (safeio.Tree: its root, its permissions), else the agent's own; ``confine``: every file
    read must lie in the model's directory (or, for a Hugging Face cache snapshot, its repository, whose blobs/
    the snapshot links to), as for a path another user's command line names."""
    if tree is None:
        with Tree("/") as own:
            return read_model_config(os.path.abspath(path), own, confine)
    spath = os.fspath(path)
    try:
        if tree.kind(spath) == "dir":
            directory = tree.resolve_dir(spath)
        else:
            fd, canonical, _ = tree.walk(spath)
            os.close(fd)
            directory = canonical[:-1]
            if canonical[-1] != "config.json":
                raise ModelConfigError(show(canonical), "expected config.json or the directory holding it")
    except FileNotFoundError:
        raise ModelConfigError(spath, "no config.json there") from None
    except OSError as exc:
        raise _refused(exc, spath) from None
    within: Within = None
    if confine:  # a snapshot's files link to its repository's blobs/, as an older local_dir's weights may
        within = Confine(directory, blobs=True)
    p = (*directory, "config.json")
    top = _load_json(tree, p, "config.json", within)
    return model_config_from(top, show(p), directory, tree, within)


def model_config_from(top: Mapping[str, Any], source: str, directory: tuple[str, ...] | None = None,
                      tree: Tree | None = None, within: Within = None) -> ModelConfig:
    """A ``ModelConfig`` from config.json's parsed content; ``directory`` (in ``tree``) holds its safetensors (None:
    none, the parameters come from the architecture). ``source`` names where the values came from."""
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
    pattern = cfg.get("hybrid_override_pattern")  # NemotronH: M Mamba2, * attention, - MLP, E MoE, one per layer
    if kv_layers is None and isinstance(pattern, str):
        if len(pattern) != layers:
            raise ModelConfigError(where + "hybrid_override_pattern", f"{len(pattern)} layers in the pattern, "
                                                                      f"num_hidden_layers is {layers}")  # fmt: skip
        kv_layers = pattern.count("*")
    state = _recurrent_state(cfg, where, model_type, layers, hidden, kv_layers)
    if state:
        arch.update(state)
        if model_type == "falcon_h1":  # attention and Mamba2 side by side in every layer
            kv_layers = layers
        elif isinstance(pattern, str):  # the MLP-only layers ("-", "E") keep neither
            arch["state_layers"] = pattern.count("M")
    elif any(k in cfg for k in _STATE_MARKERS) and (kv_layers is None or kv_layers == layers):
        raise ModelConfigError(where + "model_type", f"{model_type!r} has recurrent (Mamba / linear-attention) "
                                                     "layers whose layout and state shape are not modelled")  # fmt: skip
    if kv_layers is not None and (kv_layers < layers or state):
        arch["kv_layers"] = kv_layers
        layout.append("hybrid")
        counted = (f"the {arch.get('state_layers', layers - kv_layers)} {state['state_kind']} layers' state is "
                   "counted per sequence") if state else ("the other layers' recurrent state (per sequence, "
                                                          "independent of its length) is not counted")  # fmt: skip
        notes.append(f"hybrid model: {kv_layers} of {layers} layers hold a KV cache; {counted}")

    encoder = model_type in _ENCODERS or _is_encoder_architecture(top.get("architectures"))
    if encoder:
        layout.append("encoder")
    fields: dict[str, Any] = {"architecture": arch}
    fields.update(_precision_fields(cfg, top, where))
    params, params_from = (_safetensors_params(tree, directory, fields, within)
                           if directory is not None and tree is not None else (None, "architecture"))
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


# config keys that only recurrent (state-space / linear-attention) layers have
_STATE_MARKERS = ("mamba_d_state", "ssm_state_size", "linear_num_value_heads", "hybrid_override_pattern",
                  "mamba_n_heads", "mamba_num_heads", "attn_type_list", "linear_attn_config")  # fmt: skip


def _recurrent_state(cfg: Mapping[str, Any], where: str, model_type: str | None, layers: int, hidden: int,
                     kv_layers: int | None) -> dict[str, Any]:  # fmt: skip
    """The profile's state_* fields for the hybrid families whose state shape vLLM 0.32 builds from these fields
    (model_executor/models/<family>.py ``get_mamba_state_shape_from_config``); {} for any other config."""
    def i(*keys: str, default: int | None = None) -> int:
        v = _int(cfg, where, *keys, required=default is None)
        return v if v is not None else default

    if model_type == "jamba":  # jamba.py: mamba1_state_shape(mamba_expand x hidden, mamba_d_state, mamba_d_conv)
        inner = i("mamba_expand", default=2) * hidden  # transformers' JambaConfig defaults: expand 2, state 16, conv 4
        out = {"state_kind": "mamba1", "state_conv_dim": inner, "state_heads": inner, "state_head_dim": 1,
               "state_size": i("mamba_d_state", default=16), "state_conv_kernel": i("mamba_d_conv", default=4)}
    elif model_type in ("nemotron_h", "granitemoehybrid", "falcon_h1", "bamba"):  # mamba2_state_shape
        if model_type == "nemotron_h":  # nemotron_h.py: inner = mamba_num_heads x mamba_head_dim
            heads, head_dim = i("mamba_num_heads"), i("mamba_head_dim")
            inner, groups = heads * head_dim, i("n_groups", "mamba_n_groups")
            size, kernel = i("ssm_state_size"), i("conv_kernel")
        else:  # granitemoehybrid.py / falcon_h1.py: inner = mamba_d_ssm, else mamba_expand x hidden
            heads, head_dim, groups = i("mamba_n_heads"), i("mamba_d_head"), i("mamba_n_groups", default=1)
            inner = i("mamba_d_ssm", default=0) or i("mamba_expand", default=2) * hidden
            size, kernel = i("mamba_d_state"), i("mamba_d_conv", default=4)
        out = {"state_kind": "mamba2", "state_conv_dim": inner, "state_groups": groups, "state_heads": heads,
               "state_head_dim": head_dim, "state_size": size, "state_conv_kernel": kernel}
        if model_type == "nemotron_h":  # SSM state in float32 unless the config says (models/config.py:713-732)
            out["state_precision"] = _DTYPES.get(str(cfg.get("mamba_ssm_cache_dtype", "float32")), "fp32")
    elif model_type in ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"):
        nk, nv = i("linear_num_key_heads"), i("linear_num_value_heads")  # gated_delta_net_state_shape
        dk, dv = i("linear_key_head_dim"), i("linear_value_head_dim")
        out = {"state_kind": "gated-delta-net", "state_conv_dim": 2 * nk * dk + nv * dv, "state_heads": nv,
               "state_head_dim": dv, "state_size": dk, "state_conv_kernel": i("linear_conv_kernel_dim")}
        if cfg.get("mamba_ssm_dtype") is not None:  # Qwen3.5 (models/config.py:853-866)
            out["state_precision"] = _DTYPES.get(str(cfg["mamba_ssm_dtype"]), "fp32")
    else:
        return {}
    if model_type == "falcon_h1":
        out["state_layers"] = layers
    elif kv_layers is None:
        raise ModelConfigError(where + "layer_types", f"{model_type} config: which layers hold attention is not given "
                                                      "(layer_types, layers_block_type or a period)")  # fmt: skip
    return out


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
_QUANT_AUX_RE = re.compile("|".join(map(re.escape, _QUANT_AUX)))
_WS = re.compile(rb"[ \t\n\r]*")
_QSTR = rb'"(?:[^"\\\x00-\x1f]++|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*+"'
_STR = re.compile(_QSTR)  # a JSON string, possessive: linear however long
# one weight_map entry, "tensor": "file" and the , or } after it: the file name (quoted) and which
_PAIR = re.compile(rb"[ \t\n\r]*" + _QSTR + rb"[ \t\n\r]*:[ \t\n\r]*(" + _QSTR + rb")[ \t\n\r]*([,}])")
_SCALAR = re.compile(rb"-?[0-9][0-9.eE+-]*|true|false|null")
_BRACKET_OR_STR = re.compile(rb'[\[\]{}"]')
# one tensor as the safetensors library writes it (serde_json, compact, in this key order): the fast path
_ENTRY = re.compile(rb'\{"dtype":"([A-Z0-9_]{1,16})","shape":\[((?:[0-9]{1,19}(?:,[0-9]{1,19}){0,7})?)\],'
                    rb'"data_offsets":\[[0-9]{1,20},[0-9]{1,20}\]\}')
JSON_DEPTH = 64  # nesting skipped in an index or header (real ones: 3)


class _Scan:
    """An incremental reader of a JSON object in bytes: members one at a time, each value skipped or parsed on
    its own, so a hostile file costs the bytes read and a loop that lets other threads run, never one
    json.loads of everything holding the interpreter for seconds."""

    def __init__(self, buf: bytes, what: str):
        self.buf, self.pos, self.what = buf, 0, what

    def fail(self, why: str) -> ModelConfigError:
        return ModelConfigError(self.what, f"not valid JSON: {why}")

    def ws(self) -> None:
        self.pos = _WS.match(self.buf, self.pos).end()  # type: ignore[union-attr]

    def take(self, ch: bytes) -> bool:
        self.ws()
        if self.buf.startswith(ch, self.pos):
            self.pos += 1
            return True
        return False

    def string(self) -> str:
        self.ws()
        m = _STR.match(self.buf, self.pos)
        if m is None:
            raise self.fail("expected a string")
        self.pos = m.end()
        raw = self.buf[m.start() + 1: m.end() - 1]
        try:
            return raw.decode("utf-8") if b"\\" not in raw else str(json.loads(m.group(0)))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise self.fail("a string that is not UTF-8") from None

    def skip(self, limit: int | None = None) -> None:
        """Past one value, any kind, without building it (nesting bounded by JSON_DEPTH, length by ``limit``)."""
        self.ws()
        start = self.pos
        if self.buf.startswith(b'"', self.pos):
            self.string()
            return
        if not self.buf.startswith((b"{", b"["), self.pos):
            m = _SCALAR.match(self.buf, self.pos)
            if m is None:
                raise self.fail("expected a value")
            self.pos = m.end()
            return
        depth = 0
        while True:
            m = _BRACKET_OR_STR.search(self.buf, self.pos)
            if m is None:
                raise self.fail("truncated")
            ch = m.group(0)
            if limit is not None and m.start() - start > limit:
                raise self.fail(f"a value longer than the {limit} bytes allowed")
            if ch == b'"':
                self.pos = m.start()
                self.string()
                continue
            self.pos = m.end()
            depth += 1 if ch in (b"{", b"[") else -1
            if depth > JSON_DEPTH:
                raise self.fail(f"nested deeper than {JSON_DEPTH}")
            if depth == 0:
                return

    def value(self, limit: int) -> Any:
        """The next value, parsed alone; at most ``limit`` bytes of it."""
        self.ws()
        start = self.pos
        self.skip(limit)
        if self.pos - start > limit:
            raise self.fail(f"a value longer than the {limit} bytes allowed")
        try:
            return json.loads(self.buf[start: self.pos])
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            raise self.fail("a malformed value") from None

    def members(self) -> Iterator[str]:
        """The keys of the object at the current position; the caller reads (or skips) each value."""
        if not self.take(b"{"):
            raise self.fail("expected a JSON object")
        if self.take(b"}"):
            return
        while True:
            key = self.string()
            if not self.take(b":"):
                raise self.fail("expected ':'")
            yield key
            if self.take(b","):
                continue
            if self.take(b"}"):
                return
            raise self.fail("expected ',' or '}'")

    def end(self) -> None:
        self.ws()
        if self.pos != len(self.buf):
            raise self.fail("data after the object")


def _read_header(tree: Tree, path: tuple[str, ...], within: Within) -> bytes:
    """The JSON header bytes of one .safetensors file (at most SAFETENSORS_HEADER_BYTES; its length is not echoed)."""
    shown = show(path)
    try:
        f = tree.open(path, within)
    except OSError as exc:
        raise _refused(exc, shown) from None
    try:
        raw = f.pread(8)
        if len(raw) != 8:
            raise ModelConfigError(shown, "truncated safetensors file (no header length)")
        (size,) = struct.unpack("<Q", raw)
        if size > SAFETENSORS_HEADER_BYTES:
            raise ModelConfigError(shown, f"safetensors header larger than the {SAFETENSORS_HEADER_BYTES >> 20} MiB "
                                          "allowed: not read")  # fmt: skip
        if size > f.stat.st_size - 8:
            raise ModelConfigError(shown, "truncated safetensors file (its header runs past the end)")
        header = f.pread(size, 8)
        if len(header) != size:
            raise ModelConfigError(shown, "truncated safetensors file (shorter than when opened)")
        return header
    except OSError as exc:
        raise _refused(exc, shown) from None
    finally:
        os.close(f.fd)


def safetensors_tensors(header: bytes, what: str) -> Iterator[tuple[str, str, tuple[int, ...]]]:
    """(name, dtype, shape) of each tensor in a safetensors header, read incrementally (``_Scan``)."""
    scan = _Scan(header, what)
    for name in scan.members():
        if name == "__metadata__":
            scan.skip()
            continue
        scan.ws()
        m = _ENTRY.match(header, scan.pos)
        if m is not None:
            scan.pos = m.end()
            dtype = m.group(1).decode()
            shape = tuple(int(d) for d in m.group(2).split(b",")) if m.group(2) else ()
        else:
            info = scan.value(TENSOR_ENTRY_BYTES)
            if not isinstance(info, dict):
                raise ModelConfigError(what, "a tensor entry that is not a JSON object")
            dtype, dims = str(info.get("dtype")), info.get("shape", [])
            if not isinstance(dims, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                     for d in dims):  # fmt: skip
                raise ModelConfigError(what, "a tensor shape that is not a list of sizes")
            shape = tuple(dims)
        if len(shape) > TENSOR_DIMS:
            raise ModelConfigError(what, f"a tensor with more than {TENSOR_DIMS} dimensions")
        n = 1
        for d in shape:
            n *= min(d, TENSOR_ELEMENTS + 1)
            if n > TENSOR_ELEMENTS:
                raise ModelConfigError(what, "a tensor larger than any checkpoint holds (over 2**50 elements)")
        yield name, dtype, shape
    scan.end()


def safetensors_header(path: str | os.PathLike[str], tree: Tree | None = None) -> dict[str, Any]:
    """The tensors of one .safetensors file: {name: {dtype, shape}} (``__metadata__`` left out)."""
    if tree is None:
        with Tree("/") as own:
            return safetensors_header(os.path.abspath(path), own)
    shown = os.fspath(path)
    try:
        fd, canonical, _ = tree.walk(shown)
        os.close(fd)
    except OSError as exc:
        raise _refused(exc, shown) from None
    header = _read_header(tree, canonical, None)
    return {name: {"dtype": dtype, "shape": list(shape)} for name, dtype, shape in
            safetensors_tensors(header, show(canonical))}


def _tensor_params(name: str, dtype: str, shape: tuple[int, ...], bits: int | None) -> int:
    """Logical parameters in one tensor: packed quantized weights unpacked, quantization constants skipped."""
    if _QUANT_AUX_RE.search(name):
        return 0
    n = 1
    for d in shape:
        n *= d
    if name.endswith(".qweight") and dtype == "I32" and bits:
        return n * (32 // bits)
    if dtype == "U8" and bits == 4:  # bitsandbytes 4-bit: two weights per byte
        return n * 2
    return n


def _tensor_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * _ST_BYTES.get(dtype, 0)


def _read_index(tree: Tree, path: tuple[str, ...], within: Within) -> tuple[list[str], Any]:
    """(the shard file names of model.safetensors.index.json's weight_map, metadata.total_size or None), scanned
    incrementally: a weight_map of 100 k entries keeps only its few distinct file names."""
    shown = show(path)
    try:
        raw = tree.read(path, MODEL_INDEX_BYTES, within)
    except OSError as exc:
        raise _refused(exc, shown) from None
    scan = _Scan(raw, shown)
    shards: set[str] = set()
    total = None
    found = False
    for key in scan.members():
        if key == "weight_map":
            found = True
            if not scan.take(b"{"):
                raise ModelConfigError("weight_map", f"{shown} has no weight_map object")
            seen: set[bytes] = set()  # the file names as quoted in the file: compared as bytes, decoded once
            closed = scan.take(b"}")
            while not closed:
                m = _PAIR.match(raw, scan.pos)
                if m is None:
                    raise scan.fail('a weight_map entry that is not "tensor": "file"')
                scan.pos = m.end()
                if m.group(1) not in seen:
                    seen.add(m.group(1))
                    if len(seen) > MODEL_SHARDS:
                        raise ModelConfigError("weight_map", f"{shown} names more than {MODEL_SHARDS} files")
                closed = m.group(2) == b"}"
            for quoted in seen:
                name = _Scan(quoted, shown).string()
                if "/" in name or name in ("", ".", "..") or "\0" in name or len(name) > 255:
                    raise ModelConfigError("weight_map", f"{shown} names a file outside the model directory: "
                                                         "not read")  # fmt: skip
                shards.add(name)
        elif key == "metadata":
            meta = scan.value(INDEX_METADATA_BYTES)
            if isinstance(meta, dict):
                total = meta.get("total_size")
        else:
            scan.skip()
    scan.end()
    if not found:
        raise ModelConfigError("weight_map", f"{shown} has no weight_map object")
    return sorted(shards), total


def _safetensors_params(tree: Tree, directory: tuple[str, ...], fields: dict[str, Any],
                        within: Within) -> tuple[int | None, str]:
    """(parameters, where from); with the weight files present also sets fields["weight_bytes"]."""
    precision = str(fields.get("precision", ""))
    bits = 4 if precision == "int4" else 8 if precision == "int8" else None
    index_path = (*directory, "model.safetensors.index.json")
    files: list[tuple[str, ...]] = []
    total_size = None

    def exists(path: tuple[str, ...]) -> bool:
        try:
            return tree.kind(path, within) != ""
        except OSError as exc:  # refused: a symlink out of the directory, a directory the user cannot search
            raise _refused(exc, show(path)) from None

    has_index = exists(index_path)
    if has_index:
        names, total_size = _read_index(tree, index_path, within)
        files = [(*directory, name) for name in names]
    elif exists((*directory, "model.safetensors")):
        files = [(*directory, "model.safetensors")]
    present = bool(files) and all(exists(f) for f in files)
    if present:
        total = stored = 0
        for f in files:
            for name, dtype, shape in safetensors_tensors(_read_header(tree, f, within), show(f)):
                total += _tensor_params(name, dtype, shape, bits)
                stored += _tensor_bytes(dtype, shape)
        if stored and precision != "fp32":  # runtimes serve FP32 checkpoints in 16 bits: not as stored
            fields["weight_bytes"] = stored
        return total, "safetensors headers"
    if has_index and "quantization" not in fields and precision in ("bf16", "fp16", "fp32", "fp8"):
        if isinstance(total_size, int) and not isinstance(total_size, bool) and 0 < total_size < 1 << 60:
            per = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}[precision]
            return total_size // per, "safetensors index"
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


# refs/main holds a commit hash (40 hexadecimal digits): one snapshot directory's name, never a path
_REVISION = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")


def find_cached_model(name: str, env: Mapping[str, str] | None = None, tree: Tree | None = None) -> Path:
    """The snapshot directory of ``ORG/NAME`` in the local cache (refs/main first, else the newest one).
    ``tree``: the files as a process sees them (its root and permissions; ``env``'s paths are in that root)."""
    parts = name.strip().split("/")
    if len(parts) != 2 or not all(parts) or any(p in (".", "..") for p in parts):
        raise ModelConfigError("--model", f"expected ORG/NAME as on the Hugging Face hub; got {name!r}")
    if tree is None:
        with Tree("/") as own:
            return find_cached_model(name, env, own)
    searched = []
    for root in cache_dirs(env):
        repo = str(root / f"models--{parts[0]}--{parts[1]}")
        searched.append(repo)
        try:
            if tree.kind(repo) != "dir":
                continue
            repo_dir = tree.resolve_dir(repo)
            ref = (*repo_dir, "refs", "main")
            if tree.kind(ref, repo_dir) == "file":
                revision = tree.read(ref, REF_BYTES, repo_dir).decode("ascii", "replace").strip()
                if not _REVISION.fullmatch(revision):
                    raise ModelConfigError(show(ref), "does not hold a revision (a commit hash): not followed")
                snap = (*repo_dir, "snapshots", revision)
                if tree.kind((*snap, "config.json"), repo_dir) != "":
                    return Path(show(snap))
            snaps: list[tuple[float, tuple[str, ...]]] = []
            snapshots = (*repo_dir, "snapshots")
            if tree.kind(snapshots, repo_dir) == "dir":
                for entry in tree.listdir(snapshots, SNAPSHOTS):
                    snap = (*snapshots, entry)
                    if tree.kind((*snap, "config.json"), repo_dir) != "":
                        fd, _, st = tree.walk(snap, repo_dir, final="dir")
                        os.close(fd)
                        snaps.append((st.st_mtime, snap))
        except OSError as exc:
            raise _refused(exc, repo) from None
        if snaps:
            return Path(show(max(snaps)[1]))
        raise ModelConfigError("--model", f"{repo} holds no snapshot with a config.json")
    raise NotCached("--model", f"{name} is not in the local Hugging Face cache (looked in "
                                      f"{', '.join(searched)}; set HF_HUB_CACHE or HF_HOME, or use --model-config PATH); "
                                      "nothing is downloaded")  # fmt: skip


__all__ = ["ModelConfig", "ModelConfigError", "NotCached", "cache_dirs", "find_cached_model", "model_config_from",
           "read_model_config", "safetensors_header", "safetensors_tensors"]  # fmt: skip
