"""The real PyTorch under the real torchrun (issue 25): an automatic launcher workload measured and judged as a
declared one.

`torchrun --standalone --nproc_per_node=2 train.py` from the real venv (tests/install-real-python.sh) runs a tiny
DDP model (gloo, CPU) whose DataLoader's transform burns CPU per item (tests/real_torch.py). Each rank writes its
pid to a file; the scenario's `attach:` lists rank 0 on simulated GPU 0 and rank 1 on GPU 1 (docs/scenario-format.md,
"attach[]"), as NVML lists a torchrun job's ranks on a GPU host. The agent runs as a user runs it (`headroom run
--config.file ... --simulate SCENARIO`), with no profile: it finds the workload itself (launcher `torchrun`).

Two runs, one agent each (a class-scoped fixture per run, `TestStarved` and `TestFed`, several tests reading it):

- **starved**: `num_workers=0`, 8 items of 10 ms CPU per batch and a 2 ms GPU step: the rank's main thread does all
  the data work and never rests; the GPU (simulated at 10 % busy) waits. Judged `cpu`, from the rank's own
  saturated process, not from the host.
- **fed**: `num_workers=4`, 8 items of 2.5 ms per batch and a 400 ms GPU step: the 4 workers of each rank keep up
  using about 0.05 cores per rank; the GPU is the limit. Meanwhile neighbours (one busy loop per CPU, not the
  job's) saturate the host: the workload must not be blamed for their load (own use, docs/analysis.md).

  The two runs cannot share one pipeline on this 2-core machine: a transform heavy enough to pin a rank's main
  thread (data cost per step >= the step) needs, with workers keeping up, data cost / step cores per rank, i.e. at
  least 2 cores for 2 ranks, the whole machine: the fed run would then rightly be `cpu` (its own saturation).

**The saturation thresholds** (`analysis.thresholds.cpu_saturation_low/high`, default 0.80/0.95 cores) are set from
what a thread that never rests gets on this machine now (`busy_thread_cores()`: two busy loops for 3 s, as the two
ranks): on the shared 2-core CI and development machines (7 sessions) that is 0.2-0.5 cores, so an unchanged 0.8
would never see a saturated thread. low = 0.7 x measured and high = 0.9 x measured, never above the defaults: the
same rule, scaled to the CPU a thread can have here.

**Tolerances.** /proc is read by the test right after a scrape that the agent answered from its last tick (250 ms
ticks, `agent.sample_interval`): processes and threads must match exactly once two successive reads of /proc agree
(DataLoader workers and gloo threads are started before the pid files are written); RSS within 10 % (pages move
while the ranks allocate batches; 10 % of ~300 MiB per rank); CPU seconds within one tick of the job's measured
rate plus the agent's 1 s per-member sampling (`PER_MEMBER_SECONDS`), i.e. rate x 1.25 s + 0.1 s.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headroom.analysis.bottleneck import DEFAULT_THRESHOLDS

import real_torch
from real_agent import LoggedAgent, metrics, one, series, status
from real_torch import proc_figures, tree

SAMPLE_INTERVAL = 0.25  # the agent's tick in these tests (seconds)
PER_MEMBER_SECONDS = 1.0  # the agent samples each member's CPU at most this often (processes collector)
RSS_TOLERANCE = 0.10
FIND_TIMEOUT = 60.0  # the workload found and measured after the ranks run
VERDICT_TIMEOUT = 60.0  # a verdict confirmed (short window 4 s, hold 1 s) on a loaded machine
FED_OBSERVE_SECONDS = 15.0  # how long the fed run is watched for a wrong cpu verdict
BURN = "while True:\n    pass\n"

SCENARIO = """\
description: two simulated GPUs waiting for their input, one torchrun rank on each
gpus:
  - name: NVIDIA H100 80GB HBM3
    memory_total: 80GiB
    power_limit: 700
    power: 150
    utilization: 0.1
  - name: NVIDIA H100 80GB HBM3
    memory_total: 80GiB
    power_limit: 700
    power: 150
    utilization: 0.1
attach:
  - {{pid_file: "{pids}/rank0.pid", gpu: 0, memory: 3GiB, utilization: 0.1}}
  - {{pid_file: "{pids}/rank1.pid", gpu: 1, memory: 3GiB, utilization: 0.1}}
