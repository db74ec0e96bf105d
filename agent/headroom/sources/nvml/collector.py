"""NVML collector: the one choke point for every NVML call (architecture principle 3).

One read of each quantity per GPU per tick, through ``_Gpu.query`` which maps errors in one place:

- NOT_SUPPORTED / NO_PERMISSION / FUNCTION_NOT_FOUND / NOT_FOUND / ARGUMENT_VERSION_MISMATCH (and a
  function the binding lacks): the field is None (series absent, never 0) and the query is remembered as
  unsupported on that GPU, re-probed every ``_REPROBE_UNSUPPORTED`` seconds; fallbacks (processes
  v3 -> v2 (the binding's unversioned call is v3 too), memory v2 -> v1, clock-event -> throttle reasons, temperature V -> legacy) move on;
- GPU_IS_LOST / GPU_NOT_FOUND / RESET_REQUIRED / UNKNOWN: that GPU is down (``up=False`` + error), the
  others go on; it is re-probed (handle by UUID, else index) with backoff and comes back when it answers;
- UNINITIALIZED / DRIVER_NOT_LOADED / LIB_RM_VERSION_MISMATCH / LIBRARY_NOT_FOUND: NVML is down:
  nvmlShutdown, ``collect`` raises CollectorError, nvmlInit is retried with backoff (1 s .. 60 s);
- anything else (TIMEOUT, NO_DATA, ...): the field is None this tick and retried next tick.

Identity, max clocks, PCIe max link, the supported clock-event mask and the MIG layout are cached;
NVLink link count, state and version are re-read every 30 s, the enforced power limit every 10 s. Per
tick and GPU: one field-values call (health counters, energy, PCIe byte counters, NVLink data counters
per active link) into an array prepared once and decoded in one pass, and where the GPU
has GPM one nvmlGpmSampleGet plus one nvmlGpmMetricsGet (SM activity, occupancy, tensor and DRAM
activity between this tick's sample and the last). The process lists (per GPU, and per MIG instance) and
the per-process utilization samples (since the newest timestamp seen on that GPU) take one call each into
an array kept per GPU and handle (a second call only when the list outgrew it), decoded in one pass from
its bytes, and not at all when the bytes are last tick's. Slow or blocking calls stay off the tick: for GPUs
without PCIe byte counters a daemon thread polls nvmlDeviceGetPcieThroughput (~20 ms each)
round-robin and the tick reads its last value; another waits on an NVML event set for XIDs.
The library is always the real ``pynvml`` binding; under simulation the scenario's stand-in for
libnvidia-ml (``headroom.simulation.nvml_driver``) is installed beneath it, so the same code runs on both.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from headroom import samples
from headroom.sources import Collector, CollectorError, SourceContext, register

log = structlog.get_logger("headroom.sources.nvml")

# The oldest nvidia-ml-py this collector is tested against (pyproject.toml; the GPU tests run on it and
# on the newest). 12.535.77 and older read process lists with a struct that does not match the driver's.
MIN_BINDING = "12.535.108"


def _legacy_shadow() -> str | None:
    """Why ``import pynvml`` would not give nvidia-ml-py's module: the legacy ``pynvml`` 11.x distribution
    (gpuopenanalytics) installs a package of the same name that shadows it. None when all is well."""
    from importlib import metadata

    try:
        legacy = metadata.version("pynvml")
    except metadata.PackageNotFoundError:
        return None
    try:
        major = int(legacy.split(".")[0])
    except ValueError:
        major = 0
    if major >= 12:  # pynvml 12+ is a shim that installs nvidia-ml-py and no module of its own
        return None
    return (f"the legacy 'pynvml' {legacy} package is installed and shadows nvidia-ml-py's pynvml module "
            f"(an old copy of the binding): remove it (pip uninstall pynvml) and keep nvidia-ml-py>={MIN_BINDING}")


BINDING_ERROR: str | None = _legacy_shadow()
try:
    import pynvml
except Exception as exc:  # not installed, or a broken module: this collector fails, the others go on
    pynvml = None  # type: ignore[assignment]
    BINDING_ERROR = BINDING_ERROR or f"cannot import pynvml (install nvidia-ml-py>={MIN_BINDING}): {type(exc).__name__}: {exc}"
if BINDING_ERROR is None and not hasattr(pynvml, "NVMLError"):
    BINDING_ERROR = f"the pynvml module at {getattr(pynvml, '__file__', '?')} is not nvidia-ml-py's binding"

# Clock-event ("throttle") reasons by NVML bit.
CLOCK_EVENT_REASONS: tuple[tuple[str, int], ...] = (
    ("gpu_idle", 0x1),
    ("applications_clocks_setting", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake_slowdown", 0x80),
    ("display_clock_setting", 0x100),
)
_ALL_REASONS = sum(bit for _, bit in CLOCK_EVENT_REASONS)
# GpuSample fields that stay the same from tick to tick on most GPUs most of the time: each one equal to the
# previous tick's keeps that object (samples.share_unchanged), so the window holds it once, not once per sample
_STEADY_FIELDS = (
    "memory_total_bytes", "memory_reserved_bytes", "power_limit_watts", "power_limit_max_watts", "temperature_celsius",
    "memory_temperature_celsius", "sm_clock_hertz", "sm_clock_max_hertz", "memory_clock_hertz",
    "memory_clock_max_hertz", "clock_events_seconds_total", "nvlink_links", "xid_errors_total",
    "temperature_max_operating_celsius", "temperature_slowdown_celsius", "temperature_shutdown_celsius",
    "memory_temperature_max_operating_celsius",
)
_CLOCK_EVENTS: dict[tuple[int, int], dict[str, bool]] = {}  # (supported, active) masks -> reason -> active

def _limit_max(constraints: Any) -> float | None:
    """The max of nvmlDeviceGetPowerManagementLimitConstraints' [min, max] milliwatts, in watts; None when absent."""
    try:
        high = constraints[1]
    except (TypeError, IndexError, KeyError):
        return None
    return high / 1000 if isinstance(high, int) and high > 0 else None


def _const(name: str, fallback: int) -> int:
    """A pynvml constant, or its nvml.h value when this binding version lacks it (or has no binding):
    constants that newer bindings added (GPU_NOT_FOUND, VALUE_TYPE_UNSIGNED_SHORT ...) are ABI numbers."""
    value = getattr(pynvml, name, None) if pynvml is not None else None
    return value if isinstance(value, int) else fallback


# nvmlReturn_t (nvml.h)
_SUCCESS = 0
_ERR = {name: _const(f"NVML_ERROR_{name}", code) for name, code in {
    "UNINITIALIZED": 1, "INVALID_ARGUMENT": 2, "NOT_SUPPORTED": 3, "NO_PERMISSION": 4, "NOT_FOUND": 6,
    "INSUFFICIENT_SIZE": 7, "DRIVER_NOT_LOADED": 9, "TIMEOUT": 10, "LIBRARY_NOT_FOUND": 12,
    "FUNCTION_NOT_FOUND": 13, "GPU_IS_LOST": 15, "RESET_REQUIRED": 16, "LIB_RM_VERSION_MISMATCH": 18,
    "ARGUMENT_VERSION_MISMATCH": 25, "GPU_NOT_FOUND": 28, "UNKNOWN": 999,
}.items()}  # fmt: skip
_ABSENT_CODES = frozenset(_ERR[n] for n in ("NOT_SUPPORTED", "NO_PERMISSION", "FUNCTION_NOT_FOUND", "NOT_FOUND", "ARGUMENT_VERSION_MISMATCH"))
_DEVICE_CODES = frozenset(_ERR[n] for n in ("GPU_IS_LOST", "GPU_NOT_FOUND", "RESET_REQUIRED", "UNKNOWN"))
_LIBRARY_CODES = frozenset(_ERR[n] for n in ("UNINITIALIZED", "DRIVER_NOT_LOADED", "LIB_RM_VERSION_MISMATCH", "LIBRARY_NOT_FOUND"))
_HINTS = {
    _ERR["DRIVER_NOT_LOADED"]: "is the NVIDIA driver installed and loaded? use --simulate demo for a simulated host",
    _ERR["LIBRARY_NOT_FOUND"]: "libnvidia-ml.so.1 not found: is the NVIDIA driver installed? use --simulate demo for a simulated host",
    _ERR["LIB_RM_VERSION_MISMATCH"]: "the driver was upgraded without reloading the kernel module or rebooting",
    _ERR["NO_PERMISSION"]: "no access to /dev/nvidiactl: check the user's groups or the unit's DeviceAllow",
}  # fmt: skip
_ERROR_NAMES = {code: name for name, code in _ERR.items()}
_MISMATCH_ERRORS: tuple[type[BaseException], ...] = tuple(
    c for c in (getattr(pynvml, "NVMLLibraryMismatchError", None),) if isinstance(c, type)
)
if pynvml is not None:
    _ERROR_NAMES.update({getattr(pynvml, n): n.removeprefix("NVML_ERROR_") for n in dir(pynvml)
                         if n.startswith("NVML_ERROR_") and isinstance(getattr(pynvml, n), int)})  # fmt: skip

