"""`headroom fleet-report --prometheus URL [--since 7d]`: a right-sizing report for a fleet, from the Prometheus
HTTP API (instant queries over the period, nothing else: it works against Prometheus, Thanos Query or Mimir).

Three answers:

- **Right-sizing**: per host and workload, the measured peak GPU memory over the period (the largest per-GPU
  peak, and the per-GPU peaks summed, an upper bound of the whole workload's peak) with a safety margin, against
  the GPUs it holds: it fits fewer GPUs of the same kind, and/or a GPU class with less memory. By memory only:
  a job may need its GPUs for compute; the report says what the memory allows.
- **Idle GPUs**: GPUs idle (below the agent's analysis.idle_busy_ratio) more than --idle-threshold of the
  period, with idle hours and cost. Hours and cost split each host's own counters
  (headroom_gpu_idle_seconds_total, headroom_gpu_idle_cost_total) by the GPUs' idle share and price, so they add
  up to what the agents counted.
- **Host-bound hosts**: hosts whose GPUs had a host resource (CPU, host memory, shared memory, disk, network) as
  primary bottleneck more than --host-bound-threshold of the period: better GPUs would not help them.

A bad URL, an unreachable Prometheus or one that answers with an error ends with a one-line message and exit
status 2. So does anything that is not the API's answer (docs/fleet.md): a body that is not JSON or not shaped
as the API's vector result, an answer over ``MAX_RESPONSE_BYTES`` (read in chunks, never past the cap), a
redirect (not followed: the message names its Location) or an answer not complete within ``--timeout``
(connect and every read of one query together). Label values are printed with control characters escaped
(and ``|`` in Markdown tables), so a hostile label cannot write escape sequences to a terminal or break a row.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import socket
import threading
import time
import unicodedata
import urllib.parse
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from headroom.jsontypes import JsonDoc, JsonValue

GIB = 2**30
# memory classes a workload can move to (smallest first): label, usable bytes per GPU
GPU_CLASSES: tuple[tuple[str, int], ...] = (
    ("16 GB (T4, A2)", 15 * GIB), ("24 GB (L4, A10G)", 22 * GIB), ("40 GB (A100 40GB)", 39 * GIB),
    ("48 GB (L40S, RTX 6000 Ada)", 44 * GIB), ("80 GB (A100 80GB, H100)", 79 * GIB), ("94 GB (H100 NVL)", 93 * GIB),
    ("141 GB (H200)", 139 * GIB),
)
HOST_RESOURCES = ("cpu", "host_memory", "shared_memory", "disk_io", "network")
_DURATION = re.compile(r"^[1-9][0-9]*[smhdw]$")
# one query's answer: a fleet's largest (per host, workload and GPU) is a few MB; json.loads takes ~6x its size
MAX_RESPONSE_BYTES = 64 * 2**20
MAX_UNIX_SECONDS = 253402300800  # 10000-01-01T00:00:00Z: --at beyond it is not a time Prometheus parses
MAX_ERROR_CHARS = 200  # of an error text, a Location or a label value quoted in a message


class ReportError(Exception):
    """Why the report could not be made; printed as one line, exit status 2."""


@dataclass(frozen=True)
class RightSizing:
    instance: str
    workload: str
    team: str
    gpu_model: str
    gpus: int
    memory_per_gpu_bytes: int
    peak_per_gpu_bytes: int
    peak_total_bytes: int
    fits_gpus: int | None  # fewer GPUs of the same kind that hold the peak with the margin, None: not fewer
    fits_class: str | None  # a smaller memory class that holds the per-GPU peak with the margin


@dataclass(frozen=True)
class IdleGpu:
    instance: str
    gpu: str
    gpu_model: str
    workload: str
    team: str
    idle_ratio: float
    idle_hours: float
    cost: float | None
    currency: str = ""  # of cost: analysis.currency of the host (label of headroom_gpu_idle_cost_total)


@dataclass(frozen=True)
class HostBound:
    instance: str
    resource: str
    share: float  # of the period, on its most affected GPU
    gpus: int  # GPUs that had it as primary bottleneck at some point


@dataclass
class Report:
    prometheus: str
    since: str
    right_sizing: list[RightSizing] = field(default_factory=list)
    idle: list[IdleGpu] = field(default_factory=list)
    host_bound: list[HostBound] = field(default_factory=list)
    hosts: int = 0
    gpus: int = 0
    at: str | None = None  # --at (RFC 3339, UTC): the end of the period; None: when the report was made


class Prometheus:
    """Instant queries against the HTTP API; every failure becomes a ReportError with the reason."""

    def __init__(self, url: str, timeout: float = 30.0, at: float | None = None) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ReportError(f"--prometheus must be an http(s) URL such as http://prometheus:9090, got {url!r}")
        try:
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError:
            raise ReportError(f"--prometheus has an invalid port: {url!r}") from None
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.at = at  # evaluation instant (Unix seconds) of every query; None: the server's now

    def query(self, expr: str) -> list[JsonDoc]:
        """The instant vector ``expr`` evaluates to, each item checked: {"metric": {str: str}, "value": [t, "v"]}."""
        params = {"query": expr} if self.at is None else {"query": expr, "time": f"{self.at:.3f}"}
        status, location, body = self._get(f"/api/v1/query?{urllib.parse.urlencode(params)}")
        if 300 <= status < 400:
            where = _quote(location) if location is not None else "no Location"
            raise ReportError(f"{self.url} answered HTTP {status} redirecting to {where}: redirects are not followed, "
                              f"give --prometheus the URL it names")
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):  # also an integer over Python's 4300-digit limit
            if status != 200:
                raise ReportError(f"{self.url} answered HTTP {status} to the query API: is it Prometheus?") from None
            raise ReportError(f"{self.url} did not answer with Prometheus API JSON: is it Prometheus?") from None
        if status != 200:
            error = doc.get("error") if isinstance(doc, dict) else None
            reason = _quote(error, quotes=False) if isinstance(error, str) else f"HTTP {status}"
            raise ReportError(f"Prometheus at {self.url} rejected a query ({reason}): {expr}")
        if not isinstance(doc, dict):
            raise ReportError(f"unexpected answer from {self.url}: {_shape(doc)} where the API's object belongs")
        if doc.get("status") != "success":
            error = doc.get("error")
            raise ReportError(f"Prometheus at {self.url} failed a query: "
                              f"{_quote(error, quotes=False) if isinstance(error, str) else _shape(error)}")
        data = doc.get("data")
        if not isinstance(data, dict):
            raise ReportError(f"unexpected answer from {self.url}: data is {_shape(data)}, not an object")
        if data.get("resultType") != "vector":
            kind = data.get("resultType")
            raise ReportError(f"unexpected answer from {self.url}: resultType "
                              f"{_quote(kind) if isinstance(kind, str) else _shape(kind)}")
        result = data.get("result")
        if not isinstance(result, list):
            raise ReportError(f"unexpected answer from {self.url}: result is {_shape(result)}, not a list")
        for n, item in enumerate(result):
            problem = _vector_item_problem(item)
            if problem:
                raise ReportError(f"unexpected answer from {self.url}: result[{n}] {problem}")
        return result

    def _get(self, path: str) -> tuple[int, str | None, bytes]:
        """(status, Location, body) of GET ``path``: connect and every read within ``timeout`` in all (a
        watchdog shuts the socket down at the deadline, so a server trickling bytes cannot stretch it), the body
        read in chunks up to MAX_RESPONSE_BYTES; every failure is a ReportError."""
        import http.client  # here, not at the top: `headroom run` builds this command's parser and never queries

        parts = urllib.parse.urlsplit(self.url)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = cls(parts.hostname, parts.port, timeout=self.timeout)
        expired = threading.Event()
        connected: list[socket.socket] = []  # getresponse() hands the socket to the response and clears conn.sock

        def expire() -> None:
            expired.set()
            for sock in [*connected, conn.sock]:
                if sock is not None:
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        deadline = time.monotonic() + self.timeout
        watchdog = threading.Timer(self.timeout, expire)
        watchdog.daemon = True
        watchdog.start()
        try:
            conn.connect()
            connected.append(conn.sock)
            if expired.is_set():
                raise TimeoutError
            prefix = parts.path.rstrip("/")
            conn.request("GET", prefix + path, headers={"Accept": "application/json"})
            resp = conn.getresponse()
            body = bytearray()
            while chunk := resp.read(min(65536, MAX_RESPONSE_BYTES + 1 - len(body))):
                body += chunk
                if len(body) > MAX_RESPONSE_BYTES:
                    raise ReportError(f"{self.url} answered with more than {MAX_RESPONSE_BYTES} bytes "
                                      f"(MAX_RESPONSE_BYTES): not an answer this report reads")
                if time.monotonic() > deadline:
                    raise TimeoutError
            if expired.is_set():
                raise TimeoutError
            return resp.status, resp.getheader("Location"), bytes(body)
        except ReportError:
            raise
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if expired.is_set() or isinstance(exc, TimeoutError):
                raise ReportError(f"Prometheus at {self.url} did not answer a query within --timeout "
                                  f"{self.timeout:g} s") from None
            reason = (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) or type(exc).__name__
            raise ReportError(f"cannot reach Prometheus at {self.url}: {_quote(reason, quotes=False)}") from None
        finally:
            watchdog.cancel()
            conn.close()


def _shape(value: JsonValue) -> str:
    """What a JSON value is, for a message (never its content)."""
    if value is None:
        return "missing or null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(type(value), "a number")


def _vector_item_problem(item: JsonValue) -> str | None:
    if not isinstance(item, dict):
        return f"is {_shape(item)}, not an object"
    metric, value = item.get("metric"), item.get("value")
    if not isinstance(metric, dict) or not all(isinstance(v, str) for v in metric.values()):
        return "metric is not an object of label values"
    if not isinstance(value, list) or len(value) != 2:
        return "value is not [time, value]"
    number = value[1]
    if isinstance(number, bool) or not isinstance(number, (str, int, float)):
        return f"value is {_shape(number)}, not a number"
    try:
        float(number)
    except (ValueError, OverflowError):
        return f"value {_quote(str(number))} is not a number"
    return None


def _escape(text: str) -> str:
    """``text`` with control and format characters (ESC, CR, LF, NUL, DEL, C1, bidi overrides ...) written as
    \\xNN or \\uNNNN: safe to print to a terminal or into a table cell."""
    return "".join(c if unicodedata.category(c) not in ("Cc", "Cf", "Cs", "Zl", "Zp") else
                   (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}" if ord(c) < 0x10000
                    else f"\\U{ord(c):08x}") for c in text)


def _quote(text: str, quotes: bool = True, limit: int = MAX_ERROR_CHARS) -> str:
    """A value from the server for a one-line message: escaped, at most ``limit`` characters and its length."""
    out = f"'{_escape(text[:limit])}'" if quotes else _escape(text[:limit])
    return out if len(text) <= limit else f"{out}... ({len(text)} characters)"


def _value(r: JsonDoc) -> float:
    return float(r["value"][1])


def _by(results: list[JsonDoc], *labels: str) -> dict[tuple[str, ...], float]:
    out = {}
    for r in results:
        v = _value(r)
        if math.isfinite(v):
            out[tuple(r["metric"].get(label, "") for label in labels)] = v
    return out


def build(prom: Prometheus, since: str, idle_threshold: float, host_bound_threshold: float,
          margin: float) -> Report:
    """Runs the queries and assembles the report."""
    if not _DURATION.match(since):
        raise ReportError(f"--since must be a Prometheus duration such as 7d, 24h or 90m, got {since!r}")
    report = Report(prometheus=prom.url, since=since, at=None if prom.at is None else _rfc3339(prom.at))
    models = _by(prom.query("max by (instance, gpu, name) (headroom_gpu_info)"), "instance", "gpu", "name")
    model_of = {(i, g): n for (i, g, n) in models}
    report.hosts = len({i for i, _ in model_of})
    report.gpus = len(model_of)
    teams = {(i, w): t for (i, w, t) in _by(prom.query("max by (instance, workload, team) (headroom_workload_fleet_info)"),
                                            "instance", "workload", "team")}
    holders: dict[tuple[str, str], list[str]] = defaultdict(list)
    for (i, w, g) in _by(prom.query("max by (instance, workload, gpu) (headroom_workload_gpu_memory_used_bytes)"),
                         "instance", "workload", "gpu"):
        holders[(i, g)].append(w)

    # ---- right-sizing
    peaks = _by(prom.query(f"max by (instance, workload, gpu) "
                           f"(max_over_time(headroom_workload_gpu_memory_used_bytes[{since}]))"),
                "instance", "workload", "gpu")
    capacity = _by(prom.query(f"max by (instance, workload) "
                              f"(max_over_time(headroom_workload_gpu_memory_capacity_bytes[{since}]))"),
                   "instance", "workload")
    per_workload: dict[tuple[str, str], list[tuple[str, float]]] = defaultdict(list)
    for (i, w, g), v in peaks.items():
        per_workload[(i, w)].append((g, v))
    for (i, w), gpus in sorted(per_workload.items()):
        n = len(gpus)
        cap = capacity.get((i, w))
        per_gpu_cap = int(cap / n) if n and cap else 0
        if per_gpu_cap < 1:  # no capacity known (or a nonsensical one from a hostile host): nothing to size
            continue
        peak_gpu = int(max(v for _, v in gpus))
        peak_total = int(sum(v for _, v in gpus))
        need = max(1, math.ceil(peak_total * (1 + margin) / per_gpu_cap))
        fits = need if need < n else None
        smaller = next((label for label, size in GPU_CLASSES
                        if size < per_gpu_cap * 0.95 and peak_gpu * (1 + margin) <= size), None)
        model = model_of.get((i, gpus[0][0]), "")
        report.right_sizing.append(RightSizing(i, w, teams.get((i, w), ""), model, n, per_gpu_cap, peak_gpu,
                                               peak_total, fits, smaller))

    # ---- idle GPUs
    idle = _by(prom.query(f"avg_over_time(headroom_gpu_idle[{since}])"), "instance", "gpu")
    price = _by(prom.query(f"avg_over_time(headroom_gpu_cost_per_hour[{since}])"), "instance", "gpu")
    idle_seconds = _by(prom.query(f"increase(headroom_gpu_idle_seconds_total[{since}])"), "instance")
    idle_cost_results = prom.query(f"increase(headroom_gpu_idle_cost_total[{since}])")
    idle_cost = _by(idle_cost_results, "instance")
    currency = {i: c for (i, c) in _by(idle_cost_results, "instance", "currency")}  # noqa: C416 - its keys, not the dict
    share_sum: dict[str, float] = defaultdict(float)
    priced_sum: dict[str, float] = defaultdict(float)
    for (i, g), r in idle.items():
        share_sum[i] += r
        priced_sum[i] += r * price.get((i, g), 0.0)
    for (i, g), r in sorted(idle.items(), key=lambda kv: (-kv[1], kv[0])):
        if r <= idle_threshold:
            continue
        hours = idle_seconds.get((i,), 0.0) * r / share_sum[i] / 3600 if share_sum[i] else 0.0
        cost = None
        if (i, g) in price and (i,) in idle_cost:
            cost = idle_cost[(i,)] * r * price[(i, g)] / priced_sum[i] if priced_sum[i] else 0.0
        workloads = holders.get((i, g), [])
        report.idle.append(IdleGpu(i, g, model_of.get((i, g), ""), ",".join(sorted(workloads)) or "(none)",
                                   ",".join(sorted({teams.get((i, w), "") for w in workloads} - {""})), r,
                                   round(hours, 3), None if cost is None else round(cost, 2), currency.get(i, "")))

    # ---- host-bound hosts
    bound = _by(prom.query(f'max by (instance, gpu, resource) (avg_over_time(headroom_gpu_bottleneck'
                           f'{{resource=~"{"|".join(HOST_RESOURCES)}"}}[{since}]))'), "instance", "gpu", "resource")
    worst: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (i, _g, res), share in bound.items():
        if share > 0:
            worst[(i, res)].append(share)
    for (i, res), shares in sorted(worst.items(), key=lambda kv: (-max(kv[1]), kv[0])):
        if max(shares) > host_bound_threshold:
            report.host_bound.append(HostBound(i, res, max(shares), len(shares)))
    return report


# ------------------------------------------------------------------------------------------------ output
def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _rows(report: Report) -> dict[str, tuple[list[str], list[list[str]]]]:
    """The three tables, every cell escaped (label values come from the agents' hosts: any string)."""
    tables = _raw_rows(report)
    return {title: (head, [[_escape(c) for c in row] for row in rows]) for title, (head, rows) in tables.items()}


def _raw_rows(report: Report) -> dict[str, tuple[list[str], list[list[str]]]]:
    sizing = [[r.instance, r.workload, r.team or "-", f"{r.gpus} x {r.gpu_model or '?'} ({_gib(r.memory_per_gpu_bytes)})",
               _gib(r.peak_per_gpu_bytes), _gib(r.peak_total_bytes),
               str(r.fits_gpus) if r.fits_gpus else "-", r.fits_class or "-"]
              for r in report.right_sizing if r.fits_gpus or r.fits_class]
    idle = [[r.instance, r.gpu, r.gpu_model, r.workload, r.team or "-", f"{r.idle_ratio * 100:.0f} %",
             f"{r.idle_hours:.2f}", "-" if r.cost is None else f"{r.cost:.2f} {r.currency}".rstrip()]
            for r in report.idle]
    bound = [[r.instance, r.resource, f"{r.share * 100:.0f} %", str(r.gpus)] for r in report.host_bound]
    return {
        "Workloads that fit less GPU": (["host", "workload", "team", "GPUs now", "peak per GPU", "peak, all GPUs",
                                         "fits GPUs", "fits a smaller GPU"], sizing),
        "GPUs idle most of the period": (["host", "GPU", "model", "workload", "team", "idle", "idle hours", "cost"],
                                         idle),
        "Hosts whose bottleneck is the host": (["host", "resource", "share of the period", "GPUs"], bound),
    }


def _until(report: Report) -> str:
    return "" if report.at is None else f" to {report.at}"


def to_json(report: Report) -> str:
    return json.dumps(asdict(report), indent=1) + "\n"


def to_markdown(report: Report) -> str:
    out = [f"# Fleet report: {report.hosts} hosts, {report.gpus} GPUs, last {report.since}{_until(report)}", ""]
    for title, (head, rows) in _rows(report).items():
        out += [f"## {title}", ""]
        if not rows:
            out += ["None.", ""]
            continue
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(cell.replace("|", "\\|").replace("<", "&lt;") for cell in row) + " |"
                for row in rows]
        out.append("")
    totals: dict[str, float] = defaultdict(float)
    for r in report.idle:
        totals[r.currency] += r.cost or 0.0
    spent = ", ".join(f"{v:.2f} {_escape(c)}".rstrip() for c, v in sorted(totals.items())) or "nothing"
    out.append(f"Idle GPUs above the threshold cost {spent} over the period.")
    return "\n".join(out) + "\n"


