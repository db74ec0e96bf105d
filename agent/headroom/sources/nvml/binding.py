"""The calls into the ``pynvml`` binding and their error mapping, in one place (architecture principle 3).

``_Gpu.query`` makes every per-GPU call and maps its errors:

- NOT_SUPPORTED / NO_PERMISSION / FUNCTION_NOT_FOUND / NOT_FOUND / ARGUMENT_VERSION_MISMATCH (and a
  function the binding lacks): the field is None (series absent, never 0) and the query is remembered as
  unsupported on that GPU, re-probed every ``_REPROBE_UNSUPPORTED`` seconds;
- GPU_IS_LOST / GPU_NOT_FOUND / RESET_REQUIRED / UNKNOWN: ``_GpuDown`` (that GPU is down, the others go on);
- UNINITIALIZED / DRIVER_NOT_LOADED / LIB_RM_VERSION_MISMATCH / LIBRARY_NOT_FOUND: ``_LibraryDown`` (NVML is
  down: the collector shuts it down and re-initialises with ``_Backoff``);
- anything else (TIMEOUT, NO_DATA, ...): None this tick, retried next tick.

``_ListQuery`` calls a list entry point (process lists, per-process utilization) into an array kept tick
after tick. The module also says whether the binding is usable at all (``BINDING_ERROR``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from headroom import samples

if TYPE_CHECKING:
    from headroom.sources.nvml.decode import _Layout

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
    import pynvml as pynvml  # re-exported: the package's other modules take it from here
except Exception as exc:  # not installed, or a broken module: this collector fails, the others go on
    pynvml = None
    BINDING_ERROR = BINDING_ERROR or f"cannot import pynvml (install nvidia-ml-py>={MIN_BINDING}): {type(exc).__name__}: {exc}"
if BINDING_ERROR is None and not hasattr(pynvml, "NVMLError"):
    BINDING_ERROR = f"the pynvml module at {getattr(pynvml, '__file__', '?')} is not nvidia-ml-py's binding"


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

_REPROBE_UNSUPPORTED = 600.0  # seconds before an unsupported query is tried again
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
    value = getattr(err, "value", None)  # an NVMLError's return code
    hint = _HINTS.get(value) if isinstance(value, int) else None
    return f"{describe(err)}: {hint}" if hint else describe(err)


# pynvml ships no types, so what it hands back is Any to the type checker; these name which kind of value it is:
NvmlLib = Any  # the pynvml module (the simulation's driver stand-in under it), its functions looked up by name
NvmlHandle = Any  # a handle NVML gave (a device, a MIG device, an event set, a GPM sample): a pynvml ctypes pointer
NvmlValue = Any  # what an NVML call answered or takes: a number, bytes, a pynvml ctypes struct, array or function
# what _fields asks NVML for a GPU: (the wanted (field id, scope id) pairs, the links, the re-probe times of the
# fields left out, their nvmlFieldValue_t array)
FieldsPlan = tuple[tuple[tuple[int, int], ...], tuple[int, ...], tuple[float, ...], NvmlValue]


def _address(handle: NvmlHandle) -> int | None:
    """The pointer value of an NVML handle (to recognise it in event data), or None."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None



def _text(value: NvmlValue) -> str:
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


def _field_array(wanted: Sequence[tuple[int, int]]) -> NvmlValue:
    """A c_nvmlFieldValue_t array for the (field id, scope id) pairs ``wanted``, each set through the plain ctypes
    setter; None where there are none or the binding lacks the struct."""
    if not wanted or not hasattr(pynvml, "c_nvmlFieldValue_t"):
        return None
    array = (pynvml.c_nvmlFieldValue_t * len(wanted))()
    for entry, (fid, scope) in zip(array, wanted, strict=True):
        ctypes.Structure.__setattr__(entry, "fieldId", fid)
        ctypes.Structure.__setattr__(entry, "scopeId", scope)
    return array


def _field_values_into(lib: NvmlLib, handle: NvmlHandle, array: NvmlValue, wanted: Sequence[tuple[int, int]]
                       ) -> NvmlValue:
    """nvmlDeviceGetFieldValues into ``array``: the entry point found through the binding's own lookup
    (its error mapping, FUNCTION_NOT_FOUND included), called with the prepared array; the binding's
    wrapper (a new array, every field id set through its printable struct) where it has no lookup."""
    lookup = getattr(lib, "_nvmlGetFunctionPointer", None)
    if lookup is None or array is None:
        return lib.nvmlDeviceGetFieldValues(handle, list(wanted))
    ret = lookup("nvmlDeviceGetFieldValues")(handle, ctypes.c_int32(len(wanted)), ctypes.byref(array))
    if ret != _SUCCESS:
        raise pynvml.NVMLError(ret)
    return array


