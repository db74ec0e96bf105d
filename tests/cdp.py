"""A small Chrome DevTools Protocol client for the browser tests: Debian's chromium, headless, driven over
its DevTools websocket (websocket-client from PyPI), no browser download.

One page per ``Browser``; every console error, uncaught exception and failed load is collected in
``errors``; ``loads`` counts load events the page fired (a self-refresh is one more).
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import websocket

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--remote-debugging-port=0", "--remote-allow-origins=*"]


class CdpError(Exception):
    pass


class Browser:
    def __init__(self, profile: Path, timeout: float = 30.0) -> None:
        chromium = shutil.which("chromium")
        assert chromium, "chromium missing: `make test` installs Debian's chromium package"
        self.proc = subprocess.Popen([chromium, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = self._devtools_url(timeout)
        self.ws = websocket.create_connection(url, timeout=timeout, suppress_origin=True)
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._replies: dict[int, dict] = {}
        self._cv = threading.Condition()
        self.errors: list[str] = []
        self.loads = 0
        self.opened = 0  # navigations this client asked for (open())
        self.navigations = 0
        self._reader = threading.Thread(target=self._read, name="cdp", daemon=True)
        self._reader.start()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")

    def _devtools_url(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        assert self.proc.stderr is not None
        lines = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                threading.Thread(target=self.proc.stderr.read, daemon=True).start()  # keep the pipe drained
                return m.group(1)
        self.proc.kill()
        raise CdpError("chromium did not start its DevTools endpoint:\n" + "".join(lines[-20:]))

    # ------------------------------------------------------------------------------ messages
    def _read(self) -> None:
        while True:
            try:
                msg = json.loads(self.ws.recv())
            except (websocket.WebSocketException, OSError, ValueError):
                return
            if "id" in msg:
                with self._cv:
                    self._replies[msg["id"]] = msg
                    self._cv.notify_all()
                continue
            self._event(msg.get("method", ""), msg.get("params", {}))

    def _event(self, method: str, p: dict) -> None:
        with self._cv:
            if method == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                self.errors.append(f"uncaught: {d.get('text')} {d.get('exception', {}).get('description', '')}")
            elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                self.errors.append("console.error: " + " ".join(str(a.get("value", a.get("description")))
                                                                  for a in p.get("args", ())))
            elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                e = p["entry"]
                self.errors.append(f"{e.get('source')}: {e.get('text')} {e.get('url', '')}".strip())
            elif method == "Page.loadEventFired":
                self.loads += 1
            elif method == "Page.frameNavigated" and not p.get("frame", {}).get("parentId"):
                self.navigations += 1
            self._cv.notify_all()

    def call(self, method: str, session: str | None = None, **params: Any) -> dict:
        with self._lock:
            ident = next(self._ids)
            msg: dict[str, Any] = {"id": ident, "method": method, "params": params}
            if session:
                msg["sessionId"] = session
            self.ws.send(json.dumps(msg))
        with self._cv:
            if not self._cv.wait_for(lambda: ident in self._replies, timeout=self.timeout):
                raise CdpError(f"{method}: no reply in {self.timeout}s")
            reply = self._replies.pop(ident)
        if "error" in reply:
            raise CdpError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def send(self, method: str, **params: Any) -> dict:
        """A command to the page."""
        return self.call(method, self.session, **params)

    # -------------------------------------------------------------------------------- helpers
    def viewport(self, width: int, height: int) -> None:
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=width < 600)

    def open(self, url: str) -> None:
        """Navigate and wait for the load event."""
        before = self.loads
        self.opened += 1
        self.send("Page.navigate", url=url)
        self.wait(lambda: self.loads > before, "the page to load")

    def js(self, expression: str) -> Any:
        r = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise CdpError(f"{expression[:80]}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, predicate: Callable[[], Any], what: str, timeout: float | None = None) -> Any:
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            try:
                value = predicate()
            except CdpError:  # the page is being replaced (a refresh) while we ask
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.1)

    def screenshot(self, path: Path) -> None:
        import base64

        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"]))

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (CdpError, websocket.WebSocketException, OSError):
            pass
        try:
            self.ws.close()
        finally:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
