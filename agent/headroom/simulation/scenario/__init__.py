"""Scenario files and the simulated host they describe, in three modules that import one way:

- ``runtime``: ``Scenario``, a loaded scenario, and what it makes and starts as it is used (the synthetic
  host, the NVML driver stand-in, the stand-in processes, the ``attach:`` rules);
- ``nodes``: ``NodeReader``, the readers of single YAML nodes (mappings, numbers in units, signals), each
  error placed at its node, and ``parse_frequency``;
- ``parse``: finding, loading and strictly parsing scenario files (docs/scenario-format.md) into a Scenario
  with a ``NodeReader`` of its sections; it imports ``runtime`` and ``nodes``, never the other way.

What they are made of lives below the package, so the pieces a Scenario drives never import it:
``simulation.signals`` (``Signal``, ``ManualClock``) and ``simulation.spec`` (the spec types and
``ScenarioError``). This module re-exports what the rest of the repository imports as
``headroom.simulation.scenario``.
"""

from headroom.simulation.scenario.nodes import parse_frequency
from headroom.simulation.scenario.parse import builtin_name, list_scenarios, load_scenario, parse_scenario
from headroom.simulation.scenario.runtime import Scenario
from headroom.simulation.signals import ManualClock, Signal, constant
from headroom.simulation.spec import (
    CLOCK_EVENT_REASONS,
    GPM_SIGNALS,
    FaultSpec,
    GpuSpec,
    MigInstanceSpec,
    ProcessSpec,
    ScenarioError,
    StandInGpu,
    StandInSpec,
    WorkloadSpec,
    XidSpec,
)

__all__ = [
    "CLOCK_EVENT_REASONS", "GPM_SIGNALS", "FaultSpec", "GpuSpec", "ManualClock", "MigInstanceSpec", "ProcessSpec",
    "Scenario", "ScenarioError", "Signal", "StandInGpu", "StandInSpec", "WorkloadSpec", "XidSpec", "builtin_name",
    "constant", "list_scenarios", "load_scenario", "parse_frequency", "parse_scenario",
]
