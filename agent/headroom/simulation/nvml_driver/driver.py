"""``NvmlDriver``: the entry points the stand-in exports, as one table of nvml.h names and C signatures.

Built on ``health`` (and, through it, ``device`` and ``core``); ``install()`` (in ``core``) hands it to the
binding as its loaded library.
"""

from __future__ import annotations

from collections.abc import Callable
from ctypes import c_int, c_uint, c_ulonglong
from typing import TYPE_CHECKING

from headroom.simulation.nvml_driver.health import _HealthCalls
from headroom.simulation.nvml_driver.nvml_h import (
    INT,
    ULL,
    CArg,
    H,
    P,
    ProcessInfo,
    ProcessInfoV1,
    U,
    _put,
    _string,
)

if TYPE_CHECKING:
    from ctypes import _SimpleCData

    from headroom.simulation.spec import GpuSpec


class NvmlDriver(_HealthCalls):
    """libnvidia-ml's entry points for one scenario, as ctypes callbacks. See the package docstring."""

    def _table(self) -> list[tuple[str, list[CArg], Callable[..., None]]]:
        """(entry point, C argument types, implementation) for every function this stand-in exports."""

        def uint_query(name: str, read: Callable[[GpuSpec], float], ctype: type[_SimpleCData[int]] = c_uint) -> tuple[str, list[CArg], Callable[..., None]]:
            def impl(handle: int, out: int) -> None:
                _put(ctype, out, int(read(self._device(name, handle))))

            return name, [H, P], impl

        rb = self._reasons
        return [
            ("nvmlInitWithFlags", [U], self._init),
            ("nvmlInit_v2", [], lambda: self._init(0)),
            ("nvmlShutdown", [], self._shutdown),
            ("nvmlSystemGetDriverVersion", [P, U], lambda buf, n: self._system_string("nvmlSystemGetDriverVersion", buf, n, self.scenario.driver_version)),
            ("nvmlSystemGetNVMLVersion", [P, U], lambda buf, n: self._system_string("nvmlSystemGetNVMLVersion", buf, n, self.scenario.nvml_version)),
            ("nvmlSystemGetCudaDriverVersion", [P], lambda out: self._cuda("nvmlSystemGetCudaDriverVersion", out)),
            ("nvmlSystemGetCudaDriverVersion_v2", [P], lambda out: self._cuda("nvmlSystemGetCudaDriverVersion_v2", out)),
            ("nvmlDeviceGetCount_v2", [P], self._count),
            ("nvmlDeviceGetHandleByIndex_v2", [U, P], self._handle_by_index),
            ("nvmlDeviceGetHandleByUUID", [P, P], self._handle_by_uuid),
            ("nvmlDeviceGetIndex", [H, P], lambda h, out: _put(c_uint, out, self._device("nvmlDeviceGetIndex", h).index)),
            ("nvmlDeviceGetUUID", [H, P, U], self._uuid),
            uint_query("nvmlDeviceGetMinorNumber", lambda g: g.index),  # /dev/nvidiaN: the index here
            ("nvmlDeviceGetName", [H, P, U], lambda h, buf, n: _string(buf, n, self._device("nvmlDeviceGetName", h).name)),
            ("nvmlDeviceGetPciInfo_v3", [H, P], self._pci_info),
            ("nvmlDeviceGetUtilizationRates", [H, P], self._utilization),
            ("nvmlDeviceGetMemoryInfo", [H, P], lambda h, out: self._memory("nvmlDeviceGetMemoryInfo", h, out)),
            ("nvmlDeviceGetMemoryInfo_v2", [H, P], lambda h, out: self._memory("nvmlDeviceGetMemoryInfo_v2", h, out)),
            uint_query("nvmlDeviceGetPowerUsage", lambda g: round(1000 * self._value(g, "power", 0.1 * g.power_limit))),
            uint_query("nvmlDeviceGetEnforcedPowerLimit", lambda g: self._power_limits.get(g.index, round(1000 * g.power_limit))),
            ("nvmlDeviceSetPowerManagementLimit", [H, U], self._set_power_limit),
            ("nvmlDeviceGetPowerManagementLimitConstraints", [H, P, P], self._power_limit_constraints),
            uint_query("nvmlDeviceGetTotalEnergyConsumption", self._energy_mj, c_ulonglong),
            ("nvmlDeviceGetTemperature", [H, U, P], self._temperature),
            ("nvmlDeviceGetTemperatureV", [H, P], self._temperature_v),
            ("nvmlDeviceGetTemperatureThreshold", [H, U, P], self._temperature_threshold),
            ("nvmlDeviceGetClockInfo", [H, U, P], lambda h, t, out: self._clock_info("nvmlDeviceGetClockInfo", h, t, out)),
            ("nvmlDeviceGetMaxClockInfo", [H, U, P], lambda h, t, out: self._clock_info("nvmlDeviceGetMaxClockInfo", h, t, out)),
            uint_query("nvmlDeviceGetPerformanceState", lambda g: max(0, min(15, round(self._value(g, "performance_state", 0)))), c_int),
            uint_query("nvmlDeviceGetFanSpeed", lambda g: round(100 * self._value(g, "fan_speed", 0.0))),
            uint_query("nvmlDeviceGetCurrentClocksEventReasons", rb, c_ulonglong),
            uint_query("nvmlDeviceGetCurrentClocksThrottleReasons", rb, c_ulonglong),
            uint_query("nvmlDeviceGetSupportedClocksEventReasons", self._supported_reasons, c_ulonglong),
            uint_query("nvmlDeviceGetSupportedClocksThrottleReasons", self._supported_reasons, c_ulonglong),
            uint_query("nvmlDeviceGetCurrPcieLinkGeneration", lambda g: g.pcie_generation),
            uint_query("nvmlDeviceGetCurrPcieLinkWidth", lambda g: g.pcie_width),
            uint_query("nvmlDeviceGetMaxPcieLinkGeneration", lambda g: g.pcie_max_generation),
            uint_query("nvmlDeviceGetMaxPcieLinkWidth", lambda g: g.pcie_max_width),
            ("nvmlDeviceGetPcieThroughput", [H, U, P], self._pcie_throughput),
            ("nvmlDeviceGetComputeRunningProcesses", [H, P, P], lambda h, n, a: self._processes("nvmlDeviceGetComputeRunningProcesses", ProcessInfoV1, h, n, a)),
            ("nvmlDeviceGetComputeRunningProcesses_v2", [H, P, P], lambda h, n, a: self._processes("nvmlDeviceGetComputeRunningProcesses_v2", ProcessInfo, h, n, a)),
            ("nvmlDeviceGetComputeRunningProcesses_v3", [H, P, P], lambda h, n, a: self._processes("nvmlDeviceGetComputeRunningProcesses_v3", ProcessInfo, h, n, a)),
            ("nvmlDeviceGetProcessUtilization", [H, P, P, ULL], self._process_utilization),
            ("nvmlDeviceGetMigMode", [H, P, P], self._mig_mode),
            ("nvmlDeviceGetMaxMigDeviceCount", [H, P], self._max_mig_count),
            ("nvmlDeviceGetMigDeviceHandleByIndex", [H, U, P], self._mig_handle),
            ("nvmlDeviceGetGpuInstanceId", [H, P], lambda h, out: _put(c_uint, out, self._mig("nvmlDeviceGetGpuInstanceId", h).gpu_instance_id)),
            ("nvmlDeviceGetGpuInstanceById", [H, U, P], self._gpu_instance_by_id),
            ("nvmlGpuInstanceGetInfo", [P, P], self._gpu_instance_info),
            ("nvmlDeviceGetComputeInstanceId", [H, P], lambda h, out: _put(c_uint, out, self._mig("nvmlDeviceGetComputeInstanceId", h).compute_instance_id)),
            ("nvmlDeviceGetTotalEccErrors", [H, U, U, P], self._total_ecc),
            ("nvmlDeviceGetRemappedRows", [H, P, P, P, P], self._remapped_rows),
            ("nvmlDeviceGetFieldValues", [H, INT, P], self._field_values),
            ("nvmlDeviceGetNvLinkState", [H, U, P], self._nvlink_state),
            ("nvmlDeviceGetNvLinkVersion", [H, U, P], self._nvlink_version),
            ("nvmlGpmQueryDeviceSupport", [H, P], self._gpm_support),
            ("nvmlGpmSampleAlloc", [P], self._gpm_sample_alloc),
            ("nvmlGpmSampleFree", [H], self._gpm_sample_free),
            ("nvmlGpmSampleGet", [H, H], self._gpm_sample_get),
            ("nvmlGpmMetricsGet", [P], self._gpm_metrics_get),
            ("nvmlEventSetCreate", [P], self._event_set_create),
            ("nvmlDeviceRegisterEvents", [H, ULL, H], self._register_events),
            ("nvmlEventSetWait_v2", [H, P, U], self._event_set_wait),
            ("nvmlEventSetFree", [H], self._event_set_free),
        ]
