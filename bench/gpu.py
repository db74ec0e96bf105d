"""The GPU section: per-GPU NVML cost per tick on a real NVIDIA GPU, next to one nvidia-smi spawn; and the
real-GPU check (``python -m bench.gpu --check``, see below).

Runs only where the real library initialises (libnvidia-ml + a GPU); anywhere else ``measure`` returns
a result whose ``absent`` says why, and no number is made up. The collector is the product's
``NvmlCollector`` on the real ``pynvml``; its library is wrapped to count calls per function.
"""

from __future__ import annotations

import resource
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.stats import Spread

NVIDIA_SMI_QUERY = [
    "nvidia-smi",
    "--query-gpu=index,uuid,name,utilization.gpu,utilization.memory,memory.used,memory.total,power.draw,"
    "temperature.gpu,clocks.sm,clocks_event_reasons.active,pcie.link.gen.current",
    "--format=csv,noheader,nounits",
]


@dataclass(frozen=True)
class GpuResult:
    absent: str | None = None  # why the section did not run (None: it ran)
    gpu_names: tuple[str, ...] = ()
    driver: str = ""
    collect_cpu: Spread | None = None  # seconds of thread CPU per collect() (all GPUs)
    collect_wall: Spread | None = None
    calls_per_gpu_per_tick: float = 0.0
    calls_by_function: dict[str, float] = field(default_factory=dict)
    smi_wall: Spread | None = None  # one nvidia-smi --query-gpu spawn, seconds
    smi_cpu: Spread | None = None  # its CPU (children rusage), seconds
    smi_error: str | None = None


class _CountingLibrary:
    """pynvml with every call counted by function name: the binding's functions, and the entry points the
    collector calls through the binding's function lookup (the per-tick field-values read) by their C name."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        self.calls: Counter[str] = Counter()

    def _counted(self, name: str, value: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return value(*args, **kwargs)
        return counted

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._lib, name)
        if name == "_nvmlGetFunctionPointer":
            return lambda function: self._counted(function, value(function))
        if name.startswith("nvml") and callable(value):
            return self._counted(name, value)
        return value


def probe() -> str | None:
    """None when a real NVIDIA GPU answers through NVML, else why not. The simulated rows of ``make bench``
    install the driver stand-in as the binding's library in this process (simulation/nvml_driver/): NVML
    then initialises and lists GPUs that do not exist, so the stand-in is refused by name, never measured
    as a GPU (bench/run.py measures this section before any simulated row)."""
    try:
        import pynvml  # the bench measures the real library (bench/* may import pynvml)

        from headroom.simulation.nvml_driver import NvmlDriver

        if isinstance(pynvml.nvmlLib, NvmlDriver):
            return ("the NVML library loaded in this process is the simulation's driver stand-in, not "
                    "libnvidia-ml: no real GPU to measure")
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return f"NVML did not initialise ({type(exc).__name__}: {exc}): no NVIDIA driver or GPU on this machine"
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            return "NVML initialised but reports no GPU"
    finally:
        pynvml.nvmlShutdown()
    return None


def measure(ticks: int = 30, smi_runs: int = 5) -> GpuResult:
    """Time the product's NVML collector on the real GPUs, and nvidia-smi, or say why it cannot."""
    why = probe()
    if why is not None:
        return GpuResult(absent=why)
    import pynvml

    from headroom.sources import SourceContext
    from headroom.sources.nvml import NvmlCollector

    collector = NvmlCollector(SourceContext())
    counting = _CountingLibrary(pynvml)
    collector.lib = counting  # before the first collect(), so every call goes through the counter
    try:
        first = collector.collect()
        for _ in range(3):
            collector.collect()
        counting.calls.clear()
        cpu, wall = [], []
        for _ in range(ticks):
            c, w = time.thread_time(), time.perf_counter()
            collector.collect()
            cpu.append(time.thread_time() - c)
            wall.append(time.perf_counter() - w)
            time.sleep(0.05)
        tick_calls = {k: v for k, v in counting.calls.items() if k not in ("nvmlDeviceGetPcieThroughput",
                                                                          "nvmlEventSetWait", "nvmlEventSetWait_v2")}
    finally:
        collector.close()
    n = max(1, len(first.gpus))
    by_function = {k: v / ticks / n for k, v in sorted(tick_calls.items())}
    smi_wall, smi_cpu, smi_error = _nvidia_smi(smi_runs)
    return GpuResult(
        gpu_names=tuple(g.name for g in first.gpus), driver=first.driver_version or "",
        collect_cpu=Spread.of(cpu), collect_wall=Spread.of(wall),
        calls_per_gpu_per_tick=sum(by_function.values()), calls_by_function=by_function,
        smi_wall=smi_wall, smi_cpu=smi_cpu, smi_error=smi_error,
    )


