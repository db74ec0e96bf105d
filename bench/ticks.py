"""What one tick costs, in process: sampling (collectors in their worker threads) + analysis + rendering.

The sampler is the product's ``Sampler`` with the product's collectors, analysis and renderer; only
its clocks are stepped so consecutive ticks are one interval apart in sampler time while running back
to back in real time (the window then spans the same minutes as in production). CPU per tick is the
process CPU (``time.process_time``: every thread) across ``Sampler.tick``; analysis and rendering are
timed with ``time.thread_time`` in the tick thread; each collector's CPU comes from calling its
``collect()`` directly on a second set of instances, so the split adds up without thread noise.
"""

from __future__ import annotations

import cProfile
import dataclasses
import gzip
import io
import pstats
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.fixtures import is_mig
from bench.stats import Spread
from headroom.config import Config
from headroom.daemon import LatestSample, Options, build_collectors, make_analysis
from headroom.exposition import render as render_module
from headroom.sampler import Sampler
from headroom.samples import PreviousTick, Sample, SourceResult
from headroom.simulation import load_scenario

# NVML functions known to block: real NVML samples PCIe throughput over a 20 ms window per call, and
# nvmlEventSetWait blocks until an event or its timeout. Neither may run on the tick.
BLOCKING_CALLS = {
    "nvmlDeviceGetPcieThroughput": "samples PCIe traffic for 20 ms per call (TX and RX: 2 calls per GPU)",
    "nvmlEventSetWait": "blocks until an XID event or the timeout (500 ms slices)",
    "nvmlEventSetWait_v2": "blocks until an XID event or the timeout (500 ms slices)",
}
TICK_THREAD = "MainThread"


class SteppedClock:
    """A real clock plus an offset that ``step_to`` moves, so ticks are an interval apart in its time."""

    def __init__(self, base: Callable[[], float]) -> None:
        self._base = base
        self.offset = 0.0

    def __call__(self) -> float:
        return self._base() + self.offset

    def step(self, seconds: float) -> None:
        self.offset += seconds


class _Timed:
    """Wraps a callable and records the thread CPU seconds of every call."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.cpu: list[float] = []

    def __call__(self, *args: Any) -> Any:
        start = time.thread_time()
        try:
            return self.fn(*args)
        finally:
            self.cpu.append(time.thread_time() - start)


@dataclass(frozen=True)
class NvmlCalls:
    """NVML calls made by the tick, per tick, through the fake library."""

    per_gpu: dict[str, float]  # "plain" / "mig" -> calls per GPU per tick
    by_function: dict[str, dict[str, float]]  # "plain"/"mig" -> function -> calls per GPU per tick
    library_per_tick: float  # calls not tied to a GPU
    blocking_on_tick: dict[str, int]  # blocking function -> calls made by the tick thread (must be 0)
    blocking_off_tick: dict[str, list[str]]  # blocking function -> threads that made it


@dataclass(frozen=True)
class TickResult:
    gpus: int
    processes: int  # processes the host listed during the run
    workloads: int
    warmup_ticks: int
    tick_cpu: Spread  # seconds, the GPU driver stand-in's own CPU excluded (tick_standin)
    tick_wall: Spread
    analysis_cpu: Spread
    render_cpu: Spread
    collector_cpu: dict[str, Spread]  # collect() called directly, thread CPU seconds
    collector_wall: dict[str, Spread]  # SourceResult.duration_seconds inside the ticks
    background_cpu_per_second: float  # process CPU per second between ticks (helper threads)
    samples: int
    exposition_bytes: int
    gzip_bytes: int
    gzip_cpu: Spread  # one gzip.compress(level 1) of the exposition, as the server does once per tick
    nvml: NvmlCalls | None
    exposition: bytes = field(repr=False, default=b"")
    tick_standin: Spread | None = None  # seconds per tick inside the GPU driver stand-in (simulation, apart)
    profile: str = field(repr=False, default="")
    pods: int = 0  # pods churning (bench/pods.py), one replaced per tick; 0: no Kubernetes identity
    kubelet_list_cpu: Spread | None = None  # seconds of CPU per kubelet List (its own thread), with pods
    kubelet_refresh_ticks: int = 0  # ticks between two List calls
    workloads_auto: Spread | None = None  # automatic workloads in the exposition per tick, with pods
    without_pods: Spread | None = None  # with pods: the reference tick's CPU, ticked alternately in the same run
    pods_added: Spread | None = None  # with pods: tick CPU minus the plain tick just before it, pair by pair

    @property
    def tick_cpu_with_kubelet(self) -> float:
        """Median tick CPU plus the kubelet List's CPU spread over the ticks between two calls."""
        if self.kubelet_list_cpu is None or not self.kubelet_refresh_ticks:
            return self.tick_cpu.median
        return self.tick_cpu.median + self.kubelet_list_cpu.median / self.kubelet_refresh_ticks


