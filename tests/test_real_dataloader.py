"""Real PyTorch DataLoader workers found by the processes collector (issue 25), on this machine's /proc.

A real ``torch.utils.data.DataLoader`` (torch from the real-components venv: ``$HEADROOM_REAL_VENV``, else
``.venv-real`` at the repository root, made by tests/install-real-python.sh) iterates a slow dataset with
``num_workers`` 2 under each start method (fork, spawn, forkserver), with 0, and under ``torchrun
--nproc_per_node=2``; the collector's ranks and workers must be the ones /proc shows: the rank's children that
PyTorch names ``pt_data_worker`` (a forkserver's are the rank's grandchildren), never multiprocessing's resource
tracker or the forkserver itself, and under torchrun the launcher's children are the ranks, each with its own.

Without the venv (or torch in it) every test here skips with the reason; with HEADROOM_REQUIRE_REAL=1 (CI) it
fails instead. Cost: about 10 s per case on 2 idle cores (a spawned worker imports torch before it is named),
more under load; each waits at most REAL_DEADLINE_SECONDS.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headroom.sources import Paths, SourceContext
from headroom.sources.processes import ProcessesCollector
from headroom.workload.attribution import attribute
from headroom.workload.launchers import DATALOADER_WORKER_COMM
from headroom.workload.profiles import profile_from_dict

from real_vllm import real_venv, unavailable

REAL_DEADLINE_SECONDS = 240.0  # for the workers to be found (torch imports take long on a loaded 2-core machine)


SCRIPT = '''
import os, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self):
        return 10 ** 6
    def __getitem__(self, i):
        end = time.monotonic() + 0.005  # a deliberately slow transform
        while time.monotonic() < end:
            pass
        return torch.zeros(4)

if __name__ == "__main__":
    marker, workers, method, stop = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    loader = DataLoader(Slow(), batch_size=4, num_workers=workers, persistent_workers=workers > 0,
                        multiprocessing_context=None if method == "default" or not workers else method)
    deadline = time.monotonic() + 600
    for _ in loader:
        if os.path.exists(stop) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
'''


@pytest.fixture(scope="module")
def real_python() -> Path:
    """The real venv's python (an absolute path: the jobs run in their own directory), with torch importable;
    skips (fails under HEADROOM_REQUIRE_REAL=1) otherwise."""
    return real_venv("torch")


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and _ppid(int(entry.name)) == pid:
            out.append(int(entry.name))
    return sorted(out)


def _run(tmp_path: Path, argv: list[str], marker: str, want: dict, ranks_under: int | None = None):
    """Start ``argv``, collect until the workload's ranks hold the wanted number of named workers each
    (``want``: rank count and workers per rank), and return (the process, the last WorkloadProcesses)."""
    stop = tmp_path / "stop"
    log = (tmp_path / "run.log").open("w")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    profile = profile_from_dict({"name": "trainer", "kind": "training", "dataloader_workers": 4,
                                 "match": {"cmdline": marker}})
    collector = ProcessesCollector(SourceContext(paths=Paths(procfs=Path("/proc"), sysfs=Path("/sys"),
                                                             rootfs=Path("/")), workloads=(profile,)))
    deadline = time.monotonic() + REAL_DEADLINE_SECONDS
    w = None
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            (w,) = collector.collect().workloads
            ranks = dict(w.ranks)
            if (len(ranks) == want["ranks"] and all(len(ws) == want["workers"] for ws in ranks.values())
                    and all(_comm(p) == DATALOADER_WORKER_COMM for ws in ranks.values() for p in ws)):
                return proc, w, profile, stop
            time.sleep(0.5)
        log.flush()
        pytest.fail(f"{argv[:4]}: ranks {dict(w.ranks) if w else None} never became {want} in "
                    f"{REAL_DEADLINE_SECONDS:.0f} s (exit {proc.poll()}); its output:\n"
                    f"{(tmp_path / 'run.log').read_text()[-3000:]}")
    except BaseException:
        stop.touch()
        proc.kill()
        proc.wait(30)
        raise


def _finish(proc: subprocess.Popen, stop: Path) -> None:
    stop.touch()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


@pytest.mark.parametrize(("method", "workers"), [("fork", 2), ("spawn", 2), ("forkserver", 2), ("default", 0)])
def test_a_real_dataloaders_workers_are_found_under_their_rank(tmp_path, real_python, method, workers):
    script = tmp_path / "train_real_dl.py"
    script.write_text(SCRIPT)
    marker = f"headroom-real-dl-{os.getpid()}-{method}"
    proc, w, profile, stop = _run(tmp_path, [str(real_python), str(script), marker, str(workers), method,
                                             str(tmp_path / "stop")], marker, {"ranks": 1, "workers": workers})
    try:
        (found,) = dict(w.ranks).items()
        rank, pids = found
        assert rank == proc.pid  # no launcher: the main process is the rank
        for pid in pids:
            assert _comm(pid) == DATALOADER_WORKER_COMM
            # fork and spawn: the rank's children; forkserver: children of the rank's forkserver
            parent = _ppid(pid)
            assert parent == rank or (method == "forkserver" and _ppid(parent) == rank), (pid, parent)
        others = [c for c in _children(rank) if c not in pids]
        if method in ("spawn", "forkserver"):  # the resource tracker (and the forkserver) run beside the workers
            assert others and all(_comm(c) != DATALOADER_WORKER_COMM for c in others), others
        (st,) = attribute(_sample(w), [profile])
        assert st.dataloader_workers == workers
        assert st.dataloader_workers_problem == (
            f"the profile declares dataloader_workers 4 (per rank) but {workers} run under its 1 rank "
            f"(pid {rank} {workers}); the measured count is used")
    finally:
        _finish(proc, stop)


def test_under_a_real_torchrun_each_rank_counts_its_own_workers(tmp_path, real_python):
    torchrun = real_python.parent / "torchrun"
    if not torchrun.exists():
        unavailable(f"no torchrun in {real_python.parent}")
    script = tmp_path / "train_real_dl.py"
    script.write_text(SCRIPT)
    marker = f"headroom-real-torchrun-{os.getpid()}"
    argv = [str(torchrun), "--standalone", "--nproc_per_node=2", str(script), marker, "2", "fork",
            str(tmp_path / "stop")]
    proc, w, _profile, stop = _run(tmp_path, argv, marker, {"ranks": 2, "workers": 2})
    try:
        ranks = dict(w.ranks)
        assert w.main_pid == proc.pid and set(ranks) == set(_children(proc.pid))  # torchrun's children
        assert w.dataloader_workers == 4 and len({p for ws in ranks.values() for p in ws}) == 4
        for rank, pids in ranks.items():
            assert all(_ppid(p) == rank for p in pids)
    finally:
        _finish(proc, stop)


def _sample(w):
    from headroom.samples import ProcessesSample, Sample, SourceResult

    return Sample(timestamp=time.time(), monotonic=time.monotonic(),
                  sources={"processes": SourceResult("processes", True, 0.001, ProcessesSample(workloads=(w,)))})


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
