"""Run the benchmark and write docs/benchmarks.md.

    python -m bench                  # full run (~6-8 minutes on 2 cores), writes docs/benchmarks.md
    python -m bench --quick          # fewer ticks and scrapes, a smoke test of the harness (~2 minutes)
    python -m bench --output FILE    # write the report elsewhere; --json FILE also dumps raw numbers

Order: spawn real idle processes (bench workloads first, fillers up to each host size), tick the
product's sampler at each scale in process, start the real servers one at a time (headroom, then
node_exporter, then the bare prometheus-client exporter) and scrape them on loopback, then the GPU
section (real NVIDIA GPU only). Everything started is stopped and every spawned process killed on exit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/run.py`: make `bench` and `headroom` importable
    sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent.parent / "agent")]

from bench import fixtures, fleet, gpu, host, nvml_cost, report, scrape, serving, ticks
from headroom import logs
from headroom.config import check_config_text

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = (8, 1000, 3)  # GPUs, host processes, declared workloads: the target's configuration
GPU_SCALES = (1, 8, 16)
PROCESS_SCALES = (100, 1000, 5000)
WORKLOAD_SCALES = (1, 3, 10)
PODS = 50  # pods churning on the reference host (--kubernetes): one ends and one starts every tick


@dataclasses.dataclass(frozen=True)
class Plan:
    """How much to measure; --quick shrinks every count."""

    ticks: int = 30
    warmup: int | None = None  # ticks before measuring; None fills the whole window (steady state)
    rounds: int = 3
    scale_rounds: int = 1
    scrapes: int = 300
    idle_seconds: float = 4.0
    scale_scrapes: bool = True
    rss_window_share: float = 1.1  # watch RSS for this share of the window (longer until it is full)

    @classmethod
    def quick(cls) -> Plan:
        return cls(ticks=10, warmup=30, rounds=1, scale_rounds=1, scrapes=100, idle_seconds=2.0, scale_scrapes=False,
                   rss_window_share=0.5)


def tick_scales() -> list[tuple[int, int, int]]:
    """The (gpus, processes, workloads) points: each axis varied around REFERENCE, processes outermost."""
    g, p, w = REFERENCE
    points = {(x, p, w) for x in GPU_SCALES} | {(g, x, w) for x in PROCESS_SCALES} | {(g, p, x) for x in WORKLOAD_SCALES}
    return sorted(points, key=lambda s: (s[1], s[0], s[2]))


class Inputs:
    """Scenario and config files in a temporary directory, one per scale."""

    def __init__(self, farm: host.ProcessFarm, workdir: Path) -> None:
        self.farm, self.workdir = farm, workdir
        self.extra = fixtures.optional_collectors()

    def scenario(self, gpus: int) -> Path:
        path = self.workdir / f"scenario-{gpus}gpu.yaml"
        if not path.exists():
            text = fixtures.scenario_yaml(gpus, lambda i: self.farm.workload_pids(i % max(WORKLOAD_SCALES) + 1)[:2])
            path.write_text(text)
        return path

    def config(self, workloads: int, interval: str = "1s", window: str = "10m") -> Path:
        path = self.workdir / f"config-{workloads}wl-{interval}-{window}.yaml"
        if not path.exists():
            path.write_text(fixtures.config_yaml(workloads, self.extra, interval, window))
        return path


def _log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run (numbers are rough)")
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks.md"), help="report path")
    parser.add_argument("--json", dest="json_path", help="also write raw results as JSON here")
    args = parser.parse_args(argv)
    plan = Plan.quick() if args.quick else Plan()
    logs.configure("warn", "console")
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="headroom-bench-"))
    farm = host.ProcessFarm()
    results = report.Results(machine=host.machine(), command=_command(args), quick=args.quick,
                             node_exporter=scrape.node_exporter_version())
    # first, before any simulated row installs the GPU driver stand-in under pynvml in this process
    _log("GPU section")
    results.gpu = gpu.measure()
    try:
        farm.ensure_workloads(max(WORKLOAD_SCALES))
        inputs = Inputs(farm, workdir)
        for scale in tick_scales():
            run_ticks(results, inputs, farm, plan, scale)
            if scale == REFERENCE:
                run_pods(results, inputs, farm, plan)
                run_scrapes(results, inputs, farm, plan, workdir)
            elif plan.scale_scrapes and scale in ((REFERENCE[0], 100, REFERENCE[2]), (REFERENCE[0], 5000, REFERENCE[2])):
                run_scale_scrape(results, inputs, farm, plan, workdir, scale)
        _log("serving endpoints at the reference scale")
        results.serving = serving.measure(farm, inputs, rounds=plan.scale_rounds * 2 + 1, n_ticks=plan.ticks)
        farm.resize_host(REFERENCE[1])
        run_full_window_rss(results, inputs, plan, workdir)
        if plan.scale_scrapes:
            for gpus in (g for g in GPU_SCALES if g != REFERENCE[0]):
                run_scale_scrape(results, inputs, farm, plan, workdir, (gpus, REFERENCE[1], REFERENCE[2]))
    finally:
        farm.close()
        shutil.rmtree(workdir, ignore_errors=True)
    results.duration_seconds = time.monotonic() - started
    text = report.markdown(results)
    out = Path(args.output)
    old = out.read_text() if out.exists() else ""
    # sections other commands own (`python -m bench.nvml_cost --write-docs`, `make fleet-bench`): kept
    for begin, end in ((nvml_cost.BEGIN, nvml_cost.END), (fleet.BEGIN, fleet.END)):
        if begin in old and end in old:
            text = text.rstrip("\n") + "\n\n" + old[old.index(begin):old.index(end) + len(end)] + "\n"
    out.write_text(text)
    _log(f"wrote {args.output} ({results.duration_seconds:.0f} s)")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report.jsonable(results), indent=1) + "\n")
    return 0


def _command(args: argparse.Namespace) -> str:
    return "python -m bench" + (" --quick" if args.quick else "")


def run_ticks(results: report.Results, inputs: Inputs, farm: host.ProcessFarm, plan: Plan,
              scale: tuple[int, int, int]) -> None:
    gpus, processes, workloads = scale
    seen = farm.resize_host(processes)
    reference = scale == REFERENCE
    config = check_config_text(inputs.config(workloads).read_text(), str(inputs.config(workloads)))
    full = int(config.agent["window"] / config.sample_interval) + 1
    warmup = full if plan.warmup is None else plan.warmup
    _log(f"ticks: {gpus} GPUs, {seen} processes, {workloads} workloads ({warmup} warm-up + {plan.ticks} ticks)")
    r = ticks.measure(config, inputs.scenario(gpus), gpus, seen, ticks=plan.ticks, warmup=warmup,
                      profile=reference)
    results.ticks.append(r)


def measure_pods(config: Any, inputs: Inputs, farm: host.ProcessFarm, gpus: int, processes: int, pods: int,
                 n_ticks: int, warmup: int, profile: bool = False) -> tuple[ticks.TickResult, ticks.TickResult]:
    """The reference tick without and with ``pods`` pods churning under --kubernetes (bench/pods.py), ticked
    alternately in one run; the host kept at ``processes`` processes, the pods' own among them."""
    from bench.pods import PodChurn
    from headroom.simulation import load_scenario

    churn = PodChurn(pods, load_scenario(inputs.scenario(gpus)).gpus, inputs.workdir / "pods")
    try:
        seen = farm.resize_host(processes)
        return ticks.measure_pair(config, inputs.scenario(gpus), gpus, seen, churn, ticks=n_ticks, warmup=warmup,
                                  profile=profile)
    finally:
        churn.close()