def exposition_samples(body: bytes) -> int:
    """Sample lines (not comments, not blank) in a text exposition."""
    return sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))


def auto_workloads(body: bytes) -> int:
    """Automatic workloads in a text exposition (``headroom_workload_info`` series with source="auto")."""
    return sum(1 for line in body.splitlines() if line.startswith(b"headroom_workload_info{")
               and b'source="auto"' in line)


def _build(config: Config, scenario_path: Path, previous: Any = None, identity: dict[str, Any] | None = None,
           rootfs: Path | None = None, scenario: Any = None, monotonic: Any = None) -> tuple[list[Any], Any]:
    """The daemon's collectors on a Scenario of their own (its fake library counts only these calls) unless
    ``scenario`` is given; ``previous``: the newest sample, as the daemon hands it (the identity collector
    reads NVML's processes from it); ``identity``: --kubernetes and its flags; ``rootfs``: the identity
    collector's --path.rootfs; ``monotonic``: the collectors' clock (the sampler's stepped clock in the tick
    runs, so that what they age by time, a new process' settling seconds, follows the 1 Hz ticks they stand
    for and not the packed ticks' real time)."""
    scenario = scenario if scenario is not None else load_scenario(scenario_path)
    collectors = build_collectors(config, Options(simulate=str(scenario_path), identity=identity or {}), scenario,
                                  previous, monotonic)
    if rootfs is not None:
        for c in collectors:
            if c.name == "identity":  # only it reads container state there; disk and shm keep the real root
                c.ctx = dataclasses.replace(c.ctx, paths=dataclasses.replace(c.ctx.paths, rootfs=rootfs))
    return collectors, scenario


def measure(config: Config, scenario_path: Path, gpus: int, processes: int, ticks: int = 30,
            warmup: int = 60, spacing: float = 0.1, profile: bool = False, pods: Any = None) -> TickResult:
    """Tick the product's sampler ``warmup`` + ``ticks`` times and time its parts (see module doc).

    ``pods``: a bench.pods.PodChurn; then the identity collector runs as with --kubernetes (pods named from
    their cgroups, containerd's bundles and the kubelet), one pod is replaced before every tick, the kubelet
    is asked every ``pods.refresh_ticks`` ticks between ticks (its List's CPU timed apart), and the identity
    collector's CPU is timed inside the ticks, where the churn is."""
    run = _Ticking(config, scenario_path, pods)
    try:
        for i in range(warmup + ticks):
            run.tick(i, warmup, spacing)
        run.finish()
    finally:
        run.close()
    return run.result(gpus, processes, ticks, warmup, spacing, profile)


