"""Cost of the processes collector per tick: ``python -m bench.processes [--processes 1000 10000] [--ticks 300]``.

A fixture /proc tree in a temp dir: N processes (stat, cmdline, cgroup, status, io), three declared
workloads of four members each (``cmdline`` rules), and churn: every tick ``--forks`` new pids are
allocated (one in four a thread of an existing process, as interpreters start threads) and as many
processes exit. Each collector ticks on a clock stepped one second per tick, so the 30 s full listing
falls in 1 of 30 ticks. Two ways are measured on the same tree, alternating tick by tick:

- ``listing``: /proc listed every tick (a tree that is not our live procfs; the way before issue 15);
- ``allocated``: the tree carries ``self`` (our pid) and ``loadavg`` (the last pid allocated), so it reads
  as our live procfs and only the pids allocated since the last tick are looked at.

``--real`` measures the same two ways on this host's own /proc (whatever runs here; the process count is
printed). Prints medians with min and max (bench/stats.py), the mean (the full listings included), and
the number of full listings.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.stats import Spread
from headroom import logs
from headroom.simulation import ManualClock
from headroom.sources import Paths, SourceContext
from headroom.sources.processes import ProcessesCollector
from headroom.workload.profiles import profile_from_dict

WORKLOADS = ("trainer", "chat", "embed")
MEMBERS = 4


def _write(root: Path, pid: int, argv: list[str], tgid: int | None = None) -> None:
    d = root / str(pid)
    d.mkdir()
    (d / "stat").write_text(f"{pid} (python3) S 1 {pid} {pid} 0 -1 4194560 10 0 0 0 100 20 0 0 20 0 4 0 "
                            f"{900_000 + pid} 1000000 2000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n")
    (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    (d / "cgroup").write_text("0::/user.slice/user-1000.slice/session-3.scope\n")
    (d / "status").write_text(f"Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{tgid or pid}\n"
                              f"Pid:\t{pid}\nPPid:\t1\nUid:\t1000\t1000\t1000\t1000\n")
    (d / "io").write_text("rchar: 0\nwchar: 0\nsyscr: 0\nsyscw: 0\nread_bytes: 4096\nwrite_bytes: 0\n"
                          "cancelled_write_bytes: 0\n")


def _profiles() -> tuple:
    return tuple(profile_from_dict({"name": n, "kind": "inference", "match": {"cmdline": f"bench-{n}"}})
                 for n in WORKLOADS)


def _collector(procfs: Path, clock: ManualClock) -> ProcessesCollector:
    return ProcessesCollector(SourceContext(paths=Paths(procfs=procfs), workloads=_profiles(), monotonic=clock))


def fixture(processes: int, ticks: int, forks: int) -> dict[str, tuple[Spread, float, int]]:
    """{way: (collect() spread in ms, mean ms, full listings)} on a fixture tree of ``processes``."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        trees = {"listing": base / "listing", "allocated": base / "allocated"}
        for tree in trees.values():
            tree.mkdir()
        pid = 1000
        members = [(w, i) for w in WORKLOADS for i in range(MEMBERS)]
        live: list[int] = []
        for n in range(processes):
            argv = (["python3", f"bench-{members[n][0]}.py", str(members[n][1])] if n < len(members)
                    else ["python3", "-m", "some.service", f"--id={n}"])
            for tree in trees.values():
                _write(tree, pid, argv)
            if n >= len(members):
                live.append(pid)
            pid += 1
        os.symlink(str(os.getpid()), trees["allocated"] / "self")
        clock = ManualClock(1000.0)
        cs = {way: _collector(tree, clock) for way, tree in trees.items()}
        times: dict[str, list[float]] = {way: [] for way in trees}

        def loadavg() -> None:
            (trees["allocated"] / "loadavg").write_text(f"0.50 0.40 0.30 3/{processes} {pid - 1}\n")

        loadavg()
        for c in cs.values():
            c.collect()  # the first tick lists /proc in both ways
        for tick in range(ticks):
            for k in range(forks):  # new pids: processes, and one in four a thread of an existing one
                thread_of = live[-1] if k % 4 == 3 else None
                for tree in trees.values():
                    _write(tree, pid, ["python3", "-m", "some.worker"], tgid=thread_of)
                if thread_of is None:
                    live.append(pid)
                pid += 1
                gone = live.pop(0)
                for tree in trees.values():
                    shutil.rmtree(tree / str(gone))
            loadavg()
            clock.advance(1.0)
            for way in (("listing", "allocated") if tick % 2 else ("allocated", "listing")):
                t0 = time.perf_counter()
                sample = cs[way].collect()
                times[way].append(time.perf_counter() - t0)
                assert [len(w.pids) for w in sample.workloads] == [MEMBERS] * len(WORKLOADS), way
        return {way: (Spread.of(t).scaled(1e3), statistics.fmean(t) * 1e3, cs[way].listings)
                for way, t in times.items()}


def real(ticks: int) -> tuple[int, dict[str, tuple[Spread, float, int]]]:
    """The two ways on this host's /proc (the ``listing`` way with the live check switched off)."""
    clock = ManualClock(1000.0)
    cs = {"listing": _collector(Path("/proc"), clock), "allocated": _collector(Path("/proc"), clock)}
    cs["listing"]._live = False  # what a tree that is not our live procfs gets: a listing every tick
    times: dict[str, list[float]] = {way: [] for way in cs}
    for c in cs.values():
        c.collect()
    for tick in range(ticks):
        clock.advance(1.0)
        time.sleep(0.05)  # let the host fork a little, as between real ticks
        for way in (("listing", "allocated") if tick % 2 else ("allocated", "listing")):
            t0 = time.perf_counter()
            cs[way].collect()
            times[way].append(time.perf_counter() - t0)
    count = sum(1 for e in os.scandir("/proc") if e.name.isdigit())
    return count, {way: (Spread.of(t).scaled(1e3), statistics.fmean(t) * 1e3, cs[way].listings)
                   for way, t in times.items()}


def _line(label: str, result: dict[str, tuple[Spread, float, int]], ticks: int) -> str:
    out = [label]
    for way, (spread, mean, listings) in result.items():
        out.append(f"  {way:9s} collect median {spread.median:.3f} ms (min {spread.low:.3f}, max {spread.high:.3f}), "
                   f"mean {mean:.3f} ms, {listings} full listings in {ticks + 1} ticks")
    before, after = result["listing"][0].median, result["allocated"][0].median
    out.append(f"  ratio listing / allocated (medians): {before / after:.1f}x")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, nargs="+", default=[1000, 10000])
    p.add_argument("--ticks", type=int, default=300)
    p.add_argument("--forks", type=int, default=4, help="pids allocated (and processes exiting) per tick")
    p.add_argument("--real", action="store_true", help="also measure on this host's /proc")
    args = p.parse_args()
    logs.configure("warn", "console")
    for n in args.processes:
        print(_line(f"fixture tree, {n} processes, 3 workloads x {MEMBERS} members, {args.forks} new pids per tick, "
                    f"{args.ticks} ticks:", fixture(n, args.ticks, args.forks), args.ticks))
    if args.real:
        count, result = real(args.ticks)
        print(_line(f"this host's /proc ({count} processes now), 3 workloads (no members), {args.ticks} ticks:",
                    result, args.ticks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