"""


def busy_thread_cores(n: int = 2, seconds: float = 3.0) -> float:
    """The cores a thread that never rests gets on this machine now: the least of `n` busy loops run together."""
    code = ("import time\nt = time.process_time(); w = time.monotonic()\n"
            f"while time.monotonic() - w < {seconds}: pass\nprint((time.process_time() - t) / {seconds})")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(n)]
    return min(float(p.communicate()[0]) for p in procs)


def torchrun_workloads(doc: dict) -> list[dict]:
    return [w for w in doc["workloads"] if w["name"].startswith("torchrun/")]


class Run:
    """One torchrun job and the agent watching it."""

    def __init__(self, job: real_torch.Job, agent: LoggedAgent, workers: int, tmp: Path) -> None:
        self.job, self.agent, self.workers, self.tmp = job, agent, workers, tmp
        self.workload: dict | None = None

    def members(self) -> dict[int, int]:
        """pid -> parent of the job's processes now: torchrun, its ranks, their DataLoader workers (and any
        helper a rank starts, which the agent must count too)."""
        return {self.job.torchrun_pid: 0, **tree(self.job.torchrun_pid)}

    def workers_of(self, rank_pid: int) -> list[int]:
        return [p for p, parent in tree(rank_pid).items() if parent == rank_pid]

    def found(self) -> dict:
        """The job's workload, once the agent lists it with its processes measured."""
        deadline = time.monotonic() + FIND_TIMEOUT
        doc: dict = {}
        while time.monotonic() < deadline:
            doc = status(self.agent)
            mine = torchrun_workloads(doc)
            if len(mine) == 1 and (mine[0].get("measured") or {}).get("processes"):
                return mine[0]
            time.sleep(0.5)
        raise AssertionError(f"no torchrun workload with measured processes after {FIND_TIMEOUT:.0f} s: "
                             f"{[w['name'] for w in doc.get('workloads', [])]}\n{json.dumps(doc, indent=1)[:4000]}")


def _start(tmp_path_factory, workers: int, item_ms: float, step_ms: float, neighbours: bool):
    real_torch.real_venv("torch")  # skips (fails with HEADROOM_REQUIRE_REAL=1) without the real venv
    tmp = tmp_path_factory.mktemp(f"torchrun{workers}")
    busy = busy_thread_cores()
    low = min(0.80, 0.7 * busy)
    high = min(0.95, max(0.9 * busy, low + 0.05))
    marker = f"_{os.getpid()}_{workers}"
    burners = []
    with real_torch.torchrun_job(tmp / "job", nproc=2, workers=workers, item_ms=item_ms, step_ms=step_ms,
                                 marker=marker) as job:
        scenario = tmp / "scenario.yaml"
        scenario.write_text(SCENARIO.format(pids=Path(job.pid_glob).parent))
        cfg = tmp / "config.yaml"
        cfg.write_text(f"""\
agent:
  sample_interval: {int(SAMPLE_INTERVAL * 1000)}ms
analysis:
  short_window: 4s
  long_window: 20s
  hold: 1s
  thresholds:
    cpu_saturation_low: {low:.3f}
    cpu_saturation_high: {high:.3f}
collectors:
  disk:
    enabled: false
""")
        if neighbours:  # not the job's: one busy loop per CPU, in a session of their own
            burners = [subprocess.Popen([sys.executable, "-c", BURN], start_new_session=True)
                       for _ in range(os.cpu_count() or 1)]
        agent = LoggedAgent(tmp / "agent.log", "--config.file", str(cfg), "--simulate", str(scenario))
        try:
            agent.wait_ready(60)
            run = Run(job, agent, workers, tmp)
            run.busy_thread_cores = busy
            run.thresholds = (low, high)
            run.burners = [b.pid for b in burners]
            yield run
        finally:
            agent.stop()
            for b in burners:
                os.kill(b.pid, signal.SIGKILL)
                b.wait()
            print(f"torchrun {workers} workers: a busy thread got {busy:.2f} cores; thresholds {low:.2f}/{high:.2f}; "
                  f"agent log {agent.log}; job log {job.log}", file=sys.stderr)


def _stable_members(run: Run) -> dict[int, int]:
    for _ in range(20):
        a = run.members()
        time.sleep(SAMPLE_INTERVAL * 2)
        b = run.members()
        if a == b:
            return b
    raise AssertionError(f"the job's process tree never held still: {a} / {b}")


