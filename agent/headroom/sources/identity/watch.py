"""The identity collector's watch over its GPU processes and their ancestors (a mixin of ``IdentityCollector``,
whose ``__init__`` sets this state): each process read once while it lives, through a pidfd on the live procfs of
the agent's own pid namespace (one poll a tick says which exited; a reused pid is a new process), elsewhere by
/proc/PID's inode; and the ancestors the launcher search read, remembered while they live.
"""

from __future__ import annotations

import os
import select
from typing import TYPE_CHECKING

from headroom.sources.identity.launchers import launcher_step

if TYPE_CHECKING:
    from headroom.samples import Launcher
    from headroom.sources import SourceContext
    from headroom.sources.identity.containers import ContainerMeta
    from headroom.sources.identity.groups import _Pid

# pidfds kept: GPU processes and their remembered ancestors together (a descriptor each; with the cgroup files,
# 256 + 512 stay under the usual limit of 1 024); more GPU processes are checked by /proc/PID's inode each tick
WATCHED_PIDS = 256
ANCESTORS = 64  # of those, live ancestors of GPU processes remembered for the launcher search


class _PidWatch:
    """The GPU processes (``_pids``) and the launcher search's ancestors (``_ancestors``) the collector knows,
    each watched through a pidfd where it can be."""

    ctx: SourceContext
    _pids: dict[int, _Pid]
    _touched: set[int]  # pids read or forgotten since the groups were last brought up to date
    _meta: dict[str, ContainerMeta | None]  # container ID -> names, while a GPU process of it lives
    _containers: dict[str, int]  # container ID -> its GPU processes known
    _watch: select.poll | None
    _by_fd: dict[int, int]  # pidfd -> pid
    _watched: set[int]
    _ancestors: dict[int, tuple[int, Launcher | None, int]]  # pid -> (pidfd, launcher, parent pid); LRU first
    _ancestor_fds: dict[int, int]  # pidfd -> pid
    _without_gpu: dict[int, None]  # launchers holding no GPU, followed like GPU processes

    def _read(self, pid: int, inode: int, pidfd: int) -> _Pid:
        """A new GPU process read (the collector's)."""
        raise NotImplementedError

    def _forget(self, pid: int) -> None:
        known = self._pids.pop(pid, None)
        if known is not None:
            self._touched.add(pid)
            cid = known.identity.container_id if known.identity is not None and not known.identity.delegated else ""
            if cid and self._containers.get(cid, 0) <= 1:  # its container's last GPU process: its names go
                self._containers.pop(cid, None)
                self._meta.pop(cid, None)
            elif cid:
                self._containers[cid] -= 1
        if known is not None and known.pidfd >= 0:
            self._by_fd.pop(known.pidfd, None)
            self._watched.discard(pid)
            assert self._watch is not None
            self._watch.unregister(known.pidfd)
            os.close(known.pidfd)

    def _exited(self) -> None:
        """Forget the watched processes that exited since the last tick (their pidfds are readable)."""
        if self._by_fd or self._ancestor_fds:
            for fd, _ in self._watch.poll(0):  # type: ignore[union-attr]
                pid = self._by_fd.get(fd)
                if pid is not None:
                    self._forget(pid)
                    self._without_gpu.pop(pid, None)  # ended
                    continue
                pid = self._ancestor_fds.get(fd)
                if pid is not None:
                    self._drop_ancestor(pid)
                    for child in [c for c, (_, _, parent) in self._ancestors.items() if parent == pid]:
                        self._drop_ancestor(child)  # reparented: its parent is read again when asked

    def _drop_ancestor(self, pid: int) -> None:
        fd = self._ancestors.pop(pid)[0]
        del self._ancestor_fds[fd]
        self._watch.unregister(fd)  # type: ignore[union-attr]
        os.close(fd)

    def _ancestor(self, pid: int) -> tuple[Launcher | None, int] | None:
        """``launcher_step`` of a GPU process's ancestor, read once while it lives (a live procfs)."""
        known = self._ancestors.get(pid)
        if known is not None:
            self._ancestors[pid] = self._ancestors.pop(pid)  # most recently used
            return known[1], known[2]
        root = self.ctx.paths.procfs
        fd = -1
        if self._watch is not None and len(self._by_fd) + len(self._ancestors) < WATCHED_PIDS:
            try:
                fd = os.pidfd_open(pid)  # before the reads: what they read is this process's if it still runs
            except OSError:
                fd = -1
        got = launcher_step(root, pid)
        if fd < 0:
            return got
        if got is None or select.select((fd,), (), (), 0)[0]:
            os.close(fd)
            return got
        if len(self._ancestors) >= ANCESTORS:
            self._drop_ancestor(next(iter(self._ancestors)))
        self._ancestors[pid] = (fd, got[0], got[1])
        self._ancestor_fds[fd] = pid
        self._watch.register(fd, select.POLLIN)  # type: ignore[union-attr]
        return got

    def _known(self, pid: int) -> _Pid | None:
        """The process's identity (read when it is new to the collector); None when it is gone."""
        known = self._pids.get(pid)
        if known is not None and known.pidfd >= 0:
            return known  # alive: its pidfd was not readable at this tick's poll
        root = self.ctx.paths.procfs
        pidfd = -1
        if known is None and self._watch is not None and len(self._by_fd) + len(self._ancestors) < WATCHED_PIDS:
            try:
                pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                self._without_gpu.pop(pid, None)
                return None
            except OSError:
                pass  # not a thread group leader, out of descriptors, or no pidfds here: its inode is checked
            # (one that exited already, a zombie, is read and included, as /proc/PID still shows it: the next
            # tick's poll says it exited)
        inode = -1
        if pidfd < 0:
            try:
                inode = os.stat(f"{root}/{pid}").st_ino  # a string: a Path per GPU process per tick costs more
            except OSError:
                self._forget(pid)
                self._without_gpu.pop(pid, None)
                return None
            if known is not None and known.inode == inode:
                return known
            self._forget(pid)
        known = self._pids[pid] = self._read(pid, inode, pidfd)
        self._touched.add(pid)
        if pidfd >= 0:
            self._by_fd[pidfd] = pid
            self._watched.add(pid)
            self._watch.register(pidfd, select.POLLIN)  # type: ignore[union-attr]
        return known
