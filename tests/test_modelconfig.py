"""The Hugging Face config.json reader: real architectures in, profile fields out; bad files named."""

from __future__ import annotations

import json
import struct

import pytest

from headroom.workload.modelconfig import ModelConfigError, find_cached_model, read_model_config
from headroom.workload.profiles import profile_from_dict
from headroom.workload.sizing import architecture_params, estimate

from conftest import ROOT

HF = ROOT / "tests" / "fixtures" / "hf"
GIB = 2**30


def fields(name):
    return read_model_config(HF / name).fields


def profile(name, **extra):
    d = {"name": "m", "kind": "inference", "context": 8192, **fields(name), **extra}
    return profile_from_dict(d, attributable=False)


@pytest.mark.parametrize(
    ("name", "arch", "layout"),
    [
        ("llama-3-8b", {"layers": 32, "heads": 32, "kv_heads": 8, "hidden_size": 4096, "vocab_size": 128256}, "dense"),
        ("llama-3-70b", {"layers": 80, "heads": 64, "kv_heads": 8, "hidden_size": 8192}, "dense"),
        ("mistral-7b-v0.1", {"sliding_window": 4096, "sliding_window_layers": 32}, "sliding-window"),
        ("qwen2.5-7b", {"layers": 28, "kv_heads": 4, "hidden_size": 3584}, "dense"),  # use_sliding_window false
        ("qwen3-0.6b", {"heads": 16, "head_dim": 128, "hidden_size": 1024, "tie_embeddings": True}, "dense"),
        ("gemma-2-9b", {"head_dim": 256, "sliding_window": 4096, "sliding_window_layers": 21}, "sliding-window"),
        ("gemma-3-27b", {"layers": 62, "sliding_window": 1024, "sliding_window_layers": 52}, "sliding-window"),
        ("mixtral-8x7b", {"experts": 8, "experts_per_token": 2, "moe_intermediate_size": 14336}, "moe"),
        ("deepseek-v3", {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "experts": 256}, "moe,mla"),
        ("jamba-v0.1", {"kv_layers": 4, "experts": 16}, "moe,hybrid"),
        ("bert-base", {"layers": 12, "hidden_size": 768}, "encoder"),
    ],
)  # fmt: skip
def test_real_architectures_are_read(name, arch, layout):
    mc = read_model_config(HF / name / "config.json")
    for key, value in arch.items():
        assert mc.fields["architecture"][key] == value, key
    assert mc.layout == layout
    profile(name)  # the fields pass the profile validation


def test_architecture_gives_the_published_parameter_counts():
    assert architecture_params(profile("llama-3-8b").architecture) == 8_030_261_248
    assert abs(architecture_params(profile("llama-3-70b").architecture) - 70.55e9) / 70.55e9 < 0.001
    assert abs(architecture_params(profile("mixtral-8x7b").architecture) - 46.7e9) / 46.7e9 < 0.01
    assert abs(architecture_params(profile("gemma-2-9b").architecture) - 9.24e9) / 9.24e9 < 0.005  # tied by default
    assert abs(architecture_params(profile("qwen2.5-7b").architecture) - 7.62e9) / 7.62e9 < 0.005


def test_deepseek_v3_parameters_come_from_its_mla_and_moe_config():
    mc = read_model_config(HF / "deepseek-v3")
    assert mc.params_from == "config (MLA layout)"
    assert abs(mc.fields["params"] - 671.0e9) / 671.0e9 < 0.001  # the published 671B (without the MTP module)


def test_quantization_and_dtype_come_from_the_config():
    f = fields("llama-3-8b-gptq")
    assert (f["precision"], f["compute_precision"], f["quantization"]) == ("int4", "fp16", {"method": "gptq",
                                                                                           "group_size": 128})
    assert fields("deepseek-v3")["precision"] == "fp8"


def _write_safetensors(path, tensors):
    header = json.dumps({name: {"dtype": dt, "shape": shape, "data_offsets": [0, 0]}
                         for name, (dt, shape) in tensors.items()}).encode()  # fmt: skip
    path.write_bytes(struct.pack("<Q", len(header)) + header)


