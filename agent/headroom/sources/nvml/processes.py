"""A GPU's process lists and MIG instances: the processes NVML lists on the GPU (compute processes, v3 then v2)
with each one's SM utilization from NVML's samples since the last tick, and the MIG layout (re-read every 30 s)
with each instance's memory and its own processes. Every call goes through ``binding._Gpu.query`` or a kept
``binding._ListQuery``; the collector (collector.py) calls ``processes`` and ``mig_instances`` once a tick.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass

from headroom import samples
from headroom.sources.nvml import binding
from headroom.sources.nvml.binding import (
    _ABSENT,
    _ABSENT_CODES,
    _DEVICE_CODES,
    _ERR,
    _LIBRARY_CODES,
    _SUCCESS,
    _Gpu,
    _GpuDown,
    _LibraryDown,
    _ListQuery,
    _text,
    describe,
    pynvml,
)
from headroom.sources.nvml.decode import (
    _PROCESS_LAYOUT,
    _SAMPLE_LAYOUT,
    ProcessRow,
    _gpu_processes,
    _Layout,
    _process_rows,
    _struct_values,
)

_MIG_ENABLE = 1
_MIG_REFRESH = 30.0  # seconds between MIG layout re-reads


@dataclass
class _Mig:
    handle: binding.NvmlHandle
    uuid: str
    gpu_instance_id: int
    compute_instance_id: int | None
    profile_id: int | None = None  # its GPU instance's profile id and placement start (the NVIDIA DRA driver
    placement_start: int | None = None  # names a MIG device by them); None: NVML did not say


def _process_list(lib: binding.NvmlLib, gpu: _Gpu, handle: binding.NvmlHandle, prefix: str = "") -> tuple[tuple[ProcessRow, ...] | None, bool]:
    """(processes on ``handle`` as (pid, used memory or None) rows, failed): the rows, or None when this
    handle cannot list them (unsupported, no permission); failed is True when the query failed this tick
    (transient). The same rows object as last tick's when the driver listed the same bytes."""
    for key, function in (("processes_v3", "nvmlDeviceGetComputeRunningProcesses_v3"),
                          ("processes_v2", "nvmlDeviceGetComputeRunningProcesses_v2")):  # fmt: skip
        call = _list_query(lib, gpu, f"list:{prefix}{key}", function, _PROCESS_LAYOUT, _process_rows)
        procs = gpu.query(prefix + key, function, handle, call=call)
        if procs is _ABSENT:
            continue
        if procs is None:
            return None, True
        return (procs if call is not None else _process_rows(tuple((p.pid, p.usedGpuMemory) for p in procs))), False
    return None, False


def _list_query(lib: binding.NvmlLib, gpu: _Gpu, key: str, function: str, layout: _Layout,
                convert: Callable[[list[tuple[binding.NvmlValue, ...]]], binding.NvmlValue]) -> _ListQuery | None:
    """The list query kept under ``key`` on this GPU (see _ListQuery). None where the binding has no such
    function (the query then finds it missing, as before), no function lookup, or no usable layout of the
    struct: then the binding's wrapper is called."""
    query = gpu.cache.get(key)
    if query is None:
        lookup = getattr(lib, "_nvmlGetFunctionPointer", None)
        if lookup is None or not layout.ready or not hasattr(lib, function):
            return None
        query = gpu.cache[key] = _ListQuery(lookup, function, layout, convert)
    return query


def processes(lib: binding.NvmlLib, gpu: _Gpu, mig: tuple[samples.MigInstance, ...]) -> tuple[tuple[samples.GpuProcess, ...], bool | None]:
    """(processes, stale). A transient failure (INSUFFICIENT_SIZE when processes doubled between the
    binding's two calls, or any error) keeps the last list, marked stale: never "no processes". On a
    MIG-enabled GPU whose device-level list is denied (NO_PERMISSION without privileges), the processes
    are those of its MIG instances."""
    procs, failed = _process_list(lib, gpu, gpu.handle)
    if failed:
        last = gpu.cache.get("processes_last")
        return (last, True) if last is not None else ((), None)
    if procs is None:
        merged = {p.pid: p for m in mig for p in m.processes}
        return tuple(merged.values()), (None if not mig else False)
    sm = process_utilization(lib, gpu) if procs else None
    last = gpu.cache.get("processes_last")
    memo = gpu.cache.get("processes_memo")
    if memo is not None and memo[0] is procs and memo[1] == sm and memo[2] is last:
        return last, False  # the same rows and samples as last tick: last tick's tuple, nothing rebuilt
    result = gpu.cache["processes_last"] = _gpu_processes(last, procs, sm)
    gpu.cache["processes_memo"] = (procs, sm, result)
    return result, False


def process_utilization(lib: binding.NvmlLib, gpu: _Gpu) -> dict[int, float] | None:
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
    query = _list_query(lib, gpu, "list:process_utilization", function, _SAMPLE_LAYOUT, tuple)
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
            gpu.mark_unsupported(key)
            return None
        if exc.value in _DEVICE_CODES:
            raise _GpuDown(f"{function}: {describe(exc)}") from None
        if exc.value in _LIBRARY_CODES:
            raise _LibraryDown(exc) from None
        return None
    except AttributeError:  # a binding without the function
        gpu.mark_unsupported(key)
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


def mig_instances(lib: binding.NvmlLib, gpu: _Gpu, now: float) -> tuple[bool | None, tuple[samples.MigInstance, ...]]:
    """(MIG enabled, instances with memory); the layout is re-read every _MIG_REFRESH seconds."""
    layout = gpu.cache.get("mig")
    if layout is None or now - layout[0] >= _MIG_REFRESH:
        mode = gpu.value("mig_mode", "nvmlDeviceGetMigMode", gpu.handle)
        if mode is None:
            enabled = None if "mig_mode" in gpu.unsupported else (layout[1] if layout else None)
            instances = layout[2] if layout and enabled is not None else []
        else:
            enabled = mode[0] == _MIG_ENABLE
            instances = _mig_layout(gpu) if enabled else []
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
        procs, failed = _process_list(lib, gpu, m.handle, prefix=f"mig:{m.uuid}:")
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


def _mig_layout(gpu: _Gpu) -> list[_Mig]:
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
