"""The driver stand-in's entry points for one device: its identity and handles, and its readings.

PCI info, utilization, memory, power and energy, temperatures, clocks and clock-event reasons, PCIe link
and throughput, the process lists and per-process utilization, and MIG (modes, device handles, GPU
instances): each reads the scenario's GPU spec and signals at the driver's clock. Built on ``core``.
"""

from __future__ import annotations

import ctypes
import time
from ctypes import c_uint, c_void_p
from typing import TYPE_CHECKING

from headroom.simulation.nvml_driver.core import _DEVICE_BASE, DriverCore
from headroom.simulation.nvml_driver.nvml_h import (
    _E,
    CLOCK_MEM,
    CLOCK_SM,
    DEVICE_MIG_DISABLE,
    DEVICE_MIG_ENABLE,
    MEMORY_V2,
    NOT_AVAILABLE,
    PCIE_UTIL_RX,
    PCIE_UTIL_TX,
    TEMPERATURE_GPU,
    TEMPERATURE_THRESHOLDS,
    TEMPERATURE_V1,
    GpuInstanceInfo,
    Memory,
    MemoryV2,
    PciInfo,
    ProcessInfo,
    ProcessUtilizationSample,
    TemperatureV1,
    Utilization,
    _put,
    _Return,
    _string,
    _struct,
)
from headroom.simulation.spec import CLOCK_EVENT_REASONS

if TYPE_CHECKING:
    from headroom.simulation.nvml_driver.nvml_h import ProcessInfoV1
    from headroom.simulation.spec import GpuSpec, MigInstanceSpec

_GPU_INSTANCE_BASE = 0x5EE1_0000  # GPU instance handles (nvmlGpuInstance_t): base + 0x100 * GPU + MIG slot + 1
_REASON_BIT = {name: 1 << i for i, name in enumerate(CLOCK_EVENT_REASONS)}


class _DeviceCalls(DriverCore):
    """The entry points of a device's identity, readings, processes and MIG (see the module docstring)."""

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

    def _processes(self, name: str, struct: type[ProcessInfo] | type[ProcessInfoV1], handle: int, count: int,
                   infos: int | None) -> None:
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

    def _mig(self, name: str, handle: int) -> MigInstanceSpec:
        gpu = self._device(name, handle, allow_mig=True)
        _, slot = self._gpu(handle)
        if slot is None:
            raise _Return(_E["INVALID_ARGUMENT"])
        return gpu.mig_instances[slot]
