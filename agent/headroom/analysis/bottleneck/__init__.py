"""Bottleneck classification (analysis/bottleneck/): ``scoring.py`` holds it, moved unchanged from
analysis/bottleneck.py; this module re-exports what the rest of the agent, the tests and the benchmarks import
from ``headroom.analysis.bottleneck``."""

from __future__ import annotations

from headroom.analysis.bottleneck.scoring import (
    CPU_WORK_PRECEDES,
    DEFAULT_THRESHOLDS,
    GPU_OWN_RULES,
    NEIGHBOUR_RESOURCES,
    NONE,
    RESOURCES,
    STARVATION_RULES,
    THRESHOLDS,
    GpuRules,
    HostView,
    Hysteresis,
    Reserved,
    Verdict,
    candidate_of,
    decide,
    gib,
    host_view,
    neighbour_text,
    neighbours_of,
    pct,
    plural,
    reserved_by,
    rule_cpu,
    rule_disk_io,
    rule_gpu_compute,
    rule_gpu_memory,
    rule_gpu_power,
    rule_gpu_thermal,
    rule_network,
    rule_nvlink,
    score_gpu,
    score_workload,
    straggler,
    thresholds_markdown,
)

__all__ = [
    "CPU_WORK_PRECEDES", "DEFAULT_THRESHOLDS", "GPU_OWN_RULES", "NEIGHBOUR_RESOURCES", "NONE", "RESOURCES",
    "STARVATION_RULES", "THRESHOLDS", "GpuRules", "HostView", "Hysteresis", "Reserved", "Verdict", "candidate_of",
    "decide", "gib", "host_view", "neighbour_text", "neighbours_of", "pct", "plural", "reserved_by", "rule_cpu",
    "rule_disk_io", "rule_gpu_compute", "rule_gpu_memory", "rule_gpu_power", "rule_gpu_thermal", "rule_network",
    "rule_nvlink", "score_gpu", "score_workload", "straggler", "thresholds_markdown",
]
