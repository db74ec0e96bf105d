"""Runtimes that describe themselves: serving and training launchers recognised from their command lines
(workload/launchers.py), their models' config.json found as the process sees it (a path, or its Hugging
Face cache; sources/identity/models.py), automatic profiles sized by the memory model, and the analysis giving
them verdicts like declared ones. Hostile command lines and model directories get a reason, never a
traceback."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from headroom.analysis.pipeline import Analysis
from headroom.config import load_config
from headroom.samples import (
    GpuProcess,
    GpuSample,
    IdentityGroup,
    IdentitySample,
    ModelInfo,
    NvmlSample,
    PreviousTick,
    ProcessesSample,
    Sample,
    SourceResult,
)
from headroom.sources import Paths, SourceContext
from headroom.sources.identity import IdentityCollector, find_launcher, read_launcher_model
from headroom.workload import attribution
from headroom.workload.launcher_profiles import auto_profile, display_name
from headroom.workload.launchers import metrics_endpoint, parse
from headroom.workload.profiles import profile_from_dict

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
QWEN3 = FIXTURES / "qwen3-0.6b" / "config.json"  # 16 heads, 8 KV heads, 28 layers
GIB = 2**30


def given(argv: str) -> dict:
    """The settings a command line gave (defaults and empty values left out)."""
    launcher = parse(argv.split())
    assert launcher is not None, argv
    return {k: getattr(launcher, k) for k in launcher.__slots__ if getattr(launcher, k) not in (None, "", (), False)}


# ------------------------------------------------------------------------------------------ parsing
@pytest.mark.parametrize(("argv", "expected"), [
    ("vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2 --max-model-len 8192 --port 8001",
     {"runtime": "vllm", "role": "serving", "model": "meta-llama/Llama-3.1-8B-Instruct", "tensor_parallel": 2,
      "max_model_len": 8192, "port": 8001, "metrics_url": "http://127.0.0.1:8001/metrics"}),
    # --flag=value, underscores, short aliases, vLLM's human-readable integers (k = 1000, K = 1024)
    ("/opt/venv/bin/vllm serve m --tensor_parallel_size=4 -pp 2 --max-model-len=32K --max_num_batched_tokens 16k "
     "--gpu-memory-utilization=0.85 --dtype half -q awq --kv-cache-dtype fp8_e5m2 --max-num-seqs 64 --host ::1",
     {"runtime": "vllm", "role": "serving", "model": "m", "tensor_parallel": 4, "pipeline_parallel": 2,
      "max_model_len": 32768, "max_num_batched_tokens": 16000, "gpu_memory_utilization": 0.85, "dtype": "half",
      "quantization": "awq", "kv_cache_dtype": "fp8_e5m2", "max_num_seqs": 64, "host": "::1", "port": 8000,
      "metrics_url": "http://[::1]:8000/metrics"}),
    ("python3 -u -m vllm.entrypoints.openai.api_server --model /models/llama --data-parallel-size 2 --port=9000",
     {"runtime": "vllm", "role": "serving", "model": "/models/llama", "data_parallel": 2, "port": 9000,
      "metrics_url": "http://127.0.0.1:9000/metrics"}),
    ("python -m sglang.launch_server --model-path Qwen/Qwen2.5-7B --tp 2 --context-length 4096 "
     "--mem-fraction-static 0.8 --max-running-requests 48 --chunked-prefill-size 4096 --enable-metrics",
     {"runtime": "sglang", "role": "serving", "model": "Qwen/Qwen2.5-7B", "tensor_parallel": 2,
      "max_model_len": 4096, "mem_fraction_static": 0.8, "max_num_seqs": 48, "max_num_batched_tokens": 4096,
      "port": 30000, "metrics_url": "http://127.0.0.1:30000/metrics"}),
    ("text-generation-launcher --model-id bigscience/bloom --num-shard 2 --quantize gptq --max-total-tokens 4096 "
     "--max-batch-prefill-tokens 8192 -p 80 --prometheus-port 9100",
     {"runtime": "tgi", "role": "serving", "model": "bigscience/bloom", "tensor_parallel": 2, "quantization": "gptq",
      "max_model_len": 4096, "max_num_batched_tokens": 8192, "port": 80, "metrics_url": "http://127.0.0.1:9100/metrics"}),
    ("tritonserver --model-repository=/models --http-port 8100",
     {"runtime": "triton", "role": "serving", "port": 8100, "metrics_url": "http://127.0.0.1:8002/metrics"}),
    # the script's own flags are not torchrun's; its --model_name_or_path names the model
    ("torchrun --nproc_per_node=8 --nnodes 2 --rdzv-endpoint host:29500 train.py --nproc_per_node 3 "
     "--model_name_or_path meta-llama/Llama-3.1-8B",
     {"runtime": "torchrun", "role": "training", "script": "train.py", "model": "meta-llama/Llama-3.1-8B",
      "nproc_per_node": 8, "nnodes": 2, "world_size": 16}),
    ("python -m torch.distributed.run --nproc-per-node gpu train.py",
     {"runtime": "torchrun", "role": "training", "script": "train.py", "nnodes": 1}),
    ("deepspeed --num_gpus 4 finetune.py --deepspeed ds.json",
     {"runtime": "deepspeed", "role": "training", "script": "finetune.py", "nproc_per_node": 4, "nnodes": 1,
      "world_size": 4, "sharding_unknown": "the DeepSpeed config (ZeRO stage)"}),
    ("accelerate launch --num_processes=8 --num_machines 1 --mixed_precision bf16 sft.py --model Qwen/Qwen3-0.6B",
     {"runtime": "accelerate", "role": "training", "script": "sft.py", "model": "Qwen/Qwen3-0.6B", "dtype": "bf16",
      "nproc_per_node": 8, "nnodes": 1, "world_size": 8}),
], ids=lambda v: v.split()[0].rsplit("/", 1)[-1] + "-" + str(len(v)) if isinstance(v, str) else "")
def test_launchers_and_their_flags_are_read_from_the_command_line(argv, expected):
    assert given(argv) == expected


@pytest.mark.parametrize("argv", [
    "python train.py --port 8000", "python -m http.server 8000", "grep vllm serve", "bash -c vllm-serve",
    "vim vllm serve", "", "vllm", "vllm chat m", "python -m vllm.entrypoints.cli.main bench",
])
def test_other_command_lines_are_not_launchers(argv):
    assert parse(argv.split()) is None


@pytest.mark.parametrize(("argv", "problem"), [
    ("vllm serve m --max-num-seqs lots", "--max-num-seqs 'lots': not a valid integer"),
    ("vllm serve m --gpu-memory-utilization 1.5", "--gpu-memory-utilization 1.5: must be in (0, 1]"),
    ("vllm serve m --gpu-memory-utilization nan", "--gpu-memory-utilization 'nan': not a valid number"),
    ("vllm serve m --tensor-parallel-size 0", "--tensor-parallel-size 0: out of range"),
    ("vllm serve m --max-model-len 1.5K", "--max-model-len '1.5K': not a valid integer"),
    ("vllm serve m --port 70000", "--port 70000: out of range"),
    ("torchrun --nnodes lots train.py", "--nnodes 'lots': not a count"),
])
def test_odd_flag_values_are_named_and_ignored_never_guessed(argv, problem):
    launcher = parse(argv.split())
    assert launcher is not None and any(p.startswith(problem) for p in launcher.problems), launcher.problems
    profile, reason = auto_profile(launcher, None, display_name(launcher))
    assert profile.kind.value in ("inference", "training") and problem.split(":")[0] in (reason or "")


def test_hostile_command_lines_never_raise():
    for argv in (["vllm", "serve"], ["vllm", "serve", "--port"], ["vllm", "serve", "m", "--port="],
                 ["vllm", "serve", "m", "--", "--port", "1"], ["torchrun"], ["accelerate", "launch", "-m"],
                 ["vllm", "serve", "\udcff\x00", "--dtype", "\u202e"], ["vllm", "serve", "m"] + ["--x"] * 100_000,
                 ["python", "-c"], ["deepspeed", "--num_gpus", "-1", "t.py"]):
        launcher = parse(argv)
        if launcher is not None:
            auto_profile(launcher, ModelInfo(error="x"), display_name(launcher))
    assert parse(["vllm", "serve", "m", "--port"]).port == 8000  # a flag without its value: the default


def test_the_serving_endpoint_comes_from_the_same_matcher():
    """The serving collector's detection and the automatic workloads read one matcher; an unreadable port is
    never replaced by a default there (a wrong endpoint would be scraped)."""
    from headroom.sources.serving import endpoint_from_argv

    argv = "python -m sglang.launch_server --model-path m --port 31000 --host 0.0.0.0".split()
    assert endpoint_from_argv(argv) == metrics_endpoint(argv) == ("sglang", "http://127.0.0.1:31000/metrics")
    assert metrics_endpoint("vllm serve m --port eighty".split()) is None
    assert metrics_endpoint("torchrun train.py".split()) is None


def test_names_of_automatic_workloads():
    assert display_name(parse("vllm serve meta-llama/Llama-3.1-8B-Instruct --port 8001".split())) == \
        "vllm/Llama-3.1-8B-Instruct:8001"
    assert display_name(parse("torchrun --nproc_per_node 2 /home/me/train.py".split())) == "torchrun/train.py"


# ------------------------------------------------------------------------------------------ profiles
def model_info(path: Path = QWEN3) -> ModelInfo:
    from headroom.workload import modelconfig

    mc = modelconfig.read_model_config(path)
    return ModelInfo(source=str(path), fields_json=json.dumps(mc.fields), max_context=mc.max_context,
                     encoder_only=mc.encoder_only)


def test_an_automatic_profile_is_what_a_declared_one_with_the_same_settings_would_be():
    launcher = parse("vllm serve Qwen/Qwen3-0.6B --max-model-len 4096 --gpu-memory-utilization 0.5 "
                     "--max-num-seqs 32 --kv-cache-dtype fp8 --dtype float16".split())
    profile, reason = auto_profile(launcher, model_info(), "q")
    assert reason is None
    arch = json.loads(model_info().fields_json)["architecture"]
    declared = profile_from_dict({
        "name": "q", "kind": "inference", "model": "Qwen/Qwen3-0.6B", "precision": "fp16", "compute_precision": "fp16",
        "kv_cache_precision": "fp8", "architecture": arch, "context": {"max": 4096},
        "runtime": {"name": "vllm", "gpu_memory_utilization": 0.5, "max_num_seqs": 32}}, attributable=False)
    assert profile == declared


@pytest.mark.parametrize(("flags", "check"), [
    ("--quantization awq", lambda p: (p.quantization.method.value, p.weight_precision.value) == ("awq", "int4")),
    ("--quantization fp8", lambda p: p.weight_precision.value == "fp8"),
    ("--dtype auto", lambda p: p.weight_precision.value == "bf16"),  # the checkpoint's torch_dtype
    ("--tensor-parallel-size 2 -pp 2", lambda p: (p.parallel.tensor, p.parallel.pipeline) == (2, 2)),
    ("", lambda p: p.context.max == 40960),  # max_position_embeddings: vLLM's default max_model_len
])
def test_command_line_flags_over_the_checkpoint(flags, check, tmp_path):
    config = json.loads(QWEN3.read_text())
    config["max_position_embeddings"] = 40960
    (tmp_path / "config.json").write_text(json.dumps(config))
    profile, reason = auto_profile(parse(f"vllm serve Qwen/Qwen3-0.6B {flags}".split()), model_info(tmp_path), "q")
    assert reason is None and check(profile), profile


def test_a_layout_the_model_cannot_have_is_a_reason_not_an_estimate():
    profile, reason = auto_profile(parse("vllm serve Qwen/Qwen3-0.6B --tensor-parallel-size 3".split()),
                                   model_info(), "q")
    assert profile.name == "q" and "parallel.tensor" in reason and "16 attention heads" in reason


# ------------------------------------------------------------------ model configs as the process sees them
def fake_proc(tmp_path: Path, pid: int, ppid: int, argv: list[str], environ: dict[str, str] | None = None) -> Path:
    """/proc/PID with stat, cmdline, environ, and root and cwd links (to the fixture's rootfs and cwd)."""
    proc = tmp_path / "proc"
    d = proc / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} (p) S {ppid} {pid} {pid} 0 -1 4194560 10 0 0 0 0 0 0 0 20 0 1 0 900000 1000000 0 "
                            "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n")
    (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in (environ or {}).items()))
    (d / "cgroup").write_text("0::/\n")
    (d / "status").write_text("Name:\tp\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nGroups:\t27 1000\n")
    (tmp_path / "rootfs").mkdir(exist_ok=True)
    (tmp_path / "rootfs" / "srv").mkdir(exist_ok=True)
    os.symlink(tmp_path / "rootfs", d / "root")
    os.symlink(tmp_path / "rootfs" / "srv", d / "cwd")
    return proc


