"""New processes found without listing /proc: ``read_last_pid`` (the newest pid the kernel allocated, from
/proc/loadavg) and ``is_thread_group_leader`` (a pid that is a process, not another's thread), both read with one
open and one read each."""

from __future__ import annotations

import os
from pathlib import Path


def read_last_pid(root: Path) -> int | None:
    """The newest pid the kernel allocated (last field of /proc/loadavg), or None when unreadable."""
    try:
        fd = os.open(f"{root}/loadavg", os.O_RDONLY | os.O_CLOEXEC)
        try:
            return int(os.read(fd, 256).split()[4])
        finally:
            os.close(fd)
    except (OSError, ValueError, IndexError):
        return None


def is_thread_group_leader(root: Path, pid: int) -> bool:
    """False when /proc/PID is a thread of another process (its Tgid differs); True when it is a process,
    or when its status cannot be read (then it is examined like a process, as a listing would)."""
    try:
        fd = os.open(f"{root}/{pid}/status", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return True
    try:
        head = os.read(fd, 512)
    except OSError:
        return True
    finally:
        os.close(fd)
    for line in head.split(b"\n"):
        if line.startswith(b"Tgid:"):
            try:
                return int(line.split()[1]) == pid
            except (ValueError, IndexError):
                return True
    return True