def test_params_are_exact_from_safetensors_headers_with_quantized_tensors_unpacked(tmp_path):
    cfg = json.loads((HF / "llama-3-8b-gptq" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    _write_safetensors(tmp_path / "model-1.safetensors", {
        "model.embed_tokens.weight": ("F16", [128256, 4096]),
        "model.layers.0.mlp.up_proj.qweight": ("I32", [512, 14336]),  # 4096 x 14336 packed 8 per int32
        "model.layers.0.mlp.up_proj.scales": ("F16", [32, 14336]),
        "model.layers.0.mlp.up_proj.qzeros": ("I32", [32, 1792]),
    })  # fmt: skip
    _write_safetensors(tmp_path / "model-2.safetensors", {"lm_head.weight": ("F16", [128256, 4096])})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 1}, "weight_map": {
        "model.embed_tokens.weight": "model-1.safetensors", "lm_head.weight": "model-2.safetensors"}}))
    mc = read_model_config(tmp_path)
    assert mc.params_from == "safetensors headers"
    assert mc.fields["params"] == 2 * 128256 * 4096 + 4096 * 14336
    stored = 2 * 128256 * 4096 * 2 + 512 * 14336 * 4 + 32 * 14336 * 2 + 32 * 1792 * 4  # as the tensors lie on disk
    assert mc.fields["weight_bytes"] == stored
    p = profile_from_dict({"name": "m", "kind": "inference", "context": 8192, **mc.fields}, attributable=False)
    assert estimate(p, gpu_memory_bytes=80 * GIB).component("weights") == stored  # weights as loaded


def test_index_total_size_gives_params_when_the_shards_are_absent(tmp_path):
    (tmp_path / "config.json").write_text((HF / "llama-3-8b" / "config.json").read_text())
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 16_060_522_496}, "weight_map": {"a": "model-00001-of-00004.safetensors"}}))
    mc = read_model_config(tmp_path)
    assert (mc.params_from, mc.fields["params"]) == ("safetensors index", 8_030_261_248)


@pytest.mark.parametrize(
    ("config", "field", "fragment"),
    [
        ({"hidden_size": 4096, "num_attention_heads": 32}, "num_hidden_layers", "required"),
        ({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "torch_dtype": "float64"},
         "torch_dtype", "unknown dtype"),
        ({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2,
          "quantization_config": {"quant_method": "hqq"}}, "quantization_config.quant_method", "'hqq' is not modelled"),
        ({"num_hidden_layers": "two", "hidden_size": 64, "num_attention_heads": 2}, "num_hidden_layers",
         "positive integer"),
        ({"model_type": "mamba", "num_hidden_layers": 2, "hidden_size": 64}, "model_type", "attention-free"),
        ({"is_encoder_decoder": True, "model_type": "t5"}, "is_encoder_decoder", "encoder-decoder"),
    ],
)  # fmt: skip
def test_unsupported_or_broken_configs_name_the_field(tmp_path, config, field, fragment):
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelConfigError) as exc:
        read_model_config(tmp_path)
    assert exc.value.field == field and fragment in str(exc.value)


def test_not_json_and_missing_file_are_named(tmp_path):
    (tmp_path / "config.json").write_text("{nope")
    with pytest.raises(ModelConfigError, match="not valid JSON"):
        read_model_config(tmp_path)
    with pytest.raises(ModelConfigError, match=r"no config\.json"):
        read_model_config(tmp_path / "absent")


def test_the_local_hf_cache_is_searched_offline(tmp_path):
    repo = tmp_path / "hub" / "models--meta-llama--Meta-Llama-3-8B"
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text((HF / "llama-3-8b" / "config.json").read_text())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123\n")
    assert find_cached_model("meta-llama/Meta-Llama-3-8B", {"HF_HOME": str(tmp_path)}) == snap
    assert find_cached_model("meta-llama/Meta-Llama-3-8B", {"HF_HUB_CACHE": str(tmp_path / "hub")}) == snap
    with pytest.raises(ModelConfigError, match="not in the local Hugging Face cache"):
        find_cached_model("meta-llama/Other", {"HF_HOME": str(tmp_path)})
    with pytest.raises(ModelConfigError, match="ORG/NAME"):
        find_cached_model("llama", {"HF_HOME": str(tmp_path)})


def test_sliding_window_layers_hold_at_most_the_window():
    gemma = profile("gemma-2-9b", precision="bf16", compute_precision="bf16")
    e = estimate(gemma, gpu_memory_bytes=80 * GIB)
    per_layer = 2 * 8 * 256 * 2
    assert e.component("kv_cache") == 21 * per_layer * 8192 + 21 * per_layer * 4096