def to_table(report: Report) -> str:
    out = [f"Fleet report: {report.hosts} hosts, {report.gpus} GPUs, last {report.since}{_until(report)} "
           f"({report.prometheus})", ""]
    for title, (head, rows) in _rows(report).items():
        out.append(f"{title}:")
        if not rows:
            out += ["  none", ""]
            continue
        widths = [max(len(str(c)) for c in col) for col in zip(head, *rows, strict=True)]
        for row in (head, *rows):
            out.append("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        out.append("")
    return "\n".join(out)


def add_parser(sub: Any) -> None:  # Any: argparse's private _SubParsersAction (cli's subparsers)
    p = sub.add_parser("fleet-report", help="right-sizing report for a fleet from Prometheus (idle GPUs, "
                                            "oversized workloads, host-bound hosts)",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--prometheus", required=True, metavar="URL", help="Prometheus (or Thanos/Mimir query) base URL")
    p.add_argument("--since", default="7d", metavar="DURATION", help="period to look back (default 7d)")
    p.add_argument("--format", choices=("table", "json", "markdown"), default="table")
    p.add_argument("--idle-threshold", type=_ratio, default=0.5, metavar="RATIO",
                   help="list GPUs idle more than this share of the period (default 0.5)")
    p.add_argument("--host-bound-threshold", type=_ratio, default=0.25, metavar="RATIO",
                   help="list hosts whose host resource was the GPUs' bottleneck more than this share (default 0.25)")
    p.add_argument("--margin", type=_ratio, default=0.2, metavar="RATIO",
                   help="headroom kept above the measured peak when right-sizing (default 0.2)")
    p.add_argument("--at", type=_instant, metavar="TIME",
                   help="end of the period: RFC 3339 (2026-11-30T00:00:00Z) or Unix seconds (default: now); the "
                        "same instant gives the same report from Prometheus and from a long-term store")
    p.add_argument("--timeout", type=_seconds, default=30.0, metavar="SECONDS",
                   help="for each query, connect and the whole answer (default 30)")


def _ratio(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}") from None
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}")
    return v


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not 0 < v <= 86400:
        raise argparse.ArgumentTypeError(f"expected seconds above 0 and at most 86400, got {text!r}")
    return v


def _instant(text: str) -> float:
    """--at: Unix seconds or an RFC 3339 time with its offset, as the query API's ``time`` parameter takes."""
    import datetime

    try:
        v = float(text)
    except ValueError:
        try:
            when = datetime.datetime.fromisoformat(text)
        except ValueError:
            when = None
        if when is None or when.tzinfo is None:
            raise argparse.ArgumentTypeError(f"expected an RFC 3339 time with its offset (2026-11-30T00:00:00Z) "
                                             f"or Unix seconds, got {text!r}") from None
        v = when.timestamp()
    if not 0 < v < MAX_UNIX_SECONDS:
        raise argparse.ArgumentTypeError(f"expected a time after 1970 and before 10000, got {text!r}")
    return v


def _rfc3339(at: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def run(args: argparse.Namespace) -> tuple[int, str]:
    """(exit status, text); raises ReportError."""
    prom = Prometheus(args.prometheus, args.timeout, args.at)
    report = build(prom, args.since, args.idle_threshold, args.host_bound_threshold, args.margin)
    text = {"json": to_json, "markdown": to_markdown, "table": to_table}[args.format](report)
    return 0, text