def _starved_is_cpu(starved: Run) -> None:
    w = starved.found()
    deadline = time.monotonic() + VERDICT_TIMEOUT
    while time.monotonic() < deadline and w["primary_bottleneck"] != "cpu":
        time.sleep(0.5)
        w = next(iter(torchrun_workloads(status(starved.agent))))
    assert w["primary_bottleneck"] == "cpu", json.dumps(w, indent=1)[:4000]
    evidence = w["evidence"]["cpu"]
    ranks = [str(p) for p in starved.job.rank_pids.values()]
    # the evidence names a rank (its own process or thread at a core), not only the host
    assert any(f"pid {p}" in evidence or f"tid {p}" in evidence for p in ranks), (evidence, ranks)
    assert "saturated" in evidence, evidence
    # and no DataLoader workers are quoted where none run (a declared or guessed count would be; "0" is the measured)
    quoted = {int(n) for n in re.findall(r"(\d+) DataLoader worker", evidence)}
    assert quoted <= {0}, evidence


def _cpu_times() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields), fields[3] + fields[4]  # total, idle + iowait


OWN_USE = re.compile(r"host-wide CPU counts (\d+) %: the workload itself uses ([\d.]+) cores")
OWN_CPU_CORES = DEFAULT_THRESHOLDS["own_cpu_cores"]  # own use from which host-wide CPU signals count in full


def _fed_is_not_cpu(fed: Run) -> None:
    """Not cpu although neighbours saturate the host: the workload itself uses about 0.1-0.3 cores (more on a slower
    machine: the ranks' per-step work is wall-clock bound), so the host's 100 % counts only in proportion to that
    own use (docs/analysis.md, "own use"), and that own use is the job's, as /proc shows it, not the host's."""
    fed.found()
    total0, idle0 = _cpu_times()
    proc0 = _job_cpu_seconds(fed), time.monotonic()
    deadline = time.monotonic() + FED_OBSERVE_SECONDS
    w: dict = {}
    named: set[int] = set()  # the neighbours its status named over the window (the list follows the host's top users)
    owns: list[float] = []
    full: list[str] = []  # polls whose evidence counts host-wide CPU in full (own use at OWN_CPU_CORES or more)
    while time.monotonic() < deadline:
        w = next(iter(torchrun_workloads(status(fed.agent))))
        assert w["primary_bottleneck"] != "cpu", json.dumps(w, indent=1)[:4000]
        if w["measured"]["resident_memory_bytes"] is None:
            # its first tick: the processes collector measures it one tick behind (docs/workload-identity.md), so
            # its own use is not known yet and its score is the host's; the primary above holds all along
            time.sleep(0.5)
            continue
        score, evidence = w["scores"]["cpu"], w["evidence"].get("cpu", "")
        found = OWN_USE.search(evidence)
        # the host is saturated, so host-wide CPU is quoted with the share it counts; absent only when the job
        # itself used OWN_CPU_CORES or more that tick (counted in full: a tick of this poll cannot tell blame from
        # own use; seen on a fast machine where its 8 workers' bursts reached it): counted, most polls must tell
        if not found:
            full.append(f"{score} {evidence}")
            time.sleep(0.5)
            continue
        counts, own = int(found[1]) / 100, float(found[2])
        owns.append(own)
        assert abs(counts - min(1.0, own / OWN_CPU_CORES)) <= 0.02, (counts, own, evidence)
        # nothing else raised it: the workload's own saturation is nil (its workers keep up, no rank at a core)
        assert score <= counts + 0.02, (score, evidence)
        named |= {n["pid"] for n in (w.get("neighbours") or {}).get("cpu", [])}
        time.sleep(0.5)
    proc_cores = (_job_cpu_seconds(fed) - proc0[0]) / (time.monotonic() - proc0[1])
    total1, idle1 = _cpu_times()
    busy = 1 - (idle1 - idle0) / max(total1 - total0, 1)
    assert busy >= 0.9, f"the neighbours did not saturate the host ({busy:.0%} busy): the test proved nothing"
    assert owns, "the workload was never measured while watched"
    assert len(full) <= len(owns), (f"{len(full)} of {len(full) + len(owns)} polls without an own-use share in the "
                                    f"cpu evidence (the job used {OWN_CPU_CORES} cores or more?): {full[:3]}")
    # the own use it was judged by is the job's (the neighbours' 2 cores never count as its own): /proc's rate over
    # the window, within the agent's 1 s per-member sampling and rounding
    mean_own = sum(owns) / len(owns)
    assert abs(mean_own - proc_cores) <= 0.3 * proc_cores + 0.03, (mean_own, proc_cores, owns)
    # who presses on the host is named (the neighbours mechanism), and it is the burners, not the job
    assert named & set(fed.burners), (named, fed.burners, w.get("neighbours"), w["evidence"].get("cpu"))


def _job_cpu_seconds(run: Run) -> float:
    figures = proc_figures(run.members())
    return figures["user"] + figures["system"]