def run_pods(results: report.Results, inputs: Inputs, farm: host.ProcessFarm, plan: Plan) -> None:
    """The reference scale again with PODS pods churning (--kubernetes), right after the reference row."""
    from bench.pods import cgroup_v2_base

    gpus, processes, workloads = REFERENCE
    base, why = cgroup_v2_base()
    if base is None:
        results.pods_skipped = why
        _log(f"pods: not measured ({why})")
        return
    config = check_config_text(inputs.config(workloads).read_text(), str(inputs.config(workloads)))
    full = int(config.agent["window"] / config.sample_interval) + 1
    warmup = full if plan.warmup is None else plan.warmup
    _log(f"ticks: {gpus} GPUs, {processes} processes, {workloads} workloads, {PODS} pods churning "
         f"({warmup} warm-up + {plan.ticks} ticks)")
    _, with_pods = measure_pods(config, inputs, farm, gpus, processes, PODS, plan.ticks, warmup)
    results.ticks.append(with_pods)  # its reference half is in with_pods.without_pods


def run_scrapes(results: report.Results, inputs: Inputs, farm: host.ProcessFarm, plan: Plan, workdir: Path) -> None:
    """The side-by-side run: headroom, node_exporter and prometheus-client, one after the other."""
    gpus, _, workloads = REFERENCE
    _log("scrapes: headroom (reference)")
    server = scrape.start_headroom(inputs.config(workloads), inputs.scenario(gpus), workdir)
    try:
        rows = scrape.measure(server, rounds=plan.rounds, scrapes=plan.scrapes, idle_seconds=plan.idle_seconds)
        exposition = scrape.fetch_identity(server)
    finally:
        server.stop()
    results.scrapes += rows
    results.reference_exposition_samples = ticks.exposition_samples(exposition)
    expo_path = workdir / "reference.prom"
    expo_path.write_bytes(exposition)
    if results.node_exporter is not None:
        _log("scrapes: node_exporter")
        server = scrape.start_node_exporter(workdir)
        try:
            results.scrapes += scrape.measure(server, rounds=plan.rounds, scrapes=plan.scrapes,
                                              idle_seconds=plan.idle_seconds)
        finally:
            server.stop()
    _log("scrapes: prometheus-client exporter")
    server = scrape.start_promclient(expo_path, workdir)
    try:
        results.scrapes += scrape.measure(server, rounds=plan.rounds, scrapes=plan.scrapes,
                                          idle_seconds=plan.idle_seconds)
    finally:
        server.stop()