# nvmlFieldId (nvml.h NVML_FI_DEV_*); read in one nvmlDeviceGetFieldValues call per GPU per tick
FI_MEMORY_TEMP = 82
FI_TOTAL_ENERGY_CONSUMPTION = 83
FI_ECC_DBE_VOL_TOTAL, FI_ECC_DBE_AGG_TOTAL = 4, 6
FI_REMAPPED_COR, FI_REMAPPED_UNC, FI_REMAPPED_PENDING, FI_REMAPPED_FAILURE = 142, 143, 144, 145
FI_PCIE_COUNT_TX_BYTES, FI_PCIE_COUNT_RX_BYTES = 197, 198  # cumulative PCIe bytes (not in bindings < 12.560)
FI_NVLINK_LINK_COUNT = 91
FI_NVLINK_TX, FI_NVLINK_RX = 138, 139  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX: KiB per link (scope id)
# GPM metrics (nvml.h NVML_GPM_METRIC_*, percentages) -> GpuSample field
_GPM_METRICS = ((2, "sm_active_ratio"), (3, "sm_occupancy_ratio"), (5, "tensor_active_ratio"), (10, "dram_active_ratio"))
_GPM_METRICS_GET_VERSION = _GPM_SUPPORT_VERSION = 1
_BINDING_HAS_GPM = hasattr(pynvml, "c_nvmlGpmMetricsGet_t")
_NVLINK_REFRESH = 30.0  # seconds between NVLink link-state re-reads
_FIELDS = (
    FI_MEMORY_TEMP,
    FI_TOTAL_ENERGY_CONSUMPTION,
    FI_ECC_DBE_VOL_TOTAL,
    FI_ECC_DBE_AGG_TOTAL,
    FI_REMAPPED_COR,
    FI_REMAPPED_UNC,
    FI_REMAPPED_PENDING,
    FI_REMAPPED_FAILURE,
    FI_PCIE_COUNT_TX_BYTES,
    FI_PCIE_COUNT_RX_BYTES,
)
_FIELD_KEYS = tuple((f, 0) for f in _FIELDS)
# nvmlFieldValue_t: the union member that holds each nvmlValueType_t (nvml.h; UNSIGNED_SHORT is 6 even where
# the binding lacks the constant)
VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
# each member's C type (nvml.h), as a struct format: for a member an older binding's union lacks (usVal)
_VALUE_FORMAT = {"dVal": "d", "uiVal": "I", "ulVal": "L", "ullVal": "Q", "sllVal": "q", "siVal": "i", "usVal": "H"}
_NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE (unsigned long long)
_PSTATE_UNKNOWN = 32
_XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
_CLOCK_SM, _CLOCK_MEM = 1, 2
_TEMPERATURE_GPU = 0
# nvmlTemperatureThresholds_t: shutdown, slowdown, memory max, GPU max (operating)
_THRESHOLDS = (("temperature_shutdown_celsius", 0), ("temperature_slowdown_celsius", 1),
               ("memory_temperature_max_operating_celsius", 2), ("temperature_max_operating_celsius", 3))
_PCIE_UTIL_TX, _PCIE_UTIL_RX = 0, 1
_MIG_ENABLE = 1
_MEMORY_V2 = _const("nvmlMemory_v2", 0x02000028)  # nvmlMemory_v2 (nvml.h NVML_STRUCT_VERSION(Memory, 2))

_REPROBE_UNSUPPORTED = 600.0  # seconds before an unsupported query is tried again
# seconds between reads of the enforced power limit: it changes only when someone sets it (nvidia-smi -pl,
# a management tool), so it is not read on every tick; a change shows within this time
_LIMIT_REFRESH = 10.0
_MIG_REFRESH = 30.0  # seconds between MIG layout re-reads
_EVENT_WAIT_MS = 500
_BACKOFF_MIN, _BACKOFF_MAX = 1.0, 60.0


class _GpuDown(Exception):
    """A device-level NVML error: the GPU stops answering."""


class _LibraryDown(Exception):
    """A library-level NVML error: NVML must be shut down and initialised again."""

    def __init__(self, err: BaseException) -> None:
        super().__init__(library_reason(err))


def describe(err: BaseException) -> str:
    """Readable text for an NVML error: "GPU is lost (GPU_IS_LOST)"."""
    code = getattr(err, "value", None)
    name = _ERROR_NAMES.get(code) if isinstance(code, int) else None
    text = pynvml.NVMLError._errcode_to_string.get(code) if name and pynvml is not None else None
    if name is None:
        return str(err) or type(err).__name__
    return f"{text} ({name})" if text else name


def library_reason(err: BaseException) -> str:
    """Why NVML is unusable, with advice where there is some: "Driver Not Loaded (DRIVER_NOT_LOADED): is ..."."""
    hint = _HINTS.get(getattr(err, "value", None))
    return f"{describe(err)}: {hint}" if hint else describe(err)


def _address(handle: Any) -> int | None:
    """The pointer value of an NVML handle (to recognise it in event data), or None."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


_raw = ctypes.Structure.__getattribute__  # a struct field without the binding's per-read decoding


def _struct_values(struct: Any, *names: str) -> tuple[Any, ...]:
    """Fields of a binding struct by the plain ctypes getter (the binding's printable structs decode every
    attribute read); None for each when there is no struct, and for a field this struct version lacks."""
    if struct is None:
        return (None,) * len(names)
    read = _raw if isinstance(struct, ctypes.Structure) else getattr
    out = []
    for name in names:
        try:
            out.append(read(struct, name))
        except AttributeError:
            out.append(None)
    return tuple(out)


def _decode_fields(values: Any) -> list[tuple[int, Any]]:
    """(return code, value or None) of each nvmlFieldValue_t, through the plain ctypes getter (the binding's
    printable struct decodes every attribute read, 10x slower)."""
    out = []
    for fv in values:
        ret = _raw(fv, "nvmlReturn")
        member = VALUE_MEMBER.get(_raw(fv, "valueType")) if ret == _SUCCESS else None
        out.append((ret, getattr(_raw(fv, "value"), member, None) if member else None))
    return out


class _FieldDecoder:
    """Decodes an array of the binding's nvmlFieldValue_t in one pass over its bytes: offsets and value
    formats come from the binding's own ctypes declarations (c_nvmlFieldValue_t, c_nvmlValue_t)."""

    def __init__(self) -> None:
        self.ready = False
        if pynvml is None or not hasattr(pynvml, "c_nvmlFieldValue_t") or not hasattr(pynvml, "c_nvmlValue_t"):
            return
        import struct

        entry = pynvml.c_nvmlFieldValue_t
        types = dict(entry._fields_)
        members = dict(pynvml.c_nvmlValue_t._fields_)
        try:
            self.size = ctypes.sizeof(entry)
            self.ret = struct.Struct("@" + types["nvmlReturn"]._type_), entry.nvmlReturn.offset
            self.type = struct.Struct("@" + types["valueType"]._type_), entry.valueType.offset
            self.value_offset = entry.value.offset
            self.formats = {vt: struct.Struct("@" + (members[m]._type_ if m in members else _VALUE_FORMAT[m]))
                            for vt, m in VALUE_MEMBER.items()}
            # valueType, nvmlReturn and the value side by side (nvml.h's layout): one unpack reads all three,
            # the value as its 8 raw bytes, which are the value itself for the unsigned members on a
            # little-endian machine (the others are unpacked by their own format)
            head = struct.Struct("@IIQ")
            self.head = head if (self.type[1] + 4 == self.ret[1] and self.value_offset == self.type[1] + 8
                                 and self.type[0].format == self.ret[0].format == "@I"
                                 and sys.byteorder == "little") else None
        except (KeyError, AttributeError, TypeError, struct.error):
            return
        self.ready = True

    def decode(self, array: Any, count: int) -> list[tuple[int, Any]]:
        if not self.ready:
            return _decode_fields(array)
        (ret_fmt, ret_off), (type_fmt, type_off) = self.ret, self.type
        value_off, formats = self.value_offset, self.formats
        out = []
        if self.head is not None:
            head, masks = self.head, _UNSIGNED_MASKS
            for base in range(type_off, type_off + count * self.size, self.size):
                vt, ret, raw = head.unpack_from(array, base)
                if ret != _SUCCESS:
                    out.append((ret, None))
                    continue
                mask = masks.get(vt)
                if mask is not None:
                    out.append((ret, raw & mask))
                else:
                    fmt = formats.get(vt)
                    out.append((ret, fmt.unpack_from(array, base + 8)[0] if fmt is not None else None))
            return out
        for base in range(0, count * self.size, self.size):
            ret = ret_fmt.unpack_from(array, base + ret_off)[0]
            fmt = formats.get(type_fmt.unpack_from(array, base + type_off)[0]) if ret == _SUCCESS else None
            out.append((ret, fmt.unpack_from(array, base + value_off)[0] if fmt is not None else None))
        return out


# the unsigned members (uiVal, ulVal on LP64, ullVal, usVal): their value is the low bytes of the raw 8
_UNSIGNED_MASKS = {1: 0xFFFFFFFF, 2: 0xFFFFFFFFFFFFFFFF if ctypes.sizeof(ctypes.c_ulong) == 8 else 0xFFFFFFFF,
                   3: 0xFFFFFFFFFFFFFFFF, 6: 0xFFFF}
_FIELD_DECODER = _FieldDecoder()


