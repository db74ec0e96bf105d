"""Reading configuration files that someone else may have turned hostile.

A configuration path may have become a FIFO (an open that blocks forever), a symlink to
``/dev/zero`` (a read that never ends), a directory or a huge file. ``read_config_bytes`` opens
without blocking, accepts regular files only (symlinks to regular files are fine) and reads at most
``MAX_CONFIG_BYTES``; anything else raises ``FileRefused``, an OSError whose ``strerror`` says why.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path

MAX_CONFIG_BYTES = 1024 * 1024  # config.yaml, each workload drop-in, the web config and its certificates

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class FileRefused(OSError):
    """A path that is not a regular file, or too large to be a configuration file."""


def read_config_bytes(path: str | os.PathLike[str], max_bytes: int = MAX_CONFIG_BYTES) -> bytes:
    """The content of the regular file at path; FileRefused (an OSError) for anything else or
    anything larger than ``max_bytes``; the usual OSError when it cannot be opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
            raise FileRefused(errno.EINVAL, f"is {kind}, not a regular file")
        if st.st_size > max_bytes:
            raise FileRefused(errno.EFBIG, f"is {st.st_size} bytes, more than the {max_bytes} allowed")
        chunks = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, min(65536, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:  # it grew while being read
            raise FileRefused(errno.EFBIG, f"is more than the {max_bytes} bytes allowed")
        return b"".join(chunks)
    finally:
        os.close(fd)


def is_regular_file(path: Path) -> bool:
    """True for a regular file (or a symlink to one); never blocks."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


EXCERPT_CHARS = 32  # at most this much of a value is quoted back in an error message

def clip(text: str, limit: int = 160) -> str:
    """``text`` as it is, or its first ``limit`` characters and how long it was (a message built from what another
    process controls, such as an exception about its file, stays one short line)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


_QUOTED = re.compile(r"""'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*\"""")


def excerpt(value: str, limit: int = EXCERPT_CHARS) -> str:
    """``repr(value)``, or its first ``limit`` characters and its length: an error message about a file
    that turned out to be a secret must not print the secret."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


def shorten_quoted(message: str, limit: int = EXCERPT_CHARS) -> str:
    """``message`` with every quoted value longer than ``limit`` characters cut to an excerpt."""

    def cut(m: re.Match[str]) -> str:
        text = m.group(0)
        if len(text) <= limit + 2:
            return text
        head = text[: limit + 1]
        if (len(head) - len(head.rstrip("\\"))) % 2:  # do not end on half an escape sequence
            head = head[:-1]
        return f"{head}{text[0]}... ({len(text) - 2} characters)"

    return _QUOTED.sub(cut, message)


# ------------------------------------------------------------------ files read on another process's behalf
# A serving launcher's command line (anyone's to write) names its model; the agent, often root, reads the model's
# files as that process would see them: through its root directory (/proc/PID/root), as its user. ``Tree`` walks a
# path itself, one component at a time, through descriptors (openat with O_NOFOLLOW, O_PATH for directories), so
#   - symlinks are resolved inside the tree's root (an absolute target starts again at the root, ``..`` stops
#     there, as the kernel's RESOLVE_IN_ROOT does), at most SYMLINKS of them;
#   - every directory on the way must be searchable and the file readable by the given ``Credentials``, checked
#     on the descriptors actually opened (fstat), never on a path that could be swapped after the check;
#   - the file must be a regular one, opened with O_NONBLOCK (a FIFO never blocks) and read with a size cap;
#   - ``within`` confines a path to a directory (a ``Confine``, or a canonical path): the canonical path of what
#     was opened must lie under it;
#   - a ``deadline`` (time.monotonic()) ends a walk that takes too long (a slow filesystem, a huge directory).
# Refusals are FileRefused (an OSError) whose message says why (the caller names the path), never a file's content.
SYMLINKS = 40  # symlinks followed in one walk: Linux's own limit (MAXSYMLINKS)
PATH_COMPONENTS = 256  # components walked in one path, symlink targets included (PATH_MAX 4096 / 16)

_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2


@dataclass(frozen=True)
class Credentials:
    """Whose permissions a Tree checks: a process's filesystem and real ids, and whether it may read anything.
    A setuid program's real user is the one who started it (and wrote its argv): both must be allowed."""

    uid: int  # filesystem uid (what the kernel checks on open)
    gids: frozenset[int]  # filesystem gid and supplementary groups
    real_uid: int
    real_gids: frozenset[int]
    privileged: bool  # uid 0 with CAP_DAC_OVERRIDE or CAP_DAC_READ_SEARCH, real uid 0 too

    @classmethod
    def from_status(cls, text: str) -> Credentials:
        """From /proc/PID/status (Uid, Gid, Groups, CapEff); ValueError when they are not all there."""
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        try:
            uids = [int(x) for x in fields["Uid"].split()]
            gids = [int(x) for x in fields["Gid"].split()]
            groups = frozenset(int(g) for g in fields.get("Groups", "").split())
            caps = int(fields.get("CapEff", "0").strip() or "0", 16)
        except (KeyError, ValueError) as exc:
            raise ValueError("no Uid, Gid and Groups lines") from exc
        if len(uids) != 4 or len(gids) != 4:
            raise ValueError("Uid and Gid need 4 fields")
        dac = bool(caps & (1 << _CAP_DAC_OVERRIDE | 1 << _CAP_DAC_READ_SEARCH))
        return cls(uid=uids[3], gids=frozenset({gids[3], *groups}), real_uid=uids[0],
                   real_gids=frozenset({gids[0], *groups}), privileged=dac and uids[3] == 0 and uids[0] == 0)

    def allows(self, st: os.stat_result, want: int) -> bool:
        """May both the filesystem and the real identity have ``want`` (4 read, 1 search) on a file so owned?"""
        if self.privileged:
            return True
        return _mode_allows(st, want, self.uid, self.gids) and _mode_allows(st, want, self.real_uid, self.real_gids)


def _mode_allows(st: os.stat_result, want: int, uid: int, gids: frozenset[int]) -> bool:
    if st.st_uid == uid:  # the owner class applies alone, even when group or other would allow more
        return (st.st_mode >> 6) & want == want
    if st.st_gid in gids:
        return (st.st_mode >> 3) & want == want
    return st.st_mode & want == want


@dataclass(frozen=True)
class Opened:
    """A regular file a Tree opened: its descriptor, fstat and canonical path inside the tree."""

    fd: int
    stat: os.stat_result
    path: tuple[str, ...]

    def pread(self, length: int, offset: int = 0) -> bytes:
        """Up to ``length`` bytes at ``offset`` (fewer at the end of the file)."""
        chunks: list[bytes] = []
        size = 0
        while size < length:
            chunk = os.pread(self.fd, min(1 << 20, length - size), offset + size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)


def show(path: tuple[str, ...]) -> str:
    return "/" + "/".join(path)


@dataclass(frozen=True)
class Confine:
    """Where a Tree may open files: under ``directory`` (a canonical path) and, with ``blobs``, a file in a Hugging
    Face cache repository's blobs/ (``.../models--ORG--NAME/blobs/HASH``), where a cache snapshot's and an older
    huggingface_hub ``local_dir``'s weight files link to (what is there is still permission-checked)."""

    directory: tuple[str, ...]
    blobs: bool = False

    def __contains__(self, path: tuple[str, ...]) -> bool:
        if path[: len(self.directory)] == self.directory:
            return True
        return self.blobs and len(path) >= 3 and path[-2] == "blobs" and path[-3].startswith("models--")

    def __str__(self) -> str:
        return show(self.directory)


Within = Confine | tuple[str, ...] | None


def _inside(path: tuple[str, ...], within: Within) -> bool:
    if within is None:
        return True
    if isinstance(within, Confine):
        return path in within
    return path[: len(within)] == within


class Tree:
    """Files as one process sees them: paths resolved under ``root``, permissions checked as ``creds`` (None:
    no checks, the agent's own files). Use as a context manager; each ``open`` returns an ``Opened`` to close."""

    def __init__(self, root: str | os.PathLike[str], creds: Credentials | None = None,
                 deadline: float | None = None) -> None:
        self.creds = creds
        self.deadline = deadline
        self.root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    def close(self) -> None:
        if self.root_fd >= 0:
            os.close(self.root_fd)
            self.root_fd = -1

    def __enter__(self) -> Tree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_time(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise FileRefused(errno.ETIMEDOUT, "took too long to read (a slow filesystem?)")

    def walk(self, path: str | tuple[str, ...], within: Within = None, final: str = "any"
             ) -> tuple[int, tuple[str, ...], os.stat_result]:
        """(an O_PATH descriptor, canonical path, fstat) of what ``path`` names, symlinks resolved inside the root;
        ``final`` "dir" or "file" requires that kind. Every directory passed must be searchable by creds."""
        todo = [c for c in (path.split("/") if isinstance(path, str) else path) if c not in ("", ".")]
        todo.reverse()  # a stack: the next component last
        stack: list[tuple[str, int]] = []  # (name, O_PATH fd) of each directory entered below the root
        links = steps = 0
        cur = self.root_fd
        try:
            self._search(cur)
            while todo:
                steps += 1
                if steps > PATH_COMPONENTS:
                    raise FileRefused(errno.ENAMETOOLONG, f"more than {PATH_COMPONENTS} path components")
                self._check_time()
                name = todo.pop()
                if name == "..":
                    if stack:
                        os.close(stack.pop()[1])
                        cur = stack[-1][1] if stack else self.root_fd
                    continue
                if len(name) > 255 or "\0" in name:
                    raise FileRefused(errno.ENAMETOOLONG, "a path component that is not a file name")
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=cur)
                st = os.fstat(fd)
                if stat.S_ISLNK(st.st_mode):
                    links += 1
                    try:
                        target = os.readlink(name, dir_fd=cur)
                    finally:
                        os.close(fd)
                    if links > SYMLINKS:
                        raise FileRefused(errno.ELOOP, f"more than {SYMLINKS} symlinks")
                    if target.startswith("/"):  # absolute: from the process's root, not ours
                        while stack:
                            os.close(stack.pop()[1])
                        cur = self.root_fd
                    todo.extend(reversed([c for c in target.split("/") if c not in ("", ".")]))
                    continue
                if todo or final == "dir":
                    if not stat.S_ISDIR(st.st_mode):
                        os.close(fd)
                        raise FileRefused(errno.ENOTDIR, f"{show((*[n for n, _ in stack], name))} is not a "
                                                         "directory")  # fmt: skip
                    stack.append((name, fd))
                    cur = fd
                    self._search(fd)
                    continue
                canonical = (*[n for n, _ in stack], name)
                if not _inside(canonical, within):
                    os.close(fd)
                    raise FileRefused(errno.EXDEV, f"leads outside {_shown(within)} (to {show(canonical)}): "
                                                   "not read")  # fmt: skip
                return fd, canonical, st
            # the path named a directory (or the root)
            canonical = tuple(n for n, _ in stack)
            if final == "file":
                raise FileRefused(errno.EISDIR, "is a directory, not a regular file")
            if not _inside(canonical, within):
                raise FileRefused(errno.EXDEV, f"leads outside {_shown(within)}: not read")
            fd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=cur)
            return fd, canonical, os.fstat(fd)
        finally:
            for _, fd in stack:
                os.close(fd)

    def _search(self, fd: int) -> None:
        if self.creds is not None and not self.creds.allows(os.fstat(fd), 1):
            raise FileRefused(errno.EACCES, f"a directory on the way is not searchable by the process's user "
                                            f"(uid {self.creds.uid}): not read on its behalf")  # fmt: skip

    def kind(self, path: str | tuple[str, ...], within: Within = None) -> str:
        """"dir", "file" (a regular file), "other" or "" (missing) for ``path``; refusals raise."""
        try:
            fd, _, st = self.walk(path, within)
        except FileNotFoundError:
            return ""
        os.close(fd)
        return "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"

    def resolve_dir(self, path: str | tuple[str, ...], within: Within = None) -> tuple[str, ...]:
        fd, canonical, _ = self.walk(path, within, final="dir")
        os.close(fd)
        return canonical

    def listdir(self, path: tuple[str, ...], limit: int) -> list[str]:
        """Up to ``limit`` names in the directory (canonical path); refused beyond it."""
        pfd, _, _ = self.walk(path, final="dir")
        try:
            if self.creds is not None and not self.creds.allows(os.fstat(pfd), 4):
                raise FileRefused(errno.EACCES, f"not readable by the process's user (uid {self.creds.uid}): not listed")
            fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=pfd)
        finally:
            os.close(pfd)
        names = []
        with os.scandir(fd) as entries:
            for entry in entries:
                names.append(entry.name)
                if len(names) > limit:
                    break
        os.close(fd)
        if len(names) > limit:
            raise FileRefused(errno.EFBIG, f"more than {limit} entries: not listed")
        return names

    def open(self, path: str | tuple[str, ...], within: Within = None) -> Opened:
        """The regular file at ``path``, opened for reading: never blocks on open, refuses anything but a regular
        file readable by creds (checked on the opened descriptor)."""
        pfd, canonical, _ = self.walk(path, within, final="file")
        try:
            # reopen the very inode walked (not its name again, which may have been swapped since)
            fd = os.open(f"/proc/self/fd/{pfd}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        finally:
            os.close(pfd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
                raise FileRefused(errno.EINVAL, f"is {kind}, not a regular file")
            if self.creds is not None and not self.creds.allows(st, 4):
                raise FileRefused(errno.EACCES, f"not readable by the process's user (uid {self.creds.uid}): "
                                                "not read on its behalf")
        except BaseException:
            os.close(fd)
            raise
        return Opened(fd, st, canonical)

    def read(self, path: str | tuple[str, ...], max_bytes: int, within: Within = None) -> bytes:
        """The whole regular file, at most ``max_bytes`` (FileRefused beyond: the size is not echoed)."""
        f = self.open(path, within)
        try:
            if f.stat.st_size > max_bytes:
                raise FileRefused(errno.EFBIG, f"larger than the {_size(max_bytes)} allowed: not read")
            data = f.pread(max_bytes + 1)
            if len(data) > max_bytes:
                raise FileRefused(errno.EFBIG, f"larger than the {_size(max_bytes)} allowed: not read")
            return data
        finally:
            os.close(f.fd)


def _shown(within: Within) -> str:
    return str(within) if isinstance(within, Confine) else show(within or ())


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n & ((1 << 20) - 1) else f"{n} bytes"
