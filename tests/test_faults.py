"""Faults injected into a running agent: it keeps serving, says what is wrong once, and heals itself.

NVML faults run the daemon's real Agent (sampler, collectors, HTTP listener) in this process, because
the simulated NVML lives in-process and only there can a test steer it (``scenario.nvml_library()``).
Host faults run ``headroom run`` as a real child process over a copy of a fixture /proc tree (and a
rootfs with /dev/shm) that the test mutates while the agent runs.

Every case checks, while the fault lasts: /metrics keeps answering within 1 s (scraped every 50 ms
throughout), what the affected collector reports, one log event for the change (never one per tick),
what /healthz says; and that the agent recovers by itself once the fault clears. The module prints
"faults injected: N, survived: M" at the end (docs/reliability.md, "Faults").
"""

from __future__ import annotations

import http.client
import signal
import threading
import time
from pathlib import Path

import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families

from conftest import FIXTURES, http_get
from headroom.config import check_config_text
from headroom.daemon import Agent as DaemonAgent
from headroom.daemon import Options
from headroom.sources import Paths
from headroom.sources import nvml as nvml_module
from headroom.sources.fake_nvml import FakeNvml

INTERVAL = 0.2
SCRAPE_BUDGET = 1.0  # seconds: every scrape during a fault must answer within this
HOLD = 1.5  # seconds a fault is held after it shows, to prove it is logged once, not per tick
DENIED = Path("/proc/sys/vm/drop_caches")  # mode 0200: reading it fails with EACCES, even for root

INJECTED: list[str] = []
SURVIVED: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def fault_tally(request):
    yield
    line = f"faults injected: {len(INJECTED)}, survived: {len(SURVIVED)}"
    lost = [f for f in INJECTED if f not in SURVIVED]
    if lost:
        line += f" (not survived: {', '.join(lost)})"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("\n" + line)
    else:  # pragma: no cover - pytest without its terminal
        print(line)


def inject(name: str) -> None:
    INJECTED.append(name)


def survived(name: str) -> None:
    SURVIVED.append(name)


# ------------------------------------------------------------------------------------------ helpers
def series(body: bytes) -> dict[tuple[str, frozenset], float]:
    """(sample name, labels) -> value for every sample of an exposition."""
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(body: bytes, name: str, **labels: str) -> float | None:
    """The value of the one sample ``name`` whose labels include ``labels``; None when absent."""
    want = set(labels.items())
    found = [v for (n, ls), v in series(body).items() if n == name and want <= ls]
    assert len(found) <= 1, f"{name}{labels} is ambiguous: {found}"
    return found[0] if found else None


def names(body: bytes) -> set[str]:
    return {n for n, _ in series(body)}


