"""The driver stand-in's entry points for a device's health and its links: ECC and remapped rows (with
GPU resets), the field values call, NVLink, GPM (samples and metrics) and XID events (event sets).

Built on ``device`` (field values read energy, PCIe counters and remap state through its methods).
"""

from __future__ import annotations

import ctypes
import time
from ctypes import c_uint, c_ulonglong, c_void_p
from typing import TYPE_CHECKING

from headroom.simulation.nvml_driver.core import _DEVICE_BASE
from headroom.simulation.nvml_driver.device import _DeviceCalls
from headroom.simulation.nvml_driver.nvml_h import (
    _E,
    FI_ECC_DBE_AGG_TOTAL,
    FI_ECC_DBE_VOL_TOTAL,
    FI_MEMORY_TEMP,
    FI_NVLINK_LINK_COUNT,
    FI_NVLINK_THROUGHPUT_DATA_RX,
    FI_NVLINK_THROUGHPUT_DATA_TX,
    FI_PCIE_COUNT_RX_BYTES,
    FI_PCIE_COUNT_TX_BYTES,
    FI_REMAPPED_COR,
    FI_REMAPPED_FAILURE,
    FI_REMAPPED_PENDING,
    FI_REMAPPED_UNC,
    FI_TOTAL_ENERGY_CONSUMPTION,
    FIELD_NAMES,
    GPM_METRICS,
    GPM_METRICS_GET_VERSION,
    GPM_SUPPORT_VERSION,
    MEMORY_ERROR_UNCORRECTED,
    SUCCESS,
    VOLATILE_ECC,
    VT_DOUBLE,
    VT_SINT,
    VT_SLONGLONG,
    VT_UINT,
    VT_ULONG,
    VT_ULONGLONG,
    VT_USHORT,
    XID_CRITICAL_ERROR,
    EventData,
    FieldValue,
    GpmMetric,
    GpmMetricsGetHead,
    GpmSupport,
    _put,
    _Return,
    _struct,
)
from headroom.simulation.spec import GPM_SIGNALS

if TYPE_CHECKING:
    from headroom.simulation.spec import GpuSpec

_EVENT_SET_BASE = 0x5EE7_0000
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



class _HealthCalls(_DeviceCalls):
    """The entry points of ECC, remapped rows, field values, NVLink, GPM and XID events."""

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
