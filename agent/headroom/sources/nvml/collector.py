"""The NVML collector: one NvmlSample per tick, every call through ``binding._Gpu.query`` (its error mapping).

Identity, max clocks, PCIe max link, the supported clock-event mask and the MIG layout are cached;
NVLink link count, state and version are re-read every 30 s, the enforced power limit every 10 s. Per
tick and GPU: one field-values call (health counters, energy, PCIe byte counters, NVLink data counters
per active link) into an array prepared once and decoded in one pass (``decode``), and where the GPU
has GPM one nvmlGpmSampleGet plus one nvmlGpmMetricsGet. The process lists, per-process utilization samples
and MIG instances are read by ``processes``; the PCIe poller and the XID watcher (``threads``) run beside it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import cast

from headroom import samples
from headroom.sources import Collector, CollectorError, SourceContext, register
from headroom.sources.nvml import binding, threads
from headroom.sources.nvml import processes as nvml_processes
from headroom.sources.nvml.binding import (
    _ABSENT,
    _ABSENT_CODES,
    _DEVICE_CODES,
    _LIBRARY_CODES,
    _SUCCESS,
    BINDING_ERROR,
    _Backoff,
    _const,
    _field_array,
    _field_values_into,
    _Gpu,
    _GpuDown,
    _LibraryDown,
    _text,
    describe,
    library_reason,
    log,
    pynvml,
)
from headroom.sources.nvml.decode import (
    _ALL_REASONS,
    _FIELD_DECODER,
    _FIELDS,
    _GPM_METRICS,
    FI_NVLINK_LINK_COUNT,
    FI_NVLINK_RX,
    FI_NVLINK_TX,
    NO_FIELDS,
    DeviceFields,
    _decode_fields,
    _GpmRatios,
    _kib,
    _limit_max,
    _struct_values,
    clock_events,
    device_fields,
)
from headroom.sources.nvml.threads import _PciePoller, _XidWatcher

# GpuSample fields that stay the same from tick to tick on most GPUs most of the time: each one equal to the
# previous tick's keeps that object (samples.share_unchanged), so the window holds it once, not once per sample
_STEADY_FIELDS = (
    "memory_total_bytes", "memory_reserved_bytes", "power_limit_watts", "power_limit_max_watts", "temperature_celsius",
    "memory_temperature_celsius", "sm_clock_hertz", "sm_clock_max_hertz", "memory_clock_hertz",
    "memory_clock_max_hertz", "clock_events_seconds_total", "nvlink_links", "xid_errors_total",
    "temperature_max_operating_celsius", "temperature_slowdown_celsius", "temperature_shutdown_celsius",
    "memory_temperature_max_operating_celsius",
)
# GPM metrics (nvml.h NVML_GPM_METRIC_*, percentages) -> GpuSample field
_GPM_METRICS_GET_VERSION = _GPM_SUPPORT_VERSION = 1



_BINDING_HAS_GPM = hasattr(pynvml, "c_nvmlGpmMetricsGet_t")
_NVLINK_REFRESH = 30.0  # seconds between NVLink link-state re-reads
_PSTATE_UNKNOWN = 32
_CLOCK_SM, _CLOCK_MEM = 1, 2
_TEMPERATURE_GPU = 0
# nvmlTemperatureThresholds_t: shutdown, slowdown, memory max, GPU max (operating)
_THRESHOLDS = (("temperature_shutdown_celsius", 0), ("temperature_slowdown_celsius", 1),
               ("memory_temperature_max_operating_celsius", 2), ("temperature_max_operating_celsius", 3))
_MEMORY_V2 = _const("nvmlMemory_v2", 0x02000028)  # nvmlMemory_v2 (nvml.h NVML_STRUCT_VERSION(Memory, 2))

# seconds between reads of the enforced power limit: it changes only when someone sets it (nvidia-smi -pl,
# a management tool), so it is not read on every tick; a change shows within this time
_LIMIT_REFRESH = 10.0


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
        self.lib: binding.NvmlLib = pynvml
        if ctx.scenario is not None and BINDING_ERROR is None:
            ctx.scenario.nvml_library()
        self._clock: Callable[[], float] = ctx.monotonic or time.monotonic
        self._pcie_interval = float(ctx.settings.get("pcie_poll_interval", 5.0))
        self._session = False
        self._ever_up = False
        self._down_error: str | None = None
        self._init_backoff = _Backoff()
        self._gpus: list[_Gpu] = []
        self._system: dict[str, binding.NvmlValue] = {}
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

    def _system_value(self, convert: Callable[[binding.NvmlValue], binding.NvmlValue], *functions: str) -> binding.NvmlValue:
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

    def _identify(self, gpu: _Gpu, handle: binding.NvmlHandle) -> None:
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
        self._stop_threads(timeout=threads._EVENT_WAIT_MS / 1000 + 0.5)  # the XID watcher's wait, and some
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
        gpu.published = sample = cast(samples.GpuSample, samples.share_unchanged(sample, gpu.published, _STEADY_FIELDS))
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
        mig_enabled, mig = nvml_processes.mig_instances(self.lib, gpu, now)
        processes, processes_stale = nvml_processes.processes(self.lib, gpu, mig)
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
        tx, rx = self._pcie_rates(gpu, now, fields.pcie_tx_bytes, fields.pcie_rx_bytes)
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
            energy_joules_total=fields.energy_millijoules / 1000 if fields.energy_millijoules is not None else None,
            temperature_celsius=float(temperature) if temperature is not None else None,
            # boards without the sensor answer 0 rather than NOT_SUPPORTED: no memory is at 0 degC while powered
            memory_temperature_celsius=float(fields.memory_temperature) if fields.memory_temperature else None,
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
            pcie_tx_bytes_total=fields.pcie_tx_bytes,
            pcie_rx_bytes_total=fields.pcie_rx_bytes,
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
            ecc_uncorrected_volatile_total=fields.ecc_dbe_volatile,
            ecc_uncorrected_aggregate_total=fields.ecc_dbe_aggregate,
            remapped_rows_correctable=fields.remapped_correctable,
            remapped_rows_uncorrectable=fields.remapped_uncorrectable,
            remapped_rows_pending=bool(fields.remapped_pending) if fields.remapped_pending is not None else None,
            remapped_rows_failure=bool(fields.remapped_failure) if fields.remapped_failure is not None else None,
            **thresholds,
        )

    def _fields(self, gpu: _Gpu, links: Sequence[int] = ()) -> tuple[DeviceFields, dict[tuple[int, int], int | None]]:
        """The device fields of _FIELDS by name (None where a field failed) and every value read by (field,
        scope), the NVLink data counters of ``links`` among them, from one nvmlDeviceGetFieldValues call.

        The (field, scope) list and its nvmlFieldValue_t array are built once and reused while the set of
        unsupported fields and active links stays the same: the driver rewrites each entry's return code,
        type and value on every call (nvml.h), so only the call itself happens per tick."""
        plan = gpu.fields_plan
        links = tuple(links)
        if plan is None or plan[1] != links or (plan[2] and any(t <= gpu.now for t in plan[2])):
            plan = gpu.fields_plan = self._fields_plan(gpu, links)
        wanted, _, _, array = plan
        got: dict[tuple[int, int], int | None] = {}
        if not wanted:
            return NO_FIELDS, got
        values = gpu.value("field_values", "nvmlDeviceGetFieldValues", gpu.handle, array, wanted, call=partial(_field_values_into, self.lib))
        if values is not None:
            failed = False
            decoded = _FIELD_DECODER.decode(values, len(wanted)) if values is array else _decode_fields(values)
            for key, (ret, value) in zip(wanted, decoded, strict=False):
                if ret == _SUCCESS:
                    got[key] = value
                elif ret in _ABSENT_CODES:
                    gpu.mark_unsupported(f"field:{key[0]}:{key[1]}")
                    failed = True
                elif ret in _DEVICE_CODES:
                    raise _GpuDown(f"nvmlDeviceGetFieldValues: {describe(pynvml.NVMLError(ret))}")
            if failed:
                gpu.fields_plan = None  # re-plan without the unsupported fields
        return device_fields(got), got

    def _fields_plan(self, gpu: _Gpu, links: tuple[int, ...]) -> binding.FieldsPlan:
        """(wanted pairs, links, re-probe times of the fields left out, their array) for _fields."""
        pairs = [(f, 0) for f in _FIELDS] + [(fid, link) for link in links for fid in (FI_NVLINK_TX, FI_NVLINK_RX)]
        wanted, reprobe = [], []
        for fid, scope in pairs:
            retry_at = gpu.unsupported.get(f"field:{fid}:{scope}")
            if retry_at is None or retry_at <= gpu.now:
                wanted.append((fid, scope))
            else:
                reprobe.append(retry_at)
        return tuple(wanted), links, tuple(reprobe), _field_array(wanted)

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
        return clock_events(supported, current)

    def _nvlink_links(self, gpu: _Gpu, now: float) -> list[int]:
        """The active NVLink links of this GPU; the link count and states are re-read every _NVLINK_REFRESH s."""
        layout = gpu.cache.get("nvlink")
        if layout is not None and now - layout[0] < _NVLINK_REFRESH:
            return cast("list[int]", layout[1])  # gpu.cache holds each query's value untyped
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

    def _fields_only(self, gpu: _Gpu, scoped: Sequence[tuple[int, int]]) -> tuple[None, dict[tuple[int, int], int | None]]:
        """Just the ``scoped`` fields (one nvmlDeviceGetFieldValues call), for reads off the per-tick set."""
        values = gpu.value("field_values_extra", "nvmlDeviceGetFieldValues", gpu.handle, list(scoped))
        got = {}
        for (fid, scope), (ret, value) in zip(scoped, _decode_fields(values or ()), strict=False):
            if ret == _SUCCESS:
                got[(fid, scope)] = value
            elif ret in _ABSENT_CODES:
                gpu.mark_unsupported(f"field:{fid}:{scope}")
        return None, got

    def _gpm(self, gpu: _Gpu) -> _GpmRatios:
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
                gpu.mark_unsupported("gpm_support")
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
        out: dict[str, float] = {}
        for i, (_, name) in enumerate(_GPM_METRICS):
            m = result.metrics[i]
            if int(m.nvmlReturn) == _SUCCESS:
                out[name] = min(1.0, max(0.0, float(m.value) / 100))
        return cast(_GpmRatios, out)  # the keys are _GPM_METRICS' names, _GpmRatios' fields

    def _gpm_free(self, samples_: Sequence[binding.NvmlHandle]) -> None:
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

