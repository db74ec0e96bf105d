"""Evidence names the neighbour (issue 12, class 8): who outside the workload presses on CPU, disks or memory.

The processes collector scans /proc for the top consumers only while the previous tick shows the host under
pressure (sources/neighbours.py); the analysis names the top three outside the workload in the evidence, and
/api/v1/status and the landing page show them (never a metric label)."""

from __future__ import annotations

import dataclasses
import os
import pwd
from pathlib import Path

import pytest

from headroom.samples import (
    CpuSample,
    CpuTimes,
    MemorySample,
    Pressure,
    PressureLine,
    PreviousTick,
    Sample,
    SourceResult,
)
from headroom.sources import Paths, SourceContext
from headroom.sources.neighbours import NeighbourScan, pressured
from headroom.sources.processes import PAGE_SIZE, ProcessesCollector
from headroom.workload.profiles import profile_from_dict
from test_processes import PROC, SYS, write_proc

from situations import ALL, GIB, TRAINER, Gpu, Host, analyse, build_window, neighbour

ME = pwd.getpwuid(os.getuid()).pw_name


def previous(psi_cpu: float = 0.0, available: int = 200 * GIB, psi: bool = True, load1: float = 1.0) -> PreviousTick:
    """The previous tick as the collectors get it, from a Sample with this CPU and memory (no analysis at hand)."""
    line = PressureLine(psi_cpu, psi_cpu, psi_cpu, 0.0)
    pressure = {"cpu": Pressure(some=line, full=None)} if psi else {}
    cpu = CpuSample(times=CpuTimes(user=0, nice=0, system=0, idle=0, iowait=0), logical_cpus=16, load1=load1,
                    load5=1, load15=1, pressure=pressure)
    mem = MemorySample(total_bytes=256 * GIB, available_bytes=available, free_bytes=available)
    return PreviousTick.of(Sample(timestamp=1e9, monotonic=0.0, sources={"cpu": SourceResult("cpu", True, 0.0, cpu),
                                                                        "memory": SourceResult("memory", True, 0.0, mem)}))


@pytest.mark.parametrize(("sample", "expected"), [
    (None, False),
    (previous(), False),
    (previous(psi_cpu=0.1), True),  # psi_cpu_low: where the cpu rule starts to score
    (previous(available=20 * GIB), True),  # below mem_available_low (10 %)
    (previous(psi=False, load1=15.0), True),  # no PSI: a load above 85 % of the CPUs
    (previous(psi=False, load1=8.0), False),
])
def test_a_scan_is_due_only_under_pressure(sample, expected):
    assert pressured(sample) is expected


class Rig:
    """The processes collector over a writable copy of the fixture /proc, with a clock and a previous sample."""

    def __init__(self, root: Path) -> None:
        self.root, self.now, self.before = root, 0.0, previous()
        # the previous tick's analysis as daemon.LatestSample puts it in the PreviousTick: each workload's scores
        self.scores: tuple[dict[str, float], ...] | None = None

        trainer = profile_from_dict({"name": "trainer", "kind": "inference", "match": {"cmdline": r"train\.py"}})
        ctx = SourceContext(paths=Paths(procfs=root, sysfs=SYS, rootfs=Path("/")), workloads=(trainer,),
                            monotonic=lambda: self.now,
                            previous=lambda: dataclasses.replace(self.before, workload_scores=self.scores))
        self.collector = ProcessesCollector(ctx)

    def tick(self, at: float):
        self.now = at
        return self.collector.collect()

    @property
    def scans(self) -> int:
        # private: the neighbours scan's counters: how often it reads is what is tested
        return self.collector._neighbours.scans


def _io(root: Path, pid: int, read: int, written: int) -> None:
    (root / str(pid) / "io").write_text(f"rchar: 0\nwchar: 0\nsyscr: 0\nsyscw: 0\nread_bytes: {read}\n"
                                        f"write_bytes: {written}\ncancelled_write_bytes: 0\n")


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    import shutil

    root = tmp_path / "proc"
    shutil.copytree(PROC, root)
    return Rig(root)


def test_a_calm_host_is_never_scanned(rig):
    for t in range(5):
        assert rig.tick(float(t)).neighbours == ()
    assert rig.scans == 0


