"""A stand-in for the NVIDIA driver's NVML library (libnvidia-ml.so.1), below the real ``pynvml`` binding.

``NvmlDriver`` emulates libnvidia-ml's C entry points: each is a ctypes ``CFUNCTYPE`` callback with the
C signature of nvml.h, written in Python, that fills the caller's C structs through the pointers it is
passed and returns an ``nvmlReturn_t``. ``install()`` hands it to the binding as its loaded library
(``pynvml.nvmlLib``, which the binding otherwise loads with ``CDLL("libnvidia-ml.so.1")`` and resolves
symbols from with getattr), so every GPU path runs the binding's own code: argument marshalling, struct
versions, the two-call size protocol of list queries, and the mapping of return codes to exceptions.
Structs and constants here are written from nvml.h, not borrowed from the binding, so a binding whose
struct disagrees with the C layout reads garbage here as it would on a real host.

Driven by a scenario (``headroom.simulation.scenario``). Tests steer it at runtime:
- ``clock``: seconds since the scenario started (injectable; default wall time since creation);
- ``inject(call, gpu=None, error=..., hang=..., calls=N)`` / ``clear()``: faults of any NVML error
  class, or a hang; ``release()`` ends hung calls. Like the real library, ``nvmlShutdown`` does not
  interrupt a call blocked in another thread (NVML documents no such thing);
- ``inject_xid(gpu, code)``: an XID, delivered (like the driver does) to every event set registered
  for that GPU when it happens;
- ``calls``: (entry point, gpu index or None) -> calls, also under the binding's function name where it
  differs (``nvmlInit`` for ``nvmlInitWithFlags``, ``nvmlDeviceGetCount`` for ``..._v2``);
  ``callers``: entry point -> thread names; ``errors``: exceptions raised inside the stand-in itself.

Only one library can be the binding's at a time (the binding keeps it in a module global): the last
``install()`` wins; the NVML collector installs its scenario's driver when it starts a session.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections import Counter
from collections.abc import Callable
from ctypes import (
    CFUNCTYPE,
    c_char,
    c_double,
    c_int,
    c_int64,
    c_longlong,
    c_uint,
    c_ulong,
    c_ulonglong,
    c_ushort,
    c_void_p,
)
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from headroom.simulation.scenario import CLOCK_EVENT_REASONS, GPM_SIGNALS, FaultSpec

if TYPE_CHECKING:
    from headroom.simulation.scenario import GpuSpec, Scenario

# ------------------------------------------------------------------------------------------ nvml.h
SUCCESS = 0
ERRORS: dict[str, int] = {
    "UNINITIALIZED": 1, "INVALID_ARGUMENT": 2, "NOT_SUPPORTED": 3, "NO_PERMISSION": 4, "ALREADY_INITIALIZED": 5,
    "NOT_FOUND": 6, "INSUFFICIENT_SIZE": 7, "INSUFFICIENT_POWER": 8, "DRIVER_NOT_LOADED": 9, "TIMEOUT": 10,
    "IRQ_ISSUE": 11, "LIBRARY_NOT_FOUND": 12, "FUNCTION_NOT_FOUND": 13, "CORRUPTED_INFOROM": 14,
    "GPU_IS_LOST": 15, "RESET_REQUIRED": 16, "OPERATING_SYSTEM": 17, "LIB_RM_VERSION_MISMATCH": 18,
    "IN_USE": 19, "MEMORY": 20, "NO_DATA": 21, "VGPU_ECC_NOT_SUPPORTED": 22, "INSUFFICIENT_RESOURCES": 23,
    "FREQ_NOT_SUPPORTED": 24, "ARGUMENT_VERSION_MISMATCH": 25, "DEPRECATED": 26, "NOT_READY": 27,
    "GPU_NOT_FOUND": 28, "INVALID_STATE": 29, "UNKNOWN": 999,
}  # fmt: skip
_E = ERRORS
_ERROR_TEXT = {code: name.replace("_", " ").capitalize() for name, code in ERRORS.items()}
NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE for unsigned long long

# field ids (nvml.h NVML_FI_*)
FI_ECC_DBE_VOL_TOTAL, FI_ECC_DBE_AGG_TOTAL = 4, 6
FI_MEMORY_TEMP, FI_TOTAL_ENERGY_CONSUMPTION = 82, 83
FI_REMAPPED_COR, FI_REMAPPED_UNC, FI_REMAPPED_PENDING, FI_REMAPPED_FAILURE = 142, 143, 144, 145
FI_PCIE_COUNT_TX_BYTES, FI_PCIE_COUNT_RX_BYTES = 197, 198
FI_NVLINK_LINK_COUNT = 91
FI_NVLINK_THROUGHPUT_DATA_TX, FI_NVLINK_THROUGHPUT_DATA_RX = 138, 139  # KiB, per link (scopeId)
# GPM metric ids (nvml.h NVML_GPM_METRIC_*) and the scenario signal each one reads (a percentage)
GPM_METRICS = {2: "sm_active", 3: "sm_occupancy", 5: "tensor_active", 10: "dram_active"}
GPM_SUPPORT_VERSION = GPM_METRICS_GET_VERSION = 1
FIELD_NAMES = {
    "NVML_FI_DEV_ECC_DBE_VOL_TOTAL": FI_ECC_DBE_VOL_TOTAL, "NVML_FI_DEV_ECC_DBE_AGG_TOTAL": FI_ECC_DBE_AGG_TOTAL,
    "NVML_FI_DEV_MEMORY_TEMP": FI_MEMORY_TEMP, "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION": FI_TOTAL_ENERGY_CONSUMPTION,
    "NVML_FI_DEV_REMAPPED_COR": FI_REMAPPED_COR, "NVML_FI_DEV_REMAPPED_UNC": FI_REMAPPED_UNC,
    "NVML_FI_DEV_REMAPPED_PENDING": FI_REMAPPED_PENDING, "NVML_FI_DEV_REMAPPED_FAILURE": FI_REMAPPED_FAILURE,
    "NVML_FI_DEV_PCIE_COUNT_TX_BYTES": FI_PCIE_COUNT_TX_BYTES, "NVML_FI_DEV_PCIE_COUNT_RX_BYTES": FI_PCIE_COUNT_RX_BYTES,
    "NVML_FI_DEV_NVLINK_LINK_COUNT": FI_NVLINK_LINK_COUNT,
    "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX": FI_NVLINK_THROUGHPUT_DATA_TX,
    "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX": FI_NVLINK_THROUGHPUT_DATA_RX,
}  # fmt: skip
# nvmlValueType_t
VT_DOUBLE, VT_UINT, VT_ULONG, VT_ULONGLONG, VT_SLONGLONG, VT_SINT, VT_USHORT = range(7)
XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError
CLOCK_SM, CLOCK_MEM = 1, 2  # nvmlClockType_t
PCIE_UTIL_TX, PCIE_UTIL_RX = 0, 1
TEMPERATURE_GPU = 0
TEMPERATURE_THRESHOLDS = {0: 92, 1: 89, 2: 95, 3: 87}  # nvmlTemperatureThresholds_t -> degC
MEMORY_ERROR_UNCORRECTED, VOLATILE_ECC = 1, 0
DEVICE_MIG_DISABLE, DEVICE_MIG_ENABLE = 0, 1
MEMORY_V2 = 0x02000028  # nvmlMemory_v2: sizeof(nvmlMemory_v2_t) | 2 << 24
TEMPERATURE_V1 = 0x0100000C


class Memory(ctypes.Structure):  # nvmlMemory_t
    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class MemoryV2(ctypes.Structure):  # nvmlMemory_v2_t
    _fields_ = [("version", c_uint), ("total", c_ulonglong), ("reserved", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class Utilization(ctypes.Structure):  # nvmlUtilization_t
    _fields_ = [("gpu", c_uint), ("memory", c_uint)]


class PciInfo(ctypes.Structure):  # nvmlPciInfo_t
    _fields_ = [("busIdLegacy", c_char * 16), ("domain", c_uint), ("bus", c_uint), ("device", c_uint),
                ("pciDeviceId", c_uint), ("pciSubSystemId", c_uint), ("busId", c_char * 32)]  # fmt: skip


class GpuInstancePlacement(ctypes.Structure):  # nvmlGpuInstancePlacement_t
    _fields_ = [("start", c_uint), ("size", c_uint)]


class GpuInstanceInfo(ctypes.Structure):  # nvmlGpuInstanceInfo_t
    _fields_ = [("device", c_void_p), ("id", c_uint), ("profileId", c_uint), ("placement", GpuInstancePlacement)]


class ProcessInfoV1(ctypes.Structure):  # nvmlProcessInfo_v1_t
    _fields_ = [("pid", c_uint), ("usedGpuMemory", c_ulonglong)]


class ProcessInfo(ctypes.Structure):  # nvmlProcessInfo_v2_t, and nvmlProcessInfo_t (the _v3 entry point)
    _fields_ = [("pid", c_uint), ("usedGpuMemory", c_ulonglong), ("gpuInstanceId", c_uint), ("computeInstanceId", c_uint)]


class ProcessUtilizationSample(ctypes.Structure):  # nvmlProcessUtilizationSample_t
    _fields_ = [("pid", c_uint), ("timeStamp", c_ulonglong), ("smUtil", c_uint), ("memUtil", c_uint),
                ("encUtil", c_uint), ("decUtil", c_uint)]  # fmt: skip


class Value(ctypes.Union):  # nvmlValue_t
    _fields_ = [("dVal", c_double), ("uiVal", c_uint), ("ulVal", c_ulong), ("ullVal", c_ulonglong),
                ("sllVal", c_longlong), ("siVal", c_int), ("usVal", c_ushort)]  # fmt: skip


class FieldValue(ctypes.Structure):  # nvmlFieldValue_t
    _fields_ = [("fieldId", c_uint), ("scopeId", c_uint), ("timestamp", c_int64), ("latencyUsec", c_int64),
                ("valueType", c_int), ("nvmlReturn", c_int), ("value", Value)]  # fmt: skip


class EventData(ctypes.Structure):  # nvmlEventData_t
    _fields_ = [("device", c_void_p), ("eventType", c_ulonglong), ("eventData", c_ulonglong),
                ("gpuInstanceId", c_uint), ("computeInstanceId", c_uint)]  # fmt: skip


class TemperatureV1(ctypes.Structure):  # nvmlTemperature_v1_t
    _fields_ = [("version", c_uint), ("sensorType", c_int), ("temperature", c_int)]


class GpmSupport(ctypes.Structure):  # nvmlGpmSupport_t
    _fields_ = [("version", c_uint), ("isSupportedDevice", c_uint)]


class GpmMetric(ctypes.Structure):  # nvmlGpmMetric_t
    _fields_ = [("metricId", c_uint), ("nvmlReturn", c_int), ("value", c_double),
                ("shortName", c_void_p), ("longName", c_void_p), ("unit", c_void_p)]  # fmt: skip


class GpmMetricsGetHead(ctypes.Structure):  # nvmlGpmMetricsGet_t up to its metrics[NVML_GPM_METRIC_MAX]
    _fields_ = [("version", c_uint), ("numMetrics", c_uint), ("sample1", c_void_p), ("sample2", c_void_p)]


# ------------------------------------------------------------------------------------- stand-in state
_DEVICE_BASE = 0x5EED_0000
_GPU_INSTANCE_BASE = 0x5EE1_0000  # GPU instance handles (nvmlGpuInstance_t): base + 0x100 * GPU + MIG slot + 1
_EVENT_SET_BASE = 0x5EE7_0000
_REASON_BIT = {name: 1 << i for i, name in enumerate(CLOCK_EVENT_REASONS)}
_NO_LIBRARY_NEEDED = {"nvmlInitWithFlags", "nvmlInit_v2", "nvmlErrorString"}
# the binding's function name -> the entry point it calls, where they differ (for faults and ``calls``)
ALIASES = {
    "nvmlInit": "nvmlInitWithFlags",
    "nvmlDeviceGetCount": "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex": "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetPciInfo": "nvmlDeviceGetPciInfo_v3",
    "nvmlEventSetWait": "nvmlEventSetWait_v2",
}
# entry point -> the scenario query whose ``unsupported`` entry makes it answer NOT_SUPPORTED
_QUERY_OF_CALL = {
    "nvmlDeviceGetUtilizationRates": "utilization",
    "nvmlDeviceGetMemoryInfo": "memory_info",
    "nvmlDeviceGetMemoryInfo_v2": "memory_info",
    "nvmlDeviceGetPowerUsage": "power",
    "nvmlDeviceGetEnforcedPowerLimit": "power_limit",
    "nvmlDeviceGetPowerManagementLimitConstraints": "power_limit",
    "nvmlDeviceGetTotalEnergyConsumption": "energy",
    "nvmlDeviceGetTemperature": "temperature",
    "nvmlDeviceGetTemperatureV": "temperature",
    "nvmlDeviceGetTemperatureThreshold": "temperature",
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
# field id -> (scenario query, value type)
_FIELDS = {
    FI_MEMORY_TEMP: ("memory_temperature", VT_UINT),
    FI_TOTAL_ENERGY_CONSUMPTION: ("energy", VT_ULONGLONG),
    FI_ECC_DBE_VOL_TOTAL: ("ecc", VT_ULONGLONG),
    FI_ECC_DBE_AGG_TOTAL: ("ecc", VT_ULONGLONG),
    FI_REMAPPED_COR: ("remapped_rows", VT_UINT),
    FI_REMAPPED_UNC: ("remapped_rows", VT_UINT),
    FI_REMAPPED_PENDING: ("remapped_rows", VT_UINT),
    FI_REMAPPED_FAILURE: ("remapped_rows", VT_UINT),
    FI_PCIE_COUNT_TX_BYTES: ("pcie_counters", VT_ULONGLONG),
    FI_PCIE_COUNT_RX_BYTES: ("pcie_counters", VT_ULONGLONG),
    FI_NVLINK_LINK_COUNT: ("nvlink", VT_UINT),
    FI_NVLINK_THROUGHPUT_DATA_TX: ("nvlink", VT_ULONGLONG),
    FI_NVLINK_THROUGHPUT_DATA_RX: ("nvlink", VT_ULONGLONG),
}
_VALUE_MEMBER = {VT_DOUBLE: "dVal", VT_UINT: "uiVal", VT_ULONG: "ulVal", VT_ULONGLONG: "ullVal",
                 VT_SLONGLONG: "sllVal", VT_SINT: "siVal", VT_USHORT: "usVal"}  # fmt: skip

H, P, U, INT, ULL = c_void_p, c_void_p, c_uint, c_int, c_ulonglong  # handle, pointer, and scalar C types


def error_code(name: str | int) -> int:
    """The NVML error code for GPU_IS_LOST, NVML_ERROR_GPU_IS_LOST or a number. Raises ValueError."""
    if isinstance(name, int) and not isinstance(name, bool):
        if name not in ERRORS.values():
            raise ValueError(f"unknown NVML error code {name}")
        return name
    if isinstance(name, str):
        code = ERRORS.get(name.removeprefix("NVML_ERROR_"))
        if code is not None:
            return code
    raise ValueError(f"unknown NVML error {name!r} (expected one of: {', '.join(sorted(ERRORS))})")


class _Return(Exception):
    """Raised inside an entry point: return this nvmlReturn_t."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class _Calls(Counter):
    """Counter of (entry point, gpu) that also answers to the binding's name of an entry point."""

    def __missing__(self, key: Any) -> int:
        if isinstance(key, tuple) and key and key[0] in ALIASES:
            return super().get((ALIASES[key[0]], *key[1:]), 0)
        return 0


