"""The real daemon under a notify socket: READY=1 after the first good sample, STOPPING=1 on SIGTERM, exit 0."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def receive_until(sock: socket.socket, wanted: str, timeout: float, proc: subprocess.Popen) -> list[str]:
    """Collect notify messages until one carries the assignment `wanted`; return all of them.

    Fails early when the daemon exits first (the STOPPING=1 datagram is sent before exit, so it is
    still queued on the socket then).
    """
    messages: list[str] = []
    deadline = time.monotonic() + timeout
    sock.settimeout(0.2)
    while time.monotonic() < deadline:
        try:
            messages.append(sock.recv(4096).decode())
        except TimeoutError:
            if proc.poll() is not None:
                raise AssertionError(f"daemon exited ({proc.returncode}) before {wanted}; got {messages}") from None
            continue
        if wanted in messages[-1].split("\n"):
            return messages
    raise AssertionError(f"no {wanted} within {timeout} s; got {messages}")


def test_daemon_reports_ready_after_first_sample_and_stopping_on_sigterm(tmp_path):
    address = str(tmp_path / "notify.sock")
    port = free_port()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(address)
        env = dict(os.environ, NOTIFY_SOCKET=address)
        env.pop("WATCHDOG_USEC", None)
        env.pop("WATCHDOG_PID", None)
        log_path = tmp_path / "daemon.log"
        log_file = log_path.open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "headroom", "run", "--simulate", "demo",
             "--web.listen-address", f"127.0.0.1:{port}"],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        try:
            receive_until(sock, "READY=1", timeout=30, proc=proc)
            # READY means a good sample exists: health and metrics must already be served.
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
                assert response.status == 200
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                assert b"headroom_" in response.read()
            proc.send_signal(signal.SIGTERM)
            receive_until(sock, "STOPPING=1", timeout=10, proc=proc)
            assert proc.wait(timeout=15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log_file.close()
        output = log_path.read_text(errors="replace")
        assert "Traceback" not in output, output