_INTEGER_CODES = {**dict.fromkeys("bhilq", {1: "b", 2: "h", 4: "i", 8: "q"}),
                  **dict.fromkeys("BHILQ", {1: "B", 2: "H", 4: "I", 8: "Q"})}


class _Layout:
    """Some fields of each entry of an array of a binding struct, read in one pass over its bytes: one
    ``struct.Struct`` whose offsets and C types come from the binding's own ctypes declaration (``names`` in
    the order of their offsets). ``ready`` is False when the binding lacks the struct or a field, or its
    types have no plain struct format: the caller then goes through the binding's wrapper."""

    def __init__(self, ctype_name: str, names: Sequence[str]) -> None:
        import struct

        self.ready = False
        self.ctype: Any = getattr(pynvml, ctype_name, None) if pynvml is not None else None
        if self.ctype is None:
            return
        try:
            types = dict(self.ctype._fields_)
            self.size = ctypes.sizeof(self.ctype)
            fmt, at = "=", 0
            for name in names:
                offset, code, width = getattr(self.ctype, name).offset, types[name]._type_, ctypes.sizeof(types[name])
                if code in _INTEGER_CODES:  # by its size: ctypes calls c_ulonglong "L" where long has 8 bytes
                    code = _INTEGER_CODES[code][width]
                if offset < at or code not in "bBhHiIqQfd" or struct.calcsize("=" + code) != width:
                    return
                fmt += "x" * (offset - at) + code
                at = offset + width
            self.struct = struct.Struct(fmt + "x" * (self.size - at))
        except (KeyError, AttributeError, TypeError, struct.error):
            return
        self.ready = self.struct.size == self.size

    def rows(self, raw: bytes) -> list[tuple[Any, ...]]:
        return list(self.struct.iter_unpack(raw))


# nvmlProcessInfo_v2_t: what the _v2 and _v3 process-list entry points fill (nvml.h; the binding's
# c_nvmlProcessInfo_v3_t is the same struct); nvmlProcessUtilizationSample_t for per-process utilization
_PROCESS_LAYOUT = _Layout("c_nvmlProcessInfo_v2_t", ("pid", "usedGpuMemory"))
_SAMPLE_LAYOUT = _Layout("c_nvmlProcessUtilizationSample_t", ("pid", "timeStamp", "smUtil"))
_LIST_CAPACITY = 32  # entries in a new list array; it grows to twice what the driver asks for, plus 5


class _ListQuery:
    """One list query (the entry point ``function``) of one handle, into an array of the binding's struct kept
    and reused tick after tick as the field array is: one call while the array is large enough, else a second
    call into twice the size the driver asked for (the binding's two-call protocol with its first call
    skipped; an array the driver filled to its last entry is taken as too small as well).
    The entry point is found through the binding's own lookup (FUNCTION_NOT_FOUND included); the entries are
    decoded in one pass (``_Layout``) and through ``convert``, and only when the driver wrote other bytes
    than last time: otherwise the same object as last time is returned."""

    __slots__ = ("lookup", "function", "layout", "convert", "samples_first", "array", "capacity", "count",
                 "count_ref", "raw", "converted")

    def __init__(self, lookup: Callable[[str], Any], function: str, layout: _Layout,
                 convert: Callable[[list[tuple[Any, ...]]], Any]) -> None:
        self.lookup, self.function, self.layout, self.convert = lookup, function, layout, convert
        # nvmlDeviceGetProcessUtilization(device, samples, *count, lastSeen) against the process lists'
        # (device, *count, infos)
        self.samples_first = layout is _SAMPLE_LAYOUT
        self.capacity = 0
        self.array: Any = None
        self.count = ctypes.c_uint(0)
        self.count_ref = ctypes.byref(self.count)
        self.raw: bytes | None = None
        self.converted: Any = None
        self.reserve(_LIST_CAPACITY)

    def reserve(self, entries: int) -> None:
        if entries > self.capacity:
            self.capacity = entries
            self.array = (self.layout.ctype * entries)()

    def _invoke(self, fn: Any, handle: Any, tail: tuple[Any, ...]) -> int:
        self.count.value = self.capacity
        if self.samples_first:
            return fn(handle, self.array, self.count_ref, *tail)
        return fn(handle, self.count_ref, self.array, *tail)

    def read(self, handle: Any, *tail: Any) -> tuple[int, Any]:
        """(NVML return code, the converted entries on success, else None)."""
        fn = self.lookup(self.function)
        ret = self._invoke(fn, handle, tail)
        if ret == _ERR["INSUFFICIENT_SIZE"] or (ret == _SUCCESS and self.count.value >= self.capacity):
            # too small (the driver says how many it has), or filled to the last entry, which may be a list cut
            # to what fits (nvml.h describes the sample queries so): once more, into twice as much
            self.reserve(max(self.count.value, self.capacity) * 2 + 5)
            ret = self._invoke(fn, handle, tail)
        if ret != _SUCCESS:
            return ret, None
        raw = ctypes.string_at(self.array, min(self.count.value, self.capacity) * self.layout.size)
        if raw != self.raw:
            self.raw, self.converted = raw, self.convert(self.layout.rows(raw))
        return ret, self.converted

    def __call__(self, handle: Any, *tail: Any) -> Any:
        """The converted entries; raises the binding's NVMLError for any other return code (``_Gpu.query``
        maps it as it maps the binding's own calls)."""
        ret, converted = self.read(handle, *tail)
        if ret != _SUCCESS:
            raise pynvml.NVMLError(ret)
        return converted


def _kib(value: int | None) -> int | None:
    return None if value is None else int(value) * 1024


def _process_rows(rows: Sequence[tuple[Any, Any]]) -> tuple[tuple[int, int | None], ...]:
    """(pid, used GPU memory) rows of a process list, the memory None where NVML cannot say (None from the
    binding's wrapper, NVML_VALUE_NOT_AVAILABLE in the struct)."""
    return tuple((int(pid), None if used is None or used == _NOT_AVAILABLE else int(used)) for pid, used in rows)


def _gpu_processes(last: tuple[samples.GpuProcess, ...] | None, rows: Sequence[tuple[int, int | None]],
                   sm: Mapping[int, float] | None) -> tuple[samples.GpuProcess, ...]:
    """The GpuProcess tuple for ``rows`` (pid, used memory) and ``sm`` (pid -> SM utilization; None: no
    sampling, a listed pid without a sample: 0). ``last`` itself when it holds exactly that in order (an
    unchanged list is built once and shared); otherwise a new tuple in which each process that did not change
    is last tick's object."""
    ratios = [None if sm is None else sm.get(pid, 0.0) for pid, _ in rows]
    if last is not None and len(last) == len(rows):
        for p, (pid, used), ratio in zip(last, rows, ratios, strict=True):
            if p.pid != pid or p.used_memory_bytes != used or p.sm_utilization_ratio != ratio:
                break
        else:
            return last
    known = {p.pid: p for p in last} if last else {}
    out = []
    for (pid, used), ratio in zip(rows, ratios, strict=True):
        p = known.get(pid)
        if p is None or p.used_memory_bytes != used or p.sm_utilization_ratio != ratio:
            p = samples.GpuProcess(pid=pid, used_memory_bytes=used, sm_utilization_ratio=ratio)
        out.append(p)
    return tuple(out)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class _Backoff:
    """Exponential backoff between retries: 1 s, 2 s, 4 s ... capped at 60 s."""

    def __init__(self) -> None:
        self.delay = _BACKOFF_MIN
        self.next_at: float | None = None

    def due(self, now: float) -> bool:
        return self.next_at is None or now >= self.next_at

    def failed(self, now: float) -> None:
        self.next_at = now + self.delay
        self.delay = min(self.delay * 2, _BACKOFF_MAX)

    def reset(self) -> None:
        self.delay, self.next_at = _BACKOFF_MIN, None


_ABSENT = object()  # a query this GPU does not support (as opposed to None: failed this tick)


@dataclass
class _Mig:
    handle: Any
    uuid: str
    gpu_instance_id: int
    compute_instance_id: int | None
    profile_id: int | None = None  # its GPU instance's profile id and placement start (the NVIDIA DRA driver
    placement_start: int | None = None  # names a MIG device by them); None: NVML did not say