def measure_pair(config: Config, scenario_path: Path, gpus: int, processes: int, pods: Any, ticks: int = 30,
                 warmup: int = 60, spacing: float = 0.1, profile: bool = False) -> tuple[TickResult, TickResult]:
    """The reference tick without and with ``pods`` churning, two samplers ticked alternately in one run (the
    same host, the same moments of a shared machine's load): (without, with); ``with.without_pods`` is the
    other's tick CPU."""
    # one driver stand-in for both (it is the binding's one library): the pods' processes are on its GPUs
    # during the churning sampler's ticks only
    scenario = load_scenario(scenario_path)
    plain = _Ticking(config, scenario_path, scenario=scenario, hide_pods=True)
    churning = _Ticking(config, scenario_path, pods, scenario=scenario)
    try:
        for i in range(warmup + ticks):
            plain.tick(i, warmup, spacing)
            churning.tick(i, warmup, spacing)
        plain.finish()
        churning.finish()
    finally:
        plain.close()
        churning.close()
    without = plain.result(gpus, processes, ticks, warmup, spacing, profile)
    added = [b - a for a, b in zip(plain.cpu, churning.cpu, strict=True)]  # neighbours meet the same load
    return without, dataclasses.replace(churning.result(gpus, processes, ticks, warmup, spacing, profile),
                                        without_pods=without.tick_cpu, pods_added=Spread.of(added))


class _Ticking:
    """One product sampler ticked and timed, tick by tick (see ``measure``)."""

    def __init__(self, config: Config, scenario_path: Path, pods: Any = None, scenario: Any = None,
                 hide_pods: bool = False) -> None:
        self.config, self.scenario_path, self.pods = config, scenario_path, pods
        latest = LatestSample()
        self.mono, self.wall = SteppedClock(time.monotonic), SteppedClock(time.time)
        collectors, scenario = _build(config, scenario_path, latest, pods.settings() if pods else None,
                                      pods.rootfs if pods else None, scenario, self.mono)
        self.scenario, self.hide_pods = scenario, hide_pods
        self.analyse = _Timed(make_analysis(config))
        self.render = _Timed(render_module.Renderer().render)  # its own caches, as an agent (one sampler) has
        self.sampler = Sampler(collectors, interval=config.sample_interval, window_seconds=config.agent["window"],
                               collector_timeout=config.agent.get("collector_timeout"), scenario=scenario.name,
                               analyse=self.analyse, render=self.render, clock=self.mono, wall_clock=self.wall)
        latest.sampler = self.sampler
        self.identity = next((c for c in collectors if c.name == "identity"), None)
        self.timed_identity: _Timed | None = None
        self.kubelet: list[float] = []
        self.auto: list[int] = []
        if pods is not None:
            pods.attach(scenario)
            if self.identity is None:
                raise RuntimeError("the pods bench needs the identity collector")
            self.timed_identity = self.identity.collect = _Timed(self.identity.collect)
        self.cpu: list[float] = []
        self.wall_times: list[float] = []
        self.durations: dict[str, list[float]] = {}
        self.standin: list[float] = []
        # the GPU driver stand-in's own CPU (every thread's calls into it) is the simulation's, not the agent's:
        # on a GPU host libnvidia-ml does that work (bench/gpu.py measures it there). It is told apart, as in
        # the per-collector split and bench/nvml_cost.py, and reported in its own column.
        self.lib = scenario.nvml_library() if any(c.name == "nvml" for c in collectors) else None
        if self.lib is not None:
            self.lib.timing, self.lib.timing_thread = True, None
        self.snap: Any = None

    def tick(self, i: int, warmup: int, spacing: float) -> None:
        pods, lib, mono = self.pods, self.lib, self.mono
        started = mono()
        if self.hide_pods:
            self.scenario.attach_processes(())
        if pods is not None:
            pods.step()  # between ticks: the churn itself is the cluster's work, not the agent's
            if pods.kubelet_due(i) and self.identity.poller is not None:
                t0 = time.thread_time()
                self.identity.poller.poll_once()  # the poller thread's call, made here so it keeps tick time
                if i >= warmup:
                    self.kubelet.append(time.thread_time() - t0)
        s0 = lib.cpu_seconds if lib is not None else 0.0
        c0, w0 = time.process_time(), time.perf_counter()
        snap = self.snap = self.sampler.tick()
        c1, w1 = time.process_time(), time.perf_counter()
        inside = (lib.cpu_seconds - s0) if lib is not None else 0.0
        if i >= warmup:
            self.cpu.append(c1 - c0 - inside)
            self.standin.append(inside)
            self.wall_times.append(w1 - w0)
            for name, r in snap.sample.sources.items():
                self.durations.setdefault(name, []).append(r.duration_seconds)
            if pods is not None:
                self.auto.append(auto_workloads(snap.exposition))
            if spacing:
                time.sleep(spacing)
        delta = self.config.sample_interval - (mono() - started)
        mono.step(delta)
        self.wall.step(delta)

    def finish(self) -> None:
        c0, w0 = time.process_time(), time.perf_counter()
        time.sleep(1.0)
        self.background = (time.process_time() - c0) / (time.perf_counter() - w0)
        self.body = self.sampler.snapshot.exposition
        self.window = self.sampler.window

    def close(self) -> None:
        if self.lib is not None:
            self.lib.timing = False
        self.sampler.stop()

    def result(self, gpus: int, processes: int, ticks: int, warmup: int, spacing: float, profile: bool) -> TickResult:
        snap, body, pods, config = self.snap, self.body, self.pods, self.config
        failing = [f"{n}: {r.error}" for n, r in snap.sample.sources.items() if not r.ok]
        if failing:
            raise RuntimeError("collectors failed during the bench: " + "; ".join(failing))
        collector_cpu, nvml, prof = _collectors_directly(config, self.scenario_path, gpus, self.window, snap, ticks,
                                                         profile, spacing, pods)
        if self.timed_identity is not None:  # inside the churning ticks, in its worker thread
            collector_cpu["identity"] = Spread.of(self.timed_identity.cpu[warmup:])
        gz = []
        for _ in range(20):
            t = time.thread_time()
            gzip.compress(body, compresslevel=1, mtime=0)
            gz.append(time.thread_time() - t)
        return TickResult(
            gpus=gpus, processes=processes, workloads=len(config.workloads), warmup_ticks=warmup,
            tick_cpu=Spread.of(self.cpu), tick_wall=Spread.of(self.wall_times),
            tick_standin=Spread.of(self.standin or [0.0]), analysis_cpu=Spread.of(self.analyse.cpu[warmup:]),
            render_cpu=Spread.of(self.render.cpu[warmup:]), collector_cpu=collector_cpu,
            collector_wall={n: Spread.of(v) for n, v in self.durations.items()},
            background_cpu_per_second=self.background, samples=exposition_samples(body),
            exposition_bytes=len(body), gzip_bytes=len(gzip.compress(body, compresslevel=1, mtime=0)),
            gzip_cpu=Spread.of(gz), nvml=nvml, exposition=body, profile=prof,
            pods=pods.count if pods is not None else 0,
            kubelet_list_cpu=Spread.of(self.kubelet) if self.kubelet else None,
            kubelet_refresh_ticks=pods.refresh_ticks if pods is not None else 0,
            workloads_auto=Spread.of(self.auto) if self.auto else None,
        )


