"""Where a profile without ``endpoint:`` serves: ``discover`` finds its runtime's process by the profile's
``match:`` rules in one pass over /proc, and ``endpoint_from_argv`` reads the /metrics URL off that command line."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from headroom.workload.profiles.types import WorkloadProfile


def endpoint_from_argv(argv: list[str]) -> tuple[str, str] | None:
    """(runtime, /metrics URL) of a serving runtime's command line (``--host``/``--port`` and their
    equivalents, else the runtime's defaults); None when it is not one. The one launcher matcher, shared
    with automatic workloads: workload/launchers.py."""
    from headroom.workload.launchers import metrics_endpoint

    return metrics_endpoint(argv)


def discover(procfs: Path, profiles: list[WorkloadProfile]) -> dict[str, str]:
    """Workload name -> /metrics URL, for profiles with a ``match.cmdline`` rule whose match finds a serving
    runtime's process.

    One pass over /proc; the first matching process of a profile wins. Matching is the processes
    collector's (``processes.Matcher``): RE2 over the first CMDLINE_MATCH_BYTES of each command line, and
    the profile's ``user``/``uid`` rules against the real uid in /proc/PID/status, so a process of another
    user never becomes a restricted profile's endpoint and a megabyte-long command line costs what 4 KiB
    does. Only a process that matches has its launcher flags read (the first ``identity.CMDLINE_BYTES``)."""
    import os

    from headroom.sources import procfs as proc
    from headroom.sources.identity import CMDLINE_BYTES
    from headroom.sources.processes import Matcher

    wanted = [p for p in profiles if getattr(p.match, "cmdline", None)]
    found: dict[str, str] = {}
    if not wanted:
        return found
    matcher = Matcher(p.match for p in wanted)
    try:
        pids = sorted(int(e.name) for e in os.scandir(procfs) if e.name.isdigit())
    except OSError:
        return found
    for pid in pids:
        try:
            argv, paths, uid = matcher.read(procfs, pid)
            comm = ""
            if matcher.needs_comm:
                st = proc.read_pid_stat(procfs, pid)
                comm = st.comm if st is not None else ""
            hits = [i for i in matcher.matching(comm, argv, paths, uid) if wanted[i].name not in found]
            if not hits:
                continue
            endpoint = endpoint_from_argv(proc.read_pid_cmdline(procfs, pid, limit=CMDLINE_BYTES) or [])
        except Exception:  # the process is gone, or unreadable: not ours to explain
            continue
        if endpoint is None:
            continue
        for i in sorted(hits):
            found[wanted[i].name] = endpoint[1]
        if len(found) == len(wanted):
            break
    return found
