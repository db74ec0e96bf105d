"""The processes collector: ``ProcessesCollector`` (discovery, membership and the measurement of declared and
automatic workloads, every tick), what it remembers of each process (``_Proc``) and workload (``_Totals``); the
package docstring (``headroom.sources.processes``) says how it finds and measures processes, and at what cost."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

import structlog

from headroom.samples import CgroupStats, IdentityGroup, ProcessesSample, WorkloadProcesses, share_unchanged
from headroom.sources import Collector, SourceContext, procfs, register
from headroom.sources.cpu import clock_ticks_per_second
from headroom.sources.neighbours import NeighbourScan
from headroom.sources.processes.cgroups import read_cgroup
from headroom.sources.processes.matching import CMDLINE_MATCH_BYTES, Matcher
from headroom.sources.processes.pids import is_thread_group_leader, read_last_pid
from headroom.workload.launchers import dataloader_ranks

log = structlog.get_logger("headroom.sources.processes")

HOT_CORES = 0.8  # a main process using this many cores since the previous tick gets its threads read
FULL_SCAN_SECONDS = 30.0  # /proc is listed at least this often (exits of non-members, a safety net)
MIN_LISTING_WORTH = 64  # new pids a tick stats one by one before listing /proc instead (and 1/8 of the known)
RECHECKS = 4  # an unmatched newcomer is examined again at the next tick, then about 3, 7 and 15 s after discovery
OPEN_MEMBER_FILES = 128  # members whose stat, io and schedstat stay open (3 descriptors each); the others are read by path
ARGV_SETTLE_SECONDS = 5.0  # the rank and worker rule reads a process's argv again on every tick for this long

try:
    PAGE_SIZE = int(os.sysconf("SC_PAGE_SIZE"))
except (ValueError, OSError, AttributeError):  # pragma: no cover - every Linux has it
    PAGE_SIZE = 4096


class _Again(NamedTuple):
    """What another look at a known process (same /proc/PID inode) needs of its stat: known already, except
    comm, which only an ``exe`` rule reads (then the stat is read again)."""

    pid: int
    comm: str
    ppid: int
    starttime_ticks: int


@dataclass(slots=True)
class _Proc:
    """What the collector remembers about one process instance (pid + start time)."""

    inode: int
    starttime: int
    ppid: int
    direct: frozenset[int] = frozenset()  # workloads whose static rules match the process itself
    cgroups: tuple[str, ...] = ()  # unified path first, then the v1 controller paths
    workload: int | None = None  # resolved membership
    inherited: int | None = None  # workload taken from an ancestor (kept when the parent exits)
    recheck: bool = False  # unmatched at discovery: due more looks (``rechecks`` taken so far)
    rechecks: int = 0
    io_denied: bool = False
    cpu: tuple[float, float] | None = None  # (utime, stime) already added to the workload's counters
    cpu_at: float | None = None  # monotonic time of that reading
    io: tuple[int, int] | None = None  # (read_bytes, write_bytes) already added
    sched_denied: bool = False  # its /proc/PID/schedstat could not be read (no CONFIG_SCHED_INFO, denied): not again
    sched: tuple[float, float] | None = None  # (ran, waited) seconds of its main thread already added
    files: procfs.PidFiles | None = None  # its stat and io kept open while it is a member (live procfs only)
    found: float = 0.0  # monotonic time it was discovered; 0.0: by the first scan (an old process)


@dataclass(slots=True)
class _Totals:
    """Per-workload counters that survive member exits."""

    user: float = 0.0
    system: float = 0.0
    read: int = 0
    written: int = 0
    io_seen: bool = False
    ran: float = 0.0  # its members' main threads: seconds on a CPU and seconds runnable waiting for one (schedstat)
    waited: float = 0.0
    sched_seen: bool = False
    had_members: bool | None = None  # for logging changes only
    pid_file_error: str | None = None
    members: set[int] = field(default_factory=set)
    busy: bool = True  # an automatic workload's CPU grew at its last measurement (_measure_auto)


def _same_cgroup(now: CgroupStats, then: CgroupStats | None) -> bool:
    """True when an automatic workload's cgroup figures are those it was last measured with: the identity
    collector read them again and found them equal, or has not read them since (it reads each identity's within
    CGROUP_REFRESH_SECONDS, every tick while there are few). An idle workload's members (their CPU did not grow
    at its last measurement) cannot start using CPU or memory without its cgroup's figures moving, so theirs
    stand until its cgroup is next read; a busy one is measured every tick (its rates stay exact)."""
    return now is then or (then is not None and now == then)


# -------------------------------------------------------------------------------------- collector
@register
class ProcessesCollector(Collector):
    name = "processes"
    default_enabled = True
    description = "Processes of the declared and automatic workloads: count, CPU, RSS, threads, I/O, cgroup stats"

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        self._profiles = [w for w in ctx.workloads if not w.match.empty]
        self._matcher = Matcher(w.match for w in self._profiles)
        self._rules = self._matcher.rules
        self._needs_comm = self._matcher.needs_comm
        self._user_hz = clock_ticks_per_second()
        self._procs: dict[int, _Proc] = {}
        self._totals = [_Totals() for _ in self._profiles]
        self._last: tuple[WorkloadProcesses | None, ...] = (None,) * len(self._profiles)  # the last tick's
        self._pid_files: list[frozenset[int]] = [frozenset() for _ in self._profiles]
        self._scanned = False  # the first full scan is done
        # a simulation's stand-ins that are real processes (read from the machine's own /proc) burn real CPU but
        # perform none of the I/O they model: their /proc/PID/io would claim "reads nothing", so it is unknown
        # (None); and their run-queue waits (schedstat) are this machine's, not the simulated host's (a CPU hog
        # beside the tests would read as their oversubscription): unknown too. A simulated /proc (a synthetic
        # host's) declares what its processes read and wait, so it counts
        self._io_real = ctx.scenario is None or _resolved(ctx.paths.procfs) != _resolved(Path("/proc"))
        self._neighbours = NeighbourScan(ctx.paths.procfs, self._user_hz, PAGE_SIZE)
        # a live procfs of our own pid namespace: /proc/loadavg's last pid is the one its pids count from
        self._live = procfs.is_live_procfs(ctx.paths.procfs)
        self._last_pid: int | None = None
        self._recheck: dict[int, float] = {}  # pid -> when its next look is due (the ``recheck`` flag), kept aside
        self._now = 0.0  # this tick's monotonic time (set by _listing)
        self._listed_at: float | None = None
        self.listings = 0  # full /proc listings so far (bench/processes.py reports them)
        self._kept: set[int] = set()  # members whose files are kept open (at most OPEN_MEMBER_FILES)
        self._kids: dict[int, set[int]] = {}  # ppid -> the known processes it started (as their stat said)
        self._auto: dict[str, _Totals] = {}  # automatic workload -> its counters, while it lives
        self._auto_last: dict[str, WorkloadProcesses] = {}  # ... and last tick's entry
        self._auto_pids: set[int] = set()  # the processes of automatic workloads this tick
        # for the rank and worker rule (``_argv_of``): pid -> (start time, comm, argv), and each member's comm of its
        # latest tick
        self._argv: dict[int, tuple[int, str, tuple[str, ...]]] = {}
        self._comms: dict[int, str] = {}
        self._groups: tuple[IdentityGroup, ...] = ()  # the automatic workloads the last known identity tick named

    def collect(self) -> ProcessesSample:
        """This tick's ProcessesSample; raises CollectorError only when /proc cannot be listed."""
        # the automatic workloads, the host's pressure and the analysis's scores of the last tick (PreviousTick)
        previous = self.ctx.previous_tick()
        identity = previous.identity if previous is not None else None
        if identity is None and previous is not None:
            # the identity collector failed or missed the last tick's deadline (a saturated host): the automatic
            # workloads are unknown, not gone, so their members of the tick before are measured again
            groups = self._groups
        else:
            groups = self._groups = identity.groups if identity is not None else ()
        if not self._profiles and not groups:
            self._auto_done({})
            return ProcessesSample()
        root = self.ctx.paths.procfs
        listing, complete = self._listing(root)
        standins = getattr(self.ctx.scenario, "standin_pids", None)  # simulated: the scenario's stand-ins only
        allowed = standins() if standins is not None else None
        if allowed is not None:
            listing = {pid: inode for pid, inode in listing.items() if pid in allowed}
        full = False
        if complete:
            for pid in [p for p in self._procs if p not in listing]:
                self._forget(pid)
        fresh = self._discover(listing)
        self._scanned = True
        pid_files = self._read_pid_files()
        if pid_files != self._pid_files:
            self._pid_files, full = pid_files, True
        if fresh is None:
            full = True
        if full or fresh:
            self._resolve(None if full else fresh)
        # what did not change since the last tick (an idle member's CPU seconds, the pids) is last tick's object
        declared = tuple(share_unchanged(self._measure(i), last) for i, last in enumerate(self._last))
        self._last = declared
        out = declared + self._measure_auto(groups, declared)
        # who else presses on the host (sources/neighbours.py): scanned only under pressure, bounded
        neighbours = self._neighbours.update((self.ctx.monotonic or time.monotonic)(), previous,
                                             {pid: w.name for w in out for pid in w.pids})
        return ProcessesSample(workloads=out, neighbours=neighbours)

    # -- discovery
    def _listing(self, root: Path) -> tuple[dict[int, int], bool]:
        """(pid -> /proc/PID inode, complete): every pid (complete) or only those that may be new since the
        last tick (the pids allocated since, and the ones due a second look)."""
        now = self._now = self.ctx.monotonic() if self.ctx.monotonic is not None else time.monotonic()
        last = read_last_pid(root) if self._live else None
        previous, self._last_pid = self._last_pid, last
        if (last is not None and previous is not None and self._listed_at is not None
                and 0 <= now - self._listed_at < FULL_SCAN_SECONDS
                and 0 <= last - previous <= max(MIN_LISTING_WORTH, len(self._procs) // 8)):
            listing: dict[int, int] = {}
            due = {pid for pid, at in self._recheck.items() if at <= now}
            for pid in (*range(previous + 1, last + 1), *due):
                try:
                    inode = os.stat(f"{root}/{pid}").st_ino
                except FileNotFoundError:
                    if pid in due:  # a newcomer due another look has exited: no more looks (nor stats)
                        self._forget(pid)
                    continue
                except OSError:
                    continue  # never a process of ours to see
                if pid > previous and not is_thread_group_leader(root, pid):
                    continue  # a thread's id: /proc/TID exists but is not listed
                listing[pid] = inode
            return listing, False
        try:
            listing = {int(e.name): e.inode() for e in os.scandir(root) if e.name.isdigit()}
        except OSError as exc:
            raise procfs.read_failure(root, exc) from None
        self._listed_at = now
        self.listings += 1
        return listing, True

    def _discover(self, listing: dict[int, int]) -> list[int] | None:
        """Examine new, re-inoded and recheck pids; returns the pids (re)classified, or None when an
        existing process changed its rules' verdict (then every membership is resolved again)."""
        root = self.ctx.paths.procfs
        todo: list[tuple[procfs.PidStat | _Again, int, _Proc | None]] = []  # (its stat, its inode, known as)
        for pid, inode in listing.items():
            p = self._procs.get(pid)
            if p is not None and p.inode == inode:
                if not self._due(p, pid):
                    continue
                if not self._needs_comm:  # another look at the same process (same inode): only its argv,
                    todo.append((_Again(pid, "", p.ppid, p.starttime), inode, p))  # cgroup or uid can change
                    continue
            st: procfs.PidStat | None
            try:
                st = procfs.read_pid_stat(root, pid, self._user_hz)
            except (OSError, ValueError):
                continue  # unreadable now: tried again next tick
            except procfs.ProcessGone:
                st = None
            if st is None:  # denied (hidepid) or gone: costs nothing more until its inode changes
                self._forget(pid)
                self._procs[pid] = _Proc(inode=inode, starttime=-1, ppid=-1)
                continue
            if p is not None and p.starttime == st.starttime_ticks and not self._due(p, pid):
                p.inode = inode  # same process, its dentry was evicted
                continue
            todo.append((st, inode, p))
        todo.sort(key=lambda t: (t[0].starttime_ticks, t[0].pid))  # parents before their children
        changed: list[int] = []
        verdict_changed = False
        for seen, inode, old in todo:
            pid = seen.pid
            try:
                argv, paths, uid = self._matcher.read(root, pid)
            except procfs.ProcessGone:
                self._forget(pid)
                continue
            direct = self._matcher.matching(seen.comm, argv, paths, uid)
            if old is not None and old.starttime == seen.starttime_ticks:  # a re-examination
                old.rechecks += 1
                if direct or old.rechecks >= RECHECKS:
                    old.recheck = False
                    self._recheck.pop(pid, None)
                else:
                    self._recheck[pid] = self._now + 2.0 ** old.rechecks - 0.5  # half a tick early: ticks jitter
                old.inode = inode
                if direct != old.direct:
                    old.direct, old.cgroups = direct, paths
                    verdict_changed = True
                continue
            if old is not None:
                self._forget(pid)  # pid reuse: a different process now
            # processes found by the first scan are old: only later arrivals may still be between fork and exec
            self._procs[pid] = _Proc(inode=inode, starttime=seen.starttime_ticks, ppid=seen.ppid, direct=direct,
                                     cgroups=paths, recheck=not direct and self._scanned,
                                     found=self._now if self._scanned else 0.0)
            self._kids.setdefault(seen.ppid, set()).add(pid)
            if not direct and self._scanned:
                self._recheck[pid] = self._now  # due at the next tick
            changed.append(pid)
        return None if verdict_changed else changed

    def _due(self, p: _Proc, pid: int) -> bool:
        return p.recheck and self._recheck.get(pid, float("inf")) <= self._now

    def _forget(self, pid: int) -> None:
        self._recheck.pop(pid, None)
        self._argv.pop(pid, None)
        self._comms.pop(pid, None)
        p = self._procs.pop(pid, None)
        if p is not None and p.ppid >= 0 and (kids := self._kids.get(p.ppid)) is not None:
            kids.discard(pid)
            if not kids:
                del self._kids[p.ppid]
        if p is not None and p.workload is not None:
            self._totals[p.workload].members.discard(pid)
        if p is not None and p.files is not None:
            self._release(p, pid)

    def _release(self, p: _Proc, pid: int) -> None:
        """Close the files kept open for ``p`` (it exited, or is no member any more)."""
        if p.files is not None:
            p.files.close()
            p.files = None
        self._kept.discard(pid)

    def close(self) -> None:
        """Close every member's kept files."""
        for pid in list(self._kept):
            p = self._procs.get(pid)
            if p is not None:
                self._release(p, pid)
        self._kept.clear()

    def _read_pid_files(self) -> list[frozenset[int]]:
        """Per workload, the pid its pid file names (empty when it has none, or it is missing/garbled)."""
        out: list[frozenset[int]] = []
        for rule, totals in zip(self._rules, self._totals, strict=True):
            if rule.pid_file is None:
                out.append(frozenset())
                continue
            path = self.ctx.paths.host(rule.pid_file)
            error = None
            pids: frozenset[int] = frozenset()
            try:
                pids = frozenset({int(path.read_text().split()[0])})
            except FileNotFoundError:
                error = "missing"
            except (OSError, ValueError, IndexError) as exc:
                error = f"unreadable: {getattr(exc, 'strerror', None) or exc or 'empty'}"
            if error != totals.pid_file_error:
                if error is not None:
                    log.info("pid_file_unusable", pid_file=str(path), error=error)
                totals.pid_file_error = error
            out.append(pids)
        return out

    # -- membership
    def _resolve(self, only: list[int] | None) -> None:
        """Assign processes to workloads: own rules, pid files, then the parent's workload (first declared
        wins). ``only``: just these (new) pids, whose parents are already resolved; None: everyone."""
        if only is None:
            pids = sorted(self._procs, key=lambda q: (self._procs[q].starttime, q))
            for t in self._totals:
                t.members.clear()
        else:
            pids = only
        for pid in pids:
            p = self._procs.get(pid)
            if p is None or p.starttime < 0:
                continue
            candidates = set(p.direct)
            candidates.update(i for i, pf in enumerate(self._pid_files) if pid in pf)
            parent = self._procs.get(p.ppid)
            if parent is not None and parent.workload is not None and 0 <= parent.starttime <= p.starttime:
                p.inherited = parent.workload if p.inherited is None else min(p.inherited, parent.workload)
            if p.inherited is not None:
                candidates.add(p.inherited)
            before = p.workload
            p.workload = min(candidates) if candidates else None
            if only is not None and before is not None and before != p.workload:
                self._totals[before].members.discard(pid)
            if p.workload is None and p.files is not None and pid not in self._auto_pids:
                self._release(p, pid)
            if p.workload is not None:
                self._totals[p.workload].members.add(pid)

    # -- automatic workloads
    def _measure_auto(self, groups: tuple[IdentityGroup, ...], declared: tuple[WorkloadProcesses, ...]
                      ) -> tuple[WorkloadProcesses, ...]:
        """One entry per automatic workload of the previous tick's identity sample (sources/identity.py), by its
        workload name, measured as a declared workload's (``_measure_members``). Its members: the processes its
        cgroup and those below listed (``IdentityGroup.members``: read by the identity collector when the
        identity appeared, then at each refresh of its cgroup figures), its GPU processes (and, for a launcher of
        its own, the launcher), and every known descendant of those (their parent pids, as each process's stat
        said when it was found: DataLoader workers, engine cores, a launcher's ranks). A process a declared
        workload has is not an automatic one's (the declared profile wins); one listed by two automatic
        workloads is the first's. The figures are the previous tick's identities' (one tick of drift, like the
        identity collector's NVML lists). An identity a declared profile takes the place of
        (``attribution.claimed_by_declared``) gets no entry."""
        from headroom.workload.attribution import claimed_by_declared

        if not groups:
            self._auto_done({})
            return ()
        claimed = {pid for w in declared for pid in w.pids}
        names = {w.name for w in declared}
        procs, kids = self._procs, self._kids
        taken: set[int] = set()
        plan: dict[str, tuple[set[int], CgroupStats | None]] = {}
        for g in groups:
            if claimed_by_declared(g, claimed, names):
                continue
            mine, cgroup = plan.get(g.name, (set(), g.cgroup))
            todo = [pid for pid in (*g.members, *g.pids) if pid not in taken]
            while todo:
                pid = todo.pop()
                p = procs.get(pid)
                if pid in taken or p is None or p.starttime < 0 or p.workload is not None:
                    continue
                taken.add(pid)
                mine.add(pid)
                todo.extend(c for c in kids.get(pid, ()) if c not in taken and procs[c].starttime >= p.starttime)
            plan[g.name] = (mine, cgroup)
        out = []
        totals = {}
        for name, (mine, cgroup) in plan.items():
            t = totals[name] = self._auto.get(name) or _Totals()
            last = self._auto_last.get(name)
            if last is not None and not t.busy and cgroup is not None and mine == t.members \
                    and _same_cgroup(cgroup, last.cgroup):
                out.append(last)  # idle, and its cgroup figures have not moved since: its members' neither
                continue
            t.members = mine
            before = t.user + t.system
            entry = self._measure_members(t, name, lambda pids, c=cgroup: c, quiet=True)
            t.busy = t.user + t.system > before
            out.append(share_unchanged(entry, last))
        self._auto_done(totals, taken, out)
        return tuple(out)

    def _auto_done(self, totals: dict[str, _Totals], pids: set[int] | None = None,
                   entries: list[WorkloadProcesses] | None = None) -> None:
        """Keep only this tick's automatic workloads (churn leaks nothing) and close the kept files of processes
        no workload has any more."""
        for pid in self._auto_pids - (pids or set()):
            p = self._procs.get(pid)
            if p is not None and p.workload is None and p.files is not None:
                self._release(p, pid)
        self._auto_pids = pids or set()
        self._auto = totals
        self._auto_last = {w.name: w for w in entries or ()}

    # -- measurement
    def _measure(self, i: int) -> WorkloadProcesses:
        return self._measure_members(self._totals[i], self._profiles[i].name, lambda pids: self._cgroup(i, pids))

    def _measure_members(self, t: _Totals, name: str, cgroup: Callable[..., CgroupStats | None], quiet: bool = False) -> WorkloadProcesses:
        """The WorkloadProcesses of the members in ``t`` (declared or automatic: one measurement for both);
        ``cgroup``: the members' pids -> the cgroup figures of the workload; ``quiet``: no log line when its
        processes come or go (an automatic workload's arrival is logged by the identity collector)."""
        root = self.ctx.paths.procfs
        pids, threads, rss = [], 0, 0
        per_process: dict[int, float] = {}
        rates: dict[int, float] = {}  # cores each member used since the previous tick
        tree: dict[int, tuple[int, str]] = {}  # member pid -> (ppid, comm) this tick, for the rank and worker rule
        now = (self.ctx.monotonic or time.monotonic)()
        for pid in sorted(t.members):
            p = self._procs.get(pid)
            if p is None:
                continue
            files = p.files
            if files is None and self._live and len(self._kept) < OPEN_MEMBER_FILES:
                files = p.files = procfs.PidFiles(root, pid)  # opened at its first read below
                self._kept.add(pid)
            try:
                st = files.stat(self._user_hz) if files is not None else procfs.read_pid_stat(root, pid, self._user_hz)
            except procfs.ProcessGone:
                self._forget(pid)
                continue
            except (OSError, ValueError):
                continue
            if st is None:
                continue
            if st.starttime_ticks != p.starttime:  # the pid was reused since the last listing
                self._forget(pid)
                continue
            user, system = st.utime_seconds, st.stime_seconds
            last_user, last_system = p.cpu or (0.0, 0.0)
            ran = p.cpu is None or user + system > last_user + last_system
            t.user += max(0.0, user - last_user)
            t.system += max(0.0, system - last_system)
            if p.cpu is not None and p.cpu_at is not None and now > p.cpu_at:
                rates[pid] = (user + system - last_user - last_system) / (now - p.cpu_at)
            p.cpu, p.cpu_at = (user, system), now
            per_process[pid] = round(user + system, 2)
            pids.append(pid)
            tree[pid] = (st.ppid, st.comm)
            self._comms[pid] = st.comm
            threads += st.num_threads
            rss += st.rss_pages * PAGE_SIZE
            if not p.io_denied and self._io_real:
                try:
                    io = files.io() if files is not None else procfs.read_pid_io(root, pid)
                except (procfs.ProcessGone, OSError, ValueError):
                    io = None  # it ran until now; its stat still counts
                else:
                    if io is None:
                        p.io_denied = True
                if io is not None:
                    last_read, last_written = p.io or (0, 0)
                    t.read += max(0, io.read_bytes - last_read)
                    t.written += max(0, io.write_bytes - last_written)
                    p.io = (io.read_bytes, io.write_bytes)
                    t.io_seen = True
            # its main thread's run-queue wait (oversubscribed CPUs: its threads wait for one). Read only when the member
            # ran since the last tick: a sleeping one's counters have not moved, and a later read counts what they did
            if ran and not p.sched_denied and self._io_real:
                try:
                    sched = files.schedstat() if files is not None else procfs.read_pid_schedstat(root, pid)
                except (procfs.ProcessGone, OSError, ValueError):
                    sched = None  # its stat was just read: a kernel without the file (ENOENT), or it exited now
                if sched is None:
                    p.sched_denied = True
                else:
                    last_ran, last_waited = p.sched or (sched.run_seconds, sched.wait_seconds)  # a newcomer counts from now
                    t.ran += max(0.0, sched.run_seconds - last_ran)
                    t.waited += max(0.0, sched.wait_seconds - last_waited)
                    p.sched = (sched.run_seconds, sched.wait_seconds)
                    t.sched_seen = True
        if t.had_members is not bool(pids) and not quiet:
            if pids:
                log.info("workload_processes_found", workload=name, processes=len(pids))
            elif t.had_members is not None:
                log.info("workload_processes_gone", workload=name)
            t.had_members = bool(pids)
        main = None
        for pid in pids:
            p = self._procs[pid]
            parent = self._procs.get(p.ppid)
            if p.ppid in tree and parent is not None and parent.starttime <= p.starttime:
                continue
            if main is None or (p.starttime, pid) < (self._procs[main].starttime, main):
                main = pid
        ranks = dataloader_ranks(tree, self._argv_of) if tree else {}
        # the CPUs its main process may run on (a cpuset: Slurm, Kubernetes' static CPU manager, taskset, docker
        # --cpuset-cpus): one syscall, no file. Not for a simulation's stand-ins (this machine's CPUs, not the host's)
        cpus = None
        if main is not None and self._live and self._io_real:
            try:
                cpus = len(os.sched_getaffinity(main))
            except OSError:  # gone since its stat, or denied
                cpus = None
        # each rank's threads, read only while it runs at HOT_CORES or more (a few dozen small reads then, none on
        # a calm tick): is one thread saturated (the GIL), or is the work spread over several?
        threads_of = {r: MappingProxyType(self._thread_seconds(r)) for r in ranks if rates.get(r, 0.0) >= HOT_CORES}
        return WorkloadProcesses(
            name=name,
            pids=tuple(pids),
            threads=threads,
            cpu_user_seconds_total=round(t.user, 2),
            cpu_system_seconds_total=round(t.system, 2),
            resident_memory_bytes=rss,
            read_bytes_total=t.read if t.io_seen else None,
            written_bytes_total=t.written if t.io_seen else None,
            cpus_allowed=cpus,
            sched_run_seconds_total=round(t.ran, 3) if t.sched_seen else None,
            sched_wait_seconds_total=round(t.waited, 3) if t.sched_seen else None,
            main_pid=main,
            ranks=MappingProxyType(ranks),
            cgroup=cgroup(pids),
            process_cpu_seconds=MappingProxyType(per_process),
            rank_thread_cpu_seconds=MappingProxyType(threads_of),
        )

    def _argv_of(self, pid: int) -> tuple[str, ...]:
        """The command line of ``pid`` (its first CMDLINE_MATCH_BYTES) for the rank and worker rule, () when unreadable.
        Kept per process instance and comm (an exec, or PyTorch naming its worker, changes comm), but read again on
        each tick of its first ARGV_SETTLE_SECONDS after discovery: a fork that has not exec'd yet, or a program
        that rewrites its argv as it starts, settles in that time (the first scan's processes are old: settled)."""
        p = self._procs.get(pid)
        starttime = p.starttime if p is not None else -1
        comm = self._comms.get(pid, "")
        known = self._argv.get(pid)
        settled = p is None or self._now - p.found >= ARGV_SETTLE_SECONDS
        if known is not None and known[0] == starttime and known[1] == comm and settled:
            return known[2]
        try:
            argv = tuple(procfs.read_pid_cmdline(self.ctx.paths.procfs, pid, limit=CMDLINE_MATCH_BYTES) or ())
        except (procfs.ProcessGone, OSError, ValueError):
            argv = ()
        self._argv[pid] = (starttime, comm, argv)
        return argv

    def _thread_seconds(self, pid: int) -> dict[int, float]:
        """tid -> user+system CPU seconds of each thread of ``pid`` (/proc/PID/task/TID/stat); {} when unreadable."""
        task = self.ctx.paths.procfs / str(pid) / "task"
        try:
            tids = [int(e.name) for e in os.scandir(task) if e.name.isdigit()]
        except OSError:
            return {}
        out = {}
        for tid in tids:
            try:
                st = procfs.read_pid_stat(task, tid, self._user_hz)
            except (procfs.ProcessGone, OSError, ValueError):
                continue
            if st is not None:
                out[tid] = round(st.utime_seconds + st.stime_seconds, 2)
        return out

    def _cgroup(self, i: int, pids: list[int]) -> CgroupStats | None:
        """The cgroup v2 stats of the cgroup workload ``i`` maps to, or None (no such rule, or not found)."""
        rule = self._rules[i]
        if not rule.needs_cgroup:
            return None
        path = None
        for pid in pids:
            for candidate in self._procs[pid].cgroups:
                path = rule.cgroup_of(candidate)
                if path is not None:
                    break
            if path is not None:
                break
        if path is None and rule.unit:
            path = f"/system.slice/{rule.unit}"
        if path is None:
            return None
        return read_cgroup(self.ctx.paths.sysfs, path)


def _resolved(path: Path) -> Path:
    try:
        return Path(path).resolve()
    except OSError:
        return Path(path)
