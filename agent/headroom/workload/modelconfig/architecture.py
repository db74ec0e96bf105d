"""The architecture rules: a parsed config.json into the profile's architecture, precision and quantization.

``model_config_from`` reads the fields each family names its dimensions by (aliases, ``text_config``), and the
layouts beyond dense attention: mixture of experts, MLA (DeepSeek), sliding-window layers, hybrid models'
attention layers and recurrent state (Jamba, NemotronH, Granite, Falcon-H1, Qwen3-Next), encoders; then
torch_dtype and quantization_config, and the parameters (safetensors, else MLA's formula, else the memory model).
"""

from __future__ import annotations

from headroom.jsontypes import JsonDoc, JsonMapping, JsonValue, YamlDict
from headroom.safeio import Tree, Within
from headroom.workload.modelconfig.fields import (
    MAX_CHECKPOINT_BYTES,
    MAX_PARAMS,
    MAX_WIDTH,
    ModelConfig,
    ModelConfigError,
    _first,
    _int,
    _quote,
)
from headroom.workload.modelconfig.safetensors import _safetensors_params

_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}
_ENCODERS = {"bert", "roberta", "xlm-roberta", "distilbert", "deberta", "deberta-v2", "electra", "mpnet",
             "nomic_bert", "modernbert", "camembert", "albert"}  # fmt: skip
_ATTENTION_FREE = {"mamba", "mamba2", "rwkv", "rwkv5", "rwkv6"}
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gemma3_text", "bert", "roberta", "xlm-roberta"}


def model_config_from(top: JsonMapping, source: str, directory: tuple[str, ...] | None = None,
                      tree: Tree | None = None, within: Within = None) -> ModelConfig:
    """A ``ModelConfig`` from config.json's parsed content; ``directory`` (in ``tree``) holds its safetensors (None:
    none, the parameters come from the architecture). ``source`` names where the values came from."""
    if top.get("is_encoder_decoder"):
        raise ModelConfigError("is_encoder_decoder", f"encoder-decoder models ({top.get('model_type')}) are not "
                                                     "modelled: their cross-attention KV cache has another layout")  # fmt: skip
    # multimodal and some newer configs nest the language model's fields in text_config
    text_config = top.get("text_config")
    cfg: JsonMapping = text_config if isinstance(text_config, dict) else top
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
    arch: YamlDict = {"layers": layers, "heads": heads, "hidden_size": hidden}
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
        arch["kv_lora_rank"] = _int(cfg, where, "kv_lora_rank", required=True)  # given: required never raises
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
            every = _int(cfg, where, "sliding_window_pattern") or 6  # every every-th layer is global
            sliding = layers - layers // every
        else:
            sliding = layers
        if sliding:
            arch["sliding_window"] = window
            arch["sliding_window_layers"] = sliding
            layout.append("sliding-window")

    # hybrid models: only some layers hold a KV cache
    kv_layers: int | None = None
    block_types = cfg.get("layers_block_type")
    if isinstance(block_types, list):
        kv_layers = sum(1 for t in block_types if str(t) == "attention")
    elif cfg.get("attn_layer_period") is not None:
        period, offset = _int(cfg, where, "attn_layer_period", required=True), _int(cfg, where, "attn_layer_offset", minimum=0) or 0
        kv_layers = sum(1 for i in range(layers) if i % period == offset)
    elif cfg.get("full_attention_interval") is not None:
        kv_layers = layers // _int(cfg, where, "full_attention_interval", required=True)
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
    fields: YamlDict = {"architecture": arch}
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


def _mla_params(cfg: JsonMapping, arch: JsonMapping, where: str = "") -> int | None:
    """DeepSeek V2/V3 parameters from the config: low-rank query and latent KV projections, dense layers
    before ``first_k_dense_replace``, routed + shared experts and the router after, untied embeddings."""
    h, layers, heads, vocab = arch["hidden_size"], arch["layers"], arch["heads"], arch.get("vocab_size")
    def optional(key: str) -> int | None:  # an integer bounded like the others; None when it is not one
        return _int(cfg, where, key, minimum=0) if isinstance(cfg.get(key), int) else None

    nope, rope, v = optional("qk_nope_head_dim"), arch["qk_rope_head_dim"], optional("v_head_dim")
    kv_rank, q_rank = arch["kv_lora_rank"], arch.get("q_lora_rank")
    if nope is None or v is None or not isinstance(vocab, int):
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
    total: int = layers * (attn + 2 * h) + dense_layers * dense + (layers - dense_layers) * moe + embeddings + h
    return total


def _is_encoder_architecture(architectures: JsonValue) -> bool:
    if not isinstance(architectures, list) or not architectures:
        return False
    names = [str(a) for a in architectures]
    if any(n.endswith(("ForCausalLM", "ForConditionalGeneration", "LMHeadModel")) for n in names):
        return False
    return all(n.endswith(("ForMaskedLM", "ForSequenceClassification", "ForTokenClassification")) for n in names)


# config keys that only recurrent (state-space / linear-attention) layers have
_STATE_MARKERS = ("mamba_d_state", "ssm_state_size", "linear_num_value_heads", "hybrid_override_pattern",
                  "mamba_n_heads", "mamba_num_heads", "attn_type_list", "linear_attn_config")  # fmt: skip


def _recurrent_state(cfg: JsonMapping, where: str, model_type: str | None, layers: int, hidden: int,
                     kv_layers: int | None) -> YamlDict:  # fmt: skip
    """The profile's state_* fields for the hybrid families whose state shape vLLM 0.32 builds from these fields
    (model_executor/models/<family>.py ``get_mamba_state_shape_from_config``); {} for any other config."""
    def i(*keys: str, default: int | None = None) -> int:
        v = _int(cfg, where, *keys, required=default is None)
        if v is not None:
            return v
        assert default is not None  # no default: required, so _int raised
        return default

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


def _precision_fields(cfg: JsonMapping, top: JsonMapping, where: str) -> YamlDict:
    """precision / quantization profile keys from torch_dtype and quantization_config."""
    out: YamlDict = {}
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
        spec: YamlDict = {"method": method}
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
        config_groups = q.get("config_groups")
        groups: JsonDoc = config_groups if isinstance(config_groups, dict) else {}
        weights: list[JsonDoc] = [g["weights"] for g in groups.values() if isinstance(g, dict) and isinstance(g.get("weights"), dict)]
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
