"""A /metrics answer read: ``read_exposition`` (which runtime's, then its normalized fields; a JSON status answer
to its reader), ``parse`` (the text exposition, bounded by MAX_LINES, MAX_SERIES, MAX_LINE_CHARS and the scrape's
deadline, only the lines some normalizer reads parsed, by prometheus-client's text parser) and ``detect`` (the
runtime by its metric name prefixes, ``RUNTIMES``; a re-exported family read as the runtime's own)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping

from headroom.samples import ServingFields
from headroom.sources.serving.errors import Oversized, ScrapeError, ScrapeTimeout
from headroom.sources.serving.normalize import _KEEP, NORMALIZERS, Metrics
from headroom.sources.serving.status import STATUS_READERS, _json
from headroom.workload import runtimes as runtime_descriptions

# What one scrape reads of an exposition, whatever the endpoint sends (docs/serving.md, "Bounded"): an answer
# over a cap is refused (``up`` 0, the endpoint reported oversized, the series not read counted in
# headroom_workload_serving_dropped_series_total), as Prometheus' sample_limit refuses a scrape.
MAX_LINES = 65536  # lines of one answer (a real runtime's has a few hundred): checked before it is split
MAX_SERIES = 4096  # runtime sample lines (vllm:, sglang:, tgi_, nv_*, llamacpp:) parsed per scrape
MAX_LINE_CHARS = 16384  # characters of one runtime sample line (vLLM's cache_config_info, the longest, ~1 KB)
MAX_HISTOGRAM_BUCKETS = 64  # distinct bounds of one histogram (vLLM's have 22); more: that histogram is not read


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
        if known[2] is not None:  # kept: its labels were parsed
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


def read_exposition(body: bytes, content_type: str, declared: str | None,
                    series: dict[str, tuple[str, str, dict[str, str] | None]] | None = None,
                    deadline: float | None = None) -> tuple[str, ServingFields]:
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
