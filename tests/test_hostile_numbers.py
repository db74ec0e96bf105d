"""Numbers another user controls (a launcher's config.json, its command line) can neither hide the host from
Prometheus nor stop the tick (issue 24, items 1 and 2; docs/reliability.md, "Hostile input").

- every integer read from a model config is bounded to a documented range: a larger one refuses the model with the
  field named and the number not repeated;
- every integer of a profile is at most 2^53, so the memory model stays in finite floats;
- the writer leaves out (and counts) a value Prometheus cannot parse instead of failing the whole scrape: checked
  with a real Prometheus scraping it;
- a fault in one workload's figures degrades that workload, never the tick; a fault in the whole analysis costs the
  tick's verdicts, not the raw signals, and /healthz names it.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from headroom.analysis import bottleneck
from headroom.analysis.pipeline import Analysis, Findings
from headroom.config import load_config
from headroom.exposition.render import Renderer, ValueRefused, Writer, format_value
from headroom.exposition.render import render as render_exposition
from headroom.sampler import Sampler
from headroom.samples import ModelInfo, Snapshot
from headroom.sources import Collector, SourceContext
from headroom.units import format_bytes, parse_bytes, parse_count
from headroom.workload import attribution
from headroom.workload.launchers import parse
from headroom.workload.modelconfig import ModelConfigError, read_model_config
from headroom.workload.profiles import ProfileErrors, profile_from_dict
from test_launchers import QWEN3, _group, _sample, model_info

from conftest import ROOT

HUGE = int("9" * 400)  # a 400-digit number: json.loads reads it as an int, float() of it overflows


def _config(tmp_path, **changes):
    cfg = json.loads(QWEN3.read_text())
    cfg.update(changes)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


# ------------------------------------------------------------------------------------------- model configs
@pytest.mark.parametrize(("field", "value"), [
    ("max_position_embeddings", HUGE),
    ("intermediate_size", int("9" * 330)),
    ("num_hidden_layers", 10**6),
    ("hidden_size", 2**40),
    ("vocab_size", 10**12),
    ("num_key_value_heads", HUGE),
    ("head_dim", HUGE),
    ("sliding_window", HUGE),
])
def test_an_out_of_range_config_number_refuses_the_model_with_the_field_named(tmp_path, field, value):
    with pytest.raises(ModelConfigError) as exc:
        read_model_config(_config(tmp_path, **{field: value}))
    assert exc.value.field == field
    assert "out of range" in exc.value.message and "999999" not in str(exc.value)
    assert len(str(exc.value)) < 200


def test_mixture_of_experts_and_mla_numbers_are_bounded_too(tmp_path):
    cfg = {"model_type": "deepseek_v3", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
           "vocab_size": 1000, "intermediate_size": 128, "n_routed_experts": 8, "num_experts_per_tok": 2,
           "moe_intermediate_size": 32, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
           "v_head_dim": 8, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert read_model_config(tmp_path).fields["params"] > 0  # the honest one is sized from its config
    for field in ("n_shared_experts", "first_k_dense_replace", "qk_nope_head_dim", "moe_intermediate_size"):
        (tmp_path / "config.json").write_text(json.dumps({**cfg, field: HUGE}))
        with pytest.raises(ModelConfigError) as exc:
            read_model_config(tmp_path)
        assert exc.value.field == field and "a 400-digit number" in exc.value.message


def test_safetensors_shapes_and_totals_are_bounded(tmp_path):
    import struct

    _config(tmp_path)
    for shape in ([2**40, 2**40, 2**40], [HUGE]):  # 2^120 elements; a 400-digit dimension
        header = json.dumps({"w": {"dtype": "BF16", "shape": shape, "data_offsets": [0, 0]}}).encode()
        (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
        with pytest.raises(ModelConfigError, match="larger than any checkpoint holds") as exc:
            read_model_config(tmp_path)
        assert "9999" not in str(exc.value)
    # each tensor is plausible, together they are not: the total is bounded too
    header = json.dumps({f"w{i}": {"dtype": "BF16", "shape": [2**25, 2**25], "data_offsets": [0, 0]}
                         for i in range(1000)}).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(ModelConfigError, match="parameters is out of range"):
        read_model_config(tmp_path)


def test_estimate_refuses_a_hostile_config_in_one_line_with_exit_2(tmp_path):
    """Before: an OverflowError traceback from format_table."""
    _config(tmp_path, max_position_embeddings=HUGE)
    r = subprocess.run([sys.executable, "-m", "headroom", "estimate", "--model-config", str(tmp_path),
                        "--gpu-memory", "80GiB", "--runtime", "vllm"], capture_output=True, text=True, timeout=60,
                       cwd=ROOT)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "max_position_embeddings" in r.stderr
    assert "9999999999" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------------- command lines
@pytest.mark.parametrize(("argv", "problem"), [
    (["vllm", "serve", "m", "--max-model-len", "9" * 400 + "k"], "--max-model-len"),  # before: OverflowError
    (["torchrun", "t.py", "--max-seq-length", "9" * 5000], "--max-seq-length"),  # before: ValueError (4300 digits)
    (["vllm", "serve", "m", "--max-num-seqs", "9" * 400], "--max-num-seqs"),  # before: a 400-digit setting
    (["vllm", "serve", "m", "--max-num-seqs", "99999999"], "--max-num-seqs 99999999: out of range"),
    (["vllm", "serve", "m", "--tensor-parallel-size", "100000"], "--tensor-parallel-size 100000: out of range"),
])
def test_hostile_launcher_numbers_are_ignored_with_a_short_problem(argv, problem):
    launcher = parse(argv)
    assert launcher is not None
    assert launcher.max_model_len is None and launcher.max_num_seqs is None and launcher.tensor_parallel is None
    assert any(p.startswith(problem) for p in launcher.problems), launcher.problems
    assert all(len(p) < 160 for p in launcher.problems)


# ------------------------------------------------------------------------------------------------ profiles
def test_profile_integers_are_at_most_2_to_the_53():
    with pytest.raises(ProfileErrors) as exc:
        profile_from_dict({"name": "x", "kind": "inference", "context": {"max": HUGE},
                           "architecture": {"layers": 2, "heads": 2, "hidden_size": 8, "intermediate_size": HUGE}})
    messages = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in exc.value.errors]
    assert any(m.startswith("context.max: must be <= 2^53") for m in messages), messages
    assert any(m.startswith("architecture.intermediate_size: must be <= 2^53") for m in messages), messages
    assert not any("9999" in m for m in messages)


def test_counts_and_sizes_are_refused_before_they_are_expanded():
    """Before: parse_count("1e999999999") built a billion-digit integer."""
    start = time.process_time()
    for parser, text in ((parse_count, "1e999999999"), (parse_bytes, "1e999999999GiB"), (parse_count, HUGE)):
        with pytest.raises(ValueError, match="more than 10"):
            parser(text)
    assert time.process_time() - start < 1.0
    assert parse_count("7B") == 7 * 10**9 and parse_bytes("80GiB") == 80 * 2**30


def test_format_bytes_never_raises():
    assert format_bytes(HUGE) == "more than 10^300 bytes"
    assert format_bytes(-HUGE) == "-more than 10^300 bytes"
    assert format_bytes(float("inf")) == "more than 10^300 bytes"
    assert format_bytes(float("nan")) == "an unknown number of bytes"
    assert format_bytes(3 * 2**30) == "3.00 GiB"


# ------------------------------------------------------------------------------------------------ the writer
def test_format_value_refuses_what_prometheus_cannot_parse():
    for value in (HUGE, -HUGE, 2**1024):
        with pytest.raises(ValueRefused):
            format_value(value)
    assert format_value(2**1000) == str(2**1000)  # large, but a float: Prometheus parses it
    assert format_value(float("inf")) == "+Inf" and format_value(float("nan")) == "NaN"


def test_the_writer_leaves_out_a_refused_value_every_time_it_comes():
    r = Renderer()
    for _ in range(3):  # the caches must not keep a refused value as "unchanged"
        w = Writer(r)
        w.add("headroom_workload_processes", HUGE, "a")
        w.add("headroom_workload_processes", 3, "b")
        w.add_many(("headroom_workload_threads", "headroom_workload_processes"), (HUGE, 4), ("c",))
        text = w.render().decode()
        assert w.refused == ["headroom_workload_processes", "headroom_workload_threads"]
        assert 'headroom_workload_processes{workload="b"} 3' in text
        assert 'headroom_workload_processes{workload="c"} 4' in text and "999999" not in text


def _hostile_snapshot() -> Snapshot:
    """A real automatic workload, then two of its figures turned into numbers beyond a float's range, as a
    config.json made them before the bounds (headroom_workload_memory_expected_bytes: a 56-digit value then)."""
    g = _group(7, "vllm serve Qwen/Qwen3-0.6B --max-model-len 4096", model_info())
    sample = _sample(1.0, (g,))
    st = attribution.attribute(sample, ())[0]
    st = dataclasses.replace(st, expected_peak_bytes=HUGE, expected_components={**st.expected_components,
                                                                                "kv_cache": HUGE})
    return Snapshot(sample=sample, ticks=1, interval=1.0, tick_duration_seconds=0.001,
                    findings=Findings(workloads=(st,)))


def test_a_value_prometheus_cannot_parse_leaves_the_scrape_up_on_a_real_prometheus(tmp_path):
    """Before: Prometheus rejected the whole scrape (strconv.ParseFloat: value out of range) and the host
    dropped out (up 0) while the agent reported itself healthy."""
    from structlog.testing import capture_logs

    from test_prometheus_integration import Prometheus

    with capture_logs() as logs:
        body = Renderer().render(_hostile_snapshot())

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    target = f"127.0.0.1:{server.server_address[1]}"
    prom = Prometheus(tmp_path, target, {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
        "scrape_configs": [{"job_name": "headroom", "static_configs": [{"targets": [target]}]}]})
    try:
        prom.wait_ready()
        deadline = time.monotonic() + 30
        up = []
        while time.monotonic() < deadline:
            up = prom.query("up")["data"]["result"]
            if up:
                break
            time.sleep(0.5)
        assert up and up[0]["value"][1] == "1", prom.api("/api/v1/targets")
        refused = prom.query("headroom_exposition_refused_samples")["data"]["result"]
        assert refused and refused[0]["value"][1] == "2"
        kept = prom.query('headroom_workload_memory_expected_bytes{component="weights"}')["data"]["result"]
        assert kept and float(kept[0]["value"][1]) > 0  # the same workload's other series are there
        assert [e["series"] for e in logs if e["event"] == "exposition_value_refused"] == [[
            "headroom_workload_gpu_memory_expected_peak_bytes", "headroom_workload_memory_expected_bytes"]]
    finally:
        prom.stop()
        server.shutdown()
        server.server_close()


# ------------------------------------------------------------------------------- one workload, not the tick
def test_a_config_json_that_once_stopped_the_tick_now_leaves_that_workload_unsized(tmp_path):
    """Before: OverflowError in units.format_bytes on every tick (330-digit intermediate_size): /healthz 503."""
    fields = json.loads(model_info().fields_json)
    fields["architecture"]["intermediate_size"] = int("9" * 330)
    hostile = ModelInfo(source="/m/config.json", fields_json=json.dumps(fields), max_context=HUGE)
    honest = _group(8, "vllm serve Qwen/Qwen3-0.6B --port 8001 --max-model-len 4096", model_info())
    groups = (_group(7, "vllm serve Qwen/Qwen3-0.6B", hostile), honest)
    analysis = Analysis(load_config(None))
    _, findings = analysis([_sample(1.0, groups)])
    bad, good = findings.workloads
    assert bad.estimate is None and bad.estimate_error.startswith("architecture.intermediate_size: must be <= 2^53")
    assert good.estimate is not None and good.estimate_error is None
    assert [w.name for w in findings.workload_findings] == [bad.name, good.name]
    text = render_exposition(Snapshot(sample=_sample(1.0, groups), ticks=1, interval=1.0, tick_duration_seconds=0.0,
                                      findings=findings)).decode()
    assert "headroom_exposition_refused_samples 0" in text and "99999" not in text


def test_a_fault_in_one_workloads_analysis_degrades_that_workload_only(monkeypatch):
    """Fault injection: the scoring of one workload raises (a bug its inputs reach). The other workload keeps its
    verdict and headroom, the failing one says why, and the tick goes on."""
    real = bottleneck.score_workload

    def score(p, *args, **kwargs):
        if p.name.endswith(":8000"):
            raise OverflowError("integer division result too large for a float")
        return real(p, *args, **kwargs)

    monkeypatch.setattr(bottleneck, "score_workload", score)
    groups = (_group(7, "vllm serve Qwen/Qwen3-0.6B", model_info()),
              _group(8, "vllm serve Qwen/Qwen3-0.6B --port 8001", model_info()))
    _, findings = Analysis(load_config(None))([_sample(1.0, groups)])
    bad, good = findings.workload_findings
    assert bad.verdict.primary == "none" and bad.verdict.scores == {}
    assert bad.verdict.evidence["none"].startswith("analysis failed: OverflowError: ")
    assert findings.errors == (("workload/vllm/Qwen3-0.6B:8000", bad.verdict.evidence["none"]),)
    assert good.verdict.scores and good.headroom.gpu_memory_bytes is not None


class _Memory(Collector):
    name = "memory"

    def collect(self):
        from headroom.samples import MemorySample

        return MemorySample(total_bytes=100, available_bytes=60, free_bytes=50)


def test_a_failing_analysis_costs_the_verdicts_not_the_tick_and_health_says_so():
    from structlog.testing import capture_logs

    state = {"broken": True}

    def analyse(window):
        if state["broken"]:
            raise OverflowError("integer division result too large for a float")
        return {}, Findings()

    s = Sampler(render=render_exposition, collectors=[_Memory(SourceContext())], interval=0.2, analyse=analyse)
    try:
        with capture_logs() as logs:
            first, second = s.tick(), s.tick()
            assert "headroom_memory_size_bytes 100" in second.exposition.decode()  # the raw signals still go out
            assert first.findings is None and s.failing["analysis"].startswith("OverflowError: integer division")
            state["broken"] = False
            s.tick()
        assert "analysis" not in s.failing
        assert [e["event"] for e in logs if e["event"].startswith("analysis_")] == ["analysis_failed",
                                                                                  "analysis_recovered"]
    finally:
        s.stop()


def test_every_real_config_in_the_fixtures_is_within_the_caps():
    """The caps must refuse only the absurd: every real config.json the suite carries still reads."""
    from conftest import FIXTURES

    configs = sorted((FIXTURES / "hf").glob("*/config.json"))
    assert len(configs) >= 20
    refused = {}
    for path in configs:
        try:
            read_model_config(path)
        except ModelConfigError as exc:
            if "out of range" in exc.message:
                refused[path.parent.name] = str(exc)
    assert refused == {}
