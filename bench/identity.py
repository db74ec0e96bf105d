"""Cost of automatic workload identity per tick: ``python -m bench.identity [--pods 50] [--ticks 300]``.

A fixture host in a temp dir: N pods (systemd driver, containerd naming, one GPU process each, their
containerd bundles and cgroup v2 files), one pod replaced every tick (a new pid, a new pod UID), 8 GPUs.
Measures, per tick, the identity collector's ``collect()`` and the analysis + rendering of the automatic
workloads, and prints medians with min and max (bench/stats.py). The kubelet is left out (its List runs
in its own thread, never in the tick). The whole reference tick with pods churning (real processes in real
cgroups, a real gRPC kubelet) is ``python -m bench.ticks --pods 50`` (bench/pods.py).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path

from bench.stats import Spread
from headroom.exposition import render
from headroom.exposition.render.collectors import _render_identity  # private: no public name
from headroom.exposition.render.findings import _render_workloads  # private: no public name
from headroom.samples import GpuProcess, GpuSample, NvmlSample, PreviousTick, Sample, SourceResult
from headroom.sources import Paths, SourceContext
from headroom.sources.identity import IdentityCollector
from headroom.workload import attribution


def _pod(root: Path, pid: int) -> None:
    uid = str(uuid.uuid4())
    cid = uuid.uuid4().hex + uuid.uuid4().hex
    cgroup = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid.replace('-', '_')}.slice"
    (root / "proc" / str(pid)).mkdir(parents=True)
    (root / "proc" / str(pid) / "cgroup").write_text(f"0::{cgroup}/cri-containerd-{cid}.scope\n")
    d = root / "sys/fs/cgroup" / cgroup.lstrip("/")
    d.mkdir(parents=True)
    for name, text in (("cgroup.procs", ""), ("cpu.stat", "usage_usec 1\nuser_usec 1\nsystem_usec 0\n"),
                       ("memory.current", "1073741824\n"), ("pids.current", "4\n"), ("cpu.max", "max 100000\n"),
                       ("memory.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")):
        (d / name).write_text(text)
    bundle = root / f"root/run/containerd/io.containerd.runtime.v2.task/k8s.io/{cid}"
    bundle.mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps({"annotations": {
        "io.kubernetes.cri.sandbox-namespace": "bench", "io.kubernetes.cri.sandbox-name": f"pod-{pid}",
        "io.kubernetes.cri.container-name": "main"}}))


def measure(pods: int, ticks: int, memory: bool = False) -> tuple[Spread, Spread]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        live = list(range(10_000, 10_000 + pods))
        for pid in live:
            _pod(root, pid)
        state: dict[str, Sample] = {}
        c = IdentityCollector(SourceContext(paths=Paths(procfs=root / "proc", sysfs=root / "sys", rootfs=root / "root"),
                                            settings={"kubernetes": False}, previous=lambda: PreviousTick.of(state.get("s"))))
        c.kubernetes = True  # pods named from containerd's bundles; no kubelet thread in the measured tick
        collect, analyse = [], []
        next_pid = live[-1] + 1
        warm = min(500, ticks // 4)
        for tick in range(ticks):
            if memory and tick == warm:
                tracemalloc.start()  # traces allocations from here: the baseline is taken once they are live
            if memory and tick == 2 * warm:
                render.clear_caches()  # bounded (20 000 entries each, then cleared): not a leak, so not counted
                base = tracemalloc.get_traced_memory()[0]
            gpus = tuple(GpuSample(i, f"GPU-{i}", "H100", f"0000:{i:02x}:00.0", memory_total_bytes=80 * 2**30,
                                   processes=tuple(GpuProcess(p, 2**30, sm_utilization_ratio=0.1)
                                                   for p in live[i::8])) for i in range(8))
            state["s"] = Sample(0.0, 0.0, {"nvml": SourceResult("nvml", True, 0.0, NvmlSample(True, gpus))})
            t0 = time.perf_counter()
            sample = c.collect()
            t1 = time.perf_counter()
            full = Sample(0.0, 0.0, {**state["s"].sources, "identity": SourceResult("identity", True, 0.0, sample)})
            w = render.Writer()
            _render_identity(w, sample, full)
            _render_workloads(w, attribution.attribute(full, []))
            w.render()
            t2 = time.perf_counter()
            if not memory:  # the timing lists would be the only thing growing
                collect.append(t1 - t0)
                analyse.append(t2 - t1)
            assert len(sample.groups) == pods, len(sample.groups)
            gone = live.pop(0)  # churn: the oldest pod ends, a new one starts
            (root / "proc" / str(gone) / "cgroup").unlink()
            (root / "proc" / str(gone)).rmdir()
            _pod(root, next_pid)
            live.append(next_pid)
            next_pid += 1
        if memory:
            render.clear_caches()  # bounded (20 000 entries each, then cleared): not a leak, so not counted
            workloads_now = len(sample.groups)
            del sample, full, w
            grown = tracemalloc.get_traced_memory()[0] - base
            tracemalloc.stop()
            print(f"{pods} pods, {ticks - 2 * warm} replacements after warm-up: traced memory grew {grown / 1024:.1f} KiB "
                  "(the label cache cleared first: bounded by design); "
                  f"collector state: {len(c._pids)} pids, {len(c._meta)} containers, {len(c._dirs)} cgroups, "
                  f"{len(c._exported)} exported; last tick {workloads_now} workloads")
            return Spread.of([0.0]), Spread.of([0.0])
        return Spread.of(collect).scaled(1e3), Spread.of(analyse).scaled(1e3)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pods", type=int, nargs="+", default=[8, 50])
    p.add_argument("--ticks", type=int, default=300)
    p.add_argument("--day", action="store_true",
                   help="24 h of churn instead: a pod every 10 s (8 640 replacements), memory growth traced")
    args = p.parse_args()
    if args.day:
        measure(max(args.pods), 8640, memory=True)
        return 0
    for n in args.pods:
        collect, analyse = measure(n, args.ticks)
        print(f"{n:4d} pods, 1 churning per tick, {args.ticks} ticks: collect median {collect.median:.3f} ms "
              f"(min {collect.low:.3f}, max {collect.high:.3f}); attribution + render median {analyse.median:.3f} ms "
              f"(min {analyse.low:.3f}, max {analyse.high:.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
