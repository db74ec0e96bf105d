"""Shared test helpers: free ports, running the agent as a real process, the --update-golden switch."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lanes import pytest_collection_modifyitems, pytest_runtest_makereport, pytest_runtest_protocol  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite golden files from the current output instead of comparing")


@pytest.fixture(scope="session", autouse=True)
def _agent_logs_through_stdlib_logging():
    """In-process agent code logs through the logging module while the tests run: pytest shows the records of a
    failing test ("Captured log"), and debug events from server threads that outlive their test (a refused TLS
    handshake) no longer print into the test report. structlog.testing.capture_logs still sees every level."""
    import logging

    import structlog

    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.KeyValueRenderer(key_order=["event"])],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )
    yield
    structlog.reset_defaults()


@pytest.fixture(autouse=True)
def _logging_configuration_does_not_leak():
    """A test that configures the agent's logging (``logs.configure("warn")``, as the daemon does at start) leaves
    the next test in its worker the configuration it found: a warn-level filter left behind dropped info lines
    (``collector_recovered``, ``analysis_recovered``) that later tests count, in whichever order a seed chose."""
    import structlog

    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden"))


def _port_block() -> range:
    """Ports this test process hands out: a block below the kernel's ephemeral range, one block per
    pytest-xdist worker. A port the kernel picked (bind to 0) is only free until something else needs a
    port: between free_port() closing it and a child process binding it, a client socket of another
    worker (the load tests open a thousand connections) can be given the same ephemeral port. Outside
    that range only free_port() hands ports out, and workers never share a block."""
    low = 32768
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    if low < 12000:
        return range(0)  # no room below the ephemeral range: let the kernel choose
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    size = (low - 10000) // 8
    start = 10000 + (int(worker) % 8 if worker.isdigit() else 0) * size
    return range(start, start + size)


_PORTS = _port_block()
_next_port = [random.Random(os.getpid()).randrange(len(_PORTS))] if _PORTS else [0]


def free_port() -> int:
    """A loopback port nothing listens on now, for a server this test starts (see _port_block)."""
    for _ in range(len(_PORTS)):
        port = _PORTS[_next_port[0] % len(_PORTS)]
        _next_port[0] += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5.0, headers: dict | None = None) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


class Agent:
    """`headroom run` as a real child process on a free loopback port."""

    def __init__(self, *args: str, env: dict | None = None, cwd: Path = ROOT) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "headroom", "run", "--web.listen-address", f"127.0.0.1:{self.port}",
               "--log.format", "json", *args]
        self.proc = subprocess.Popen(cmd, cwd=cwd, env={**os.environ, **(env or {})},
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                _out, err = self.proc.communicate()
                raise AssertionError(f"agent exited {self.proc.returncode}: {err.decode()[-3000:]}")
            try:
                status, _, _ = http_get(self.url + "/healthz", timeout=1)
                if status in (200, 503):
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError("agent did not start listening in time")

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        err = ""
        if self.proc.stderr and not self.proc.stderr.closed:
            err = self.proc.stderr.read().decode()
        return self.proc.returncode, err


@pytest.fixture
def agent_factory():
    agents: list[Agent] = []

    def start(*args: str, env: dict | None = None, wait: bool = True) -> Agent:
        a = Agent(*args, env=env)
        agents.append(a)
        if wait:
            a.wait_ready()
        return a

    yield start
    for a in agents:
        a.stop()


# ------------------------------------------------------------------ lines for the end of the run
# A test's figures (load test latencies, the fault tally) travel as user properties of its report, so
# they reach the summary from pytest-xdist workers too, whose own output pytest does not show.
_REPORTS: list[str] = []
_FAULTS: dict[str, list[str]] = {"injected": [], "survived": []}


def report(request, line: str) -> None:
    """Print ``line`` in the "reports" section at the end of the run."""
    request.node.user_properties.append(("report", line))


def pytest_runtest_logreport(report):
    if report.when != "teardown":
        return
    for key, value in report.user_properties:
        if key == "report":
            _REPORTS.append(value)
        elif key in ("fault_injected", "fault_survived"):
            _FAULTS[key.removeprefix("fault_")].append(value)


def pytest_terminal_summary(terminalreporter):
    lines = list(_REPORTS)
    if _FAULTS["injected"]:  # tests/test_faults.py (docs/reliability.md, "Faults")
        line = f"faults injected: {len(_FAULTS['injected'])}, survived: {len(_FAULTS['survived'])}"
        lost = [f for f in _FAULTS["injected"] if f not in _FAULTS["survived"]]
        lines.append(line + (f" (not survived: {', '.join(lost)})" if lost else ""))
    if lines:
        terminalreporter.section("reports")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture
def kubelet(tmp_path):
    """The kubelet's pod-resources v1 service, a real gRPC server on a unix socket in a temp dir (the servicer
    of tests/test_kubelet.py, answering what the test sets on it); yields (socket path, servicer).
    tests/test_kubelet.py has its own, which also yields the server."""
    from concurrent import futures

    import grpc

    from headroom.sources.podresources import api_pb2_grpc
    from test_kubelet import Lister

    sock = tmp_path / "kubelet.sock"
    servicer = Lister()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    yield sock, servicer
    server.stop(0)