def _collectors_directly(config: Config, scenario_path: Path, gpus: int, window: Any, snap: Any, ticks: int,
                         profile: bool, spacing: float, pods: Any = None
                         ) -> tuple[dict[str, Spread], NvmlCalls | None, str]:
    """Per-collector thread CPU of collect(), NVML calls per tick, and optionally a cProfile excerpt.

    Rounds are ``spacing`` apart, as ticks are: back to back, with warm CPU caches, the same calls cost
    about half as much and the split would not add up to the tick. With ``pods`` the GPUs list the pods'
    processes here too, churning between rounds (the identity collector is timed in the ticks instead)."""
    newest: dict[str, Any] = {}
    # the collectors read the last tick as the daemon hands it: a PreviousTick of the newest sample
    collectors, scenario = _build(config, scenario_path,
                                  (lambda: PreviousTick.of(newest.get("sample"))) if pods else None,
                                  pods.settings() if pods else None, pods.rootfs if pods else None)
    if pods is not None:
        pods.attach(scenario)
    try:
        for c in collectors:  # warm up: NVML init, identity caches, incremental process discovery
            for _ in range(3):
                c.collect()
        # the driver stand-in under the real binding: its calls are counted, its own CPU is told apart
        lib = scenario.nvml_library() if any(c.name == "nvml" for c in collectors) else None
        before = Counter(lib.calls) if lib is not None else Counter()
        cpu: dict[str, list[float]] = {c.name: [] for c in collectors}
        standin: list[float] = []
        if lib is not None:
            lib.timing, lib.timing_thread = True, threading.get_ident()  # this thread's calls only
        for _ in range(ticks):
            if pods is not None:
                pods.step()
            for c in collectors:
                s0 = lib.cpu_seconds if lib is not None else 0.0
                t = time.thread_time()
                last = c.collect()
                spent = time.thread_time() - t
                if c.name == "nvml" and lib is not None:
                    inside = lib.cpu_seconds - s0
                    standin.append(inside)
                    spent -= inside  # the collector and the binding, not the simulated driver
                cpu[c.name].append(spent)
                if c.name == "nvml" and pods is not None:  # what the identity collector reads next round
                    newest["sample"] = Sample(0.0, 0.0, {"nvml": SourceResult("nvml", True, 0.0, last)})
            time.sleep(spacing)
        if standin:
            cpu["nvml_standin"] = standin
        nvml = _nvml_calls(lib, before, gpus, ticks) if lib is not None else None
        text = ""
        if profile:
            analyse = make_analysis(config)
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(ticks):
                for c in collectors:
                    c.collect()
                analyse(window)
                render_module.render(snap)
            prof.disable()
            text = _profile_text(prof, ticks)
    finally:
        for c in collectors:
            c.close()
    return {n: Spread.of(v) for n, v in cpu.items() if v}, nvml, text


