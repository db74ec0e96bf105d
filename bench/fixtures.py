"""Generated inputs: a simulated GPU host with N GPUs (MIG on some) and a config declaring K workloads.

Every GPU moves (sine and noisy signals, so no reading is constant), has two compute processes and a
PCIe signal; every fourth GPU (indices 3, 7, 11, 15) is an A100 split into two MIG instances, the
others are H100s. GPU processes carry the real pids of the bench workloads' processes when given, so
attribution code sees GPU memory owned by processes that exist.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from bench.host import workload_cmdline_regex
from headroom.sources import load_all

H100 = """\
  - name: NVIDIA H100 80GB HBM3
    pci_bus_id: "00000000:{bus:02X}:00.0"
    memory_total: 80GiB
    memory_reserved: 512MiB
    power_limit: 700
    pcie: {{generation: 5, width: 16, max_generation: 5, max_width: 16}}
    mig: {{enabled: false}}
    utilization: {{sine: {{min: 0.4, max: 0.98, period: 5m, phase: {phase}s}}, noise: 0.02}}
    memory_utilization: {{sine: {{min: 0.2, max: 0.7, period: 5m, phase: {phase}s}}}}
    memory_used: {{ramp: {{from: 20GiB, to: 70GiB, over: 10m}}}}
    power: {{sine: {{min: 250, max: 690, period: 5m, phase: {phase}s}}, noise: 5}}
    temperature: {{sine: {{min: 40, max: 75, period: 5m}}}}
    memory_temperature: {{sine: {{min: 45, max: 80, period: 5m}}}}
    sm_clock: {{value: 1900MHz, noise: 50MHz}}
    performance_state: 0
    pcie_tx: {{value: 2GiB, noise: 100MiB}}
    pcie_rx: {{value: 1GiB, noise: 100MiB}}
    clock_events:
      sw_power_cap: {{steps: [[0s, false], [60s, true], [90s, false]], repeat: true, period: 2m}}
    processes:
{processes}
"""

A100_MIG = """\
  - name: NVIDIA A100-SXM4-80GB
    pci_bus_id: "00000000:{bus:02X}:00.0"
    memory_total: 80GiB
    memory_reserved: 512MiB
    power_limit: 400
    sm_clock_max: 1410MHz
    memory_clock_max: 1593MHz
    pcie: {{generation: 4, width: 16, max_generation: 4, max_width: 16}}
    memory_used: {{sine: {{min: 20GiB, max: 60GiB, period: 5m}}}}
    power: {{sine: {{min: 120, max: 390, period: 5m, phase: {phase}s}}}}
    temperature: {{sine: {{min: 38, max: 70, period: 5m}}}}
    pcie_tx: {{value: 512MiB, noise: 50MiB}}
    pcie_rx: {{value: 256MiB, noise: 50MiB}}
    mig:
      enabled: true
      instances:
        - {{gpu_instance_id: 1, memory_total: 40GiB, memory_used: {{sine: {{min: 10GiB, max: 35GiB, period: 5m}}}}}}
        - {{gpu_instance_id: 2, memory_total: 40GiB, memory_used: {{sine: {{min: 5GiB, max: 30GiB, period: 4m}}}}}}
    processes:
{processes}
"""


def is_mig(index: int) -> bool:
    """True for the GPUs the bench splits into MIG instances (every fourth one: 3, 7, 11, 15)."""
    return index % 4 == 3


def scenario_yaml(gpus: int, pids_for_gpu: Callable[[int], Sequence[int]] | None = None) -> str:
    """Scenario text for a host with ``gpus`` simulated GPUs; ``pids_for_gpu(i)`` gives real pids."""
    entries = []
    for i in range(gpus):
        pids = list(pids_for_gpu(i)) if pids_for_gpu else []
        pids = (pids + [900_000 + 2 * i, 900_001 + 2 * i])[:2]  # made-up pids when none are given
        processes = "\n".join(
            f"      - {{pid: {pid}, used_memory: {size}}}" for pid, size in zip(pids, ("30GiB", "8GiB"), strict=True)
        )
        template = A100_MIG if is_mig(i) else H100
        entries.append(template.format(bus=0x10 + i, phase=17 * i, processes=processes))
    return (
        f"description: bench host with {gpus} GPUs (MIG on indices 3, 7, 11, 15)\n"
        "seed: 7\n"
        "gpus:\n" + "".join(entries)
    )


def optional_collectors() -> list[str]:
    """Registered collectors that are off by default and that the bench turns on (the processes one)."""
    return [name for name, cls in load_all().items() if not cls.default_enabled and name == "processes"]


def config_yaml(workloads: int, extra_collectors: Sequence[str] = (), interval: str = "1s",
                window: str = "10m") -> str:
    """Configuration text declaring bench workloads 1..``workloads`` (matched by command line)."""
    lines = [
        "agent:",
        f"  sample_interval: {interval}",
        f"  window: {window}",
        "  collector_timeout: 1s",
        "collectors:",
        "  nvml:",
        "    pcie_poll_interval: 5s",
    ]
    for name in extra_collectors:
        lines += [f"  {name}:", "    enabled: true"]
    if workloads:
        lines.append("workloads:")
    for k in range(1, workloads + 1):
        kind = ("inference", "training", "finetune-lora")[(k - 1) % 3]
        lines += [
            f"  - name: bench-wl{k:02d}",
            f"    kind: {kind}",
            "    params: 8B",
            "    precision: bf16",
            f"    match: {{cmdline: '{workload_cmdline_regex(k)}'}}",
        ]
    return "\n".join(lines) + "\n"
