"""docs/benchmarks.md from the measurements: machine, command, tables, ratios, targets, profile."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from importlib import metadata
from itertools import pairwise
from typing import Any

from bench.gpu import NVIDIA_SMI_QUERY, GpuResult
from bench.host import Machine
from bench.scrape import ScrapeResult
from bench.stats import Spread
from bench.ticks import BLOCKING_CALLS, TickResult

MIB = 2**20
TICK_TARGET = 0.010  # seconds of CPU per tick at the reference scale
SERVING_TARGET = 0.001  # seconds of CPU per tick added by each scraped serving endpoint
P50_TARGET, P99_TARGET = 0.001, 0.005
NODE_EXPORTER_RATIO = 5  # headroom's CPU per scrape at most 1/5 of node_exporter's
RSS_TARGET = 60 * MIB
WINDOW_SAMPLES = 601  # samples the default window (10 min at 1 s) holds


@dataclass(frozen=True)
class ScaleScrape:
    gpus: int
    processes: int
    workloads: int
    result: ScrapeResult


@dataclass
class Results:
    machine: Machine
    command: str
    quick: bool
    node_exporter: str | None
    ticks: list[TickResult] = field(default_factory=list)
    scrapes: list[ScrapeResult] = field(default_factory=list)
    scale_scrapes: list[ScaleScrape] = field(default_factory=list)
    reference_exposition_samples: int = 0
    # GPUs -> [(seconds since start, RSS bytes)] of a server filling its window
    window_rss: dict[int, list[tuple[float, int]]] = field(default_factory=dict)
    window_full_at: dict[int, float | None] = field(default_factory=dict)  # seconds until 601 samples
    window_interval: dict[int, str] = field(default_factory=dict)  # the sample interval of that run
    gpu: GpuResult | None = None
    serving: Any = None  # bench.serving.ServingCost: what scraping serving endpoints adds per endpoint
    pods_skipped: str = ""  # why the reference scale with pods churning was not measured
    duration_seconds: float = 0.0


def jsonable(obj: Any) -> Any:
    """Plain JSON data from the result dataclasses (bytes and latency lists left out)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if f.name not in ("exposition", "latencies")}
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, bytes):
        return None
    return obj


def _ms(s: Spread | None, digits: int = 2) -> str:
    return "n/a" if s is None else s.scaled(1e3).text(digits)