def test_under_pressure_the_top_consumers_are_named_with_user_and_share(rig):
    rig.before = previous(psi_cpu=0.5)
    write_proc(rig.root, 7000, "stress-ng", 1, ["stress-ng", "--cpu", "8"], "/user.slice", utime=0)
    write_proc(rig.root, 7001, "borg", 1, ["borg", "create"], "/system.slice/backup.service")
    write_proc(rig.root, 7002, "java", 1, ["java", "-jar", "etl.jar"], "/user.slice", rss_pages=180 * GIB // PAGE_SIZE)
    rig.tick(0.0)
    assert rig.scans == 1
    # one second later: stress-ng used 8 CPU seconds, borg read 400 MB, the trainer (1000) used 2 CPU seconds
    write_proc(rig.root, 7000, "stress-ng", 1, ["stress-ng", "--cpu", "8"], "/user.slice", utime=800)
    _io(rig.root, 7001, 300_000_000, 100_000_000)
    stat = (rig.root / "1000" / "stat").read_text().split()
    stat[13] = str(int(stat[13]) + 200)
    (rig.root / "1000" / "stat").write_text(" ".join(stat) + "\n")
    answer = rig.tick(1.0).neighbours
    found = {n.name: n for n in answer}
    assert rig.scans == 2
    stress = found["stress-ng"]
    assert (stress.pid, stress.user, stress.workload, stress.cpu_cores, stress.cpu_share) == (7000, ME, None, 8.0, 0.5)
    borg = found["borg"]
    assert (borg.io_bytes_per_second, borg.io_share) == (400e6, 1.0)
    assert found["java"].rss_bytes == 180 * GIB and found["java"].memory_share == pytest.approx(180 / 256, abs=1e-4)
    trainer = [n for n in answer if n.pid == 1000]
    assert trainer and trainer[0].workload == "trainer"  # its own processes are marked, so never called a neighbour


def test_scans_are_bounded_to_one_per_interval_under_pressure(rig):
    rig.before = previous(psi_cpu=0.5)
    write_proc(rig.root, 7000, "stress-ng", 1, ["stress-ng"], "/user.slice", utime=0)
    rig.tick(0.0)
    write_proc(rig.root, 7000, "stress-ng", 1, ["stress-ng"], "/user.slice", utime=800)
    answer = rig.tick(1.0).neighbours
    assert answer and rig.scans == 2
    for t in range(2, 11):  # the answer is kept for the interval (10 s) without reading /proc again
        assert rig.tick(float(t)).neighbours == answer
    assert rig.scans == 2
    rig.tick(11.0)
    assert rig.scans == 3
    rig.before = previous()  # calm again: the names go, and nothing is read
    assert rig.tick(12.0).neighbours == () and rig.scans == 3


def test_the_scan_skips_what_it_cannot_read(tmp_path):
    root = tmp_path / "proc"
    root.mkdir()
    (root / "42").mkdir()  # a pid whose files vanished
    write_proc(root, 43, "sleep", 1, ["sleep"], "/", utime=5)
    scan = NeighbourScan(root, 100, PAGE_SIZE)
    assert scan.update(0.0, previous(psi_cpu=0.5), {}) == ()
    assert scan.update(1.0, previous(psi_cpu=0.5), {}) == ()  # sleep used nothing: nobody to name
    assert NeighbourScan(tmp_path / "missing", 100, PAGE_SIZE).update(0.0, previous(psi_cpu=0.5), {}) == ()


# ------------------------------------------------------------------------------------------ analysis
def _workload(host, extra=None, config=TRAINER):
    (wf,) = analyse(config, build_window(host, [Gpu(util=0.35)], extra=extra)).workload_findings
    return wf


def test_the_evidence_names_the_top_three_outside_the_workload():
    crowd = tuple(neighbour(100 + i, f"job{i}", "bob", cores=float(i)) for i in range(1, 6))
    own = neighbour(1001, "pt_data_worker", "alice", cores=9.0, workload="trainer")
    other = neighbour(900, "vllm", "svc", cores=8.5, workload="chat")
    wf = _workload(Host(cpu_busy=0.99, psi={"cpu.some": 0.5}, neighbours=(*crowd, own, other)))
    text = wf.verdict.evidence["cpu"]
    assert text.endswith("outside the workload: vllm (workload chat, user svc, pid 900) 8.50 cores, 53 % of the CPUs; "
                         "job5 (user bob, pid 105) 5.00 cores, 31 % of the CPUs; "
                         "job4 (user bob, pid 104) 4.00 cores, 25 % of the CPUs"), text
    assert "pt_data_worker" not in text
    assert [n.pid for n in wf.neighbours["cpu"]] == [900, 105, 104]


def test_a_calm_host_names_nobody():
    wf = _workload(Host())
    assert wf.neighbours == {} and "outside the workload" not in wf.verdict.evidence["cpu"]


def test_status_and_landing_page_show_the_neighbours():
    # private: one card or line of the landing page; status()/page() need a whole agent's state (server.health, the window)
    from headroom.exposition.landing import _workload_card

    # private: the status API's entry of one workload; status() needs a whole agent's state
    from headroom.exposition.status_api import _workload_status

    situation = next(s for s in ALL if s.name == "a backup saturates the disk the trainer reads from")
    (wf,) = analyse(situation.config, situation.window()).workload_findings
    status = _workload_status(wf, None)
    borg = status["neighbours"]["disk_io"][0]
    assert (borg["name"], borg["user"], borg["pid"], borg["io_share"]) == ("borg", "backup", 777, 0.84)
    assert "borg (user backup, pid 777) 420 MB/s, 84 % of the processes' disk I/O" in status["evidence"]["disk_io"]
    page = _workload_card(status)
    assert "Pressure from outside the workload: CPU: borg (backup) 4 %; disk I/O: borg (backup) 84 %" in page


def test_neighbours_never_become_labels():
    from headroom.exposition.render import Writer
    from headroom.exposition.render.findings import _render_findings  # private: no public name

    situation = next(s for s in ALL if s.name == "a neighbour's CPU burn starves the DataLoader")
    findings = analyse(situation.config, situation.window())
    w = Writer()
    _render_findings(w, findings)
    assert "stress-ng" not in w.render().decode() and "bob" not in w.render().decode()


def test_a_pass_reads_at_most_a_chunk_of_pids_per_tick(rig, monkeypatch):
    """Thousands of processes: a pass spreads over ticks, so no tick pays for all of /proc at once."""
    from headroom.sources import neighbours

    monkeypatch.setattr(neighbours, "CHUNK", 3)
    rig.before = previous(psi_cpu=0.5)
    pids = len([p for p in rig.root.iterdir() if p.name.isdigit()]) + 1
    write_proc(rig.root, 7000, "stress-ng", 1, ["stress-ng"], "/user.slice", utime=0)
    ticks_per_pass = -(-pids // 3)
    reads, t, answer = [], 0.0, ()
    while not answer and t < 10 * ticks_per_pass:
        # private: the neighbours scan's counters: how often it reads is what is tested
        before = rig.collector._neighbours.reads
        write_proc(rig.root, 7000, "stress-ng", 1, ["stress-ng"], "/user.slice", utime=int(800 * t))
        answer = rig.tick(t).neighbours
        # private: the neighbours scan's counters: how often it reads is what is tested
        reads.append(rig.collector._neighbours.reads - before)
        t += 1.0
    assert max(reads) == 3
    assert len(reads) == 2 * ticks_per_pass  # two passes, then the first answer
    (stress,) = [n for n in answer if n.name == "stress-ng"]
    assert stress.cpu_cores == pytest.approx(8.0)  # its own two readings, one pass apart


def test_under_pressure_nothing_is_read_unless_a_workload_scores_it(rig):
    """A host under pressure whose workloads are not held back by it (busy GPUs: cpu, disk_io and
    host_memory score 0) pays nothing; a workload that scores it does."""

    def findings(**scores):  # one workload's verdict scores
        return ({"cpu": 0.0, "disk_io": 0.0, "host_memory": 0.0, "gpu_compute": 1.0, **scores},)

    rig.before = previous(psi_cpu=0.8)
    rig.scores = findings()
    for t in range(3):
        assert rig.tick(float(t)).neighbours == ()
    assert rig.scans == 0
    rig.scores = findings(disk_io=0.3)
    rig.tick(3.0)
    assert rig.scans == 1


def test_the_neighbours_named_follow_each_scan_and_leave_out_the_workload_itself():
    """bottleneck.neighbours_of ranks a scan's neighbours once and keeps their evidence text: a new scan (another
    tuple, equal or not) is ranked anew, each workload is left out of its own list, and the top 3 are the largest
    of the rest in the order the scan's values give (ties in scan order)."""
    from types import SimpleNamespace

    from headroom.analysis import bottleneck
    from headroom.samples import Neighbour

    def n(pid: int, cores: float, workload: str | None = None) -> Neighbour:
        return Neighbour(pid, f"p{pid}", "bob", workload, cores, cores / 8, None, None, 0, None)

    first = SimpleNamespace(neighbours=(n(1, 2.0), n(2, 5.0, "train"), n(3, 2.0), n(4, 0.05), n(5, 3.0)))
    assert [x.pid for x in bottleneck.neighbours_of(first, "cpu", "pod")] == [2, 5, 1]
    assert [x.pid for x in bottleneck.neighbours_of(first, "cpu", "train")] == [5, 1, 3]
    assert bottleneck.neighbours_of(first, "host_memory", "pod") == []
    second = SimpleNamespace(neighbours=(n(1, 9.0), n(3, 0.5)))  # the next scan: nothing of the first kept
    assert [x.pid for x in bottleneck.neighbours_of(second, "cpu", "train")] == [1, 3]
    text = bottleneck.neighbour_text("cpu", bottleneck.neighbours_of(second, "cpu", "train"))
    assert text == ("outside the workload: p1 (user bob, pid 1) 9.00 cores, 112 % of the CPUs; "
                    "p3 (user bob, pid 3) 0.50 cores, 6 % of the CPUs")
    assert bottleneck.neighbour_text("cpu", [n(1, 1.0)]).endswith("1.00 core, 12 % of the CPUs")
