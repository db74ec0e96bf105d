"""What nvml.h says: return codes, constants, field and metric ids, and the C structs of libnvidia-ml.

Written from nvml.h, not borrowed from the binding, so a binding whose struct disagrees with the C layout
reads garbage here as it would on a real host. Also the few helpers every entry point uses to answer:
``_Return`` (return this nvmlReturn_t) and the writers of out-parameters (``_put``, ``_struct``,
``_string``: INVALID_ARGUMENT for NULL, INSUFFICIENT_SIZE for a short buffer). Imports nothing of the
simulation.
"""

from __future__ import annotations

import ctypes
from ctypes import (
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
from typing import TYPE_CHECKING, TypeAlias, TypeVar

if TYPE_CHECKING:
    from ctypes import _SimpleCData

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


H, P, U, INT, ULL = c_void_p, c_void_p, c_uint, c_int, c_ulonglong  # handle, pointer, and scalar C types
# the C type of an entry point's argument (one of H, P, U, INT, ULL): ctypes hands the entry point an int, or None
# for a NULL pointer
CArg: TypeAlias = "type[_SimpleCData[int]] | type[_SimpleCData[int | None]]"
_V = TypeVar("_V")  # the Python value of a C scalar type (int; int | None for a pointer)
_C = TypeVar("_C", "ctypes.Structure", "ctypes.Union", "_SimpleCData[int]")  # a C struct, union or scalar type


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


def _put(ctype: type[_SimpleCData[_V]], address: int | None, value: _V) -> None:
    """Write ``value`` as ``ctype`` at ``address`` (an out-parameter); INVALID_ARGUMENT for NULL."""
    if not address:
        raise _Return(_E["INVALID_ARGUMENT"])
    ctype.from_address(address).value = value


def _struct(ctype: type[_C], address: int | None) -> _C:
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