def hf_cache(root: Path, name: str, config: str | None) -> Path:
    org, model = name.split("/")
    snap = root / f"models--{org}--{model}" / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    if config is not None:
        (snap / "config.json").write_text(config)
    return snap


def test_the_model_is_found_in_the_processs_own_hugging_face_cache(tmp_path):
    """HF_HOME from the process's environment, read through /proc/PID/root (a container's own paths)."""
    proc = fake_proc(tmp_path, 40, 1, ["vllm", "serve", "Qwen/Qwen3-0.6B"], {"HF_HOME": "/cache/hf"})
    hf_cache(tmp_path / "rootfs" / "cache" / "hf" / "hub", "Qwen/Qwen3-0.6B", QWEN3.read_text())
    info = read_launcher_model(proc, 40, "Qwen/Qwen3-0.6B")
    assert info.error == "" and info.source == "/cache/hf/hub/models--Qwen--Qwen3-0.6B/snapshots/0123abcd/config.json"
    assert json.loads(info.fields_json)["architecture"]["layers"] == 28


def test_home_cache_and_a_relative_model_path(tmp_path):
    proc = fake_proc(tmp_path, 41, 1, ["vllm", "serve", "x"], {"HOME": "/home/me"})
    hf_cache(tmp_path / "rootfs" / "home" / "me" / ".cache" / "huggingface" / "hub", "Qwen/Qwen3-0.6B",
             QWEN3.read_text())
    assert read_launcher_model(proc, 41, "Qwen/Qwen3-0.6B").error == ""
    (tmp_path / "rootfs" / "srv" / "ckpt").mkdir()
    (tmp_path / "rootfs" / "srv" / "ckpt" / "config.json").write_text(QWEN3.read_text())
    info = read_launcher_model(proc, 41, "./ckpt")
    assert info.error == "" and info.source == "(working directory)/./ckpt"


