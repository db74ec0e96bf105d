"""The tick loop: isolation of failing and stuck collectors, snapshots, health, window."""

from __future__ import annotations

import threading
import time

from headroom.exposition.render import render as render_exposition
from headroom.exposition.server import HeadroomHTTPServer
from headroom.sampler import Sampler
from headroom.samples import MemorySample
from headroom.sources import Collector, CollectorError, SourceContext

from conftest import http_get


class Steady(Collector):
    name = "memory"

    def collect(self):
        return MemorySample(total_bytes=100, available_bytes=60, free_bytes=50)


class Broken(Collector):
    name = "disk"

    def __init__(self, ctx, message="cannot read /proc/diskstats: No such file or directory"):
        super().__init__(ctx)
        self.message = message
        self.broken = True

    def collect(self):
        if self.broken:
            raise CollectorError(self.message)
        from headroom.samples import DiskSample
        return DiskSample(devices=())


class Hanging(Collector):
    """Blocks inside collect() until released, like an NVML call that hangs."""

    name = "cpu"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.release = threading.Event()
        self.calls = 0

    def collect(self):
        self.calls += 1
        self.release.wait(30)
        raise CollectorError("released")


class Crashing(Collector):
    name = "shm"

    def collect(self):
        raise ZeroDivisionError("division by zero")


def test_a_failing_collector_does_not_break_the_tick():
    s = Sampler(render=render_exposition, collectors=[Steady(SourceContext()), Broken(SourceContext()), Crashing(SourceContext())], interval=0.2)
    try:
        snap = s.tick()
    finally:
        s.stop()
    text = snap.exposition.decode()
    assert 'headroom_collector_success{collector="memory"} 1' in text
    assert 'headroom_collector_success{collector="disk"} 0' in text
    assert 'headroom_collector_success{collector="shm"} 0' in text
    assert "headroom_memory_size_bytes 100" in text
    assert snap.sample.sources["disk"].error == "cannot read /proc/diskstats: No such file or directory"
    # unexpected exceptions keep their type in the message so a bug report says what happened
    assert snap.sample.sources["shm"].error == "ZeroDivisionError: division by zero"


def test_a_collector_recovers_when_its_fault_clears():
    broken = Broken(SourceContext())
    s = Sampler(render=render_exposition, collectors=[broken], interval=0.2)
    try:
        assert not s.tick().sample.sources["disk"].ok
        assert "disk" in s.failing
        broken.broken = False
        assert s.tick().sample.sources["disk"].ok
        assert s.failing == {}
    finally:
        s.stop()


def test_a_stuck_collector_is_reported_and_not_called_again_while_stuck():
    hanging = Hanging(SourceContext())
    s = Sampler(render=render_exposition, collectors=[Steady(SourceContext()), hanging], interval=0.2, collector_timeout=0.2)
    try:
        t0 = time.monotonic()
        first = s.tick()
        second = s.tick()
        elapsed = time.monotonic() - t0
        assert not first.sample.sources["cpu"].ok
        assert first.sample.sources["cpu"].error.startswith("stuck: collect() has not returned for")
        assert second.sample.sources["memory"].ok
        assert hanging.calls == 1, "a stuck collector must not pile up calls"
        assert elapsed < 2.0, "ticks must not wait for the stuck call"
        hanging.release.set()
        time.sleep(0.1)
        s.tick()
        assert hanging.calls == 2
    finally:
        hanging.release.set()
        s.stop()


class Counting(Collector):
    """Answers at once and counts its calls."""

    def __init__(self, ctx, name):
        super().__init__(ctx)
        self.name = name
        self.calls = 0

    def collect(self):
        from headroom.samples import DiskSample

        self.calls += 1
        if self.name == "disk":
            return DiskSample(devices=())
        return MemorySample(total_bytes=100, available_bytes=60, free_bytes=50)


def test_collectors_that_answered_before_a_stuck_one_keep_running_in_later_ticks():
    """A collector that hangs between others: those before it already answered this tick, those after it
    move to a fresh lane. Neither group may be lost: every later tick still runs (and reports) them, once."""
    before, after = Counting(SourceContext(), "memory"), Counting(SourceContext(), "disk")
    hanging = Hanging(SourceContext())
    s = Sampler(render=render_exposition, collectors=[before, hanging, after], interval=0.2, collector_timeout=0.2)
    try:
        ticks = [s.tick() for _ in range(3)]
        for snap in ticks:
            assert set(snap.sample.sources) == {"memory", "cpu", "disk"}, snap.sample.sources.keys()
            assert snap.sample.sources["memory"].ok and snap.sample.sources["disk"].ok
            assert not snap.sample.sources["cpu"].ok
        assert (before.calls, after.calls, hanging.calls) == (3, 3, 1), "one call per tick, none lost"
        assert sorted(s.collector_names) == ["cpu", "disk", "memory"]
    finally:
        hanging.release.set()
        s.stop()


def test_collector_order_does_not_depend_on_which_module_was_imported_first():
    """The registry fills in import order; a program (or test module) that imports one collector module
    before the others must still get the documented order, which the lanes and the exposition follow."""
    import subprocess
    import sys

    program = ("import headroom.sources.shm, headroom.sources.cpu\n"
               "from headroom.sources import load_all, _MODULES\n"
               "print(','.join(load_all()))\n"
               "print(','.join(_MODULES))\n")
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout
    order, modules = out.split()
    assert order == modules


