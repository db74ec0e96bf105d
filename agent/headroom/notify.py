"""systemd's notify protocol (sd_notify), by hand: no dependency on the systemd python bindings.

The service manager passes a datagram socket in ``NOTIFY_SOCKET`` (a filesystem path, or an abstract
socket written with a leading ``@``); the daemon sends newline-separated ``KEY=VALUE`` assignments to
it. With ``Type=notify`` the unit is "started" when ``READY=1`` arrives; with ``WatchdogSec=`` the
manager sets ``WATCHDOG_USEC`` (and ``WATCHDOG_PID``) and kills the service when ``WATCHDOG=1`` pings
stop. Outside systemd (no ``NOTIFY_SOCKET``) every call is a no-op, so the daemon calls these
unconditionally.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Mapping

import structlog

log = structlog.get_logger("headroom.notify")


def notify_address(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the socket address from NOTIFY_SOCKET ('\\0'-prefixed for abstract), or None if unusable."""
    env = os.environ if environ is None else environ
    raw = env.get("NOTIFY_SOCKET", "")
    if raw.startswith("@") and len(raw) > 1:
        return "\0" + raw[1:]
    if raw.startswith("/"):
        return raw
    # Empty, or a form we do not speak (e.g. "vsock:CID:PORT", systemd 254+ for VMs).
    return None


def watchdog_interval(environ: Mapping[str, str] | None = None, pid: int | None = None) -> float | None:
    """Return the ping interval in seconds (half of WATCHDOG_USEC), or None when no watchdog is asked for.

    None also when WATCHDOG_PID names another process (the variable was inherited, not meant for us)
    or when WATCHDOG_USEC is not a positive integer.
    """
    env = os.environ if environ is None else environ
    usec_text = env.get("WATCHDOG_USEC")
    if not usec_text:
        return None
    pid_text = env.get("WATCHDOG_PID")
    if pid_text:
        own_pid = os.getpid() if pid is None else pid
        try:
            if int(pid_text) != own_pid:
                return None
        except ValueError:
            return None
    try:
        usec = int(usec_text)
    except ValueError:
        return None
    if usec <= 0:
        return None
    return usec / 1_000_000 / 2


class Notifier:
    """Sends notify messages to the service manager; every method is a no-op without NOTIFY_SOCKET."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._address = notify_address(environ)
        self._lock = threading.Lock()
        self._failed = False

    @property
    def enabled(self) -> bool:
        """Return True when a notify socket was given (we are supervised by systemd)."""
        return self._address is not None

    def send(self, *assignments: str) -> bool:
        """Send KEY=VALUE assignments as one datagram; return True if it was sent.

        A failing send is logged once (then again only after a success): the service manager going away
        must never take the daemon down with it.
        """
        if self._address is None or not assignments:
            return False
        message = "\n".join(assignments).encode("utf-8")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(self._address)
                sock.sendall(message)
        except OSError as exc:
            with self._lock:
                first = not self._failed
                self._failed = True
            if first:
                log.warning("notify_send_failed", socket=self._address.replace("\0", "@"), error=str(exc))
            return False
        with self._lock:
            recovered = self._failed
            self._failed = False
        if recovered:
            log.info("notify_send_recovered")
        return True

    def ready(self, status: str | None = None) -> bool:
        """Tell systemd start-up (or a reload) is complete: READY=1, with an optional STATUS line."""
        return self.send("READY=1", *_status(status))

    def stopping(self, status: str | None = None) -> bool:
        """Tell systemd we are shutting down: STOPPING=1."""
        return self.send("STOPPING=1", *_status(status))

    def reloading(self, status: str | None = None) -> bool:
        """Tell systemd a reload started: RELOADING=1 plus MONOTONIC_USEC (systemd >= 253 wants it).

        Send ready() when the reload is done; older systemd ignores MONOTONIC_USEC.
        """
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send("RELOADING=1", f"MONOTONIC_USEC={usec}", *_status(status))

    def status(self, text: str) -> bool:
        """Set the one-line status `systemctl status` shows: STATUS=text."""
        return self.send(*_status(text))

    def watchdog(self) -> bool:
        """Ping the watchdog: WATCHDOG=1."""
        return self.send("WATCHDOG=1")


def _status(text: str | None) -> tuple[str, ...]:
    """Return a STATUS= assignment for text (newlines flattened), or nothing for None."""
    if text is None:
        return ()
    return ("STATUS=" + " ".join(text.splitlines()),)


class Watchdog:
    """Pings WATCHDOG=1 every interval from a thread, but only while healthy() says True.

    A wedged sampler makes healthy() False, the pings stop, and systemd kills and restarts the
    service after WatchdogSec. Does nothing (start() returns False) when no watchdog is configured.
    """

    def __init__(
        self,
        notifier: Notifier,
        healthy: Callable[[], bool],
        interval: float | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._notifier = notifier
        self._healthy = healthy
        self.interval = interval if interval is not None else watchdog_interval(environ)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.pings = 0

    def start(self) -> bool:
        """Start the ping thread; return False (and start nothing) without a notify socket or interval."""
        if self.interval is None or not self._notifier.enabled or self._thread is not None:
            return False
        self._thread = threading.Thread(target=self._run, name="headroom-watchdog", daemon=True)
        self._thread.start()
        log.info("watchdog_started", interval_seconds=self.interval)
        return True

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the ping thread and wait for it (at most timeout seconds)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _is_healthy(self) -> bool:
        """Return healthy(), counting an exception as unhealthy."""
        try:
            return bool(self._healthy())
        except Exception as exc:  # a broken probe must withhold pings, not kill the thread
            log.error("watchdog_health_check_failed", error=repr(exc))
            return False

    def _run(self) -> None:
        withheld = False
        while True:
            if self._is_healthy():
                if self._notifier.watchdog():
                    self.pings += 1
                if withheld:
                    log.info("watchdog_pings_resumed")
                    withheld = False
            elif not withheld:
                log.warning("watchdog_pings_withheld", reason="unhealthy")
                withheld = True
            assert self.interval is not None
            if self._stop.wait(self.interval):
                return
