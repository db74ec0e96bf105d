"""A pynvml-compatible stand-in for NVML, driven by a scenario (``headroom.simulation``).

``FakeNvml`` exposes the functions and constants the NVML collector uses, with pynvml's argument
conventions and return shapes (real pynvml ctypes structs where pynvml returns them, handles that are
real ``c_nvmlDevice_t`` pointers), and raises the real ``pynvml.NVMLError`` subclasses, so the
collector's code and error handling run unchanged. Importing pynvml needs no driver; this module and
``sources/nvml.py`` are the only importers (ruff bans it elsewhere).

Beyond the scenario, tests steer it at runtime:
- ``clock``: seconds since the scenario started (injectable; default wall time since creation);
- ``inject(call, gpu=None, error=..., hang=..., calls=N)`` / ``clear()``: faults of any NVML error
  class, or a hang (interrupted by ``nvmlShutdown`` or ``release()``);
- ``inject_xid(gpu, code)``: an XID delivered through the event set;
- ``calls``: Counter of (function name, gpu index or None) -> calls; ``callers``: function -> thread names.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pynvml

from headroom.simulation.scenario import CLOCK_EVENT_REASONS, FaultSpec
from headroom.sources.nvml import VALUE_MEMBER

if TYPE_CHECKING:
    from headroom.simulation.scenario import GpuSpec, Scenario

_DEVICE_BASE = 0x5EED_0000
_EVENT_SET_BASE = 0x5EE7_0000
_NOT_AVAILABLE = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value

# call -> the scenario query whose ``unsupported`` entry makes it answer NOT_SUPPORTED
_QUERY_OF_CALL = {
    "nvmlDeviceGetUtilizationRates": "utilization",
    "nvmlDeviceGetMemoryInfo": "memory_info",
    "nvmlDeviceGetMemoryInfo_v2": "memory_info",
    "nvmlDeviceGetPowerUsage": "power",
    "nvmlDeviceGetEnforcedPowerLimit": "power_limit",
    "nvmlDeviceGetTotalEnergyConsumption": "energy",
    "nvmlDeviceGetTemperature": "temperature",
    "nvmlDeviceGetTemperatureV": "temperature",
    "nvmlDeviceGetClockInfo": "clocks",
    "nvmlDeviceGetMaxClockInfo": "clocks",
    "nvmlDeviceGetPerformanceState": "performance_state",
    "nvmlDeviceGetFanSpeed": "fan_speed",
    "nvmlDeviceGetCurrentClocksEventReasons": "clock_events",
    "nvmlDeviceGetCurrentClocksThrottleReasons": "clock_events",
    "nvmlDeviceGetSupportedClocksEventReasons": "clock_events",
    "nvmlDeviceGetSupportedClocksThrottleReasons": "clock_events",
    "nvmlDeviceGetCurrPcieLinkGeneration": "pcie_link",
    "nvmlDeviceGetCurrPcieLinkWidth": "pcie_link",
    "nvmlDeviceGetMaxPcieLinkGeneration": "pcie_link",
    "nvmlDeviceGetMaxPcieLinkWidth": "pcie_link",
    "nvmlDeviceGetPcieThroughput": "pcie_throughput",
    "nvmlDeviceGetComputeRunningProcesses_v3": "processes",
    "nvmlDeviceGetComputeRunningProcesses_v2": "processes",
    "nvmlDeviceGetComputeRunningProcesses": "processes",
    "nvmlDeviceGetProcessUtilization": "process_utilization",
    "nvmlDeviceGetMigMode": "mig",
    "nvmlDeviceGetMaxMigDeviceCount": "mig",
    "nvmlDeviceGetMigDeviceHandleByIndex": "mig",
    "nvmlDeviceGetTotalEccErrors": "ecc",
    "nvmlDeviceGetRemappedRows": "remapped_rows",
    "nvmlDeviceRegisterEvents": "xid_events",
}
# field id -> (query, value type)
_FIELDS = {
    pynvml.NVML_FI_DEV_MEMORY_TEMP: ("memory_temperature", pynvml.NVML_VALUE_TYPE_UNSIGNED_INT),
    pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: ("energy", pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG),
    pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: ("ecc", pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG),
    pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: ("ecc", pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG),
    pynvml.NVML_FI_DEV_REMAPPED_COR: ("remapped_rows", pynvml.NVML_VALUE_TYPE_UNSIGNED_INT),
    pynvml.NVML_FI_DEV_REMAPPED_UNC: ("remapped_rows", pynvml.NVML_VALUE_TYPE_UNSIGNED_INT),
    pynvml.NVML_FI_DEV_REMAPPED_PENDING: ("remapped_rows", pynvml.NVML_VALUE_TYPE_UNSIGNED_INT),
    pynvml.NVML_FI_DEV_REMAPPED_FAILURE: ("remapped_rows", pynvml.NVML_VALUE_TYPE_UNSIGNED_INT),
}
_REASON_BIT = {name: 1 << i for i, name in enumerate(CLOCK_EVENT_REASONS)}
_NO_LIBRARY_NEEDED = {"nvmlInit", "nvmlInitWithFlags"}


def error_code(name: str | int) -> int:
    """The NVML error code for GPU_IS_LOST, NVML_ERROR_GPU_IS_LOST or a number. Raises ValueError."""
    if isinstance(name, int) and not isinstance(name, bool):
        if name not in pynvml.NVMLError._valClassMapping:
            raise ValueError(f"unknown NVML error code {name}")
        return name
    if isinstance(name, str):
        const = "NVML_ERROR_" + name.removeprefix("NVML_ERROR_")
        code = getattr(pynvml, const, None)
        if isinstance(code, int):
            return code
    known = sorted(n.removeprefix("NVML_ERROR_") for n in dir(pynvml) if n.startswith("NVML_ERROR_"))
    raise ValueError(f"unknown NVML error {name!r} (expected one of: {', '.join(known)})")


def _handle(value: int, kind: Any = pynvml.c_nvmlDevice_t) -> Any:
    return ctypes.cast(ctypes.c_void_p(value), kind)


def _address(handle: Any) -> int | None:
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


@dataclass
class _Fault:
    call: str
    gpu: int | None
    error: int | None
    hang: float | None
    start: float | None
    until: float | None
    calls: int | None  # remaining; None = unlimited


@dataclass
class _EventSet:
    devices: set[int]


class FakeNvml:
    """A simulated NVML library bound to one scenario. Thread-safe; see the module docstring."""

    NVMLError = pynvml.NVMLError
    NVMLLibraryMismatchError = pynvml.NVMLLibraryMismatchError

    def __init__(self, scenario: Scenario, clock: Callable[[], float] | None = None) -> None:
        self.scenario = scenario
        if clock is None:
            started = time.monotonic()
            clock = lambda: time.monotonic() - started  # noqa: E731
        self.clock: Callable[[], float] = clock
        self.calls: Counter[tuple[str, int | None]] = Counter()
        self.callers: dict[str, set[str]] = {}
        self._gpus = scenario.gpus
        self._lock = threading.Lock()
        self._wake = threading.Condition()  # hangs and event waits end early when _generation moves
        self._generation = 0
        self._refcount = 0
        self._faults = [_fault(f) for f in scenario.faults]
        self._xids: list[tuple[int, float, int]] = [(g.index, x.at, x.code) for g in self._gpus for x in g.xids]
        self._event_sets: dict[int, _EventSet] = {}
        self._delivered: set[tuple[int, float, int]] = set()  # each XID reaches one event set, once
        self._energy: dict[int, tuple[float, float]] = {}  # gpu -> (t, millijoules)

    def __getattr__(self, name: str) -> Any:
        """pynvml constants and classes; functions this fake does not implement are absent."""
        value = getattr(pynvml, name)
        if callable(value) and not isinstance(value, type):
            raise AttributeError(f"FakeNvml does not implement {name}")
        return value

    # ----------------------------------------------------------------------------------- steering
    def inject(
        self,
        call: str,
        gpu: int | None = None,
        error: int | str | None = None,
        hang: float | None = None,
        calls: int | None = None,
        start: float | None = None,
        until: float | None = None,
    ) -> None:
        """Make ``call`` (on ``gpu``, or on any GPU) raise ``error`` and/or block ``hang`` seconds.

        ``calls``: only the next N matching calls; ``start``/``until``: a window in scenario seconds.
        """
        code = error_code(error) if error is not None else None
        with self._lock:
            self._faults.append(_Fault(call, gpu, code, hang, start, until, calls))

    def clear(self, call: str | None = None) -> None:
        """Remove injected and scenario faults (all, or those for ``call``) and release hung calls."""
        with self._lock:
            self._faults = [f for f in self._faults if call is not None and f.call != call]
        self.release()

    def release(self) -> None:
        """Wake every call blocked in a hang (and every event wait, which then rechecks the library)."""
        with self._wake:
            self._generation += 1
            self._wake.notify_all()

    def _sleep(self, seconds: float) -> bool:
        """Block up to ``seconds`` of real time; return True when release() cut it short."""
        with self._wake:
            start = self._generation
            return self._wake.wait_for(lambda: self._generation != start, timeout=seconds)

    def inject_xid(self, gpu: int, code: int) -> None:
        """Raise XID ``code`` on ``gpu`` now (delivered to event sets registered for it)."""
        with self._lock:
            self._xids.append((gpu, self.clock(), code))

    # ----------------------------------------------------------------------------------- plumbing
    def _enter(self, name: str, gpu: int | None, query_gpu: GpuSpec | None = None) -> None:
        """Count the call, then apply library state, missing functions, faults and NOT_SUPPORTED."""
        now = self.clock()
        hang, error = 0.0, None
        with self._lock:
            self.calls[(name, gpu)] += 1
            self.callers.setdefault(name, set()).add(threading.current_thread().name)
            if name not in _NO_LIBRARY_NEEDED and self._refcount == 0:
                error = pynvml.NVML_ERROR_UNINITIALIZED
            elif name in self.scenario.missing_functions:
                error = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
            else:
                for f in self._faults:
                    if f.call != name or (f.gpu is not None and f.gpu != gpu):
                        continue
                    if (f.start is not None and now < f.start) or (f.until is not None and now >= f.until):
                        continue
                    if f.calls is not None:
                        if f.calls <= 0:
                            continue
                        f.calls -= 1
                    hang = max(hang, f.hang or 0.0)
                    if f.error is not None and error is None:
                        error = f.error
                self._faults = [f for f in self._faults if f.calls is None or f.calls > 0]
        if hang:
            self._sleep(hang)
            if error is None and self._refcount == 0 and name not in _NO_LIBRARY_NEEDED:
                error = pynvml.NVML_ERROR_UNINITIALIZED  # shut down while it hung
        if error is None and query_gpu is not None and _QUERY_OF_CALL.get(name) in query_gpu.unsupported:
            error = pynvml.NVML_ERROR_NOT_SUPPORTED
        if error is not None:
            raise pynvml.NVMLError(error)

    def _gpu(self, handle: Any) -> tuple[GpuSpec, int | None]:
        """The GPU spec and MIG slot (None for the whole GPU) behind a handle."""
        addr = _address(handle)
        if addr is None or not _DEVICE_BASE <= addr < _DEVICE_BASE + 0x100 * len(self._gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        index, slot = divmod(addr - _DEVICE_BASE, 0x100)
        return self._gpus[index], (slot - 1 if slot else None)

    def _device_call(self, name: str, handle: Any, allow_mig: bool = False) -> GpuSpec:
        try:
            gpu, slot = self._gpu(handle)
        except pynvml.NVMLError:
            self._enter(name, None)
            raise
        self._enter(name, gpu.index, gpu)
        if slot is not None and not allow_mig:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def _value(self, gpu: GpuSpec, signal: str, default: float) -> float:
        s = gpu.signals.get(signal)
        return s.at(self.clock()) if s is not None else default

    # ---------------------------------------------------------------------------------- lifecycle
    def nvmlInit(self) -> None:
        self._enter("nvmlInit", None)
        with self._lock:
            self._refcount += 1

    def nvmlInitWithFlags(self, flags: int) -> None:
        self.nvmlInit()

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown", None)
        with self._lock:
            self._refcount -= 1
        self.release()

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion", None)
        return self.scenario.driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._enter("nvmlSystemGetNVMLVersion", None)
        return self.scenario.nvml_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion", None)
        return self.scenario.cuda_driver_version

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion_v2", None)
        return self.scenario.cuda_driver_version

    # ------------------------------------------------------------------------------------ devices
    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount", None)
        return len(self._gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._enter("nvmlDeviceGetHandleByIndex", index if 0 <= index < len(self._gpus) else None)
        if not 0 <= index < len(self._gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _handle(_DEVICE_BASE + 0x100 * index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> Any:
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        match = next((g for g in self._gpus if g.uuid == text), None)
        self._enter("nvmlDeviceGetHandleByUUID", match.index if match else None)
        if match is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return _handle(_DEVICE_BASE + 0x100 * match.index)

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        return self._device_call("nvmlDeviceGetIndex", handle).index

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        gpu = self._device_call("nvmlDeviceGetUUID", handle, allow_mig=True)
        _, slot = self._gpu(handle)
        return gpu.uuid if slot is None else gpu.mig_instances[slot].uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._device_call("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        gpu = self._device_call("nvmlDeviceGetPciInfo", handle)
        info = pynvml.nvmlPciInfo_t()
        bus = gpu.pci_bus_id.encode()
        info.busId = bus
        info.busIdLegacy = bus[-12:]
        parts = gpu.pci_bus_id.replace(".", ":").split(":")
        info.domain, info.bus, info.device = int(parts[0], 16), int(parts[1], 16), int(parts[2], 16)
        info.pciDeviceId = 0x233010DE
        return info

    nvmlDeviceGetPciInfo_v3 = nvmlDeviceGetPciInfo

    # ----------------------------------------------------------------------------------- readings
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        gpu = self._device_call("nvmlDeviceGetUtilizationRates", handle)
        if gpu.mig_enabled:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # as on real MIG-enabled GPUs
        util = pynvml.c_nvmlUtilization_t()
        util.gpu = round(100 * self._value(gpu, "utilization", 0.0))
        util.memory = round(100 * self._value(gpu, "memory_utilization", 0.0))
        return util

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        name = "nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo"
        gpu = self._device_call(name, handle, allow_mig=True)
        _, slot = self._gpu(handle)
        if version and version != pynvml.nvmlMemory_v2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if slot is not None:
            mig = gpu.mig_instances[slot]
            total, reserved = mig.memory_total, 0
            used = min(int(mig.memory_used.at(self.clock())), total)
        else:
            total, reserved = gpu.memory_total, gpu.memory_reserved
            # never less than its processes hold (stand-ins come and go with start_processes)
            processes = sum(used for _, used, _ in self._process_table(gpu, self.clock()) if used is not None)
            used = min(max(int(self._value(gpu, "memory_used", 0.0)), processes), total - reserved)
        if version:
            mem = pynvml.c_nvmlMemory_v2_t()
            mem.version = version
            mem.total, mem.reserved, mem.used, mem.free = total, reserved, used, total - reserved - used
        else:  # v1 "used" counts the reserved memory too
            mem = pynvml.c_nvmlMemory_t()
            mem.total, mem.used, mem.free = total, used + reserved, total - reserved - used
        return mem

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        gpu = self._device_call("nvmlDeviceGetPowerUsage", handle)
        return round(1000 * self._value(gpu, "power", 0.1 * gpu.power_limit))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return round(1000 * self._device_call("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit)

    def _energy_mj(self, gpu: GpuSpec) -> int:
        """Energy in mJ: the power signal integrated over scenario time (trapezoids between reads)."""
        now = self.clock()
        power = self._value(gpu, "power", 0.1 * gpu.power_limit)
        with self._lock:
            last = self._energy.get(gpu.index)
            if last is None:
                energy = 0.0
            else:
                t0, e0 = last
                p0 = gpu.signals["power"].at(t0) if "power" in gpu.signals else power
                energy = e0 + max(0.0, now - t0) * (p0 + power) / 2 * 1000
            if last is None or now >= last[0]:
                self._energy[gpu.index] = (now, energy)
            else:
                energy = last[1]
        return int(energy)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        return self._energy_mj(self._device_call("nvmlDeviceGetTotalEnergyConsumption", handle))

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        gpu = self._device_call("nvmlDeviceGetTemperature", handle)
        return round(self._value(gpu, "temperature", 35.0))

    def nvmlDeviceGetTemperatureV(self, handle: Any, sensor: int, version: int = pynvml.nvmlTemperature_v1) -> int:
        gpu = self._device_call("nvmlDeviceGetTemperatureV", handle)
        if version != pynvml.nvmlTemperature_v1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return round(self._value(gpu, "temperature", 35.0))

    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int:
        gpu = self._device_call("nvmlDeviceGetClockInfo", handle)
        if clock_type == pynvml.NVML_CLOCK_SM:
            return round(self._value(gpu, "sm_clock", gpu.sm_clock_max) / 1e6)
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return round(self._value(gpu, "memory_clock", gpu.memory_clock_max) / 1e6)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, clock_type: int) -> int:
        gpu = self._device_call("nvmlDeviceGetMaxClockInfo", handle)
        if clock_type == pynvml.NVML_CLOCK_SM:
            return round(gpu.sm_clock_max / 1e6)
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return round(gpu.memory_clock_max / 1e6)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetPerformanceState(self, handle: Any) -> int:
        gpu = self._device_call("nvmlDeviceGetPerformanceState", handle)
        return max(0, min(15, round(self._value(gpu, "performance_state", 0))))

    def nvmlDeviceGetFanSpeed(self, handle: Any) -> int:
        gpu = self._device_call("nvmlDeviceGetFanSpeed", handle)
        return round(100 * self._value(gpu, "fan_speed", 0.0))

    def _reasons(self, gpu: GpuSpec) -> int:
        now = self.clock()
        mask = 0
        for name, signal in gpu.clock_events.items():
            if name in gpu.supported_clock_events and signal.at(now) > 0.5:
                mask |= _REASON_BIT[name]
        return mask

    def _supported_reasons(self, gpu: GpuSpec) -> int:
        return sum(_REASON_BIT[r] for r in gpu.supported_clock_events)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return self._reasons(self._device_call("nvmlDeviceGetCurrentClocksEventReasons", handle))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self._reasons(self._device_call("nvmlDeviceGetCurrentClocksThrottleReasons", handle))

    def nvmlDeviceGetSupportedClocksEventReasons(self, handle: Any) -> int:
        return self._supported_reasons(self._device_call("nvmlDeviceGetSupportedClocksEventReasons", handle))

    def nvmlDeviceGetSupportedClocksThrottleReasons(self, handle: Any) -> int:
        return self._supported_reasons(self._device_call("nvmlDeviceGetSupportedClocksThrottleReasons", handle))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return self._device_call("nvmlDeviceGetCurrPcieLinkGeneration", handle).pcie_generation

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return self._device_call("nvmlDeviceGetCurrPcieLinkWidth", handle).pcie_width

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return self._device_call("nvmlDeviceGetMaxPcieLinkGeneration", handle).pcie_max_generation

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return self._device_call("nvmlDeviceGetMaxPcieLinkWidth", handle).pcie_max_width

    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int) -> int:
        """KB/s over a 20 ms window; like the real call, it blocks for those 20 ms."""
        gpu = self._device_call("nvmlDeviceGetPcieThroughput", handle)
        time.sleep(0.02)
        signal = "pcie_tx" if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else "pcie_rx"
        return round(self._value(gpu, signal, 0.0) / 1024)

    def _process_table(self, gpu: GpuSpec, now: float) -> list[tuple[int, int | None, float | None]]:
        """(pid, used memory or None, SM utilization or None) of the scenario's processes on ``gpu``,
        then of the running stand-ins (Scenario.start_processes) with their real pids."""
        out = []
        for p in gpu.processes:
            used = None if p.used_memory is None else int(p.used_memory.at(now))
            out.append((p.pid, used, None if p.sm_utilization is None else p.sm_utilization.at(now)))
        for pid, use in self.scenario.standin_processes(gpu.index):
            out.append((pid, int(use.memory.at(now)), None if use.utilization is None else use.utilization.at(now)))
        return out

    def _processes(self, name: str, handle: Any) -> list[Any]:
        gpu = self._device_call(name, handle)
        return [
            pynvml.nvmlFriendlyObject({
                "pid": pid, "usedGpuMemory": used, "gpuInstanceId": 0xFFFFFFFF, "computeInstanceId": 0xFFFFFFFF,
            })
            for pid, used, _ in self._process_table(gpu, self.clock())
        ]  # fmt: skip

    def nvmlDeviceGetProcessUtilization(self, handle: Any, last_seen: int) -> list[Any]:
        """One sample per process with an SM utilization, stamped now (microseconds of scenario time);
        NOT_FOUND when there is none newer than ``last_seen``, as the real call answers."""
        gpu = self._device_call("nvmlDeviceGetProcessUtilization", handle)
        now = self.clock()
        stamp = int(now * 1e6)
        out = []
        for pid, _, sm in self._process_table(gpu, now):
            if sm is None or stamp <= last_seen:
                continue
            sample = pynvml.c_nvmlProcessUtilizationSample_t()
            sample.pid, sample.timeStamp, sample.smUtil = pid, stamp, round(100 * sm)
            sample.memUtil = sample.encUtil = sample.decUtil = 0
            out.append(sample)
        if not out:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return out

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: Any) -> list[Any]:
        return self._processes("nvmlDeviceGetComputeRunningProcesses_v3", handle)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: Any) -> list[Any]:
        return self._processes("nvmlDeviceGetComputeRunningProcesses_v2", handle)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        return self._processes("nvmlDeviceGetComputeRunningProcesses", handle)

    # ---------------------------------------------------------------------------------------- MIG
    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        gpu = self._device_call("nvmlDeviceGetMigMode", handle)
        if gpu.mig_enabled is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig_enabled else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        gpu = self._device_call("nvmlDeviceGetMaxMigDeviceCount", handle)
        if gpu.mig_enabled is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 7 if gpu.mig_enabled else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any:
        gpu = self._device_call("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        if not gpu.mig_enabled:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if not 0 <= index < len(gpu.mig_instances):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return _handle(_DEVICE_BASE + 0x100 * gpu.index + index + 1)

    def _mig(self, name: str, handle: Any) -> Any:
        gpu = self._device_call(name, handle, allow_mig=True)
        _, slot = self._gpu(handle)
        if slot is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.mig_instances[slot]

    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        return self._mig("nvmlDeviceGetGpuInstanceId", handle).gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: Any) -> int:
        return self._mig("nvmlDeviceGetComputeInstanceId", handle).compute_instance_id

    # ------------------------------------------------------------------------------- health fields
    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int:
        gpu = self._device_call("nvmlDeviceGetTotalEccErrors", handle)
        if error_type != pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            return 0
        if counter_type == pynvml.NVML_VOLATILE_ECC:
            return gpu.ecc_uncorrected_volatile
        return gpu.ecc_uncorrected_aggregate

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        gpu = self._device_call("nvmlDeviceGetRemappedRows", handle)
        cor, unc, pending, failure = gpu.remapped_rows
        return (cor, unc, int(pending), int(failure))

    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[Any]) -> Any:
        gpu = self._device_call("nvmlDeviceGetFieldValues", handle)
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        now = self.clock()
        with self._lock:
            field_faults = {f.call: f.error for f in self._faults
                            if f.call.startswith("NVML_FI_") and f.error is not None and (f.gpu is None or f.gpu == gpu.index)
                            and (f.start is None or now >= f.start) and (f.until is None or now < f.until)}  # fmt: skip
        for i, fid in enumerate(field_ids):
            fid, scope = fid if isinstance(fid, tuple) else (fid, 0)
            fv = values[i]
            fv.fieldId, fv.scopeId = fid, scope
            fv.timestamp = int(now * 1e6)
            spec = _FIELDS.get(fid)
            fault = next((code for name, code in field_faults.items() if getattr(pynvml, name, None) == fid), None)
            if spec is None:
                fv.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                continue
            query, vtype = spec
            if fault is not None:
                fv.nvmlReturn = fault
                continue
            if query in gpu.unsupported:
                fv.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                continue
            fv.valueType = vtype
            fv.nvmlReturn = pynvml.NVML_SUCCESS
            setattr(fv.value, VALUE_MEMBER[vtype], self._field(gpu, fid))
        return values

    def _field(self, gpu: GpuSpec, fid: int) -> int:
        cor, unc, pending, failure = gpu.remapped_rows
        if fid == pynvml.NVML_FI_DEV_MEMORY_TEMP:
            return round(self._value(gpu, "memory_temperature", 40.0))
        if fid == pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
            return self._energy_mj(gpu)
        return {
            pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: gpu.ecc_uncorrected_volatile,
            pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: gpu.ecc_uncorrected_aggregate,
            pynvml.NVML_FI_DEV_REMAPPED_COR: cor,
            pynvml.NVML_FI_DEV_REMAPPED_UNC: unc,
            pynvml.NVML_FI_DEV_REMAPPED_PENDING: int(pending),
            pynvml.NVML_FI_DEV_REMAPPED_FAILURE: int(failure),
        }[fid]

    # ------------------------------------------------------------------------------------- events
    def nvmlEventSetCreate(self) -> Any:
        self._enter("nvmlEventSetCreate", None)
        with self._lock:
            key = _EVENT_SET_BASE + len(self._event_sets) + 1
            self._event_sets[key] = _EventSet(set())
        return _handle(key, pynvml.c_nvmlEventSet_t)

    def _event_set(self, event_set: Any) -> _EventSet:
        es = self._event_sets.get(_address(event_set) or 0)
        if es is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return es

    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None:
        gpu = self._device_call("nvmlDeviceRegisterEvents", handle)
        es = self._event_set(event_set)
        if event_types & pynvml.nvmlEventTypeXidCriticalError:
            with self._lock:
                es.devices.add(gpu.index)

    def nvmlEventSetWait(self, event_set: Any, timeoutms: int) -> Any:
        """The next due XID for a registered GPU, or NVMLError_Timeout after ``timeoutms`` (real time)."""
        self._enter("nvmlEventSetWait", None)
        es = self._event_set(event_set)
        deadline = time.monotonic() + timeoutms / 1000
        while True:
            now = self.clock()
            with self._lock:
                due = sorted(
                    (x for x in self._xids if x[0] in es.devices and x[1] <= now and x not in self._delivered),
                    key=lambda x: (x[1], x[0]),
                )
                if due:
                    self._delivered.add(due[0])
            if due:
                gpu, _, code = due[0]
                data = pynvml.c_nvmlEventData_t()
                data.device = _handle(_DEVICE_BASE + 0x100 * gpu)
                data.eventType = pynvml.nvmlEventTypeXidCriticalError
                data.eventData = code
                data.gpuInstanceId = data.computeInstanceId = 0xFFFFFFFF
                return data
            left = deadline - time.monotonic()
            if left <= 0:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
            self._sleep(min(left, 0.02))
            if self._refcount == 0:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    nvmlEventSetWait_v2 = nvmlEventSetWait

    def nvmlEventSetFree(self, event_set: Any) -> None:
        self._enter("nvmlEventSetFree", None)
        with self._lock:
            self._event_sets.pop(_address(event_set) or 0, None)


def _fault(spec: FaultSpec) -> _Fault:
    return _Fault(
        call=spec.call,
        gpu=spec.gpu,
        error=error_code(spec.error) if spec.error is not None else None,
        hang=spec.hang,
        start=spec.start,
        until=spec.until,
        calls=spec.calls,
    )
