"""`headroom estimate` answers the source articles' sizing questions from the command line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT

GIB = 2**30


def estimate(*args, ok=True):
    r = subprocess.run([sys.executable, "-m", "headroom", "estimate", *args], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    if ok:  # an answer: 0 fits, 1 does not fit, 3 unknown (no GPU memory); 2 is bad input
        assert r.returncode in (0, 1, 3), r.stderr
        if r.stdout.startswith("{"):
            doc = json.loads(r.stdout)
            assert r.returncode == (3 if doc["fits"] is None else 0 if doc["fits"] else 1)
    assert "Traceback" not in r.stderr
    return r


def components(r):
    doc = json.loads(r.stdout)
    return doc, {c["name"]: c["bytes"] for c in doc["components"]}


def test_7b_fp16_weights_are_14e9_bytes_13_04_gib():
    arch = ("--layers", "32", "--kv-heads", "8", "--heads", "32", "--head-dim", "128", "--context", "4096")
    r = estimate("--kind", "cpu-inference", "--params", "7e9", "--precision", "fp16", *arch, "--gpu-memory", "32GiB",
                 "--format", "json")
    _, c = components(r)
    assert c["weights"] == 14_000_000_000
    table = estimate("--params", "7B", "--precision", "fp16", *arch, "--gpu-memory", "80GiB")
    assert "14 000 000 000  13.04" in table.stdout


@pytest.mark.parametrize(("gradient_precision", "per_param"), [("fp16", 16), ("fp32", 18)])
def test_full_training_bytes_per_param(gradient_precision, per_param):
    r = estimate("--kind", "finetune-full", "--params", "7B", "--precision", "fp16", "--optimizer", "adamw",
                 "--gradient-precision", gradient_precision, "--layers", "32", "--heads", "32", "--hidden-size",
                 "4096", "--context", "2048", "--gpu-memory", "80GiB", "--format", "json")
    doc, c = components(r)
    state = sum(c[k] for k in ("weights", "gradients", "optimizer_state", "master_weights"))
    assert state == per_param * 7_000_000_000
    assert doc["fits"] is False  # 112 GB of state alone does not fit one 80 GiB GPU


def test_kv_cache_one_gib_per_8192_token_sequence():
    base = ("--params", "8B", "--precision", "bf16", "--layers", "32", "--kv-heads", "8", "--heads", "32",
            "--head-dim", "128", "--context", "8192", "--gpu-memory", "80GiB", "--format", "json")
    doc, c = components(estimate(*base, "--concurrency", "1"))
    assert doc["kv_bytes_per_token"] == 131_072
    assert c["kv_cache"] == GIB
    _, c16 = components(estimate(*base, "--concurrency", "16"))
    assert c16["kv_cache"] == 16 * GIB


def test_capacities_are_consistent_with_fitting():
    base = ("--params", "8B", "--precision", "bf16", "--layers", "32", "--kv-heads", "8", "--heads", "32",
            "--head-dim", "128", "--context", "8192", "--gpu-memory", "80GiB", "--format", "json")
    doc = json.loads(estimate(*base, "--concurrency", "16").stdout)
    n = doc["max_concurrency_at_max_context"]
    assert n >= 16
    assert json.loads(estimate(*base, "--concurrency", str(n)).stdout)["fits"] is True
    assert json.loads(estimate(*base, "--concurrency", str(n + 1)).stdout)["fits"] is False


def test_against_simulated_gpus_found_by_nvml():
    r = estimate("--params", "70B", "--precision", "bf16", "--layers", "80", "--kv-heads", "8", "--heads", "64",
                 "--head-dim", "128", "--context", "8192", "--concurrency", "4", "--tensor-parallel", "2",
                 "--simulate", "demo", "--format", "json")
    doc = json.loads(r.stdout)
    assert doc["gpus_available"] == 2
    assert "found by NVML (simulated)" in doc["memory_source"]
    assert doc["gpu_memory_bytes"] > 79 * GIB


def test_from_a_profile_in_the_configuration(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("workloads:\n  - name: chat\n    kind: inference\n    params: 7B\n    precision: fp16\n"
                   "    architecture: {layers: 32, heads: 32, kv_heads: 8, head_dim: 128}\n"
                   "    context: {max: 8192}\n    concurrency: 16\n    gpus: [0]\n")
    _doc, c = components(estimate("--config.file", str(cfg), "--workload", "chat", "--gpu-memory", "80GiB",
                                 "--format", "json"))
    assert c["weights"] == 14_000_000_000 and c["kv_cache"] == 16 * GIB
    r = estimate("--config.file", str(cfg), "--workload", "nope", "--gpu-memory", "80GiB", ok=False)
    assert r.returncode == 2 and "no workload named 'nope'" in r.stderr and "declared: chat" in r.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--params", "7B", "--precision", "bf16", "--context", "8192", "--gpu-memory", "80GiB"),
         "KV cache needs --layers, --kv-heads, --head-dim"),
        (("--params", "7B", "--precision", "bf16", "--kv-heads", "80", "--heads", "32"),
         "--kv-heads: kv_heads 80 exceeds heads 32"),
        (("--params", "seven", "--precision", "bf16"), "--params: invalid params 'seven'"),
        (("--kind", "inference", "--params", "7B", "--precision", "bf16", "--lora-rank", "8"),
         "--lora-rank: lora applies to finetune-lora"),
        (("--params", "7B", "--precision", "bf16", "--gpu-memory", "lots"), "--gpu-memory"),
    ],
)
def test_missing_or_bad_inputs_get_clear_errors(args, message):
    r = estimate(*args, ok=False)
    assert r.returncode == 2
    assert message in r.stderr, r.stderr


def test_the_minimal_command_answers_with_its_assumptions_stated():
    r = estimate("--params", "7B", "--precision", "bf16", "--kind", "inference", "--layers", "32", "--kv-heads", "8",
                 "--head-dim", "128", "--context", "8192", "--concurrency", "16", "--gpu-memory", "80GiB",
                 "--format", "json")
    doc, c = components(r)
    assert c["weights"] == 14_000_000_000 and c["kv_cache"] == 16 * GIB
    assert c["activations"] < 2 * GIB  # one 8192-token prefill, not 16 x 8192 tokens at once
    assert any("hidden_size not given: assuming" in n for n in doc["notes"])


def test_model_config_fills_the_architecture_and_flags_override():
    cfg = str(ROOT / "tests" / "fixtures" / "hf" / "llama-3-8b")
    r = estimate("--model-config", cfg, "--context", "8192", "--runtime", "vllm", "--runtime-version", "0.8.5",
                 "--gpu-memory", "79.19GiB", "--format", "json")
    doc, c = components(r)
    assert c["weights"] == 8_030_261_248 * 2 and doc["kv_bytes_per_token"] == 131_072
    assert doc["runtime_report"]["kv_tokens"] > 0 and doc["max_concurrency"] > 1
    r = estimate("--model-config", cfg, "--context", "8192", "--kv-heads", "4", "--gpu-memory", "80GiB",
                 "--format", "json")
    assert json.loads(r.stdout)["kv_bytes_per_token"] == 65_536
    table = estimate("--model-config", cfg, "--context", "8192", "--runtime", "vllm", "--gpu-memory", "79.19GiB")
    assert "GPU KV cache size:" in table.stdout and "Maximum concurrency for 8,192 tokens per request:" in table.stdout


def test_an_encoder_model_is_sized_without_kv_cache():
    cfg = str(ROOT / "tests" / "fixtures" / "hf" / "bert-base")
    doc, c = components(estimate("--model-config", cfg, "--context", "512", "--concurrency", "32",
                                 "--gpu-memory", "16GiB", "--format", "json"))
    assert doc["kind"] == "embedding" and "kv_cache" not in c
    r = estimate("--model-config", cfg, "--kind", "inference", "--context", "512", "--gpu-memory", "16GiB", ok=False)
    assert r.returncode == 2 and "--kind embedding" in r.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--params", "7B", "--precision", "fp6"), "--precision"),
        (("--params", "7B", "--quantization", "hqq"), "--quantization"),
        (("--params", "7B", "--precision", "bf16", "--layers", "32", "--heads", "32", "--kv-heads", "5"), "--kv-heads"),
        (("--model-config", "/nonexistent/dir"), "no config.json"),
        (("--model", "meta-llama/Not-Cached"), "not in the local Hugging Face cache"),
        (("--params", "7B", "--precision", "bf16", "--layers", "32", "--kv-heads", "8", "--head-dim", "128",
          "--runtime", "vllm", "--runtime-version", "newest"), "--runtime-version"),
        (("--params", "7B", "--precision", "bf16", "--mem-fraction-static", "0.8", "--runtime", "vllm"),
         "mem_fraction_static"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_naming_the_field(args, fragment, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    r = estimate(*args, "--context", "4096", "--gpu-memory", "80GiB", ok=False)
    assert r.returncode == 2 and fragment in r.stderr, r.stderr


def test_zero3_with_offload_from_flags():
    arch = ("--layers", "32", "--heads", "32", "--hidden-size", "4096", "--vocab-size", "32000", "--intermediate-size",
            "11008", "--context", "4096")
    doc, c = components(estimate("--kind", "training", "--params", "7B", "--precision", "fp16", *arch, "--data-parallel",
                                 "8", "--sharding", "zero3", "--offload-optimizer", "--gpu-memory", "80GiB", "--gpus", "8",
                                 "--format", "json"))  # fmt: skip
    assert c["weights"] == 2 * 7_000_000_000 // 8 + 4 * 32000 * 4096 and c["optimizer_state"] == 0
    assert any("host memory per rank" in n for n in doc["notes"])
    r = estimate("--kind", "training", "--params", "7B", "--precision", "fp16", "--sharding", "zero2", "--offload-params",
                 *arch, "--gpu-memory", "80GiB", ok=False)  # fmt: skip
    assert r.returncode == 2 and "--offload-params" in r.stderr and "zero3" in r.stderr, r.stderr


def test_model_config_without_context_uses_max_position_embeddings_like_vllm():
    cfg = str(ROOT / "tests" / "fixtures" / "hf" / "llama-3-8b")
    doc, _ = components(estimate("--model-config", cfg, "--runtime", "vllm", "--gpu-memory", "79.19GiB",
                                 "--format", "json"))  # fmt: skip
    assert doc["context"] == 8192 and any("max_position_embeddings" in n for n in doc["notes"])


def test_help_shows_readable_metavars_and_no_collector_or_path_flags():
    r = subprocess.run([sys.executable, "-m", "headroom", "estimate", "--help"], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert r.returncode == 0
    assert "EST_" not in r.stdout, "internal dest names leak into the help"
    assert "--collector." not in r.stdout and "--path." not in r.stdout and "--sample.interval" not in r.stdout
    assert "--layers N" in r.stdout and "--simulate NAME|FILE" in r.stdout


def test_a_host_without_a_driver_is_an_answer_not_an_error_log(tmp_path):
    """estimate prints where the GPU memory came from; NVML missing is part of the answer, not an error."""
    scenario = tmp_path / "no-driver.yaml"
    scenario.write_text("gpus:\n  - name: NVIDIA L4\n    memory_total: 23034MiB\n    power_limit: 72\n"
                        "faults:\n  - {call: nvmlInit, error: DRIVER_NOT_LOADED}\n")
    r = estimate("--params", "7B", "--precision", "bf16", "--layers", "32", "--kv-heads", "8", "--head-dim", "128",
                 "--hidden-size", "4096", "--context", "4096", "--concurrency", "4", "--simulate", str(scenario),
                 "--log.level", "info")
    assert "no GPU found (" in r.stdout and "DRIVER_NOT_LOADED" in r.stdout
    assert "nvml_down" not in r.stderr, r.stderr


# ------------------------------------------------------------------ issue 29: exit status, verdict, known models
EIGHT_B = ("--params", "8B", "--precision", "bf16", "--layers", "32", "--kv-heads", "8", "--heads", "32",
           "--head-dim", "128", "--context", "8192")


def test_exit_status_says_fits_0_does_not_fit_1_bad_input_2_unknown_3(tmp_path):
    """Scripts branch on it (README.md, docs/sizing.md): before, every answer exited 0."""
    assert estimate(*EIGHT_B, "--concurrency", "1", "--gpu-memory", "80GiB").returncode == 0
    assert estimate(*EIGHT_B, "--concurrency", "200", "--gpu-memory", "80GiB").returncode == 1
    assert estimate(*EIGHT_B, "--tensor-parallel", "4", "--gpus", "2", "--gpu-memory", "80GiB").returncode == 1
    bad = estimate(*EIGHT_B, "--precision", "fp7", "--gpu-memory", "80GiB", ok=False)
    assert bad.returncode == 2 and bad.stderr.startswith("headroom: --precision")
    # a mistyped scenario is bad input too, not "does not fit"
    assert estimate(*EIGHT_B, "--simulate", "helthy", ok=False).returncode == 2
    nodriver = tmp_path / "no-driver.yaml"
    nodriver.write_text("gpus:\n  - {name: NVIDIA L4, memory_total: 23034MiB, power_limit: 72}\n"
                        "faults:\n  - {call: nvmlInit, error: DRIVER_NOT_LOADED}\n")
    assert estimate(*EIGHT_B, "--simulate", str(nodriver)).returncode == 3


def test_the_decisive_problem_comes_first_and_the_memory_verdict_reads_plainly():
    r = estimate(*EIGHT_B, "--tensor-parallel", "4", "--gpus", "2", "--gpu-memory", "80GiB")
    assert r.stdout.splitlines()[1] == "does not fit: tensor parallel 4 needs 4 GPUs, 2 given"
    short = estimate(*EIGHT_B, "--concurrency", "200", "--gpu-memory", "80GiB", "--format", "json")
    doc = json.loads(short.stdout)
    need = doc["needed_bytes"] / GIB
    assert doc["verdict"] == [f"does not fit: needs {need:.2f} GiB per GPU, {need - 80:.2f} GiB more than the "
                              "GPU's 80.00 GiB"]
    vllm = estimate(*EIGHT_B, "--concurrency", "1", "--runtime", "vllm", "--gpu-memory", "80GiB")
    assert vllm.stdout.splitlines()[1].startswith("fits: needs ")
    assert "per GPU of vLLM's 72.00 GiB reservation: " in vllm.stdout.splitlines()[1]


def test_a_well_known_model_is_sized_by_name_without_a_cache(tmp_path):
    """`--model meta-llama/Llama-3.1-70B-Instruct` with an empty cache: before, 'not in the local Hugging Face
    cache'; now the shipped table (its published config.json: 70 553 706 496 parameters), and it says so."""
    env = {"HF_HOME": str(tmp_path / "empty"), "HF_HUB_CACHE": str(tmp_path / "empty" / "hub")}
    r = _estimate_env(env, "--model", "meta-llama/Llama-3.1-70B-Instruct", "--context", "8192",
                      "--tensor-parallel", "2", "--runtime", "vllm", "--gpu-memory", "79.19GiB", "--format", "json")
    doc = json.loads(r.stdout)
    assert {c["name"]: c["bytes"] for c in doc["components"]}["weights"] == 70_553_706_496  # bf16 over 2 GPUs
    assert any("headroom's table of well-known models" in n and "huggingface.co/meta-llama/Llama-3.1-70B-Instruct"
               in n for n in doc["notes"])
    typo = _estimate_env(env, "--model", "meta-llama/Llama-3.1-70B-Instruc", "--gpu-memory", "80GiB")
    assert typo.returncode == 2 and "did you mean meta-llama/Llama-3.1-70B-Instruct" in typo.stderr
    assert len(typo.stderr.strip().splitlines()) == 1