def test_scrapes_keep_answering_while_a_collector_hangs():
    hanging = Hanging(SourceContext())
    s = Sampler(render=render_exposition, collectors=[Steady(SourceContext()), hanging], interval=0.1, collector_timeout=0.1)
    s.tick()
    s.start()
    srv = HeadroomHTTPServer(("127.0.0.1", 0), s)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        for _ in range(5):
            t0 = time.monotonic()
            status, _, body = http_get(url + "/metrics", timeout=2)
            assert status == 200
            assert time.monotonic() - t0 < 1.0
            assert b'headroom_collector_success{collector="cpu"} 0' in body
        status, _, body = http_get(url + "/healthz")
        assert status == 200 and b"degraded: cpu: stuck" in body
    finally:
        hanging.release.set()
        srv.shutdown()
        srv.server_close()
        s.stop()


def test_health_turns_503_when_ticks_stop():
    now = [100.0]
    s = Sampler(render=render_exposition, collectors=[Steady(SourceContext())], interval=1.0, clock=lambda: now[0])
    try:
        assert s.healthy() == (False, "no sample yet")
        s.tick()
        assert s.healthy()[0]
        now[0] += 3.5
        ok, reason = s.healthy()
        assert not ok and reason.startswith("last sample 3.5s ago")
    finally:
        s.stop()


def test_window_is_bounded_by_its_duration():
    s = Sampler(render=render_exposition, collectors=[Steady(SourceContext())], interval=0.5, window_seconds=10)
    try:
        for _ in range(40):
            s.tick()
        assert len(s.window) == 21
        assert s.snapshot.ticks == 40
    finally:
        s.stop()


class _SteppedClock:
    """A clock the test moves: a collector's collect() takes ``durations[i]`` of it at tick i, and the loop's wait for
    its next slot wakes ``late[i]`` after the slot, as a starved sampler thread does on a saturated host."""

    def __init__(self, durations, late):
        self.now, self.durations, self.late, self.ticks, self.waits = 0.0, list(durations), list(late), 0, 0
        self._set = False

    def __call__(self):
        return self.now

    # the sampler's stop event: wait() advances the clock instead of sleeping, and stops the loop after the last tick
    def is_set(self):
        return self._set

    def set(self):
        self._set = True

    def wait(self, seconds):
        self.now += seconds + self.late[self.waits]
        self.waits += 1
        if self.waits >= len(self.durations):
            self._set = True
        return self._set


class _Taking(Collector):
    name = "memory"

    def __init__(self, ctx, clock):
        super().__init__(ctx)
        self.clock = clock

    def collect(self):
        self.clock.now += self.clock.durations[self.clock.ticks]
        self.clock.ticks += 1
        return MemorySample(total_bytes=100, available_bytes=60, free_bytes=50)


def _gauge(text: str, name: str) -> float | None:
    import re

    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return None if m is None else float(m.group(1))


def test_tick_lateness_and_missed_slots_are_measured_against_the_schedule():
    """Tick 2 wakes 0.3 s after its slot (a starved thread), tick 3 then runs 2.5 s (two slots pass): the snapshots
    say so, in the exposition and in /api/v1/status, and the on-time ticks say 0."""
    import pytest

    from headroom.exposition import status_api

    clock = _SteppedClock(durations=[0.01, 0.01, 2.5, 0.01], late=[0.0, 0.3, 0.0, 0.0])
    snaps = []
    s = Sampler(render=render_exposition, collectors=[_Taking(SourceContext(), clock)], interval=1.0,
                collector_timeout=100.0, clock=clock, on_snapshot=snaps.append)
    # private: the stop event: only what the handler touches is built (Agent.__new__), or the sampler's clock is stepped
    s._stop = clock
    try:
        s.run()
    finally:
        s.stop()
    assert [round(x.timing.lateness_seconds, 6) for x in snaps] == [0.0, 0.0, 0.3, 0.0]
    assert [x.timing.missed_total for x in snaps] == [0, 0, 0, 2]  # tick 3 ran from 2.3 to 4.8: slots 3 and 4 skipped
    text = [x.exposition.decode() for x in snaps]
    assert _gauge(text[1], "headroom_sample_lateness_seconds") == 0.0
    assert _gauge(text[2], "headroom_sample_lateness_seconds") == pytest.approx(0.3)
    assert _gauge(text[2], "headroom_samples_missed_total") == 0
    last = text[3]
    assert _gauge(last, "headroom_sample_lateness_seconds") == 0.0
    assert _gauge(last, "headroom_sample_lateness_max_seconds") == pytest.approx(0.3)  # still in the 60 s window
    assert _gauge(last, "headroom_sample_duration_max_seconds") == pytest.approx(2.5)
    assert _gauge(last, "headroom_samples_missed_total") == 2
    agent = status_api.status(s, snaps[-1])["agent"]
    assert agent["ticks_in_window"] == 4 and agent["missed_ticks_total"] == 2
    assert agent["tick_lateness_seconds"]["max"] == pytest.approx(0.3)
    assert agent["tick_lateness_seconds"]["median"] == 0.0
    assert agent["tick_duration_seconds"]["max"] == pytest.approx(2.5)


def test_a_tick_not_run_by_the_schedule_has_no_lateness():
    """A tick taken by hand (the daemon's first, before the loop starts) was due at no slot: no lateness is exported
    for it, rather than a 0 that would claim the schedule was kept."""
    s = Sampler(render=render_exposition, collectors=[Steady(SourceContext())], interval=1.0)
    try:
        snap = s.tick()
    finally:
        s.stop()
    text = snap.exposition.decode()
    assert snap.timing.lateness_seconds is None
    assert _gauge(text, "headroom_sample_lateness_seconds") is None
    assert _gauge(text, "headroom_sample_lateness_max_seconds") is None
    assert _gauge(text, "headroom_samples_missed_total") == 0
