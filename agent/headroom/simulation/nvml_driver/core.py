"""The driver stand-in's state and plumbing, beneath its entry points.

``DriverCore`` holds one scenario's library state (reference count, faults, XIDs, event sets, counters),
the steering tests use (``inject``, ``clear``, ``release``, ``inject_xid``), ``install`` (the only import of
pynvml here), and what every entry point goes through: ``_thunk`` (the ctypes callback: return codes,
errors, timing), ``_enter`` (count the call; library state, faults, NOT_SUPPORTED) and the handle lookups.
The entry points themselves are in ``device``, ``health`` and ``driver`` (the table), which build on this.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections import Counter
from collections.abc import Callable
from ctypes import CFUNCTYPE, c_int, c_void_p
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

from headroom.simulation.nvml_driver.nvml_h import (
    _E,
    _ERROR_TEXT,
    SUCCESS,
    CArg,
    _put,
    _Return,
    _string,
    error_code,
)
from headroom.simulation.spec import FaultSpec

if TYPE_CHECKING:  # the scenario drives the driver; the driver names its type only for type checking
    from _ctypes import CFuncPtr

    from headroom.simulation.scenario.runtime import Scenario
    from headroom.simulation.spec import GpuSpec

_DEVICE_BASE = 0x5EED_0000
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


class _Calls(Counter):
    """Counter of (entry point, gpu) that also answers to the binding's name of an entry point."""

    def __missing__(self, key: object) -> int:
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



class DriverCore:
    """One scenario's library state, steering and call plumbing (see the module docstring)."""

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
        self._error_strings: dict[int, ctypes.Array[ctypes.c_char]] = {}
        self._entries: dict[str, CFuncPtr] = {}  # the CFUNCTYPE callbacks
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
    def install(self) -> Self:
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

        def entry(*args: int | None) -> int:  # the C arguments as ctypes converts them (CArg)
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

    def _table(self) -> list[tuple[str, list[CArg], Callable[..., None]]]:
        """(entry point, C argument types, implementation) for every function this stand-in exports: the
        subclass's (``driver.NvmlDriver``)."""
        raise NotImplementedError

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
