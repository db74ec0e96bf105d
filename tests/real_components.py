"""What the real-component tests (tests/test_real_*.py) share: how a component that cannot run here is reported,
and how /proc and /metrics are read to compare the agent's figures with the kernel's.

A real fixture that cannot start its component (not root, no cgroup v1 hierarchy, a package missing) skips its
tests with one line saying why; with HEADROOM_REQUIRE_REAL=1 (CI, `make test`) it fails instead, so a machine
that should run them cannot pass by skipping (docs/testing.md, "Real components")."""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REQUIRE_REAL = os.environ.get("HEADROOM_REQUIRE_REAL") == "1"
CGROUP_ROOT = Path("/sys/fs/cgroup")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def unavailable(reason: str) -> None:
    """Skip the test with ``reason``, or fail it under HEADROOM_REQUIRE_REAL=1."""
    if REQUIRE_REAL:
        pytest.fail(f"HEADROOM_REQUIRE_REAL=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def require_root(component: str) -> None:
    if os.geteuid() != 0:
        unavailable(f"{component} needs root (runs as uid {os.geteuid()})")


def require_commands(component: str, *commands: str) -> None:
    missing = [c for c in commands if shutil.which(c) is None and not Path("/usr/sbin", c).exists()]
    if missing:
        unavailable(f"{component}: {', '.join(missing)} not installed (tests/install-real-debian.sh installs them)")


def cgroup_v1_controllers() -> set[str]:
    """The cgroup v1 controllers mounted on this host (name=systemd as 'name=systemd')."""
    found = set()
    try:
        mounts = Path("/proc/self/mounts").read_text()
    except OSError:
        return found
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "cgroup":
            found.update(o for o in fields[3].split(",") if o not in ("rw", "ro", "relatime", "nosuid", "nodev",
                                                                      "noexec"))
    return found


def require_cgroup_v1(component: str, *controllers: str) -> None:
    missing = [c for c in controllers if c not in cgroup_v1_controllers()]
    if missing:
        unavailable(f"{component} needs the cgroup v1 hierarchies {', '.join(missing)} (this host mounts "
                    f"{', '.join(sorted(cgroup_v1_controllers())) or 'none'})")


@dataclass(frozen=True)
class ProcFigures:
    """What /proc says of a set of processes at one moment, summed."""

    pids: frozenset[int]
    threads: int
    cpu_seconds: float  # utime + stime
    rss_bytes: int


def proc_figures(pids: set[int] | frozenset[int]) -> ProcFigures:
    """Threads, CPU seconds and RSS of ``pids`` as /proc/PID/stat says now (those that ended meanwhile left out)."""
    live, threads, ticks, rss = set(), 0, 0, 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state is fields[0] (field 3)
        if fields[0] == "Z":
            continue
        live.add(pid)
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
        threads += int(fields[17])  # num_threads (field 20)
        rss += int(fields[21]) * PAGE  # rss in pages (field 24)
    return ProcFigures(frozenset(live), threads, ticks / CLOCK_TICKS, rss)


def cgroup_v1_pids(controller: str, relative: str) -> set[int]:
    """Every pid in a v1 cgroup and its descendants (cgroup.procs of each directory below it)."""
    pids: set[int] = set()
    top = CGROUP_ROOT / controller / relative.strip("/")
    for dirpath, _, files in os.walk(top):
        if "cgroup.procs" in files:
            try:
                pids.update(int(p) for p in Path(dirpath, "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                continue
    return pids


def remove_cgroup_tree(path: Path) -> list[str]:
    """Kill what is left in a cgroup directory and below, then remove the directories, deepest first; answers
    what could not be removed."""
    import signal
    import time

    left: list[str] = []
    if not path.is_dir():
        return left
    for _ in range(50):
        pids = set()
        for dirpath, _, files in os.walk(path):
            if "cgroup.procs" in files:
                try:
                    pids.update(int(p) for p in Path(dirpath, "cgroup.procs").read_text().split())
                except (OSError, ValueError):
                    pass
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.1)
    for dirpath, _, _ in sorted(os.walk(path), key=lambda e: -e[0].count("/")):
        for attempt in range(20):
            try:
                os.rmdir(dirpath)
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                if attempt == 19:
                    left.append(f"{dirpath}: {exc.strerror}")
                time.sleep(0.1)
    return left


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def metric_samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of metric ``name`` in a Prometheus text exposition: (labels, value)."""
    found = []
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        m = _SAMPLE.match(line)
        if m and m.group(1) == name:
            found.append((dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return found


def metric_value(text: str, name: str, **labels: str) -> float | None:
    """The sum of ``name``'s samples whose labels include ``labels``; None when there is none."""
    values = [v for lab, v in metric_samples(text, name) if all(lab.get(k) == x for k, x in labels.items())]
    return sum(values) if values else None


# ------------------------------------------------------------------ the agent's figures against /proc
INTERVAL = 0.25  # the agent's sampling interval in the real-component tests (seconds)
# a tick's own duration on top of the interval: a few ms idle, tens of ms on a shared 2-core machine; bounded
# generously, as the drift it allows is this times the cores the workload burns
TICK_SLACK = 0.25
RSS_TOLERANCE = (2 * 2**20, 0.02)  # absolute bytes, share: members that allocate nothing while measured
MEMBER_METRICS = ("processes", "threads", "cpu_seconds_total", "resident_memory_bytes")


def member_figures(text: str, workload: str) -> dict[str, float | None]:
    """The agent's per-process figures of ``workload`` in an exposition (cpu_seconds_total: both modes)."""
    return {m: metric_value(text, f"headroom_workload_{m}", workload=workload) for m in MEMBER_METRICS}


def member_mismatches(got: dict[str, float | None], before: ProcFigures, after: ProcFigures, cores: float) -> list[str]:
    """What in the agent's figures ``got`` disagrees with /proc read just ``before`` and just ``after`` the
    /metrics request they came from, beyond one tick's drift:

    - processes and threads exactly (the tests hold their sets steady while they measure);
    - CPU seconds: the agent's counter is as of its last tick, at most INTERVAL + TICK_SLACK before ``before``
      was read, while the workload burnt at most ``cores``; it cannot be ahead of ``after`` (the same
      utime + stime, plus a clock tick of rounding per process);
    - RSS within RSS_TOLERANCE (members that allocate nothing move by a few pages between two reads)."""
    bad = []
    if got["processes"] != len(after.pids):
        bad.append(f"processes {got['processes']}, /proc lists {len(after.pids)} in its cgroup: {sorted(after.pids)}")
    if got["threads"] != after.threads:
        bad.append(f"threads {got['threads']}, /proc says {after.threads}")
    drift = cores * (INTERVAL + TICK_SLACK)
    rounding = len(after.pids) / CLOCK_TICKS
    cpu = got["cpu_seconds_total"]
    if cpu is None or not before.cpu_seconds - drift <= cpu <= after.cpu_seconds + rounding:
        bad.append(f"cpu_seconds_total {cpu}, /proc says {before.cpu_seconds:.2f} to {after.cpu_seconds:.2f} "
                   f"(drift allowed {drift:.2f} s)")
    rss = got["resident_memory_bytes"]
    slack = max(RSS_TOLERANCE[0], RSS_TOLERANCE[1] * after.rss_bytes)
    if rss is None or abs(rss - after.rss_bytes) > slack:
        bad.append(f"resident_memory_bytes {rss}, /proc says {after.rss_bytes} (+-{slack:.0f})")
    return bad


MEMORY_TOLERANCE = (2 * 2**20, 0.05)  # a cgroup's memory: its page cache and kernel memory move a little too


def cgroup_cpu_seconds(*candidates: Path) -> float | None:
    """A cgroup's CPU time (user + system) from the first of ``candidates`` that exists: a v2 ``cpu.stat``
    (usage_usec) or a v1 ``cpuacct.stat`` (user and system in clock ticks)."""
    for path in candidates:
        try:
            fields = dict(line.split() for line in path.read_text().splitlines())
        except OSError:
            continue
        if path.name == "cpu.stat":
            return int(fields["usage_usec"]) / 1e6
        return (int(fields["user"]) + int(fields["system"])) / CLOCK_TICKS
    return None


def cgroup_memory_bytes(*candidates: Path) -> int | None:
    """A cgroup's memory from the first of ``candidates`` that exists: v2 ``memory.current`` or v1
    ``memory.usage_in_bytes``."""
    for path in candidates:
        try:
            return int(path.read_text())
        except OSError:
            continue
    return None


def cgroup_mismatches(text: str, workload: str, cpu_before: float | None, cpu_after: float | None,
                      memory: int | None, cores: float) -> list[str]:
    """What in the agent's cgroup figures of ``workload`` disagrees with the kernel's files read just before and
    after the /metrics request: CPU within one tick's drift (they are read every tick while there are at most 5
    automatic workloads, docs/workload-identity.md), memory within MEMORY_TOLERANCE."""
    bad = []
    cpu = metric_value(text, "headroom_workload_cgroup_cpu_seconds_total", workload=workload)
    drift = cores * (INTERVAL + TICK_SLACK)
    if cpu_before is None or cpu_after is None:
        bad.append("the test found no CPU file of its cgroup")
    elif cpu is None or not cpu_before - drift <= cpu <= cpu_after + 0.001:
        bad.append(f"cgroup_cpu_seconds_total {cpu}, its cgroup says {cpu_before:.2f} to {cpu_after:.2f} "
                   f"(drift allowed {drift:.2f} s)")
    got = metric_value(text, "headroom_workload_cgroup_memory_bytes", workload=workload)
    if memory is None:
        bad.append("the test found no memory file of its cgroup")
    else:
        slack = max(MEMORY_TOLERANCE[0], MEMORY_TOLERANCE[1] * memory)
        if got is None or abs(got - memory) > slack:
            bad.append(f"cgroup_memory_bytes {got}, its cgroup says {memory} (+-{slack:.0f})")
    return bad


def wait_for(what: str, probe, timeout: float = 30.0, every: float = 0.2):
    """``probe()``'s first truthy answer within ``timeout``; else fails with ``what`` and the last answer."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"{what} not within {timeout} s (last: {str(last)[:3000]})")
