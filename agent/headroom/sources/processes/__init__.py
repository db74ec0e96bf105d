"""The processes collector: finds each declared workload's processes and measures them, every tick.

Matching (``match:`` in a workload profile; any rule may match): ``cmdline`` (an RE2 regular
expression, linear-time, searched in the first ``CMDLINE_MATCH_BYTES`` bytes of the argv joined by
spaces: a megabyte-long command line costs what 4 KiB does), ``exe`` (comm, or the base name of argv[0]), ``systemd_unit``
(a component of the process's cgroup path; ``.service`` is assumed without a suffix), ``cgroup`` (a
glob over the cgroup path, ``*`` crossing ``/``), ``container_id`` (a substring of the cgroup path, as
docker, containerd and CRI-O name their scopes), ``pid_file`` (read every tick). ``user`` / ``uid``
restrict the other rules to processes of that real user (alone, they match all of its processes):
any local user can name a process to match a ``cmdline`` or ``exe`` rule, so those rules alone are
not an authentication. Children follow their
parent: a process whose ancestor belongs to a workload belongs to it too (DataLoader workers, vLLM
engine cores), and keeps it when the parent exits. On conflict the first declared workload wins.

Cost (docs/architecture.md, "Cost facts": reading every /proc/PID/stat of 1 000 processes takes ~22 ms,
every cmdline ~16 ms, far over the tick budget), so the work is incremental:

- new processes are found without listing /proc on most ticks: on a live procfs of the agent's own pid
  namespace, /proc/loadavg's last field is the newest pid the kernel allocated, so a tick where it did not
  move has no new process, and one where it moved by a few only stats /proc/PID for the pids in between
  (a thread's id is skipped by its Tgid). /proc is listed (``os.scandir``) on the first tick, every
  ``FULL_SCAN_SECONDS`` (which forgets processes that exited without being members), when the pid
  counter wrapped or jumped further than a listing costs, and on every tick of a fixture tree or another
  namespace's procfs. A pid is examined only when it is new, or when its /proc/PID inode changed (the
  kernel gives every process instance a fresh inode; an evicted dentry also changes it, so the start
  time in /proc/PID/stat decides whether the pid was reused);
- a new process costs one read each of stat, cmdline (only when a rule needs it) and cgroup (only
  when a rule needs it), once; one that appeared after the first scan and matched nothing is re-read
  ``RECHECKS`` more times at doubling intervals (the next tick, then about 3, 7 and 15 s after discovery), so a fork ->
  exec (or a move into its unit's cgroup) that happened after discovery is not missed even when a
  loaded host or a launcher script delays the exec past one tick (such a look re-reads what the rules
  match, not the stat: the same inode is the same process, whose start time is known; comm, which an exec
  changes, only for an ``exe`` rule); later changes are seen by the
  ``FULL_SCAN_SECONDS`` listing. The cost grows with the fork rate, not the process count;
- per tick, only the members of workloads are read: /proc/PID/stat (CPU, threads, RSS, and the start
  time that detects pid reuse; each member's own CPU seconds are reported beside the workload's sum, for
  per-process saturation; and, while a main process runs at HOT_CORES or more, its threads'
  /proc/PID/task/TID/stat, for per-thread saturation), /proc/PID/io (skipped for good once denied; not read for a simulation's
  stand-ins that are real processes of this machine, which perform none of the I/O they model: unknown,
  not zero) and, on ticks where its CPU seconds grew, /proc/PID/schedstat (its main thread's seconds on a CPU and
  waiting runnable for one: oversubscribed CPUs; skipped for good once unreadable; ~5 us a read); on a live procfs a
  member's stat, io and schedstat stay open (``procfs.PidFiles``, for the first ``OPEN_MEMBER_FILES`` members) and
  are read again from offset 0, and closed when it exits or leaves;
- a newcomer due another look whose /proc/PID has gone is forgotten at that look (short-lived processes, pods
  replaced), not stat-ed again on every tick until the next listing;
- a workload that maps to a cgroup (systemd unit, cgroup glob, container id) also gets its cgroup v2
  files through ``--path.sysfs``: cpu.stat, cpu.max, memory.current, io.stat, {cpu,memory,io}.pressure.

Automatic workloads (sources/identity.py: pods, Slurm jobs, containers, units, launchers) are measured by the same
code: their members are the processes their cgroup (and every cgroup below it) listed when the identity collector
last read it, their GPU processes (a launcher of its own: the launcher too) and every known descendant of those
(``_measure_auto``), read from the previous tick's identity sample (one tick of drift); their cgroup figures are
the identity collector's. Their entries follow the declared ones, by workload name (docs/workload-identity.md,
"Members and measurement"). With automatic workloads and no declared one, /proc is followed as above all the same.

Under a simulation scenario that declares workloads, only the scenario's stand-ins count (never a real
process of the machine that happens to match a rule).

Processes that vanish mid-read, entries the kernel denies (hidepid, other users' io) and pid reuse
never fail the collector: they are skipped or re-examined silently.

One purpose a module, the layers pointing one way (matching, pids, cgroups <- collector):

- ``matching.py``: ``Rule`` and ``Matcher``, the ``match:`` rules applied to one process (``CMDLINE_MATCH_BYTES``);
- ``pids.py``: ``read_last_pid`` and ``is_thread_group_leader``, new processes found without a listing;
- ``cgroups.py``: ``read_cgroup`` and the parsers of a cgroup v2 cgroup's files;
- ``collector.py``: ``ProcessesCollector``, what it remembers of each process and workload, and the measurement.

This module re-exports what the rest of the agent, the tests and the benchmarks import from
``headroom.sources.processes``; importing it registers the collector.
"""

from __future__ import annotations

from headroom.sources.processes.cgroups import (
    cgroup_root,
    parse_cpu_max,
    parse_cpu_stat,
    parse_io_stat,
    read_cgroup,
)
from headroom.sources.processes.collector import (
    ARGV_SETTLE_SECONDS,
    FULL_SCAN_SECONDS,
    HOT_CORES,
    MIN_LISTING_WORTH,
    OPEN_MEMBER_FILES,
    PAGE_SIZE,
    RECHECKS,
    ProcessesCollector,
)
from headroom.sources.processes.matching import CMDLINE_MATCH_BYTES, Matcher, Rule
from headroom.sources.processes.pids import is_thread_group_leader, read_last_pid

__all__ = ["ARGV_SETTLE_SECONDS", "CMDLINE_MATCH_BYTES", "FULL_SCAN_SECONDS", "HOT_CORES",
           "MIN_LISTING_WORTH", "Matcher", "OPEN_MEMBER_FILES", "PAGE_SIZE", "ProcessesCollector",
           "RECHECKS", "Rule", "cgroup_root", "is_thread_group_leader", "parse_cpu_max", "parse_cpu_stat",
           "parse_io_stat", "read_cgroup", "read_last_pid"]
