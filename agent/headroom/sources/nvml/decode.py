"""Decoders of what NVML answers: field values, binding structs and struct arrays read in one pass over their
bytes, into NamedTuples (``DeviceFields``: the per-tick device fields by name, each looked up by its field
id; ``FieldValue``: one nvmlFieldValue_t; ``ProcessRow``: one process-list entry), and the GpuProcess tuples
built from them. No NVML call is made here.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Mapping, Sequence
from functools import partial
from typing import NamedTuple, TypedDict

from headroom import samples
from headroom.sources.nvml.binding import _SUCCESS, NvmlValue, pynvml

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
_CLOCK_EVENTS: dict[tuple[int, int], dict[str, bool]] = {}  # (supported, active) masks -> reason -> active


def clock_events(supported: int, current: int) -> dict[str, bool]:
    """Reason -> active for the reasons in the ``supported`` mask, from the ``current`` one: one read-only dict
    per combination, shared by the samples that show it."""
    key = (supported, current & supported)
    events = _CLOCK_EVENTS.get(key)
    if events is None:
        events = {name: bool(current & bit) for name, bit in CLOCK_EVENT_REASONS if supported & bit}
        if len(_CLOCK_EVENTS) < 4096:
            _CLOCK_EVENTS[key] = events
    return events


def _limit_max(constraints: NvmlValue) -> float | None:
    """The max of nvmlDeviceGetPowerManagementLimitConstraints' [min, max] milliwatts, in watts; None when absent."""
    try:
        high = constraints[1]
    except (TypeError, IndexError, KeyError):
        return None
    return high / 1000 if isinstance(high, int) and high > 0 else None


# nvmlFieldId (nvml.h NVML_FI_DEV_*); read in one nvmlDeviceGetFieldValues call per GPU per tick
FI_MEMORY_TEMP = 82
FI_TOTAL_ENERGY_CONSUMPTION = 83
FI_ECC_DBE_VOL_TOTAL, FI_ECC_DBE_AGG_TOTAL = 4, 6
FI_REMAPPED_COR, FI_REMAPPED_UNC, FI_REMAPPED_PENDING, FI_REMAPPED_FAILURE = 142, 143, 144, 145
FI_PCIE_COUNT_TX_BYTES, FI_PCIE_COUNT_RX_BYTES = 197, 198  # cumulative PCIe bytes (not in bindings < 12.560)
FI_NVLINK_LINK_COUNT = 91
FI_NVLINK_TX, FI_NVLINK_RX = 138, 139  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX: KiB per link (scope id)


class DeviceFields(NamedTuple):
    """The device-wide (scope 0) fields of one GPU's per-tick nvmlDeviceGetFieldValues call, each the value
    of its field id (``_FIELD_IDS``) as NVML gives it (each an unsigned integer of NVML's); None where the field
    failed or was not read."""

    memory_temperature: int | None = None  # degC; 0 on boards without the sensor
    energy_millijoules: int | None = None  # since the driver loaded
    ecc_dbe_volatile: int | None = None  # uncorrected ECC errors since the driver loaded
    ecc_dbe_aggregate: int | None = None  # uncorrected ECC errors over the board's life
    remapped_correctable: int | None = None  # rows remapped for correctable errors
    remapped_uncorrectable: int | None = None  # rows remapped for uncorrectable errors
    remapped_pending: int | None = None  # nonzero: a remap waits for a GPU reset
    remapped_failure: int | None = None  # nonzero: a remap failed
    pcie_tx_bytes: int | None = None  # cumulative PCIe bytes, GPU to host
    pcie_rx_bytes: int | None = None  # cumulative PCIe bytes, host to GPU


# each DeviceFields member's nvmlFieldId (a member without one fails here, at import)
_FIELD_IDS = {
    "memory_temperature": FI_MEMORY_TEMP, "energy_millijoules": FI_TOTAL_ENERGY_CONSUMPTION,
    "ecc_dbe_volatile": FI_ECC_DBE_VOL_TOTAL, "ecc_dbe_aggregate": FI_ECC_DBE_AGG_TOTAL,
    "remapped_correctable": FI_REMAPPED_COR, "remapped_uncorrectable": FI_REMAPPED_UNC,
    "remapped_pending": FI_REMAPPED_PENDING, "remapped_failure": FI_REMAPPED_FAILURE,
    "pcie_tx_bytes": FI_PCIE_COUNT_TX_BYTES, "pcie_rx_bytes": FI_PCIE_COUNT_RX_BYTES,
}  # fmt: skip
_FIELDS = tuple(_FIELD_IDS[name] for name in DeviceFields._fields)  # the per-tick request, in DeviceFields' order
_FIELD_KEYS = tuple((f, 0) for f in _FIELDS)
NO_FIELDS = DeviceFields()


def device_fields(got: Mapping[tuple[int, int], int | None]) -> DeviceFields:
    """DeviceFields from values keyed by (field id, scope id): each member is its own field id's value."""
    return DeviceFields._make([got.get(key) for key in _FIELD_KEYS])


class FieldValue(NamedTuple):
    """One decoded nvmlFieldValue_t: NVML's return code for the field and, on success, its value."""

    ret: int
    value: NvmlValue  # the union member NVML filled (an integer for every field headroom reads); None on failure


# FieldValue((ret, value)) without NamedTuple's Python-level __new__ (it runs for every field on every tick)
_field_value = partial(tuple.__new__, FieldValue)