def _nvidia_smi(runs: int) -> tuple[Spread | None, Spread | None, str | None]:
    if shutil.which("nvidia-smi") is None:
        return None, None, "nvidia-smi not on PATH"
    wall, cpu = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        r = subprocess.run(NVIDIA_SMI_QUERY, capture_output=True, timeout=60)
        wall.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if r.returncode != 0:
            return None, None, f"nvidia-smi exited {r.returncode}: {r.stderr.decode(errors='replace')[:200]}"
    return Spread.of(wall), Spread.of(cpu), None


# ----------------------------------------------------------------------------------- the GPU check
# `python -m bench.gpu --check`: on a machine with an NVIDIA GPU and no package access (standard library
# and this project only), in under 8 minutes, a pass/fail table of what headroom exports against
# nvidia-smi read at the same moment, per-process memory against --query-compute-apps, GPM and NVLink
# presence, and the agent under a known load: a busy kernel launched through the CUDA driver API
# (libcuda.so.1, which ships with the driver) via ctypes from PTX text.

SMI_FIELDS = (
    "index", "uuid", "utilization.gpu", "memory.used", "memory.total", "power.draw", "enforced.power.limit",
    "temperature.gpu", "temperature.memory", "clocks.sm", "clocks.max.sm", "clocks.mem", "clocks.max.mem",
    "pstate", "fan.speed", "pcie.link.gen.current", "pcie.link.width.current", "pcie.link.gen.max",
    "pcie.link.width.max", "mig.mode.current",
)  # fmt: skip
MIB = 2**20

# (headroom field, nvidia-smi field, convert smi value to headroom's unit, tolerance: (absolute, relative))
COMPARED: tuple[tuple[str, str, Any, tuple[float, float]], ...] = (
    ("memory_total_bytes", "memory.total", lambda v: v * MIB, (MIB, 0.0)),
    ("memory_used_bytes", "memory.used", lambda v: v * MIB, (64 * MIB, 0.02)),
    ("utilization_ratio", "utilization.gpu", lambda v: v / 100, (0.15, 0.0)),  # sampled at different moments
    ("power_watts", "power.draw", float, (5.0, 0.10)),
    ("power_limit_watts", "enforced.power.limit", float, (0.5, 0.0)),
    ("temperature_celsius", "temperature.gpu", float, (2.0, 0.0)),
    ("memory_temperature_celsius", "temperature.memory", float, (2.0, 0.0)),
    ("sm_clock_hertz", "clocks.sm", lambda v: v * 1e6, (0.0, 0.10)),
    ("sm_clock_max_hertz", "clocks.max.sm", lambda v: v * 1e6, (1e6, 0.0)),
    ("memory_clock_hertz", "clocks.mem", lambda v: v * 1e6, (0.0, 0.05)),
    ("memory_clock_max_hertz", "clocks.max.mem", lambda v: v * 1e6, (1e6, 0.0)),
    ("performance_state", "pstate", float, (0.0, 0.0)),
    ("fan_speed_ratio", "fan.speed", lambda v: v / 100, (0.05, 0.0)),
    ("pcie_link_generation", "pcie.link.gen.current", float, (0.0, 0.0)),
    ("pcie_link_width", "pcie.link.width.current", float, (0.0, 0.0)),
    ("pcie_link_max_generation", "pcie.link.gen.max", float, (0.0, 0.0)),
    ("pcie_link_max_width", "pcie.link.width.max", float, (0.0, 0.0)),
)  # fmt: skip