def _nvml_calls(lib: Any, before: Counter, gpus: int, ticks: int) -> NvmlCalls:
    diff = Counter(lib.calls)
    diff.subtract(before)
    on_tick = {f for f, threads in lib.callers.items() if TICK_THREAD in threads}
    groups = {"plain": [i for i in range(gpus) if not is_mig(i)], "mig": [i for i in range(gpus) if is_mig(i)]}
    by_function: dict[str, dict[str, float]] = {}
    per_gpu: dict[str, float] = {}
    for group, members in groups.items():
        if not members:
            continue
        counts: Counter[str] = Counter()
        for (name, gpu), n in diff.items():
            if gpu in members and name in on_tick and n > 0:
                counts[name] += n
        by_function[group] = {k: v / ticks / len(members) for k, v in sorted(counts.items())}
        per_gpu[group] = sum(counts.values()) / ticks / len(members)
    library = sum(n for (name, gpu), n in diff.items() if gpu is None and name in on_tick and n > 0) / ticks
    blocking_on = {f: sum(n for (name, _), n in diff.items() if name == f and f in on_tick) for f in BLOCKING_CALLS}
    blocking_off = {f: sorted(lib.callers.get(f, ())) for f in BLOCKING_CALLS if lib.callers.get(f)}
    return NvmlCalls(per_gpu, by_function, library, {k: v for k, v in blocking_on.items() if k in lib.callers},
                     blocking_off)


def _profile_text(prof: cProfile.Profile, ticks: int, top: int = 18) -> str:
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    lines = out.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().startswith("ncalls")), 0)
    root = str(Path(__file__).resolve().parent.parent) + "/"
    text = "\n".join(line.replace(root, "").rstrip() for line in lines[start:] if line.strip())
    return f"cProfile, {ticks} ticks of every collector's collect() + analysis + render, by own time:\n{text}"



