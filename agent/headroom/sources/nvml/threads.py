"""The NVML collector's two helper threads, which keep slow or blocking calls off the tick: the PCIe
throughput poller (nvmlDeviceGetPcieThroughput blocks ~20 ms) and the XID event watcher (an NVML event set)."""

from __future__ import annotations

import threading

from headroom.sources.nvml.binding import (
    _ABSENT_CODES,
    _ERR,
    _LIBRARY_CODES,
    NvmlHandle,
    NvmlLib,
    _address,
    _text,
    describe,
    log,
    pynvml,
)

_XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
_PCIE_UTIL_TX, _PCIE_UTIL_RX = 0, 1
_EVENT_WAIT_MS = 500


class _PciePoller(threading.Thread):
    """Reads PCIe TX/RX throughput off the tick: one GPU at a time, each every ``interval`` seconds."""

    def __init__(self, lib: NvmlLib, targets: list[tuple[str, NvmlHandle]], interval: float, stop: threading.Event) -> None:
        super().__init__(name="headroom-nvml-pcie", daemon=True)
        self.lib, self.targets, self.interval, self.stop = lib, targets, interval, stop
        self.values: dict[str, tuple[float | None, float | None]] = {}
        self.unsupported: set[str] = set()
        self.counted: set[str] = set()  # GPUs with cumulative PCIe counters: not polled

    def _read(self, handle: NvmlHandle, counter: int) -> float | None:
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

    def __init__(self, lib: NvmlLib, targets: list[tuple[str, NvmlHandle]], stop: threading.Event, counts: dict[str, dict[int, int]], lock: threading.Lock) -> None:
        super().__init__(name="headroom-nvml-xid", daemon=True)
        self.lib, self.targets, self.stop, self.counts, self.lock = lib, targets, stop, counts, lock
        self.registered: set[str] = set()
        self.ready = threading.Event()

    def run(self) -> None:
        try:
            self._run()
        finally:
            self.ready.set()

    def _register(self) -> tuple[NvmlHandle, dict[int | None, str]] | None:
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

    def _free(self, event_set: NvmlHandle) -> None:
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

    def _uuid_of(self, device: NvmlHandle) -> str | None:
        try:
            uuid = _text(self.lib.nvmlDeviceGetUUID(device))
        except pynvml.NVMLError:
            return None
        return uuid if uuid in self.registered else None


