"""Workload profiles: valid ones load into typed values; every bad value and impossible combination is
reported with its field path, and all of them at once."""

from __future__ import annotations

import copy

import pytest

from headroom.workload.profiles import (
    KINDS,
    Kind,
    Optimizer,
    Precision,
    ProfileError,
    ProfileErrors,
    Quantization,
    format_path,
    profile_from_dict,
)

SERVING = {
    "name": "chat-llama",
    "kind": "inference",
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "version": "2024-07"},
    "runtime": {"name": "vLLM", "version": "0.8.5", "gpu_memory_utilization": 0.9},
    "params": "8B",
    "precision": "bf16",
    "kv_cache_precision": "fp8",
    "architecture": {
        "layers": 32, "heads": 32, "kv_heads": 8, "head_dim": 128, "hidden_size": 4096,
        "intermediate_size": 14336, "vocab_size": 128256,
    },
    "context": {"typical": 2048, "max": 8192},
    "output_tokens": 512,
    "concurrency": 16,
    "parallel": {"tensor": 2},
    "gpus": [0, "GPU-8f1c2d3e-aaaa-bbbb-cccc-0123456789ab"],
    "match": {"cmdline": r"vllm\s+serve", "systemd_unit": "vllm.service"},
    "endpoint": "http://127.0.0.1:8000/metrics",
    "cost_per_gpu_hour": 2.5,
}  # fmt: skip

QLORA = {
    "name": "tune",
    "kind": "finetune-qlora",
    "params": 7e9,
    "architecture": {"layers": 32, "heads": 32, "hidden_size": 4096, "intermediate_size": 11008},
    "context": 2048,
    "training": {
        "optimizer": "adamw-8bit",
        "micro_batch": 4,
        "batch_size": 64,
        "gradient_checkpointing": True,
    },
    "lora": {"rank": 16, "alpha": 32, "target_modules": ["q_proj", "v_proj"]},
    "dataloader_workers": 8,
    "match": {"exe": "python3"},
}


def with_(base: dict, **changes) -> dict:
    """A deep copy of base with top-level keys replaced (None removes the key)."""
    d = copy.deepcopy(base)
    for k, v in changes.items():
        if v is None:
            d.pop(k, None)
        else:
            d[k] = v
    return d


def errors_of(d) -> list[ProfileError]:
    with pytest.raises(ProfileErrors) as exc:
        profile_from_dict(d)
    return exc.value.errors


def paths_of(d) -> list[tuple]:
    return [e.path for e in errors_of(d)]


def test_a_full_serving_profile_loads_into_typed_values():
    p = profile_from_dict(SERVING)
    assert p.name == "chat-llama"
    assert p.kind is Kind.INFERENCE
    assert p.params == 8_000_000_000
    assert p.precision is Precision.BF16
    assert p.kv_cache_precision is Precision.FP8
    assert p.runtime.name == "vllm" and p.runtime.is_vllm and p.runtime.gpu_memory_utilization == 0.9
    assert p.architecture.kv_heads == 8
    assert (p.context.typical, p.context.max) == (2048, 8192)
    assert p.parallel.tensor == 2 and p.parallel.gpus == 2
    assert p.gpus == (0, "GPU-8f1c2d3e-aaaa-bbbb-cccc-0123456789ab")
    assert p.match.cmdline == r"vllm\s+serve" and p.match.systemd_unit == "vllm.service"
    assert p.cost_per_gpu_hour == 2.5


def test_a_qlora_profile_defaults_to_nf4_with_double_quantization():
    p = profile_from_dict(QLORA)
    assert p.kind.is_adapter
    assert p.quantization.method is Quantization.NONE  # as declared
    assert p.effective_quantization.method is Quantization.NF4
    assert p.effective_quantization.double_quant is True
    assert p.weight_precision is Precision.INT4
    assert p.training.optimizer is Optimizer.ADAMW_8BIT
    assert p.lora.target_modules == ("q_proj", "v_proj")
    assert p.lora.precision is Precision.FP32
    assert p.context.max == 2048


@pytest.mark.parametrize("params", ["7B", "7e9", "70000000000", 7e9, 7_000_000_000])
def test_parameter_count_in_every_written_form(params):
    p = profile_from_dict(with_(SERVING, params=params))
    assert p.params in (7_000_000_000, 70_000_000_000)


