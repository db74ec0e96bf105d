"""The agent collector reports this very process: the numbers must match what the kernel says.

Other threads of the test process (servers and probers that earlier tests left winding down) open and close
file descriptors and start and end threads at any moment, so each count is compared with the kernel's when
the kernel's count did not move around the reading, rather than before/after differences that assume the
process is quiet."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from headroom.sources import SourceContext
from headroom.sources.agent import AgentCollector


def settled(read: Callable[[], int], field: str) -> tuple[int, int]:
    """(collector's value, kernel's value) from a reading the kernel's count did not change around."""
    deadline = time.monotonic() + 10
    while True:
        before = read()
        got = getattr(AgentCollector(SourceContext()).collect(), field)
        if read() == before or time.monotonic() > deadline:
            return got, before
        time.sleep(0.01)


def fds() -> int:
    return len(os.listdir("/proc/self/fd")) - 1  # minus the listing's own descriptor


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_agent_collector_reads_its_own_process():
    before = AgentCollector(SourceContext()).collect()
    # burn CPU until the process has used 50 ms more (5 clock ticks: /proc counts in 10 ms steps): the counters
    # must follow (a fixed 300 000 squares took under one tick once, beside 4 test workers on 2 cores)
    spent = time.process_time()
    while time.process_time() - spent < 0.05:
        sum(i * i for i in range(10_000))
    after = AgentCollector(SourceContext()).collect()
    assert after.cpu_user_seconds_total + after.cpu_system_seconds_total > (
        before.cpu_user_seconds_total + before.cpu_system_seconds_total)
    with open("/proc/self/status") as f:
        rss_kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    assert abs(after.resident_memory_bytes - rss_kib * 1024) < 8 * 2**20


def test_agent_collector_counts_its_open_files_and_threads():
    reported, kernel = settled(fds, "open_fds")
    assert abs(reported - kernel) <= 1  # psutil's listing may see its own descriptor
    held = [open(__file__) for _ in range(20)]  # noqa: SIM115 - closed below
    try:
        reported_held, kernel_held = settled(fds, "open_fds")
        assert abs(reported_held - kernel_held) <= 1
        assert kernel_held >= kernel + 10  # the 20 files moved the count (whatever else closed meanwhile)
    finally:
        for f in held:
            f.close()
    stop = threading.Event()
    extra = [threading.Thread(target=stop.wait, daemon=True) for _ in range(5)]
    for t in extra:
        t.start()
    try:
        reported, kernel = settled(threads, "threads")
        assert reported == kernel
        assert kernel >= 6
    finally:
        stop.set()
        for t in extra:
            t.join()