def test_the_local_cache_comes_before_the_table(tmp_path):
    """A cached checkpoint's own config.json wins (a fine-tune may differ from the published base)."""
    snap = tmp_path / "hub" / "models--Qwen--Qwen3-0.6B" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (tmp_path / "hub" / "models--Qwen--Qwen3-0.6B" / "refs").mkdir()
    (tmp_path / "hub" / "models--Qwen--Qwen3-0.6B" / "refs" / "main").write_text("abc")
    config = json.loads((ROOT / "tests" / "fixtures" / "hf" / "qwen3-0.6b" / "config.json").read_text())
    config["num_hidden_layers"] = 14  # a pruned variant: the cache's figures must show
    (snap / "config.json").write_text(json.dumps(config))
    r = _estimate_env({"HF_HUB_CACHE": str(tmp_path / "hub")}, "--model", "Qwen/Qwen3-0.6B", "--context", "4096",
                      "--gpu-memory", "80GiB", "--format", "json")
    doc = json.loads(r.stdout)
    assert any(str(snap) in n for n in doc["notes"]) and not any("well-known" in n for n in doc["notes"])
    assert doc["kv_bytes_per_token"] == 14 * 8 * 128 * 2 * 2


def _estimate_env(env, *args):
    import os

    r = subprocess.run([sys.executable, "-m", "headroom", "estimate", *args], capture_output=True, text=True,
                       timeout=60, cwd=ROOT, env={**os.environ, **env})
    assert "Traceback" not in r.stderr
    return r