def main(argv: list[str] | None = None) -> int:
    """``python -m bench.ticks [--ticks N] [--warmup N] [--pods N]``: the reference tick alone (8 GPUs, 1000 host
    processes, 3 workloads, as ``python -m bench`` measures it), printed rather than written to the docs; with
    ``--pods N`` measured twice in one run, without and with N pods churning under --kubernetes (bench/pods.py)."""
    import argparse
    import shutil
    import sys
    import tempfile

    from bench import host, run
    from headroom import logs
    from headroom.config import check_config_text

    parser = argparse.ArgumentParser(prog="python -m bench.ticks", description=main.__doc__.split("\n")[0] if main.__doc__ else None)
    parser.add_argument("--ticks", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=None, help="ticks before measuring (default: fill the window)")
    parser.add_argument("--pods", type=int, default=0, help="also measure with N pods churning (--kubernetes)")
    parser.add_argument("--profile", action="store_true", help="print where the time goes (cProfile)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logs.configure("warn", "console")
    gpus, processes, workloads = run.REFERENCE
    workdir = Path(tempfile.mkdtemp(prefix="headroom-ticks-"))
    farm = host.ProcessFarm()
    rows = []
    try:
        farm.ensure_workloads(max(run.WORKLOAD_SCALES))
        inputs = run.Inputs(farm, workdir)
        path = inputs.config(workloads)
        config = check_config_text(path.read_text(), str(path))
        warmup = int(config.agent["window"] / config.sample_interval) + 1 if args.warmup is None else args.warmup
        if args.pods:
            rows += run.measure_pods(config, inputs, farm, gpus, processes, args.pods, args.ticks, warmup,
                                     profile=args.profile)
        else:
            seen = farm.resize_host(processes)
            rows.append(measure(config, inputs.scenario(gpus), gpus, seen, ticks=args.ticks, warmup=warmup,
                                profile=args.profile))
    finally:
        farm.close()
        shutil.rmtree(workdir, ignore_errors=True)
    ms = 1e3
    for r in rows:
        pods = f", {r.pods} pods churning (--kubernetes)" if r.pods else ""
        print(f"reference tick: {gpus} GPUs, {r.processes} processes, {workloads} workloads{pods}, "
              f"{warmup} warm-up + {args.ticks} ticks")
        print(f"CPU per tick: {r.tick_cpu.median * ms:.2f} ms median (min {r.tick_cpu.low * ms:.2f}, max {r.tick_cpu.high * ms:.2f});"
              f" target < 10 ms: {'met' if r.tick_cpu_with_kubelet < 0.010 else 'missed'}")
        if r.tick_standin is not None:
            print(f"  (the GPU driver stand-in's own CPU, excluded above: {r.tick_standin.median * ms:.2f} ms per tick)")
        if r.kubelet_list_cpu is not None:
            print(f"  kubelet List (its own thread, every {r.kubelet_refresh_ticks} ticks): "
                  f"{r.kubelet_list_cpu.median * ms:.2f} ms per call; tick + List per tick "
                  f"{r.tick_cpu_with_kubelet * ms:.2f} ms")
        if r.workloads_auto is not None:
            print(f"  automatic workloads per tick: {r.workloads_auto.median:.0f} (min {r.workloads_auto.low:.0f}, "
                  f"max {r.workloads_auto.high:.0f})")
        print(f"analysis {r.analysis_cpu.median * ms:.3f} ms, render {r.render_cpu.median * ms:.3f} ms")
        print("collect() CPU by collector, median ms: " + ", ".join(f"{name} {s.median * ms:.3f}" for name, s in r.collector_cpu.items()))
        if args.profile and r.profile:
            print(r.profile)
    if len(rows) == 2:
        a, b = rows
        print(f"with {b.pods} pods / without (ticked alternately, {args.ticks} ticks each): "
              f"{b.tick_cpu.median / a.tick_cpu.median:.2f}x ({(b.tick_cpu.median - a.tick_cpu.median) * ms:+.2f} ms "
              f"per tick, medians); pair by pair: {b.pods_added.median * ms:+.2f} ms median "
              f"(min {b.pods_added.low * ms:+.2f}, max {b.pods_added.high * ms:+.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