_LIST_CAPACITY = 32  # entries in a new list array; it grows to twice what the driver asks for, plus 5


class _ListQuery:
    """One list query (the entry point ``function``) of one handle, into an array of the binding's struct kept
    and reused tick after tick as the field array is: one call while the array is large enough, else a second
    call into twice the size the driver asked for (the binding's two-call protocol with its first call
    skipped; an array the driver filled to its last entry is taken as too small as well).
    The entry point is found through the binding's own lookup (FUNCTION_NOT_FOUND included); the entries are
    decoded in one pass (``decode._Layout``) and through ``convert``, and only when the driver wrote other bytes
    than last time: otherwise the same object as last time is returned."""

    __slots__ = ("lookup", "function", "layout", "convert", "samples_first", "array", "capacity", "count",
                 "count_ref", "raw", "converted")

    def __init__(self, lookup: Callable[[str], NvmlValue], function: str, layout: _Layout,
                 convert: Callable[[list[tuple[NvmlValue, ...]]], NvmlValue]) -> None:
        self.lookup, self.function, self.layout, self.convert = lookup, function, layout, convert
        # nvmlDeviceGetProcessUtilization(device, samples, *count, lastSeen) against the process lists'
        # (device, *count, infos)
        self.samples_first = function == "nvmlDeviceGetProcessUtilization"
        self.capacity = 0
        self.array: NvmlValue = None
        self.count = ctypes.c_uint(0)
        self.count_ref = ctypes.byref(self.count)
        self.raw: bytes | None = None
        self.converted: NvmlValue = None
        self.reserve(_LIST_CAPACITY)

    def reserve(self, entries: int) -> None:
        if entries > self.capacity:
            self.capacity = entries
            self.array = (self.layout.ctype * entries)()

    def _invoke(self, fn: NvmlValue, handle: NvmlHandle, tail: tuple[NvmlValue, ...]) -> int:
        self.count.value = self.capacity
        rc: int  # fn: a function of the NVML library (ctypes), untyped
        if self.samples_first:
            rc = fn(handle, self.array, self.count_ref, *tail)
        else:
            rc = fn(handle, self.count_ref, self.array, *tail)
        return rc

    def read(self, handle: NvmlHandle, *tail: NvmlValue) -> tuple[int, NvmlValue]:
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

    def __call__(self, handle: NvmlHandle, *tail: NvmlValue) -> NvmlValue:
        """The converted entries; raises the binding's NVMLError for any other return code (``_Gpu.query``
        maps it as it maps the binding's own calls)."""
        ret, converted = self.read(handle, *tail)
        if ret != _SUCCESS:
            raise pynvml.NVMLError(ret)
        return converted



@dataclass
class _Gpu:
    """One GPU within one NVML session: handle, cached identity and what it does not support."""

    lib: NvmlLib
    index: int
    handle: NvmlHandle = None
    uuid: str = ""
    name: str = ""
    pci_bus_id: str = ""
    minor: int | None = None  # the /dev/nvidiaN number (the NVIDIA DRA driver names GPUs by it)
    memory_total: int | None = None
    up: bool = True
    error: str | None = None
    backoff: _Backoff = field(default_factory=_Backoff)
    unsupported: dict[str, float] = field(default_factory=dict)  # query -> when to try again
    cache: dict[str, NvmlValue] = field(default_factory=dict)
    logged: set[tuple[str, int]] = field(default_factory=set)  # transient errors already logged
    now: float = 0.0
    # the per-tick field read: (wanted (field, scope) pairs, unsupported-set version, links, array for them)
    fields_plan: FieldsPlan | None = None
    published: samples.GpuSample | None = None  # the last full read (for samples.share_unchanged)

    def query(self, key: str, function: str, *args: NvmlValue, remember: bool = True, call: Callable[..., NvmlValue] | None = None) -> NvmlValue:
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
                self.mark_unsupported(key)
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

    def mark_unsupported(self, key: str) -> None:
        """Remember ``key`` as unsupported on this GPU: not asked again for ``_REPROBE_UNSUPPORTED`` seconds."""
        self.unsupported[key] = self.now + _REPROBE_UNSUPPORTED

    def value(self, key: str, function: str, *args: NvmlValue, call: Callable[..., NvmlValue] | None = None) -> NvmlValue:
        """Like query, with "unsupported" folded into None."""
        v = self.query(key, function, *args, call=call)
        return None if v is _ABSENT else v

    def first(self, options: Sequence[tuple[str, str, tuple[NvmlValue, ...]]]) -> NvmlValue:
        """The first option that is supported (fallback chain); None when none is."""
        for key, function, args in options:
            v = self.query(key, function, *args)
            if v is not _ABSENT:
                return v
        return None

    def cached(self, key: str, function: str, *args: NvmlValue, refresh: float | None = None) -> NvmlValue:
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