# A kernel that spins on the SM clock for `cycles` cycles: every launched block keeps one SM busy.
SPIN_PTX = b"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry spin(.param .u64 cycles)
{
    .reg .u64 %rd<5>;
    .reg .pred %p;
    ld.param.u64 %rd1, [cycles];
    mov.u64 %rd2, %clock64;
SPIN:
    mov.u64 %rd3, %clock64;
    sub.u64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p, %rd4, %rd1;
    @%p bra SPIN;
    ret;
}
"""


@dataclass
class Check:
    what: str
    ok: bool | None  # None: not applicable on this machine (shown as "n/a", neither pass nor fail)
    detail: str


def smi_number(text: str) -> float | None:
    """A number from nvidia-smi's csv,nounits output; None for [N/A], [Not Supported], Disabled ..."""
    text = text.strip()
    if text.startswith("P") and text[1:].isdigit():  # pstate P0..P15
        return float(text[1:])
    try:
        return float(text)
    except ValueError:
        return None


def parse_smi(text: str, fields: Sequence[str]) -> list[dict[str, str]]:
    rows = []
    for line in text.strip().splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(fields):
            rows.append(dict(zip(fields, values, strict=True)))
    return rows


def within(ours: float, theirs: float, tolerance: tuple[float, float]) -> bool:
    absolute, relative = tolerance
    return abs(ours - theirs) <= max(absolute, relative * abs(theirs)) + 1e-9


def compare_gpu(gpu: Any, smi: Mapping[str, str]) -> list[Check]:
    """One row per compared series of one GPU: headroom's value against nvidia-smi's, units converted.
    A series both sides lack is n/a; one side only is a failure (absent must mean unsupported)."""
    out = []
    for ours_name, smi_name, convert, tolerance in COMPARED:
        ours = getattr(gpu, ours_name)
        raw = smi_number(smi.get(smi_name, ""))
        theirs = convert(raw) if raw is not None else None
        what = f"GPU {gpu.index} {ours_name} vs {smi_name}"
        if ours is None and theirs is None:
            out.append(Check(what, None, "absent on both"))
        elif ours is None or theirs is None:
            out.append(Check(what, False, f"headroom {ours!r}, nvidia-smi {smi.get(smi_name)!r}"))
        else:
            out.append(Check(what, within(float(ours), theirs, tolerance), f"headroom {ours:.6g}, nvidia-smi {theirs:.6g}"))
    return out


def compare_processes(gpus: Sequence[Any], apps: Sequence[Mapping[str, str]]) -> list[Check]:
    """Per-process memory: every compute app nvidia-smi lists, with its memory, in headroom's lists."""
    ours = {(g.uuid, p.pid): p.used_memory_bytes for g in gpus for p in g.processes}
    ours.update({(g.uuid, p.pid): p.used_memory_bytes for g in gpus for m in g.mig_instances for p in m.processes})
    out = []
    for app in apps:
        pid, uuid, used = int(app["pid"]), app["gpu_uuid"], smi_number(app["used_memory"])
        key = (uuid, pid)
        what = f"process {pid} on {uuid[:12]} memory"
        if key not in ours:
            out.append(Check(what, False, "listed by nvidia-smi, not by headroom"))
        elif used is None or ours[key] is None:
            out.append(Check(what, used is None and ours[key] is None, f"headroom {ours[key]}, nvidia-smi {app['used_memory']}"))
        else:
            out.append(Check(what, within(ours[key], used * MIB, (MIB, 0.0)), f"headroom {ours[key] / MIB:.0f} MiB, nvidia-smi {used:.0f} MiB"))
    return out


def _table(checks: Sequence[Check]) -> str:
    width = max((len(c.what) for c in checks), default=10)
    lines = [f"{'check'.ljust(width)}  result  detail", f"{'-' * width}  ------  ------"]
    for c in checks:
        mark = "n/a" if c.ok is None else ("PASS" if c.ok else "FAIL")
        lines.append(f"{c.what.ljust(width)}  {mark:6}  {c.detail}")
    failed = sum(1 for c in checks if c.ok is False)
    passed = sum(1 for c in checks if c.ok)
    lines.append(f"\n{passed} passed, {failed} failed, {len(checks) - passed - failed} n/a")
    return "\n".join(lines)