@pytest.mark.parametrize(("config", "reason"), [
    (None, "holds no snapshot with a config.json"),
    ("{not json", "config.json"),
    ('{"model_type": "llama"}', "num_hidden_layers"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"num_hidden_layers": "many", "hidden_size": 1, "num_attention_heads": 1}', "num_hidden_layers"),
])
def test_a_missing_or_malformed_config_is_a_reason_never_a_traceback(tmp_path, config, reason):
    proc = fake_proc(tmp_path, 42, 1, ["vllm", "serve", "o/m"], {"HF_HUB_CACHE": "/hub"})
    hf_cache(tmp_path / "rootfs" / "hub", "o/m", config)
    info = read_launcher_model(proc, 42, "o/m")
    assert info.fields_json == "" and reason in info.error and str(tmp_path) not in info.error, info.error
    profile, why = auto_profile(parse(["vllm", "serve", "o/m"]), info, "o")
    assert why.startswith("model o/m: ") and reason in why and profile.architecture.layers is None


def test_an_unreadable_cache_or_environment_is_a_reason(tmp_path):
    proc = fake_proc(tmp_path, 43, 1, ["vllm", "serve", "o/m"], {"HF_HOME": "/nowhere"})
    assert "not in the local Hugging Face cache" in read_launcher_model(proc, 43, "o/m").error
    (proc / "43" / "environ").unlink()  # another user's process: environ denied
    (proc / "43" / "status").write_text("Name:\tp\nUid:\t4242424\t4242424\t4242424\t4242424\n"
                                        "Gid:\t0\t0\t0\t0\n")  # a uid without a passwd entry
    assert "no Hugging Face cache to look in" in read_launcher_model(proc, 43, "o/m").error
    hf_cache(tmp_path / "rootfs" / "hub", "o/m", "{}")
    os.symlink("loop", tmp_path / "rootfs" / "loop")
    (proc / "43" / "environ").write_bytes(b"HF_HUB_CACHE=/loop\0")
    assert read_launcher_model(proc, 43, "o/m").error  # a symlink loop: a reason


def test_a_model_file_its_own_user_cannot_read_is_not_read_on_its_behalf(tmp_path):
    """The agent reads as root: `vllm serve /secret` by uid 1000 must not make it read a file uid 1000
    cannot (a confused deputy); the same file readable by its group is read."""
    proc = fake_proc(tmp_path, 44, 1, ["vllm", "serve", "/secret"])
    secret = tmp_path / "rootfs" / "secret"
    secret.mkdir()
    (secret / "config.json").write_text(QWEN3.read_text())
    if os.getuid() == 0:
        os.chown(secret / "config.json", 0, 0)
    os.chmod(secret / "config.json", 0o600)
    info = read_launcher_model(proc, 44, "/secret")
    assert info.fields_json == "" and "not readable by the process's user (uid 1000)" in info.error
    if os.getuid() == 0:
        os.chown(secret / "config.json", 0, 27)  # a group of the process (Groups: 27 1000)
        os.chmod(secret / "config.json", 0o640)
        assert read_launcher_model(proc, 44, "/secret").error == ""


def test_the_launcher_is_the_outermost_one_above_a_gpu_process(tmp_path):
    """vLLM's engine core (spawned: another command line) and a forked worker (the same command line) belong
    to the server above them; a torchrun worker to torchrun."""
    argv = ["vllm", "serve", "o/m", "--port", "8001"]
    proc = fake_proc(tmp_path, 100, 1, argv)
    for pid, ppid, cmd in ((101, 100, argv), (102, 101, ["VLLM::EngineCore"]), (200, 1, ["torchrun", "t.py"]),
                           (201, 200, ["python", "-u", "t.py"]), (300, 1, ["python", "serve.py"])):
        d = fake_proc(tmp_path / str(pid), pid, ppid, cmd) / str(pid)
        os.rename(d, proc / str(pid))
    assert find_launcher(proc, 102)[0] == 100 and find_launcher(proc, 101)[0] == 100
    assert find_launcher(proc, 201) == (200, parse(["torchrun", "t.py"]))
    assert find_launcher(proc, 300) == (0, None) and find_launcher(proc, 999) == (0, None)
    # a command name that looks like stat fields, a zombie's empty command line: the parent is still found
    (proc / "102" / "stat").write_text("102 (x) S 7 (y) S 101 102 102 0 -1 4194560 10 0 0 0 0 0 0 0 20 0 1 0 9 1 0\n")
    (proc / "101" / "cmdline").write_bytes(b"")
    assert find_launcher(proc, 102)[0] == 100
    (proc / "101" / "stat").write_text("101 (truncated")
    assert find_launcher(proc, 102) == (0, None)  # an unreadable ancestor ends the search, nothing guessed


# ---------------------------------------------------------------------------- attribution and analysis
def _sample(t: float, groups: tuple[IdentityGroup, ...], used: int = 6 * GIB) -> Sample:
    gpu = GpuSample(index=0, uuid="GPU-0", name="NVIDIA H100 80GB HBM3", pci_bus_id="0", up=True,
                    memory_total_bytes=80 * GIB,
                    memory_used_bytes=used, utilization_ratio=0.5,
                    processes=tuple(GpuProcess(pid=p, used_memory_bytes=used) for g in groups for p in g.pids))
    return Sample(t, t, {
        "nvml": SourceResult("nvml", True, 0.0, NvmlSample(up=True, gpus=(gpu,))),
        "processes": SourceResult("processes", True, 0.0, ProcessesSample(workloads=())),
        "identity": SourceResult("identity", True, 0.0, IdentitySample(groups=groups, max_groups=100)),
    })


def _group(pid: int, argv: str, model: ModelInfo | None) -> IdentityGroup:
    launcher = parse(argv.split())
    return IdentityGroup(kind="launcher", name=display_name(launcher), pids=(pid,), gpus=("GPU-0",),
                         launcher=launcher, model=model)


