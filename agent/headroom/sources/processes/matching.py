"""A workload profile's ``match:`` rules, applied to one process: ``Rule`` (one profile's static rules: cmdline,
exe, systemd_unit, cgroup, container_id, user/uid) and ``Matcher`` (a list of them, and what of a process they
need read: the one matching code path of the processes collector and of the serving collector's endpoint
detection). ``cmdline`` is RE2 over the first CMDLINE_MATCH_BYTES of the argv."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from headroom.sources import procfs
from headroom.workload.profiles import compile_cmdline_pattern

if TYPE_CHECKING:
    from headroom.workload.profiles.types import ProcessMatch

log = structlog.get_logger("headroom.sources.processes")

CMDLINE_MATCH_BYTES = 4096  # the prefix of /proc/PID/cmdline that cmdline and exe rules see


class Rule:
    """The static match rules of one workload profile (everything but the pid file)."""

    def __init__(self, match: ProcessMatch) -> None:
        self.cmdline = compile_cmdline_pattern(match.cmdline) if match.cmdline else None
        self.exe: str | None = match.exe
        self.uid: int | None = match.uid
        self.restricted = match.uid is not None or match.user is not None
        self.others = any((match.cmdline, match.exe, match.systemd_unit, match.cgroup, match.container_id,
                           match.pid_file))
        if match.user is not None:
            import pwd

            try:
                uid = pwd.getpwnam(match.user).pw_uid
            except KeyError:
                log.warning("workload_user_unknown", user=match.user, effect="the user rule matches no process")
                uid = -1
            if self.uid is not None and self.uid != uid:
                uid = -1  # user and uid name two users: nothing can match both
            self.uid = uid
        unit = match.systemd_unit
        self.unit: str | None = unit if not unit or "." in unit else f"{unit}.service"
        self.cgroup: str | None = match.cgroup
        self.container_id: str | None = match.container_id
        self.pid_file: str | None = match.pid_file

    @property
    def needs_cmdline(self) -> bool:
        return self.cmdline is not None or self.exe is not None

    @property
    def needs_cgroup(self) -> bool:
        return bool(self.unit or self.cgroup or self.container_id)

    def allows(self, uid: int | None) -> bool:
        """False when a user/uid rule excludes a process of this real uid (None: unreadable)."""
        return not self.restricted or (uid is not None and uid == self.uid)

    def matches(self, comm: str, argv: list[str], cgroup_paths: Iterable[str], uid: int | None = None) -> bool:
        """True when any static rule matches this process (argv may be [] and paths () when unreadable)
        and a user/uid rule, if any, allows it; ``argv`` holds at most CMDLINE_MATCH_BYTES."""
        if not self.allows(uid):
            return False
        if self.restricted and not self.others:
            return True
        if self.cmdline is not None and argv and self.cmdline.search(" ".join(argv)[:CMDLINE_MATCH_BYTES]):
            return True
        if self.exe is not None and (comm == self.exe[:15] or (argv and os.path.basename(argv[0]) == self.exe)):
            return True
        if self.needs_cgroup:
            for path in cgroup_paths:
                if self.cgroup_of(path) is not None:
                    return True
        return False

    def cgroup_of(self, path: str) -> str | None:
        """The cgroup (a prefix of ``path``) that this rule maps the process to, or None when none does."""
        parts = path.split("/")
        if self.unit and self.unit in parts:
            return "/".join(parts[: parts.index(self.unit) + 1]) or "/"
        if self.container_id:
            for i, part in enumerate(parts):
                if self.container_id in part:
                    return "/".join(parts[: i + 1])
        if self.cgroup:
            for i in range(2, len(parts) + 1):
                prefix = "/".join(parts[:i])
                if fnmatch.fnmatchcase(prefix, self.cgroup):
                    return prefix
        return None


class Matcher:
    """The static rules of a list of ``match:`` blocks and what of a process they need read: the one
    matching code path of this collector and of the serving collector's endpoint detection
    (sources/serving/discovery.py). ``cmdline`` is RE2 over the first CMDLINE_MATCH_BYTES of the argv; ``user`` /
    ``uid`` compare the real uid of /proc/PID/status."""

    def __init__(self, matches: Iterable[ProcessMatch]) -> None:
        self.rules = [Rule(m) for m in matches]
        self.needs_cmdline = any(r.needs_cmdline for r in self.rules)
        self.needs_cgroup = any(r.needs_cgroup for r in self.rules)
        self.needs_uid = any(r.restricted for r in self.rules)
        self.needs_comm = any(r.exe is not None for r in self.rules)  # an exec changes comm: read it again

    def read(self, root: Path, pid: int) -> tuple[list[str], tuple[str, ...], int | None]:
        """(argv: at most its first CMDLINE_MATCH_BYTES, cgroup paths: unified first, real uid) of ``pid``, each
        only when a rule needs it; all empty when one is unreadable; ProcessGone when the pid vanished."""
        try:
            argv = (procfs.read_pid_cmdline(root, pid, limit=CMDLINE_MATCH_BYTES) or []) if self.needs_cmdline else []
            groups = procfs.read_pid_cgroup(root, pid) if self.needs_cgroup else None
            status = procfs.read_pid_status(root, pid) if self.needs_uid else None
        except (OSError, ValueError):
            return [], (), None
        paths: tuple[str, ...] = ()
        if groups is not None:
            paths = tuple(dict.fromkeys(
                ([groups.unified] if groups.unified is not None else []) + list(groups.controllers.values())
            ))  # fmt: skip
        return argv, paths, status.uid if status is not None else None

    def matching(self, comm: str, argv: list[str], paths: Iterable[str], uid: int | None) -> frozenset[int]:
        """The indexes of the rules that match this process (what ``read`` returned, and its comm)."""
        return frozenset(i for i, r in enumerate(self.rules) if r.matches(comm, argv, paths, uid))
