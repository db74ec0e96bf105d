"""The agent collector reports this very process: the numbers must match what the kernel says."""

from __future__ import annotations

import os
import threading

from headroom.sources import SourceContext
from headroom.sources.agent import AgentCollector


def test_agent_collector_reads_its_own_process():
    before = AgentCollector(SourceContext()).collect()
    # burn a little CPU and open a file: the counters must follow
    sum(i * i for i in range(300_000))
    with open(__file__) as held:
        after = AgentCollector(SourceContext()).collect()
        assert abs(after.open_fds - len(os.listdir("/proc/self/fd"))) <= 1  # the listing may see its own fd
        assert after.open_fds >= before.open_fds + 1
        held.read(1)
    assert after.cpu_user_seconds_total + after.cpu_system_seconds_total > (
        before.cpu_user_seconds_total + before.cpu_system_seconds_total)
    assert after.threads == len(os.listdir("/proc/self/task")) == threading.active_count()
    with open("/proc/self/status") as f:
        rss_kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    assert abs(after.resident_memory_bytes - rss_kib * 1024) < 8 * 2**20