def test_an_automatic_server_is_sized_and_judged_like_a_declared_one():
    g = _group(7, "vllm serve Qwen/Qwen3-0.6B --gpu-memory-utilization 0.08 --max-model-len 4096", model_info())
    st = attribution.attribute(_sample(1.0, (g,)), ())[0]
    assert (st.source, st.kind, st.model, st.runtime, st.precision) == ("auto", "inference", "Qwen/Qwen3-0.6B",
                                                                        "vllm", "bf16")
    assert st.estimate_error is None and st.expected_peak_bytes == st.estimate.expected_usage_bytes
    assert st.expected_peak_bytes == pytest.approx(0.08 * 80 * GIB, rel=0.01)  # vLLM's reservation
    analysis = Analysis(load_config(None))
    _, findings = analysis([_sample(1.0, (g,))])
    assert [w.name for w in findings.workload_findings] == ["vllm/Qwen3-0.6B:8000"]
    assert findings.workload_findings[0].headroom.gpu_memory_bytes is not None


def test_an_unknown_model_keeps_its_measured_values_and_says_why():
    g = _group(7, "vllm serve o/unknown", ModelInfo(error="o/unknown is not in the local Hugging Face cache"))
    st = attribution.attribute(_sample(1.0, (g,)), ())[0]
    assert st.gpu_memory_used_bytes == 6 * GIB and st.expected_peak_bytes is None and st.estimate is None
    assert st.estimate_error == "model o/unknown: o/unknown is not in the local Hugging Face cache"


def test_a_declared_profile_matching_the_launchers_processes_wins():
    from headroom.samples import WorkloadProcesses

    g = _group(7, "vllm serve Qwen/Qwen3-0.6B", model_info())
    declared = profile_from_dict({"name": "chat", "kind": "inference", "match": {"cmdline": "vllm"}})
    sample = _sample(1.0, (g,))
    procs = ProcessesSample(workloads=(WorkloadProcesses(name="chat", pids=(7,), threads=1, cpu_user_seconds_total=0.0,
                                                   cpu_system_seconds_total=0.0, resident_memory_bytes=0),))
    sample = Sample(1.0, 1.0, {**sample.sources, "processes": SourceResult("processes", True, 0.0, procs)})
    assert [st.name for st in attribution.attribute(sample, (declared,))] == ["chat"]


def test_automatic_workloads_that_end_leave_no_analysis_state():
    analysis = Analysis(load_config(None))
    for i in range(200):  # a new server every tick
        g = _group(1000 + i, f"vllm serve Qwen/Qwen3-0.6B --port {2000 + i}", model_info())
        _, findings = analysis([_sample(float(i), (g,))])
        assert [w.name for w in findings.workload_findings] == [f"vllm/Qwen3-0.6B:{2000 + i}"]
    # private: the analysis's hold state: its bound is what is tested, no public name shows it
    assert len([k for k in analysis._hysteresis if k.startswith("workload/")]) == 1


def test_launchers_survive_record_and_replay():
    from headroom import record

    g = _group(7, "torchrun --nproc_per_node 8 train.py --model o/m", model_info())
    sample = _sample(1.0, (g,))
    assert record.decode_sample(json.loads(record.encode_sample(sample))) == sample


def test_the_identity_collector_makes_a_workload_of_a_launcher_outside_any_pod(tmp_path):
    proc = fake_proc(tmp_path, 50, 1, ["vllm", "serve", "Qwen/Qwen3-0.6B", "--port", "8001"],
                     {"HF_HUB_CACHE": "/hub"})
    hf_cache(tmp_path / "rootfs" / "hub", "Qwen/Qwen3-0.6B", QWEN3.read_text())
    d = fake_proc(tmp_path / "child", 51, 50, ["VLLM::EngineCore"]) / "51"
    os.rename(d, proc / "51")
    previous = _sample(0.0, (IdentityGroup(kind="x", name="x", pids=(51,)),))

    def collect(**settings):
        return IdentityCollector(SourceContext(paths=Paths(procfs=proc, sysfs=tmp_path / "sys", rootfs=tmp_path),
                                               previous=lambda: PreviousTick.of(previous), settings=settings)).collect()

    c = IdentityCollector(SourceContext(paths=Paths(procfs=proc, sysfs=tmp_path / "sys", rootfs=tmp_path),
                                        previous=lambda: PreviousTick.of(previous)))
    s = c.collect()
    assert [(g.kind, g.name, g.pids, g.launcher.port) for g in s.groups] == [("launcher", "vllm/Qwen3-0.6B:8001",
                                                                               (51,), 8001)]
    # the model files are read off the tick: meanwhile the status says so
    assert s.groups[0].model.error in ("", "reading its config.json (in the background)")
    deadline = time.monotonic() + 10
    while s.groups[0].model.error and time.monotonic() < deadline:
        time.sleep(0.01)
        s = c.collect()
    c.close()
    assert s.groups[0].model.source.endswith("/hub/models--Qwen--Qwen3-0.6B/snapshots/0123abcd/config.json")
    assert collect(auto=["pods", "jobs"]).groups == ()  # launchers off
    # its network namespace is not known to be ours: its --port is not reached on our loopback
    assert s.groups[0].launcher.metrics_url == "" and "network namespace" in s.groups[0].launcher.problems[-1]


def test_found_is_logged_only_for_launchers_that_become_automatic_workloads(tmp_path):
    """`make demo`: the declared profile `chat` has the Llama server's processes, so only the Qwen server becomes
    an automatic workload, and only it is logged as found (the same rule as attribution, on the processes the
    declared profiles had in the newest sample); when the declared profile lets go, the Llama one is found."""
    from structlog.testing import capture_logs

    from headroom.samples import WorkloadProcesses

    proc = fake_proc(tmp_path, 60, 1, ["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct", "--port", "8000"])
    os.rename(fake_proc(tmp_path / "b", 61, 1, ["vllm", "serve", "Qwen/Qwen3-0.6B", "--port", "8001"]) / "61",
              proc / "61")
    chat = profile_from_dict({"name": "chat", "kind": "inference", "match": {"cmdline": "Llama"}})
    members = WorkloadProcesses(name="chat", pids=(60,), threads=1, cpu_user_seconds_total=0.0,
                                cpu_system_seconds_total=0.0, resident_memory_bytes=0)
    gpu = GpuSample(index=0, uuid="GPU-0", name="H100", pci_bus_id="0", memory_total_bytes=80 * GIB,
                    processes=(GpuProcess(60, 40 * GIB), GpuProcess(61, 2 * GIB)))
    newest = {}

    def previous(claimed: tuple) -> Sample:
        return Sample(1.0, 1.0, {"nvml": SourceResult("nvml", True, 0.0, NvmlSample(up=True, gpus=(gpu,))),
                                 "processes": SourceResult("processes", True, 0.0, ProcessesSample(workloads=claimed))})

    c = IdentityCollector(SourceContext(paths=Paths(procfs=proc, sysfs=tmp_path / "sys", rootfs=tmp_path),
                                        workloads=(chat,), previous=lambda: PreviousTick.of(newest["sample"])))
    try:
        newest["sample"] = previous((members,))
        with capture_logs() as logs:
            identity = c.collect()
            c.collect()
        found = [e["workload"] for e in logs if e["event"] == "auto_workload_found"]
        assert found == ["vllm/Qwen3-0.6B:8001"]
        assert not [e for e in logs if e["event"] == "auto_workload_gone"]
        # the identity sample still has both (attribution decides, and agrees with the log)
        assert sorted(g.name for g in identity.groups) == ["vllm/Llama-3.1-70B-Instruct:8000", "vllm/Qwen3-0.6B:8001"]
        sample = Sample(1.0, 1.0, {**newest["sample"].sources,
                                   "identity": SourceResult("identity", True, 0.0, identity)})
        assert [st.name for st in attribution.attribute(sample, (chat,)) if st.source == "auto"] == found
        newest["sample"] = previous(())  # the declared profile's processes are gone: the server is automatic now
        with capture_logs() as logs:
            c.collect()
        assert [e["workload"] for e in logs if e["event"] == "auto_workload_found"] == [
            "vllm/Llama-3.1-70B-Instruct:8000"]
    finally:
        c.close()


