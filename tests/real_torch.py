"""Harness for the real-PyTorch tests (issue 25): a small DDP trainer under the real `torchrun`.

- `TRAIN_SCRIPT`: the trainer (written to a file by `torchrun_job`): a tiny model (two Linear layers) under
  DistributedDataParallel with the gloo backend on CPU, a DataLoader over a dataset whose transform burns
  `--item-ms` of CPU per item in pure Python (it holds the GIL: with 0 workers it runs in the rank's main thread),
  and a stand-in for the GPU step: each step sleeps `--step-ms` (the GPU computing; the CPU idle), as a real
  trainer waits on its CUDA stream. Each rank writes its pid to `<pid-dir>/rank<RANK>.pid` once its DataLoader's
  workers run (the first batch is in hand), and runs `--seconds` or until killed.
- `torchrun_job(workdir, nproc, workers, ...)`: a context manager that starts `<venv>/bin/torchrun
  --nproc_per_node=N train.py ...` in its own session, waits for every rank's pid file (up to
  `TORCHRUN_START_TIMEOUT` s), yields a `Job` (the torchrun pid, the ranks' pids, the pid-file glob, the log), and
  kills the whole process group on exit.
- `proc_figures(pids)`: what /proc says of a set of processes now (threads, RSS, user and system CPU seconds),
  the figures the agent's workload series are compared with.
- `tree(pid)`: a process's descendants from /proc (pid -> ppid), to find each rank's DataLoader workers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from real_vllm import log_tail, real_env, real_venv

# a torchrun start: the ranks import torch (2-5 s each on 2 idle cores, 20-40 s on a loaded machine) and start
# their workers
TORCHRUN_START_TIMEOUT = 240.0
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

TRAIN_SCRIPT = r'''
import argparse, os, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

ap = argparse.ArgumentParser()
ap.add_argument("--workers", type=int, required=True)
ap.add_argument("--item-ms", type=float, required=True)
ap.add_argument("--step-ms", type=float, required=True)
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--seconds", type=float, default=300)
ap.add_argument("--pid-dir", required=True)
a = ap.parse_args()


class Slow(Dataset):
    """A dataset whose transform costs CPU: pure Python, so it holds the GIL where it runs."""

    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        end = time.thread_time() + a.item_ms / 1000.0
        x = i
        while time.thread_time() < end:  # CPU time, not wall time: the cost stays the same under contention
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        return torch.full((16,), float(x % 7)), torch.tensor(float(i % 2))


torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = Slow()
loader = DataLoader(data, batch_size=a.batch, num_workers=a.workers, sampler=DistributedSampler(data, shuffle=False),
                    persistent_workers=a.workers > 0, prefetch_factor=2 if a.workers else None)
end = time.monotonic() + a.seconds
started = False
while time.monotonic() < end:
    for x, y in loader:
        if not started:  # the workers run: now the agent may look
            path = os.path.join(a.pid_dir, f"rank{rank}.pid")
            with open(path + ".tmp", "w") as f:
                f.write(f"{os.getpid()}\n")
            os.replace(path + ".tmp", path)
            started = True
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
        loss.backward()  # DDP's all-reduce over gloo
        opt.step()
        time.sleep(a.step_ms / 1000.0)  # the GPU step: the CPU waits
        if time.monotonic() >= end:
            break
dist.destroy_process_group()
'''


@dataclass
class Job:
    torchrun_pid: int
    rank_pids: dict[int, int]  # rank -> pid
    pid_glob: str
    log: Path
    script: Path
    argv: list[str] = field(default_factory=list)


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def tree(pid: int) -> dict[int, int]:
    """pid -> parent pid of every live descendant of `pid` (not `pid` itself)."""
    out, todo = {}, [pid]
    while todo:
        parent = todo.pop()
        for child in _children(parent):
            if child not in out:
                out[child] = parent
                todo.append(child)
    return out


def proc_figures(pids) -> dict[str, float]:
    """Threads, RSS bytes, user and system CPU seconds of `pids` summed, from /proc/PID/stat now (a process that
    ended meanwhile is left out)."""
    threads = rss = 0
    user = system = 0.0
    for pid in pids:
        try:
            raw = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2:].split()  # after "pid (comm) ": field 3 (state) is fields[0]
        user += int(fields[11]) / CLK_TCK
        system += int(fields[12]) / CLK_TCK
        threads += int(fields[17])
        rss += int(fields[21]) * PAGE
    return {"threads": threads, "rss": rss, "user": user, "system": system}


def cpu_seconds(pid: int) -> float:
    return sum(proc_figures([pid])[k] for k in ("user", "system"))


def _stop(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(10)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):  # workers left in the group
        os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def torchrun_job(workdir: Path, nproc: int, workers: int, item_ms: float, step_ms: float, batch: int = 8,
                 seconds: float = 300, nice: int = 0, marker: str = "") -> Iterator[Job]:
    """The trainer under the real torchrun, `nproc` ranks of `workers` DataLoader workers each; yields a Job once
    every rank has written its pid file. `nice` (root: negative works) lowers or raises the whole job's priority
    (see tests/test_real_torchrun.py for why). `marker` is appended to the script's name, so a test's scenario can
    find its own job by command line."""
    python = real_venv("torch")
    torchrun = python.parent / "torchrun"
    workdir.mkdir(parents=True, exist_ok=True)
    pid_dir = workdir / "pids"
    pid_dir.mkdir(exist_ok=True)
    script = workdir / f"train{marker}.py"
    script.write_text(TRAIN_SCRIPT)
    log = workdir / "torchrun.log"
    argv = [str(torchrun), "--standalone", f"--nproc_per_node={nproc}", str(script), "--workers", str(workers),
            "--item-ms", str(item_ms), "--step-ms", str(step_ms), "--batch", str(batch), "--seconds", str(seconds),
            "--pid-dir", str(pid_dir)]
    if nice:
        argv = ["nice", "-n", str(nice), *argv]
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=real_env(OMP_NUM_THREADS="1"), start_new_session=True, cwd=workdir)
    try:
        deadline = time.monotonic() + TORCHRUN_START_TIMEOUT
        ranks: dict[int, int] = {}
        while len(ranks) < nproc:
            if proc.poll() is not None:
                raise RuntimeError(f"torchrun exited {proc.returncode} before its ranks ran; {log}:\n{log_tail(log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"torchrun's ranks not running after {TORCHRUN_START_TIMEOUT:.0f} s; "
                                   f"{log}:\n{log_tail(log)}")
            for f in pid_dir.glob("rank*.pid"):
                with contextlib.suppress(ValueError, OSError):
                    ranks[int(f.stem[4:])] = int(f.read_text().split()[0])
            time.sleep(0.2)
        # torchrun's pid: `nice` execs it, so the group leader is torchrun itself
        yield Job(torchrun_pid=proc.pid, rank_pids=ranks, pid_glob=str(pid_dir / "rank*.pid"), log=log,
                  script=script, argv=argv)
    finally:
        _stop(proc)
