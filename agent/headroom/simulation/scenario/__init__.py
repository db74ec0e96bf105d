"""Scenario files (docs/scenario-format.md) and the simulated host they describe.

Re-exports what the rest of the repository imports as ``headroom.simulation.scenario``.
"""

from headroom.simulation.scenario.parse import (
    ATTACH_REFRESH_SECONDS,
    CLOCK_EVENT_REASONS,
    GPM_SIGNALS,
    FaultSpec,
    GpuSpec,
    ManualClock,
    MigInstanceSpec,
    ProcessSpec,
    Scenario,
    ScenarioError,
    Signal,
    StandInGpu,
    StandInSpec,
    WorkloadSpec,
    XidSpec,
    constant,
    list_scenarios,
    load_scenario,
    parse_frequency,
    parse_scenario,
)

__all__ = [
    "ATTACH_REFRESH_SECONDS", "CLOCK_EVENT_REASONS", "GPM_SIGNALS", "FaultSpec", "GpuSpec", "ManualClock",
    "MigInstanceSpec", "ProcessSpec", "Scenario", "ScenarioError", "Signal", "StandInGpu", "StandInSpec",
    "WorkloadSpec", "XidSpec", "constant", "list_scenarios", "load_scenario", "parse_frequency", "parse_scenario",
]
