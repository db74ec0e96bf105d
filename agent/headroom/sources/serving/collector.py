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
"""

from __future__ import annotations

import contextlib
import math
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import structlog

from headroom import __version__
from headroom.safeio import EXCERPT_CHARS, excerpt, shorten_quoted
from headroom.samples import Histogram, ServingEndpoint, ServingSample
from headroom.sources import Collector, SourceContext, register
from headroom.workload import runtimes as runtime_descriptions

log = structlog.get_logger("headroom.serving")

DEFAULT_TIMEOUT = 0.5  # seconds: connect + request + headers + body
DEFAULT_MAX_BODY = 8 * 2**20
DEFAULT_DETECT_INTERVAL = 30.0  # seconds between command-line detection rounds (profiles without endpoint)
MAX_HEADER_BYTES = 64 * 1024
# What one scrape reads of an exposition, whatever the endpoint sends (docs/serving.md, "Bounded"): an answer
# over a cap is refused (``up`` 0, the endpoint reported oversized, the series not read counted in
# headroom_workload_serving_dropped_series_total), as Prometheus' sample_limit refuses a scrape.
MAX_LINES = 65536  # lines of one answer (a real runtime's has a few hundred): checked before it is split
MAX_SERIES = 4096  # runtime sample lines (vllm:, sglang:, tgi_, nv_*, llamacpp:) parsed per scrape
MAX_LINE_CHARS = 16384  # characters of one runtime sample line (vLLM's cache_config_info, the longest, ~1 KB)
MAX_HISTOGRAM_BUCKETS = 64  # distinct bounds of one histogram (vLLM's have 22); more: that histogram is not read
MAX_CPU_SHARE = 0.05  # of one core, an endpoint's worker over time: a scrape that took c CPU seconds waits c / 0.05
THROTTLE_FLOOR = 0.02  # CPU seconds a scrape may take before the next one waits (honest ones take < 2 ms)
OVERSIZED_RETRY = 10.0  # seconds before an endpoint whose answer was refused as oversized is scraped again
MAX_ERROR_CHARS = 240  # an error message kept for the status API and the log (a reason phrase can be 60 KB)

# runtime -> (how people call it, metric name prefixes that identify its exposition): the runtimes' own
# descriptions (workload/runtimes.py), which also say whether each reserves GPU memory up front
RUNTIMES: dict[str, tuple[str, tuple[str, ...]]] = dict(runtime_descriptions.metric_prefixes())
# names a profile's runtime.name may use for each runtime
RUNTIME_ALIASES: dict[str, str] = runtime_descriptions.metrics_aliases()
_PREFIXES = tuple(p for _, prefixes in RUNTIMES.values() for p in prefixes)
# prefix as served -> as the runtime names it (vLLM under Ray Serve LLM: ray_vllm_ -> vllm:): a re-exported family is
# read as the runtime's own, by the same normalizer
_RENAMED: dict[str, str] = runtime_descriptions.renamed_prefixes()


def _own(name: str) -> str:
    """A sample name as its runtime names it (ray_vllm_num_requests_running -> vllm:num_requests_running)."""
    for served, own in _RENAMED.items():
        if name.startswith(served):
            return own + name[len(served):]
    return name
# prometheus-client's process collector (vLLM, SGLang): when the runtime's process started. Read beside the runtime's
# own series so that a restart between two scrapes shows even where no counter went down (analysis/serving.py)
START_TIME = "process_start_time_seconds "


class ScrapeError(Exception):
    """The endpoint could not be read or is not a serving runtime. The message is shown to users as is."""


class ScrapeTimeout(ScrapeError):
    """Connected, but the answer did not come (or was not read) within the scrape's deadline: a runtime that accepts
    connections and answers late (its event loop saturated) is slow, not gone (analysis/serving.py's
    ``serving_unresponsive_seconds``)."""


class Oversized(ScrapeError):
    """The answer is over a cap of what one scrape reads; ``dropped``: the runtime series not read."""

    def __init__(self, message: str, dropped: int) -> None:
        super().__init__(message)
        self.dropped = dropped


# ------------------------------------------------------------------------------------------- HTTP
@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str  # with the query string

    @classmethod
    def parse(cls, url: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ScrapeError(f"not an http(s) URL: {url!r}")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise ScrapeError(f"bad port in {url!r}: {exc}") from None
        path = (parts.path or "/metrics") + (f"?{parts.query}" if parts.query else "")
        return cls(parts.scheme, parts.hostname, port, path)


def http_get(target: Target, timeout: float, max_body: int,
             clock: Callable[[], float] = time.monotonic) -> tuple[int, str, dict[str, str], bytes]:
    """(status, reason, headers lower-cased, body) of one HTTP/1.0 GET, all of it within ``timeout`` seconds.

    HTTP/1.0 with ``Connection: close``: the server ends the body by closing (or gives Content-Length),
    so one socket and one deadline bound every step, whatever the server does between bytes."""
    deadline = clock() + timeout

    def left() -> float:
        remaining = deadline - clock()
        if remaining <= 0:
            raise TimeoutError
        return remaining

    host_header = target.host if ":" not in target.host else f"[{target.host}]"
    request = (f"GET {target.path} HTTP/1.0\r\nHost: {host_header}:{target.port}\r\n"
               f"User-Agent: headroom/{__version__}\r\nAccept: text/plain;version=0.0.4;q=1,*/*;q=0.1\r\n"
               "Accept-Encoding: identity\r\nConnection: close\r\n\r\n").encode("ascii")
    received = 0
    try:
        sock = socket.create_connection((target.host, target.port), timeout=left())
    except TimeoutError:
        raise ScrapeError(f"no connection within {timeout * 1000:.0f} ms") from None
    except OSError as exc:
        raise ScrapeError(f"cannot connect: {exc.strerror or exc}") from None
    try:
        if target.scheme == "https":
            sock.settimeout(left())
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=target.host)
        sock.settimeout(left())
        sock.sendall(request)
        buf = bytearray()
        head_end = -1
        length: int | None = None
        while True:
            sock.settimeout(left())
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
            received += len(chunk)
            if head_end < 0:
                head_end = buf.find(b"\r\n\r\n")
                if head_end < 0:
                    if len(buf) > MAX_HEADER_BYTES:
                        raise ScrapeError(f"response headers longer than {MAX_HEADER_BYTES // 1024} KiB")
                    continue
                status, reason, headers = _head(bytes(buf[:head_end]))
                if "content-length" in headers:
                    try:
                        length = int(headers["content-length"])
                    except ValueError:
                        raise ScrapeError(f"bad Content-Length {excerpt(headers['content-length'])}") from None
                    if length > max_body:
                        raise ScrapeError(f"body of {length} bytes is over the {_size(max_body)} cap "
                                          "(collectors.serving.max_body)")
            body_len = len(buf) - head_end - 4
            if body_len > max_body:
                raise ScrapeError(f"body over the {_size(max_body)} cap (collectors.serving.max_body)")
            if length is not None and body_len >= length:
                break
    except TimeoutError:
        what = "no answer" if received == 0 else f"answer incomplete after {received} bytes"
        raise ScrapeTimeout(f"{what} within {timeout * 1000:.0f} ms (collectors.serving.timeout)") from None
    except ssl.SSLError as exc:
        raise ScrapeError(f"TLS: {exc.reason or exc}") from None
    except OSError as exc:
        raise ScrapeError(f"connection failed: {exc.strerror or exc}") from None
    finally:
        sock.close()
    if head_end < 0:
        raise ScrapeError("connection closed before a complete HTTP response" if buf else
                          "connection closed without an answer")
    body = bytes(buf[head_end + 4:])
    if length is not None:
        body = body[:length]
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _dechunk(body)
    if headers.get("content-encoding", "identity").lower() in ("gzip", "x-gzip"):  # sent despite identity
        body = _gunzip(body, max_body)
    return status, reason, headers, body


def _gunzip(body: bytes, max_body: int) -> bytes:
    import zlib

    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(body, max_body + 1)
    except zlib.error as exc:
        raise ScrapeError(f"gzip body is corrupt: {exc}") from None
    if len(out) > max_body:
        raise ScrapeError(f"body over the {_size(max_body)} cap once decompressed (collectors.serving.max_body)")
    return out


def _head(raw: bytes) -> tuple[int, str, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ScrapeError(f"not an HTTP response: {lines[0][:60]!r}")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), parts[2] if len(parts) > 2 else "", headers


def _dechunk(body: bytes) -> bytes:
    out = bytearray()
    pos = 0
    while True:
        end = body.find(b"\r\n", pos)
        if end < 0:
            raise ScrapeError("chunked body cut short")
        try:
            size = int(body[pos:end].split(b";")[0], 16)
        except ValueError:
            raise ScrapeError("bad chunk size in a chunked body") from None
        if size == 0:
            return bytes(out)
        out += body[end + 2:end + 2 + size]
        pos = end + 2 + size + 2


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n} bytes"


# ------------------------------------------------------------------------------------ exposition
class Metrics:
    """The samples of an exposition, by sample name: ``name -> [(labels, value), ...]``."""

    def __init__(self, samples: Mapping[str, list[tuple[dict[str, str], float]]]) -> None:
        self.samples = samples
        self.oversized: list[str] = []  # histograms not read for their buckets (MAX_HISTOGRAM_BUCKETS)
        self.dropped_buckets = 0  # their bucket lines

    def total(self, *names: str, where: Mapping[str, str] | None = None) -> float | None:
        """The sum over label sets of the first name present (engines, ranks and models add up)."""
        for name in names:
            rows = self._rows(name, where)
            if rows:
                return float(sum(v for _, v in rows))
        return None

    def highest(self, *names: str) -> float | None:
        """The largest value over label sets of the first name present (the fullest engine)."""
        for name in names:
            rows = self._rows(name, None)
            if rows:
                return float(max(v for _, v in rows))
        return None

    def histogram(self, *names: str, scale: float = 1.0) -> Histogram | None:
        """The first histogram family present, label sets merged by bound, bounds and sum times ``scale``."""
        for name in names:
            rows = self.samples.get(f"{name}_bucket")
            if not rows:
                continue
            by_bound: dict[float, float] = {}
            for labels, value in rows:
                try:
                    bound = float(labels.get("le", "nan"))
                except ValueError:
                    continue
                if not math.isnan(bound):
                    by_bound[bound] = by_bound.get(bound, 0.0) + value
            if len(by_bound) > MAX_HISTOGRAM_BUCKETS:  # each sample would keep them all in the window
                self.oversized.append(f"{name}: more than {MAX_HISTOGRAM_BUCKETS} buckets "
                                      "(serving.MAX_HISTOGRAM_BUCKETS), not read")
                self.dropped_buckets += len(rows)
                continue
            if not by_bound or math.inf not in by_bound:
                continue
            bounds = sorted(by_bound)
            total = sum(v for _, v in self.samples.get(f"{name}_sum", ()))
            count = sum(v for _, v in self.samples.get(f"{name}_count", ()))
            return Histogram(bounds=tuple(b * scale if b != math.inf else b for b in bounds),
                             counts=tuple(by_bound[b] for b in bounds), sum=total * scale, count=count)
        return None

    def _rows(self, name: str, where: Mapping[str, str] | None) -> list[tuple[dict[str, str], float]]:
        rows = self.samples.get(name) or []
        if where:
            rows = [(labels, v) for labels, v in rows if all(labels.get(k) == x for k, x in where.items())]
        return [(labels, v) for labels, v in rows if not math.isnan(v)]


SERIES_CACHE_MAX = MAX_SERIES  # distinct series whose parsed name and labels an endpoint remembers


def _runtime_lines(text: str) -> int:
    """Runtime sample lines in ``text``, counted without splitting it (str.count per prefix)."""
    return sum(text.count("\n" + p) for p in _PREFIXES) + text.startswith(_PREFIXES)


def parse(text: str, series: dict[str, tuple[str, str, dict[str, str] | None]] | None = None,
          deadline: float | None = None, clock: Callable[[], float] = time.monotonic
          ) -> tuple[Metrics, dict[str, int], int]:
    """(the samples the normalizers read, samples per runtime prefix, other metric families) of a text exposition.

    Only the lines of families some normalizer reads (``_KEEP``) are parsed: the rest (process_*,
    python_gc_*, http_*, a runtime's other histograms) is most of an exposition. Comments are skipped
    without splitting them (but TYPE lines), other families' samples by their first character (named in a
    second pass only when no TYPE line names them). Each runtime series (the line up to its value) is
    examined the first time it is seen, its labels by prometheus-client's text parser; ``series``
    remembers (runtime prefix, sample name, labels or None when no normalizer reads it) by that key, so
    later scrapes look each line up once and only convert the value (the same float() the parser uses).
    Detection counts every runtime sample line by its prefix.

    Bounded whatever the text (docs/serving.md): over MAX_LINES lines, a runtime line over MAX_LINE_CHARS or
    a runtime sample line past MAX_SERIES is ``Oversized`` (parsing stops there); past ``deadline`` (the
    scrape's, on ``clock``) a ScrapeError."""
    lines_total = text.count("\n") + (not text.endswith("\n"))
    if lines_total > MAX_LINES:
        raise Oversized(f"oversized: {lines_total} lines, more than the {MAX_LINES} read per scrape "
                        "(serving.MAX_LINES); not read", _runtime_lines(text))
    # refused before any is parsed (counted only when there are enough lines: the count costs a pass per prefix)
    runtime_lines = _runtime_lines(text) if lines_total > MAX_SERIES else 0
    if runtime_lines > MAX_SERIES:
        raise _too_many(runtime_lines)
    cache = series if series is not None else {}
    typed, untyped = set(), set()
    by_prefix: dict[str, int] = {}
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    others_unseen = False  # sample lines of other families, named only when no TYPE line names them
    lines = text.split("\n")  # the text format's only line end (splitlines() would split \r, \x1c, \u2028 ... too,
    if "\r" in text:  # into more lines than MAX_LINES counted); a CRLF answer is still read
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    for index, line in enumerate(lines):
        if not line.startswith(_PREFIXES):
            if line.startswith("#"):
                if "TYPE" in line:  # HELP lines and other comments are skipped without splitting them
                    parts = line.split(None, 3)
                    if len(parts) >= 3 and parts[1] == "TYPE" and not parts[2].startswith(_PREFIXES):
                        typed.add(parts[2])
                continue
            if line and (line[0].isalpha() or line[0] in "_:"):
                others_unseen = True  # another family's sample: its name matters only without TYPE lines
                if line.startswith(START_TIME):  # the runtime process's start: a new one is a restart
                    with contextlib.suppress(ValueError, IndexError):
                        samples[START_TIME.rstrip()] = [({}, float(line.split()[1]))]
                continue
        else:  # a runtime's series seen before: one lookup by the line up to its value
            if len(line) > MAX_LINE_CHARS:
                raise _too_long(line, runtime_lines)
            end = line.rfind("}") + 1 if "{" in line else line.find(" ")
            known = cache.get(line[:end]) if end > 0 else None
            if known is not None:
                by_prefix[known[0]] = by_prefix.get(known[0], 0) + 1
                if known[2] is not None:
                    try:
                        value = float(line[end:].split()[0])
                    except (ValueError, IndexError) as exc:
                        raise _invalid(exc) from None
                    samples.setdefault(known[1], []).append((known[2], value))
                continue
        # the general way: the metric name is the first word before any "{"
        name = line.split("{", 1)[0].split(None, 1)[0] if line.strip() else ""
        if not name:
            continue
        if not name.startswith(_PREFIXES):
            untyped.add(name)
            continue
        prefix = next(p for p in _PREFIXES if name.startswith(p))
        by_prefix[prefix] = by_prefix.get(prefix, 0) + 1
        if not line.startswith(_PREFIXES):  # a runtime line the count above missed (leading blanks)
            runtime_lines += 1
            if runtime_lines > MAX_SERIES:
                raise _too_many(runtime_lines + sum(1 for rest in lines[index + 1:] if rest.lstrip().startswith(_PREFIXES)))
            if len(line) > MAX_LINE_CHARS:
                raise _too_long(line, runtime_lines)
        end = line.rfind("}") + 1 if "{" in line else len(name)
        key, rest = line[:end], line[end:].split()
        kept = _own(name) in _KEEP
        if kept and deadline is not None and clock() > deadline:  # the costly step: prometheus-client's parser
            raise ScrapeTimeout("the answer was not parsed by the deadline (collectors.serving.timeout): "
                              f"{index} of {len(lines)} lines read")
        try:
            known = (prefix, *_parse_series(line)) if kept else (prefix, name, None)
            if kept:
                value = float(rest[0])
        except (ValueError, IndexError) as exc:
            raise _invalid(exc) from None
        if line.startswith(_PREFIXES) and end == (line.rfind("}") + 1 if "{" in line else line.find(" ")):
            if len(cache) >= SERIES_CACHE_MAX:  # remembered only under the key the lookup above finds
                cache.clear()
            cache[key] = known
        if kept:
            samples.setdefault(known[1], []).append((known[2], value))
    if not typed and others_unseen:  # no TYPE lines: count the other families by their sample names
        for line in lines:
            if line and not line.startswith(("#", *_PREFIXES)) and (line[0].isalpha() or line[0] in "_:"):
                untyped.add(line.split("{", 1)[0].split(None, 1)[0])
    others = len(typed or untyped)  # families by their TYPE lines; sample names when there are none
    return Metrics(samples), by_prefix, others


def _too_many(series: int) -> Oversized:
    return Oversized(f"oversized: {series} runtime series, more than the {MAX_SERIES} read per scrape "
                     "(serving.MAX_SERIES); not read", series)


def _too_long(line: str, series: int) -> Oversized:
    return Oversized(f"oversized: a runtime sample line of {len(line)} characters, more than {MAX_LINE_CHARS} "
                     "(serving.MAX_LINE_CHARS); not read", series)


def _invalid(exc: Exception) -> ScrapeError:
    message = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
    return ScrapeError(f"not a valid Prometheus text exposition: {message}")


def _parse_series(line: str) -> tuple[str, dict[str, str]]:
    """(sample name, labels) of one sample line, by prometheus-client's text parser."""
    # imported on the first series read: prometheus_client (with its registry and exposition modules, ~0.8 MiB
    # resident) is loaded only by agents that scrape a serving runtime
    from prometheus_client.parser import text_string_to_metric_families

    try:
        for family in text_string_to_metric_families(line + "\n"):
            for s in family.samples:
                return _own(s.name), dict(s.labels)
    except (ValueError, IndexError, KeyError, TypeError) as exc:  # the parser's ways of saying "malformed"
        raise ValueError(str(exc) or type(exc).__name__) from None
    raise ValueError(f"no sample in {line[:80]!r}")


def detect(by_prefix: Mapping[str, int]) -> str | None:
    """The runtime whose metric names the exposition carries (the one with most samples), or None."""
    counts = {name: sum(by_prefix.get(p, 0) for p in prefixes) for name, (_, prefixes) in RUNTIMES.items()}
    best = max(counts, key=counts.__getitem__)
    return best if counts[best] else None


def _vllm(m: Metrics) -> dict[str, Any]:
    capacity = None
    engines: dict[str, float] = {}
    for labels, _ in m.samples.get("vllm:cache_config_info", ()):
        try:
            engines[labels.get("engine", "")] = float(labels["num_gpu_blocks"]) * float(labels["block_size"])
        except (KeyError, ValueError):  # "None" until the engine has profiled its memory
            continue
    if engines:
        capacity = sum(engines.values())
    return dict(
        kv_cache_usage_ratio=m.highest("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        requests_running=m.total("vllm:num_requests_running"),
        requests_waiting=m.total("vllm:num_requests_waiting"),
        # 0.2x (vllm/v1/metrics/loggers.py): reason "capacity" is the scheduler's waiting queue (num_waiting_reqs),
        # "deferred" the requests it skipped for a transient constraint (num_skipped_waiting_reqs: LoRA budget, an
        # async KV transfer, a blocked request); their sum is vllm:num_requests_waiting
        requests_waiting_deferred=m.total("vllm:num_requests_waiting_by_reason", where={"reason": "deferred"}),
        admission_rejections_total=m.total("vllm:admission_rejections_total"),  # by reason: max_num_queued_reqs/_tokens
        request_queue_time=m.histogram("vllm:request_queue_time_seconds"),
        sleep_level=_vllm_sleep_level(m),
        preemptions_total=m.total("vllm:num_preemptions_total"),
        kv_cache_capacity_tokens=capacity,
        prompt_tokens_total=m.total("vllm:prompt_tokens_total"),
        generation_tokens_total=m.total("vllm:generation_tokens_total"),
        time_to_first_token=m.histogram("vllm:time_to_first_token_seconds"),
        inter_token_latency=m.histogram("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    )


def _vllm_sleep_level(m: Metrics) -> int | None:
    """vllm:engine_sleep_state (sleep mode, POST /sleep): 0 while any engine is awake (its awake series 1), else the
    deepest level asleep (weights_offloaded 1: level 1, discard_all 1: level 2); None where it is not exported."""
    rows = m.samples.get("vllm:engine_sleep_state") or []
    state: dict[str, float] = {}
    for labels, value in rows:
        name = labels.get("sleep_state", "")
        if not math.isnan(value):
            state[name] = max(state.get(name, 0.0), value)
    if "awake" not in state:
        return None
    if state["awake"] >= 1:
        return 0
    return 2 if state.get("discard_all", 0.0) >= 1 else 1


def _sglang(m: Metrics) -> dict[str, Any]:
    return dict(
        kv_cache_usage_ratio=m.highest("sglang:token_usage"),
        # 0.3.x (python/sglang/srt/metrics/metrics_collector.py): num_requests_running / num_requests_waiting
        requests_running=m.total("sglang:num_running_reqs", "sglang:num_requests_running"),
        requests_waiting=m.total("sglang:num_queue_reqs", "sglang:num_requests_waiting"),
        preemptions_total=m.total("sglang:num_retracted_requests_total"),
        kv_cache_capacity_tokens=m.total("sglang:max_total_num_tokens"),
        prompt_tokens_total=m.total("sglang:prompt_tokens_total"),
        generation_tokens_total=m.total("sglang:generation_tokens_total"),
        time_to_first_token=m.histogram("sglang:time_to_first_token_seconds"),
        inter_token_latency=m.histogram("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
    )


def _tgi(m: Metrics) -> dict[str, Any]:
    capacity = m.total("tgi_batch_max_total_tokens")
    reserved = m.total("tgi_batch_current_max_tokens")
    return dict(
        kv_cache_usage_ratio=(min(1.0, reserved / capacity) if reserved is not None and capacity else None),
        requests_running=m.total("tgi_batch_current_size"),
        requests_waiting=m.total("tgi_queue_size"),
        kv_cache_capacity_tokens=capacity,
        prompt_tokens_total=m.total("tgi_request_input_length_sum"),
        generation_tokens_total=m.total("tgi_request_generated_tokens_sum"),
        inter_token_latency=m.histogram("tgi_request_mean_time_per_token_duration"),
    )


def _triton(m: Metrics) -> dict[str, Any]:
    kv = "nv_trt_llm_kv_cache_block_metrics"
    used, most = m.total(kv, where={"kv_cache_block_type": "used"}), m.total(kv, where={"kv_cache_block_type": "max"})
    per_block = m.total(kv, where={"kv_cache_block_type": "tokens_per"})
    rq = "nv_trt_llm_request_metrics"
    waiting = m.total(rq, where={"request_type": "waiting"})
    return dict(
        kv_cache_usage_ratio=(used / most if used is not None and most else None),
        requests_running=m.total(rq, where={"request_type": "active"}),
        requests_waiting=waiting if waiting is not None else m.total("nv_inference_pending_request_count"),
        kv_cache_capacity_tokens=(most * per_block if most is not None and per_block else None),
        time_to_first_token=m.histogram("nv_inference_first_response_histogram_ms", scale=1e-3),
    )


def _llamacpp(m: Metrics) -> dict[str, Any]:
    """llama.cpp's llama-server (``--metrics``): slots processing and deferred requests; its KV cache usage
    gauge only in the releases that export it (llamacpp:kv_cache_usage_ratio, removed in 2025)."""
    return dict(
        kv_cache_usage_ratio=m.highest("llamacpp:kv_cache_usage_ratio"),
        requests_running=m.total("llamacpp:requests_processing"),
        requests_waiting=m.total("llamacpp:requests_deferred"),
        prompt_tokens_total=m.total("llamacpp:prompt_tokens_total"),
        generation_tokens_total=m.total("llamacpp:tokens_predicted_total"),
    )


MAX_MODEL_NAME = 128  # characters of a resident model's name kept (a name is whoever pulled the model's to choose)
MAX_RESIDENT_MODELS = 256  # entries of a status answer's model list read (Ollama loads a few; OLLAMA_MAX_LOADED_MODELS)


def _json(body: bytes, runtime: str) -> Any:
    """A status endpoint's JSON answer, or a one-line ScrapeError naming what is wrong with it."""
    import json

    label = runtime_descriptions.label(runtime)
    try:
        return json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ScrapeError(f"body is not UTF-8 text (byte 0x{body[exc.start]:02x} at offset {exc.start})") from None
    except ValueError as exc:
        raise ScrapeError(f"not the JSON {label}'s status endpoint answers: {str(exc).splitlines()[0][:120]}") from None


def _ollama_ps(doc: Any) -> dict[str, Any]:
    """Ollama's GET /api/ps (api/types.go ProcessResponse): ``{"models": [{"name", "size", "size_vram",
    "expires_at", ...}]}``, the models it holds loaded, each with its bytes in all and in GPU memory (size_vram is
    left out when 0: all on the CPU, ollama#4840). No request counts: Ollama exports none."""
    models = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(models, list):
        raise ScrapeError("not an Ollama /api/ps answer: no \"models\" list; is the endpoint http://HOST:11434/api/ps?")
    if len(models) > MAX_RESIDENT_MODELS:
        raise Oversized(f"oversized: {len(models)} resident models, more than the {MAX_RESIDENT_MODELS} read "
                        "(serving.MAX_RESIDENT_MODELS); not read", 0)
    names, total, vram = [], 0.0, 0.0
    for i, m in enumerate(models):
        size, in_vram = (m.get("size"), m.get("size_vram", 0)) if isinstance(m, dict) else (None, None)
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < 2**63 for v in (size, in_vram)):
            raise ScrapeError(f"not an Ollama /api/ps answer: models[{i}] has no byte counts size and size_vram")
        name = str(m.get("name") or m.get("model") or "?")
        names.append(name if len(name) <= MAX_MODEL_NAME else name[:MAX_MODEL_NAME - 3] + "...")
        total += size
        vram += in_vram
    return dict(resident_models=tuple(names), resident_bytes=total, resident_vram_bytes=vram)


# runtime -> the reader of its JSON status endpoint (RuntimeDescription.status), for runtimes without /metrics
STATUS_READERS: dict[str, Callable[[Any], dict[str, Any]]] = {"ollama": _ollama_ps}

NORMALIZERS: dict[str, Callable[[Metrics], dict[str, Any]]] = {
    "vllm": _vllm, "sglang": _sglang, "tgi": _tgi, "triton": _triton, "llama.cpp": _llamacpp,
}  # fmt: skip


class _Asked(dict):
    """An empty sample table that remembers every name a normalizer asks for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: set[str] = set()

    def get(self, key, default=None):  # type: ignore[override]
        self.asked.add(key)
        return default


def _names_read() -> frozenset[str]:
    """The sample names the normalizers read, found by running them on an empty table."""
    asked: set[str] = set()
    for normalize in NORMALIZERS.values():
        table = _Asked()
        normalize(Metrics(table))
        asked |= table.asked
    samples = set(asked)
    for name in asked:
        if name.endswith("_bucket"):
            samples |= {name[:-7] + "_sum", name[:-7] + "_count"}
    return frozenset(samples)


_KEEP = _names_read()


def read_exposition(body: bytes, content_type: str, declared: str | None,
                    series: dict[str, tuple[str, str, dict[str, str] | None]] | None = None,
                    deadline: float | None = None) -> tuple[str, dict[str, Any]]:
    """(runtime, normalized fields) of a /metrics body; ScrapeError when it is not a serving runtime's (Oversized
    when it is over a cap). A histogram over MAX_HISTOGRAM_BUCKETS is left out: the fields then say so in
    ``oversized`` and count its lines in ``dropped_buckets``."""
    kind = content_type.split(";", 1)[0].strip().lower()
    head = body[:512].lstrip().lower()
    if kind in ("text/html", "application/xhtml+xml") or head.startswith((b"<!doctype html", b"<html")):
        raise ScrapeError(f"answered an HTML page ({kind or 'no Content-Type'}), not a Prometheus exposition; "
                          "is the endpoint the runtime's /metrics?")
    if declared in STATUS_READERS:  # a runtime without /metrics: its JSON status endpoint (Ollama's /api/ps)
        return declared, STATUS_READERS[declared](_json(body, declared))
    if kind in ("application/json",):
        raise ScrapeError("answered JSON, not a Prometheus exposition; is the endpoint the runtime's /metrics? (an "
                          "Ollama /api/ps is read for a profile that declares runtime ollama)")
    if kind == "application/vnd.google.protobuf":
        raise ScrapeError("answered protobuf; headroom reads the text format")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScrapeError(f"body is not UTF-8 text (byte 0x{body[exc.start]:02x} at offset {exc.start})") from None
    metrics, by_prefix, others = parse(text, series, deadline)
    runtime = detect(by_prefix)
    if runtime is None:
        raise ScrapeError(f"not a serving runtime's metrics: {others} metric families, none from "
                          + ", ".join(f"{label} ({'/'.join(p)})" for label, p in RUNTIMES.values()))
    if declared is not None and runtime != declared:
        raise ScrapeError(f"endpoint serves {RUNTIMES[runtime][0]} metrics but the profile declares runtime "
                          f"{declared}")
    fields = NORMALIZERS[runtime](metrics)
    fields["process_start_time_seconds"] = metrics.total(START_TIME.rstrip())
    if metrics.oversized:
        fields.update(oversized="; ".join(metrics.oversized), dropped_buckets=metrics.dropped_buckets)
    return runtime, fields


# ------------------------------------------------------------------------------------- detection
def endpoint_from_argv(argv: list[str]) -> tuple[str, str] | None:
    """(runtime, /metrics URL) of a serving runtime's command line (``--host``/``--port`` and their
    equivalents, else the runtime's defaults); None when it is not one. The one launcher matcher, shared
    with automatic workloads: workload/launchers.py."""
    from headroom.workload.launchers import metrics_endpoint

    return metrics_endpoint(argv)


def discover(procfs: Any, profiles: list[Any]) -> dict[str, str]:
    """Workload name -> /metrics URL, for profiles with a ``match.cmdline`` rule whose match finds a serving
    runtime's process.

    One pass over /proc; the first matching process of a profile wins. Matching is the processes
    collector's (``processes.Matcher``): RE2 over the first CMDLINE_MATCH_BYTES of each command line, and
    the profile's ``user``/``uid`` rules against the real uid in /proc/PID/status, so a process of another
    user never becomes a restricted profile's endpoint and a megabyte-long command line costs what 4 KiB
    does. Only a process that matches has its launcher flags read (the first ``identity.CMDLINE_BYTES``)."""
    import os

    from headroom.sources import procfs as proc
    from headroom.sources.identity import CMDLINE_BYTES
    from headroom.sources.processes import Matcher

    wanted = [p for p in profiles if getattr(p.match, "cmdline", None)]
    found: dict[str, str] = {}
    if not wanted:
        return found
    matcher = Matcher(p.match for p in wanted)
    try:
        pids = sorted(int(e.name) for e in os.scandir(procfs) if e.name.isdigit())
    except OSError:
        return found
    for pid in pids:
        try:
            argv, paths, uid = matcher.read(procfs, pid)
            comm = ""
            if matcher.needs_comm:
                st = proc.read_pid_stat(procfs, pid)
                comm = st.comm if st is not None else ""
            hits = [i for i in matcher.matching(comm, argv, paths, uid) if wanted[i].name not in found]
            if not hits:
                continue
            endpoint = endpoint_from_argv(proc.read_pid_cmdline(procfs, pid, limit=CMDLINE_BYTES) or [])
        except Exception:  # the process is gone, or unreadable: not ours to explain
            continue
        if endpoint is None:
            continue
        for i in sorted(hits):
            found[wanted[i].name] = endpoint[1]
        if len(found) == len(wanted):
            break
    return found


# --------------------------------------------------------------------------------------- workers
class _Endpoint:
    """One workload's endpoint: a worker thread that scrapes when woken, one request at a time."""

    def __init__(self, workload: str, url: str, declared: str | None, timeout: float, max_body: int) -> None:
        self.workload, self.url, self.declared = workload, url, declared
        self.timeout, self.max_body = timeout, max_body
        self.latest = ServingEndpoint(workload, url, up=None, error="no scrape finished yet")
        self._runtime: str | None = None
        self._series: dict[str, tuple[str, str, dict[str, str] | None]] = {}  # series seen (parse())
        self._state: tuple[bool | None, str | None] = (None, None)
        self._dropped_series = self._dropped_buckets = 0  # the drop counters (headroom_workload_serving_dropped_...)
        self._not_before = 0.0  # monotonic time before which no scrape starts (MAX_CPU_SHARE)
        self._cv = threading.Condition()
        self._wanted = False
        self._busy = False
        self._stop = False
        try:
            self._target: Target | None = Target.parse(url)
        except ScrapeError as exc:
            self._target = None
            self.latest = ServingEndpoint(workload, url, up=False, error=one_line(str(exc)))
        self._thread = threading.Thread(target=self._loop, name=f"serving-{workload}", daemon=True)
        self._thread.start()

    def kick(self) -> None:
        """Start a scrape unless one is in flight, or the last one's CPU time asks this endpoint to wait."""
        with self._cv:
            if not self._busy and self._target is not None and time.monotonic() >= self._not_before:
                self._wanted = True
                self._cv.notify()

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()

    def _loop(self) -> None:
        from prometheus_client.parser import text_string_to_metric_families  # noqa: F401 - loaded here, not on
        # the first scrape's CPU time (MAX_CPU_SHARE)

        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._wanted or self._stop)
                if self._stop:
                    return
                self._wanted, self._busy = False, True
            started, cpu = time.monotonic(), time.thread_time()
            try:
                result = self.scrape()
            except Exception as exc:  # a bug must not kill the worker: report it as this endpoint's failure
                result = ServingEndpoint(self.workload, self.url, up=False,
                                         error=one_line(f"{type(exc).__name__}: {exc}"))
            spent = time.thread_time() - cpu
            if spent > THROTTLE_FLOOR:  # an answer that costs CPU is read less often: MAX_CPU_SHARE of a core
                self._not_before = started + spent / MAX_CPU_SHARE
            if result.oversized and not result.up:  # it will not be smaller a tick later
                self._not_before = max(self._not_before, started + OVERSIZED_RETRY)
            self._note(result)
            with self._cv:
                self.latest = result
                self._busy = False
                self._cv.notify_all()  # wakes ServingCollector.wait_idle

    def scrape(self) -> ServingEndpoint:
        """One scrape, HTTP and parsing within the one deadline (``timeout``)."""
        assert self._target is not None
        start = time.monotonic()
        oversized = None
        try:
            status, reason, headers, body = http_get(self._target, self.timeout, self.max_body)
            if status in (401, 403):
                raise ScrapeError(f"HTTP {status} {_reason(reason)}: the endpoint wants credentials; headroom sends "
                                  "none (expose /metrics without auth on a local address)")
            if status != 200:
                raise ScrapeError(f"HTTP {status} {_reason(reason)}".strip())
            runtime, fields = read_exposition(body, headers.get("content-type", ""), self.declared, self._series,
                                              deadline=start + self.timeout)
        except ScrapeError as exc:
            if isinstance(exc, Oversized):
                self._dropped_series += exc.dropped
                oversized = one_line(str(exc))
            return ServingEndpoint(self.workload, self.url, up=False, error=one_line(str(exc)), runtime=self._runtime,
                                   timed_out=isinstance(exc, ScrapeTimeout),
                                   scrape_duration_seconds=time.monotonic() - start, oversized=oversized,
                                   dropped_series_total=self._dropped_series,
                                   dropped_buckets_total=self._dropped_buckets)
        self._dropped_buckets += fields.pop("dropped_buckets", 0)
        return ServingEndpoint(self.workload, self.url, up=True, runtime=runtime,
                               scrape_duration_seconds=time.monotonic() - start,
                               dropped_series_total=self._dropped_series, dropped_buckets_total=self._dropped_buckets,
                               **fields)

    def _note(self, result: ServingEndpoint) -> None:
        """Log changes of state and of runtime, once each (not every tick)."""
        if result.up and result.runtime != self._runtime:
            if self._runtime is not None:
                log.warning("serving_runtime_changed", workload=self.workload, endpoint=self.url,
                            before=self._runtime, after=result.runtime)
            self._runtime = result.runtime
        # one event per kind of failure: byte counts, sizes and quoted values (a reason phrase, a header) in the
        # message do not make a new one
        state = (result.up, None if result.up else re.sub(r"\d+", "N", _QUOTED.sub("Q", result.error or "")))
        if state == self._state:
            return
        if result.up:
            log.info("serving_endpoint_up", workload=self.workload, endpoint=self.url, runtime=result.runtime)
        else:
            log.warning("serving_endpoint_down", workload=self.workload, endpoint=self.url, error=result.error)
        self._state = state


_QUOTED = re.compile(r"""'(?:[^'\\\n]|\\.)*'(?:\.\.\. \(\d+ characters\))?|"(?:[^"\\\n]|\\.)*"(?:\.\.\. \(\d+ characters\))?""")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _reason(reason: str) -> str:
    """An HTTP reason phrase for a message: as sent when it is a short printable one (every standard one is),
    else a quoted excerpt (safeio.excerpt): an endpoint's 60 KB reason phrase is not repeated."""
    if len(reason) <= EXCERPT_CHARS and reason.isprintable():
        return reason
    return excerpt(reason)


def one_line(message: str) -> str:
    """An error message as the status API and the log keep it: one line, quoted values cut to excerpts
    (safeio.shorten_quoted), at most MAX_ERROR_CHARS."""
    message = shorten_quoted(_CONTROL.sub(" ", message))
    return message if len(message) <= MAX_ERROR_CHARS else message[:MAX_ERROR_CHARS - 25] + f"... ({len(message)} characters)"


def _same_url(url: str) -> str:
    """A /metrics URL as compared with another (``localhost`` is 127.0.0.1, the path defaults to /metrics)."""
    try:
        t = Target.parse(url)
    except ScrapeError:
        return url
    host = "127.0.0.1" if t.host in ("localhost", "0.0.0.0") else t.host
    return f"{t.scheme}://{host}:{t.port}{t.path}"


def declared_runtime(profile: Any) -> str | None:
    """The runtime a profile declares, when it is one this collector reads (else detection decides)."""
    name = getattr(getattr(profile, "runtime", None), "name", None)
    return RUNTIME_ALIASES.get(name) if name else None


@register
class ServingCollector(Collector):
    name = "serving"
    default_enabled = True
    description = "serving runtimes' /metrics (vLLM, SGLang, TGI, Triton, llama.cpp) of workloads with an endpoint, and of automatic servers"

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        self._timeout = float(ctx.settings.get("timeout") or DEFAULT_TIMEOUT)
        self._max_body = int(ctx.settings.get("max_body") or DEFAULT_MAX_BODY)
        self._detect_every = float(ctx.settings.get("detect_interval") or DEFAULT_DETECT_INTERVAL)
        self._profiles = list(ctx.workloads)
        self._endpoints: dict[str, _Endpoint] = {
            p.name: self._endpoint(p, p.endpoint) for p in self._profiles if getattr(p, "endpoint", None)}
        # inference profiles without endpoint: found from their process's command line (or, simulated, the
        # stand-in's URL); training kinds serve nothing, so they cost no /proc search
        self._undeclared = [p for p in self._profiles if not getattr(p, "endpoint", None)
                            and getattr(getattr(p, "kind", None), "is_inference", False)]
        self._auto: dict[str, _Endpoint] = {}  # automatic servers (identity collector's launchers), by workload
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._detector: threading.Thread | None = None
        if self._undeclared and ctx.settings.get("detect", True):
            self._detector = threading.Thread(target=self._detect_loop, name="serving-detect", daemon=True)
            self._detector.start()

    def _endpoint(self, profile: Any, url: str) -> _Endpoint:
        return _Endpoint(profile.name, url, declared_runtime(profile), self._timeout, self._max_body)

    def _detect_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.detect()
            except Exception:  # never let detection take the collector down; it retries next round
                log.exception("serving_detection_failed")
            self._stop.wait(self._detect_every)

    def detect(self) -> dict[str, str]:
        """Find the endpoints of profiles without one now; returns workload -> URL found."""
        if self.ctx.scenario is not None:  # simulated: the stand-ins that serve metrics are the runtimes
            standins = getattr(self.ctx.scenario, "serving_endpoints", None)
            found = dict(standins()) if standins is not None else {}
        else:
            found = discover(self.ctx.paths.procfs, self._undeclared)
        with self._lock:
            for p in self._undeclared:
                url = found.get(p.name)
                current = self._endpoints.get(p.name)
                if url is None or (current is not None and current.url == url):
                    continue
                log.info("serving_endpoint_detected", workload=p.name, endpoint=url,
                         before=current.url if current is not None else None)
                self._endpoints[p.name] = self._endpoint(p, url)
                if current is not None:
                    current.stop()
        return {name: url for name, url in found.items() if any(p.name == name for p in self._undeclared)}

    def _auto_endpoints(self) -> list[_Endpoint]:
        """Endpoints of the serving launchers the identity collector found in the previous tick (the URL
        their command line names: workload/launchers.py), for those no declared profile claims. In a
        simulation, a stand-in's command line may name a port it does not serve on: a launcher that is a
        scenario's stand-in is scraped where that stand-in serves (``Scenario.standin_endpoint``; one that serves
        nothing is not scraped), any other where its command line says."""
        previous = self.ctx.previous() if self.ctx.previous is not None else None
        identity = previous.data("identity") if previous is not None else None
        where = getattr(self.ctx.scenario, "standin_endpoint", None) if self.ctx.scenario is not None else None
        wanted: dict[str, tuple[str, str]] = {}
        if identity is not None:
            processes = previous.data("processes")
            declared = {p.name for p in self._profiles}
            named = {_same_url(p.endpoint) for p in self._profiles if getattr(p, "endpoint", None)}
            # the declared entries' processes: the automatic workloads' entries, under their own names, are not
            autos = {g.name for g in getattr(identity, "groups", ())} - declared
            claimed = {pid for w in getattr(processes, "workloads", ()) if w.name not in autos for pid in w.pids}
            for g in getattr(identity, "groups", ()):
                launcher = getattr(g, "launcher", None)
                if (launcher is None or g.name in declared or (g.pids and all(pid in claimed for pid in g.pids))):
                    continue
                url = launcher.metrics_url
                if where is not None and launcher.role == "serving":
                    served = next((u for u in map(where, g.pids) if u is not None), None)
                    url = url if served is None else served
                if url and _same_url(url) not in named:  # a server whose /metrics a profile names is that profile's
                    wanted[g.name] = (url, RUNTIME_ALIASES.get(launcher.runtime, ""))
        for name in [n for n, e in self._auto.items() if wanted.get(n, ("",))[0] != e.url]:
            self._auto.pop(name).stop()  # gone, or now on another port
        for name, (url, runtime) in wanted.items():
            if name not in self._auto:
                self._auto[name] = _Endpoint(name, url, runtime or None, self._timeout, self._max_body)
        return [self._auto[name] for name in sorted(wanted)]

    def collect(self) -> ServingSample:
        out = []
        with self._lock:
            endpoints = [self._endpoints[p.name] for p in self._profiles if p.name in self._endpoints]
            endpoints += self._auto_endpoints()
        for e in endpoints:
            out.append(e.latest)
            e.kick()
        return ServingSample(tuple(out))

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no scrape is wanted or in flight; False at the timeout. A simulation on a manual clock
        calls it between ticks, so every tick hands out the scrape the tick before started."""
        deadline = time.monotonic() + timeout
        with self._lock:
            endpoints = [*self._endpoints.values(), *self._auto.values()]
        for e in endpoints:
            with e._cv:
                if not e._cv.wait_for(lambda e=e: not (e._wanted or e._busy),
                                      timeout=max(0.0, deadline - time.monotonic())):
                    return False
        return True

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            for e in [*self._endpoints.values(), *self._auto.values()]:
                e.stop()