# nvmlFieldValue_t: the union member that holds each nvmlValueType_t (nvml.h; UNSIGNED_SHORT is 6 even where
# the binding lacks the constant)
VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
# each member's C type (nvml.h), as a struct format: for a member an older binding's union lacks (usVal)
_VALUE_FORMAT = {"dVal": "d", "uiVal": "I", "ulVal": "L", "ullVal": "Q", "sllVal": "q", "siVal": "i", "usVal": "H"}
_NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE (unsigned long long)


_raw = ctypes.Structure.__getattribute__  # a struct field without the binding's per-read decoding


def _struct_values(struct: NvmlValue, *names: str) -> tuple[NvmlValue, ...]:
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


def _decode_fields(values: NvmlValue) -> list[FieldValue]:
    """A FieldValue (return code, value or None) of each nvmlFieldValue_t, through the plain ctypes getter
    (the binding's printable struct decodes every attribute read, 10x slower)."""
    out = []
    for fv in values:
        ret = _raw(fv, "nvmlReturn")
        member = VALUE_MEMBER.get(_raw(fv, "valueType")) if ret == _SUCCESS else None
        out.append(_field_value((ret, getattr(_raw(fv, "value"), member, None) if member else None)))
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

    def decode(self, array: NvmlValue, count: int) -> list[FieldValue]:
        """A FieldValue of each of the first ``count`` entries of ``array``."""
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
                    out.append(_field_value((ret, None)))
                    continue
                mask = masks.get(vt)
                if mask is not None:
                    out.append(_field_value((ret, raw & mask)))
                else:
                    fmt = formats.get(vt)
                    out.append(_field_value((ret, fmt.unpack_from(array, base + 8)[0] if fmt is not None else None)))
            return out
        for base in range(0, count * self.size, self.size):
            ret = ret_fmt.unpack_from(array, base + ret_off)[0]
            fmt = formats.get(type_fmt.unpack_from(array, base + type_off)[0]) if ret == _SUCCESS else None
            out.append(_field_value((ret, fmt.unpack_from(array, base + value_off)[0] if fmt is not None else None)))
        return out


# the unsigned members (uiVal, ulVal on LP64, ullVal, usVal): their value is the low bytes of the raw 8
_UNSIGNED_MASKS = {1: 0xFFFFFFFF, 2: 0xFFFFFFFFFFFFFFFF if ctypes.sizeof(ctypes.c_ulong) == 8 else 0xFFFFFFFF,
                   3: 0xFFFFFFFFFFFFFFFF, 6: 0xFFFF}
_FIELD_DECODER = _FieldDecoder()


_INTEGER_CODES = {**{code: {1: "b", 2: "h", 4: "i", 8: "q"} for code in "bhilq"},
                  **{code: {1: "B", 2: "H", 4: "I", 8: "Q"} for code in "BHILQ"}}


class _Layout:
    """Some fields of each entry of an array of a binding struct, read in one pass over its bytes: one
    ``struct.Struct`` whose offsets and C types come from the binding's own ctypes declaration (``names`` in
    the order of their offsets). ``ready`` is False when the binding lacks the struct or a field, or its
    types have no plain struct format: the caller then goes through the binding's wrapper."""

    def __init__(self, ctype_name: str, names: Sequence[str]) -> None:
        import struct

        self.ready = False
        self.ctype: NvmlValue = getattr(pynvml, ctype_name, None) if pynvml is not None else None
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

    def rows(self, raw: bytes) -> list[tuple[NvmlValue, ...]]:
        return list(self.struct.iter_unpack(raw))


# nvmlProcessInfo_v2_t: what the _v2 and _v3 process-list entry points fill (nvml.h; the binding's
# c_nvmlProcessInfo_v3_t is the same struct); nvmlProcessUtilizationSample_t for per-process utilization
_PROCESS_LAYOUT = _Layout("c_nvmlProcessInfo_v2_t", ("pid", "usedGpuMemory"))
_SAMPLE_LAYOUT = _Layout("c_nvmlProcessUtilizationSample_t", ("pid", "timeStamp", "smUtil"))


def _kib(value: int | None) -> int | None:
    return None if value is None else int(value) * 1024


class ProcessRow(NamedTuple):
    """One entry of a process list (nvmlProcessInfo_t): the pid and its used GPU memory, None where NVML cannot
    say."""

    pid: int
    used_memory_bytes: int | None


def _process_rows(rows: Sequence[tuple[NvmlValue, NvmlValue]]) -> tuple[ProcessRow, ...]:
    """The ProcessRows of a process list's (pid, usedGpuMemory) entries, the memory None where NVML cannot say
    (None from the binding's wrapper, NVML_VALUE_NOT_AVAILABLE in the struct)."""
    return tuple(ProcessRow(int(pid), None if used is None or used == _NOT_AVAILABLE else int(used)) for pid, used in rows)


def _gpu_processes(last: tuple[samples.GpuProcess, ...] | None, rows: Sequence[ProcessRow],
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
        proc = known.get(pid)
        if proc is None or proc.used_memory_bytes != used or proc.sm_utilization_ratio != ratio:
            proc = samples.GpuProcess(pid=pid, used_memory_bytes=used, sm_utilization_ratio=ratio)
        out.append(proc)
    return tuple(out)


# the GPM metrics read each tick (nvmlGpmMetricId_t) and the GpuSample field each ratio fills
_GPM_METRICS = ((2, "sm_active_ratio"), (3, "sm_occupancy_ratio"), (5, "tensor_active_ratio"), (10, "dram_active_ratio"))


class _GpmRatios(TypedDict, total=False):
    """The GPM ratios a tick measured (those of _GPM_METRICS the GPU answered), GpuSample's fields of those names."""

    sm_active_ratio: float
    sm_occupancy_ratio: float
    tensor_active_ratio: float
    dram_active_ratio: float
