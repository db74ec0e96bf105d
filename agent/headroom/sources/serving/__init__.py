"""The serving collector: each workload's serving runtime (vLLM, SGLang, TGI, Triton, llama.cpp) read from its /metrics.

NVML cannot see inside a runtime's reservation: vLLM takes ``gpu_memory_utilization`` of the card at
start, so the GPU looks full whether its KV cache is empty or overflowing. The runtime's own metrics say
how full the KV cache is, how many requests run and wait, how often sequences are preempted and how
long the first token and each next token take. This collector reads them for every workload profile
with an ``endpoint:`` and normalizes them into ``samples.ServingEndpoint`` (docs/serving.md lists which
runtime metric feeds which field, per runtime version).

Never on the tick's time: each endpoint has a worker thread of its own. ``collect()`` hands out the
newest finished scrape and wakes the idle workers for the next one, so a tick costs a few dict reads
per endpoint; a slow endpoint holds only its own worker (one request in flight per endpoint), and its
values arrive one tick late. Every scrape is bounded: one deadline for connect, headers, body and parsing
(``collectors.serving.timeout``, default 500 ms), a body cap (``collectors.serving.max_body``,
default 8 MiB), caps on what is parsed (MAX_LINES, MAX_SERIES, MAX_LINE_CHARS, MAX_HISTOGRAM_BUCKETS: over
one, the endpoint is reported oversized and what was not read counted) and a CPU share per endpoint
(MAX_CPU_SHARE): the endpoint is anyone's who runs the process, so it must not cost the agent more than
that. Anything else an endpoint does (refuse, hang, trickle, answer HTML, 401, bytes that are
not UTF-8, metrics of something that is not a serving runtime, switch runtime) becomes ``up`` False
with a one-line reason in the status API and a log event when it changes, never a traceback.

One purpose a module, the layers pointing one way (errors <- http, status; normalize <- exposition <- collector):

- ``errors.py``: ``ScrapeError``, ``ScrapeTimeout``, ``Oversized`` and ``one_line`` (a message as the status API
  and the log keep it);
- ``http.py``: ``Target`` and ``http_get``, one bounded HTTP/1.0 GET;
- ``normalize.py``: ``Metrics`` and the per-runtime normalizers (``NORMALIZERS``), samples -> fields;
- ``status.py``: the readers of JSON status endpoints (``STATUS_READERS``: Ollama's /api/ps);
- ``exposition.py``: ``read_exposition``, ``parse`` (bounded by the caps) and ``detect`` (``RUNTIMES``);
- ``discovery.py``: ``discover`` and ``endpoint_from_argv``, the endpoints of profiles without ``endpoint:``;
- ``collector.py``: ``ServingCollector`` and its endpoint workers (``_Endpoint``).

This module re-exports what the rest of the agent, the tests and the benchmarks import from
``headroom.sources.serving``; importing it registers the collector.
"""

from __future__ import annotations

from headroom.sources.serving.collector import ServingCollector
from headroom.sources.serving.discovery import discover, endpoint_from_argv
from headroom.sources.serving.errors import MAX_ERROR_CHARS, Oversized, ScrapeError, ScrapeTimeout
from headroom.sources.serving.exposition import MAX_LINE_CHARS, MAX_LINES, MAX_SERIES, read_exposition
from headroom.sources.serving.normalize import MAX_HISTOGRAM_BUCKETS
from headroom.sources.serving.status import MAX_RESIDENT_MODELS

__all__ = ["MAX_ERROR_CHARS", "MAX_HISTOGRAM_BUCKETS", "MAX_LINES", "MAX_LINE_CHARS", "MAX_RESIDENT_MODELS",
           "MAX_SERIES", "Oversized", "ScrapeError", "ScrapeTimeout", "ServingCollector", "discover",
           "endpoint_from_argv", "read_exposition"]
