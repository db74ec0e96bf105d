"""The tick loop: run every collector, keep a window of Samples, analyse, render, swap a Snapshot.

Each collector runs in its own worker thread, so one stuck call (an NVML call that hangs, a dead NFS
mount) delays nothing but itself: when a collector has not answered by the tick's deadline it is
reported failed (``headroom_collector_success`` 0, "stuck for N s") and is not called again until
its pending call returns. The snapshot is immutable and swapped by a single reference assignment, so
a scrape never waits for, calls into, or sees half of a tick.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from headroom.analysis import rates
from headroom.samples import Sample, SourceResult
from headroom.sources import Collector

log = structlog.get_logger("headroom.sampler")


@dataclass(frozen=True)
class Snapshot:
    """What the exposition layer serves: the latest Sample, its findings and the rendered bytes."""

    sample: Sample
    ticks: int
    interval: float
    tick_duration_seconds: float
    scenario: str | None = None
    rates: Mapping[str, Any] = field(default_factory=dict)
    findings: Any = None  # headroom.analysis results (bottlenecks, headroom) once present
    config_reload_ok: bool = True  # the last configuration (re)load succeeded
    config_reload_success_timestamp: float | None = None  # when the configuration last loaded successfully
    record_ok: bool | None = None  # --record: the last write succeeded (None: not recording)
    record_written_bytes_total: int | None = None
    exposition: bytes = b""
    extras: Mapping[str, Any] = field(default_factory=dict)


class _Worker:
    """Runs one collector's ``collect()`` in a dedicated thread, one call at a time."""

    def __init__(self, collector: Collector, clock: Callable[[], float]) -> None:
        self.collector = collector
        self.name = collector.name
        self._clock = clock
        self._cv = threading.Condition()
        self._pending = False  # a call was requested and has not returned
        self._requested = False
        self._stop = False
        self._result: tuple[bool, Any, str | None, float] | None = None
        self.call_started: float | None = None
        self._thread = threading.Thread(target=self._loop, name=f"collector-{self.name}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._requested or self._stop)
                if self._stop:
                    return
                self._requested = False
            start = self._clock()
            try:
                data = self.collector.collect()
                outcome = (True, data, None)
            except Exception as exc:  # a collector fault degrades that collector only
                message = str(exc) or type(exc).__name__
                if not _is_expected(exc):
                    message = f"{type(exc).__name__}: {message}"
                outcome = (False, None, message)
            duration = self._clock() - start
            with self._cv:
                self._result = (*outcome, duration)
                self._pending = False
                self._cv.notify_all()

    def submit(self) -> bool:
        """Ask for one call; False when the previous call is still running (stuck)."""
        with self._cv:
            if self._pending:
                return False
            self._pending = True
            self._requested = True
            self._result = None
            self.call_started = self._clock()
            self._cv.notify_all()
            return True

    def wait(self, deadline: float) -> tuple[bool, Any, str | None, float] | None:
        """The call's (ok, data, error, duration), or None if it did not return by ``deadline``."""
        with self._cv:
            self._cv.wait_for(lambda: not self._pending, timeout=max(0.0, deadline - self._clock()))
            return None if self._pending else self._result

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()


def _is_expected(exc: Exception) -> bool:
    from headroom.sources import CollectorError

    return isinstance(exc, CollectorError | OSError)


class Sampler:
    """Owns the collectors, the window and the current Snapshot."""

    def __init__(
        self,
        collectors: Iterable[Collector],
        interval: float = 1.0,
        window_seconds: float = 600.0,
        collector_timeout: float | None = None,
        scenario: str | None = None,
        analyse: Callable[[deque[Sample]], tuple[Mapping[str, Any], Any]] | None = None,
        render: Callable[[Snapshot], bytes] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        on_snapshot: Callable[[Snapshot], None] | None = None,
        before_tick: Callable[[], None] | None = None,
        recorder: Any = None,
    ) -> None:
        from headroom.exposition import render as render_module

        self.interval = interval
        self.collector_timeout = collector_timeout if collector_timeout is not None else interval
        self.scenario = scenario
        self._clock = clock
        self._wall = wall_clock
        self._workers = [_Worker(c, clock) for c in collectors]
        self.window: deque[Sample] = deque(maxlen=max(2, int(window_seconds / interval) + 1))
        self._analyse = analyse or _default_analysis
        self._render = render or render_module.render
        self._on_snapshot = on_snapshot
        self._before_tick = before_tick  # e.g. a scenario's synthetic host tree catching up with its clock
        self.recorder = recorder  # headroom.record.Recorder when --record is given
        self._ticks = 0
        self._failing: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.snapshot: Snapshot | None = None
        self.last_tick_monotonic: float | None = None
        self.config_reload_ok = True
        self.config_reload_success_timestamp: float | None = wall_clock()
        self._pending: tuple[list[Collector], Any] | None = None
        self.scenario_object: Any = None  # the simulation.Scenario behind ``scenario``, if any
        self._pending_lock = threading.Lock()

    @property
    def collector_names(self) -> list[str]:
        return [w.name for w in self._workers]

    # ----------------------------------------------------------------------------- reconfiguring
    def reconfigure(self, collectors: list[Collector], analyse: Any = None) -> None:
        """Use these collectors (and analysis) from the next tick on.

        A collector whose name, settings and scenario are unchanged keeps its running instance (its
        handles, accumulated counters and XID counts); the new duplicate is closed. The window is kept.
        """
        with self._pending_lock:
            self._pending = (collectors, analyse)

    def _apply_pending(self) -> None:
        with self._pending_lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return
        collectors, analyse = pending
        old = {w.name: w for w in self._workers}
        workers, retired = [], []
        for c in collectors:
            w = old.pop(c.name, None)
            if w is not None and _same_setup(w.collector, c):
                workers.append(w)
                retired.append(c)  # the new instance is not needed
            else:
                workers.append(_Worker(c, self._clock))
                if w is not None:
                    retired.append(w)
        retired.extend(old.values())
        self._workers = workers
        if analyse is not None:
            self._analyse = analyse
        for item in retired:
            if isinstance(item, _Worker):
                item.stop()
                item = item.collector
            try:
                item.close()
            except Exception:
                log.exception("collector_close_failed", collector=item.name)
        log.info("collectors_reconfigured", collectors=[w.name for w in workers])

    # ------------------------------------------------------------------------------------ ticking
    def tick(self) -> Snapshot:
        """Run one tick now and return the new Snapshot (also stored in ``self.snapshot``)."""
        self._apply_pending()
        if self._before_tick is not None:
            self._before_tick()
        start = self._clock()
        deadline = start + self.collector_timeout
        submitted = {w.name: w.submit() for w in self._workers}
        results: dict[str, SourceResult] = {}
        for w in self._workers:
            outcome = w.wait(deadline) if submitted[w.name] else None
            if outcome is None:
                stuck_for = self._clock() - (w.call_started or start)
                results[w.name] = SourceResult(
                    w.name, False, stuck_for, None, f"stuck: collect() has not returned for {stuck_for:.1f}s"
                )
            else:
                ok, data, error, duration = outcome
                results[w.name] = SourceResult(w.name, ok, duration, data, error)
        sample = Sample(timestamp=self._wall(), monotonic=self._clock(), sources=results)
        self._log_changes(results)
        self.window.append(sample)
        derived, findings = self._analyse(self.window)
        for change in getattr(findings, "changes", ()) or ():
            log.info("bottleneck_changed", entity=change.entity, name=change.name, before=change.before,
                     after=change.after, evidence=change.evidence)
        if self.recorder is not None:
            primaries = findings.primaries() if hasattr(findings, "primaries") else None
            self.recorder.write(sample, primaries)
        self._ticks += 1
        snap = Snapshot(
            sample=sample,
            ticks=self._ticks,
            interval=self.interval,
            tick_duration_seconds=self._clock() - start,
            scenario=self.scenario,
            rates=derived,
            findings=findings,
            config_reload_ok=self.config_reload_ok,
            config_reload_success_timestamp=self.config_reload_success_timestamp,
            record_ok=None if self.recorder is None else self.recorder.ok,
            record_written_bytes_total=None if self.recorder is None else self.recorder.written_bytes_total,
        )
        snap = _with_exposition(snap, self._render(snap))
        self.snapshot = snap
        self.last_tick_monotonic = self._clock()
        if self._on_snapshot is not None:
            self._on_snapshot(snap)
        return snap

    def _log_changes(self, results: Mapping[str, SourceResult]) -> None:
        for name, r in results.items():
            before = self._failing.get(name)
            if not r.ok and before is None:
                self._failing[name] = r.error or "failed"
                log.warning("collector_failing", collector=name, error=r.error)
            elif r.ok and before is not None:
                del self._failing[name]
                log.info("collector_recovered", collector=name)

    @property
    def failing(self) -> Mapping[str, str]:
        """Collectors failing now, with their error (and the recorder, under "record", when its writes fail)."""
        out = dict(self._failing)
        if self.recorder is not None and not self.recorder.ok:
            out["record"] = self.recorder.error or "writes failing"
        return out

    def run(self) -> None:
        """Tick at a fixed rate until ``stop()``. Overruns skip slots instead of bunching up."""
        next_at = self._clock()
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # never let the loop die; a broken tick is visible as staleness
                log.exception("tick_failed")
            next_at += self.interval
            now = self._clock()
            if next_at < now:
                missed = int((now - next_at) / self.interval) + 1
                next_at += missed * self.interval
            self._stop.wait(max(0.0, next_at - now))

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        for w in self._workers:
            w.stop()
        for w in self._workers:
            try:
                w.collector.close()
            except Exception:
                log.exception("collector_close_failed", collector=w.name)
        close_scenario = getattr(self.scenario_object, "close", None)
        if close_scenario is not None:
            close_scenario()  # removes a synthetic host tree
        if self.recorder is not None:
            self.recorder.close()

    def healthy(self) -> tuple[bool, str]:
        """(ok, reason): ok when a tick completed within the last 3 intervals."""
        if self.last_tick_monotonic is None:
            return False, "no sample yet"
        age = self._clock() - self.last_tick_monotonic
        if age > 3 * self.interval:
            return False, f"last sample {age:.1f}s ago (interval {self.interval:g}s)"
        return True, "ok"


def _same_setup(a: Collector, b: Collector) -> bool:
    return (type(a) is type(b) and dict(a.ctx.settings) == dict(b.ctx.settings) and a.ctx.paths == b.ctx.paths
            and a.ctx.scenario is b.ctx.scenario and a.ctx.interval == b.ctx.interval
            and a.ctx.workloads == b.ctx.workloads)


def _with_exposition(snap: Snapshot, body: bytes) -> Snapshot:
    from dataclasses import replace

    return replace(snap, exposition=body)


def _default_analysis(window: deque[Sample]) -> tuple[Mapping[str, Any], Any]:
    return rates.derive(window), None