@dataclass
class _Gpu:
    """One GPU within one NVML session: handle, cached identity and what it does not support."""

    lib: Any
    index: int
    handle: Any = None
    uuid: str = ""
    name: str = ""
    pci_bus_id: str = ""
    minor: int | None = None  # the /dev/nvidiaN number (the NVIDIA DRA driver names GPUs by it)
    memory_total: int | None = None
    up: bool = True
    error: str | None = None
    backoff: _Backoff = field(default_factory=_Backoff)
    unsupported: dict[str, float] = field(default_factory=dict)  # query -> when to try again
    cache: dict[str, Any] = field(default_factory=dict)
    logged: set[tuple[str, int]] = field(default_factory=set)  # transient errors already logged
    now: float = 0.0
    # the per-tick field read: (wanted (field, scope) pairs, unsupported-set version, links, array for them)
    fields_plan: tuple[Any, ...] | None = None
    published: samples.GpuSample | None = None  # the last full read (for samples.share_unchanged)

    def query(self, key: str, function: str, *args: Any, remember: bool = True, call: Callable[..., Any] | None = None) -> Any:
        """lib.<function>(*args) (``call(*args)`` instead where given: the same entry point reached another
        way); _ABSENT if unsupported here, None if it failed this tick.

        Raises _GpuDown or _LibraryDown for device- and library-level errors.
        """
        retry_at = self.unsupported.get(key)
        if retry_at is not None:
            if self.now < retry_at:
                return _ABSENT
            del self.unsupported[key]
        fn = call or getattr(self.lib, function, None)
        try:
            if fn is None:
                raise pynvml.NVMLError(_ERR["FUNCTION_NOT_FOUND"])
            return fn(*args)
        except _MISMATCH_ERRORS:  # an unversioned function the driver lacks (bindings >= 12.550 only)
            code = _ERR["FUNCTION_NOT_FOUND"]
            err: BaseException = pynvml.NVMLError(code)
        except pynvml.NVMLError as exc:
            code, err = exc.value, exc
        if code in _ABSENT_CODES:
            if remember:
                self.unsupported[key] = self.now + _REPROBE_UNSUPPORTED
                log.debug("nvml_query_unsupported", gpu=self.index, query=key, error=describe(err))
            return _ABSENT
        if code in _DEVICE_CODES:
            raise _GpuDown(f"{function}: {describe(err)}")
        if code in _LIBRARY_CODES:
            raise _LibraryDown(err)
        if (key, code) not in self.logged:
            self.logged.add((key, code))
            log.warning("nvml_query_failed", gpu=self.index, query=key, error=describe(err))
        return None

    def value(self, key: str, function: str, *args: Any, call: Callable[..., Any] | None = None) -> Any:
        """Like query, with "unsupported" folded into None."""
        v = self.query(key, function, *args, call=call)
        return None if v is _ABSENT else v

    def first(self, options: Sequence[tuple[str, str, tuple[Any, ...]]]) -> Any:
        """The first option that is supported (fallback chain); None when none is."""
        for key, function, args in options:
            v = self.query(key, function, *args)
            if v is not _ABSENT:
                return v
        return None

    def cached(self, key: str, function: str, *args: Any, refresh: float | None = None) -> Any:
        """A value read once and kept (identity-like quantities); unsupported is retried on reprobe.

        ``refresh``: seconds after which it is read again (a value that can change, but rarely: the power
        limit); until a re-read answers, the last value stays, and when it turns unsupported it is absent."""
        hit = self.cache.get(key)
        if hit is not None and (refresh is None or self.now - hit[1] < refresh):
            return hit[0]
        v = self.value(key, function, *args)
        if v is None:
            if hit is not None and key not in self.unsupported:
                return hit[0]  # failed this tick: the last value, re-read next tick
            self.cache.pop(key, None)
            return None
        self.cache[key] = (v, self.now)
        return v

    def down_sample(self) -> samples.GpuSample:
        return samples.GpuSample(
            index=self.index, uuid=self.uuid, name=self.name, pci_bus_id=self.pci_bus_id, minor_number=self.minor,
            up=False, error=self.error,
        )


class _PciePoller(threading.Thread):
    """Reads PCIe TX/RX throughput off the tick: one GPU at a time, each every ``interval`` seconds."""

    def __init__(self, lib: Any, targets: list[tuple[str, Any]], interval: float, stop: threading.Event) -> None:
        super().__init__(name="headroom-nvml-pcie", daemon=True)
        self.lib, self.targets, self.interval, self.stop = lib, targets, interval, stop
        self.values: dict[str, tuple[float | None, float | None]] = {}
        self.unsupported: set[str] = set()
        self.counted: set[str] = set()  # GPUs with cumulative PCIe counters: not polled

    def _read(self, handle: Any, counter: int) -> float | None:
        try:
            return float(self.lib.nvmlDeviceGetPcieThroughput(handle, counter)) * 1024  # KB/s -> bytes/s
        except pynvml.NVMLError as exc:
            if exc.value in _ABSENT_CODES:
                raise
            return None

    def run(self) -> None:
        while not self.stop.is_set():
            targets = [t for t in self.targets if t[0] not in self.unsupported and t[0] not in self.counted]
            if not targets:
                self.stop.wait(self.interval)
                continue
            for uuid, handle in targets:
                if self.stop.is_set():
                    return
                try:
                    tx = self._read(handle, _PCIE_UTIL_TX)
                    rx = self._read(handle, _PCIE_UTIL_RX)
                except (pynvml.NVMLError, AttributeError):
                    self.unsupported.add(uuid)
                    self.values.pop(uuid, None)
                    continue
                self.values[uuid] = (tx, rx)
                self.stop.wait(self.interval / len(targets))


class _XidWatcher(threading.Thread):
    """Counts XID critical errors per GPU from an NVML event set, waiting ``_EVENT_WAIT_MS`` at a time."""

    def __init__(self, lib: Any, targets: list[tuple[str, Any]], stop: threading.Event, counts: dict[str, dict[int, int]], lock: threading.Lock) -> None:
        super().__init__(name="headroom-nvml-xid", daemon=True)
        self.lib, self.targets, self.stop, self.counts, self.lock = lib, targets, stop, counts, lock
        self.registered: set[str] = set()
        self.ready = threading.Event()

    def run(self) -> None:
        try:
            self._run()
        finally:
            self.ready.set()

    def _register(self) -> tuple[Any, dict[int | None, str]] | None:
        """A new event set with every target registered for XIDs; (set, handle address -> uuid), or None.

        NVML_ERROR_UNKNOWN from nvmlDeviceRegisterEvents leaves the event set undefined (nvml.h): it is
        freed and a new one built, once; a GPU that fails again is left without XIDs.
        """
        for attempt in range(2):
            try:
                event_set = self.lib.nvmlEventSetCreate()
            except (pynvml.NVMLError, AttributeError) as exc:
                log.info("nvml_xid_events_unavailable", error=describe(exc))
                return None
            by_address: dict[int | None, str] = {}
            self.registered.clear()
            rebuild = False
            for uuid, handle in self.targets:
                try:
                    self.lib.nvmlDeviceRegisterEvents(handle, _XID_EVENT, event_set)
                except pynvml.NVMLError as exc:
                    if exc.value == _ERR["UNKNOWN"] and attempt == 0:
                        rebuild = True
                        log.warning("nvml_xid_event_set_rebuilt", uuid=uuid, error=describe(exc))
                        break
                    log.debug("nvml_xid_events_unsupported", uuid=uuid, error=describe(exc))
                    continue
                by_address[_address(handle)] = uuid
                with self.lock:
                    self.counts.setdefault(uuid, {})
                self.registered.add(uuid)
            if not rebuild:
                return event_set, by_address
            self._free(event_set)
        return None

    def _free(self, event_set: Any) -> None:
        try:
            self.lib.nvmlEventSetFree(event_set)
        except pynvml.NVMLError:
            pass

    def _run(self) -> None:
        made = self._register()
        if made is None:
            return
        event_set, by_address = made
        try:
            self.ready.set()
            if not self.registered:
                return
            while not self.stop.is_set():
                try:
                    data = self.lib.nvmlEventSetWait(event_set, _EVENT_WAIT_MS)
                except pynvml.NVMLError as exc:
                    if exc.value == _ERR["TIMEOUT"]:
                        continue
                    if exc.value in _LIBRARY_CODES:
                        return
                    self.stop.wait(1.0)
                    continue
                if not data.eventType & _XID_EVENT:
                    continue
                uuid = by_address.get(_address(data.device)) or self._uuid_of(data.device)
                if uuid is None:
                    continue
                code = int(data.eventData)
                with self.lock:
                    per_gpu = self.counts.setdefault(uuid, {})
                    per_gpu[code] = per_gpu.get(code, 0) + 1
                log.warning("gpu_xid_error", uuid=uuid, xid=code)
        finally:
            try:
                self.lib.nvmlEventSetFree(event_set)
            except pynvml.NVMLError:
                pass

    def _uuid_of(self, device: Any) -> str | None:
        try:
            uuid = _text(self.lib.nvmlDeviceGetUUID(device))
        except pynvml.NVMLError:
            return None
        return uuid if uuid in self.registered else None


