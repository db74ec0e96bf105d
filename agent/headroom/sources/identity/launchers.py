"""Launchers: the serving or training launcher (``vllm serve``, ``torchrun`` ...: workload/launchers.py) a GPU
process runs under, from its and its ancestors' command lines (``find_launcher``, ``launcher_step``); whether its
/metrics address may be scraped (``same_network_namespace``, ``is_local_address``, ``ollama_endpoint``); and the
launchers that hold no GPU, found among the processes that start (``_LauncherScan``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from headroom.samples import Launcher
from headroom.sources import procfs
from headroom.workload.launchers import ollama_status_url
from headroom.workload.launchers import parse as parse_launcher

LAUNCHER_DEPTH = 6  # ancestors of a GPU process searched for a launcher (vLLM engine cores, torchrun workers)

CMDLINE_BYTES = 16384  # of a launcher's command line: its flags (a longer one is cut there)

# ------------------------------------------------------------------------------ launchers without a GPU
# A serving or training launcher that holds no GPU (CPU serving, a model still loading, CPU training) is found among
# the processes that start, as the processes collector finds its newcomers (docs/workload-identity.md, "Launchers
# without a GPU"): the command line of each new process is read once, and once more the next tick (a fork that had
# not exec'd yet), never every process every tick
LAUNCHER_READS = 64  # command lines read per tick at most (the first listing of a busy host, a fork storm's
# newcomers: the rest over the next ticks; 20 us to 0.15 ms each, by the host's load)
LAUNCHER_RECHECKS = 1  # looks again at a newcomer that named no launcher (the next tick: fork, then exec)


class _LauncherScan:
    """The processes that started since the last tick whose command line names a launcher (workload/launchers.py).

    On a live procfs of the agent's own pid namespace, /proc/loadavg's last field says which pids the kernel
    allocated since the last tick: only those are looked at (a thread's id is skipped), and /proc is listed on the
    first tick, every FULL_SCAN_SECONDS, and when more than MIN_LISTING_WORTH pids were allocated since (each
    listed process not looked at before has its command line read). Elsewhere (a fixture tree, another
    namespace's /proc) /proc is listed every tick, as the processes collector does; in a simulation only its
    stand-ins are looked at (``allowed``: no listing). A newcomer that names no launcher is looked at
    LAUNCHER_RECHECKS more times, at the next tick; at most LAUNCHER_READS command lines a tick. ``found()``
    answers each launcher's pid once."""

    def __init__(self, root: Path, live: bool) -> None:
        self.root = root
        self.live = live
        self._last_pid: int | None = None
        self._listed_at: float | None = None
        self._seen: dict[int, int] = {}  # pid -> /proc/PID inode of the processes looked at
        self._pending: dict[int, int] = {}  # pid -> inode, still to look at (over LAUNCHER_READS)
        self._recheck: dict[int, tuple[float, int]] = {}  # pid -> (when it is due another look, looks so far)
        self.reads = 0  # command lines read so far

    def found(self, now: float, allowed: frozenset[int] | None = None) -> list[int]:
        """The pids found to name a launcher since the last call (``allowed``: only these may)."""
        from headroom.sources.processes import FULL_SCAN_SECONDS, MIN_LISTING_WORTH, read_last_pid

        root, seen, pending = self.root, self._seen, self._pending
        last = read_last_pid(root) if self.live and allowed is None else None
        previous, self._last_pid = self._last_pid, last
        if allowed is not None:  # a simulation's stand-ins: nothing else to look for
            for pid in [p for p in seen if p not in allowed]:
                del seen[pid]
            pending.update((pid, -1) for pid in allowed if pid not in seen)
        elif (last is not None and previous is not None and self._listed_at is not None
                and 0 <= now - self._listed_at < FULL_SCAN_SECONDS and 0 <= last - previous <= MIN_LISTING_WORTH):
            from headroom.sources.processes import is_thread_group_leader

            for pid in range(previous + 1, last + 1):
                try:
                    inode = os.stat(f"{root}/{pid}").st_ino
                except OSError:
                    continue  # exited already, or never a process of ours to see
                if is_thread_group_leader(root, pid):
                    pending[pid] = inode
        else:
            try:
                listing = {int(e.name): e.inode() for e in os.scandir(root) if e.name.isdigit()}
            except OSError:
                return []  # the identity collector's own reads say what is wrong with /proc
            self._listed_at = now
            for pid in [p for p in seen if p not in listing]:
                del seen[pid]
                self._recheck.pop(pid, None)
            for pid in [p for p in pending if p not in listing]:
                del pending[pid]
            pending.update((pid, inode) for pid, inode in listing.items() if seen.get(pid) != inode)
        due = [pid for pid, (at, _) in self._recheck.items() if at <= now and pid not in pending]
        out = []
        budget = LAUNCHER_READS
        for pid in [*sorted(pending), *due]:  # the rest wait for the next tick
            if budget <= 0:
                break
            if pid in pending:  # new (or a new process under a reused pid)
                inode, looks = pending.pop(pid), 0
                self._recheck.pop(pid, None)
            else:
                inode, looks = seen.get(pid, -1), self._recheck.pop(pid)[1]
            seen[pid] = inode
            budget -= 1
            self.reads += 1
            try:
                argv = procfs.read_pid_cmdline(root, pid, limit=CMDLINE_BYTES)
            except (procfs.ProcessGone, OSError, ValueError):
                seen.pop(pid, None)
                continue
            if argv and parse_launcher(argv) is not None:
                out.append(pid)
            elif argv is not None and looks < LAUNCHER_RECHECKS and self._scanned and allowed is None:
                # what the first listing found is past its fork and exec; a newcomer is looked at again next tick
                self._recheck[pid] = (now, looks + 1)
        self._scanned = True
        return out

    def forget(self, pid: int) -> None:
        """Look at ``pid`` again at the next listing (a launcher over LAUNCHERS_WITHOUT_GPU)."""
        self._seen.pop(pid, None)

    _scanned = False  # the first listing is done: what it found is old, past its fork and exec


def find_launcher(root: Path, pid: int, step: Callable[[int], tuple[Launcher | None, int] | None] | None = None
                  ) -> tuple[int, Launcher | None]:
    """(pid, Launcher) of the outermost serving or training launcher among ``pid`` and its ancestors (up to
    LAUNCHER_DEPTH): a vLLM engine core or a torchrun worker belongs to the server or launcher above it, and
    a forked child with its parent's command line to the parent. (0, None) when there is none or /proc
    denies the reads. Called once per new GPU process. ``step``: what ``launcher_step`` reads for a pid (the
    collector answers from what it remembers of live ancestors)."""
    found: tuple[int, Launcher | None] = (0, None)
    current = pid
    for _ in range(LAUNCHER_DEPTH):
        if current <= 1:
            break
        got = step(current) if step is not None else launcher_step(root, current)
        if got is None:
            break
        launcher, current_parent = got
        if launcher is not None:
            found = (current, launcher)
        current = current_parent
    return found


def launcher_step(root: Path, pid: int) -> tuple[Launcher | None, int] | None:
    """(the launcher its command line names or None, its parent's pid; 0 when /proc/PID/stat is denied) of one
    process, or None when it is gone or unreadable: the search ends there."""
    try:
        argv = procfs.read_pid_cmdline(root, pid, limit=CMDLINE_BYTES)
        stat = procfs.read_pid_stat(root, pid)
    except (procfs.ProcessGone, OSError, ValueError):
        return None
    return (parse_launcher(argv) if argv else None), (stat.ppid if stat is not None else 0)


def same_network_namespace(root: Path, pid: int) -> bool:
    """True when the process shares the agent's network namespace (its loopback is ours); False when it does
    not or that cannot be read (another user's process without CAP_SYS_PTRACE)."""
    try:
        return os.readlink(f"{root}/{pid}/ns/net") == os.readlink("/proc/self/ns/net")
    except OSError:
        return False


def is_local_address(url: str) -> bool:
    """True when the URL's host is an address of this host (loopback, or one a socket can bind here)."""
    import ipaddress
    import socket
    from urllib.parse import urlsplit

    try:
        host = urlsplit(url).hostname or ""
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # a name: resolving it would be a request of its own
    if address.is_loopback:
        return True
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))  # only an address of this host's interfaces binds
    except OSError:
        return False
    return True


CMDLINE_BYTES = 16384  # of a launcher's command line: its flags (a longer one is cut there)


def ollama_endpoint(procfs_root: Path, pid: int, launcher: Launcher) -> Launcher:
    """``ollama serve``'s launcher with its /api/ps where its environment's OLLAMA_HOST puts it (read once, for a new
    launcher; workload/launchers.ollama_status_url applies Ollama's own rule), or with none and the reason when that
    environment is closed to the agent (another user's process: its address is unknown, not the default)."""
    try:
        with open(procfs_root / str(pid) / "environ", "rb") as f:
            data = f.read(256 * 1024)
    except OSError:
        return replace(launcher, metrics_url="", problems=(
            *launcher.problems, "its environment (OLLAMA_HOST) is closed to the agent: its /api/ps is not read; a "
            "profile with endpoint: reads it"))
    value = next((item.partition(b"=")[2] for item in data.split(b"\0") if item.startswith(b"OLLAMA_HOST=")), None)
    url, problem = ollama_status_url(value.decode("utf-8", "replace") if value is not None else None)
    return replace(launcher, metrics_url=url, problems=(*launcher.problems, problem) if problem else launcher.problems)