class _Cuda:
    """The CUDA driver API through ctypes: a context on one GPU, the spin kernel, a memory allocation."""

    def __init__(self, ordinal: int) -> None:
        import ctypes

        self.ct = ctypes
        self.lib = ctypes.CDLL("libcuda.so.1")
        self._ok(self.lib.cuInit(0), "cuInit")
        device = ctypes.c_int()
        self._ok(self.lib.cuDeviceGet(ctypes.byref(device), ordinal), "cuDeviceGet")
        self.ctx = ctypes.c_void_p()
        self._ok(self.lib.cuCtxCreate_v2(ctypes.byref(self.ctx), 0, device), "cuCtxCreate")
        module = ctypes.c_void_p()
        self._ok(self.lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(SPIN_PTX)), "cuModuleLoadData")
        self.fn = ctypes.c_void_p()
        self._ok(self.lib.cuModuleGetFunction(ctypes.byref(self.fn), module, b"spin"), "cuModuleGetFunction")
        sms = ctypes.c_int()
        self._ok(self.lib.cuDeviceGetAttribute(ctypes.byref(sms), 16, device), "cuDeviceGetAttribute")  # MULTIPROCESSOR_COUNT
        self.sms = sms.value
        rate = ctypes.c_int()
        self._ok(self.lib.cuDeviceGetAttribute(ctypes.byref(rate), 13, device), "cuDeviceGetAttribute")  # CLOCK_RATE kHz
        self.clock_hz = rate.value * 1000

    def _ok(self, code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"{what} failed with CUDA error {code}")

    def alloc(self, size: int) -> Any:
        pointer = self.ct.c_uint64()
        self._ok(self.lib.cuMemAlloc_v2(self.ct.byref(pointer), self.ct.c_size_t(size)), "cuMemAlloc")
        return pointer

    def spin(self, blocks: int, seconds: float) -> None:
        """One launch of ``blocks`` blocks of 128 threads, each spinning ``seconds``; waits for it."""
        ct = self.ct
        cycles = ct.c_uint64(int(self.clock_hz * seconds))
        params = (ct.c_void_p * 1)(ct.cast(ct.byref(cycles), ct.c_void_p))
        self._ok(self.lib.cuLaunchKernel(self.fn, blocks, 1, 1, 128, 1, 1, 0, None, params, None), "cuLaunchKernel")
        self._ok(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")


def _load_phase(collector: Any, cuda: _Cuda, blocks: int, seconds: float, index: int) -> list[Any]:
    """Run the spin kernel with ``blocks`` blocks for ``seconds`` while the collector samples every second."""
    import threading

    from headroom.samples import Sample, SourceResult

    stop = threading.Event()
    errors: list[BaseException] = []

    def load() -> None:
        try:
            while not stop.is_set():
                cuda.spin(blocks, 0.2)
        except BaseException as exc:  # reported, not raised in the thread
            errors.append(exc)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    window = []
    try:
        time.sleep(1.0)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(1.0)
            data = collector.collect()
            now = time.monotonic()
            window.append(Sample(timestamp=time.time(), monotonic=now, sources={"nvml": SourceResult("nvml", True, 0.0, data)}))
    finally:
        stop.set()
        worker.join(5)
    if errors:
        raise RuntimeError(f"the load failed: {errors[0]}")
    return window


def check(load_seconds: float = 20.0) -> tuple[str, bool]:
    """The pass/fail table (text) and whether nothing failed; the reason when no GPU answers."""
    why = probe()
    if why is not None:
        return f"GPU check not run: {why}", False
    if shutil.which("nvidia-smi") is None:
        return "GPU check not run: nvidia-smi not on PATH", False
    import os

    from headroom.analysis.bottleneck import DEFAULT_THRESHOLDS, rule_gpu_compute
    from headroom.analysis.signals import gpu_signals
    from headroom.sources import SourceContext
    from headroom.sources.nvml import NvmlCollector

    checks: list[Check] = []
    collector = NvmlCollector(SourceContext())
    try:
        collector.collect()
        time.sleep(1.0)
        sample = collector.collect()  # the second read has the per-tick averages (GPM, PCIe counters)
        smi = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        rows = {r["uuid"]: r for r in parse_smi(smi.stdout, SMI_FIELDS)}
        for g in sample.gpus:
            if g.uuid not in rows:
                checks.append(Check(f"GPU {g.index} listed by nvidia-smi", False, g.uuid))
                continue
            checks.extend(compare_gpu(g, rows[g.uuid]))
            gpm_expected = any(k in g.name for k in ("H100", "H200", "H800", "H20", "GH200", "B100", "B200", "GB200"))
            has_gpm = g.sm_active_ratio is not None
            checks.append(Check(f"GPU {g.index} GPM present ({g.name})", has_gpm or not gpm_expected,
                                f"SM active {g.sm_active_ratio}, occupancy {g.sm_occupancy_ratio}, "
                                f"tensor {g.tensor_active_ratio}, DRAM {g.dram_active_ratio}"))  # fmt: skip
            links = subprocess.run(["nvidia-smi", "nvlink", "--status", "-i", str(g.index)], capture_output=True, text=True, timeout=60)
            smi_links = sum(1 for line in links.stdout.splitlines() if line.strip().startswith("Link ") and "inactive" not in line.lower())
            ours = sum(1 for link in g.nvlink_links if link.up)
            checks.append(Check(f"GPU {g.index} active NVLink links", ours == smi_links,
                                f"headroom {ours}, nvidia-smi nvlink --status {smi_links}"))
        cuda = _Cuda(int(os.environ.get("HEADROOM_CHECK_GPU", "0")))
        target = sample.gpus[int(os.environ.get("HEADROOM_CHECK_GPU", "0"))]
        held = cuda.alloc(1 << 30)  # 1 GiB the agent must attribute to this process
        wide = _load_phase(collector, cuda, cuda.sms * 4, load_seconds, target.index)
        apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        last = wide[-1].data("nvml")
        checks.extend(compare_processes(last.gpus, parse_smi(apps.stdout, ("pid", "gpu_uuid", "used_memory"))))
        mine = [p for g in last.gpus if g.uuid == target.uuid for p in g.processes if p.pid == os.getpid()]
        checks.append(Check("load: this process listed with >= 1 GiB", bool(mine) and (mine[0].used_memory_bytes or 0) >= 1 << 30,
                            f"{mine[0] if mine else 'not listed'}"))  # fmt: skip
        signals = next(s for s in gpu_signals(wide, 60.0) if s.uuid == target.uuid)
        score, text = rule_gpu_compute(signals, DEFAULT_THRESHOLDS)
        checks.append(Check(f"load: {cuda.sms * 4} blocks on {cuda.sms} SMs: busy >= 90 %", (signals.busy or 0) >= 0.9, text))
        if signals.sm_active is not None:
            checks.append(Check("load: wide kernel: SM active >= 80 %, gpu_compute scores", signals.sm_active >= 0.8 and score > 0.5, text))
        narrow = _load_phase(collector, cuda, 1, load_seconds, target.index)
        signals = next(s for s in gpu_signals(narrow, 60.0) if s.uuid == target.uuid)
        score, text = rule_gpu_compute(signals, DEFAULT_THRESHOLDS)
        checks.append(Check("load: one block: busy >= 90 % (utilization hides it)", (signals.busy or 0) >= 0.9, text))
        if signals.sm_active is not None:
            checks.append(Check("load: one block: SM active < 20 %, evidence says latency-bound",
                                signals.sm_active < 0.2 and "latency-bound" in text and score < 0.5, text))
        del held
    except Exception as exc:  # the table so far and what broke
        checks.append(Check("the check ran to the end", False, f"{type(exc).__name__}: {exc}"))
    finally:
        collector.close()
    return _table(checks), all(c.ok is not False for c in checks)


if __name__ == "__main__":
    import sys

    if "--check" in sys.argv:
        started = time.monotonic()
        table, ok = check()
        print(table)
        print(f"\n(took {time.monotonic() - started:.0f} s)")
        raise SystemExit(0 if ok else 1)
    result = measure()
    if result.absent:
        print(f"GPU section not run: {result.absent}")
    else:
        print(result)