def run_full_window_rss(results: report.Results, inputs: Inputs, plan: Plan, workdir: Path) -> None:
    """RSS of ``headroom run`` until its window holds the same 601 samples as 10 minutes at 1 s: 8 GPUs
    sampling every 50 ms into a 30 s window, 16 GPUs (ticks of ~40 ms) every 100 ms into 60 s."""
    _, _, workloads = REFERENCE
    for gpus, interval, window in ((REFERENCE[0], "50ms", 30.0), (max(GPU_SCALES), "100ms", 60.0)):
        limit = window * plan.rss_window_share
        _log(f"RSS while the window fills: {gpus} GPUs, {interval} ticks, up to {2 * limit:.0f} s")
        server = scrape.start_headroom(inputs.config(workloads, interval, f"{window:g}s"), inputs.scenario(gpus),
                                       workdir)
        points = results.window_rss.setdefault(gpus, [])
        try:
            server.wait_ready()
            start, full_at = time.monotonic(), None
            # ticks that overrun are skipped, so "full" is read from the agent's own sample count
            while (elapsed := time.monotonic() - start) < limit or (full_at is None and elapsed < 2 * limit):
                points.append((elapsed, host.rss_bytes(server.pid)[0]))
                if full_at is None and _samples_total(server) >= report.WINDOW_SAMPLES:
                    full_at = elapsed
                time.sleep(5.0)
            points.append((time.monotonic() - start, host.rss_bytes(server.pid)[0]))
            results.window_full_at[gpus] = full_at
            results.window_interval[gpus] = interval
        finally:
            server.stop()


def _samples_total(server: scrape.Server) -> float:
    """headroom_samples_total from the server's exposition (0 when absent)."""
    for line in scrape.fetch_identity(server).decode().splitlines():
        if line.startswith("headroom_samples_total "):
            return float(line.split()[1])
    return 0.0


def run_scale_scrape(results: report.Results, inputs: Inputs, farm: host.ProcessFarm, plan: Plan, workdir: Path,
                     scale: tuple[int, int, int]) -> None:
    gpus, processes, workloads = scale
    seen = farm.resize_host(processes)
    _log(f"scrapes: headroom at {gpus} GPUs, {seen} processes")
    server = scrape.start_headroom(inputs.config(workloads), inputs.scenario(gpus), workdir)
    try:
        rows = scrape.measure(server, rounds=plan.scale_rounds, scrapes=plan.scrapes, idle_seconds=plan.idle_seconds)
    finally:
        server.stop()
    for row in rows:
        results.scale_scrapes.append(report.ScaleScrape(gpus, seen, workloads, row))


if __name__ == "__main__":
    raise SystemExit(main())
