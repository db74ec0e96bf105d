"""The tick loop: run every collector, keep a window of Samples, analyse, render, swap a Snapshot.

Collectors run in a worker lane (``_Lane``), one after another, off the sampler thread; one stuck
call (an NVML call that hangs, a dead NFS mount) delays nothing but itself: when a collector has not
answered by the tick's deadline it is reported failed (``headroom_collector_success`` 0, "stuck for
N s"), keeps its lane to itself and is not called again until its pending call returns, while the
other collectors move to a fresh lane in the same tick. The snapshot is immutable and swapped by a single reference assignment, so
a scrape never waits for, calls into, or sees half of a tick.

The loop keeps its own time: a tick is due every interval from the loop's start, and each snapshot carries how late
its tick started after its slot, the slots skipped because a tick started or ran past them, and the recent lateness
and durations over TIMING_WINDOW_SECONDS (``samples.TickTiming``): on a host whose every core is busy, the very
situation the agent must diagnose, this is what says whether its own figures still come on time (docs/deploy.md
"CPU priority" gives the unit and the DaemonSet the CPU weight that keeps them so).

What the daemon hands the sampler is typed here without importing it: ``Analyse`` (window -> derived values and
``samples.Findings``), the renderer (Snapshot -> bytes), and the agent's own health that rides on each Snapshot
(``config_reload_ok`` and its timestamp, set by the daemon on reload; a ``Recorder`` and a ``ConfigWatcher``,
Protocols of record.Recorder and exposition.webconfig.WebConfigWatcher, read once a tick).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Protocol

import structlog

from headroom.analysis import rates
from headroom.safeio import clip
from headroom.samples import Findings, Sample, Snapshot, SourceResult, TickTiming
from headroom.sources import Collector, CollectorError

log = structlog.get_logger("headroom.sampler")

# The span the recent tick lateness and durations cover (their max is exported, their spread is in /api/v1/status):
# at least one Prometheus scrape interval (15-60 s), so a late tick between two scrapes is still seen by the next.
TIMING_WINDOW_SECONDS = 60.0

# a collector's outcome in its lane: (ok, its collect() value or None, the error, seconds it took)
Outcome = tuple[bool, object, str | None, float]
# the analysis of a tick: window -> (derived values: rates.derive's, Findings or None); the daemon's is
# analysis.pipeline.Analysis (its Findings satisfies samples.Findings)
Analyse = Callable[[deque[Sample]], tuple[Mapping[str, float | None], Findings | None]]


class Recorder(Protocol):
    """--record's writer (headroom.record.Recorder) as the sampler drives it: one line a tick."""

    ok: bool  # the last write succeeded
    error: str | None  # why it did not
    written_bytes_total: int

    def write(self, sample: Sample, verdicts: Mapping[str, str] | None = None) -> None: ...
    def finish(self) -> None: ...  # at stop: the last file closed (and a rotated one compressed)


class ConfigWatcher(Protocol):
    """The web config's watcher (headroom.exposition.webconfig.WebConfigWatcher): did its last (re)load succeed."""

    ok: bool


class Closable(Protocol):
    """The simulation scenario behind ``Sampler.scenario``: closed at stop (it removes a synthetic host tree)."""

    def close(self) -> None: ...