@pytest.mark.parametrize(("url", "local"), [
    ("http://127.0.0.1:8000/metrics", True), ("http://[::1]:8000/metrics", True),
    ("http://169.254.169.254:80/metrics", False),  # a cloud metadata service, named on a command line
    ("http://10.255.255.254:8000/metrics", False), ("http://example.com:8000/metrics", False),
])
def test_only_this_hosts_addresses_are_scraped_for_an_automatic_server(url, local):
    from headroom.sources.identity import is_local_address

    assert is_local_address(url) is local


def test_only_a_server_in_our_network_namespace_is_reached_on_our_loopback(tmp_path):
    from headroom.sources.identity import same_network_namespace

    proc = fake_proc(tmp_path, 60, 1, ["vllm", "serve", "m"])
    (proc / "60" / "ns").mkdir()
    assert not same_network_namespace(proc, 60)  # unreadable: not assumed
    os.symlink("net:[4026531999]", proc / "60" / "ns" / "net")  # a pod's
    assert not same_network_namespace(proc, 60)
    os.unlink(proc / "60" / "ns" / "net")
    os.symlink(os.readlink("/proc/self/ns/net"), proc / "60" / "ns" / "net")
    assert same_network_namespace(proc, 60)


LLAMA3_8B = FIXTURES / "llama-3-8b" / "config.json"


@pytest.mark.parametrize(("argv", "sized", "check"), [
    # a plain torchrun is DDP: the script's own flags give context, micro-batch and checkpointing
    ("torchrun --nproc_per_node 8 train.py --model_name_or_path o/m --max_seq_length 4096 "
     "--per_device_train_batch_size 2 --gradient_checkpointing --bf16", True,
     lambda p: (p.parallel.data, p.context.max, p.training.micro_batch, p.training.gradient_checkpointing,
                p.training.sharding.value) == (8, 4096, 2, True, "none")),
    ("torchrun train.py --model o/m --max_seq_length 2048 --gradient_checkpointing false", True,
     lambda p: p.training is None or not p.training.gradient_checkpointing),
    ("accelerate launch --use_deepspeed --zero_stage 3 --num_processes 4 sft.py --model o/m --max_seq_length 1024",
     True, lambda p: (p.training.sharding.value, p.parallel.data) == ("zero3", 4)),
    ("accelerate launch --use_fsdp --fsdp_sharding_strategy SHARD_GRAD_OP sft.py --model o/m --max_seq_length 1024",
     True, lambda p: p.training.sharding.value == "fsdp-shard-grad-op"),
    # the sharding lives in a config file headroom does not read: nothing expected, and the reason says where
    ("deepspeed --num_gpus 8 train.py --model o/m --max_seq_length 1024", False, "the DeepSpeed config"),
    ("torchrun train.py --model o/m --deepspeed ds.json --max_seq_length 1024", False, "the script's --deepspeed"),
    ("accelerate launch --config_file fsdp.yaml sft.py --model o/m --max_seq_length 1024", False, "--config_file"),
])
def test_training_launchers_are_sized_only_from_what_their_command_line_says(argv, sized, check):
    profile, reason = auto_profile(parse(argv.split()), model_info(LLAMA3_8B), "t")
    assert profile.kind.value == "training"
    if sized:
        assert reason is None and check(profile), (reason, profile)
        from headroom.workload.sizing import estimate

        assert estimate(profile, gpu_memory_bytes=80 * GIB, gpus=8).expected_usage_bytes > 0
    else:
        assert check in reason and "not read" in reason, reason


def test_an_automatic_servers_metrics_are_scraped_where_its_command_line_says(tmp_path):
    """A real process whose command line is `vllm serve MODEL --port P` and that serves vLLM's exposition on
    P: the serving collector scrapes it for the automatic workload (no profile, no endpoint written
    anywhere), and the analysis reads it as that workload's runtime view; a declared profile claiming the
    same process takes the endpoint instead."""
    import subprocess
    import sys

    from headroom.samples import WorkloadProcesses
    from headroom.sources.serving import ServingCollector
    from test_serving import SERVE_FILE, body_of

    from conftest import free_port

    port = free_port()
    body = tmp_path / "metrics.prom"
    body.write_bytes(body_of("vllm"))
    argv = ["vllm", "serve", "Qwen/Qwen3-0.6B", "--port", str(port), "--body", str(body)]
    proc = subprocess.Popen([sys.executable, "-c", SERVE_FILE, *argv])
    g = _group(proc.pid, " ".join(argv), model_info())
    holder = {"s": _sample(1.0, (g,))}
    c = ServingCollector(SourceContext(settings={"detect": False}, previous=lambda: PreviousTick.of(holder["s"])))
    try:
        deadline = time.monotonic() + 20
        served = c.collect()
        while not (served.endpoints and served.endpoints[0].up) and time.monotonic() < deadline:
            time.sleep(0.05)  # until its server listens and a scrape finished
            served = c.collect()
        (e,) = served.endpoints
        assert (e.workload, e.endpoint, e.up, e.runtime) == (g.name, f"http://127.0.0.1:{port}/metrics", True, "vllm")
        assert e.kv_cache_usage_ratio is not None
        sample = Sample(2.0, 2.0, {**holder["s"].sources, "serving": SourceResult("serving", True, 0.0, served)})
        _, findings = Analysis(load_config(None))([sample])
        (wf,) = findings.workload_findings
        assert wf.name == g.name and wf.serving is not None and wf.serving.up
        # a declared profile's processes: not scraped a second time under the automatic name
        procs = ProcessesSample(workloads=(WorkloadProcesses(name="chat", pids=(proc.pid,), threads=1,
                                                             cpu_user_seconds_total=0.0, cpu_system_seconds_total=0.0,
                                                             resident_memory_bytes=0),))
        holder["s"] = Sample(3.0, 3.0, {**holder["s"].sources, "processes": SourceResult("processes", True, 0.0, procs)})
        assert c.collect().endpoints == ()
        # a profile with only an endpoint naming the same server (localhost spelled out): that profile's, scraped once
        holder["s"] = _sample(1.0, (g,))
        only = profile_from_dict({"name": "chat", "kind": "inference", "endpoint": f"http://localhost:{port}/metrics"})
        c2 = ServingCollector(SourceContext(settings={"detect": False}, workloads=(only,), previous=lambda: PreviousTick.of(holder["s"])))
        try:
            assert [e.workload for e in c2.collect().endpoints] == ["chat"]
        finally:
            c2.close()
    finally:
        c.close()
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------- host and port from another user's argv
@pytest.mark.parametrize("host", [
    "127.0.0.1/admin/delete?x=", "a@b", "127.0.0.1 evil", "x#y", "127.0.0.1:9999", "fe80::1%eth0", "-lead.example",
    "a..b", "h\u00e9.example", "x" * 64 + ".example", "[::1", "127.0.0.1\x00",
], ids=repr)
def test_a_host_that_is_not_an_address_or_host_name_builds_no_metrics_url(host):
    """`--host 127.0.0.1/admin/delete?x=` once made the agent GET /admin/delete on port 80 of loopback: a host
    from argv is an IP literal or an RFC 1123 name, else refused with a note and no URL built from it."""
    launcher = parse(["vllm", "serve", "m", "--host", host, "--port", "8001"])
    assert launcher is not None and launcher.metrics_url == "" and launcher.host == ""
    assert any(p.startswith("--host ") and "not an IP address or host name" in p for p in launcher.problems)
    assert all(len(p) < 200 for p in launcher.problems)  # the value is quoted as an excerpt, never whole
    assert metrics_endpoint(["vllm", "serve", "m", "--host", host]) is None