@register
class NvmlCollector(Collector):
    """GPUs through NVML (or a simulated NVML when a scenario is set)."""

    name = "nvml"
    default_enabled = True
    description = "NVIDIA GPUs through NVML: utilization, memory, power, clocks, throttling, PCIe, processes, MIG, XID, ECC"

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        # always the real binding; under simulation the scenario's driver stand-in is its library (made and
        # installed here, at start-up, so its construction does not land on the first tick)
        self.lib: Any = pynvml
        if ctx.scenario is not None and BINDING_ERROR is None:
            ctx.scenario.nvml_library()
        self._clock: Callable[[], float] = ctx.monotonic or time.monotonic
        self._pcie_interval = float(ctx.settings.get("pcie_poll_interval", 5.0))
        self._session = False
        self._ever_up = False
        self._down_error: str | None = None
        self._init_backoff = _Backoff()
        self._gpus: list[_Gpu] = []
        self._system: dict[str, Any] = {}
        self._identity: dict[int, tuple[str, str, str, int | None]] = {}  # index -> (uuid, name, pci, minor)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pcie: _PciePoller | None = None
        self._xid: _XidWatcher | None = None
        # accumulators, keyed by uuid so they survive index changes and re-init
        self._last_read: dict[str, float] = {}
        self._pcie_last: dict[str, tuple[float, int, int]] = {}  # uuid -> (read at, tx bytes, rx bytes)
        self._busy: dict[str, float] = {}
        self._clock_event_seconds: dict[str, dict[str, float]] = {}
        self._xid_counts: dict[str, dict[int, int]] = {}
        self._xid_lock = threading.Lock()

    # ------------------------------------------------------------------------------------ session
    def collect(self) -> samples.NvmlSample:
        """One NvmlSample; raises CollectorError while NVML is down."""
        now = self._clock()
        if BINDING_ERROR is not None:
            raise CollectorError(f"NVML binding unusable: {BINDING_ERROR}")
        if not self._session:
            if not self._init_backoff.due(now):
                raise CollectorError(f"NVML unavailable: {self._down_error}")
            self._start(now)
        try:
            gpus = tuple(self._read(gpu, now) for gpu in self._gpus)
        except _LibraryDown as exc:
            self._down(str(exc), now)
            raise CollectorError(f"NVML unavailable: {self._down_error}") from None
        if self._down_error is not None or not self._ever_up:
            # up once a whole read succeeds, not at nvmlInit: a library that initialises and then fails
            # every query (LIB_RM_VERSION_MISMATCH after a driver upgrade) stays one outage with one log
            # line, and its re-initialisation keeps backing off
            event = "nvml_recovered" if self._ever_up else "nvml_initialised"
            log.info(event, driver=self._system.get("driver"), gpus=len(self._gpus),
                     simulated=self.ctx.scenario is not None)
            self._ever_up, self._down_error = True, None
            self._init_backoff.reset()
        return samples.NvmlSample(
            up=True,
            gpus=gpus,
            driver_version=self._system.get("driver"),
            nvml_version=self._system.get("nvml"),
            cuda_driver_version=self._system.get("cuda"),
            simulated=self.ctx.scenario is not None,
        )

    def _start(self, now: float) -> None:
        """nvmlInit, read the system and enumerate GPUs; raises CollectorError when NVML is down."""
        if self.ctx.scenario is not None:
            self.ctx.scenario.nvml_library().install()  # the simulated driver under the binding (again: the last installed wins)
        try:
            self.lib.nvmlInit()
        except pynvml.NVMLError as exc:
            self._down(library_reason(exc), now, initialised=False)
            raise CollectorError(f"NVML unavailable: {self._down_error}") from None
        try:
            self._system = {
                "driver": self._system_value(_text, "nvmlSystemGetDriverVersion"),
                "nvml": self._system_value(_text, "nvmlSystemGetNVMLVersion"),
                "cuda": self._system_value(int, "nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"),
            }
            count = self.lib.nvmlDeviceGetCount()
            self._gpus = [self._open(i, now) for i in range(count)]
        except (pynvml.NVMLError, _LibraryDown) as exc:
            self._down(library_reason(exc) if isinstance(exc, pynvml.NVMLError) else str(exc), now)
            raise CollectorError(f"NVML unavailable: {self._down_error}") from None
        self._session = True
        self._start_threads()

    def _system_value(self, convert: Callable[[Any], Any], *functions: str) -> Any:
        """The first of ``functions`` that answers, converted; None when none does. Library errors raise."""
        for function in functions:
            fn = getattr(self.lib, function, None)
            if fn is None:
                continue
            try:
                return convert(fn())
            except pynvml.NVMLError as exc:
                if exc.value in _LIBRARY_CODES:
                    raise
        return None

    def _down(self, reason: str, now: float, initialised: bool = True) -> None:
        """NVML is unusable: stop threads, shut down, schedule re-init, log once."""
        self._stop_threads()
        if initialised:
            self._release_gpm()
            try:
                self.lib.nvmlShutdown()
            except pynvml.NVMLError:
                pass
        self._session = False
        self._gpus = []
        self._last_read.clear()
        self._pcie_last.clear()
        self._init_backoff.failed(now)
        if self._down_error is None:
            log.error("nvml_down", error=reason)
        self._down_error = reason

    def _open(self, index: int, now: float) -> _Gpu:
        """A GPU by index with its identity; down (with the last known identity) if it does not answer."""
        gpu = _Gpu(self.lib, index, now=now)
        gpu.uuid, gpu.name, gpu.pci_bus_id, gpu.minor = self._identity.get(index, ("", "", "", None))
        try:
            self._identify(gpu, gpu.query("handle", "nvmlDeviceGetHandleByIndex", index))
        except _GpuDown as exc:
            self._mark_down(gpu, str(exc), now)
        return gpu

    def _identify(self, gpu: _Gpu, handle: Any) -> None:
        """Read and cache uuid, name, PCI bus id and minor number for a fresh handle; raises _GpuDown."""
        if handle is None or handle is _ABSENT:
            raise _GpuDown("no device handle (not supported, no permission or not found)")
        gpu.handle = handle
        uuid = gpu.value("uuid", "nvmlDeviceGetUUID", handle)
        name = gpu.value("name", "nvmlDeviceGetName", handle)
        pci = gpu.value("pci", "nvmlDeviceGetPciInfo", handle)
        minor = gpu.value("minor", "nvmlDeviceGetMinorNumber", handle)
        gpu.uuid = _text(uuid) if uuid is not None else gpu.uuid
        gpu.name = _text(name) if name is not None else gpu.name
        gpu.pci_bus_id = _text(pci.busId) if pci is not None else gpu.pci_bus_id
        gpu.minor = int(minor) if minor is not None else gpu.minor
        self._identity[gpu.index] = (gpu.uuid, gpu.name, gpu.pci_bus_id, gpu.minor)

    def _start_threads(self) -> None:
        self._stop = threading.Event()
        targets = [(g.uuid, g.handle) for g in self._gpus if g.handle is not None and g.uuid]
        self._pcie = _PciePoller(self.lib, targets, self._pcie_interval, self._stop)
        self._xid = _XidWatcher(self.lib, targets, self._stop, self._xid_counts, self._xid_lock)
        self._threads = [self._pcie, self._xid]
        for t in self._threads:
            t.start()

    def _stop_threads(self, timeout: float = 0.1) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout)
        self._threads = []
        self._pcie = self._xid = None

    def close(self) -> None:
        """Stop the helper threads and shut NVML down."""
        if pynvml is None:
            return
        self._stop_threads(timeout=_EVENT_WAIT_MS / 1000 + 0.5)
        if self._session:
            self._session = False
            self._release_gpm()
            try:
                self.lib.nvmlShutdown()
            except pynvml.NVMLError:
                pass

    # ----------------------------------------------------------------------------------- per GPU
    def _mark_down(self, gpu: _Gpu, error: str, now: float) -> None:
        if gpu.up:
            log.error("gpu_lost", gpu=gpu.index, uuid=gpu.uuid, error=error)
        gpu.up, gpu.error = False, error
        gpu.backoff.failed(now)
        self._last_read.pop(gpu.uuid or f"index:{gpu.index}", None)
        self._pcie_last.pop(gpu.uuid or f"index:{gpu.index}", None)

    def _read(self, gpu: _Gpu, now: float) -> samples.GpuSample:
        """One GpuSample: a full read when up, a re-probe with backoff when down."""
        gpu.now = now
        was_down = not gpu.up
        if was_down:
            if not gpu.backoff.due(now):
                return gpu.down_sample()
            try:
                if gpu.uuid:
                    handle = gpu.query("handle_by_uuid", "nvmlDeviceGetHandleByUUID", gpu.uuid, remember=False)
                else:
                    handle = gpu.query("handle", "nvmlDeviceGetHandleByIndex", gpu.index, remember=False)
                self._identify(gpu, handle)
            except _GpuDown as exc:
                self._mark_down(gpu, str(exc), now)  # still the same outage: no new log line
                return gpu.down_sample()
        try:
            sample = self._read_up(gpu, now)
        except _GpuDown as exc:
            self._mark_down(gpu, str(exc), now)
            return gpu.down_sample()
        # values that rarely change (limits, thresholds, clock-event totals ...) are last tick's objects
        gpu.published = sample = samples.share_unchanged(sample, gpu.published, _STEADY_FIELDS)
        if was_down:
            log.info("gpu_recovered", gpu=gpu.index, uuid=gpu.uuid)
            gpu.up, gpu.error = True, None
            gpu.backoff.reset()
            if self._pcie is not None:
                self._pcie.targets = [(g.uuid, g.handle) for g in self._gpus if g.handle is not None and g.uuid]
        return sample

    def _read_up(self, gpu: _Gpu, now: float) -> samples.GpuSample:
        h = gpu.handle
        util = gpu.value("utilization", "nvmlDeviceGetUtilizationRates", h)
        mem = gpu.first((
            ("memory_v2", "nvmlDeviceGetMemoryInfo", (h, _MEMORY_V2)),
            ("memory_v1", "nvmlDeviceGetMemoryInfo", (h,)),
        ))  # fmt: skip
        total, used, free, reserved = _struct_values(mem, "total", "used", "free", "reserved")
        power = gpu.value("power", "nvmlDeviceGetPowerUsage", h)
        limit = gpu.cached("power_limit", "nvmlDeviceGetEnforcedPowerLimit", h, refresh=_LIMIT_REFRESH)
        # (min, max) milliwatts a limit may be set to: the board's, read once (the power remedy quotes the max)
        constraints = gpu.cached("power_limit_constraints", "nvmlDeviceGetPowerManagementLimitConstraints", h)
        temperature = gpu.first((
            ("temperature_v", "nvmlDeviceGetTemperatureV", (h, _TEMPERATURE_GPU)),
            ("temperature", "nvmlDeviceGetTemperature", (h, _TEMPERATURE_GPU)),
        ))  # fmt: skip
        links = self._nvlink_links(gpu, now)
        fields, scoped = self._fields(gpu, links)
        nvlink = {link: (scoped.get((FI_NVLINK_TX, link)), scoped.get((FI_NVLINK_RX, link))) for link in links}
        gpm = self._gpm(gpu)
        sm_clock = gpu.value("sm_clock", "nvmlDeviceGetClockInfo", h, _CLOCK_SM)
        mem_clock = gpu.value("memory_clock", "nvmlDeviceGetClockInfo", h, _CLOCK_MEM)
        sm_max = gpu.cached("sm_clock_max", "nvmlDeviceGetMaxClockInfo", h, _CLOCK_SM)
        mem_max = gpu.cached("memory_clock_max", "nvmlDeviceGetMaxClockInfo", h, _CLOCK_MEM)
        pstate = gpu.value("performance_state", "nvmlDeviceGetPerformanceState", h)
        fan = gpu.value("fan_speed", "nvmlDeviceGetFanSpeed", h)
        clock_events = self._clock_events(gpu)
        link_gen = gpu.value("pcie_link_generation", "nvmlDeviceGetCurrPcieLinkGeneration", h)
        link_width = gpu.value("pcie_link_width", "nvmlDeviceGetCurrPcieLinkWidth", h)
        link_max_gen = gpu.cached("pcie_link_max_generation", "nvmlDeviceGetMaxPcieLinkGeneration", h)
        link_max_width = gpu.cached("pcie_link_max_width", "nvmlDeviceGetMaxPcieLinkWidth", h)
        mig_enabled, mig = self._mig(gpu, now)
        processes, processes_stale = self._processes(gpu, mig)
        # read once per GPU and kept (unsupported ones are re-probed like every other call): no per-tick cost.
        # Once all four answered they never change for this handle: their sample fields are kept as they are
        thresholds = gpu.cache.get("thresholds")
        if thresholds is None:
            read = {name: gpu.cached(name, "nvmlDeviceGetTemperatureThreshold", h, kind) for name, kind in _THRESHOLDS}
            thresholds = {name: float(v) if v else None for name, v in read.items()}
            if all(v is not None for v in read.values()):
                gpu.cache["thresholds"] = thresholds

        if total is not None and gpu.memory_total is None:
            gpu.memory_total = total
        util_gpu, util_memory = _struct_values(util, "gpu", "memory")
        utilization = util_gpu / 100 if util_gpu is not None else None
        busy, event_seconds = self._accumulate(gpu.uuid or f"index:{gpu.index}", now, utilization, clock_events)
        tx, rx = self._pcie_rates(gpu, now, fields[8], fields[9])
        with self._xid_lock:
            # no XID yet (not watched, or watched and quiet: the watcher registers an empty map when it starts,
            # at any moment between ticks) is the one shared empty map, so a quiet GPU's value never changes
            xids = dict(counts) if (counts := self._xid_counts.get(gpu.uuid)) else samples.EMPTY
        return samples.GpuSample(
            index=gpu.index,
            uuid=gpu.uuid,
            name=gpu.name,
            pci_bus_id=gpu.pci_bus_id,
            minor_number=gpu.minor,
            memory_total_bytes=total if total is not None else gpu.memory_total,
            memory_used_bytes=used,
            memory_free_bytes=free,
            memory_reserved_bytes=reserved,
            utilization_ratio=utilization,
            memory_utilization_ratio=util_memory / 100 if util_memory is not None else None,
            busy_seconds_total=busy,
            power_watts=power / 1000 if power is not None else None,
            power_limit_watts=limit / 1000 if limit is not None else None,
            power_limit_max_watts=_limit_max(constraints),
            energy_joules_total=fields[1] / 1000 if fields[1] is not None else None,
            temperature_celsius=float(temperature) if temperature is not None else None,
            # boards without the sensor answer 0 rather than NOT_SUPPORTED: no memory is at 0 degC while powered
            memory_temperature_celsius=float(fields[0]) if fields[0] else None,
            sm_clock_hertz=sm_clock * 1e6 if sm_clock is not None else None,
            sm_clock_max_hertz=sm_max * 1e6 if sm_max is not None else None,
            memory_clock_hertz=mem_clock * 1e6 if mem_clock is not None else None,
            memory_clock_max_hertz=mem_max * 1e6 if mem_max is not None else None,
            performance_state=int(pstate) if pstate is not None and 0 <= pstate <= 15 else None,
            fan_speed_ratio=fan / 100 if fan is not None else None,
            clock_events_active=clock_events,
            clock_events_seconds_total=event_seconds,
            pcie_tx_bytes_per_second=tx,
            pcie_rx_bytes_per_second=rx,
            pcie_tx_bytes_total=fields[8],
            pcie_rx_bytes_total=fields[9],
            nvlink_links=tuple(samples.NvLink(link=link, up=True, tx_bytes_total=_kib(tx), rx_bytes_total=_kib(rx))
                               for link, (tx, rx) in nvlink.items()) + self._down_links(gpu),
            nvlink_version=gpu.cache["nvlink"][3] if nvlink else None,
            **gpm,
            pcie_link_generation=link_gen,
            pcie_link_width=link_width,
            pcie_link_max_generation=link_max_gen,
            pcie_link_max_width=link_max_width,
            processes=processes,
            processes_stale=processes_stale,
            mig_enabled=mig_enabled,
            mig_instances=mig,
            xid_errors_total=xids,
            ecc_uncorrected_volatile_total=fields[2],
            ecc_uncorrected_aggregate_total=fields[3],
            remapped_rows_correctable=fields[4],
            remapped_rows_uncorrectable=fields[5],
            remapped_rows_pending=bool(fields[6]) if fields[6] is not None else None,
            remapped_rows_failure=bool(fields[7]) if fields[7] is not None else None,
            **thresholds,
        )

    def _fields(self, gpu: _Gpu, links: Sequence[int] = ()) -> tuple[list[Any], dict[tuple[int, int], Any]]:
        """Values of _FIELDS (None where the field failed) and of the NVLink data counters of ``links`` (by
        (field, link)), from one nvmlDeviceGetFieldValues call.

        The (field, scope) list and its nvmlFieldValue_t array are built once and reused while the set of
        unsupported fields and active links stays the same: the driver rewrites each entry's return code,
        type and value on every call (nvml.h), so only the call itself happens per tick."""
        plan = gpu.fields_plan
        links = tuple(links)
        if plan is None or plan[1] != links or (plan[2] and any(t <= gpu.now for t in plan[2])):
            plan = gpu.fields_plan = self._fields_plan(gpu, links)
        wanted, _, _, array = plan
        got: dict[tuple[int, int], Any] = {}
        if not wanted:
            return [None] * len(_FIELDS), got
        values = gpu.value("field_values", "nvmlDeviceGetFieldValues", gpu.handle, array, wanted, call=self._field_values_call)
        if values is not None:
            failed = False
            decoded = _FIELD_DECODER.decode(values, len(wanted)) if values is array else _decode_fields(values)
            for key, (ret, value) in zip(wanted, decoded, strict=False):
                if ret == _SUCCESS:
                    got[key] = value
                elif ret in _ABSENT_CODES:
                    gpu.unsupported[f"field:{key[0]}:{key[1]}"] = gpu.now + _REPROBE_UNSUPPORTED
                    failed = True
                elif ret in _DEVICE_CODES:
                    raise _GpuDown(f"nvmlDeviceGetFieldValues: {describe(pynvml.NVMLError(ret))}")
            if failed:
                gpu.fields_plan = None  # re-plan without the unsupported fields
        return [got.get(k) for k in _FIELD_KEYS], got

    def _fields_plan(self, gpu: _Gpu, links: tuple[int, ...]) -> tuple[Any, ...]:
        """(wanted pairs, links, re-probe times of the fields left out, their array) for _fields."""
        pairs = [(f, 0) for f in _FIELDS] + [(fid, link) for link in links for fid in (FI_NVLINK_TX, FI_NVLINK_RX)]
        wanted, reprobe = [], []
        for fid, scope in pairs:
            retry_at = gpu.unsupported.get(f"field:{fid}:{scope}")
            if retry_at is None or retry_at <= gpu.now:
                wanted.append((fid, scope))
            else:
                reprobe.append(retry_at)
        array = None
        if wanted and hasattr(pynvml, "c_nvmlFieldValue_t"):
            array = (pynvml.c_nvmlFieldValue_t * len(wanted))()
            for entry, (fid, scope) in zip(array, wanted, strict=True):
                ctypes.Structure.__setattr__(entry, "fieldId", fid)
                ctypes.Structure.__setattr__(entry, "scopeId", scope)
        return tuple(wanted), links, tuple(reprobe), array

    def _field_values_call(self, handle: Any, array: Any, wanted: Sequence[tuple[int, int]]) -> Any:
        """nvmlDeviceGetFieldValues into ``array``: the entry point found through the binding's own lookup
        (its error mapping, FUNCTION_NOT_FOUND included), called with the prepared array; the binding's
        wrapper (a new array, every field id set through its printable struct) where it has no lookup."""
        lookup = getattr(self.lib, "_nvmlGetFunctionPointer", None)
        if lookup is None or array is None:
            return self.lib.nvmlDeviceGetFieldValues(handle, list(wanted))
        ret = lookup("nvmlDeviceGetFieldValues")(handle, ctypes.c_int32(len(wanted)), ctypes.byref(array))
        if ret != _SUCCESS:
            raise pynvml.NVMLError(ret)
        return array

    def _clock_events(self, gpu: _Gpu) -> dict[str, bool]:
        """Reason -> active, for the reasons this GPU supports; empty when it reports none."""
        h = gpu.handle
        if "clock_events_supported" not in gpu.cache:
            mask = gpu.first((
                ("supported_clock_events", "nvmlDeviceGetSupportedClocksEventReasons", (h,)),
                ("supported_throttle_reasons", "nvmlDeviceGetSupportedClocksThrottleReasons", (h,)),
            ))  # fmt: skip
            if mask is None and "supported_clock_events" not in gpu.unsupported:
                return {}  # failed this tick: ask again next tick
            gpu.cache["clock_events_supported"] = _ALL_REASONS if mask is None else int(mask)
        supported = gpu.cache["clock_events_supported"]
        current = gpu.first((
            ("clock_events", "nvmlDeviceGetCurrentClocksEventReasons", (h,)),
            ("throttle_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons", (h,)),
        ))  # fmt: skip
        if current is None:
            return {}
        key = (supported, current & supported)
        events = _CLOCK_EVENTS.get(key)
        if events is None:  # one read-only dict per combination, shared by the samples that show it
            events = {name: bool(current & bit) for name, bit in CLOCK_EVENT_REASONS if supported & bit}
            if len(_CLOCK_EVENTS) < 4096:
                _CLOCK_EVENTS[key] = events
        return events

    def _process_list(self, gpu: _Gpu, handle: Any, prefix: str = "") -> tuple[tuple[tuple[int, int | None], ...] | None, bool]:
        """(processes on ``handle`` as (pid, used memory or None) rows, failed): the rows, or None when this
        handle cannot list them (unsupported, no permission); failed is True when the query failed this tick
        (transient). The same rows object as last tick's when the driver listed the same bytes."""
        for key, function in (("processes_v3", "nvmlDeviceGetComputeRunningProcesses_v3"),
                              ("processes_v2", "nvmlDeviceGetComputeRunningProcesses_v2")):  # fmt: skip
            call = self._list_query(gpu, f"list:{prefix}{key}", function, _PROCESS_LAYOUT, _process_rows)
            procs = gpu.query(prefix + key, function, handle, call=call)
            if procs is _ABSENT:
                continue
            if procs is None:
                return None, True
            return (procs if call is not None else _process_rows(tuple((p.pid, p.usedGpuMemory) for p in procs))), False
        return None, False

    def _list_query(self, gpu: _Gpu, key: str, function: str, layout: _Layout,
                    convert: Callable[[list[tuple[Any, ...]]], Any]) -> _ListQuery | None:
        """The list query kept under ``key`` on this GPU (see _ListQuery). None where the binding has no such
        function (the query then finds it missing, as before), no function lookup, or no usable layout of the
        struct: then the binding's wrapper is called."""
        query = gpu.cache.get(key)
        if query is None:
            lookup = getattr(self.lib, "_nvmlGetFunctionPointer", None)
            if lookup is None or not layout.ready or not hasattr(self.lib, function):
                return None
            query = gpu.cache[key] = _ListQuery(lookup, function, layout, convert)
        return query

    def _processes(self, gpu: _Gpu, mig: tuple[samples.MigInstance, ...]) -> tuple[tuple[samples.GpuProcess, ...], bool | None]:
        """(processes, stale). A transient failure (INSUFFICIENT_SIZE when processes doubled between the
        binding's two calls, or any error) keeps the last list, marked stale: never "no processes". On a
        MIG-enabled GPU whose device-level list is denied (NO_PERMISSION without privileges), the processes
        are those of its MIG instances."""
        procs, failed = self._process_list(gpu, gpu.handle)
        if failed:
            last = gpu.cache.get("processes_last")
            return (last, True) if last is not None else ((), None)
        if procs is None:
            merged = {p.pid: p for m in mig for p in m.processes}
            return tuple(merged.values()), (None if not mig else False)
        sm = self._process_utilization(gpu) if procs else None
        last = gpu.cache.get("processes_last")
        memo = gpu.cache.get("processes_memo")
        if memo is not None and memo[0] is procs and memo[1] == sm and memo[2] is last:
            return last, False  # the same rows and samples as last tick: last tick's tuple, nothing rebuilt
        result = gpu.cache["processes_last"] = _gpu_processes(last, procs, sm)
        gpu.cache["processes_memo"] = (procs, sm, result)
        return result, False

    def _process_utilization(self, gpu: _Gpu) -> dict[int, float] | None:
        """pid -> SM utilization (0-1) averaged over NVML's samples since the last tick; None when this GPU
        does not sample processes (or the call failed this tick).

        nvmlDeviceGetProcessUtilization returns samples only for processes that ran a kernel since the given
        timestamp, and NOT_FOUND when none did: that is "every process idle", not "unsupported".
        NOT_SUPPORTED (and the other absent codes) mark it unsupported on this GPU like any other query.
        The newest sample's timestamp is kept per GPU and passed next tick, so each sample is read once.
        """
        key = "process_utilization"
        retry_at = gpu.unsupported.get(key)
        if retry_at is not None:
            if gpu.now < retry_at:
                return None
            del gpu.unsupported[key]
        last_seen = gpu.cache.get("process_utilization_seen", 0)
        function = "nvmlDeviceGetProcessUtilization"
        query = self._list_query(gpu, "list:process_utilization", function, _SAMPLE_LAYOUT, tuple)
        try:
            if query is not None:
                ret, found = query.read(gpu.handle, ctypes.c_ulonglong(last_seen))
                if ret == _ERR["NOT_FOUND"]:  # the usual answer on a quiet GPU: no exception raised for it
                    return {}
                if ret != _SUCCESS:
                    raise pynvml.NVMLError(ret)
            else:
                found = tuple(_struct_values(s, "pid", "timeStamp", "smUtil")
                              for s in getattr(gpu.lib, function)(gpu.handle, last_seen) or ())
        except pynvml.NVMLError as exc:
            if exc.value in (_ERR["NOT_FOUND"], _SUCCESS):
                return {}
            if exc.value in _ABSENT_CODES:
                gpu.unsupported[key] = gpu.now + _REPROBE_UNSUPPORTED
                return None
            if exc.value in _DEVICE_CODES:
                raise _GpuDown(f"{function}: {describe(exc)}") from None
            if exc.value in _LIBRARY_CODES:
                raise _LibraryDown(exc) from None
            return None
        except AttributeError:  # a binding without the function
            gpu.unsupported[key] = gpu.now + _REPROBE_UNSUPPORTED
            return None
        sums: dict[int, int] = {}
        counts: dict[int, int] = {}  # pids with more than one sample (a driver may keep several per process)
        for pid, stamp, sm in found:
            if pid in sums:
                sums[pid] += sm
                counts[pid] = counts.get(pid, 1) + 1
            else:
                sums[pid] = sm
            if stamp > last_seen:
                last_seen = stamp
        gpu.cache["process_utilization_seen"] = last_seen
        return {pid: min(1.0, total / counts.get(pid, 1) / 100) for pid, total in sums.items()}

    def _mig(self, gpu: _Gpu, now: float) -> tuple[bool | None, tuple[samples.MigInstance, ...]]:
        """(MIG enabled, instances with memory); the layout is re-read every _MIG_REFRESH seconds."""
        layout = gpu.cache.get("mig")
        if layout is None or now - layout[0] >= _MIG_REFRESH:
            mode = gpu.value("mig_mode", "nvmlDeviceGetMigMode", gpu.handle)
            if mode is None:
                enabled = None if "mig_mode" in gpu.unsupported else (layout[1] if layout else None)
                instances = layout[2] if layout and enabled is not None else []
            else:
                enabled = mode[0] == _MIG_ENABLE
                instances = self._mig_layout(gpu) if enabled else []
            layout = gpu.cache["mig"] = (now, enabled, instances)
        _, enabled, instances = layout
        out = []
        for m in instances:
            mem = gpu.query("mig_memory", "nvmlDeviceGetMemoryInfo", m.handle, remember=False)
            if mem is _ABSENT:  # instance gone: re-read the layout next tick
                gpu.cache.pop("mig", None)
                mem = None
            # the instance's own processes: attributed per instance, and readable without the device-level
            # privileges a MIG-enabled GPU asks for its whole-GPU list
            procs, failed = self._process_list(gpu, m.handle, prefix=f"mig:{m.uuid}:")
            key = f"mig_processes:{m.uuid}"
            if failed:
                processes = gpu.cache.get(key, ())
            else:
                processes = gpu.cache[key] = _gpu_processes(gpu.cache.get(key), procs or (), None)
            instance = samples.MigInstance(
                gpu_instance_id=m.gpu_instance_id,
                compute_instance_id=m.compute_instance_id,
                uuid=m.uuid,
                memory_used_bytes=int(_struct_values(mem, "used")[0]) if mem is not None else None,
                memory_total_bytes=int(_struct_values(mem, "total")[0]) if mem is not None else None,
                processes=processes,
                profile_id=m.profile_id,
                placement_start=m.placement_start,
            )  # fmt: skip
            # its size and whatever else did not change are last tick's objects (samples.share_unchanged)
            gpu.cache[f"mig_instance:{m.uuid}"] = instance = samples.share_unchanged(
                instance, gpu.cache.get(f"mig_instance:{m.uuid}"))
            out.append(instance)
        return enabled, tuple(out)

    def _mig_layout(self, gpu: _Gpu) -> list[_Mig]:
        count = gpu.value("mig_count", "nvmlDeviceGetMaxMigDeviceCount", gpu.handle) or 0
        out = []
        for i in range(count):
            handle = gpu.query("mig_handle", "nvmlDeviceGetMigDeviceHandleByIndex", gpu.handle, i, remember=False)
            if handle is None or handle is _ABSENT:
                continue  # empty slot
            uuid = gpu.query("mig_uuid", "nvmlDeviceGetUUID", handle, remember=False)
            gi = gpu.query("mig_gpu_instance", "nvmlDeviceGetGpuInstanceId", handle, remember=False)
            ci = gpu.query("mig_compute_instance", "nvmlDeviceGetComputeInstanceId", handle, remember=False)
            if uuid in (None, _ABSENT) or gi in (None, _ABSENT):
                continue
            profile = start = None
            instance = gpu.query("mig_gpu_instance_handle", "nvmlDeviceGetGpuInstanceById", gpu.handle, int(gi),
                                 remember=False)
            if instance not in (None, _ABSENT):
                info = gpu.query("mig_gpu_instance_info", "nvmlGpuInstanceGetInfo", instance, remember=False)
                if info not in (None, _ABSENT):
                    profile, start = int(info.profileId), int(info.placement.start)
            out.append(_Mig(handle, _text(uuid), int(gi), None if ci in (None, _ABSENT) else int(ci), profile, start))
        return out

    def _nvlink_links(self, gpu: _Gpu, now: float) -> list[int]:
        """The active NVLink links of this GPU; the link count and states are re-read every _NVLINK_REFRESH s."""
        layout = gpu.cache.get("nvlink")
        if layout is not None and now - layout[0] < _NVLINK_REFRESH:
            return layout[1]
        active: list[int] = []
        down: list[int] = []
        if gpu.unsupported.get("field:91:0", 0.0) <= gpu.now:
            _, got = self._fields_only(gpu, [(FI_NVLINK_LINK_COUNT, 0)])
            count = got.get((FI_NVLINK_LINK_COUNT, 0)) or 0
            for link in range(int(count)):
                state = gpu.query("nvlink_state", "nvmlDeviceGetNvLinkState", gpu.handle, link, remember=False)
                if state is _ABSENT or state is None:
                    continue
                (active if state else down).append(link)
        version = None
        if active:
            v = gpu.query("nvlink_version", "nvmlDeviceGetNvLinkVersion", gpu.handle, active[0], remember=False)
            version = None if v is None or v is _ABSENT else int(v)
        gpu.cache["nvlink"] = (now, active, down, version)
        return active

    def _down_links(self, gpu: _Gpu) -> tuple[samples.NvLink, ...]:
        layout = gpu.cache.get("nvlink")
        return tuple(samples.NvLink(link=link, up=False) for link in (layout[2] if layout else ()))

    def _fields_only(self, gpu: _Gpu, scoped: Sequence[tuple[int, int]]) -> tuple[None, dict[tuple[int, int], Any]]:
        """Just the ``scoped`` fields (one nvmlDeviceGetFieldValues call), for reads off the per-tick set."""
        values = gpu.value("field_values_extra", "nvmlDeviceGetFieldValues", gpu.handle, list(scoped))
        got = {}
        for (fid, scope), (ret, value) in zip(scoped, _decode_fields(values or ()), strict=False):
            if ret == _SUCCESS:
                got[(fid, scope)] = value
            elif ret in _ABSENT_CODES:
                gpu.unsupported[f"field:{fid}:{scope}"] = gpu.now + _REPROBE_UNSUPPORTED
        return None, got

    def _gpm(self, gpu: _Gpu) -> dict[str, float]:
        """GPM ratios averaged over the last tick (Hopper and later): one nvmlGpmSampleGet (a non-blocking
        snapshot) and one nvmlGpmMetricsGet per tick, between this tick's sample and the last one. {} where
        the GPU or the binding has no GPM, and on the first tick."""
        if not _BINDING_HAS_GPM:
            return {}
        state = gpu.cache.get("gpm")
        if state is None:
            support = gpu.query("gpm_support", "nvmlGpmQueryDeviceSupport", gpu.handle)
            if support is None or support is _ABSENT:
                return {}
            if not support.isSupportedDevice:
                gpu.unsupported["gpm_support"] = gpu.now + _REPROBE_UNSUPPORTED
                return {}
            pair = [gpu.query("gpm_alloc", "nvmlGpmSampleAlloc", remember=False) for _ in range(2)]
            if any(s is None or s is _ABSENT for s in pair):
                self._gpm_free(pair)
                return {}
            state = gpu.cache["gpm"] = [pair[0], pair[1], False]  # previous, next, previous holds a sample
        previous, current, primed = state
        got = gpu.query("gpm_sample", "nvmlGpmSampleGet", gpu.handle, current, remember=False)
        if got is None or got is _ABSENT:
            state[2] = False
            return {}
        state[0], state[1], state[2] = current, previous, True
        if not primed:
            return {}
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = _GPM_METRICS_GET_VERSION
        request.numMetrics = len(_GPM_METRICS)
        request.sample1, request.sample2 = previous, current
        for i, (metric, _) in enumerate(_GPM_METRICS):
            request.metrics[i].metricId = metric
        result = gpu.query("gpm_metrics", "nvmlGpmMetricsGet", request, remember=False)
        if result is None or result is _ABSENT:
            return {}
        out = {}
        for i, (_, name) in enumerate(_GPM_METRICS):
            m = result.metrics[i]
            if int(m.nvmlReturn) == _SUCCESS:
                out[name] = min(1.0, max(0.0, float(m.value) / 100))
        return out

    def _gpm_free(self, samples_: Sequence[Any]) -> None:
        for s in samples_:
            if s is not None and s is not _ABSENT:
                try:
                    self.lib.nvmlGpmSampleFree(s)
                except pynvml.NVMLError:
                    pass

    def _release_gpm(self) -> None:
        """Free every GPU's GPM samples (before nvmlShutdown)."""
        for gpu in self._gpus:
            state = gpu.cache.pop("gpm", None)
            if state is not None:
                self._gpm_free(state[:2])

    def _pcie_rates(self, gpu: _Gpu, now: float, tx_total: int | None, rx_total: int | None) -> tuple[float | None, float | None]:
        """PCIe bytes/s: exact averages over the last tick from the cumulative counters where the GPU has
        them (the poller then leaves that GPU alone); otherwise the poller's last 20 ms sample."""
        if tx_total is None or rx_total is None:
            if self._pcie is None:
                return None, None
            self._pcie.counted.discard(gpu.uuid)
            return self._pcie.values.get(gpu.uuid, (None, None))
        if self._pcie is not None:
            self._pcie.counted.add(gpu.uuid)
        key = gpu.uuid or f"index:{gpu.index}"
        last = self._pcie_last.get(key)
        self._pcie_last[key] = (now, tx_total, rx_total)
        if last is None or now <= last[0] or tx_total < last[1] or rx_total < last[2]:
            return None, None  # first read, or the counters were reset (driver reload)
        dt = now - last[0]
        return (tx_total - last[1]) / dt, (rx_total - last[2]) / dt

    def _accumulate(self, uuid: str, now: float, utilization: float | None, events: dict[str, bool]) -> tuple[float | None, Mapping[str, float]]:
        """Add this interval to busy seconds and clock-event seconds; return the totals.

        The interval runs from this GPU's previous read (first read, or first after an outage: nothing).
        """
        last = self._last_read.get(uuid)
        self._last_read[uuid] = now
        dt = max(0.0, now - last) if last is not None else 0.0
        if utilization is not None:
            self._busy[uuid] = self._busy.get(uuid, 0.0) + utilization * dt
        # the totals are a new map only when one grew (or a reason appeared): while none is active, every
        # sample in the window holds the same one (it is never changed once returned)
        seconds = self._clock_event_seconds.get(uuid, samples.EMPTY)
        if (dt and any(events.values())) or not events.keys() <= seconds.keys():
            seconds = {**seconds, **{reason: seconds.get(reason, 0.0) + (dt if active else 0.0)
                                     for reason, active in events.items()}}
            self._clock_event_seconds[uuid] = seconds
        return self._busy.get(uuid), seconds

