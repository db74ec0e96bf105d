"""What the host does during a probe step: ``HostWatch`` (docs/probe.md, "Measured from the host").

About once a second (``interval``) a thread reads what the agent sees, the way the agent itself says it: the
status API's document (``/api/v1/status``, exposition/status_api.py ``status``): its ``now`` section (the newest
tick's host: CPU busy, host RAM used, /dev/shm used, the busiest disk and network interface) and, for the probed
workload, its ``now`` (its GPUs' memory, busy and SM activity; its runtime's KV cache usage, requests running and
waiting, preemptions) and its verdict (the candidate bottleneck of the tick, its score and evidence).

Two sources, one reading:
- ``status_url`` given: a running agent's status API over HTTP (``source`` "status_api"). Each poll has
  POLL_TIMEOUT_SECONDS and reads at most MAX_STATUS_BYTES; a poll that fails is counted in ``errors`` and the
  step goes on (the host dict then says how many polls answered, and the last error).
- ``status_url`` None: the agent's own collectors and analysis in this process (``source`` "in_process"): the
  Sampler ``headroom run`` builds (daemon.build_sampler, from the same configuration and flags; under
  ``--simulate`` with the scenario's stand-in workloads, as ``headroom snapshot`` starts them), ticking on its own
  thread; each poll reads its snapshot through the same ``status`` function the API serves.

The workload is found by name, or, given a URL (``workload`` or ``url`` containing "://"), as the workload
whose serving endpoint has the same scheme, host and port (localhost and 127.0.0.1 are the same host).

Per step (``begin`` .. ``end``) the host dict holds each value's peak and mean over the polls, the preemptions
during the step (the growth of the runtime's counter), and the step's bottleneck: the resource that was the
tick's candidate in the most polls (ties: the higher mean score), its confidence (its mean score over the
step's polls; for "none", the share of polls without a candidate) and its newest evidence.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from typing import TYPE_CHECKING

from headroom.jsontypes import JsonDoc, JsonValue

if TYPE_CHECKING:
    from headroom.config import Config
    from headroom.daemon import Options
    from headroom.sampler import Sampler

STATUS_PATH = "/api/v1/status"
POLL_TIMEOUT_SECONDS = 2.0  # one status poll; a slower answer is an error for that poll, not for the step
MAX_STATUS_BYTES = 16 * 2**20  # the status document read per poll, at most
MIN_INTERVAL_SECONDS = 0.1  # polls at most this often
MAX_ERROR_TEXT = 200  # characters kept of a poll's error
LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "::"}


class HostWatchError(Exception):
    """The in-process agent cannot be built; one line. ``begin`` keeps it (``failed``, each step's ``error``)
    rather than raising: the probe goes on without host figures."""


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of a URL, local names folded to one, or None when it is not one."""
    try:
        u = urllib.parse.urlsplit(url)
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        return None
    if not u.scheme or not u.hostname:
        return None
    host = u.hostname.lower()
    return u.scheme.lower(), "localhost" if host in LOCAL_HOSTS else host, port


def status_url_of(base: str) -> str:
    """The status API's URL from an agent's base URL (``http://127.0.0.1:9843``) or the full URL."""
    base = base.rstrip("/")
    return base if base.endswith(STATUS_PATH) else base + STATUS_PATH


def find_workload(status: JsonDoc, workload: str | None, url: str | None) -> JsonDoc | None:
    """The status API's entry of the probed workload: by name, else by its serving endpoint's origin."""
    entries = [w for w in status.get("workloads") or () if isinstance(w, dict)]
    if workload and "://" not in workload:
        return next((w for w in entries if w.get("name") == workload), None)
    target = _origin(workload or url or "")
    if target is None:
        return None
    for w in entries:
        endpoint = (w.get("serving") or {}).get("endpoint") if isinstance(w.get("serving"), dict) else None
        if isinstance(endpoint, str) and _origin(endpoint) == target:
            return w
    return None


def _number(v: JsonValue) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf") \
        else None


class _Step:
    """The polls of one step, reduced as they come (a step of an hour costs no more memory than one of 20 s)."""

    def __init__(self) -> None:
        self.samples = 0
        self.peaks: dict[str, float] = {}
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.leads: Counter[str] = Counter()
        self.scores: dict[str, float] = {}  # resource -> sum of its scores over the polls (confidence)
        self.highest: dict[str, float] = {}  # resource -> its highest score in the step (what rose with the load)
        self.evidence: dict[str, str] = {}  # resource -> its newest evidence
        self.preempt_first: float | None = None
        self.preempt_last: float | None = None
        self.errors = 0
        self.error: str | None = None

    def add(self, status: JsonDoc, w: JsonDoc | None) -> None:
        self.samples += 1
        values = dict(status.get("now") or {}) if isinstance(status.get("now"), dict) else {}
        if w is not None and isinstance(w.get("now"), dict):
            values.update(w["now"])
        preempt = _number(values.pop("preemptions_total", None))
        if preempt is not None:
            self.preempt_first = preempt if self.preempt_first is None else self.preempt_first
            self.preempt_last = preempt
        for k, v in values.items():
            x = _number(v)
            if x is None or not isinstance(k, str):
                continue
            self.peaks[k] = max(self.peaks.get(k, x), x)
            self.sums[k] = self.sums.get(k, 0.0) + x
            self.counts[k] = self.counts.get(k, 0) + 1
        if w is None:
            return
        scores = w.get("scores") if isinstance(w.get("scores"), dict) else {}
        for r, s in scores.items():
            x = _number(s)
            if x is not None and isinstance(r, str):
                self.scores[r] = self.scores.get(r, 0.0) + x
                self.highest[r] = max(self.highest.get(r, x), x)
        lead = w.get("candidate") if isinstance(w.get("candidate"), str) else "none"
        self.leads[lead] += 1
        evidence = w.get("evidence") if isinstance(w.get("evidence"), dict) else {}
        for r, text in evidence.items():
            if isinstance(r, str) and isinstance(text, str) and (r in self.highest or r == lead):
                self.evidence[r] = text[:MAX_ERROR_TEXT * 4]

    def fail(self, error: str) -> None:
        self.errors += 1
        self.error = error[:MAX_ERROR_TEXT]

    def result(self, source: str, found: bool) -> JsonDoc:
        # a mean never above its peak: the float sum of n equal readings over n can land one ulp over them
        means = {k: min(self.sums[k] / self.counts[k], self.peaks[k]) for k in self.sums}
        peaks = dict(self.peaks)
        if self.preempt_first is not None and self.preempt_last is not None:
            grew = max(0.0, self.preempt_last - self.preempt_first)  # a restarted runtime counts from 0: no growth
            peaks["preemptions"] = means["preemptions"] = grew
        out: JsonDoc = {"bottleneck": "none", "confidence": None, "evidence": "", "peaks": peaks,
                               "means": means, "samples": self.samples, "source": source,
                               # each resource's highest score in the step and its newest evidence: run.py names
                               # what rose with the load (the agent's verdict on a shared host may be another's)
                               "scores": {r: round(v, 3) for r, v in self.highest.items()},
                               "evidence_by": {r: t for r, t in self.evidence.items() if r in self.highest}}
        polled = sum(self.leads.values())
        if polled:
            top = max(self.leads.items(), key=lambda kv: (kv[1], self.scores.get(kv[0], 0.0)))[0]
            share = self.leads[top] / polled
            out["bottleneck"] = top
            out["confidence"] = round(share if top == "none" else self.scores.get(top, 0.0) / polled, 3)
            held = f"the candidate in {self.leads[top]} of {polled} polls"
            text = self.evidence.get(top, "")
            out["evidence"] = f"{text} ({held})" if text else held
        if self.errors:
            out["errors"] = self.errors
            out["error"] = self.error
        if not found and self.samples:
            out["error"] = "the agent does not see this workload (no verdict, no KV cache or GPU of its own)"
        return out


class NoWatch:
    """``headroom probe --no-host``: the client alone, no host figures (each step's host source "none"), nothing
    running beside the client: for comparing the client with another load tool on the same cores."""

    def begin(self) -> None:
        pass

    def end(self) -> JsonDoc:
        return _Step().result("none", True)

    def close(self) -> None:
        pass


class HostWatch:
    """Watches the host for a probe, step by step: ``begin()`` at a step's start (after its warm-up), ``end()`` at
    its end returns the step's host dict (PROBE_CONTRACT, module docstring); ``close()`` stops the thread (and the
    in-process agent). ``config``/``options``: the in-process agent's configuration and flags (daemon.Options;
    None: the default configuration file, no flags)."""

    def __init__(self, workload: str | None, status_url: str | None, interval: float = 1.0, *,
                 url: str | None = None, config: Config | None = None, options: Options | None = None) -> None:
        self.workload = workload
        self.url = url
        self.interval = max(MIN_INTERVAL_SECONDS, float(interval))
        self.status_url = status_url_of(status_url) if status_url else None
        self.source = "status_api" if status_url else "in_process"
        self._config, self._options = config, options
        self._sampler: Sampler | None = None
        self._lock = threading.Lock()
        self._step: _Step | None = None
        self._found = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.polls = 0  # answered polls since the watch started
        self.failed: str | None = None  # why the in-process agent could not start (then no step has figures)

    # ------------------------------------------------------------------------------------------ reading
    def _read_api(self) -> JsonDoc:
        assert self.status_url is not None
        req = urllib.request.Request(self.status_url, headers={"Accept": "application/json"})
        with urllib.request.urlopen(req, timeout=POLL_TIMEOUT_SECONDS) as resp:  # noqa: S310 (the user's URL)
            body = resp.read(MAX_STATUS_BYTES + 1)
        if len(body) > MAX_STATUS_BYTES:
            raise ValueError(f"status answer over {MAX_STATUS_BYTES} bytes")
        doc = json.loads(body)
        if not isinstance(doc, dict):
            raise ValueError("status answer is not a JSON object")
        return doc

    def _start_in_process(self) -> None:
        from headroom import daemon
        from headroom.config import ConfigError, load_config

        options = self._options if self._options is not None else daemon.Options()
        config = self._config
        try:
            if config is None:
                config = load_config(daemon.resolve_config_path(None))
            self._sampler = daemon.build_sampler(config, options)
            daemon.start_standins(self._sampler.scenario_object)  # as `headroom snapshot` does under --simulate
        except (ConfigError, daemon.StartupError) as exc:
            if self._sampler is not None:
                self._sampler.stop()
                self._sampler = None
            raise HostWatchError(f"cannot watch the host in process: {str(exc).splitlines()[0]}") from None
        self._sampler.tick()
        self._sampler.start()

    def _read_in_process(self) -> JsonDoc:
        from headroom.exposition import status_api

        snap = self._sampler.snapshot
        if snap is None:
            raise ValueError("no sample yet")
        return status_api.status(self._sampler, snap)

    def poll_once(self) -> JsonDoc | None:
        """One reading into the current step (if one is open); the status document, or None when it failed."""
        try:
            doc = self._read_api() if self.status_url else self._read_in_process()
        except (OSError, ValueError, urllib.error.URLError) as exc:  # JSONDecodeError is a ValueError
            reason = getattr(exc, "reason", None) or exc
            with self._lock:
                if self._step is not None:
                    self._step.fail(f"{type(exc).__name__}: {reason}")
            return None
        w = find_workload(doc, self.workload, self.url)
        with self._lock:
            self.polls += 1
            if self._step is not None:
                self._step.add(doc, w)
                self._found = self._found or w is not None
        return doc

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.poll_once()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    # ------------------------------------------------------------------------------------------ contract
    def begin(self) -> None:
        """Open a step (closing any open one unreported) and make sure the polling thread runs."""
        with self._lock:
            self._step, self._found = _Step(), False
        if self._thread is None and self.failed is None:
            if self.status_url is None:
                try:
                    self._start_in_process()
                except HostWatchError as exc:  # the probe goes on without host figures; each step says why
                    self.failed = str(exc)
                    return
            self._thread = threading.Thread(target=self._loop, name="probe-hostwatch", daemon=True)
            self._thread.start()

    def end(self) -> JsonDoc:
        """Close the step; its host dict. Without a step open: an empty one (source none)."""
        with self._lock:
            step, self._step = self._step, None
            found = self._found
        if step is None:
            return _Step().result("none", True)
        out = step.result(self.source if step.samples else "none", found)
        if self.failed is not None:
            out["error"] = self.failed
        return out

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(POLL_TIMEOUT_SECONDS + 1.0)
            self._thread = None
        if self._sampler is not None:
            from headroom import daemon

            self._sampler.stop()
            daemon.stop_standins(self._sampler.scenario_object)
            self._sampler = None

    def __enter__(self) -> HostWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
