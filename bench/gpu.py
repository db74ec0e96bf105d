"""The GPU section: per-GPU NVML cost per tick on a real NVIDIA GPU, next to one nvidia-smi spawn.

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
    """pynvml with every call counted by function name."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._lib, name)
        if name.startswith("nvml") and callable(value):
            def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls[name] += 1
                return value(*args, **kwargs)
            return counted
        return value


def probe() -> str | None:
    """None when a real NVIDIA GPU answers through NVML, else why not."""
    try:
        import pynvml  # noqa: TID251 (the bench measures the real library)

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
    import pynvml  # noqa: TID251

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


if __name__ == "__main__":
    result = measure()
    if result.absent:
        print(f"GPU section not run: {result.absent}")
    else:
        print(result)