# ------------------------------------------------------------------------------------------------ the tests
class Checks:
    """What holds for both runs (a class-scoped `run` in each subclass: pytest-randomly shuffles the classes and their
    tests, never mixing two classes' tests, so each job starts once and ends before the next starts)."""

    def test_the_job_is_one_automatic_torchrun_workload_on_both_gpus(self, run):
        w = run.found()
        assert w["source"] == "auto", w
        assert w["identity"]["kind"] == "training", w["identity"]
        assert w["name"] == f"torchrun/{run.job.script.name}", w["name"]
        assert sorted(w["gpus"]) == [0, 1] or sorted(str(g) for g in w["gpus"]) == ["0", "1"], w["gpus"]
        m = metrics(run.agent)
        info = series(m, "headroom_workload_info", workload=w["name"])
        assert info and all(dict(k[1]).get("source") == "auto" for k in info), info
        # no profile can be made for a script without a model flag: the status says why (issue 25)
        assert w["expected"]["estimate_error"], w["expected"]

    def test_processes_threads_and_rss_match_proc(self, run):
        run.found()
        members = _stable_members(run)
        time.sleep(SAMPLE_INTERVAL * 3)  # a few ticks on this membership
        w = next(iter(torchrun_workloads(status(run.agent))))
        m = metrics(run.agent)
        truth = proc_figures(members)
        expected_processes = len(members)  # torchrun + 2 ranks + their workers (0 or 4 each)
        assert expected_processes == 3 + 2 * run.workers, members
        assert w["measured"]["processes"] == expected_processes, (w["measured"], members)
        assert one(m, "headroom_workload_processes", workload=w["name"]) == expected_processes
        assert one(m, "headroom_workload_threads", workload=w["name"]) == truth["threads"], truth
        rss = one(m, "headroom_workload_resident_memory_bytes", workload=w["name"])
        assert rss is not None and abs(rss - truth["rss"]) <= RSS_TOLERANCE * truth["rss"], (rss, truth["rss"])

    def test_cpu_seconds_match_proc_within_a_tick(self, run):
        run.found()
        members = _stable_members(run)
        before = proc_figures(members)
        t0 = time.monotonic()
        time.sleep(3.0)
        m = metrics(run.agent)
        after = proc_figures(members)
        elapsed = time.monotonic() - t0
        name = next(iter(torchrun_workloads(status(run.agent))))["name"]
        rate = (after["user"] + after["system"] - before["user"] - before["system"]) / elapsed  # cores, the job's
        slack = rate * (SAMPLE_INTERVAL + PER_MEMBER_SECONDS) + 0.1
        for mode in ("user", "system"):
            got = one(m, "headroom_workload_cpu_seconds_total", workload=name, mode=mode)
            assert got is not None, f"no cpu_seconds_total{{mode={mode}}} for {name}"
            # the agent counts each member from its start (all started before the agent: its whole CPU time) and /proc
            # was read after the scrape: the agent may be behind /proc by a tick and a member sample, never ahead
            assert after[mode] - slack <= got <= after[mode] + 0.05, (mode, got, after[mode], slack)

    def test_dataloader_workers_are_counted_from_the_process_tree(self, run):
        w = run.found()
        members = _stable_members(run)
        per_rank = {rank: len(run.workers_of(pid)) for rank, pid in run.job.rank_pids.items()}
        assert set(per_rank.values()) == {run.workers}, per_rank  # the truth, from /proc
        time.sleep(SAMPLE_INTERVAL * 3)
        got = one(metrics(run.agent), "headroom_workload_dataloader_workers", workload=w["name"])
        # measured: each rank's own workers, summed over the workload's ranks (the workers helper's rule,
        # docs/workload-identity.md: 0 and 8 here); not torchrun's children (the 2 ranks), not absent for an automatic
        # workload
        assert got == sum(per_rank.values()), (got, per_rank, members)


class TestStarved(Checks):
    """num_workers=0: the rank's main thread pinned by the transform."""

    @pytest.fixture(scope="class")
    def run(self, tmp_path_factory):
        yield from _start(tmp_path_factory, workers=0, item_ms=10.0, step_ms=2.0, neighbours=False)

    def test_it_is_cpu_from_the_ranks_own_saturated_thread(self, run):
        _starved_is_cpu(run)


class TestFed(Checks):
    """num_workers=4 keeping up, while neighbours saturate the host."""

    @pytest.fixture(scope="class")
    def run(self, tmp_path_factory):
        yield from _start(tmp_path_factory, workers=4, item_ms=2.5, step_ms=400.0, neighbours=True)

    def test_it_is_not_cpu_although_neighbours_saturate_the_host(self, run):
        _fed_is_not_cpu(run)