@dataclass
class _Fault:
    call: str
    gpu: int | None
    error: int | None
    hang: float | None
    start: float | None
    until: float | None
    calls: int | None  # remaining; None = unlimited
    mig: bool = True  # also on MIG device handles of the GPU


def _fault(spec: FaultSpec) -> _Fault:
    return _Fault(
        call=ALIASES.get(spec.call, spec.call),
        gpu=spec.gpu,
        error=error_code(spec.error) if spec.error is not None else None,
        hang=spec.hang,
        start=spec.start,
        until=spec.until,
        calls=spec.calls,
    )


def _put(ctype: Any, address: int | None, value: Any) -> None:
    """Write ``value`` as ``ctype`` at ``address`` (an out-parameter); INVALID_ARGUMENT for NULL."""
    if not address:
        raise _Return(_E["INVALID_ARGUMENT"])
    ctype.from_address(address).value = value


def _struct(ctype: Any, address: int | None) -> Any:
    if not address:
        raise _Return(_E["INVALID_ARGUMENT"])
    return ctype.from_address(address)


def _string(address: int | None, length: int, text: str) -> None:
    data = text.encode()
    if not address:
        raise _Return(_E["INVALID_ARGUMENT"])
    if len(data) + 1 > length:
        raise _Return(_E["INSUFFICIENT_SIZE"])
    ctypes.memmove(address, data + b"\0", len(data) + 1)


