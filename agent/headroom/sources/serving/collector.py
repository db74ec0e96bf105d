"""The serving collector: ``ServingCollector`` and the endpoint workers (``_Endpoint``: one thread per endpoint,
one scrape in flight, each scrape's CPU time held to MAX_CPU_SHARE), the declared, detected and automatic endpoints,
and the log events of each endpoint's changes of state."""

from __future__ import annotations

import re
import threading
import time
from typing import TYPE_CHECKING

import structlog

from headroom.samples import ServingEndpoint, ServingSample
from headroom.sources import Collector, SourceContext, register
from headroom.sources.serving.discovery import discover
from headroom.sources.serving.errors import _QUOTED, Oversized, ScrapeError, ScrapeTimeout, _reason, one_line
from headroom.sources.serving.exposition import RUNTIME_ALIASES, read_exposition
from headroom.sources.serving.http import DEFAULT_MAX_BODY, DEFAULT_TIMEOUT, Target, http_get

if TYPE_CHECKING:
    from collections.abc import Callable

    from headroom.workload.profiles.types import WorkloadProfile

log = structlog.get_logger("headroom.serving")

DEFAULT_DETECT_INTERVAL = 30.0  # seconds between command-line detection rounds (profiles without endpoint)
MAX_CPU_SHARE = 0.05  # of one core, an endpoint's worker over time: a scrape that took c CPU seconds waits c / 0.05
THROTTLE_FLOOR = 0.02  # CPU seconds a scrape may take before the next one waits (honest ones take < 2 ms)
OVERSIZED_RETRY = 10.0  # seconds before an endpoint whose answer was refused as oversized is scraped again


class _Endpoint:
    """One workload's endpoint: a worker thread that scrapes when woken, one request at a time."""

    def __init__(self, workload: str, url: str, declared: str | None, timeout: float, max_body: int,
                 clock: Callable[[], float] | None = None) -> None:
        self.workload, self.url, self.declared = workload, url, declared
        # the ticks' clock, which the MAX_CPU_SHARE and OVERSIZED_RETRY waits follow (a simulation's manual clock:
        # a wait in real seconds skipped a varying number of its ticks, so its verdicts depended on the machine)
        self._clock = clock or time.monotonic
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
            if not self._busy and self._target is not None and self._clock() >= self._not_before:
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
            started, cpu = self._clock(), time.thread_time()
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


def _same_url(url: str) -> str:
    """A /metrics URL as compared with another (``localhost`` is 127.0.0.1, the path defaults to /metrics)."""
    try:
        t = Target.parse(url)
    except ScrapeError:
        return url
    host = "127.0.0.1" if t.host in ("localhost", "0.0.0.0") else t.host
    return f"{t.scheme}://{host}:{t.port}{t.path}"


def declared_runtime(profile: WorkloadProfile) -> str | None:
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
            p.name: self._endpoint(p, p.endpoint) for p in self._profiles if p.endpoint}
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

    def _endpoint(self, profile: WorkloadProfile, url: str) -> _Endpoint:
        return _Endpoint(profile.name, url, declared_runtime(profile), self._timeout, self._max_body, self.ctx.monotonic)

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
        previous = self.ctx.previous_tick()  # the identity collector's launchers, the declared pids (PreviousTick)
        identity = previous.identity if previous is not None else None
        if identity is None and previous is not None and self._auto:
            # the identity collector failed or missed the last tick's deadline (a host saturated by the very load
            # being diagnosed): its launchers are unknown, not gone, so their endpoints go on as they are; dropped
            # and made anew, each read "no scrape finished yet" and its verdict's hold started again
            return [self._auto[name] for name in sorted(self._auto)]
        where = getattr(self.ctx.scenario, "standin_endpoint", None) if self.ctx.scenario is not None else None
        wanted: dict[str, tuple[str, str]] = {}
        if identity is not None:
            processes = previous.processes if previous is not None else None
            declared = {p.name for p in self._profiles}
            named = {_same_url(p.endpoint) for p in self._profiles if p.endpoint}
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
                self._auto[name] = _Endpoint(name, url, runtime or None, self._timeout, self._max_body,
                                             self.ctx.monotonic)
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

            def idle(e: _Endpoint = e) -> bool:
                return not (e._wanted or e._busy)

            with e._cv:
                if not e._cv.wait_for(idle, timeout=max(0.0, deadline - time.monotonic())):
                    return False
        return True

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            for e in [*self._endpoints.values(), *self._auto.values()]:
                e.stop()