def _yes(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def _reference(results: Results) -> TickResult | None:
    return next((t for t in results.ticks if (t.gpus, t.workloads) == (8, 3) and 900 <= t.processes <= 1100
                 and not t.pods), None)


def _with_pods(results: Results) -> TickResult | None:
    """The reference scale with pods churning (--kubernetes), when measured."""
    return next((t for t in results.ticks if t.pods), None)


def _scrape(results: Results, server: str, encoding: str) -> ScrapeResult | None:
    return next((s for s in results.scrapes if s.server == server and s.encoding == encoding), None)


def _headroom_scrape_cpu(s: ScrapeResult, ref: TickResult | None) -> float:
    """CPU per scrape as Prometheus sees it: with gzip, every scrape meets a new snapshot and pays one
    compression (the hammering client shares one compression among all scrapes of a tick)."""
    extra = ref.gzip_cpu.median if (s.encoding == "gzip" and ref is not None) else 0.0
    return s.cpu_per_scrape.median + extra


def targets(results: Results) -> list[tuple[str, str, bool]]:
    """(target, measured, met) for every target the run could judge."""
    out = []
    ref = _reference(results)
    if ref is not None:
        out.append((f"CPU per tick, {ref.gpus} GPUs, {ref.processes} processes, {ref.workloads} workloads, "
                    "1 Hz: < 10 ms", f"{ref.tick_cpu.median * 1e3:.2f} ms median (max {ref.tick_cpu.high * 1e3:.2f})",
                    ref.tick_cpu.median < TICK_TARGET))
    pods = _with_pods(results)
    if pods is not None:
        list_ms = pods.kubelet_list_cpu.median * 1e3 if pods.kubelet_list_cpu is not None else 0.0
        without = (f"; without pods, ticked alternately: {pods.without_pods.median * 1e3:.2f} ms, "
                   f"{pods.tick_cpu.median / pods.without_pods.median:.2f}x") if pods.without_pods else ""
        if pods.pods_added is not None:
            without += f"; the pods add {pods.pods_added.median * 1e3:.2f} ms per tick (median of pairs)"
        out.append((f"CPU per tick, reference + {pods.pods} pods churning (--kubernetes): < 10 ms",
                    f"{pods.tick_cpu_with_kubelet * 1e3:.2f} ms median ({pods.tick_cpu.median * 1e3:.2f} tick + "
                    f"kubelet List {list_ms:.2f} / {pods.kubelet_refresh_ticks} ticks{without})",
                    pods.tick_cpu_with_kubelet < TICK_TARGET))
    elif results.pods_skipped:
        out.append(("CPU per tick, reference + 50 pods churning (--kubernetes): < 10 ms",
                    f"not measured: {results.pods_skipped}", False))
    for enc in ("gzip", "identity"):
        s = _scrape(results, "headroom", enc)
        if s is not None:
            out.append((f"scrape p50 < 1 ms, p99 < 5 ms (8 GPUs, loopback, {enc})",
                        f"p50 {s.p50 * 1e3:.2f} ms, p99 {s.p99 * 1e3:.2f} ms",
                        s.p50 < P50_TARGET and s.p99 < P99_TARGET))
    for enc in ("gzip", "identity"):
        h, n = _scrape(results, "headroom", enc), _scrape(results, "node_exporter", enc)
        if h is not None and n is not None and n.cpu_per_scrape.median > 0:
            mine = _headroom_scrape_cpu(h, ref)
            out.append((f"server CPU per scrape <= 1/5 of node_exporter's ({enc})",
                        f"{mine * 1e3:.3f} ms vs {n.cpu_per_scrape.median * 1e3:.3f} ms: "
                        f"1/{n.cpu_per_scrape.median / mine:.0f}" if mine > 0 else "0",
                        mine * NODE_EXPORTER_RATIO <= n.cpu_per_scrape.median))
    h = _scrape(results, "headroom", "gzip") or _scrape(results, "headroom", "identity")
    for gpus, points in sorted(results.window_rss.items()):
        seconds, full = points[-1]
        full_at = results.window_full_at.get(gpus)
        state = (f"{seconds - full_at:.0f} s after the window filled" if full_at is not None
                 else f"after {seconds:.0f} s, window **not yet full**")
        out.append((f"RSS < 60 MiB steady ({gpus} GPUs, 601-sample window)", f"{full / MIB:.1f} MiB {state}",
                    full < RSS_TARGET))
    if h is not None:
        worst = max([h.rss_end] + [s.result.rss_end for s in results.scale_scrapes])
        out.append(("RSS < 60 MiB in every scrape run (first minute, window filling)", f"{worst / MIB:.1f} MiB worst",
                    worst < RSS_TARGET))
    if results.serving is not None:
        c = results.serving
        out.append(("tick cost per scraped serving endpoint < 1 ms (reference scale)",
                    f"{c.per_endpoint_total * 1e3:.2f} ms ({c.per_endpoint_tick_thread * 1e3:.2f} tick thread + "
                    f"{c.scrape_cpu * 1e3:.2f} scrape)", c.per_endpoint_total < SERVING_TARGET))
    return out


def serving_section(c: Any, w: Any) -> None:
    """What scraping serving endpoints adds per endpoint (bench/serving.py)."""
    def rounds(values: list[float]) -> str:
        return ", ".join(f"{v * 1e3:.2f}" for v in values)

    w("## Serving endpoints\n")
    w(f"The reference scale ticked as is and with each of its {c.endpoints} workloads scraping a vLLM V1 "
      f"`/metrics` of realistic size ({c.body_bytes / 1024:.0f} KiB: the runtime's families plus process, GC and "
      "HTTP ones) from a server in another process, rounds alternating (`python -m bench.serving`). The tick "
      "thread's part is the serving collector's `collect()` plus analysis and render; the scrape (HTTP, "
      "parsing, mapping) runs in the endpoint's own thread once per tick.\n")
    w("| | without endpoints | with endpoints | per endpoint |")
    w("|---|---|---|---|")
    w(f"| tick thread: serving collect + analysis + render, ms (rounds) | {rounds(c.tick_thread_without)} | "
      f"{rounds(c.tick_thread_with)} | {c.per_endpoint_tick_thread * 1e3:.2f} |")
    w(f"| one scrape in its worker thread, CPU ms (wall ms) | - | - | {c.scrape_cpu * 1e3:.2f} "
      f"({c.scrape_wall * 1e3:.2f}) |")
    w(f"| **total CPU per tick per endpoint** | | | **{c.per_endpoint_total * 1e3:.2f}** |")
    w(f"| process CPU across the tick (every thread; noisy on a shared machine), ms (rounds) | "
      f"{rounds(c.tick_without)} | {rounds(c.tick_with)} | {c.per_endpoint_process * 1e3:.2f} |")
    w("")
    w("Each runtime series goes through prometheus-client's parser the first time the endpoint shows it and "
      "is remembered by the line up to its value (4096 series per endpoint); later scrapes look each runtime "
      "line up once and only convert the values of the families a mapping reads. Comments are skipped without "
      "being split, and other families' samples by their first character. Parsing every line with the library "
      "on every scrape cost about 1.5 ms CPU for this body.\n")


def _growth(results: Results, axis: str, fixed: dict[str, int]) -> list[TickResult]:
    rows = [t for t in results.ticks if all(_near(getattr(t, k), v) for k, v in fixed.items()) and not t.pods]
    return sorted(rows, key=lambda t: getattr(t, axis))


def _near(value: int, want: int) -> bool:
    return abs(value - want) <= max(60, want // 10) if want >= 100 else value == want


def _marginal(rows: list[TickResult], axis: str, unit: float, label: str) -> str:
    if len(rows) < 3:
        return ""
    parts = []
    for a, b in pairwise(rows):
        d = (b.tick_cpu.median - a.tick_cpu.median) / max(1, getattr(b, axis) - getattr(a, axis)) * unit
        parts.append(f"{getattr(a, axis)} -> {getattr(b, axis)}: {d:+.3f} {label}")
    first = (rows[1].tick_cpu.median - rows[0].tick_cpu.median) / max(1, getattr(rows[1], axis) - getattr(rows[0], axis))
    second = (rows[2].tick_cpu.median - rows[1].tick_cpu.median) / max(1, getattr(rows[2], axis) - getattr(rows[1], axis))
    noise = 0.0002 / max(1, getattr(rows[2], axis) - getattr(rows[1], axis))  # 0.2 ms of run-to-run noise
    verdict = "at most linear" if second <= 1.3 * max(first, 0.0) + noise else "**faster than linear**"
    return "; ".join(parts) + f" ({verdict})"


def markdown(results: Results) -> str:
    m = results.machine
    ref = _reference(results)
    out: list[str] = []
    w = out.append
    w("# Benchmarks\n")
    w("Generated by `make bench` (`.venv/bin/python -m bench`, code in `bench/`) on "
      f"{time.strftime('%Y-%m-%d')}; the run took {results.duration_seconds / 60:.1f} minutes. Re-run it to "
      "reproduce; every number below comes from that one run.\n")
    if results.quick:
        w("> **Quick run** (`--quick`): few ticks and scrapes, one round; the numbers are rough.\n")
    w("## Machine\n")
    w("| | |\n|---|---|")
    w(f"| CPU | {m.cpu_model}, {m.cores} cores |")
    w(f"| memory | {m.memory_bytes / 2**30:.1f} GiB |")
    w(f"| OS, kernel | {m.os_release}, Linux {m.kernel} |")
    w(f"| Python | {m.python} |")
    w(f"| node_exporter | {results.node_exporter or 'not installed'} |")
    w(f"| prometheus-client | {_version('prometheus-client')} |")
    w(f"| command | `{results.command}` |\n")
    w("## What is measured, and how\n")
    w("- **Host**: real idle processes (`sleep`, argv[0] renamed) are spawned to reach 100 / 1 000 / 5 000 "
      "processes on the host; 40 of them belong to the ten bench workloads (4 each, matched by a `cmdline` "
      "rule); 1, 3 or 10 workloads are declared. GPUs are simulated (`--simulate`, the NVML driver stand-in under the real pynvml binding): 1, 8 or 16, "
      "H100s with every fourth GPU (indices 3, 7, 11, 15) an A100 split into two MIG instances; each GPU "
      "lists two compute processes whose pids are real workload processes.")
    w("- **CPU per tick**: the product's `Sampler` with the product's collectors, analysis and renderer, "
      "ticked in process with its clock stepped one interval per tick (the 10-minute window spans "
      "10 minutes of sampler time); `time.process_time()` across `Sampler.tick()` counts every thread "
      "(collectors run in worker threads). Each scale first fills the whole window "
      f"({ref.warmup_ticks if ref else 601} warm-up ticks), so analysis sees a steady-state window. Analysis and render are "
      "timed with `time.thread_time()` inside the tick; the per-collector split calls each collector's "
      "`collect()` directly on a second set of instances. Median (min-max) over the measured ticks.")
    w("- **Pods churning** (`--kubernetes`, `bench/pods.py`; alone: `python -m bench.ticks --pods 50`): the "
      "reference scale again, as two samplers ticked alternately in one run, one plain and one with the identity "
      "collector naming pods, so both rows meet the same moments of the machine's load. 50 pods, each a real "
      "process moved into a real cgroup v2 cgroup named as the kubelet's systemd driver and containerd name "
      "them (`kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope`), with containerd's bundle "
      "`config.json` (namespace, pod, container annotations) under a temporary root the identity collector "
      "reads as `--path.rootfs` (there is no containerd here); a real gRPC server implementing the kubelet's "
      "pod-resources v1 `List` on a unix socket; each pod's process listed by the GPU driver stand-in on one of "
      "the 8 GPUs (time-sliced, `UUID::N` device IDs; in a MIG instance on the MIG GPUs). Before every tick "
      "one pod ends (process killed, cgroups and bundle removed) and one starts (new pid, pod UID and container "
      "ID), so identity, attribution, the automatic `pod` workloads, analysis and exposition all see the "
      "churn. The kubelet is asked every 5 ticks (its default 5 s at 1 Hz) through the product's poller, "
      "between ticks, its `List` CPU timed apart and spread over those 5 ticks in the target; the identity "
      "collector's CPU is timed inside the ticks. The pods are the bench's children, so the launcher search "
      "reaches 6 ancestors per new pod (on a node, the container's processes and its shim: 2 or 3); the collector "
      "reads them for the first pod and remembers them while they live (docs/workload-identity.md).")
    w("- **Scrapes**: real servers on 127.0.0.1, one at a time: `headroom run` (same config and "
      "scenario), node_exporter with its default collectors, and a bare prometheus-client exporter "
      "(`bench/promclient_exporter.py`: a custom collector building the same families, labels and values "
      "as headroom's exposition at scrape time, default collectors removed). One keep-alive connection "
      "asks for the text format, with and without `Accept-Encoding: gzip` (Prometheus sends gzip), "
      "5 ms between scrapes. Server CPU = /proc/PID/stat utime+stime over the scrape window minus the "
      "server's idle rate (measured over an idle window right before) times the window's length, per "
      "scrape; median (min-max) over the rounds. Latency = request sent to body read, client side.")
    w("- **gzip and headroom**: headroom compresses each snapshot once (on the first gzip scrape after a "
      "tick); a fast client shares that among many scrapes, Prometheus (one scrape per 15-60 s) does not. "
      "The targets therefore charge headroom's gzip scrapes one full compression each "
      "(\"as Prometheus sees it\").\n")
    w("## Targets\n")
    w("| target | measured | |\n|---|---|---|")
    for target, measured, ok in targets(results):
        w(f"| {target} | {measured} | {_yes(ok)} |")
    w("")
    _ticks_section(results, w)
    _nvml_section(results, w)
    _scrape_section(results, w)
    _rss_section(results, w)
    if results.serving is not None:
        serving_section(results.serving, w)
    _profile_section(results, w)
    _diagnosis_section(results, w)
    _gpu_section(results.gpu, w)
    return "\n".join(out).rstrip() + "\n"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _ticks_section(results: Results, w: Any) -> None:
    w("## CPU per tick\n")
    w("| GPUs | processes | workloads | CPU per tick ms | wall per tick ms | analysis ms | render ms | "
      "NVML stand-in ms (apart) | samples | bytes |\n|---:|---:|---:|---|---|---|---|---|---:|---:|")
    for t in results.ticks:
        standin = _ms(t.tick_standin, 3) if getattr(t, "tick_standin", None) is not None else "-"
        w(f"| {t.gpus} | {t.processes} | {_workloads_cell(t)} | {_ms(t.tick_cpu)} | {_ms(t.tick_wall)} | "
          f"{_ms(t.analysis_cpu, 3)} | {_ms(t.render_cpu, 3)} | {standin} | {t.samples} | {t.exposition_bytes} |")
    names = sorted({n for t in results.ticks for n in t.collector_cpu}, key=_collector_order)
    w("\nCPU per `collect()` by collector, ms (median; called directly, thread CPU):\n")
    w("| GPUs | processes | workloads | " + " | ".join(names) + " |")
    w("|---:|---:|---:|" + "---:|" * len(names))
    for t in results.ticks:
        cells = [f"{t.collector_cpu[n].median * 1e3:.3f}" if n in t.collector_cpu else "" for n in names]
        w(f"| {t.gpus} | {t.processes} | {_workloads_cell(t)} | " + " | ".join(cells) + " |")
    ref = _reference(results)
    if ref is not None:
        w("\nWall time per collector inside the reference ticks (`headroom_collector_duration_seconds`, "
          "median ms): " + ", ".join(f"{n} {s.median * 1e3:.2f}" for n, s in
                                     sorted(ref.collector_wall.items(), key=lambda x: _collector_order(x[0]))) + ".")
        w(f"Helper threads between ticks (PCIe poller, XID watcher on the driver stand-in): "
          f"{ref.background_cpu_per_second * 100:.2f} % of a core.\n")
    w("How cost grows (tick CPU, median):\n")
    g, p, wl = 8, 1000, 3
    lines = [
        ("GPUs", _marginal(_growth(results, "gpus", {"processes": p, "workloads": wl}), "gpus", 1e3, "ms per GPU")),
        ("processes", _marginal(_growth(results, "processes", {"gpus": g, "workloads": wl}), "processes", 1e6,
                                "µs per process")),
        ("workloads", _marginal(_growth(results, "workloads", {"gpus": g, "processes": p}), "workloads", 1e3,
                                "ms per workload")),
    ]
    for axis, text in lines:
        if text:
            w(f"- {axis}: {text}")
    w("")


def _workloads_cell(t: TickResult) -> str:
    return f"{t.workloads} + {t.pods} pods churning" if t.pods else str(t.workloads)


def _collector_order(name: str) -> tuple[int, str]:
    order = ["nvml", "cpu", "memory", "shm", "disk", "net", "processes"]
    return (order.index(name) if name in order else len(order), name)


def _nvml_section(results: Results, w: Any) -> None:
    ref = _reference(results) or next((t for t in results.ticks if t.nvml is not None), None)
    if ref is None or ref.nvml is None:
        return
    n = ref.nvml
    w(f"## NVML calls per GPU per tick ({ref.gpus} simulated GPUs, fake library)\n")
    groups = list(n.by_function)
    functions = sorted({f for g in groups for f in n.by_function[g]})
    w("| function | " + " | ".join(f"{g} GPU" for g in groups) + " |\n|---|" + "---:|" * len(groups))
    for f in functions:
        w(f"| `{f}` | " + " | ".join(f"{n.by_function[g].get(f, 0):.2f}" for g in groups) + " |")
    w("| **total per GPU per tick** | " + " | ".join(f"**{n.per_gpu[g]:.2f}**" for g in groups) + " |\n")
    w(f"Library-level calls (not tied to a GPU) per tick: {n.library_per_tick:.2f}. Steady state: identity, "
      "max clocks, max PCIe link and the supported clock-event mask are cached; the MIG layout is re-read "
      "every 30 s and unsupported queries re-probed every 10 min (not in these counts).\n")
    w("Calls known to block, and where they run (budget: **0** on the tick):\n")
    w("| function | blocks | calls on the tick | made by |\n|---|---|---:|---|")
    for f, why in BLOCKING_CALLS.items():
        if f in n.blocking_off_tick or f in n.blocking_on_tick:
            w(f"| `{f}` | {why} | {n.blocking_on_tick.get(f, 0)} | {', '.join(n.blocking_off_tick.get(f, []))} |")
    w("\nThe PCIe poller reads one GPU at a time, each every `pcie_poll_interval` (5 s): 2 x 20 ms of "
      "blocking per GPU per 5 s in its own thread, so 16 GPUs keep it blocked 0.64 s of every 5 s; the tick "
      "reads its last values.\n")


def _scrape_row(s: ScrapeResult, ref: TickResult | None, name: str | None = None) -> str:
    cpu = s.cpu_per_scrape.scaled(1e3).text(3)
    if s.server == "headroom" and s.encoding == "gzip" and ref is not None:
        cpu += f"; as Prometheus sees it {_headroom_scrape_cpu(s, ref) * 1e3:.3f}"
    return (f"| {name or s.server} | {s.encoding} | {s.samples} | {s.body_bytes} | {s.p50 * 1e3:.2f} | "
            f"{s.p99 * 1e3:.2f} | {cpu} | {s.idle_cpu_per_second.median * 100:.2f} | {s.rss_end / MIB:.1f} |")


def _scrape_section(results: Results, w: Any) -> None:
    if not results.scrapes:
        return
    ref = _reference(results)
    w("## Scrapes, side by side (same run, same machine)\n")
    w("| server | encoding | samples | bytes sent | p50 ms | p99 ms | server CPU per scrape ms | "
      "idle CPU % of a core | RSS MiB |\n|---|---|---:|---:|---:|---:|---|---:|---:|")
    for s in results.scrapes:
        w(_scrape_row(s, ref))
    w("\nRatios (the other server / headroom; above 1 means headroom is cheaper or faster):\n")
    w("| compared with | encoding | CPU per scrape | p50 | p99 |\n|---|---|---:|---:|---:|")
    for other in ("node_exporter", "prometheus-client"):
        for enc in ("gzip", "identity"):
            h, o = _scrape(results, "headroom", enc), _scrape(results, other, enc)
            if h is None or o is None:
                continue
            mine = _headroom_scrape_cpu(h, ref)
            cpu = f"{o.cpu_per_scrape.median / mine:.1f}x" if mine > 0 else "n/a"
            w(f"| {other} | {enc} | {cpu} | {o.p50 / h.p50:.1f}x | {o.p99 / h.p99:.1f}x |")
    w("\nnode_exporter serves its own (different) samples; the prometheus-client exporter serves headroom's "
      "exact samples. Idle CPU of headroom is the whole agent sampling at 1 Hz with nobody scraping (every "
      "thread, incl. the driver stand-in's XID polling every 20 ms, which the real driver does in the kernel), "
      "measured in the server's first minute, before its window is full: the steady-state tick cost is the "
      "tick table's.\n")
    if results.scale_scrapes:
        w("### Scrape cost across host sizes (headroom)\n")
        w("| GPUs | processes | encoding | samples | bytes sent | p50 ms | p99 ms | CPU per scrape ms | "
          "µs CPU per KB sent | idle CPU % | RSS MiB |\n|---:|---:|---|---:|---:|---:|---:|---|---:|---:|---:|")
        rows = [(r.gpus, r.processes, r.result) for r in results.scale_scrapes]
        ref_rows = [s for s in results.scrapes if s.server == "headroom"]
        all_rows = rows + [(8, ref.processes if ref else 1000, s) for s in ref_rows]
        for gpus, procs, s in sorted(all_rows, key=lambda r: (r[0], r[1], r[2].encoding)):
            per_kb = s.cpu_per_scrape.median * 1e6 / max(1, s.body_bytes / 1024)
            w(f"| {gpus} | {procs} | {s.encoding} | {s.samples} | {s.body_bytes} | {s.p50 * 1e3:.2f} | "
              f"{s.p99 * 1e3:.2f} | {s.cpu_per_scrape.scaled(1e3).text(3)} | {per_kb:.1f} | "
              f"{s.idle_cpu_per_second.median * 100:.2f} | {s.rss_end / MIB:.1f} |")
        w("\nA scrape sends bytes rendered at the last tick: its cost follows the bytes served (GPUs, "
          "workloads), not the host's process count. These rows are one round each: CPU per scrape carries "
          "about +-0.1 ms of noise from subtracting the ticks' CPU (0 means the scrapes cost less than that).\n")


def _rss_section(results: Results, w: Any) -> None:
    if not results.window_rss:
        return
    w("## Memory while the window fills\n")
    w("`headroom run` (3 workloads, same host) with a short interval and window, so that it holds the "
      "601 samples of the default 10-minute window at 1 s within a minute (8 GPUs: 50 ms into 30 s; "
      "16 GPUs, whose ticks take ~40 ms: 100 ms into 60 s).\n")
    for gpus, points in sorted(results.window_rss.items()):
        w(f"| {gpus} GPUs ({results.window_interval.get(gpus, '?')} ticks), seconds | " + " | ".join(f"{t:.0f}" for t, _ in points) + " |")
        w("|---|" + "---:|" * len(points))
        w("| RSS MiB | " + " | ".join(f"{r / MIB:.1f}" for _, r in points) + " |\n")
        full_at = results.window_full_at.get(gpus)
        if len(points) > 1 and full_at is not None:
            grown = points[-1][1] - points[0][1]
            w(f"The window held {WINDOW_SAMPLES} samples after {full_at:.0f} s (overrunning ticks are skipped); "
              f"the full window adds {grown / MIB:.1f} MiB at {gpus} GPUs, "
              f"{grown / WINDOW_SAMPLES / 1024:.0f} KiB per sample.\n")
    w(_why_rss(results))


def _why_rss(results: Results) -> str:
    """What the agent's resident memory is made of, with this run's per-sample and per-GPU figures."""
    grown = {g: (p[-1][1] - p[0][1]) / WINDOW_SAMPLES for g, p in results.window_rss.items()
             if len(p) > 1 and results.window_full_at.get(g) is not None}
    start = min(p[0][1] for p in results.window_rss.values()) if results.window_rss else 0
    per_gpu = ""
    if len(grown) >= 2:
        (g0, b0), (g1, b1) = sorted(grown.items())[0], sorted(grown.items())[-1]
        per_gpu = f" (here {b0 / 1024:.0f} KiB at {g0} GPUs, {b1 / 1024:.0f} KiB at {g1}: {(b1 - b0) / (g1 - g0) / 1024:.1f} KiB per GPU)"
    return (
        f"Why RSS is what it is: the {start / MIB:.0f} MiB before the window fills are the interpreter, the modules "
        "`headroom run` imports (the NVML binding, structlog with the asyncio it imports, PyYAML, psutil, RE2, "
        "the TLS and hashing libraries; prometheus-client's parser only once a serving runtime is read) and its "
        "threads. Each sample then keeps what changed since the tick before" + per_gpu + ": per GPU its "
        "GpuSample (about 0.5 KiB of fields) and the readings that move every tick (utilization, memory, power, "
        "energy, PCIe), plus the host collectors' samples. Values that did not change (a GPU's limits, "
        "thresholds and clock-event totals while no reason is active, an idle process's CPU seconds, PSI and load "
        "averages between kernel updates, idle interfaces and disks, device names) are the previous tick's objects "
        "(`samples.share_unchanged`); all threads share one malloc arena (`daemon.limit_malloc_arenas`), so "
        "what one thread frees another reuses, and the free pages of the C heap go back to the system every 10 s "
        "(`daemon.HeapTrim`).\n")


def _diagnosis_section(results: Results, w: Any) -> None:
    """Why a target is missed, where the run shows a known cause (each note is tied to its symptom)."""
    notes = []
    g, i = _scrape(results, "headroom", "gzip"), _scrape(results, "headroom", "identity")
    if g is not None and i is not None and g.p50 > 0.030 and i.p50 < 0.005:
        notes.append(
            f"**gzip scrapes wait ~40 ms** (p50 {g.p50 * 1e3:.1f} ms against {i.p50 * 1e3:.2f} ms without gzip) "
            "while using little CPU: Nagle's algorithm holds the small compressed body back until the client "
            "ACKs the header segment, and the client delays that ACK by 40 ms. "
            "`BaseHTTPRequestHandler` writes headers and body separately and leaves "
            "`disable_nagle_algorithm` False. Setting `disable_nagle_algorithm = True` on "
            "`exposition/server.py`'s `Handler` (TCP_NODELAY) took p50 from 44 ms to 0.27 ms in a check "
            "against the real server class (bench run, 6 KB body).")
    ref = _reference(results)
    if ref is not None and ref.tick_cpu.median >= TICK_TARGET:
        parts = sorted([(ref.analysis_cpu.median, "analysis"), (ref.render_cpu.median, "render")]
                       + [(s.median, f"collector {n}") for n, s in ref.collector_cpu.items()], reverse=True)
        notes.append("**CPU per tick over 10 ms**: the largest parts are " + ", ".join(
            f"{name} {v * 1e3:.2f} ms" for v, name in parts[:4]) + " (see the profile above).")
        if ref.analysis_cpu.median > 0.003:
            notes.append(
                f"Analysis costs {ref.analysis_cpu.median * 1e3:.2f} ms at the median: each tick reads the short "
                "window (15 samples) per GPU, host and workload and runs every scoring rule, each writing its "
                "evidence sentence, for every GPU and workload; every 5 s the long-window scores are refreshed "
                "from at most 60 samples of the long window (`signals.thinned`), which is what its maximum shows. "
                "The profile above has the split.")
        proc = ref.collector_cpu.get("processes")
        if proc is not None and proc.median > 0.001:
            notes.append(
                "The processes collector lists /proc on its first tick and every 30 s (at 5 000 processes the "
                "listing alone, `os.scandir` + `inode()`, mostly kernel time in getdents, is ~6 ms); other ticks "
                "look only at the pids allocated since the last one (`python -m bench.processes`).")
    if "faster than linear" in _marginal(_growth(results, "gpus", {"processes": 1000, "workloads": 3}), "gpus", 1e3, ""):
        notes.append(
            "**GPUs grow tick cost faster than linearly** in this run: compare the analysis, render and "
            "per-collector columns of the 8- and 16-GPU rows above (on a shared machine one noisy row can "
            "do it; rerun before reading much into it).")
    big = max(results.window_rss, default=None)
    if big is not None and results.window_full_at.get(big) is not None and results.window_rss[big][-1][1] >= RSS_TARGET:
        points = results.window_rss[big]
        per_sample = (points[-1][1] - points[0][1]) / WINDOW_SAMPLES
        notes.append(
            f"**RSS at {big} GPUs with a full window is {points[-1][1] / MIB:.1f} MiB**: the agent starts at "
            f"{points[0][1] / MIB:.1f} MiB and each of the window's {WINDOW_SAMPLES} samples keeps "
            f"~{per_sample / 1024:.0f} KiB (per GPU per sample: its GpuSample and the readings that changed; "
            "unchanged values are already shared between samples). Keeping fewer GPU fields per sample in "
            "the window (a GpuSample has ~60, each a slot even when unset) would bound it.")
    pods = _with_pods(results)
    if pods is not None and pods.tick_cpu_with_kubelet >= TICK_TARGET and pods.pods_added is not None:
        parts = [f"the identity collector {pods.collector_cpu['identity'].median * 1e3:.2f} ms (inside the tick)"
                 if "identity" in pods.collector_cpu else ""]
        if ref is not None:
            for label, mine, base in (("analysis", pods.analysis_cpu, ref.analysis_cpu),
                                      ("render", pods.render_cpu, ref.render_cpu),
                                      ("the NVML collector", pods.collector_cpu.get("nvml"), ref.collector_cpu.get("nvml"))):
                if mine is not None and base is not None:
                    parts.append(f"{label} {(mine.median - base.median) * 1e3:+.2f} ms")
        notes.append(
            f"**CPU per tick with {pods.pods} pods churning over 10 ms**: the pods add "
            f"{pods.pods_added.median * 1e3:.2f} ms per tick (median of the alternating pairs) to a reference tick of "
            f"{pods.without_pods.median * 1e3 if pods.without_pods else 0:.2f} ms: "
            + ", ".join(x for x in parts if x)
            + f" (the last three against the reference row), and the kubelet's List "
            f"{(pods.tick_cpu_with_kubelet - pods.tick_cpu.median) * 1e3:.2f} ms per tick in its own thread; "
            f"{pods.workloads_auto.median if pods.workloads_auto else 0:.0f} more workloads are analysed and "
            f"rendered ({pods.exposition_bytes} bytes of exposition). The target is met once the reference tick "
            "is under 10 ms minus what the pods add.")
    growth = _marginal(_growth(results, "workloads", {"gpus": 8, "processes": 1000}), "workloads", 1e3, "")
    if "faster than linear" in growth:
        notes.append(
            "**Workloads grow tick cost faster than linearly** in this run: compare the 1-, 3- and 10-workload "
            "rows above (on a shared machine one noisy row can do it). Per workload and sample of the short "
            "window, `signals._entry` scans that sample's workloads, a term in workloads^2 that is small at 10.")
    if i is not None and i.p50 < P50_TARGET and i.p99 >= P99_TARGET:
        notes.append(
            f"**p99 without gzip is {i.p99 * 1e3:.1f} ms**: the median is fast; the slow 1-2 % are scrapes "
            "that arrive during a tick, whose collector threads and analysis hold the GIL for ~20-40 ms of "
            "wall time each second. Lowering `sys.setswitchinterval` to 1 ms did not change p99 (checked: "
            "5.85 -> 5.77 ms); a cheaper tick is the lever.")
    if not notes:
        return
    w("## Why targets are missed\n")
    for n in notes:
        w(f"- {n}")
    w("")


def _profile_section(results: Results, w: Any) -> None:
    ref = _reference(results)
    if ref is None or not ref.profile:
        return
    missed = ref.tick_cpu.median >= TICK_TARGET
    w("## Where a tick's time goes (reference scale)\n")
    if missed:
        w("The tick target is missed; this is where the time goes.\n")
    w("```\n" + ref.profile + "\n```\n")


def _gpu_section(g: GpuResult | None, w: Any) -> None:
    w("## GPU section (real NVIDIA GPU)\n")
    if g is None or g.absent:
        w(f"**Not run**: {g.absent if g else 'not attempted'}. No GPU was available to this run, so there "
          "are no real NVML numbers here. On a machine with an NVIDIA driver and GPU, `make bench` (or "
          "`.venv/bin/python -m bench.gpu`) measures the product's NVML collector against the real library "
          "(CPU and wall per `collect()`, calls per GPU per tick) and one "
          f"`{' '.join(NVIDIA_SMI_QUERY)}` spawn for comparison, and records the GPU model and driver.\n")
        return
    w(f"GPUs: {', '.join(g.gpu_names)}; driver {g.driver}.\n")
    w("| measure | value |\n|---|---|")
    w(f"| NVML collector CPU per tick, all GPUs (ms) | {_ms(g.collect_cpu, 3)} |")
    w(f"| NVML collector wall per tick, all GPUs (ms) | {_ms(g.collect_wall, 3)} |")
    n = max(1, len(g.gpu_names))
    if g.collect_cpu is not None:
        w(f"| per GPU, CPU ms per tick | {g.collect_cpu.median * 1e3 / n:.3f} |")
    w(f"| NVML calls per GPU per tick | {g.calls_per_gpu_per_tick:.1f} |")
    if g.smi_wall is not None:
        w(f"| one `nvidia-smi --query-gpu` spawn, wall ms | {_ms(g.smi_wall, 1)} |")
        w(f"| one `nvidia-smi --query-gpu` spawn, CPU ms | {_ms(g.smi_cpu, 1)} |")
    else:
        w(f"| nvidia-smi | {g.smi_error} |")
    w("")
