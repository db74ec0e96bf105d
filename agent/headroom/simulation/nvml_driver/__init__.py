"""A stand-in for the NVIDIA driver's NVML library (libnvidia-ml.so.1), below the real ``pynvml`` binding.

``NvmlDriver`` emulates libnvidia-ml's C entry points: each is a ctypes ``CFUNCTYPE`` callback with the
C signature of nvml.h, written in Python, that fills the caller's C structs through the pointers it is
passed and returns an ``nvmlReturn_t``. ``install()`` hands it to the binding as its loaded library
(``pynvml.nvmlLib``, which the binding otherwise loads with ``CDLL("libnvidia-ml.so.1")`` and resolves
symbols from with getattr), so every GPU path runs the binding's own code: argument marshalling, struct
versions, the two-call size protocol of list queries, and the mapping of return codes to exceptions.
Structs and constants here are written from nvml.h, not borrowed from the binding, so a binding whose
struct disagrees with the C layout reads garbage here as it would on a real host.

Driven by a scenario (``headroom.simulation.scenario``). Tests steer it at runtime:
- ``clock``: seconds since the scenario started (injectable; default wall time since creation);
- ``inject(call, gpu=None, error=..., hang=..., calls=N)`` / ``clear()``: faults of any NVML error
  class, or a hang; ``release()`` ends hung calls. Like the real library, ``nvmlShutdown`` does not
  interrupt a call blocked in another thread (NVML documents no such thing);
- ``inject_xid(gpu, code)``: an XID, delivered (like the driver does) to every event set registered
  for that GPU when it happens;
- ``calls``: (entry point, gpu index or None) -> calls, also under the binding's function name where it
  differs (``nvmlInit`` for ``nvmlInitWithFlags``, ``nvmlDeviceGetCount`` for ``..._v2``);
  ``callers``: entry point -> thread names; ``errors``: exceptions raised inside the stand-in itself.

Only one library can be the binding's at a time (the binding keeps it in a module global): the last
``install()`` wins; the NVML collector installs its scenario's driver when it starts a session.

Its modules import one way: ``nvml_h`` (nvml.h: codes, constants, structs) <- ``core`` (state, steering,
plumbing) <- ``device`` (identity, readings, processes, MIG) <- ``health`` (ECC, remapped rows, field
values, NVLink, GPM, XID events) <- ``driver`` (``NvmlDriver``: the table of entry points). This module
re-exports what the rest of the repository imports as ``headroom.simulation.nvml_driver``.
"""

from headroom.simulation.nvml_driver.driver import NvmlDriver
from headroom.simulation.nvml_driver.nvml_h import ERRORS, error_code

__all__ = ["ERRORS", "NvmlDriver", "error_code"]
