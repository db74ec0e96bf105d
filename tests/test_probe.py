"""`headroom probe` (issue 28): the engine's arithmetic, its schedules, and whole probes against the simulation's
deterministic OpenAI-compatible stand-in (simulation/openai_api.py), whose queue follows a KV cache."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import pairwise
from typing import ClassVar

import pytest

from headroom.cli import main
from headroom.probe import store
from headroom.probe.client import Result, api_base, discover, new_session, send
from headroom.probe.host import NoWatch
from headroom.probe.load import arrivals, length, ramp
from headroom.probe.run import Plan, execute
from headroom.probe.stats import percentile, summarize
from headroom.simulation.runtime_metrics import serve
from headroom.simulation.scenario import Signal

from conftest import ROOT


# ------------------------------------------------------------------------------------ arithmetic
def test_percentiles_interpolate_linearly_between_ranks_as_numpy():
    xs = [4.0, 1.0, 3.0, 2.0]
    assert percentile(xs, 0.5) == 2.5
    assert percentile(xs, 0.95) == pytest.approx(3.85)
    assert percentile(xs, 0.99) == pytest.approx(3.97)
    assert percentile([7.0], 0.99) == 7.0
    assert percentile([], 0.5) is None


def _result(ttft, itl=(), error=None, out=10, prompt=100):
    return Result(0.0, prompt, out, ttft=ttft, itl=list(itl), e2e=None if error else ttft + sum(itl),
                  prompt_tokens=prompt, output_tokens=out if error is None else 0, error=error)


def test_a_step_summary_counts_errors_goodput_and_names_each_broken_objective():
    results = [_result(0.1, [0.01] * 9) for _ in range(8)] + [_result(0.9, [0.05] * 9)] + \
              [_result(None, error="http_503")]
    s = summarize(results, seconds=2.0, slo={"ttft_p95": 0.5, "itl_p95": 0.02}, error_budget=0.05)
    assert (s["requests"], s["completed"], s["errors"]) == (10, 9, {"http_503": 1})
    assert s["error_rate"] == 0.1
    assert s["requests_per_second"] == 4.5
    assert s["goodput_requests_per_second"] == 4.0  # the slow one is completed but not within the SLO
    assert s["output_tokens_per_second"] == 45.0
    assert s["ttft"]["p50"] == 0.1 and s["ttft"]["p95"] == pytest.approx(0.58)
    assert s["slo_broken"] == ["ttft_p95", "itl_p95", "error_rate"] and s["slo_ok"] is False
    assert s["lengths_exact"] is True
    ok = summarize(results[:8], seconds=2.0, slo={"ttft_p95": 0.5}, error_budget=0.0)
    assert ok["slo_ok"] and ok["slo_broken"] == []


def test_a_step_where_nothing_completed_breaks_the_error_budget_even_without_latency_objectives():
    s = summarize([_result(None, error="connect")], seconds=1.0, slo={}, error_budget=1.0)
    assert s["slo_ok"] is False and "error_rate" in s["slo_broken"]


def test_ramps_double_and_include_the_declared_normal_and_peak():
    assert ramp(1, 16, (3, 8)) == [1, 2, 3, 4, 8, 16]
    assert ramp(1, 10, ()) == [1, 2, 4, 8, 10]
    assert ramp(0.25, 4.0, (1.5,), integer=False) == [0.25, 0.5, 1.0, 1.5, 2.0, 4.0]
    assert len(ramp(1, 10**9, (), limit=64)) <= 64


def test_poisson_arrivals_have_the_asked_rate_and_are_seeded():
    a = arrivals(20.0, 100.0, random.Random(1))
    assert 1800 < len(a) < 2200
    assert a == arrivals(20.0, 100.0, random.Random(1))
    gaps = [y - x for x, y in pairwise(a)]
    assert sum(gaps) / len(gaps) == pytest.approx(0.05, rel=0.1)


def test_lengths_are_fixed_or_exponential_with_the_typical_mean_capped_at_max():
    rng = random.Random(3)
    assert {length(rng, 256, 1024, "fixed") for _ in range(10)} == {256}
    xs = [length(rng, 256, 1024, "exponential") for _ in range(5000)]
    assert max(xs) <= 1024 and min(xs) >= 1
    assert 200 < sum(xs) / len(xs) < 260  # the cap trims the tail


def test_api_base_accepts_a_root_a_v1_base_or_a_profiles_metrics_endpoint():
    for url in ("http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/metrics"):
        assert api_base(url) == "http://h:8000/v1"


# ------------------------------------------------------------------------------ the stand-in
@pytest.fixture
def standin():
    """A vLLM stand-in with room for exactly 4 requests of 100 + 20 tokens (128 reserved each: 8 blocks of 16);
    each takes 50 ms to its first token and 30 ms for each next one: 0.62 s in all. The margins between a TTFT
    that fits (50 ms), the objectives (300 ms) and one that waited for a whole request (over 620 ms) are wide
    enough for a loaded machine."""
    spec = {"runtime": "vllm", "version": "v1-itl", "port": 0, "kv_blocks": 32, "block_size": 16, "model": "tiny",
            "signals": {}, "api": {"ttft": 0.05, "prefill_per_token": 0.0, "itl": 0.03, "itl_per_running": 0.0}}
    server, driver = serve(spec, Signal)
    yield f"http://127.0.0.1:{server.server_address[1]}", driver
    server.shutdown()
    server.server_close()


def _metrics(url):
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        for name in ("vllm:kv_cache_usage_perc", "vllm:num_requests_waiting", "vllm:num_requests_running"):
            if line.startswith(name + "{"):
                out[name] = float(line.rsplit(" ", 1)[1])
    return out


def test_a_ramp_on_the_standin_breaks_at_the_first_step_beyond_its_kv_cache(standin):
    url, _ = standin
    seen = []

    def watch():  # what the runtime's own /metrics says while the probe runs (what the agent reads)
        end = time.monotonic() + 30
        while time.monotonic() < end and not done.is_set():
            seen.append(_metrics(url))
            time.sleep(0.1)

    done = threading.Event()
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    plan = Plan(schedule="concurrency", levels=[1, 2, 4, 8, 16], step_seconds=3.0, warmup_seconds=0.5, duration=60,
                input_tokens=100, output_tokens=20, slo={"ttft_p95": 0.3}, error_budget=0.01)
    result = execute(url, plan)
    done.set()
    t.join()
    steps = result["steps"]
    assert [s["level"] for s in steps] == [1, 2, 4, 8]  # stopped at the first broken step
    assert [s["slo_ok"] for s in steps] == [True, True, True, False]
    assert steps[3]["slo_broken"] == ["ttft_p95"]
    # 4 fit: their first token after 50 ms; the other 4 wait a whole request (50 ms + 19 x 30 ms) first
    assert steps[3]["ttft"]["p95"] > 0.6
    assert result["stopped"] == "slo" and result["partial"] is False
    assert result["capacity"]["concurrency"] == 4 and result["capacity"]["from_step"] == 3
    assert all(s["lengths_exact"] and s["input_tokens_mean"] == 100 and s["output_tokens_mean"] == 20 for s in steps)
    assert result["lengths"].startswith("exact")
    assert all(s["errors"] == {} for s in steps)
    assert max(m.get("vllm:kv_cache_usage_perc", 0) for m in seen) == 1.0  # 4 x 128 of 512 tokens
    assert max(m.get("vllm:num_requests_waiting", 0) for m in seen) >= 3
    assert max(m.get("vllm:num_requests_running", 0) for m in seen) == 4
    # its throughput doubles with the concurrency while it fits (closed loop: 1 request per 0.62 s per worker)
    rps = [s["requests_per_second"] for s in steps[:3]]
    assert rps[1] == pytest.approx(2 * rps[0], rel=0.35) and rps[2] == pytest.approx(4 * rps[0], rel=0.35)
    assert all(s["client_cpu_seconds_per_request"] > 0 for s in steps)
    json.dumps(result)  # the result is JSON as it is


def test_an_open_loop_rate_that_overfills_the_standin_queues_and_breaks_ttft(standin):
    url, _ = standin
    # 4 run at once for 0.62 s each: about 6 requests/s at most; 30/s queues without bound
    plan = Plan(schedule="rate", levels=[3.0, 30.0], step_seconds=4.0, warmup_seconds=0.5, duration=60,
                input_tokens=100, output_tokens=20, slo={"ttft_p95": 0.3}, error_budget=0.01, max_in_flight=128)
    result = execute(url, plan)
    low, high = result["steps"]
    assert low["slo_ok"]
    assert 0.8 < low["requests_per_second"] < 4
    assert not high["slo_ok"] and high["ttft"]["p95"] > 0.8  # the queue shows: arrivals do not wait for the client
    assert result["capacity"]["requests_per_second"] == low["requests_per_second"]


def test_chat_completions_report_the_true_prompt_length_the_runtime_counted(standin):
    url, _ = standin
    plan = Plan(schedule="concurrency", levels=[2], step_seconds=2.0, warmup_seconds=0.2, duration=30,
                input_tokens=50, output_tokens=5)
    result = execute(url, plan, api="chat")
    s = result["steps"][0]
    assert s["completed"] > 0 and s["errors"] == {}
    assert s["input_tokens_mean"] == 54  # 50 words + the chat template's 4
    assert s["lengths_exact"] is False and result["lengths"].startswith("measured")


# ------------------------------------------------------------------------------------ the command
def _probe(*args):
    return main(["probe", "--no-agent", *args])


def test_the_command_prints_the_table_writes_json_and_keeps_the_last_result(standin, tmp_path, capsys):
    url, _ = standin
    out = tmp_path / "r.json"
    code = _probe("--url", url, "--levels", "2,8", "--step", "2s", "--warmup", "0.3s", "--input-tokens", "100",
                  "--output-tokens", "20", "--slo", "ttft_p95=300ms", "--output", str(out),
                  "--state.dir", str(tmp_path / "state"))
    text = capsys.readouterr()
    assert code == 0, text.err
    answer = text.out.splitlines()[0]  # the answer first (probe/answer.py), then the step table
    assert answer.startswith("Capacity at the SLO (TTFT p95 <= 300 ms, errors <= 1 %): 2 concurrent sequences / ")
    assert " at 100 input / 20 output tokens" in answer and " from step 1 (step 1 (8 concurrent) broke ttft_p95" in answer
    assert "broke ttft_p95" in text.out
    assert "step 2/2: 8 concurrent" in text.err  # progress on stderr
    doc = json.loads(out.read_text())
    assert doc["version"] == 1 and doc["capacity"]["concurrency"] == 2 and doc["stopped"] == "slo"
    assert doc["slo"] == {"ttft_p95": 0.3, "error_rate": 0.01}
    # --output is the whole result; the agent's copy is what store.validate keeps of it, the host's scores and
    # evidence_by and how the lengths were made included (the landing page and the gauges read them)
    assert doc["lengths"].startswith("exact (text of words") and doc["steps"][1]["host"]["source"] == "in_process"
    kept = json.loads((tmp_path / "state" / "probe-last.json").read_text())
    assert kept == store.validate(doc) and kept["lengths"] == doc["lengths"]
    assert kept["steps"][1]["host"]["scores"] == doc["steps"][1]["host"]["scores"]
    assert kept["steps"][1]["host"]["evidence_by"] == doc["steps"][1]["host"]["evidence_by"]
    assert _probe("--url", url, "--levels", "1", "--step", "1s", "--warmup", "0s", "--input-tokens", "10",
                  "--output-tokens", "2", "--markdown", "--no-save") == 0
    md = capsys.readouterr().out
    assert md.startswith("**Capacity at the SLO (errors <= 1 %): at least 1 concurrent sequences / ") \
        and "| step | conc. |" in md


def test_no_host_runs_the_client_alone(standin, capsys):
    """--no-host: no host watch beside the client (bench/probe.py compares the client alone with vLLM's tool)."""
    url, _ = standin
    code = _probe("--url", url, "--levels", "1", "--step", "1s", "--warmup", "0s", "--input-tokens", "10",
                  "--output-tokens", "2", "--no-host", "--json", "--no-save")
    out = capsys.readouterr()
    assert code == 0, out.err
    host = json.loads(out.out)["steps"][0]["host"]
    assert host["source"] == "none" and host["samples"] == 0 and host["peaks"] == {}


def test_a_profiles_load_and_slo_drive_the_probe_and_flags_override_them(standin, tmp_path, capsys):
    url, _ = standin
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"""workloads:
  - name: chat
    kind: inference
    gpus: [0]
    endpoint: {url}/metrics
    load: {{input_tokens: 100, output_tokens: 20, concurrency: {{normal: 2, peak: 4}}}}
    slo: {{ttft_p95: 300ms, error_rate: 1%}}
""")
    code = main(["probe", "--config.file", str(cfg), "--no-agent", "--workload", "chat", "--step", "2s",
                 "--warmup", "0.3s", "--json", "--no-save"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["load"]["levels"] == [1, 2, 4, 8]  # the ramp to twice the peak, normal and peak in it
    assert doc["load"]["input_tokens"]["typical"] == 100 and doc["workload"] == "chat"
    assert doc["capacity"]["concurrency"] == 4 and doc["capacity"]["from_step"] == 3
    code = main(["probe", "--config.file", str(cfg), "--no-agent", "--workload", "chat", "--step", "1s",
                 "--warmup", "0.2s", "--levels", "8", "--slo", "ttft_p95=5s", "--json", "--no-save"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["steps"][0]["slo_ok"] and doc["slo"]["ttft_p95"] == 5.0


@pytest.mark.parametrize(("flags", "words"), [
    (["--max-concurrency", "100000"], "--max-concurrency: must be between 1 and 1024"),
    (["--max-rate", "1e9", "--schedule", "rate"], "--max-rate: must be between"),
    (["--duration", "5h"], "--duration: must be between"),
    (["--step", "100ms"], "--step: must be between"),
    (["--step", "2s", "--warmup", "2s"], "must be shorter than --step"),
    (["--levels", "0,2"], "--levels: concurrency levels are whole numbers >= 1"),
    (["--levels", "1,x"], "is not a number"),
    (["--levels", "2000"], "at most 1024 concurrent"),
    (["--input-tokens", "0"], "--input-tokens: must be between 1 and"),
    (["--output-tokens", "99999999"], "--output-tokens: must be between 1 and"),
    (["--slo", "latency=1s"], "expected OBJECTIVE=VALUE"),
    (["--slo", "ttft_p95=soon"], "--slo ttft_p95:"),
    (["--slo", "error_rate=150%"], "--slo error_rate: expected a ratio"),
    (["--step", "fast"], "--step:"),
])
def test_absurd_or_bad_values_are_refused_with_one_line(flags, words, capsys):
    code = _probe("--url", "http://127.0.0.1:9", *flags)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("headroom: probe: ") and words in err and err.count("\n") == 1, err


def test_a_target_is_required_and_an_unknown_workload_is_named(tmp_path, capsys):
    assert _probe() == 2
    assert "name a workload (--workload NAME" in capsys.readouterr().err
    cfg = tmp_path / "c.yaml"
    cfg.write_text("agent: {sample_interval: 1s}\n")
    assert main(["probe", "--config.file", str(cfg), "--no-agent", "--workload", "nope"]) == 2
    assert "workload 'nope': no endpoint to probe" in capsys.readouterr().err
    assert _probe("--url", "ftp://x") == 2
    assert "expected an http:// or https:// URL" in capsys.readouterr().err


def test_ctrl_c_stops_the_load_within_a_second_and_prints_the_partial_result(standin):
    url, _ = standin
    p = subprocess.Popen([sys.executable, "-m", "headroom", "probe", "--no-agent", "--no-save", "--url", url,
                          "--levels", "2,4", "--step", "60s", "--warmup", "0.5s", "--input-tokens", "10",
                          "--output-tokens", "10", "--json"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    deadline = time.monotonic() + 60
    line = ""
    while "step 1/2: 2 concurrent requests" not in line and time.monotonic() < deadline:
        line = p.stderr.readline()  # the progress line: the load runs
    time.sleep(4.0)  # well past the 0.5 s warm-up: some requests are counted (1.5 s counted none on a loaded CI machine)
    t = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=15)
    took = time.monotonic() - t
    assert p.returncode == 130, err
    assert took < 2.5, took  # the load stops within a second; the rest is the exit
    assert "Traceback" not in err
    doc = json.loads(out)
    assert doc["stopped"] == "interrupted" and doc["partial"] is True
    assert doc["steps"][0]["completed"] > 0 and doc["steps"][0]["seconds"] < 10


def test_probe_workload_chat_on_the_demo_finds_the_agents_endpoint_and_puts_the_estimate_beside_it(tmp_path):
    """`make demo` runs the agent on the demo scenario; `headroom probe --workload chat` finds the stand-in's API
    through the agent's status (the scenario's profile is not in config.yaml) and its load: and slo: there."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    agent = subprocess.Popen([sys.executable, "-m", "headroom", "run", "--config.file", "config.yaml", "--simulate",
                              "demo", "--web.listen-address", f"127.0.0.1:{port}"], cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        status = f"http://127.0.0.1:{port}/api/v1/status"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                doc = json.loads(urllib.request.urlopen(status, timeout=2).read())
                if any(w["name"] == "chat" and (w.get("serving") or {}).get("up") for w in doc["workloads"]):
                    break
            except OSError:
                pass
            time.sleep(0.5)
        r = subprocess.run([sys.executable, "-m", "headroom", "probe", "--config.file", "config.yaml", "--workload",
                            "chat", "--agent", f"http://127.0.0.1:{port}", "--levels", "2,40", "--step", "4s",
                            "--warmup", "1s", "--output-tokens", "40", "--slo", "ttft_p95=300ms", "--json",
                            "--state.dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    finally:
        agent.terminate()
        agent.wait(10)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["workload"] == "chat" and doc["model"].startswith("meta-llama/")  # what its /v1/models lists
    assert doc["load"]["input_tokens"]["typical"] == 1200  # the demo profile's load:
    assert doc["slo"] == {"ttft_p95": 0.3, "itl_p95": 0.05, "error_rate": 0.01}  # its slo:, the flag over it
    first, second = doc["steps"]
    assert first["slo_ok"] and not second["slo_ok"]  # 40 x 1 248 tokens are far beyond the 26 160 of its cache
    assert doc["capacity"]["concurrency"] == 2 and doc["capacity"]["from_step"] == 1
    assert second["host"]["source"] == "status_api" and second["host"]["samples"] > 0
    assert second["host"]["peaks"]["kv_cache_usage_ratio"] > first["host"]["peaks"]["kv_cache_usage_ratio"]
    assert doc["estimate"]["kv_capacity_estimate_tokens"] == 26160
    assert (tmp_path / "probe-last.json").exists()


def test_a_client_short_of_cpu_says_so_in_every_step(standin):
    """A client whose event loop lags (its 50 ms ticker wakes late: the loop has more to do than it can) is
    flagged: the probe then measures itself, not the server. A thread of the same process holding the GIL for
    100 ms at a time stands in for such a client."""
    url, _ = standin
    stop = threading.Event()
    switch = sys.getswitchinterval()
    sys.setswitchinterval(0.1)

    def burn():
        while not stop.is_set():
            sum(range(1000))

    t = threading.Thread(target=burn, daemon=True)
    t.start()
    try:
        plan = Plan(schedule="concurrency", levels=[1], step_seconds=1.5, warmup_seconds=0.2, duration=30,
                    input_tokens=10, output_tokens=5)
        burning = execute(url, plan)["steps"][0]
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(switch)
    calm = execute(url, plan)["steps"][0]
    assert burning["client_saturated"] is True and burning["client_loop_lag_p95"] > 0.05
    # the client's CPU is its event loop thread's: the burning thread beside it (as the in-process host watch
    # is) is not counted as the client's (process_time counted it: about a whole core)
    assert burning["client_cpu_ratio"] < 0.5
    assert calm["client_saturated"] is False and calm["client_loop_lag_p95"] < 0.05


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE") or not os.path.exists("/proc/thread-self/schedstat"),
                    reason="needs Linux scheduling policies and schedstat")
def test_a_client_the_host_starves_of_cpu_is_starved_not_saturated(standin):
    """A client whose loop is late because the host gives its thread no CPU (the server and other processes on
    the same cores) is not saturated by its own work: its thread waited on the run queue (schedstat), and the
    step says so (`client_starved`, `client_cpu_wait_ratio`), where `client_saturated` said the load generator
    itself was the limit (bench/probe.py's 8.8 ms CPU per request at 5.8 requests/s, 5 % of a core, was flagged
    saturated). The loop's thread, on one CPU at SCHED_IDLE beside a busy process on that CPU, stands in."""
    url, _ = standin
    cpu = max(os.sched_getaffinity(0))
    allowed = os.sched_getaffinity(0)
    hog = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
    plan = Plan(schedule="concurrency", levels=[1], step_seconds=1.5, warmup_seconds=0.2, duration=30,
                input_tokens=10, output_tokens=5)
    try:
        hz, deadline = os.sysconf("SC_CLK_TCK"), time.monotonic() + 30
        while time.monotonic() < deadline:  # the hog spinning on that CPU first (its interpreter's start-up takes a while)
            with open(f"/proc/{hog.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if (int(fields[11]) + int(fields[12])) / hz >= 0.2:
                break
            time.sleep(0.05)
        os.sched_setaffinity(0, {cpu})  # this thread only (the event loop's): the stand-in's threads keep theirs
        loop_thread = threading.get_native_id()

        class Starving(NoWatch):
            """Starves the loop's thread from the step's start (SCHED_IDLE beside the hog) to its end: discovery and
            the prompts before it run at the normal policy (starved from the start, a loaded machine left them
            no CPU for the 30 s of the plan: no step at all)."""

            def begin(self) -> None:
                os.sched_setscheduler(loop_thread, os.SCHED_IDLE, os.sched_param(0))

            def end(self):
                os.sched_setscheduler(loop_thread, os.SCHED_OTHER, os.sched_param(0))
                return super().end()

        result = execute(url, plan, host=Starving())
        assert result["steps"], result.get("message")
        starved = result["steps"][0]
    finally:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        os.sched_setaffinity(0, allowed)
        hog.kill()
        hog.wait()
    assert starved["client_loop_lag_p95"] > 0.05 and starved["client_cpu_wait_ratio"] > 0.3
    assert starved["client_saturated"] is False and starved["client_starved"] is True
    assert starved["client_cpu_ratio"] < 0.5


def test_a_watch_the_probe_made_itself_is_closed_with_it(standin):
    """execute() without a host watches the host in process (the agent's collectors on a thread); it stops them
    when it ends (they kept ticking, and logging, for the rest of the process)."""
    url, _ = standin
    plan = Plan(schedule="concurrency", levels=[1], step_seconds=1.0, warmup_seconds=0.1, duration=30,
                input_tokens=10, output_tokens=3)
    result = execute(url, plan)
    assert result["steps"][0]["host"]["source"] == "in_process" and result["steps"][0]["host"]["samples"] >= 1
    assert [t.name for t in threading.enumerate() if t.name == "probe-hostwatch"] == []


def test_a_runaway_queue_aborts_the_open_loop_step(standin):
    url, _ = standin
    plan = Plan(schedule="rate", levels=[60.0], step_seconds=5.0, warmup_seconds=0.0, duration=30,
                input_tokens=100, output_tokens=20, max_in_flight=12)
    result = execute(url, plan)
    step = result["steps"][0]
    # aborted well before the step's 5 s (the step's own clock: the in-process host watch's start, seconds on a
    # loaded machine, is before it; the wall time of execute() counted it and failed)
    assert step["seconds"] < 4
    assert "12 requests in flight at 60 requests/s" in step["aborted"]
    assert "queue" in step["slo_broken"] and result["stopped"] == "slo"


def _step(index, level, ok, scores, bottleneck="cpu"):
    return {"index": index, "level": level, "slo_ok": ok, "slo_broken": [] if ok else ["ttft_p95"],
            "requests_per_second": float(level), "e2e": {"p50": 1.0}, "client_saturated": False,
            "client_loop_lag_p95": 0.0, "client_cpu_ratio": 0.1,
            "host": {"bottleneck": bottleneck, "evidence": f"{bottleneck} evidence", "scores": scores,
                     "evidence_by": {r: f"{r} at level {level}" for r in scores}}}


def test_what_binds_is_what_rose_with_the_load_not_what_was_pressed_at_every_level():
    # private: the probe's capacity step over made-up steps; execute() needs a live server
    from headroom.probe.run import _capacity

    # a host CPU busy with other work scores 1 at every level; the KV cache rises only past the cache's size
    steps = [_step(0, 1, True, {"cpu": 1.0, "kv_cache": 0.0}), _step(1, 4, True, {"cpu": 1.0, "kv_cache": 0.1}),
             _step(2, 16, False, {"cpu": 1.0, "kv_cache": 0.9})]
    cap = _capacity("concurrency", steps, "slo")
    assert (cap["concurrency"], cap["from_step"], cap["bound_by"]) == (4, 2, "kv_cache")
    assert "kv_cache at level 16" in cap["evidence"] and "broke ttft_p95" in cap["evidence"]
    # the KV cache already full at the last level that held (a real vLLM at twice its cache: 100 %, 9 waiting, TTFT
    # p50 0.9 s against 1 s) and at the break: what rose from the lightest step binds, not the busy CPU
    full = [_step(0, 1, True, {"cpu": 1.0, "kv_cache": 0.0}), _step(1, 16, True, {"cpu": 1.0, "kv_cache": 1.0}),
            _step(2, 32, False, {"cpu": 1.0, "kv_cache": 1.0})]
    cap = _capacity("concurrency", full, "slo")
    assert (cap["concurrency"], cap["from_step"], cap["bound_by"]) == (16, 2, "kv_cache")
    # nothing rose enough: the host's own verdict for the step stands
    flat = [_step(0, 1, True, {"cpu": 0.9}), _step(1, 2, False, {"cpu": 1.0})]
    assert _capacity("concurrency", flat, "slo")["bound_by"] == "cpu"
    # no step broke: at least the last level, bound by nothing yet
    held = _capacity("rate", [_step(0, 2, True, {})], "max")
    assert held["bound_by"] == "none" and held["requests_per_second"] == 2.0 and held["concurrency"] == 2.0


# ------------------------------------------------------------------- the client's timings and prompts
class Scripted(BaseHTTPRequestHandler):
    """A real local endpoint that streams a scripted answer: (delay seconds, a choice, or the completion_tokens of
    the usage chunk) events; its /tokenize counts a word's letters (so words cost 2 to 4 tokens) plus the space, and its
    answers report prompt_tokens by the same count, with one special token added to a text prompt."""

    protocol_version = "HTTP/1.1"
    script: ClassVar[list] = []  # the handler class is the fake server: its state is the class's
    chat = False
    prompts: ClassVar[list] = []

    def log_message(self, *args):
        pass

    def _json(self, doc):
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        self._json({"data": [{"id": "m", "owned_by": "vllm"}]})

    @staticmethod
    def _count(text):
        return sum(len(w) + 1 for w in text.split())  # the letters and the space before each word

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        if self.path == "/tokenize":
            n = self._count(body["prompt"]) + (1 if body.get("add_special_tokens") else 0)
            self._json({"tokens": list(range(n)), "count": n})
            return
        type(self).prompts.append(body.get("prompt"))
        prompt_tokens = self._count(body["prompt"]) + 1 if isinstance(body.get("prompt"), str) else -1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for delay, choice in self.script:
            time.sleep(delay)
            doc = {"choices": [choice]} if isinstance(choice, dict) else {
                "choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": choice}}
            self.wfile.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


@pytest.fixture
def scripted():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    Scripted.prompts = []
    yield Scripted, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _send_one(url, api="completions", max_tokens=8):
    async def go():
        async with new_session(2) as session:
            target = await discover(session, url, None, api)
            return await send(session, target, "hi", 1, max_tokens, 10.0)

    return asyncio.run(go())


def test_a_token_whose_text_is_empty_is_timed_as_a_token(scripted):
    """A byte-level tokenizer's token that is part of a character streams as empty text (on vLLM 0.32 with the
    tiny test model about 3 tokens in 10): it is a token the server generated and sent, so it starts the TTFT and
    takes part in the inter-token gaps, as `vllm bench serve` counts it. Skipping it (the client did) moved the
    TTFT to the next token and joined two gaps into one (ITL p95 1.85x vLLM's)."""
    handler, url = scripted
    text = lambda t, end=None: {"index": 0, "text": t, "finish_reason": end}  # noqa: E731
    handler.script = [(0.05, text("")), (0.3, text("é")), (0.05, text(" a")), (0.05, text("", "length")), (0, 4)]
    r = _send_one(url)
    assert r.error is None and r.output_tokens == 4
    assert r.ttft < 0.25  # the empty first token, not the text 300 ms later
    # the closing empty chunk is the 4th token (the usage says 4): counted; the gaps are the server's, none joined
    # to the next (no lower bound: on a loaded host a late chunk shortens the gap after it, seen at 26 ms of 50)
    assert len(r.itl) == 3 and r.itl[0] > 0.25 and all(g < 0.25 for g in r.itl[1:]), r.itl


def test_a_closing_chunk_with_no_token_is_not_a_gap(scripted):
    """llama.cpp and TGI end with an empty chunk carrying only the finish_reason: no token (the usage counts
    the tokens before it), so no inter-token gap; chat's opening role-only delta is no token either."""
    handler, url = scripted
    delta = lambda d, end=None: {"index": 0, "delta": d, "finish_reason": end}  # noqa: E731
    handler.script = [(0.0, delta({"role": "assistant", "content": ""})), (0.2, delta({"content": "a"})),
                      (0.05, delta({"content": " b"})), (0.3, delta({"content": ""}, "stop")), (0, 2)]
    r = _send_one(url, api="chat")
    assert r.error is None and r.output_tokens == 2
    assert r.ttft > 0.15  # the role chunk came at once: not a token
    assert len(r.itl) == 1 and r.itl[0] < 0.25  # the closing chunk's 300 ms is not a gap between tokens


def test_prompts_are_text_of_the_exact_token_length_the_runtime_counts(scripted):
    """Users send text: the runtime's tokenizer is part of the work (and `vllm bench serve` sends text, so the
    two tools compare like with like). Words counted once by /tokenize, plus the special token the runtime adds, make
    prompts of exactly the length asked for, and the usage the runtime reports says so (`lengths_exact`)."""
    handler, url = scripted
    text = lambda t, end=None: {"index": 0, "text": t, "finish_reason": end}  # noqa: E731
    handler.script = [(0.0, text(" x")), (0.0, text(" y")), (0, 2)]
    plan = Plan(schedule="concurrency", levels=[1], step_seconds=1.0, warmup_seconds=0.0, duration=30,
                input_tokens=37, output_tokens=2)
    result = execute(url + "/v1", plan, host=NoWatch())
    step = result["steps"][0]
    assert handler.prompts and all(isinstance(p, str) for p in handler.prompts)
    assert all(Scripted._count(p) + 1 == 37 for p in handler.prompts)
    assert step["lengths_exact"] is True and step["input_tokens_mean"] == 37
    assert result["lengths"].startswith("exact (text of words")



def test_a_steps_mean_of_equal_readings_is_not_above_their_peak():
    """Six polls of a GPU busy 0.78: the float sum over six is 0.7800000000000001, one ulp above every reading (a CI
    run's failure of test_probe_host); the step's mean is at most its peak."""
    # private: one step's reduction of the status API's polls; HostWatch needs a running agent to poll
    from headroom.probe.host import _Step

    step = _Step()
    for _ in range(6):
        step.add({"now": {"gpu_busy_ratio": 0.78}}, None)
    out = step.result("status_api", True)
    assert out["peaks"]["gpu_busy_ratio"] == 0.78
    assert out["means"]["gpu_busy_ratio"] <= out["peaks"]["gpu_busy_ratio"]
