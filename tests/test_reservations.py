"""Issue 26 class 3: a runtime that reserves GPU memory up front makes a full card normal in the GPU's own verdict,
whichever way the agent finds the runtime: its launcher's command line (an automatic workload), the format of its
serving metrics, or the declared profile's runtime (workload/runtimes.py, analysis/pipeline.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from headroom.analysis.pipeline import Analysis
from headroom.config import check_config_text
from headroom.samples import ServingEndpoint, ServingSample, SourceResult
from headroom.sources.serving import read_exposition
from headroom.workload.launcher_profiles import auto_profile, display_name
from headroom.workload.launchers import parse

from situations import GIB, Gpu, Host, build_window

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "serving"
FULL = Gpu(util=0.6, mem_used=int(78 * GIB), mem_total=80 * GIB)  # 97.5 %: what a reservation looks like
PROFILE = """
workloads:
  - name: chat
    kind: inference
    params: 8B
    precision: bf16
{runtime}    architecture: {{layers: 32, heads: 32, kv_heads: 8, head_dim: 128}}
    context: {{max: 8192}}
    gpus: [0]
"""


def run(config: str, window, statuses=None):
    analysis = Analysis(check_config_text(config + "\nanalysis:\n  hold: 0s\n", "c.yaml"))
    if statuses is not None:
        # private: the attribution stands in (Analysis takes no attribution argument; the situation names the workloads' GPUs)
        analysis._attribute = lambda sample: statuses
    findings = None
    for i in range(1, len(window) + 1):
        _, findings = analysis(window[:i])
    return findings


def gpu_memory(findings, index: int = 0) -> tuple[float, str]:
    (g,) = [g for g in findings.gpu_findings if g.index == index]
    return g.verdict.scores["gpu_memory"], g.verdict.evidence["gpu_memory"]


# ------------------------------------------------------------------------------------------ launcher
LAUNCHED = {
    "tgi": ["text-generation-launcher", "--model-id", "meta-llama/Llama-3.1-8B-Instruct", "--cuda-memory-fraction",
            "0.9"],
    "tensorrt-llm": ["trtllm-serve", "meta-llama/Llama-3.1-8B-Instruct", "--kv_cache_free_gpu_memory_fraction", "0.9"],
    "llama.cpp": ["/opt/llama.cpp/build/bin/llama-server", "-m", "/models/llama-3.1-8b-q4_k_m.gguf", "-c", "8192",
                  "-ngl", "99", "--metrics"],
    "ollama": ["/usr/local/bin/ollama", "serve"],
}
LABEL = {"tgi": "TGI", "tensorrt-llm": "TensorRT-LLM", "llama.cpp": "llama.cpp", "ollama": "Ollama"}


@pytest.mark.parametrize("runtime", sorted(LAUNCHED))
def test_a_full_card_under_a_launched_reserving_runtime_is_normal_for_the_gpu(runtime):
    """An automatic workload whose launcher the identity collector found: its command line names the runtime, and
    that runtime's description says it reserves, so the GPU's full card scores nothing."""
    launcher = parse(LAUNCHED[runtime])
    assert launcher is not None and launcher.runtime == runtime
    name = display_name(launcher)
    profile, _ = auto_profile(launcher, None, name)
    status = SimpleNamespace(name=name, source="auto", profile=profile, gpu_indices=(0,), processes=1, estimate=None,
                             expected_peak_bytes=None)
    findings = run("", build_window(Host(), [FULL]), (status,))
    score, evidence = gpu_memory(findings)
    assert score == 0.0, evidence
    assert f"reserved up front by {LABEL[runtime]} (found from its launcher's command line" in evidence
    (wf,) = findings.workload_findings
    assert wf.verdict.scores["gpu_memory"] == 0.0, wf.verdict.evidence["gpu_memory"]


def test_an_ollama_runner_is_recognised_with_its_model_and_context():
    launcher = parse(["/usr/bin/ollama", "runner", "--model", "/root/.ollama/models/blobs/sha256-6a0746a1",
                      "--ctx-size", "8192", "--parallel", "4", "--port", "40121"])
    assert launcher is not None and launcher.runtime == "ollama"
    assert launcher.max_model_len == 8192 and launcher.max_num_seqs == 4 and launcher.port == 40121
    assert launcher.metrics_url == ""  # Ollama serves no Prometheus metrics: nothing is scraped


def test_a_training_launcher_reserves_nothing():
    launcher = parse(["torchrun", "--nproc-per-node", "1", "train.py"])
    profile, _ = auto_profile(launcher, None, display_name(launcher))
    status = SimpleNamespace(name="torchrun/train.py", source="auto", profile=profile, gpu_indices=(0,), processes=1,
                             estimate=None, expected_peak_bytes=None)
    score, evidence = gpu_memory(run("", build_window(Host(), [FULL]), (status,)))
    assert score > 0.5 and "reserved" not in evidence


# ----------------------------------------------------------------------------------- serving metrics
TRITON_ONNX = (b"# HELP nv_inference_pending_request_count Instantaneous number of pending requests\n"
               b"# TYPE nv_inference_pending_request_count gauge\n"
               b'nv_inference_pending_request_count{model="resnet",version="1"} 0\n')
EXPOSITIONS = {"tgi": (FIXTURES / "tgi-v3.prom").read_bytes(), "triton": (FIXTURES / "triton-trtllm.prom").read_bytes(),
               "llama.cpp": (FIXTURES / "llamacpp.prom").read_bytes()}


def served(body: bytes):
    """The serving source of ``chat`` as the collector fills it from ``body`` (a runtime's /metrics)."""
    runtime, fields = read_exposition(body, "text/plain; version=0.0.4", None)
    e = ServingEndpoint("chat", "http://127.0.0.1:9000/metrics", up=True, runtime=runtime, **fields)
    return lambda t: {"serving": SourceResult("serving", True, 0.0, ServingSample((e,)))}


@pytest.mark.parametrize("runtime", sorted(EXPOSITIONS))
def test_a_full_card_under_a_runtime_found_from_its_metrics_is_normal(runtime):
    """The profile names no runtime: the format of its /metrics does (TGI, Triton's TensorRT-LLM backend with its
    KV cache block metrics, llama.cpp). Ollama exports no metrics: it is found from its launcher or profile."""
    window = build_window(Host(), [FULL], extra=served(EXPOSITIONS[runtime]))
    findings = run(PROFILE.format(runtime=""), window)
    score, evidence = gpu_memory(findings)
    assert score == 0.0, evidence
    assert "(found from its serving metrics" in evidence


def test_triton_without_tensorrt_llm_is_not_excused():
    """Triton reserves only with its TensorRT-LLM backend (a KV cache in its metrics); its ONNX or PyTorch backends
    allocate as they go, so their full card still scores."""
    window = build_window(Host(), [FULL], extra=served(TRITON_ONNX))
    score, evidence = gpu_memory(run(PROFILE.format(runtime="    runtime: triton\n"), window))
    assert score > 0.5 and "reserved" not in evidence


def test_llama_cpp_metrics_are_read():
    runtime, f = read_exposition(EXPOSITIONS["llama.cpp"], "text/plain", None)
    assert runtime == "llama.cpp"
    assert f["requests_running"] == 2 and f["requests_waiting"] == 1 and f["kv_cache_usage_ratio"] == 0.25
    assert f["prompt_tokens_total"] == 33065 and f["generation_tokens_total"] == 7801


# ---------------------------------------------------------------------------------------------- profile
@pytest.mark.parametrize("name", ["tgi", "text-generation-inference", "tensorrt-llm", "trtllm", "llama.cpp",
                                  "ollama"])
def test_a_full_card_under_a_declared_reserving_runtime_is_normal(name):
    findings = run(PROFILE.format(runtime=f"    runtime: {name}\n"), build_window(Host(), [FULL]))
    score, evidence = gpu_memory(findings)
    assert score == 0.0, evidence
    assert "(found from its profile" in evidence


def test_a_runtime_that_allocates_as_it_goes_is_not_excused():
    findings = run(PROFILE.format(runtime="    runtime: transformers\n"), build_window(Host(), [FULL]))
    score, evidence = gpu_memory(findings)
    assert score > 0.5 and "reserved" not in evidence


# ------------------------------------------------------------------------------- what is still named
def test_growth_past_the_reservation_is_named():
    """A reserving runtime holds its memory steady: a steady rise on a nearly full card runs out all the same."""
    growing = Gpu(util=0.6, mem_used=int(78 * GIB), mem_total=80 * GIB, mem_growth=8 * 2**20)
    findings = run(PROFILE.format(runtime="    runtime: tgi\n"), build_window(Host(), [growing]))
    score, evidence = gpu_memory(findings)
    assert score >= 0.5 and "growing past the reservation" in evidence
    (wf,) = findings.workload_findings
    assert wf.verdict.primary == "gpu_memory"


def test_a_workload_sharing_the_card_with_a_reservation_is_left_no_room():
    config = PROFILE.format(runtime="    runtime: ollama\n") + ("  - name: trainer\n    kind: training\n    params: 1B\n"
                                                             "    precision: bf16\n    gpus: [0]\n")
    findings = run(config, build_window(Host(), [FULL]))
    score, evidence = gpu_memory(findings)
    assert score > 0.5 and "on a GPU it shares with trainer: the reservation leaves it no room" in evidence
    (g,) = findings.gpu_findings
    assert g.verdict.primary == "gpu_memory"
    assert "Ollama reserves the card up front (OLLAMA_KEEP_ALIVE, default 5 minutes) and leaves trainer no room" \
        in g.verdict.remedies["gpu_memory"].text
    by_name = {w.name: w for w in findings.workload_findings}
    assert by_name["chat"].verdict.scores["gpu_memory"] == 0.0  # its own reservation holds
    assert by_name["trainer"].verdict.scores["gpu_memory"] > 0.5


def test_every_described_reservation_states_its_setting_default_and_source():
    from headroom.workload import runtimes

    assert runtimes.DESCRIPTIONS["ollama"].metrics == ()  # no Prometheus endpoint: found by launcher or profile
    for d in runtimes.DESCRIPTIONS.values():
        r = d.reservation
        assert r is not None, d.name
        assert r.setting and r.default and r.how and r.source.startswith("https://"), d.name
    assert runtimes.reservation("transformers") is None and runtimes.reservation(None) is None
