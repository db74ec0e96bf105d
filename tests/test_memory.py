"""Process-level memory set-up of `headroom run` (docs/benchmarks.md, "Memory while the window fills")."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import http_get

# threads that each allocate through malloc while all are alive; then glibc's malloc_info lists one <heap> per arena
PROBE = r"""
import ctypes, sys, tempfile, threading
from headroom import daemon
limited = daemon.limit_malloc_arenas() if sys.argv[1] == "limit" else None
barrier, keep = threading.Barrier(5), []
def work():
    keep.append([bytearray(2048) for _ in range(64)])  # above pymalloc's 512 bytes: malloc's
    barrier.wait()
    barrier.wait()
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
barrier.wait()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = (ctypes.c_char_p, ctypes.c_char_p)
libc.malloc_info.argtypes = (ctypes.c_int, ctypes.c_void_p)
libc.fclose.argtypes = (ctypes.c_void_p,)
with tempfile.NamedTemporaryFile(suffix=".xml") as out:
    f = libc.fopen(out.name.encode(), b"w")
    libc.malloc_info(0, f)
    libc.fclose(f)
    heaps = open(out.name).read().count("<heap nr=")
barrier.wait()
print(limited, heaps)
"""


def arenas(mode: str, env: dict[str, str] | None = None) -> tuple[str, int]:
    clean = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=60,
                          env={**clean, **(env or {})})
    assert done.returncode == 0, done.stderr
    limited, heaps = done.stdout.split()
    return limited, int(heaps)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc arenas are glibc's")
def test_the_agent_keeps_one_malloc_arena_for_all_its_threads():
    assert arenas("plain")[1] >= 3  # glibc's default: an arena per allocating thread
    assert arenas("limit") == ("True", 1)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc arenas are glibc's")
def test_a_malloc_arena_max_the_user_set_wins():
    assert arenas("limit", {"MALLOC_ARENA_MAX": "3"}) == ("False", 3)


def glibc_thread_arenas(pid: int) -> int:
    """glibc's per-thread arenas of process ``pid``: 64 MiB-aligned anonymous reservations (HEAP_MAX_SIZE), the
    part in use read-write and the rest PROT_NONE, as /proc/PID/maps lists them."""
    maps = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split()
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        maps.append((lo, hi, parts[1], len(parts) > 5))
    count = 0
    for (lo, hi, perms, named), after in zip(maps, maps[1:] + [None], strict=True):
        if named or lo % (64 << 20) or not perms.startswith("rw"):
            continue
        if after is not None and after[0] == hi and after[2].startswith("---") and not after[3]:
            hi = after[1]
        count += hi - lo == 64 << 20
    return count


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc arenas are glibc's")
def test_headroom_run_allocates_from_one_arena_in_all_its_threads(agent_factory, monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    agent = agent_factory("--simulate", "demo")
    assert http_get(agent.url + "/metrics")[0] == 200  # a tick done: the sampler, collector and HTTP threads ran
    assert int(Path(f"/proc/{agent.proc.pid}/status").read_text().split("Threads:")[1].split()[0]) >= 4
    assert glibc_thread_arenas(agent.proc.pid) == 0


TRIM = r"""
from headroom.daemon import HeapTrim
def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) * 1024
blocks = [bytearray(1000) for _ in range(60_000)]  # malloc's (above pymalloc's 512 bytes), ~60 MB
kept = blocks[::50]  # every 50th stays: the pages between them are free but not at the heap's top
del blocks
before = rss()
HeapTrim()()
print(before, rss())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_the_heap_trim_hands_freed_pages_back():
    done = subprocess.run([sys.executable, "-c", TRIM], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    before, after = (int(x) for x in done.stdout.split())
    assert before - after > 20 * 2**20, (before, after)


def test_the_heap_trim_runs_at_most_once_per_period():
    from headroom.daemon import HeapTrim

    now = [0.0]
    trim = HeapTrim(every=10.0, clock=lambda: now[0])
    calls = []
    trim.trim = calls.append  # the C call, counted
    for t in (0.0, 5.0, 9.9, 10.0, 12.0, 21.0):
        now[0] = t
        trim()
    assert len(calls) == 3  # at 0, 10 and 21 s
