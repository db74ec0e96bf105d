"""Shared test helpers: free ports, running the agent as a real process, the --update-golden switch."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

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


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden"))


def free_port() -> int:
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
                out, err = self.proc.communicate()
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