@pytest.mark.parametrize(("host", "url"), [
    ("::1", "http://[::1]:8001/metrics"), ("[::1]", "http://[::1]:8001/metrics"),
    ("fd00:0:0::5", "http://[fd00::5]:8001/metrics"), ("10.1.2.3", "http://10.1.2.3:8001/metrics"),
    ("localhost", "http://localhost:8001/metrics"), ("vllm-0.vllm.svc.cluster.local.",
                                                      "http://vllm-0.vllm.svc.cluster.local.:8001/metrics"),
    ("0.0.0.0", "http://127.0.0.1:8001/metrics"), ("::", "http://127.0.0.1:8001/metrics"),
])
def test_addresses_and_host_names_build_a_well_formed_url(host, url):
    from urllib.parse import urlsplit

    launcher = parse(["vllm", "serve", "m", "--host", host, "--port", "8001"])
    assert launcher.metrics_url == url and not launcher.problems
    parts = urlsplit(url)
    assert parts.path == "/metrics" and not parts.query and parts.port == 8001


@pytest.mark.parametrize("port", ["8_000", "+80", "\u0668\u0660", "0", "65536", "80/x", "1e3", "9" * 5000])
def test_a_port_that_is_not_1_to_65535_in_ascii_digits_builds_no_metrics_url(port):
    launcher = parse(["vllm", "serve", "m", "--port", port])
    assert launcher.metrics_url == "" and any(p.startswith("--port ") for p in launcher.problems)
    assert all(len(p) < 200 for p in launcher.problems)
    tgi = parse(["text-generation-launcher", "--model-id", "m", "--prometheus-port", port])
    assert tgi.metrics_url == "" and any(p.startswith("--prometheus-port ") for p in tgi.problems)


# ------------------------------------------------------------------------------------- launchers without a GPU
def _no_gpus(t: float = 1.0) -> Sample:
    return Sample(t, t, {"nvml": SourceResult("nvml", True, 0.0, NvmlSample(up=True, gpus=(
        GpuSample(index=0, uuid="GPU-0", name="H100", pci_bus_id="0", up=True, memory_total_bytes=80 * GIB),)))})


def _mine(c: IdentityCollector, pid: int, deadline: float = 30.0) -> tuple:
    """Tick ``c`` (about 4 ticks a second) until a group holds ``pid``; returns (its groups, ticks taken)."""
    end, ticks = time.monotonic() + deadline, 0
    while True:
        ticks += 1
        groups = [g for g in c.collect().groups if pid in g.pids]
        if groups or time.monotonic() > end:
            return groups, ticks
        time.sleep(0.25)


def test_a_serving_launcher_without_a_gpu_is_a_workload_whose_endpoint_is_scraped(tmp_path):
    """A real process whose command line is `python -m vllm.entrypoints.openai.api_server --model M --port P`
    (a CPU vLLM, or one still loading its model) and that serves vLLM's exposition on P, while NVML lists no
    process: it is an automatic workload (kind from its launcher, no GPU, no GPU series), the serving collector
    scrapes the port its command line names, and it is gone in the tick after it ends. Found on the live /proc
    of this machine, both when it runs before the collector's first tick (the first listing) and when it starts
    later (the pids the kernel allocated since the last tick)."""
    import subprocess
    import sys

    from headroom.sources.serving import ServingCollector
    from test_serving import SERVE_FILE, body_of

    from conftest import free_port

    body = tmp_path / "metrics.prom"
    body.write_bytes(body_of("vllm"))

    def start() -> tuple[subprocess.Popen, int]:
        port = free_port()
        argv = ["-m", "vllm.entrypoints.openai.api_server", "--model", "Qwen/Qwen3-0.6B", "--port", str(port),
                "--body", str(body)]
        return subprocess.Popen([sys.executable, "-c", SERVE_FILE, *argv]), port

    early, early_port = start()
    c = IdentityCollector(SourceContext(paths=Paths(procfs=Path("/proc"), sysfs=tmp_path / "sys", rootfs=tmp_path),
                                        previous=lambda: PreviousTick.of(_no_gpus())))
    late = None
    try:
        (g,), _ = _mine(c, early.pid)
        assert (g.kind, g.name, g.pids, g.gpus) == ("launcher", f"vllm/Qwen3-0.6B:{early_port}", (early.pid,), ())
        assert g.launcher.metrics_url == f"http://127.0.0.1:{early_port}/metrics"
        late, late_port = start()
        time.sleep(0.3)  # it has exec'd python: the next tick's look sees its command line
        (h,), ticks = _mine(c, late.pid)
        assert ticks <= 3 and h.name == f"vllm/Qwen3-0.6B:{late_port}" and h.gpus == ()

        holder = {"s": None}
        identity = c.collect()
        mine = tuple(x for x in identity.groups if x.pids in ((early.pid,), (late.pid,)))
        holder["s"] = Sample(2.0, 2.0, {**_no_gpus(2.0).sources, "identity": SourceResult("identity", True, 0.0,
                                                                                         IdentitySample(groups=mine))})
        serving = ServingCollector(SourceContext(settings={"detect": False}, previous=lambda: PreviousTick.of(holder["s"])))
        try:
            deadline = time.monotonic() + 20
            served = serving.collect()
            while not (len(served.endpoints) == 2 and all(e.up for e in served.endpoints)) \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
                served = serving.collect()
        finally:
            serving.close()
        assert sorted((e.workload, e.endpoint, e.up, e.runtime) for e in served.endpoints) == sorted(
            (x.name, x.launcher.metrics_url, True, "vllm") for x in mine)
        sample = Sample(2.0, 2.0, {**holder["s"].sources, "serving": SourceResult("serving", True, 0.0, served)})
        st = {s.name: s for s in attribution.attribute(sample, ())}
        assert st[g.name].source == "auto" and st[g.name].kind == "inference" and st[g.name].gpus == ()
        from headroom.exposition import render
        from headroom.exposition.render.collectors import _render_identity  # private: no public name
        from headroom.exposition.render.findings import _render_workloads  # private: no public name

        w = render.Writer()
        _render_identity(w, sample.data("identity"), sample)
        _render_workloads(w, tuple(st.values()))
        text = w.render().decode()
        mine_lines = [line for line in text.splitlines() if f'workload="{g.name}"' in line]
        assert any(line.startswith("headroom_workload_info{") for line in mine_lines)
        assert not [line for line in mine_lines if line.startswith("headroom_workload_gpu_")], mine_lines

        early.kill()
        early.wait()
        assert [x for x in c.collect().groups if early.pid in x.pids] == []  # its pidfd: the next tick
    finally:
        c.close()
        for p in (early, late):
            if p is not None:
                p.kill()
                p.wait()


