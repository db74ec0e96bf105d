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
from pathlib import Path
from typing import Any

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

    def cut(m: Any) -> str:
        text = m.group(0)
        if len(text) <= limit + 2:
            return text
        head = text[: limit + 1]
        if (len(head) - len(head.rstrip("\\"))) % 2:  # do not end on half an escape sequence
            head = head[:-1]
        return f"{head}{text[0]}... ({len(text) - 2} characters)"

    return _QUOTED.sub(cut, message)
