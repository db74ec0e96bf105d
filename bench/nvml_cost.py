"""The NVML collector's own CPU per tick at the reference scale, the driver stand-in's time apart.

``python -m bench.nvml_cost [TICKS]``: 8 simulated GPUs (every fourth an A100 with two MIG instances, as
in the tick benchmark), the product's NvmlCollector over the real pynvml binding and the driver
stand-in; each collect() is timed with thread CPU, and the stand-in's own CPU (its entry points, timed
inside) is subtracted and reported apart. Median and p10/p90 over TICKS ticks (default 200), 50 ms apart.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench import fixtures
from headroom.simulation import load_scenario
from headroom.sources import SourceContext
from headroom.sources.nvml import NvmlCollector


def measure(ticks: int = 200, gpus: int = 8) -> tuple[list[float], list[float]]:
    """(collector + binding CPU per tick, stand-in CPU per tick), seconds."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "scenario.yaml"
        path.write_text(fixtures.scenario_yaml(gpus))
        scenario = load_scenario(path)
        lib = scenario.nvml_library()
        collector = NvmlCollector(SourceContext(scenario=scenario, settings={"pcie_poll_interval": 5.0}))
        try:
            for _ in range(5):
                collector.collect()
            lib.timing = True
            own, inside = [], []
            for _ in range(ticks):
                s0, t0 = lib.cpu_seconds, time.thread_time()
                collector.collect()
                spent, standin = time.thread_time() - t0, lib.cpu_seconds - s0
                own.append(spent - standin)
                inside.append(standin)
                time.sleep(0.05)
        finally:
            collector.close()
    return own, inside


def _fmt(values: list[float]) -> str:
    ordered = sorted(values)
    return (f"{statistics.median(values) * 1e3:.3f} ms (p10 {ordered[len(values) // 10] * 1e3:.3f}, "
            f"p90 {ordered[len(values) * 9 // 10] * 1e3:.3f})")


if __name__ == "__main__":
    own, inside = measure(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
    print(f"collector + binding: {_fmt(own)}; driver stand-in: {_fmt(inside)}")