def test_launchers_without_a_gpu_are_the_outermost_bounded_and_not_while_their_gpu_processes_run(tmp_path,
                                                                                                monkeypatch):
    """A forked worker with its server's command line belongs to the server (one workload); a launcher whose
    engine is on a GPU is that engine's workload as before (its GPU processes, not itself); with launchers off
    nothing is looked for; and at most LAUNCHERS_WITHOUT_GPU are followed."""
    # LAUNCHERS_WITHOUT_GPU: patched where the collector reads it
    from headroom.sources.identity import collector as identity_module

    proc = fake_proc(tmp_path, 50, 1, ["vllm", "serve", "o/a", "--port", "8001"])
    for pid, ppid, argv in ((51, 50, ["vllm", "serve", "o/a", "--port", "8001"]),  # a forked worker
                            (60, 1, ["python", "-m", "sglang.launch_server", "--model-path", "o/b"]),
                            (61, 60, ["sglang::scheduler"]),  # its engine, on the GPU
                            (70, 1, ["torchrun", "--nproc_per_node", "2", "train.py"]),  # CPU training
                            (71, 70, ["python", "-u", "train.py"]), (80, 1, ["bash"])):
        os.rename(fake_proc(tmp_path / str(pid), pid, ppid, argv) / str(pid), proc / str(pid))
    gpu = GpuSample(index=0, uuid="GPU-0", name="H100", pci_bus_id="0", memory_total_bytes=80 * GIB,
                    processes=(GpuProcess(61, GIB),))
    previous = Sample(1.0, 1.0, {"nvml": SourceResult("nvml", True, 0.0, NvmlSample(up=True, gpus=(gpu,)))})

    def collector(**settings) -> IdentityCollector:
        return IdentityCollector(SourceContext(paths=Paths(procfs=proc, sysfs=tmp_path / "sys", rootfs=tmp_path),
                                               previous=lambda: PreviousTick.of(previous), settings=settings))

    c = collector()
    try:
        got = sorted((g.kind, g.name, g.pids, g.gpus) for g in c.collect().groups)
        assert got == [("launcher", "sglang/b:30000", (61,), ("GPU-0",)),
                       ("launcher", "torchrun/train.py", (70,), ()), ("launcher", "vllm/a:8001", (50,), ())]
        c.collect()
        # private: the launcher scan: its reads (or its absence) are what is tested, no public name shows it
        assert c._scan.reads == 7  # each process's command line once (a fixture tree is listed every tick)
        (tmp_path / "gone").mkdir()
        os.rename(proc / "70", tmp_path / "gone" / "70")
        assert sorted(g.name for g in c.collect().groups) == ["sglang/b:30000", "vllm/a:8001"]
    finally:
        c.close()
    off = collector(auto=["pods", "jobs"])
    # private: the launcher scan: its reads (or its absence) are what is tested, no public name shows it
    assert off.collect().groups == () and off._scan is None
    monkeypatch.setattr(identity_module, "LAUNCHERS_WITHOUT_GPU", 1)
    capped = collector()
    assert sorted(g.name for g in capped.collect().groups) == ["sglang/b:30000", "vllm/a:8001"]  # lowest pid first


SIMULATED_SERVERS = """\
gpus:
  - {name: NVIDIA H100 80GB HBM3, memory_total: 80GiB, power_limit: 700, utilization: 0.3, memory_used: 7GiB}
workloads:  # no profiles: both servers are found by their command lines; each serves on a port of its own choosing
  - name: gpu-server
    cmdline: vllm serve Qwen/Qwen3-0.6B --port 8001
    serving: {runtime: vllm, kv_blocks: 1000, block_size: 16, kv_usage: 0.25, running: 2, waiting: 1}
    children:
      - cmdline: VLLM::EngineCore
        gpus: {0: 6GiB}
  - name: cpu-server
    cmdline: python3 -m vllm.entrypoints.openai.api_server --model o/cpu-model --port 8002
    serving: {runtime: vllm, kv_blocks: 500, block_size: 16, kv_usage: 0.75, running: 1, waiting: 0}
  - name: silent
    cmdline: vllm serve o/quiet --port 8003
    gpus: {0: 1GiB}
"""
SYNTHETIC_HOST = """\
host:
  cpu: {logical_cpus: 8, utilization: 0.1}
  memory: {total: 64GiB, available: 48GiB}
"""


@pytest.mark.parametrize("host", ["real stand-ins", "synthetic host"])
def test_a_launcher_found_under_simulate_has_its_metrics_read(tmp_path, host):
    """`headroom run --simulate` with two undeclared vLLM servers, one on a GPU and one without (a CPU server),
    each a stand-in serving vLLM's exposition over real HTTP on a port the scenario chose, while its command line
    says --port 8001 / 8002: both are automatic workloads and both have their /metrics read (where the stand-in
    serves: the scenario knows); a stand-in that serves nothing is not scraped at the port its command line
    names. With real stand-ins (processes of this machine whose argv is the command line) and with a synthetic
    host (simulated processes, in the agent's network namespace)."""
    from conftest import Agent, http_get

    (tmp_path / "s.yaml").write_text(SIMULATED_SERVERS + (SYNTHETIC_HOST if host == "synthetic host" else ""))
    (tmp_path / "c.yaml").write_text("agent:\n  sample_interval: 250ms\n")
    agent = Agent("--config.file", str(tmp_path / "c.yaml"), "--simulate", str(tmp_path / "s.yaml"))
    want = {"vllm/Qwen3-0.6B:8001": "0.25", "vllm/cpu-model:8002": "0.75"}
    try:
        agent.wait_ready()
        deadline, text = time.monotonic() + 30, ""
        while time.monotonic() < deadline:
            text = http_get(agent.url + "/metrics")[2].decode()
            kv = {w: next((line.rsplit(" ", 1)[1] for line in text.splitlines()
                           if line.startswith("headroom_workload_kv_cache_usage_ratio{")
                           and f'workload="{w}"' in line), None) for w in want}
            if kv == want:
                break
            time.sleep(0.25)
        assert kv == want, [line for line in text.splitlines() if "serving" in line or "workload_info" in line]
        up = {line.split('workload="')[1].split('"')[0]: line.rsplit(" ", 1)[1] for line in text.splitlines()
              if line.startswith("headroom_workload_serving_up{")}
        assert up == dict.fromkeys(want, "1"), up  # the silent server is not scraped at its command line's port
        infos = [line for line in text.splitlines() if line.startswith("headroom_workload_info{")]
        assert any('workload="vllm/quiet:8003"' in line and 'source="auto"' in line for line in infos), infos
        cpu = [line for line in text.splitlines() if 'workload="vllm/cpu-model:8002"' in line]
        assert not [line for line in cpu if line.startswith("headroom_workload_gpu_")], cpu
    finally:
        agent.stop()