class _Lane:
    """A worker thread that runs its collectors one after another, once per tick.

    All collectors share one lane until one of them gets stuck (it has not returned by the tick's
    deadline): then the lane keeps only the stuck collector, and the others move to a fresh lane, so a
    hung call isolates itself and delays nothing else. One thread wake-up per tick instead of one per
    collector is what keeps the tick cheap (docs/benchmarks.md).
    """

    def __init__(self, collectors: Iterable[Collector], clock: Callable[[], float]) -> None:
        self.collectors = list(collectors)
        self._clock = clock
        self._cv = threading.Condition()
        self._pending = False  # a run was requested and has not finished
        self._requested = False
        self._skip: frozenset[str] = frozenset()  # collectors this run leaves out (already ran this tick)
        self._stop = False
        self._results: dict[str, Outcome] = {}
        self.current: Collector | None = None  # the collector being called now
        self.current_started: float | None = None
        names = "+".join(c.name for c in self.collectors) or "none"
        self._thread = threading.Thread(target=self._loop, name=f"collectors-{names}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._requested or self._stop)
                if self._stop:
                    return
                self._requested = False
                plan = [c for c in self.collectors if c.name not in self._skip]
            for c in plan:
                with self._cv:
                    if self._stop or c not in self.collectors:  # moved to another lane meanwhile
                        continue
                    self.current, self.current_started = c, self._clock()
                outcome = _call(c, self._clock)
                with self._cv:
                    self._results[c.name] = outcome
                    self.current = None
            with self._cv:
                self._pending = False
                self._cv.notify_all()

    def submit(self, skip: Iterable[str] = ()) -> bool:
        """Ask for one run (of every collector but ``skip``); False when the previous run has not finished
        (a collector is stuck)."""
        with self._cv:
            if self._pending:
                return False
            self._pending = True
            self._requested = True
            self._skip = frozenset(skip)
            self._results = {}
            self._cv.notify_all()
            return True

    def wait(self, deadline: float) -> bool:
        """True when the run finished by ``deadline``."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._pending, timeout=max(0.0, deadline - self._clock()))

    def progress(self) -> tuple[dict[str, Outcome], Collector | None, float | None]:
        """(results so far, the collector running now, when it started)."""
        with self._cv:
            return dict(self._results), self.current, self.current_started

    def keep_only(self, collector: Collector) -> None:
        with self._cv:
            self.collectors = [collector]

    @property
    def busy(self) -> bool:
        with self._cv:
            return self._pending

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()


def _call(collector: Collector, clock: Callable[[], float]) -> Outcome:
    """(ok, data, error, duration) of one collect(); a collector fault degrades that collector only."""
    start = clock()
    outcome: tuple[bool, object, str | None]
    try:
        data = collector.collect()
        outcome = (True, data, None)
    except Exception as exc:
        message = str(exc) or type(exc).__name__
        if not _is_expected(exc):
            message = f"{type(exc).__name__}: {message}"
        outcome = (False, None, message)
    return (*outcome, clock() - start)


def _is_expected(exc: Exception) -> bool:
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
        analyse: Analyse | None = None,
        render: Callable[[Snapshot], bytes] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        on_snapshot: Callable[[Snapshot], None] | None = None,
        before_tick: Callable[[], None] | None = None,
        recorder: Recorder | None = None,
    ) -> None:
        self.interval = interval
        self.collector_timeout = collector_timeout if collector_timeout is not None else interval
        self.scenario = scenario
        self._clock = clock
        self._wall = wall_clock
        self._lanes = [_Lane(collectors, clock)]
        self.window: deque[Sample] = deque(maxlen=max(2, int(window_seconds / interval) + 1))
        self._analyse = analyse or _default_analysis
        self._render = render or _no_exposition  # the daemon passes exposition.render.render
        self._on_snapshot = on_snapshot
        self._before_tick = before_tick  # e.g. a scenario's synthetic host tree catching up with its clock
        self.recorder = recorder  # headroom.record.Recorder when --record is given
        self.web_config_watcher: ConfigWatcher | None = None  # set by the daemon when a web config is used
        self._ticks = 0
        timing_ticks = max(1, math.ceil(TIMING_WINDOW_SECONDS / interval))
        self._lateness: deque[float] = deque(maxlen=timing_ticks)  # of the scheduled ticks in the timing window
        self._durations: deque[float] = deque(maxlen=timing_ticks)
        self._missed_total = 0  # schedule slots skipped (run())
        self._failing: dict[str, str] = {}
        self._analysis_error: str | None = None  # why the last tick's analysis failed (None: it did not)
        self._workload_errors: dict[str, str] = {}  # workload entity -> why its analysis failed, last logged
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.snapshot: Snapshot | None = None
        self.last_tick_monotonic: float | None = None
        self.config_reload_ok = True
        self.config_reload_success_timestamp: float | None = wall_clock()
        self._pending: tuple[list[Collector], Analyse | None] | None = None
        self.scenario_object: Closable | None = None  # the simulation.Scenario behind ``scenario``, if any
        self._pending_lock = threading.Lock()

    @property
    def collector_names(self) -> list[str]:
        return [c.name for c in self._collectors()]

    # ----------------------------------------------------------------------------- reconfiguring
    def reconfigure(self, collectors: list[Collector], analyse: Analyse | None = None) -> None:
        """Use these collectors (and analysis) from the next tick on.

        A collector whose name, settings and scenario are unchanged keeps its running instance (its
        handles, accumulated counters and XID counts); the new duplicate is closed. The window is kept.
        """
        with self._pending_lock:
            self._pending = (collectors, analyse)

    def _collectors(self) -> list[Collector]:
        return [c for lane in self._lanes for c in lane.collectors]

    def _apply_pending(self) -> None:
        with self._pending_lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return
        collectors, analyse = pending
        old = {c.name: c for c in self._collectors()}
        kept, retired = [], []
        for c in collectors:
            o = old.pop(c.name, None)
            if o is not None and _same_setup(o, c):
                kept.append(o)
                retired.append(c)  # the new instance is not needed
            else:
                kept.append(c)
                if o is not None:
                    retired.append(o)
        retired.extend(old.values())
        # a lane still running a stuck call keeps it (if kept); everything else runs in one fresh lane
        busy = [lane for lane in self._lanes if lane.busy]
        stuck = {id(c) for lane in busy for c in lane.collectors}
        for lane in self._lanes:
            if lane not in busy:
                lane.stop()
        self._lanes = [*[lane for lane in busy if any(id(c) in stuck and c in kept for c in lane.collectors)],
                       _Lane([c for c in kept if id(c) not in stuck], self._clock)]
        if analyse is not None:
            self._analyse = analyse
        for c in retired:
            try:
                c.close()
            except Exception:
                log.exception("collector_close_failed", collector=c.name)
        log.info("collectors_reconfigured", collectors=[c.name for c in kept])

    # ------------------------------------------------------------------------------------ ticking
    def tick(self, scheduled_at: float | None = None) -> Snapshot:
        """Run one tick now and return the new Snapshot (also stored in ``self.snapshot``). ``scheduled_at``: the
        clock reading the tick was due at (run() passes its slot), so the snapshot says how late it started."""
        lateness = None if scheduled_at is None else max(0.0, self._clock() - scheduled_at)
        self._apply_pending()
        if self._before_tick is not None:
            self._before_tick()
        start = self._clock()
        results = self._collect(start)
        sample = Sample(timestamp=self._wall(), monotonic=self._clock(), sources=results)
        self._log_changes(results)
        self.window.append(sample)
        derived, findings = self._analysis(self.window)
        for change in findings.changes if findings is not None else ():
            log.info("bottleneck_changed", entity=change.entity, name=change.name, before=change.before,
                     after=change.after, evidence=change.evidence,
                     **({"remedy": change.remedy, "runbook_url": change.runbook_url,
                        "runbook_path": change.runbook_path} if change.remedy else {}))
        if self.recorder is not None:
            self.recorder.write(sample, findings.primaries() if findings is not None else None)
        self._ticks += 1
        duration = self._clock() - start
        self._durations.append(duration)
        if lateness is not None:
            self._lateness.append(lateness)
        snap = Snapshot(
            sample=sample,
            ticks=self._ticks,
            interval=self.interval,
            tick_duration_seconds=duration,
            scenario=self.scenario,
            rates=derived,
            findings=findings,
            config_reload_ok=self.config_reload_ok,
            config_reload_success_timestamp=self.config_reload_success_timestamp,
            record_ok=None if self.recorder is None else self.recorder.ok,
            record_written_bytes_total=None if self.recorder is None else self.recorder.written_bytes_total,
            web_config_reload_ok=None if self.web_config_watcher is None else self.web_config_watcher.ok,
            timing=TickTiming(lateness, self._missed_total, TIMING_WINDOW_SECONDS, tuple(self._lateness),
                              tuple(self._durations)),
        )
        snap = _with_exposition(snap, self._render(snap))
        self.snapshot = snap
        self.last_tick_monotonic = self._clock()
        if self._on_snapshot is not None:
            self._on_snapshot(snap)
        return snap

    def _analysis(self, window: deque[Sample]) -> tuple[Mapping[str, float | None], Findings | None]:
        """The analysis of the window; a fault in it costs this tick's verdicts, never the tick: the raw signals are
        still rendered, ``failing`` (hence /healthz) names it, and it is logged once until it recovers. Workloads
        whose own analysis failed (``Findings.errors``) are logged once each, at error level."""
        try:
            derived, findings = self._analyse(window)
        except Exception as exc:
            message = f"{type(exc).__name__}: {clip(str(exc))}"
            if self._analysis_error is None:
                log.exception("analysis_failed", error=message)
            self._analysis_error = message
            return {}, None
        if self._analysis_error is not None:
            self._analysis_error = None
            log.info("analysis_recovered")
        errors = dict(findings.errors) if findings is not None else {}
        if errors != self._workload_errors:
            for entity, reason in errors.items():
                if self._workload_errors.get(entity) != reason:
                    log.error("workload_analysis_failed", workload=entity.partition("/")[2], error=reason)
            self._workload_errors = errors
        return derived, findings

    def _collect(self, start: float) -> dict[str, SourceResult]:
        """Run every lane once; a collector stuck past the deadline is isolated in its own lane."""
        order = [c.name for c in self._collectors()]
        results: dict[str, SourceResult] = {}
        queue = [(lane, lane.submit(), start + self.collector_timeout) for lane in self._lanes]
        lanes = []
        while queue:
            lane, submitted, deadline = queue.pop(0)
            lanes.append(lane)
            done = lane.wait(deadline) if submitted else False
            partial, current, started = lane.progress()
            if submitted:
                for name, (ok, data, error, duration) in partial.items():
                    results[name] = SourceResult(name, ok, duration, data, error)
            if done:
                continue
            stuck = current if current is not None else lane.collectors[0]
            stuck_for = self._clock() - (started if started is not None else start)
            results[stuck.name] = SourceResult(stuck.name, False, stuck_for, None,
                                               f"stuck: collect() has not returned for {stuck_for:.1f}s")
            # the others must not wait behind it: they move to a lane of their own, all of them, also
            # those that already answered in this run (they are not called twice in one tick)
            others = [c for c in lane.collectors if c is not stuck]
            if others:
                lane.keep_only(stuck)
                log.info("collector_isolated", collector=stuck.name, others=[c.name for c in others])
                fresh = _Lane(others, self._clock)
                answered = partial.keys() if submitted else ()
                queue.append((fresh, fresh.submit(skip=answered), self._clock() + self.collector_timeout))
        self._lanes = lanes
        return {name: results[name] for name in order if name in results}

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
        if self._analysis_error is not None:
            out["analysis"] = self._analysis_error
        if self.recorder is not None and not self.recorder.ok:
            out["record"] = self.recorder.error or "writes failing"
        return out

    def run(self) -> None:
        """Tick at a fixed rate until ``stop()``. Overruns skip slots instead of bunching up; the skipped slots are
        counted (``headroom_samples_missed_total``) and each tick says how late it started after its slot."""
        next_at = self._clock()
        while not self._stop.is_set():
            try:
                self.tick(scheduled_at=next_at)
            except Exception:  # never let the loop die; a broken tick is visible as staleness
                log.exception("tick_failed")
            next_at += self.interval
            now = self._clock()
            if next_at < now:
                missed = int((now - next_at) / self.interval) + 1
                next_at += missed * self.interval
                self._missed_total += missed
            self._stop.wait(max(0.0, next_at - now))

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        for lane in self._lanes:
            lane.stop()
        for c in self._collectors():
            try:
                c.close()
            except Exception:
                log.exception("collector_close_failed", collector=c.name)
        if self.scenario_object is not None:
            self.scenario_object.close()  # removes a synthetic host tree
        if self.recorder is not None:
            self.recorder.finish()  # and a rotated file compressed

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
    return replace(snap, exposition=body)


def _default_analysis(window: deque[Sample]) -> tuple[Mapping[str, float | None], Findings | None]:
    return rates.derive(window), None


def _no_exposition(snapshot: Snapshot) -> bytes:
    return b""
