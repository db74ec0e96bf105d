"""sd_notify by hand, checked against real AF_UNIX datagram sockets (filesystem and abstract)."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from itertools import pairwise

import pytest

from headroom.notify import Notifier, Watchdog, notify_address, watchdog_interval


class Listener:
    """A datagram socket standing in for systemd's notify socket; collects what arrives."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(0.05)
        self.messages: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self.messages.append((time.monotonic(), data.decode()))

    def texts(self) -> list[str]:
        return [text for _, text in self.messages]

    def wait_for(self, count: int, timeout: float = 2.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.texts()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def path_listener(tmp_path):
    address = str(tmp_path / "notify.sock")
    listener = Listener(address)
    yield listener, address
    listener.close()


@pytest.fixture
def abstract_listener():
    name = f"headroom-test-{uuid.uuid4().hex}"
    listener = Listener("\0" + name)
    yield listener, "@" + name
    listener.close()


@pytest.mark.parametrize("kind", ["path_listener", "abstract_listener"])
def test_lifecycle_messages_reach_the_service_manager(kind, request):
    listener, env_value = request.getfixturevalue(kind)
    notifier = Notifier({"NOTIFY_SOCKET": env_value})
    assert notifier.enabled
    assert notifier.ready(status="sampling 2 GPUs")
    assert notifier.status("serving on :9835")
    assert notifier.stopping()
    assert listener.wait_for(3) == [
        "READY=1\nSTATUS=sampling 2 GPUs",
        "STATUS=serving on :9835",
        "STOPPING=1",
    ]


def test_reloading_carries_the_monotonic_clock_systemd_253_expects(path_listener):
    listener, address = path_listener
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert Notifier({"NOTIFY_SOCKET": address}).reloading()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    (message,) = listener.wait_for(1)
    first, second = message.split("\n")
    assert first == "RELOADING=1"
    key, value = second.split("=")
    assert key == "MONOTONIC_USEC"
    assert before <= int(value) <= after


def test_multiline_status_is_flattened_so_it_cannot_inject_assignments(path_listener):
    listener, address = path_listener
    Notifier({"NOTIFY_SOCKET": address}).status("bad\nREADY=1")
    assert listener.wait_for(1) == ["STATUS=bad READY=1"]


@pytest.mark.parametrize(
    ("situation", "value", "expected"),
    [
        ("not supervised by systemd", None, None),
        ("empty variable", "", None),
        ("filesystem socket", "/run/systemd/notify", "/run/systemd/notify"),
        ("abstract socket", "@/org/freedesktop/systemd1/notify/1", "\0/org/freedesktop/systemd1/notify/1"),
        ("vsock address we do not speak", "vsock:2:1234", None),
        ("relative path", "notify.sock", None),
    ],
)
def test_notify_address(situation, value, expected):
    env = {} if value is None else {"NOTIFY_SOCKET": value}
    assert notify_address(env) == expected, situation


def test_without_notify_socket_every_call_is_a_quiet_no_op():
    notifier = Notifier({})
    assert not notifier.enabled
    assert notifier.ready() is False
    assert notifier.watchdog() is False
    watchdog = Watchdog(notifier, lambda: True, environ={"WATCHDOG_USEC": "400000"})
    assert watchdog.start() is False


def test_a_vanished_socket_does_not_raise(tmp_path):
    notifier = Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    assert notifier.enabled
    assert notifier.ready() is False


@pytest.mark.parametrize(
    ("situation", "env", "expected"),
    [
        ("no watchdog configured", {}, None),
        ("half of WATCHDOG_USEC", {"WATCHDOG_USEC": "30000000"}, 15.0),
        ("pid matches", {"WATCHDOG_USEC": "400000", "WATCHDOG_PID": "4242"}, 0.2),
        ("pid of another process", {"WATCHDOG_USEC": "400000", "WATCHDOG_PID": "4243"}, None),
        ("garbage pid", {"WATCHDOG_USEC": "400000", "WATCHDOG_PID": "x"}, None),
        ("garbage usec", {"WATCHDOG_USEC": "soon"}, None),
        ("zero usec", {"WATCHDOG_USEC": "0"}, None),
    ],
)
def test_watchdog_interval(situation, env, expected):
    assert watchdog_interval(env, pid=4242) == expected, situation


def test_watchdog_interval_defaults_to_our_own_pid():
    env = {"WATCHDOG_USEC": "400000", "WATCHDOG_PID": str(os.getpid())}
    assert watchdog_interval(env) == 0.2


def pings_between(listener: Listener, start: float, end: float) -> int:
    return sum(1 for at, text in listener.messages if text == "WATCHDOG=1" and start <= at < end)


def until(predicate, timeout: float = 20.0, what: str = "condition") -> None:
    """Wait for ``predicate`` (however slow this machine is now); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_watchdog_pings_at_half_the_timeout(path_listener):
    listener, address = path_listener
    env = {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "400000", "WATCHDOG_PID": str(os.getpid())}
    watchdog = Watchdog(Notifier(env), lambda: True, environ=env)
    assert watchdog.interval == 0.2
    assert watchdog.start()
    until(lambda: len(listener.messages) >= 8, what="8 pings")
    watchdog.stop()
    times = [at for at, text in listener.messages if text == "WATCHDOG=1"]
    gap = (times[-1] - times[0]) / (len(times) - 1)
    # every 0.2 s: a loaded machine only delays a ping (each waits 0.2 s after the last), so the mean gap is
    # at least that; and well inside the 0.4 s timeout, or systemd would kill a healthy agent
    assert 0.18 <= gap < 0.4, [round(b - a, 3) for a, b in pairwise(times)]


def test_watchdog_pings_stop_while_unhealthy_and_resume_after(path_listener):
    """Counted by the watchdog's evaluations of health rather than by sleeping, so a slow machine cannot
    put a ping sent before the switch into the silent period."""
    listener, address = path_listener
    env = {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "200000"}
    healthy = threading.Event()
    healthy.set()
    unhealthy_checks = []

    def health() -> bool:
        if not healthy.is_set():
            unhealthy_checks.append(time.monotonic())
        return healthy.is_set()

    watchdog = Watchdog(Notifier(env), health, environ=env)
    assert watchdog.interval == 0.1
    watchdog.start()
    until(lambda: watchdog.pings >= 3, what="3 pings while healthy")
    healthy.clear()
    until(lambda: len(unhealthy_checks) >= 1, what="a check while unhealthy")
    withheld_from = watchdog.pings  # counted before the thread checks health again
    until(lambda: len(unhealthy_checks) >= 6, what="5 more checks while unhealthy")
    assert watchdog.pings == withheld_from  # five intervals without a ping
    healthy.set()
    until(lambda: watchdog.pings >= withheld_from + 3, what="pings resumed")
    watchdog.stop()
    until(lambda: len(listener.messages) == watchdog.pings, what="every ping received")
    assert set(listener.texts()) == {"WATCHDOG=1"}


def test_a_health_check_that_raises_withholds_pings(path_listener):
    listener, address = path_listener
    env = {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "100000"}

    def broken() -> bool:
        raise RuntimeError("sampler state unreadable")

    watchdog = Watchdog(Notifier(env), broken, environ=env)
    assert watchdog.start()
    time.sleep(0.3)
    watchdog.stop()
    assert listener.texts() == []


def test_watchdog_pid_mismatch_means_no_watchdog_thread(path_listener):
    listener, address = path_listener
    env = {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "100000", "WATCHDOG_PID": str(os.getpid() + 1)}
    watchdog = Watchdog(Notifier(env), lambda: True, environ=env)
    assert watchdog.interval is None
    assert watchdog.start() is False
    time.sleep(0.25)
    assert listener.texts() == []


def test_stop_returns_promptly_even_with_a_long_interval(path_listener):
    listener, address = path_listener
    env = {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "60000000"}
    watchdog = Watchdog(Notifier(env), lambda: True, environ=env)
    watchdog.start()
    listener.wait_for(1)
    t0 = time.monotonic()
    watchdog.stop()
    assert time.monotonic() - t0 < 1.0
    assert listener.texts() == ["WATCHDOG=1"]
