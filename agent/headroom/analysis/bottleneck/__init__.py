"""Bottleneck classification: a score in [0, 1] per resource, with evidence, for each GPU and workload.

Each rule is a small function of the signals (signals.py) returning (score, evidence). A score says how sure the
rule is that this resource limits the work now. Rules that explain an under-used GPU (cpu, shared_memory, disk_io,
host_memory, network) multiply a *starvation* term (the GPU is less busy than it could be) by the corroborating
signal, so low GPU use alone never names a culprit, and a GPU idle for lack of work (below demand_busy) is `none`
whatever the host does. A host-wide signal counts for a workload in proportion to its own use of that resource;
ties between scores go to the cause, then to direct evidence. docs/analysis.md documents every rule, threshold,
source and blind spot; thresholds come from config.yaml (analysis.thresholds). One purpose a module:

- the thresholds (``THRESHOLDS``, ``DEFAULT_THRESHOLDS``, ``ramp``, the docs table) are analysis/thresholds.py's, below
  this package and analysis/serving.py alike (re-exported here)
- ``evidence.py``: ``RESOURCES``, ``NONE``, a rule's result (``Scored``) and the wording of the evidence;
- ``verdict.py``: ``Verdict``, ``decide`` (ties: ``EXPLAINS``, ``CPU_WORK_PRECEDES``) and ``Hysteresis``;
- ``gpu.py``: the rules on a GPU's own signals (gpu_compute, gpu_memory and ``Reserved``, gpu_thermal, gpu_power,
  pcie, nvlink) and ``GpuRules``;
- ``starvation.py``: the host-side rules (cpu, host_memory, shared_memory, disk_io, network) and ``HostView``;
- ``neighbours.py``: the processes outside a workload that press on the host, named in its evidence;
- ``scoring.py``: ``score_gpu`` and ``score_workload``, which run the rules into a verdict.

The modules import one way (analysis/thresholds.py, evidence <- verdict, gpu, starvation, neighbours <- scoring). This module
re-exports what the rest of the agent, the tests and the benchmarks import from ``headroom.analysis.bottleneck``.
"""

from __future__ import annotations

from headroom.analysis.bottleneck.evidence import NONE, RESOURCES, STARVATION_RULES, gib, pct, plural
from headroom.analysis.bottleneck.gpu import (
    GPU_OWN_RULES,
    GpuRules,
    Reserved,
    reserved_by,
    rule_gpu_compute,
    rule_gpu_memory,
    rule_gpu_power,
    rule_gpu_thermal,
    rule_nvlink,
)
from headroom.analysis.bottleneck.neighbours import NEIGHBOUR_RESOURCES, neighbour_text, neighbours_of
from headroom.analysis.bottleneck.scoring import score_gpu, score_workload, straggler
from headroom.analysis.bottleneck.starvation import HostView, host_view, rule_cpu, rule_disk_io, rule_network
from headroom.analysis.bottleneck.verdict import CPU_WORK_PRECEDES, Hysteresis, Verdict, candidate_of, decide
from headroom.analysis.thresholds import DEFAULT_THRESHOLDS, THRESHOLDS, thresholds_markdown

__all__ = [
    "CPU_WORK_PRECEDES", "DEFAULT_THRESHOLDS", "GPU_OWN_RULES", "NEIGHBOUR_RESOURCES", "NONE", "RESOURCES",
    "STARVATION_RULES", "THRESHOLDS", "GpuRules", "HostView", "Hysteresis", "Reserved", "Verdict", "candidate_of",
    "decide", "gib", "host_view", "neighbour_text", "neighbours_of", "pct", "plural", "reserved_by", "rule_cpu",
    "rule_disk_io", "rule_gpu_compute", "rule_gpu_memory", "rule_gpu_power", "rule_gpu_thermal", "rule_network",
    "rule_nvlink", "score_gpu", "score_workload", "straggler", "thresholds_markdown",
]