class NvmlDriver:
    """libnvidia-ml's entry points for one scenario, as ctypes callbacks. See the module docstring."""

    def __init__(self, scenario: Scenario, clock: Callable[[], float] | None = None) -> None:
        self.scenario = scenario
        if clock is None:
            started = time.monotonic()
            clock = lambda: time.monotonic() - started  # noqa: E731
        self.clock: Callable[[], float] = clock
        self.calls: Counter[tuple[str, int | None]] = _Calls()
        self.callers: dict[str, set[str]] = {}
        self.errors: list[BaseException] = []
        # benchmarks: set ``timing`` to add each entry point's thread CPU (inside the stand-in) to cpu_seconds,
        # so the collector's own cost can be told apart from the stand-in's (bench/ticks.py); with
        # ``timing_thread`` set, only that thread's calls count (not the XID watcher's waits ending mid-tick)
        self.timing = False
        self.timing_thread: int | None = None
        self.cpu_seconds = 0.0
        self._gpus = scenario.gpus
        self._lock = threading.Lock()
        self._wake = threading.Condition()  # hangs and event waits end early when _generation moves
        self._generation = 0
        self._refcount = 0
        self._faults = [_fault(f) for f in scenario.faults]
        self._xids: list[tuple[int, float, int]] = [(g.index, x.at, x.code) for g in self._gpus for x in g.xids]
        self._event_sets: dict[int, dict[int, float]] = {}  # set -> gpu -> registered at (scenario time)
        self._delivered: set[tuple[int, int, float, int]] = set()  # (set, gpu, at, code)
        self._next_event_set = 0
        self._energy: dict[int, tuple[float, float]] = {}  # gpu -> (t, millijoules)
        self._power_limits: dict[int, int] = {}  # gpu -> milliwatts set through nvmlDeviceSetPowerManagementLimit
        self._pcie_bytes: dict[tuple[int, str], tuple[float, float]] = {}  # (gpu, tx|rx) -> (t, bytes)
        self._nvlink_bytes: dict[tuple[int, str], tuple[float, float]] = {}  # (gpu, tx|rx) -> (t, bytes, all links)
        self._gpm_samples: dict[int, tuple[int, float] | None] = {}  # sample -> (gpu, taken at) or None (empty)
        self._next_gpm_sample = 0
        self._error_strings: dict[int, ctypes.Array[Any]] = {}
        self._entries: dict[str, Any] = {}
        for name, argtypes, impl in self._table():
            if name in scenario.missing_functions:
                continue
            entry = self._entries[name] = CFUNCTYPE(c_int, *argtypes)(self._thunk(name, impl))
            setattr(self, name, entry)
        # nvmlErrorString returns a C string: its own prototype
        if "nvmlErrorString" not in scenario.missing_functions:
            self.nvmlErrorString = CFUNCTYPE(c_void_p, c_int)(self._error_string)

    @property
    def entry_points(self) -> tuple[str, ...]:
        """The C functions this stand-in exports (what ``dlsym`` would find in libnvidia-ml)."""
        return (*self._entries, "nvmlErrorString")

    # ----------------------------------------------------------------------------------- binding
    def install(self) -> NvmlDriver:
        """Make this the binding's loaded library (``pynvml.nvmlLib``), as if CDLL had loaded it."""
        import pynvml

        with pynvml.libLoadLock:
            pynvml.nvmlLib = self
            pynvml._nvmlGetFunctionPointer_cache.clear()
        return self

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
        mig: bool = True,
    ) -> None:
        """Make ``call`` (an entry point, the binding's name for one, or an NVML_FI_* field of
        nvmlDeviceGetFieldValues; on ``gpu``, or on any GPU) return ``error`` and/or block ``hang`` seconds.

        ``calls``: only the next N matching calls; ``start``/``until``: a window in scenario seconds;
        ``mig=False``: only on the GPU's own handle, not on its MIG device handles.
        """
        code = error_code(error) if error is not None else None
        with self._lock:
            self._faults.append(_Fault(ALIASES.get(call, call), gpu, code, hang, start, until, calls, mig))

    def clear(self, call: str | None = None) -> None:
        """Remove injected and scenario faults (all, or those for ``call``) and release hung calls."""
        call = ALIASES.get(call, call) if call is not None else None
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
        """Raise XID ``code`` on ``gpu`` now (delivered to every event set registered for it)."""
        with self._lock:
            self._xids.append((gpu, self.clock(), code))

    # ----------------------------------------------------------------------------------- plumbing
    def _thunk(self, name: str, impl: Callable[..., None]) -> Callable[..., int]:
        clock = time.thread_time

        def entry(*args: Any) -> int:
            started = clock()  # first: the stand-in's own bookkeeping below is inside its timed CPU
            try:
                impl(*args)
            except _Return as r:
                return r.code
            except Exception as exc:  # a bug in the stand-in: visible to tests, UNKNOWN to the caller
                self.errors.append(exc)
                return _E["UNKNOWN"]
            finally:
                if self.timing and (self.timing_thread is None or self.timing_thread == threading.get_ident()):
                    self.cpu_seconds += clock() - started
            return SUCCESS

        entry.__name__ = name
        return entry

    def _error_string(self, code: int) -> int | None:
        buffer = self._error_strings.get(code)
        if buffer is None:
            buffer = self._error_strings[code] = ctypes.create_string_buffer(_ERROR_TEXT.get(code, "Unknown Error").encode())
        return ctypes.addressof(buffer)

    def _enter(self, name: str, gpu: int | None, query_gpu: GpuSpec | None = None, mig: bool = False) -> None:
        """Count the call, then apply library state, faults and NOT_SUPPORTED; raises _Return."""
        now = self.clock()
        hang, error = 0.0, None
        with self._lock:
            self.calls[(name, gpu)] += 1
            self.callers.setdefault(name, set()).add(threading.current_thread().name)
            if name not in _NO_LIBRARY_NEEDED and self._refcount == 0:
                error = _E["UNINITIALIZED"]
            else:
                for f in self._faults:
                    if f.call != name or (f.gpu is not None and f.gpu != gpu) or (mig and not f.mig):
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
            self._sleep(hang)  # only release() ends it early: nvmlShutdown does not
        if error is None and query_gpu is not None and _QUERY_OF_CALL.get(name) in query_gpu.unsupported:
            error = _E["NOT_SUPPORTED"]
        if error is not None:
            raise _Return(error)

    def _gpu(self, handle: int | None) -> tuple[GpuSpec, int | None]:
        """The GPU spec and MIG slot (None for the whole GPU) behind a handle."""
        if handle is None or not _DEVICE_BASE <= handle < _DEVICE_BASE + 0x100 * len(self._gpus):
            raise _Return(_E["INVALID_ARGUMENT"])
        index, slot = divmod(handle - _DEVICE_BASE, 0x100)
        gpu = self._gpus[index]
        if slot and slot > len(gpu.mig_instances):
            raise _Return(_E["INVALID_ARGUMENT"])
        return gpu, (slot - 1 if slot else None)

    def _device(self, name: str, handle: int | None, allow_mig: bool = False) -> GpuSpec:
        try:
            gpu, slot = self._gpu(handle)
        except _Return:
            self._enter(name, None)
            raise
        self._enter(name, gpu.index, gpu, mig=slot is not None)
        if slot is not None and not allow_mig:
            raise _Return(_E["NOT_SUPPORTED"])
        return gpu

    def _value(self, gpu: GpuSpec, signal: str, default: float) -> float:
        s = gpu.signals.get(signal)
        return s.at(self.clock()) if s is not None else default

    def _table(self) -> list[tuple[str, list[Any], Callable[..., None]]]:
        """(entry point, C argument types, implementation) for every function this stand-in exports."""

        def uint_query(name: str, read: Callable[[GpuSpec], float], ctype: Any = c_uint) -> tuple[str, list[Any], Callable[..., None]]:
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

    # ---------------------------------------------------------------------------------- lifecycle
    def _init(self, flags: int) -> None:
        self._enter("nvmlInitWithFlags", None)
        with self._lock:
            self._refcount += 1

    def _shutdown(self) -> None:
        self._enter("nvmlShutdown", None)
        with self._lock:
            self._refcount -= 1
        with self._wake:  # event waits notice at once (they recheck the library); hung calls do not
            self._wake.notify_all()

    def _system_string(self, name: str, buf: int, length: int, text: str) -> None:
        self._enter(name, None)
        _string(buf, length, text)

    def _cuda(self, name: str, out: int) -> None:
        self._enter(name, None)
        _put(c_int, out, self.scenario.cuda_driver_version)

    # ------------------------------------------------------------------------------------ devices
    def _count(self, out: int) -> None:
        self._enter("nvmlDeviceGetCount_v2", None)
        _put(c_uint, out, len(self._gpus))

    def _handle_by_index(self, index: int, out: int) -> None:
        ok = 0 <= index < len(self._gpus)
        self._enter("nvmlDeviceGetHandleByIndex_v2", index if ok else None)
        if not ok:
            raise _Return(_E["INVALID_ARGUMENT"])
        _put(c_void_p, out, _DEVICE_BASE + 0x100 * index)

    def _handle_by_uuid(self, uuid: int, out: int) -> None:
        text = ctypes.string_at(uuid).decode(errors="replace") if uuid else ""
        match = next((g for g in self._gpus if g.uuid == text), None)
        self._enter("nvmlDeviceGetHandleByUUID", match.index if match else None)
        if match is None:
            raise _Return(_E["NOT_FOUND"])
        _put(c_void_p, out, _DEVICE_BASE + 0x100 * match.index)

    def _uuid(self, handle: int, buf: int, length: int) -> None:
        gpu = self._device("nvmlDeviceGetUUID", handle, allow_mig=True)
        _, slot = self._gpu(handle)
        _string(buf, length, gpu.uuid if slot is None else gpu.mig_instances[slot].uuid)

    def _pci_info(self, handle: int, out: int) -> None:
        gpu = self._device("nvmlDeviceGetPciInfo_v3", handle)
        info = _struct(PciInfo, out)
        bus = gpu.pci_bus_id.encode()
        info.busId = bus
        info.busIdLegacy = bus[-12:]
        parts = gpu.pci_bus_id.replace(".", ":").split(":")
        info.domain, info.bus, info.device = int(parts[0], 16), int(parts[1], 16), int(parts[2], 16)
        info.pciDeviceId = 0x233010DE

    # ----------------------------------------------------------------------------------- readings
    def _utilization(self, handle: int, out: int) -> None:
        gpu = self._device("nvmlDeviceGetUtilizationRates", handle)
        if gpu.mig_enabled:
            raise _Return(_E["NOT_SUPPORTED"])  # as on real MIG-enabled GPUs
        util = _struct(Utilization, out)
        util.gpu = round(100 * self._value(gpu, "utilization", 0.0))
        util.memory = round(100 * self._value(gpu, "memory_utilization", 0.0))

    def _memory(self, name: str, handle: int, out: int) -> None:
        gpu = self._device(name, handle, allow_mig=True)
        _, slot = self._gpu(handle)
        v2 = name.endswith("_v2")
        if v2 and _struct(MemoryV2, out).version != MEMORY_V2:
            raise _Return(_E["ARGUMENT_VERSION_MISMATCH"])
        if slot is not None:
            mig = gpu.mig_instances[slot]
            total, reserved = mig.memory_total, 0
            used = min(int(mig.memory_used.at(self.clock())), total)
        else:
            total, reserved = gpu.memory_total, gpu.memory_reserved
            # never less than its processes hold (stand-ins come and go with start_processes)
            processes = sum(used for _, used, _ in self._process_table(gpu, self.clock()) if used is not None)
            used = min(max(int(self._value(gpu, "memory_used", 0.0)), processes), total - reserved)
        if v2:
            mem = _struct(MemoryV2, out)
            mem.total, mem.reserved, mem.used, mem.free = total, reserved, used, total - reserved - used
        else:  # v1 "used" counts the reserved memory too
            mem = _struct(Memory, out)
            mem.total, mem.used, mem.free = total, used + reserved, total - reserved - used

    def _set_power_limit(self, handle: int, milliwatts: int) -> None:
        """What ``nvidia-smi -pl`` does: a new management limit, enforced from now on (the stand-in lets any
        caller set it; the real driver asks for root). NVML rejects a limit outside the board's range: here
        anything from 1 W to twice the scenario's limit."""
        gpu = self._device("nvmlDeviceSetPowerManagementLimit", handle)
        if not 1000 <= milliwatts <= 2000 * gpu.power_limit:
            raise _Return(_E["INVALID_ARGUMENT"])
        with self._lock:
            self._power_limits[gpu.index] = milliwatts

    def _power_limit_constraints(self, handle: int, low: int, high: int) -> None:
        gpu = self._device("nvmlDeviceGetPowerManagementLimitConstraints", handle)
        least, most = gpu.power_limit_range
        _put(c_uint, low, round(1000 * least))
        _put(c_uint, high, round(1000 * most))

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

    def _mean(self, gpu: GpuSpec, signal_name: str, t0: float, t1: float) -> float:
        """The signal's mean over [t0, t1] of scenario time (10 ms steps); its value at t1 when t1 <= t0."""
        signal = gpu.signals[signal_name]
        span = t1 - t0
        if span <= 0:
            return signal.at(t1)
        steps = max(1, min(1000, round(span / 0.01)))
        return sum(signal.at(t0 + (i + 0.5) * span / steps) for i in range(steps)) / steps

    def _pcie_bytes_total(self, gpu: GpuSpec, direction: str, kind: str = "pcie") -> int:
        """Cumulative bytes: the pcie_tx/pcie_rx (or nvlink_tx/nvlink_rx) rate signal integrated over
        scenario time, in 10 ms steps (a burst between two reads is counted, as the hardware counter does)."""
        now = self.clock()
        signal = gpu.signals.get(f"{kind}_{direction}")
        store = self._pcie_bytes if kind == "pcie" else self._nvlink_bytes
        with self._lock:
            last = store.get((gpu.index, direction))
            if last is None:
                total = 0.0
            else:
                t0, b0 = last
                span = max(0.0, now - t0)
                steps = max(1, min(1000, round(span / 0.01)))
                width = span / steps
                total = b0 + (sum(signal.at(t0 + (i + 0.5) * width) for i in range(steps)) * width if signal is not None else 0.0)
            if last is None or now >= last[0]:
                store[(gpu.index, direction)] = (now, total)
            else:
                total = last[1]
        return int(total)

    def _temperature(self, handle: int, sensor: int, out: int) -> None:
        gpu = self._device("nvmlDeviceGetTemperature", handle)
        if sensor != TEMPERATURE_GPU:
            raise _Return(_E["INVALID_ARGUMENT"])
        _put(c_uint, out, round(self._value(gpu, "temperature", 35.0)))

    def _temperature_v(self, handle: int, out: int) -> None:
        gpu = self._device("nvmlDeviceGetTemperatureV", handle)
        temp = _struct(TemperatureV1, out)
        if temp.version != TEMPERATURE_V1:
            raise _Return(_E["ARGUMENT_VERSION_MISMATCH"])
        if temp.sensorType != TEMPERATURE_GPU:
            raise _Return(_E["INVALID_ARGUMENT"])
        temp.temperature = round(self._value(gpu, "temperature", 35.0))

    def _temperature_threshold(self, handle: int, kind: int, out: int) -> None:
        """An H100 SXM's thresholds (nvidia-smi -q -d TEMPERATURE): shutdown 92, slowdown 89, memory max 95,
        GPU max operating 87 degC; the acoustic and GPS thresholds are not supported."""
        self._device("nvmlDeviceGetTemperatureThreshold", handle)
        value = TEMPERATURE_THRESHOLDS.get(kind)
        if value is None:
            raise _Return(_E["NOT_SUPPORTED"])
        _put(c_uint, out, value)

    def _clock_info(self, name: str, handle: int, clock_type: int, out: int) -> None:
        gpu = self._device(name, handle)
        current = name == "nvmlDeviceGetClockInfo"
        if clock_type == CLOCK_SM:
            hertz = self._value(gpu, "sm_clock", gpu.sm_clock_max) if current else gpu.sm_clock_max
        elif clock_type == CLOCK_MEM:
            hertz = self._value(gpu, "memory_clock", gpu.memory_clock_max) if current else gpu.memory_clock_max
        else:
            raise _Return(_E["NOT_SUPPORTED"])
        _put(c_uint, out, round(hertz / 1e6))

    def _reasons(self, gpu: GpuSpec) -> int:
        now = self.clock()
        mask = 0
        for name, signal in gpu.clock_events.items():
            if name in gpu.supported_clock_events and signal.at(now) > 0.5:
                mask |= _REASON_BIT[name]
        return mask

    def _supported_reasons(self, gpu: GpuSpec) -> int:
        return sum(_REASON_BIT[r] for r in gpu.supported_clock_events)

    def _pcie_throughput(self, handle: int, counter: int, out: int) -> None:
        """KB/s over a 20 ms window; like the real call, it blocks for those 20 ms."""
        gpu = self._device("nvmlDeviceGetPcieThroughput", handle)
        if counter not in (PCIE_UTIL_TX, PCIE_UTIL_RX):
            raise _Return(_E["INVALID_ARGUMENT"])
        time.sleep(0.02)
        signal = "pcie_tx" if counter == PCIE_UTIL_TX else "pcie_rx"
        _put(c_uint, out, round(self._value(gpu, signal, 0.0) / 1024))

    # ---------------------------------------------------------------------------------- processes
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

    def _processes(self, name: str, struct: Any, handle: int, count: int, infos: int | None) -> None:
        """The two-call protocol: *count too small (or infos NULL) -> INSUFFICIENT_SIZE with the size needed.

        On a MIG device handle: the processes of that instance; on a MIG-enabled GPU's handle: all of them,
        with their instance ids (a privileged caller's view; inject NO_PERMISSION for the other)."""
        gpu = self._device(name, handle, allow_mig=True)
        _, slot = self._gpu(handle)
        table = self._process_table(gpu, self.clock())
        instance_of = {pid: m for m in gpu.mig_instances for pid in m.processes}
        instance_of.update({pid: gpu.mig_instances[i] for pid, i in self.scenario.attached_instances(gpu.index).items()})
        if slot is not None:
            mine = gpu.mig_instances[slot]
            table = [row for row in table if instance_of.get(row[0]) is mine]
        capacity = _struct(c_uint, count).value
        _put(c_uint, count, len(table))
        if not table:
            return
        if infos is None or capacity < len(table):
            raise _Return(_E["INSUFFICIENT_SIZE"])
        array = (struct * len(table)).from_address(infos)
        for slot, (pid, used, _) in zip(array, table, strict=True):
            slot.pid = pid
            slot.usedGpuMemory = NOT_AVAILABLE if used is None else used
            if struct is ProcessInfo:
                mig = instance_of.get(pid)
                slot.gpuInstanceId = 0xFFFFFFFF if mig is None else mig.gpu_instance_id
                slot.computeInstanceId = 0xFFFFFFFF if mig is None else mig.compute_instance_id

    def _process_utilization(self, handle: int, samples: int | None, count: int, last_seen: int) -> None:
        """Samples newer than ``last_seen`` for processes that used the SM (an idle process gets none, as
        from the real driver), stamped now (microseconds of scenario time); NOT_FOUND when there are none."""
        gpu = self._device("nvmlDeviceGetProcessUtilization", handle)
        now = self.clock()
        stamp = int(now * 1e6)
        found = [(pid, sm) for pid, _, sm in self._process_table(gpu, now) if sm is not None and round(100 * sm) > 0]
        if stamp <= last_seen or not found:
            raise _Return(_E["NOT_FOUND"])
        capacity = _struct(c_uint, count).value
        _put(c_uint, count, len(found))
        if samples is None or capacity < len(found):
            raise _Return(_E["INSUFFICIENT_SIZE"])
        array = (ProcessUtilizationSample * len(found)).from_address(samples)
        for slot, (pid, sm) in zip(array, found, strict=True):
            slot.pid, slot.timeStamp, slot.smUtil = pid, stamp, round(100 * sm)
            slot.memUtil = slot.encUtil = slot.decUtil = 0

    # ---------------------------------------------------------------------------------------- MIG
    def _mig_mode(self, handle: int, current: int, pending: int) -> None:
        gpu = self._device("nvmlDeviceGetMigMode", handle)
        if gpu.mig_enabled is None:
            raise _Return(_E["NOT_SUPPORTED"])
        mode = DEVICE_MIG_ENABLE if gpu.mig_enabled else DEVICE_MIG_DISABLE
        _put(c_uint, current, mode)
        _put(c_uint, pending, mode)

    def _max_mig_count(self, handle: int, out: int) -> None:
        gpu = self._device("nvmlDeviceGetMaxMigDeviceCount", handle)
        if gpu.mig_enabled is None:
            raise _Return(_E["NOT_SUPPORTED"])
        _put(c_uint, out, 7 if gpu.mig_enabled else 0)

    def _mig_handle(self, handle: int, index: int, out: int) -> None:
        gpu = self._device("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        if not gpu.mig_enabled:
            raise _Return(_E["INVALID_ARGUMENT"])
        if not 0 <= index < len(gpu.mig_instances):
            raise _Return(_E["NOT_FOUND"])
        _put(c_void_p, out, _DEVICE_BASE + 0x100 * gpu.index + index + 1)

    def _gpu_instance_by_id(self, handle: int, gpu_instance_id: int, out: int) -> None:
        gpu = self._device("nvmlDeviceGetGpuInstanceById", handle)
        if not gpu.mig_enabled:
            raise _Return(_E["NOT_SUPPORTED"])
        slot = next((k for k, m in enumerate(gpu.mig_instances) if m.gpu_instance_id == gpu_instance_id), None)
        if slot is None:
            raise _Return(_E["NOT_FOUND"])
        _put(c_void_p, out, _GPU_INSTANCE_BASE + 0x100 * gpu.index + slot + 1)

    def _gpu_instance_info(self, handle: int | None, out: int) -> None:
        index, slot = divmod((handle or 0) - _GPU_INSTANCE_BASE, 0x100)
        if handle is None or not 0 <= index < len(self._gpus) or not 0 < slot <= len(self._gpus[index].mig_instances):
            self._enter("nvmlGpuInstanceGetInfo", None)
            raise _Return(_E["INVALID_ARGUMENT"])
        gpu = self._device("nvmlGpuInstanceGetInfo", _DEVICE_BASE + 0x100 * index)
        m = gpu.mig_instances[slot - 1]
        if m.profile_id is None or m.placement_start is None:
            raise _Return(_E["NOT_SUPPORTED"])
        info = _struct(GpuInstanceInfo, out)
        info.device = _DEVICE_BASE + 0x100 * index
        info.id, info.profileId = m.gpu_instance_id, m.profile_id
        info.placement.start, info.placement.size = m.placement_start, 1

    def _mig(self, name: str, handle: int) -> Any:
        gpu = self._device(name, handle, allow_mig=True)
        _, slot = self._gpu(handle)
        if slot is None:
            raise _Return(_E["INVALID_ARGUMENT"])
        return gpu.mig_instances[slot]

    # ------------------------------------------------------------------------------- health fields
    def _reset(self, gpu: GpuSpec) -> bool:
        """Whether the GPU was reset (its ``reset_at``) by now: a reset zeroes the volatile ECC counters and carries
        out the pending row remaps, as the driver does."""
        return gpu.reset_at is not None and self.clock() >= gpu.reset_at

    def _ecc_volatile(self, gpu: GpuSpec) -> int:
        return 0 if self._reset(gpu) else gpu.ecc_uncorrected_volatile

    def _remap_state(self, gpu: GpuSpec) -> tuple[int, int, bool, bool]:
        cor, unc, pending, failure = gpu.remapped_rows
        return (cor, unc, False, failure) if self._reset(gpu) else (cor, unc, pending, failure)

    def _total_ecc(self, handle: int, error_type: int, counter_type: int, out: int) -> None:
        gpu = self._device("nvmlDeviceGetTotalEccErrors", handle)
        if error_type != MEMORY_ERROR_UNCORRECTED:
            value = 0
        else:
            value = self._ecc_volatile(gpu) if counter_type == VOLATILE_ECC else gpu.ecc_uncorrected_aggregate
        _put(c_ulonglong, out, value)

    def _remapped_rows(self, handle: int, cor: int, unc: int, pending: int, failure: int) -> None:
        gpu = self._device("nvmlDeviceGetRemappedRows", handle)
        values = self._remap_state(gpu)
        for out, value in zip((cor, unc, pending, failure), values, strict=True):
            _put(c_uint, out, int(value))

    def _field_values(self, handle: int, count: int, values: int) -> None:
        gpu = self._device("nvmlDeviceGetFieldValues", handle)
        if count <= 0:
            raise _Return(_E["INVALID_ARGUMENT"])
        array = (FieldValue * count).from_address(values)
        now = self.clock()
        with self._lock:
            field_faults = {FIELD_NAMES.get(f.call): f.error for f in self._faults
                            if f.call.startswith("NVML_FI_") and f.error is not None and (f.gpu is None or f.gpu == gpu.index)
                            and (f.start is None or now >= f.start) and (f.until is None or now < f.until)}  # fmt: skip
        for fv in array:
            fid = fv.fieldId
            fv.timestamp = int(now * 1e6)
            spec = _FIELDS.get(fid)
            if spec is not None and spec[0] == "nvlink" and (not gpu.nvlink_links or (
                    fid != FI_NVLINK_LINK_COUNT and not 0 <= fv.scopeId < gpu.nvlink_links)):
                spec = None  # no NVLink, or no such link
            if spec is None:
                fv.nvmlReturn = _E["NOT_SUPPORTED"]
                continue
            query, vtype = spec
            fault = field_faults.get(fid)
            if fault is not None:
                fv.nvmlReturn = fault
                continue
            if query in gpu.unsupported:
                fv.nvmlReturn = _E["NOT_SUPPORTED"]
                continue
            fv.valueType = vtype
            fv.nvmlReturn = SUCCESS
            setattr(fv.value, _VALUE_MEMBER[vtype], self._field(gpu, fid, fv.scopeId))

    def _field(self, gpu: GpuSpec, fid: int, scope: int = 0) -> int:
        if fid == FI_MEMORY_TEMP:
            return round(self._value(gpu, "memory_temperature", 40.0))
        if fid == FI_TOTAL_ENERGY_CONSUMPTION:
            return self._energy_mj(gpu)
        if fid == FI_PCIE_COUNT_TX_BYTES:
            return self._pcie_bytes_total(gpu, "tx")
        if fid == FI_PCIE_COUNT_RX_BYTES:
            return self._pcie_bytes_total(gpu, "rx")
        if fid == FI_NVLINK_LINK_COUNT:
            return gpu.nvlink_links
        if fid in (FI_NVLINK_THROUGHPUT_DATA_TX, FI_NVLINK_THROUGHPUT_DATA_RX):
            if scope in gpu.nvlink_down:
                return 0
            total = self._pcie_bytes_total(gpu, "tx" if fid == FI_NVLINK_THROUGHPUT_DATA_TX else "rx", "nvlink")
            return total // max(1, gpu.nvlink_links - len(gpu.nvlink_down)) // 1024  # KiB on this link
        cor, unc, pending, failure = self._remap_state(gpu)
        return {
            FI_ECC_DBE_VOL_TOTAL: self._ecc_volatile(gpu),
            FI_ECC_DBE_AGG_TOTAL: gpu.ecc_uncorrected_aggregate,
            FI_REMAPPED_COR: cor,
            FI_REMAPPED_UNC: unc,
            FI_REMAPPED_PENDING: int(pending),
            FI_REMAPPED_FAILURE: int(failure),
        }[fid]

    # ---------------------------------------------------------------------------------- NVLink, GPM
    def _link(self, name: str, handle: int, link: int) -> GpuSpec:
        gpu = self._device(name, handle)
        if not gpu.nvlink_links:
            raise _Return(_E["NOT_SUPPORTED"])
        if not 0 <= link < gpu.nvlink_links:
            raise _Return(_E["INVALID_ARGUMENT"])
        return gpu

    def _nvlink_state(self, handle: int, link: int, out: int) -> None:
        gpu = self._link("nvmlDeviceGetNvLinkState", handle, link)
        _put(c_uint, out, 0 if link in gpu.nvlink_down else 1)

    def _nvlink_version(self, handle: int, link: int, out: int) -> None:
        _put(c_uint, out, self._link("nvmlDeviceGetNvLinkVersion", handle, link).nvlink_version)

    def _gpm_supported(self, gpu: GpuSpec) -> bool:
        return "gpm" not in gpu.unsupported and any(s in gpu.signals for s in GPM_SIGNALS)

    def _gpm_support(self, handle: int, out: int) -> None:
        gpu = self._device("nvmlGpmQueryDeviceSupport", handle)
        support = _struct(GpmSupport, out)
        if support.version != GPM_SUPPORT_VERSION:
            raise _Return(_E["ARGUMENT_VERSION_MISMATCH"])
        support.isSupportedDevice = int(self._gpm_supported(gpu))

    def _gpm_sample_alloc(self, out: int) -> None:
        self._enter("nvmlGpmSampleAlloc", None)
        with self._lock:
            self._next_gpm_sample += 1
            key = _EVENT_SET_BASE + 0x8000 + self._next_gpm_sample
            self._gpm_samples[key] = None
        _put(c_void_p, out, key)

    def _gpm_sample_free(self, sample: int) -> None:
        self._enter("nvmlGpmSampleFree", None)
        with self._lock:
            if self._gpm_samples.pop(sample or 0, False) is False:
                raise _Return(_E["INVALID_ARGUMENT"])

    def _gpm_sample_get(self, handle: int, sample: int) -> None:
        """A snapshot of the GPU's counters (non-blocking): here, which GPU and when."""
        gpu = self._device("nvmlGpmSampleGet", handle)
        if not self._gpm_supported(gpu):
            raise _Return(_E["NOT_SUPPORTED"])
        with self._lock:
            if (sample or 0) not in self._gpm_samples:
                raise _Return(_E["INVALID_ARGUMENT"])
            self._gpm_samples[sample] = (gpu.index, self.clock())

    def _gpm_metrics_get(self, request: int) -> None:
        """Each requested metric averaged between the two samples (the scenario signal, in percent)."""
        self._enter("nvmlGpmMetricsGet", None)
        head = _struct(GpmMetricsGetHead, request)
        if head.version != GPM_METRICS_GET_VERSION:
            raise _Return(_E["ARGUMENT_VERSION_MISMATCH"])
        with self._lock:
            first, second = self._gpm_samples.get(head.sample1 or 0), self._gpm_samples.get(head.sample2 or 0)
        if first is None or second is None or first[0] != second[0] or second[1] <= first[1]:
            raise _Return(_E["INVALID_ARGUMENT"])
        gpu = self._gpus[first[0]]
        metrics = (GpmMetric * head.numMetrics).from_address(request + ctypes.sizeof(GpmMetricsGetHead))
        for metric in metrics:
            signal = GPM_METRICS.get(metric.metricId)
            if signal is None or signal not in gpu.signals:
                metric.nvmlReturn = _E["NOT_SUPPORTED"]
                continue
            metric.nvmlReturn = SUCCESS
            metric.value = 100.0 * self._mean(gpu, signal, first[1], second[1])

    # ------------------------------------------------------------------------------------- events
    def _event_set_create(self, out: int) -> None:
        self._enter("nvmlEventSetCreate", None)
        with self._lock:
            self._next_event_set += 1
            key = _EVENT_SET_BASE + self._next_event_set
            self._event_sets[key] = {}
        _put(c_void_p, out, key)

    def _register_events(self, handle: int, event_types: int, event_set: int) -> None:
        gpu = self._device("nvmlDeviceRegisterEvents", handle)
        with self._lock:
            registered = self._event_sets.get(event_set or 0)
            if registered is None:
                raise _Return(_E["INVALID_ARGUMENT"])
            if event_types & XID_CRITICAL_ERROR:
                registered.setdefault(gpu.index, self.clock())

    def _event_set_wait(self, event_set: int, out: int, timeoutms: int) -> None:
        """The next XID raised on a registered GPU since it was registered (each XID reaches every event
        set registered for its GPU, once), or TIMEOUT after ``timeoutms`` of real time."""
        self._enter("nvmlEventSetWait_v2", None)
        key = event_set or 0
        deadline = time.monotonic() + timeoutms / 1000
        while True:
            now = self.clock()
            with self._lock:
                registered = self._event_sets.get(key)
                if registered is None:
                    raise _Return(_E["INVALID_ARGUMENT"])
                due = sorted(
                    (x for x in self._xids
                     if x[0] in registered and registered[x[0]] <= x[1] <= now and (key, *x) not in self._delivered),
                    key=lambda x: (x[1], x[0]),
                )  # fmt: skip
                if due:
                    self._delivered.add((key, *due[0]))
            if due:
                gpu, _, code = due[0]
                data = _struct(EventData, out)
                data.device = _DEVICE_BASE + 0x100 * gpu
                data.eventType = XID_CRITICAL_ERROR
                data.eventData = code
                data.gpuInstanceId = data.computeInstanceId = 0xFFFFFFFF
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Return(_E["TIMEOUT"])
            with self._wake:
                self._wake.wait(min(left, 0.02))
            if self._refcount == 0:
                raise _Return(_E["UNINITIALIZED"])

    def _event_set_free(self, event_set: int) -> None:
        self._enter("nvmlEventSetFree", None)
        with self._lock:
            if self._event_sets.pop(event_set or 0, None) is None:
                raise _Return(_E["INVALID_ARGUMENT"])