def test_mla_caches_one_latent_per_token_per_layer():
    e = estimate(profile("deepseek-v3"), gpu_memory_bytes=141 * GIB)
    assert e.kv_bytes_per_token == 61 * (512 + 64) * 2  # BF16 latent, no per-head K/V


def test_a_hybrid_model_counts_its_attention_layers_and_its_recurrent_state():
    jamba = profile("jamba-v0.1", params="52B")
    e = estimate(jamba, gpu_memory_bytes=80 * GIB)
    assert e.kv_bytes_per_token == 4 * 2 * 8 * 128 * 2  # 4 attention layers of 32
    # 28 Mamba layers, each a (8192, 3) conv + (8192, 16) SSM state in bf16 per sequence
    state = 28 * (8192 * 3 + 8192 * 16) * 2
    assert e.component("kv_cache") == 8192 * e.kv_bytes_per_token + state
    assert any("KV layout: 4 KV layers" in n and "28 mamba1 layers" in n for n in e.notes)
    from headroom.workload.sizing import SizingError

    with pytest.raises(SizingError, match="this version's state pages were not read") as exc:
        estimate(profile("jamba-v0.1", params="52B", runtime={"name": "vllm", "version": "0.10.1"}),
                 gpu_memory_bytes=80 * GIB)  # fmt: skip
    assert exc.value.missing == ("runtime.version",)


@pytest.mark.parametrize(
    ("name", "arch"),
    [
        # NemotronH: hybrid_override_pattern M (Mamba2) / * (attention) / - (MLP) per layer
        ("nemotron-nano-9b-v2", {"kv_layers": 4, "state_layers": 27, "state_kind": "mamba2", "state_conv_dim": 10240,
                                 "state_groups": 8, "state_heads": 128, "state_head_dim": 80, "state_size": 128,
                                 "state_conv_kernel": 4, "state_precision": "fp32"}),
        # Qwen3-Next: full_attention_interval 4; gated delta net conv 2 x 16 x 128 + 32 x 128
        ("qwen3-next-80b-a3b", {"kv_layers": 12, "state_kind": "gated-delta-net", "state_conv_dim": 8192,
                                "state_heads": 32, "state_head_dim": 128, "state_size": 128, "state_conv_kernel": 4}),
        ("jamba-v0.1", {"kv_layers": 4, "state_kind": "mamba1", "state_conv_dim": 8192, "state_heads": 8192,
                        "state_head_dim": 1, "state_size": 16, "state_conv_kernel": 4}),
    ],
)  # fmt: skip
def test_hybrid_configs_give_their_recurrent_state_shape(name, arch):
    got = fields(name)["architecture"]
    assert {k: got.get(k) for k in arch} == arch
    assert "hybrid" in read_model_config(HF / name).layout


def test_nemotron_h_counts_only_its_attention_layers_in_the_kv_cache():
    """Before, the pattern was not read and all 56 layers were counted as attention: 14 x the KV cache."""
    e = estimate(profile("nemotron-nano-9b-v2", params="8.9B"), gpu_memory_bytes=80 * GIB)
    assert e.kv_bytes_per_token == 4 * 2 * 8 * 128 * 2


def test_parallel_hybrid_and_unknown_recurrent_layouts(tmp_path):
    """Falcon-H1 runs attention and Mamba2 side by side in every layer (vLLM's falcon_h1.py); a config with
    recurrent fields of a family not modelled is refused naming it, not sized as a dense model. (Minimal fields
    written for the test, not a published config.)"""
    falcon = {"model_type": "falcon_h1", "num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 65537, "mamba_d_state": 256,
              "mamba_d_conv": 4, "mamba_n_groups": 1, "mamba_n_heads": 48, "mamba_d_head": 64, "mamba_d_ssm": 3072}
    (tmp_path / "config.json").write_text(json.dumps(falcon))
    arch = read_model_config(tmp_path).fields["architecture"]
    assert (arch["kv_layers"], arch["state_layers"], arch["state_conv_dim"]) == (24, 24, 3072)
    (tmp_path / "config.json").write_text(json.dumps(falcon | {"model_type": "some_mamba_hybrid"}))
    with pytest.raises(ModelConfigError, match=r"'some_mamba_hybrid' has recurrent .* not modelled"):
        read_model_config(tmp_path)
