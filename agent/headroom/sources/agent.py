"""The agent collector: what the agent itself costs (CPU, resident memory, threads, open files).

Users deploy the agent on every GPU host and expect it to cost almost nothing and stay flat; these
series let them verify that in Prometheus (docs/benchmarks.md, docs/reliability.md "Soak"). Read from
the agent's own /proc/PID/stat (CPU seconds, threads, resident pages: the values psutil reports, from the
same file) and the entries of /proc/PID/fd, less the listing's own descriptor; psutil gives the start time
once. The stat file is opened for each read, so the descriptor count is never one of ours held for the count's
sake. (Linux 6.2+ also reports the count as the directory's size, 30 times cheaper, but in a full test run it
read 9 above the entries listed around it, cause not established, so the listing
stays the count.)
"""

from __future__ import annotations

import os

import psutil

from headroom.samples import AgentSample
from headroom.sources import Collector, CollectorError, SourceContext, procfs, register
from headroom.sources.cpu import clock_ticks_per_second

_PROC = "/proc"  # the agent's own process, as psutil reads it (not --path.procfs: that may be a host's)


@register
class AgentCollector(Collector):
    name = "agent"
    default_enabled = True
    description = "the agent's own CPU time, resident memory, threads and open file descriptors"

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        self._process = psutil.Process()
        self._started = self._process.create_time()
        self._user_hz = clock_ticks_per_second()
        self._pid = os.getpid()
        self._stat = procfs.ProcFile(f"{_PROC}/{self._pid}/stat", keep=False)
        self._fds = f"{_PROC}/{self._pid}/fd"
        self._page_size = os.sysconf("SC_PAGE_SIZE")

    def collect(self) -> AgentSample:
        try:
            st = procfs.parse_pid_stat(self._stat.text("surrogateescape"), self._user_hz)
            open_fds = count_open_fds(self._fds)
        except (OSError, ValueError) as exc:
            raise CollectorError(f"cannot read the agent's own process: {exc}") from None
        return AgentSample(
            cpu_user_seconds_total=st.utime_seconds,
            cpu_system_seconds_total=st.stime_seconds,
            resident_memory_bytes=st.rss_pages * self._page_size,
            threads=st.num_threads,
            open_fds=open_fds,
            start_time_seconds=self._started,
        )


def count_open_fds(fd_dir: str) -> int:
    """Open descriptors of the process whose /proc/PID/fd is ``fd_dir``: its entries less the one this listing
    opens."""
    return max(0, len(os.listdir(fd_dir)) - 1)
