"""Simulated GPU hosts, in one package that real sources never import.

- ``signals``: the time-varying signals of a scenario (``Signal``) and the manual clock;
- ``spec``: the spec types a scenario file is parsed into, and ``ScenarioError``;
- ``scenario``: scenario files (docs/scenario-format.md) parsed into a ``Scenario``, and its runtime;
- ``host``: the synthetic procfs/sysfs tree the real host collectors read;
- ``nvml_driver``: the GPU driver stand-in (libnvidia-ml's C entry points) beneath the real pynvml binding;
- ``standin``: the real stand-in processes of a scenario without a synthetic host, and the HTTP servers of
  serving stand-ins (run as scripts, standard library only);
- ``runner``: a scenario run in process on a manual clock (tests, ``make accuracy``);
- ``scenarios/``: the built-in scenarios.

They import one way (tests/test_architecture.py): signals <- spec; those two <- host, stand-ins, driver stand-in
<- scenario <- runner.
"""

from headroom.simulation.scenario import (
    CLOCK_EVENT_REASONS,
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
    "CLOCK_EVENT_REASONS", "FaultSpec", "GpuSpec", "ManualClock", "MigInstanceSpec", "ProcessSpec", "Scenario",
    "ScenarioError", "Signal", "StandInGpu", "StandInSpec", "WorkloadSpec", "XidSpec", "constant",
    "list_scenarios", "load_scenario", "parse_frequency", "parse_scenario",
]
