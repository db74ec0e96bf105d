"""Headroom: how much room is left, in the workload's own units.

Pure functions of the signals, the workload's status (measured usage joined from NVML and /proc) and
its memory estimate (sizing.py). Sign convention: positive = room left, negative = over (the declared
load does not fit). None when the inputs are unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from headroom.analysis.signals import GpuSignals, HostSignals, WorkloadSignals


@dataclass(frozen=True)
class WorkloadHeadroom:
    gpu_memory_bytes: int | None = None  # free VRAM on the workload's GPUs (summed)
    sequences: int | None = None  # more concurrent sequences that fit at max context (inference)
    context_tokens: int | None = None  # more tokens per sequence that fit at the declared concurrency
    cpu_cores: float | None = None  # idle cores the workload could still use
    host_memory_bytes: int | None = None  # MemAvailable
    shared_memory_bytes: int | None = None  # writable bytes left in the fullest shm mount
    power_watts: float | None = None  # limit - draw, summed over its GPUs
    thermal_celsius: float | None = None  # the least margin: each GPU's own thermal limit - its temperature
    power_watts_by_gpu: Mapping[int, float] = field(default_factory=dict)  # GPU index -> limit - draw, per GPU
    basis: str = ""  # how sequences/context were derived, for the explanation


def workload_headroom(profile: Any, w: WorkloadSignals, gpus: list[GpuSignals], h: HostSignals,
                      estimate: Any, slowdown_celsius: float) -> WorkloadHeadroom:
    up = [g for g in gpus if g.up]
    free = [g.memory_total_bytes - g.memory_used_bytes for g in up
            if g.memory_total_bytes is not None and g.memory_used_bytes is not None]
    kind = getattr(profile.kind, "value", str(profile.kind))
    sequences = context = None
    basis = ""
    kv = getattr(estimate, "kv_bytes_per_token", None) if estimate is not None else None
    if kind in ("inference", "cpu-inference") and estimate is not None:
        vllm = getattr(getattr(profile, "runtime", None), "is_vllm", False)
        if vllm and estimate.max_concurrency_at_max_context is not None:
            # vLLM reserves its KV pool up front, so NVML cannot show what is left: use the model's budget
            sequences = estimate.max_concurrency_at_max_context - estimate.concurrency
            context = (estimate.max_context_at_concurrency - estimate.context
                       if estimate.max_context_at_concurrency is not None else None)
            basis = "vLLM reservation (memory model)"
        elif kv and free and kind == "inference":
            # the smallest free VRAM among its GPUs bounds what one more sequence can use
            spare = min(free)
            sequences = spare // (kv * max(1, estimate.context))
            context = spare // (kv * max(1, estimate.concurrency))
            basis = "measured free VRAM / KV bytes per token (memory model)"
    cores = None
    if h.cpu_busy is not None and h.logical_cpus:
        idle = h.logical_cpus * (1.0 - h.cpu_busy - (h.cpu_iowait or 0.0))
        allowed_left = (w.cores_allowed - w.cores_used) if w.cores_allowed and w.cores_used is not None else idle
        cores = max(0.0, min(idle, allowed_left))
    power = [g.power_limit_watts - g.power_watts for g in up
             if g.power_limit_watts is not None and g.power_watts is not None]
    # each GPU against its own limit (NVML's max operating or slowdown temperature, signals.thermal_limit),
    # else the configured one: an 83 degC limit on one card and 90 on the next are not the same margin
    margins = [(g.thermal_limit_celsius if g.thermal_limit_celsius is not None else slowdown_celsius)
               - g.temperature_celsius for g in up if g.temperature_celsius is not None]
    return WorkloadHeadroom(
        gpu_memory_bytes=sum(free) if free else None,
        sequences=sequences,
        context_tokens=context,
        cpu_cores=None if cores is None else round(cores, 3),
        host_memory_bytes=h.memory_available_bytes,
        shared_memory_bytes=h.shm_available_bytes,
        power_watts=round(sum(power), 3) if power else None,
        thermal_celsius=min(margins) if margins else None,
        basis=basis,
        power_watts_by_gpu={g.index: round(g.power_limit_watts - g.power_watts, 3) for g in up
                            if g.power_limit_watts is not None and g.power_watts is not None},
    )
