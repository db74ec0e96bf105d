"""Run a scenario in this process on a manual clock: the agent's own collectors, sampler and analysis, as
many ticks as asked, as fast as the machine goes.

``headroom run --simulate`` ticks on the wall clock; this runs the same pipeline (``daemon.build_collectors``,
``Sampler``, ``Analysis``) with the scenario's driver stand-in, synthetic host and sampler all on one
``ManualClock`` that moves one interval per tick. A scenario with a synthetic host then gives the same
samples on any machine under any load (its stand-ins are simulated processes in the synthetic /proc).
Used by the tests that compare verdicts across machines and by ``make accuracy`` (bench/accuracy.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from headroom.simulation.scenario import ManualClock, Scenario, load_scenario

if TYPE_CHECKING:  # imported where running() starts, as before
    from headroom.config import Config
    from headroom.sampler import Sampler
    from headroom.samples import Findings, Snapshot

    class _Waits(Protocol):  # a collector whose scrapes run on threads (sources/serving.py's ServingCollector)
        def wait_idle(self, timeout: float) -> bool: ...

START = 1000.0  # the manual clock's start (any value: only differences count)
WALL_START = 1_700_000_000.0


@dataclass
class Run:
    """A scenario running in process: ``tick()`` moves the clock one interval on and returns the Snapshot."""

    scenario: Scenario
    config: Config
    sampler: Sampler
    clock: ManualClock
    interval: float
    serving_wait: float  # at most this many real seconds per tick for the serving scrapes (threads) to answer

    def tick(self) -> Snapshot:
        self.clock.advance(self.interval)
        snap = self.sampler.tick()
        for c in self.serving:  # the scrapes this tick started answer before the next one
            c.wait_idle(self.serving_wait)
        return snap

    @property
    def serving(self) -> list[_Waits]:
        return [c for c in self.sampler._collectors() if hasattr(c, "wait_idle")]

    @property
    def seconds(self) -> float:
        """Scenario time now."""
        return self.clock() - START


@contextmanager
def running(scenario: str | Scenario, config: Config | None = None, interval: float | None = None,
            serving_wait: float = 10.0) -> Iterator[Run]:
    """Start ``scenario`` (a name, a path or a Scenario) with ``config`` (a Config; None: the defaults) plus
    the scenario's profiles; yields a Run; stops the stand-ins and removes the synthetic tree on the way out."""
    from headroom.config import load_config
    from headroom.daemon import LatestSample, Options, build_collectors, make_analysis, with_scenario_profiles
    from headroom.sampler import Sampler

    s = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    config = with_scenario_profiles(config if config is not None else load_config(None), s)
    interval = interval or config.sample_interval
    clock = ManualClock(START)

    def scenario_time() -> float:
        return clock() - START

    s.nvml_library(clock=scenario_time)
    s.synthetic_host(clock=scenario_time)
    latest = LatestSample()
    collectors = build_collectors(config, Options(sample_interval=interval), s, latest, monotonic=clock)
    sampler = Sampler(collectors, interval=interval, window_seconds=config.agent["window"],
                      collector_timeout=max(5.0, interval), scenario=s.name, analyse=make_analysis(config),
                      clock=clock, wall_clock=lambda: WALL_START + clock() - START,
                      before_tick=s.update_host if s.host is not None else None)
    latest.sampler = sampler
    sampler.scenario_object = s
    try:
        s.start_processes()
        for c in collectors:  # endpoints of undeclared serving profiles, found now rather than by a thread later
            if hasattr(c, "detect") and hasattr(c, "wait_idle"):
                c.detect()
        yield Run(s, config, sampler, clock, interval, serving_wait)
    finally:
        s.stop_processes()
        sampler.stop()  # closes the collectors and the scenario (its synthetic tree)


def primaries(findings: Findings | None) -> dict[str, str]:
    """Workload name -> primary bottleneck of one tick's Findings."""
    return {w.name: w.verdict.primary for w in getattr(findings, "workload_findings", ())}