def test_a_minimal_profile_needs_only_name_kind_and_attribution():
    p = profile_from_dict({"name": "x", "kind": "cpu-inference", "match": {"exe": "llama-server"}})
    assert p.kind is Kind.CPU_INFERENCE and p.params is None and p.training is None


def test_string_shorthands_for_model_runtime_and_quantization():
    p = profile_from_dict(with_(SERVING, model="Qwen/Qwen2.5-7B", runtime="TGI", quantization="awq",
                                precision="int4", kv_cache_precision=None))  # fmt: skip
    assert p.model.name == "Qwen/Qwen2.5-7B" and p.runtime.name == "tgi"
    assert p.quantization.method is Quantization.AWQ
    assert p.effective_kv_cache_precision is Precision.BF16  # compute precision of a 4-bit model


# (situation, changes to SERVING or QLORA, expected path, message fragment)
BAD_VALUES = [
    ("name missing", SERVING, {"name": None}, ("name",), "required"),
    ("name with spaces", SERVING, {"name": "my chat"}, ("name",), "must match"),
    ("kind unknown", SERVING, {"kind": "serving"}, ("kind",), "expected one of inference"),
    ("kind missing", SERVING, {"kind": None}, ("kind",), "required"),
    ("params not a count", SERVING, {"params": "7X"}, ("params",), "unknown suffix"),
    ("params zero", SERVING, {"params": 0}, ("params",), "must be > 0"),
    ("precision unknown", SERVING, {"precision": "fp64"}, ("precision",), "fp32, fp16, bf16, fp8, int8, int4"),
    ("kv precision unknown", SERVING, {"kv_cache_precision": "fp4"}, ("kv_cache_precision",), "expected one of"),
    ("compute precision quantized", SERVING, {"compute_precision": "int8"}, ("compute_precision",), "fp32, fp16, bf16"),
    ("quantization unknown", SERVING, {"quantization": "ggml"}, ("quantization",), "none, gptq, awq, nf4"),
    ("quantization without method", SERVING, {"quantization": {"group_size": 128}}, ("quantization", "method"), "required"),
    ("group size on nf4", SERVING, {"quantization": {"method": "nf4", "group_size": 64}, "precision": "int4"},
     ("quantization", "group_size"), "applies to gptq and awq"),
    ("double quant on gptq", SERVING, {"quantization": {"method": "gptq", "double_quant": True}, "precision": "int4"},
     ("quantization", "double_quant"), "applies to nf4"),
    ("layers zero", SERVING, {"architecture": {"layers": 0}}, ("architecture", "layers"), "must be >= 1"),
    ("layers as text", SERVING, {"architecture": {"layers": "32"}}, ("architecture", "layers"), "expected an integer"),
    ("unknown architecture key", SERVING, {"architecture": {"n_layer": 32}}, ("architecture", "n_layer"), "unknown key"),
    ("context as 8k", SERVING, {"context": "8k"}, ("context",), "ambiguous"),
    ("context zero", SERVING, {"context": {"max": 0}}, ("context", "max"), "must be >= 1"),
    ("concurrency zero", SERVING, {"concurrency": 0}, ("concurrency",), "must be >= 1"),
    ("concurrency bool", SERVING, {"concurrency": True}, ("concurrency",), "expected an integer"),
    ("runtime version as float", SERVING, {"runtime": {"name": "vllm", "version": 0.8}}, ("runtime", "version"),
     'quote it'),
    ("utilization above one", SERVING, {"runtime": {"name": "vllm", "gpu_memory_utilization": 1.2}},
     ("runtime", "gpu_memory_utilization"), "must be <= 1"),
    ("utilization zero", SERVING, {"runtime": {"name": "vllm", "gpu_memory_utilization": 0}},
     ("runtime", "gpu_memory_utilization"), "must be > 0"),
    ("negative gpu index", SERVING, {"gpus": [-1]}, ("gpus", 0), ">= 0"),
    ("gpu uuid malformed", SERVING, {"gpus": [0, "nvidia0"]}, ("gpus", 1), "not a GPU UUID"),
    ("gpu listed twice", SERVING, {"gpus": [0, 0]}, ("gpus", 1), "listed twice"),
    ("gpus not a list", SERVING, {"gpus": 0}, ("gpus",), "expected a list"),
    ("cmdline regex broken", SERVING, {"match": {"cmdline": "vllm(serve"}}, ("match", "cmdline"), "invalid regular expression"),
    ("exe is a path", SERVING, {"match": {"exe": "/usr/bin/python3"}}, ("match", "exe"), "base name"),
    ("pid file relative", SERVING, {"match": {"pid_file": "run/vllm.pid"}}, ("match", "pid_file"), "absolute"),
    ("container id not hex", SERVING, {"match": {"container_id": "my-container"}}, ("match", "container_id"), "hex"),
    ("unknown match key", SERVING, {"match": {"process": "vllm"}}, ("match", "process"), "unknown key"),
    ("endpoint without scheme", SERVING, {"endpoint": "localhost:8000/metrics"}, ("endpoint",), "http:// or https://"),
    ("negative cost", SERVING, {"cost_per_gpu_hour": -1}, ("cost_per_gpu_hour",), ">= 0"),
    ("parallel zero", SERVING, {"parallel": {"tensor": 0}}, ("parallel", "tensor"), "must be >= 1"),
    ("negative workers", QLORA, {"dataloader_workers": -1}, ("dataloader_workers",), ">= 0"),
    ("optimizer unknown", QLORA, {"training": {"optimizer": "lion"}}, ("training", "optimizer"), "adamw, adam"),
    ("gradients in int8", QLORA, {"training": {"gradient_precision": "int8"}}, ("training", "gradient_precision"),
     "fp32, fp16, bf16"),
    ("checkpointing as yes-string", QLORA, {"training": {"gradient_checkpointing": "yes"}},
     ("training", "gradient_checkpointing"), "true or false"),
    ("lora rank zero", QLORA, {"lora": {"rank": 0}}, ("lora", "rank"), "must be >= 1"),
    ("lora alpha zero", QLORA, {"lora": {"rank": 8, "alpha": 0}}, ("lora", "alpha"), "must be > 0"),
    ("lora module twice", QLORA, {"lora": {"rank": 8, "target_modules": ["q_proj", "q_proj"]}},
     ("lora", "target_modules", 1), "listed twice"),
    ("lora modules empty", QLORA, {"lora": {"rank": 8, "target_modules": []}}, ("lora", "target_modules"), "non-empty"),
    ("unknown top-level key", SERVING, {"paramz": "7B"}, ("paramz",), "did you mean 'params'"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("situation", "base", "changes", "path", "fragment"), BAD_VALUES, ids=[b[0] for b in BAD_VALUES]
)
def test_bad_values_are_reported_at_their_field(situation, base, changes, path, fragment):
    errors = errors_of(with_(base, **changes))
    assert [e.path for e in errors] == [path], [str(e) for e in errors]
    assert fragment in errors[0].message


# impossible combinations: (situation, base, changes, expected path, message fragment)
IMPOSSIBLE = [
    ("LoRA rank on an inference profile", SERVING, {"lora": {"rank": 16}}, ("lora",), "finetune-lora"),
    ("training settings on inference", SERVING, {"training": {"optimizer": "adamw"}}, ("training",), "do not apply"),
    ("more KV heads than heads", SERVING,
     {"architecture": {"layers": 32, "heads": 8, "kv_heads": 32}}, ("architecture", "kv_heads"), "exceeds heads 8"),
    ("heads not a multiple of KV heads", SERVING,
     {"architecture": {"layers": 32, "heads": 32, "kv_heads": 5}}, ("architecture", "kv_heads"), "multiple of kv_heads"),
    ("MLA half declared", SERVING,
     {"architecture": {"layers": 61, "heads": 128, "kv_lora_rank": 512}}, ("architecture", "qk_rope_head_dim"),
     "needs both kv_lora_rank and qk_rope_head_dim"),
    ("sliding-window layers without a window", SERVING,
     {"architecture": {"layers": 32, "heads": 32, "sliding_window_layers": 16}}, ("architecture", "sliding_window"),
     "window size is not"),
    ("more KV layers than layers", SERVING,
     {"architecture": {"layers": 32, "heads": 32, "kv_layers": 40}}, ("architecture", "kv_layers"),
     "exceeds layers 32"),
    ("SGLang setting on vLLM", SERVING, {"runtime": {"name": "vllm", "mem_fraction_static": 0.8}},
     ("runtime", "mem_fraction_static"), "an SGLang setting"),
    ("typical context above max", SERVING, {"context": {"typical": 9000, "max": 8192}}, ("context", "typical"),
     "exceeds max"),
    ("output as long as the context", SERVING, {"output_tokens": 8192}, ("output_tokens",), "below context.max"),
    ("tensor degree does not divide heads", SERVING, {"parallel": {"tensor": 3}, "gpus": None}, ("parallel", "tensor"),
     "must divide the 32 attention heads"),
    ("pipeline deeper than the model", SERVING, {"parallel": {"pipeline": 64}, "gpus": None},
     ("parallel", "pipeline"), "exceeds the 32 layers"),
    ("fewer GPUs than the layout needs", SERVING, {"parallel": {"tensor": 4}}, ("gpus",), "needs 4"),
    ("vLLM setting on another runtime", SERVING, {"runtime": {"name": "tgi", "gpu_memory_utilization": 0.9}},
     ("runtime", "gpu_memory_utilization"), "vLLM setting"),
    ("no way to attribute", SERVING, {"match": None, "gpus": None, "parallel": None, "endpoint": None}, ("match",),
     "at least one match rule"),
    ("empty match and no gpus", SERVING, {"match": {}, "gpus": None, "parallel": None, "endpoint": None}, ("match",),
     "or a serving endpoint"),
    ("concurrency on training", QLORA, {"concurrency": 8}, ("concurrency",), "training.micro_batch"),
    ("KV cache precision on training", QLORA, {"kv_cache_precision": "fp8"}, ("kv_cache_precision",),
     "held by inference"),
    ("micro-batch above batch size", QLORA, {"training": {"micro_batch": 128, "batch_size": 64}},
     ("training", "micro_batch"), "exceeds batch_size 64"),
    ("QLoRA with an unquantized base", QLORA, {"quantization": "none"}, ("quantization",), "4-bit quantized base"),
    ("QLoRA with an 8-bit base", QLORA, {"precision": "int8"}, ("precision",), "int4"),
    ("AWQ in 8 bits", SERVING, {"quantization": "awq", "precision": "int8"}, ("precision",), "awq stores weights as int4"),
    ("master weights over fp32 adapters", QLORA, {"training": {"master_weights": True}}, ("training", "master_weights"),
     "already fp32"),
]  # fmt: skip

TRAINING = {
    "name": "pretrain",
    "kind": "training",
    "params": "7B",
    "precision": "bf16",
    "context": 4096,
    "training": {"optimizer": "adamw", "micro_batch": 1},
    "gpus": [0],
}
IMPOSSIBLE += [
    ("LoRA on full training", TRAINING, {"lora": {"rank": 8}}, ("lora",), "kind is training"),
    ("full training of quantized weights", TRAINING, {"quantization": "gptq", "precision": None}, ("quantization",), "finetune-qlora"),
    ("full training in int8", TRAINING, {"precision": "int8"}, ("precision",), "fp32, fp16 or bf16"),
    ("master weights over fp32 weights", TRAINING, {"precision": "fp32", "training": {"master_weights": True}},
     ("training", "master_weights"), "already fp32"),
    ("LoRA over a quantized base", with_(QLORA, kind="finetune-lora"), {"quantization": "nf4"}, ("quantization",),
     "use kind finetune-qlora"),
    ("cpu inference with GPUs", SERVING,
     {"kind": "cpu-inference", "runtime": "llama.cpp", "parallel": None, "gpus": [0]}, ("gpus",), "uses no GPU"),
    ("cpu inference split over GPUs", SERVING,
     {"kind": "cpu-inference", "runtime": "llama.cpp", "parallel": {"tensor": 2}, "gpus": None},
     ("parallel", "tensor"), "does not split"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("situation", "base", "changes", "path", "fragment"), IMPOSSIBLE, ids=[b[0] for b in IMPOSSIBLE]
)
def test_impossible_combinations_are_reported_at_the_offending_field(
    situation, base, changes, path, fragment
):
    errors = errors_of(with_(base, **changes))
    assert [e.path for e in errors] == [path], [str(e) for e in errors]
    assert fragment in errors[0].message


def test_the_fixtures_themselves_are_valid():
    # guards the tables above: each case fails only because of its own change
    for d in (SERVING, QLORA, TRAINING):
        profile_from_dict(d)


def test_all_errors_are_collected_in_one_raise():
    d = with_(
        SERVING,
        kind="inferense",
        params="7X",
        architecture={"heads": 8, "kv_heads": 16, "layerz": 3},
        gpus=[0, "bogus"],
        lora={"rank": 0},
        endpoint="ftp://x",
    )
    paths = paths_of(d)
    assert set(paths) == {
        ("kind",),
        ("params",),
        ("architecture", "layerz"),
        ("architecture", "kv_heads"),
        ("gpus", 1),
        ("lora", "rank"),
        ("endpoint",),
    }


def test_combination_checks_still_run_next_to_value_errors():
    d = with_(SERVING, params="7X", architecture={"heads": 8, "kv_heads": 16}, output_tokens=9000)
    assert set(paths_of(d)) == {("params",), ("architecture", "kv_heads"), ("output_tokens",)}


def test_a_profile_that_is_not_a_mapping():
    errors = errors_of(["name", "kind"])
    assert errors[0].path == () and "expected a mapping" in errors[0].message


def test_error_text_carries_the_dotted_path():
    errors = errors_of(with_(SERVING, gpus=[0, "x"]))
    assert str(errors[0]).startswith("gpus[1]: ")
    assert format_path(("lora", "target_modules", 2)) == "lora.target_modules[2]"


def test_every_kind_is_accepted_with_a_minimal_profile():
    for kind in KINDS:
        p = profile_from_dict({"name": "w", "kind": kind, "match": {"cgroup": "/system.slice/*.service"}})
        assert p.kind.value == kind


def test_published_key_lists_match_what_the_loader_accepts():
    from headroom.workload.profiles import PROFILE_KEYS

    for section, keys in PROFILE_KEYS.items():
        for key in keys:
            d = {"name": "w", "kind": "inference", "gpus": [0]}
            target = d if not section else d.setdefault(section, {})
            target[key] = (
                object()
            )  # a value no key accepts: the error must be a value error, not "unknown key"
            messages = [e.message for e in errors_of(d)]
            assert not any("unknown key" in m for m in messages), (section, key, messages)


def test_head_dim_is_kept_when_heads_times_head_dim_differs_from_hidden_size():
    """Gemma 7B: 16 heads x 256 = 4096 attention width against hidden 3072; Qwen3 likewise."""
    d = with_(SERVING, architecture={"layers": 28, "heads": 16, "kv_heads": 16, "head_dim": 256, "hidden_size": 3072})
    arch = profile_from_dict(d).architecture
    assert (arch.effective_head_dim, arch.effective_hidden_size) == (256, 3072)


def test_load_declares_what_headroom_probe_drives():
    p = profile_from_dict(with_(SERVING, load={"input_tokens": {"typical": 256, "max": 1024, "distribution": "exponential"},
                                               "output_tokens": 128, "concurrency": {"normal": 4, "peak": 16},
                                               "rate": 2.5},
                                slo={"error_rate": "1%"}))
    assert (p.load.input_tokens.typical, p.load.input_tokens.max, p.load.input_tokens.distribution) == \
        (256, 1024, "exponential")
    assert p.load.output_tokens.typical == 128 and p.load.output_tokens.distribution == "fixed"
    assert (p.load.concurrency.normal, p.load.concurrency.peak) == (4, 16)
    assert (p.load.rate.normal, p.load.rate.peak) == (2.5, 2.5)
    assert p.error_budget == 0.01 and p.slo == ()  # an error budget alone is no latency objective
    assert profile_from_dict(with_(SERVING, slo={"error_rate": 0.05, "ttft_p95": "1s"})).error_budget == 0.05


@pytest.mark.parametrize(("load", "slo", "words"), [
    ({"concurrency": 0}, None, ("load", "concurrency", "normal")),
    ({"concurrency": {"normal": 8, "peak": 2}}, None, ("load", "concurrency", "peak")),
    ({"rate": -1}, None, ("load", "rate", "normal")),
    ({"input_tokens": {"typical": 900, "max": 100}}, None, ("load", "input_tokens", "typical")),
    ({"input_tokens": {"typical": 10, "distribution": "zipf"}}, None, ("load", "input_tokens", "distribution")),
    ({"output_tokens": 10**9}, None, ("load", "output_tokens", "typical")),
    ({"inputs": 5}, None, ("load", "inputs")),
    (None, {"error_rate": "lots"}, ("slo", "error_rate")),
    (None, {"error_rate": 1.5}, ("slo", "error_rate")),
])
def test_bad_load_and_error_budgets_are_refused_at_their_key(load, slo, words):
    d = dict(SERVING)
    if load is not None:
        d["load"] = load
    if slo is not None:
        d["slo"] = slo
    paths = [e.path for e in errors_of(d)]
    assert words in paths, paths


def test_load_is_for_kinds_that_generate_tokens():
    paths = [e.path for e in errors_of({"name": "t", "kind": "training", "gpus": [0], "load": {"concurrency": 2}})]
    assert ("load",) in paths