@pytest.mark.parametrize(("argv", "launches"), [
    (["/venv/bin/python3", "/venv/bin/torchrun", "--standalone", "--nproc_per_node=2", "train.py"], True),
    (["python3", "-m", "torch.distributed.run", "--nproc-per-node", "8", "train.py"], True),
    (["accelerate", "launch", "--num-processes", "2", "train.py"], True),
    (["deepspeed", "--num_gpus", "8", "train.py"], True),
    (["/usr/bin/python3", "-u", "-m", "deepspeed.launcher.launch", "--world_info=e30=", "train.py"], True),
    (["python3", "-u", "train.py"], False),
    (["vllm", "serve", "meta-llama/Llama-3.1-8B"], False),  # a serving launcher: its children are no ranks
    (["python3", "-m", "http.server"], False),
    ([], False),
])
def test_which_command_lines_start_ranks(argv, launches):
    from headroom.workload.launchers import starts_ranks

    assert starts_ranks(argv) is launches


def test_dataloader_ranks_under_deepspeeds_per_node_launcher():
    """deepspeed -> python -m deepspeed.launcher.launch -> ranks -> workers: the per-node launcher's children are
    the ranks (the deepspeed command is its parent, not theirs)."""
    from headroom.workload.launchers import dataloader_ranks

    argv = {1: ["/sbin/init"], 10: ["deepspeed", "train.py"],
            11: ["/usr/bin/python3", "-u", "-m", "deepspeed.launcher.launch", "--world_info=e30=", "train.py"],
            12: ["/usr/bin/python3", "-u", "train.py", "--local_rank=0"],
            13: ["/usr/bin/python3", "-u", "train.py", "--local_rank=1"]}
    members = {10: (1, "deepspeed"), 11: (10, "python3"), 12: (11, "python3"), 13: (11, "python3"),
               20: (12, "pt_data_worker"), 21: (12, "pt_data_worker"), 30: (13, "pt_data_worker")}
    assert dataloader_ranks(members, lambda pid: argv.get(pid, [])) == {12: (20, 21), 13: (30,)}


# ------------------------------------------------------------------------------ Ollama: /api/ps at OLLAMA_HOST
@pytest.mark.parametrize(("value", "url"), [
    (None, "http://127.0.0.1:11434/api/ps"), ("", "http://127.0.0.1:11434/api/ps"),
    ("0.0.0.0", "http://127.0.0.1:11434/api/ps"), ("0.0.0.0:8080", "http://127.0.0.1:8080/api/ps"),
    ('"0.0.0.0"', "http://127.0.0.1:11434/api/ps"), (":8080", "http://127.0.0.1:8080/api/ps"),
    ("http://10.0.0.5", "http://10.0.0.5:80/api/ps"), ("https://h.example:9443/", "https://h.example:9443/api/ps"),
    ("[::1]:11434", "http://[::1]:11434/api/ps"), ("::1", "http://[::1]:11434/api/ps"),
    ("127.0.0.1:99999", "http://127.0.0.1:11434/api/ps"), ("a@b", ""), ("ftp://x", ""), ("127.0.0.1/admin?x=", ""),
])
def test_ollama_host_is_read_as_ollama_reads_it(value, url):
    """envconfig/config.go getOllamaHost (ollama, commit 000ce02): scheme optional, default port 11434 (80/443 with
    http:// or https://), a bad port is the default; a host that is not an address builds no URL, with a reason."""
    from headroom.workload.launchers import ollama_status_url

    got, problem = ollama_status_url(value)
    assert got == url
    assert (problem is None) == bool(url) and (problem is None or problem.startswith("OLLAMA_HOST "))


def test_ollama_serve_has_its_api_ps_read_where_its_environment_says(tmp_path):
    """`ollama serve` (not its runner) gets its /api/ps: from OLLAMA_HOST in /proc/PID/environ, the default without
    one, and none (with the reason) when that environment is closed to the agent."""
    from headroom.sources.identity import ollama_endpoint

    serve, runner = parse(["/usr/local/bin/ollama", "serve"]), parse(["/usr/bin/ollama", "runner", "--model", "/b"])
    assert serve.metrics_url == "http://127.0.0.1:11434/api/ps" and runner.metrics_url == ""
    (tmp_path / "41").mkdir()
    (tmp_path / "41" / "environ").write_bytes(b"HOME=/root\0OLLAMA_HOST=0.0.0.0:8080\0PATH=/usr/bin\0")
    assert ollama_endpoint(tmp_path, 41, serve).metrics_url == "http://127.0.0.1:8080/api/ps"
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "environ").write_bytes(b"HOME=/root\0")
    assert ollama_endpoint(tmp_path, 42, serve).metrics_url == "http://127.0.0.1:11434/api/ps"
    closed = ollama_endpoint(tmp_path, 43, serve)  # no such file: another user's process
    assert closed.metrics_url == "" and "its environment (OLLAMA_HOST) is closed to the agent" in closed.problems[-1]


def test_an_automatic_ollama_server_has_its_api_ps_read(tmp_path):
    """A real process whose command line is `ollama serve` and that answers /api/ps: the automatic workload's
    endpoint is that JSON, read as Ollama's (its resident models), with no profile written."""
    import subprocess
    import sys

    from headroom.sources.serving import ServingCollector
    from test_serving import SERVE_FILE, ollama_ps

    from conftest import free_port

    port = free_port()
    body = tmp_path / "ps.json"
    body.write_bytes(ollama_ps())
    argv = ["ollama", "serve", "--port", str(port), "--body", str(body)]  # the stand-in's own flags: Ollama takes none
    proc = subprocess.Popen([sys.executable, "-c", SERVE_FILE, *argv])
    launcher = replace(parse(["ollama", "serve"]), metrics_url=f"http://127.0.0.1:{port}/api/ps")
    g = IdentityGroup(kind="launcher", name=display_name(launcher), pids=(proc.pid,), gpus=("GPU-0",),
                      launcher=launcher, model=None)
    c = ServingCollector(SourceContext(settings={"detect": False}, previous=lambda: PreviousTick.of(_sample(1.0, (g,)))))
    try:
        deadline = time.monotonic() + 20
        served = c.collect()
        while not (served.endpoints and served.endpoints[0].up) and time.monotonic() < deadline:
            time.sleep(0.05)
            served = c.collect()
        (e,) = served.endpoints
        assert (e.up, e.runtime, e.resident_models) == (True, "ollama", ("gemma3:latest",)), e.error
    finally:
        c.close()
        proc.kill()
        proc.wait()
