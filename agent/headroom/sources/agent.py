"""The agent collector: what the agent itself costs (CPU, resident memory, threads, open files).

Users deploy the agent on every GPU host and expect it to cost almost nothing and stay flat; these
series let them verify that in Prometheus (docs/benchmarks.md, docs/reliability.md "Soak"). Read
through psutil, which does this portably and cheaply for the current process (/proc/self here).
"""

from __future__ import annotations

import psutil

from headroom.samples import AgentSample
from headroom.sources import Collector, CollectorError, SourceContext, register


@register
class AgentCollector(Collector):
    name = "agent"
    default_enabled = True
    description = "the agent's own CPU time, resident memory, threads and open file descriptors"

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        self._process = psutil.Process()
        self._started = self._process.create_time()

    def collect(self) -> AgentSample:
        try:
            with self._process.oneshot():
                cpu = self._process.cpu_times()
                return AgentSample(
                    cpu_user_seconds_total=cpu.user,
                    cpu_system_seconds_total=cpu.system,
                    resident_memory_bytes=self._process.memory_info().rss,
                    threads=self._process.num_threads(),
                    open_fds=self._process.num_fds(),
                    start_time_seconds=self._started,
                )
        except (psutil.Error, OSError) as exc:
            raise CollectorError(f"cannot read the agent's own process: {exc}") from None