def wait_for(predicate, timeout: float = 8.0, what: str = "condition"):
    """Poll ``predicate`` every 50 ms; returns its first truthy result or fails after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def body_when(a, check, what: str, timeout: float = 8.0) -> bytes:
    """Scrape ``a`` until ``check(body)`` holds; returns that body."""
    return wait_for(lambda: (lambda b: b if check(b) else None)(a.metrics()), timeout, what)


class Prober(threading.Thread):
    """Scrapes /metrics every 50 ms over one keep-alive connection; records status and latency."""

    def __init__(self, url: str) -> None:
        super().__init__(name="prober", daemon=True)
        self.host, self.port = url.removeprefix("http://").split(":")
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.last_body = b""
        self._halt = threading.Event()

    def run(self) -> None:
        conn = http.client.HTTPConnection(self.host, int(self.port), timeout=5)
        while not self._halt.wait(0.05):
            start = time.monotonic()
            try:
                conn.request("GET", "/metrics")
                resp = conn.getresponse()
                body = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
                conn.close()
                conn = http.client.HTTPConnection(self.host, int(self.port), timeout=5)
                continue
            self.latencies.append(time.monotonic() - start)
            if resp.status != 200:
                self.failures.append(f"HTTP {resp.status}")
            self.last_body = body
        conn.close()

    def finish(self) -> None:
        """Stop, then assert every scrape answered 200 within SCRAPE_BUDGET."""
        self._halt.set()
        self.join(10)
        assert not self.failures, self.failures[:5]
        assert len(self.latencies) >= 10, f"only {len(self.latencies)} scrapes"
        assert max(self.latencies) < SCRAPE_BUDGET, f"slowest scrape {max(self.latencies):.3f}s"


def count(events: list[dict], event: str, **fields) -> int:
    return sum(1 for e in events if e.get("event") == event and all(e.get(k) == v for k, v in fields.items()))


# ----------------------------------------------------------------------------- in-process agent (NVML)
class InProcess:
    """The daemon's Agent (real sampler, collectors and HTTP server) serving in a thread of this process.

    ``nvml`` is the scenario's fake NVML library: the same object the NVML collector calls.
    """

    def __init__(self, monkeypatch, scenario: str = "demo", config: str = "") -> None:
        monkeypatch.setattr(signal, "signal", lambda *a: None)  # serve() runs outside the main thread
        options = Options(paths=Paths(procfs=FIXTURES / "proc" / "modern"), sample_interval=INTERVAL,
                          simulate=scenario, listen_addresses=("127.0.0.1:0",))
        self.agent = DaemonAgent(check_config_text(config), options, None)
        self.nvml: FakeNvml = self.agent.sampler.scenario_object.nvml_library()
        host, port = self.agent.servers[0].server_address[:2]
        self.url = f"http://{host}:{port}"
        self.thread = threading.Thread(target=self.agent.serve, name="agent", daemon=True)
        self.prober = Prober(self.url)

    def start(self) -> None:
        self.thread.start()
        wait_for(lambda: self.agent.sampler.snapshot is not None, what="the first sample")
        wait_for(lambda: http_get(self.url + "/healthz", timeout=2)[0] in (200, 503), what="the listener")
        self.prober.start()

    def metrics(self) -> bytes:
        status, _, body = http_get(self.url + "/metrics", timeout=2)
        assert status == 200
        return body

    def healthz(self) -> tuple[int, str]:
        status, _, body = http_get(self.url + "/healthz", timeout=2)
        return status, body.decode()

    def stop(self) -> None:
        self.agent.request_stop(signal.SIGTERM)
        self.thread.join(10)
        assert not self.thread.is_alive(), "the agent did not stop"


@pytest.fixture
def live(monkeypatch):
    agents: list[InProcess] = []

    def make(**kwargs) -> InProcess:
        a = InProcess(monkeypatch, **kwargs)
        agents.append(a)
        return a

    with structlog.testing.capture_logs() as logs:
        make.logs = logs  # type: ignore[attr-defined]
        yield make
        for a in agents:
            if a.thread.is_alive():
                a.stop()


def nvml_ok(a: InProcess) -> float | None:
    return value(a.metrics(), "headroom_collector_success", collector="nvml")


@pytest.mark.parametrize("error", ["DRIVER_NOT_LOADED", "LIBRARY_NOT_FOUND"])
def test_nvml_init_fails_without_a_driver_then_the_driver_appears(live, error):
    fault = f"nvml init fails ({error})"
    a = live()
    a.nvml.inject("nvmlInit", error=error)
    inject(fault)
    a.start()
    body = body_when(a, lambda b: value(b, "headroom_collector_success", collector="nvml") == 0, "nvml failing")
    assert value(body, "headroom_nvml_up") == 0
    assert "headroom_gpu_up" not in names(body)  # no GPU series at all, rather than zeros
    assert value(body, "headroom_collector_success", collector="cpu") == 1
    time.sleep(HOLD)
    status, text = a.healthz()
    assert status == 200 and "degraded: nvml: NVML unavailable: " in text and f"({error})" in text, text
    # re-initialisation is retried with backoff (1 s, 2 s ...), not on each of the ~8 ticks so far
    assert 2 <= a.nvml.calls[("nvmlInit", None)] <= 3

    a.nvml.clear("nvmlInit")
    wait_for(lambda: nvml_ok(a) == 1, what="nvml recovery")
    body = a.metrics()
    assert value(body, "headroom_nvml_up") == 1
    assert value(body, "headroom_gpu_up", gpu="0") == 1 and value(body, "headroom_gpu_up", gpu="1") == 1
    assert a.healthz() == (200, "ok\n")
    a.prober.finish()
    a.stop()
    logs = live.logs
    assert count(logs, "collector_failing", collector="nvml") == 1
    assert count(logs, "collector_recovered", collector="nvml") == 1
    assert count(logs, "nvml_down") == 1 and count(logs, "nvml_initialised") == 1
    survived(fault)


LOST_CALLS = ("nvmlDeviceGetHandleByUUID", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo",
              "nvmlDeviceGetPowerUsage", "nvmlDeviceGetFieldValues")


def test_a_gpu_is_lost_mid_run_and_comes_back(live):
    fault = "GPU lost mid-run, then back"
    a = live()
    a.start()
    wait_for(lambda: value(a.metrics(), "headroom_gpu_utilization_ratio", gpu="1") is not None, what="gpu 1")
    for call in LOST_CALLS:
        a.nvml.inject(call, gpu=1, error="GPU_IS_LOST")
    inject(fault)
    body_when(a, lambda b: value(b, "headroom_gpu_up", gpu="1") == 0, "gpu 1 down")
    time.sleep(HOLD)
    body = a.metrics()
    assert value(body, "headroom_gpu_up", gpu="1") == 0
    assert value(body, "headroom_gpu_utilization_ratio", gpu="1") is None  # absent, not 0
    assert value(body, "headroom_gpu_up", gpu="0") == 1  # the other GPU goes on
    assert value(body, "headroom_gpu_utilization_ratio", gpu="0") is not None
    assert value(body, "headroom_collector_success", collector="nvml") == 1
    status, text = a.healthz()
    assert status == 200 and "degraded: gpu 1 GPU-9d3e7b02-6a41-4f8c-b5d3-2e8f1a6c9b47: " in text, text
    assert "GPU is lost (GPU_IS_LOST)" in text

    a.nvml.clear()
    wait_for(lambda: value(a.metrics(), "headroom_gpu_up", gpu="1") == 1, what="gpu 1 back")
    wait_for(lambda: value(a.metrics(), "headroom_gpu_utilization_ratio", gpu="1") is not None, what="readings")
    assert a.healthz() == (200, "ok\n")
    a.prober.finish()
    a.stop()
    logs = live.logs
    assert count(logs, "gpu_lost", gpu=1) == 1 and count(logs, "gpu_recovered", gpu=1) == 1
    assert count(logs, "gpu_lost", gpu=0) == 0 and count(logs, "collector_failing") == 0
    survived(fault)


IDENTITY_CALLS = {"nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByUUID",
                  "nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetPciInfo", "nvmlDeviceGetIndex"}
OPTIONAL_CALLS = sorted(n for n in dir(FakeNvml) if n.startswith("nvmlDevice") and n not in IDENTITY_CALLS)
OPTIONAL_CALLS.append("nvmlDeviceGetMemoryInfo_v2")  # the fake names the versioned call apart
OPTIONAL_GAUGES = ("headroom_gpu_utilization_ratio", "headroom_gpu_memory_used_bytes", "headroom_gpu_power_watts",
                   "headroom_gpu_temperature_celsius", "headroom_gpu_sm_clock_hertz",
                   "headroom_gpu_performance_state", "headroom_gpu_pcie_link_generation")


def test_every_optional_query_answers_not_supported(live, monkeypatch):
    fault = "every optional NVML query NOT_SUPPORTED"
    monkeypatch.setattr(nvml_module, "_REPROBE_UNSUPPORTED", 1.0)  # 600 s in production
    a = live()
    a.start()
    before = body_when(a, lambda b: value(b, "headroom_gpu_power_watts", gpu="1") is not None, "readings")
    assert all(value(before, g, gpu="0") is not None for g in OPTIONAL_GAUGES)
    for call in OPTIONAL_CALLS:
        a.nvml.inject(call, error="NOT_SUPPORTED")
    inject(fault)
    wait_for(lambda: value(a.metrics(), "headroom_gpu_power_watts", gpu="0") is None, what="series gone")
    time.sleep(HOLD)
    body = a.metrics()
    for gauge in OPTIONAL_GAUGES:
        for gpu in ("0", "1"):
            assert value(body, gauge, gpu=gpu) is None, f"{gauge} gpu {gpu} still exported"
    assert value(body, "headroom_collector_success", collector="nvml") == 1
    assert value(body, "headroom_gpu_up", gpu="0") == 1 and value(body, "headroom_gpu_up", gpu="1") == 1
    assert a.healthz() == (200, "ok\n")
    # unsupported queries are re-probed on their own schedule, not hammered on every tick
    calls = a.nvml.calls[("nvmlDeviceGetPowerUsage", 0)]
    time.sleep(2.0)
    assert a.nvml.calls[("nvmlDeviceGetPowerUsage", 0)] - calls <= 3  # ~10 ticks, re-probed every 1 s

    a.nvml.clear()
    wait_for(lambda: all(value(a.metrics(), g, gpu="1") is not None for g in OPTIONAL_GAUGES), what="re-probe")
    a.prober.finish()
    a.stop()
    logs = live.logs
    assert count(logs, "collector_failing") == 0
    assert [e for e in logs if e["log_level"] in ("warning", "error")] == []
    survived(fault)


def test_a_call_that_hangs_for_30s_does_not_hold_the_tick(live):
    fault = "NVML call hangs 30 s"
    a = live()
    a.start()
    wait_for(lambda: nvml_ok(a) == 1, what="nvml up")
    power_calls = a.nvml.calls[("nvmlDeviceGetPowerUsage", 0)]
    a.nvml.inject("nvmlDeviceGetPowerUsage", gpu=0, hang=30)
    inject(fault)
    started = time.monotonic()
    body = body_when(a, lambda b: value(b, "headroom_collector_success", collector="nvml") == 0, "nvml stuck")
    ticks = value(body, "headroom_samples_total")
    time.sleep(HOLD)
    body = a.metrics()
    # the tick goes on without the stuck collector: ~5 ticks per second, each well within the interval
    assert value(body, "headroom_samples_total") - ticks >= HOLD / INTERVAL * 0.6
    assert value(body, "headroom_sample_duration_seconds") < INTERVAL
    assert value(body, "headroom_collector_success", collector="cpu") == 1
    assert value(body, "headroom_collector_success", collector="nvml") == 0
    status, text = a.healthz()
    assert status == 200 and "degraded: nvml: stuck: collect() has not returned for" in text, text
    # the hung call is the only one since: the collector is not called again until it returns
    assert a.nvml.calls[("nvmlDeviceGetPowerUsage", 0)] == power_calls + 1

    a.nvml.clear()  # removes the fault and releases the hung call
    wait_for(lambda: nvml_ok(a) == 1, what="recovery")
    assert time.monotonic() - started < 10  # recovered on release, long before the 30 s were up
    assert a.healthz() == (200, "ok\n")
    a.prober.finish()
    a.stop()
    logs = live.logs
    assert count(logs, "collector_failing", collector="nvml") == 1
    assert count(logs, "collector_recovered", collector="nvml") == 1
    survived(fault)


@pytest.mark.parametrize("where", ["init and queries", "queries only"])
def test_driver_and_library_versions_mismatch(live, where):
    """A driver upgraded under a running agent: queries fail with LIB_RM_VERSION_MISMATCH and, on a real
    host, so does nvmlInit until the kernel module is reloaded ("init and queries"). "queries only" is
    the harder case: nvmlInit succeeds every time and the first query fails again."""
    fault = f"driver/library version mismatch ({where})"
    a = live()
    a.start()
    wait_for(lambda: nvml_ok(a) == 1, what="nvml up")
    a.nvml.inject("nvmlDeviceGetUtilizationRates", error="LIB_RM_VERSION_MISMATCH")
    if where == "init and queries":
        a.nvml.inject("nvmlInit", error="LIB_RM_VERSION_MISMATCH")
    inject(fault)
    wait_for(lambda: nvml_ok(a) == 0, what="nvml down")
    time.sleep(HOLD + 1.5)  # long enough for re-initialisation attempts (1 s, 2 s backoff)
    body = a.metrics()
    assert value(body, "headroom_nvml_up") == 0 and "headroom_gpu_up" not in names(body)
    status, text = a.healthz()
    assert status == 200 and "degraded: nvml: NVML unavailable: " in text, text
    assert "(LIB_RM_VERSION_MISMATCH): the driver was upgraded without reloading" in text
    assert 2 <= a.nvml.calls[("nvmlInit", None)] <= 3  # the first init, then retries with backoff

    a.nvml.clear()
    wait_for(lambda: nvml_ok(a) == 1, timeout=10, what="nvml recovery")
    assert value(a.metrics(), "headroom_gpu_up", gpu="1") == 1
    a.prober.finish()
    a.stop()
    logs = live.logs
    assert count(logs, "collector_failing", collector="nvml") == 1
    assert count(logs, "collector_recovered", collector="nvml") == 1
    assert count(logs, "nvml_down") == 1 and count(logs, "nvml_recovered") == 1
    survived(fault)
