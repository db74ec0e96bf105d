"""NVML collector: the one choke point for every NVML call (architecture principle 3), one purpose a module:

- ``binding.py``: the ``pynvml`` import (``BINDING_ERROR``), the calls into it (``_Gpu.query``, ``_ListQuery``,
  the field-values call) and the mapping of NVML's errors;
- ``decode.py``: field values, structs and struct arrays decoded into NamedTuples (``DeviceFields`` by field
  id, ``FieldValue``, ``ProcessRow``); no NVML call;
- ``threads.py``: the PCIe throughput poller and the XID event watcher;
- ``processes.py``: a GPU's process lists (with each process's SM utilization) and its MIG instances;
- ``collector.py``: ``NvmlCollector``, which reads each GPU per tick into ``samples.GpuSample``.

This module re-exports what the rest of the agent, the tests and the benchmarks import from
``headroom.sources.nvml``; importing it registers the collector.

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

from headroom.sources.nvml.binding import BINDING_ERROR, MIN_BINDING, describe, library_reason
from headroom.sources.nvml.collector import NvmlCollector
from headroom.sources.nvml.decode import CLOCK_EVENT_REASONS

__all__ = ["BINDING_ERROR", "CLOCK_EVENT_REASONS", "MIN_BINDING", "NvmlCollector", "describe", "library_reason"]
