"""The probe's orchestration: steps, stop rules, the result (PROBE_CONTRACT.md, version 1).

``probe(...)`` runs the schedule against one target and returns the result dict; it never raises for what the
endpoint does (refused, hung, 500s, broken streams, HTML: they are error classes of a step), only ProbeError
when there is nothing to probe (the endpoint lists no model). Stop rules, checked in this order:

- Ctrl-C / SIGTERM (the ``stop`` event): the requests in flight are cancelled at once (within
  ``STOP_GRACE_SECONDS``), the step so far is reported, ``stopped: interrupted``, ``partial: true``;
- an abort inside a step: more than ``ABORT_ERROR_RATE`` of its finished requests failed (at least
  ``ABORT_MIN_FINISHED`` finished), or, open loop, more than ``max_in_flight`` requests in flight (a runaway
  queue: the server no longer keeps up with the arrivals): ``stopped: error`` / ``slo``;
- ``--duration``: no request starts after it, and the ones in flight are cancelled at it: ``stopped: duration``;
- after a step: it broke an objective of the SLO or the error budget: ``stopped: slo``;
- the last level ran: ``stopped: max``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from headroom.jsontypes import JsonDoc, JsonValue
from headroom.probe import (
    ABORT_ERROR_RATE,
    ABORT_MIN_FINISHED,
    CPU_SATURATED,
    LAG_SATURATED,
    STOP_GRACE_SECONDS,
)
from headroom.probe.client import (
    ProbeError,
    Prompts,
    Result,
    Target,
    discover,
    new_session,
    prompts_for,
    send,
)
from headroom.probe.load import arrivals, length
from headroom.probe.stats import percentile, summarize

if TYPE_CHECKING:
    import aiohttp

    from headroom.probe.host import HostWatch, NoWatch  # run.py imports host.py only inside probe()

LAG_TICK = 0.05  # seconds of the ticker that measures the event loop's lag


@dataclass
class Plan:
    schedule: str  # "concurrency" | "rate"
    levels: list[float]
    step_seconds: float
    warmup_seconds: float
    duration: float
    input_tokens: int
    output_tokens: int
    input_max: int | None = None
    output_max: int | None = None
    input_distribution: str = "fixed"
    output_distribution: str = "fixed"
    request_timeout: float = 120.0
    max_in_flight: int = 1024
    seed: int = 0
    slo: dict[str, float] = field(default_factory=dict)  # objective -> seconds
    error_budget: float = 0.01

    def load_dict(self) -> JsonDoc:
        return {"input_tokens": {"typical": self.input_tokens, "max": self.input_max,
                                 "distribution": self.input_distribution},
                "output_tokens": {"typical": self.output_tokens, "max": self.output_max,
                                  "distribution": self.output_distribution},
                "levels": list(self.levels), "step_seconds": self.step_seconds, "warmup_seconds": self.warmup_seconds}


class _Step:
    """One level's run: every request sent, the counted ones, the abort reason."""

    def __init__(self, plan: Plan, level: float, index: int) -> None:
        self.plan, self.level, self.index = plan, level, index
        self.sent: list[Result] = []
        self.counted: list[Result] = []
        self.finished = 0
        self.failed = 0
        self.abort: str | None = None  # why the step stopped early
        self.aborted = asyncio.Event()
        self.lags: list[float] = []
        self.own_lags: list[float] = []  # the lags less the thread's wait for a CPU in each
        self.cpu_wait = 0.0  # seconds the loop's thread was runnable without a CPU, over the ticks
        self.first_errors: dict[str, str] = {}

    def done(self, r: Result, counted: bool) -> None:
        if r.cancelled:
            return
        self.finished += 1
        if r.error is not None:
            self.failed += 1
            self.first_errors.setdefault(r.error, r.detail)
        if counted:
            self.counted.append(r)
        if (self.finished >= ABORT_MIN_FINISHED and self.failed / self.finished > ABORT_ERROR_RATE
                and self.abort is None):
            worst = max(self.first_errors, key=lambda k: sum(1 for x in self.sent if x.error == k))
            self.abort = (f"{self.failed} of {self.finished} requests failed ({worst}: "
                          f"{self.first_errors[worst]})")
            self.aborted.set()


def _cpu_wait() -> float | None:
    """Seconds the calling thread has waited for a CPU while runnable (Linux /proc/thread-self/schedstat, its
    second field), None where there is no such file."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


async def _ticker(step: _Step) -> None:
    """The event loop's lag: how late a 50 ms sleep wakes, and how much of that lateness the loop's thread spent
    runnable but without a CPU (the host starving the client) rather than busy with the client's own work
    (the client saturating)."""
    while True:
        t, w = time.monotonic(), _cpu_wait()
        await asyncio.sleep(LAG_TICK)
        lag = max(0.0, time.monotonic() - t - LAG_TICK)
        w2 = _cpu_wait()
        waited = w2 - w if w is not None and w2 is not None else 0.0
        step.lags.append(lag)
        step.own_lags.append(max(0.0, lag - waited))
        step.cpu_wait += waited


class Runner:
    def __init__(self, target: Target, prompts: Prompts, plan: Plan, session: aiohttp.ClientSession, stop: asyncio.Event,
                 deadline: float) -> None:
        self.target, self.prompts, self.plan, self.session = target, prompts, plan, session
        self.stop, self.deadline = stop, deadline

    async def _one(self, step: _Step, rng: random.Random, counted: bool) -> None:
        p = self.plan
        n_in = length(rng, p.input_tokens, p.input_max, p.input_distribution)
        n_out = length(rng, p.output_tokens, p.output_max, p.output_distribution)
        prompt = self.prompts.make(rng, n_in, self.target.api)
        r = Result(time.monotonic(), n_in, n_out)
        step.sent.append(r)
        try:
            got = await send(self.session, self.target, prompt, n_in, n_out, p.request_timeout)
        except asyncio.CancelledError:
            r.cancelled = True
            raise
        r.__dict__.update(got.__dict__)
        step.done(r, counted)

    async def _closed(self, step: _Step, t0: float, warm_end: float, end: float) -> None:
        async def worker(i: int) -> None:
            rng = random.Random(f"{self.plan.seed}/{step.index}/{i}")
            while time.monotonic() < end and step.abort is None:
                await self._one(step, rng, time.monotonic() >= warm_end)

        await asyncio.gather(*(worker(i) for i in range(int(step.level))))

    async def _open(self, step: _Step, t0: float, warm_end: float, end: float) -> None:
        rng = random.Random(f"{self.plan.seed}/{step.index}/arrivals")
        tasks: set[asyncio.Task] = set()
        for at in arrivals(step.level, end - t0, rng):
            delay = t0 + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if step.abort is not None:
                break
            if len(tasks) >= self.plan.max_in_flight:
                step.abort = (f"{len(tasks)} requests in flight at {step.level:g} requests/s (the most allowed, "
                              f"--max-concurrency): the server no longer keeps up")
                step.aborted.set()
                break
            req_rng = random.Random(f"{self.plan.seed}/{step.index}/{at}")
            task = asyncio.create_task(self._one(step, req_rng, t0 + at >= warm_end))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def step(self, level: float, index: int, host: HostWatch | NoWatch) -> tuple[JsonDoc, str | None]:
        """Run one level; returns (the step dict, why the probe stops here or None)."""
        p = self.plan
        step = _Step(p, level, index)
        # the watch first (in process, its first start builds the agent's collectors: seconds on a loaded host),
        # then the step's clock: its time is the load's, not the watcher's start-up
        await asyncio.to_thread(host.begin)
        started_at = time.time()
        t0 = time.monotonic()
        warm_end = t0 + p.warmup_seconds
        end = min(t0 + p.step_seconds, self.deadline)
        cpu0 = time.thread_time()  # the event loop's thread only: the client, not the host watch beside it
        load = asyncio.create_task(self._closed(step, t0, warm_end, end) if p.schedule == "concurrency"
                                   else self._open(step, t0, warm_end, end))
        ticker = asyncio.create_task(_ticker(step))
        waits = [asyncio.create_task(self.stop.wait()), asyncio.create_task(step.aborted.wait())]
        stopped = None
        try:  # requests still in flight at the end of --duration are cancelled there
            await asyncio.wait([load, *waits], timeout=max(0.0, self.deadline - time.monotonic()),
                               return_when=asyncio.FIRST_COMPLETED)
            if not load.done():
                # stopped, aborted, or past the duration and the request timeout: cancel what is in flight
                load.cancel()
                with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                    await asyncio.wait_for(asyncio.gather(load, return_exceptions=True), STOP_GRACE_SECONDS)
                stopped = "interrupted" if self.stop.is_set() else ("duration" if step.abort is None else None)
            elif load.exception() is not None:
                raise load.exception()
        finally:
            for t in (ticker, *waits):
                t.cancel()
        wall = time.monotonic() - t0
        cpu = time.thread_time() - cpu0
        host_doc = await asyncio.to_thread(host.end)
        measured = max(1e-3, min(time.monotonic(), end) - warm_end)
        doc: JsonDoc = {"index": index, "level": level, "started_at": round(started_at, 3),
                               "seconds": round(wall, 3)}
        doc.update(summarize(step.counted, measured, p.slo, p.error_budget))
        if step.abort is not None:
            doc["aborted"] = step.abort
            if "error_rate" not in doc["slo_broken"] and step.failed:
                doc["slo_broken"].append("error_rate")
            if "in flight" in step.abort:
                doc["slo_broken"].append("queue")
            doc["slo_ok"] = False
            stopped = stopped or ("slo" if "in flight" in step.abort else "error")
        lag = percentile(step.lags, 0.95) or 0.0
        own = percentile(step.own_lags, 0.95) or 0.0
        doc["client_cpu_seconds_per_request"] = round(cpu / max(1, len(step.sent)), 6)
        doc["client_cpu_ratio"] = round(cpu / max(wall, 1e-9), 3)
        doc["client_loop_lag_p95"] = round(lag, 4)
        doc["client_cpu_wait_ratio"] = round(step.cpu_wait / max(wall, 1e-9), 3)
        # saturated: its own work kept the loop late (or it used a whole core); starved: the loop was late
        # because the host gave its thread no CPU (the server, other processes): its timings then hold that wait
        doc["client_saturated"] = own > LAG_SATURATED or cpu / max(wall, 1e-9) > CPU_SATURATED
        doc["client_starved"] = lag > LAG_SATURATED and not doc["client_saturated"]
        doc["host"] = host_doc
        if step.first_errors:
            doc["error_examples"] = dict(step.first_errors)
        if stopped is None and not doc["slo_ok"]:
            stopped = "slo"
        return doc, stopped


def _capacity(schedule: str, steps: list[JsonDoc], stopped: str) -> JsonDoc:
    if not steps:
        return {"concurrency": None, "requests_per_second": None, "bound_by": "none", "from_step": None,
                "evidence": "no step ran"}
    broke = next((s for s in steps if not s["slo_ok"]), None)
    good = [s for s in steps if s["slo_ok"] and (broke is None or s["index"] < broke["index"])]
    last = good[-1] if good else None

    def sized(s: JsonDoc | None) -> tuple[JsonValue, JsonValue]:
        if s is None:
            return None, None
        if schedule == "concurrency":
            return s["level"], s["requests_per_second"]
        e2e = (s.get("e2e") or {}).get("p50")  # Little's law: sequences in flight at that rate
        return (round(s["requests_per_second"] * e2e, 1) if e2e else None), s["requests_per_second"]

    concurrency, rps = sized(last)
    if broke is None:
        why = {"max": "the last level ran within the SLO", "duration": "the duration ran out",
               "interrupted": "interrupted", "done": "done"}.get(stopped, stopped)
        return {"concurrency": concurrency, "requests_per_second": rps, "bound_by": "none", "from_step": None,
                "evidence": f"no step broke the SLO ({why}): capacity is at least this"}
    host = broke.get("host") or {}
    bound = host.get("bottleneck")
    evidence = host.get("evidence") or ""
    rose = _rose(last.get("host") if last else None, host)
    if rose is None and steps[0] is not broke:  # already pressed at the last good step: what rose from the lightest
        rose = _rose(steps[0].get("host"), host)
    if rose is not None:  # what got worse with the load, not what was already pressed before it
        bound, evidence = rose, (host.get("evidence_by") or {}).get(rose, "") or evidence
    if broke.get("client_saturated") and bound in (None, "none"):
        bound = "client"
        evidence = (f"the client's event loop lagged {broke['client_loop_lag_p95']:.3f}s (p95) at "
                    f"{broke['client_cpu_ratio']:.0%} of a core")
    broken = ", ".join(broke["slo_broken"])
    level = f"{broke['level']:g} {'concurrent' if schedule == 'concurrency' else 'requests/s'}"
    evidence = f"step {broke['index']} ({level}) broke {broken}" + (f"; {evidence}" if evidence else "")
    return {"concurrency": concurrency, "requests_per_second": rps, "bound_by": bound or "none",
            "from_step": broke["index"], "evidence": evidence}


BIND_RISE = 0.3  # a resource's score (its highest in the step) must rise this much from the last step that held the SLO
# (or, when none rose that much from it, from the first and lightest step: a KV cache already full at the last level
# that still held) ...
BIND_SCORE = 0.5  # ... to at least this at the step that broke it, to be named as what binds


def _rose(before: JsonDoc | None, after: JsonDoc) -> str | None:
    """The resource whose score rose most from the last good step to the breaking one (the one parameter
    changed is the load: what it pressed is what binds), or None when the host gave no scores or none rose
    enough. A resource pressed at every level (a CPU busy with other work) binds nothing the probe changed."""
    a = after.get("scores") or {}
    b = (before or {}).get("scores") or {}
    if not a or before is None:
        return None
    rise = {r: s - b.get(r, 0.0) for r, s in a.items() if r != "none" and s >= BIND_SCORE}
    top = max(rise.items(), key=lambda kv: kv[1], default=None)
    return top[0] if top is not None and top[1] >= BIND_RISE else None


def _progress_line(schedule: str, s: JsonDoc, total: int) -> str:
    unit = "concurrent" if schedule == "concurrency" else "req/s"
    ttft, itl = s["ttft"].get("p95"), s["itl"].get("p95")
    errors = sum(s["errors"].values())
    verdict = "ok" if s["slo_ok"] else "broke " + ",".join(s["slo_broken"])
    text = (f"headroom probe: step {s['index'] + 1}/{total}: {s['level']:g} {unit}: {s['completed']}/"
            f"{s['requests']} requests, ttft p95 {_secs(ttft)}, itl p95 {_secs(itl)}, "
            f"{s['requests_per_second']:g} req/s, {errors} errors: {verdict}")
    if s.get("aborted"):
        text += f" (aborted: {s['aborted']})"
    if s.get("client_saturated"):
        text += " [client saturated]"
    elif s.get("client_starved"):
        text += f" [client starved: waited {s['client_cpu_wait_ratio']:.0%} of the step for a CPU]"
    return text


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f}ms" if v < 1 else f"{v:.2f}s"


async def probe(url: str, plan: Plan, *, workload: str | None = None, model: str | None = None,
                api: str = "completions", host: HostWatch | NoWatch | None = None, estimate: dict | None = None,
                stop: asyncio.Event | None = None, progress: Callable[[str], None] | None = None) -> JsonDoc:
    """Run ``plan`` against ``url``; the result dict (PROBE_CONTRACT.md)."""
    from headroom.probe.host import HostWatch

    stop = stop or asyncio.Event()
    progress = progress or (lambda line: None)
    own_host = host is None  # a watch made here is closed here (its thread and in-process agent stop)
    host = host or HostWatch(workload, None, url=url)
    started = time.time()
    deadline = time.monotonic() + plan.duration
    peak = int(max(plan.levels)) if plan.schedule == "concurrency" else plan.max_in_flight
    result: JsonDoc = {"version": 1, "workload": workload, "url": url, "model": None,
                              "started_at": round(started, 3), "finished_at": None, "schedule": plan.schedule,
                              "api": api, "load": plan.load_dict(),
                              "slo": {**plan.slo, "error_rate": plan.error_budget}, "steps": [], "capacity": None,
                              "estimate": estimate, "stopped": "done", "partial": False, "message": ""}
    try:
        return await _probe(url, plan, result, host, model, api, stop, progress, deadline, peak)
    finally:
        if own_host:
            await asyncio.to_thread(host.close)


async def _probe(url: str, plan: Plan, result: JsonDoc, host: HostWatch | NoWatch, model: str | None, api: str,
                 stop: asyncio.Event, progress: Callable[[str], None], deadline: float, peak: int) -> JsonDoc:
    async with new_session(peak + 4) as session:
        try:
            target = await discover(session, url, model, api)
        except ProbeError as exc:
            result.update(stopped="error", partial=True, message=str(exc), finished_at=round(time.time(), 3),
                          capacity=_capacity(plan.schedule, [], "error"))
            return result
        result["url"], result["model"] = target.url, target.model
        prompts = await prompts_for(session, target)
        result["lengths"] = "exact (text of words counted by the runtime's /tokenize)" if prompts.exact and api == "completions" \
            else "measured from the usage the runtime reports"
        runner = Runner(target, prompts, plan, session, stop, deadline)
        stopped = "max"
        for index, level in enumerate(plan.levels):
            if stop.is_set():
                stopped = "interrupted"
                break
            if time.monotonic() >= deadline:
                stopped = "duration"
                break
            unit = "concurrent requests" if plan.schedule == "concurrency" else "requests/s"
            progress(f"headroom probe: step {index + 1}/{len(plan.levels)}: {level:g} {unit} for "
                     f"{min(plan.step_seconds, deadline - time.monotonic()):.0f}s ...")
            doc, why = await runner.step(level, index, host)
            result["steps"].append(doc)
            progress(_progress_line(plan.schedule, doc, len(plan.levels)))
            if why is not None:
                stopped = why
                break
    result["stopped"] = stopped
    result["partial"] = stopped in ("interrupted", "error", "duration") and (
        stopped != "duration" or bool(result["steps"]))
    result["capacity"] = _capacity(plan.schedule, result["steps"], stopped)
    result["message"] = _message(result)
    result["finished_at"] = round(time.time(), 3)
    return result


def _message(result: JsonDoc) -> str:
    steps = result["steps"]
    stopped = result["stopped"]
    if stopped == "interrupted":
        return f"interrupted after {len(steps)} step(s): a partial result"
    if stopped == "error":
        last = steps[-1] if steps else {}
        return f"stopped at step {last.get('index', 0)}: {last.get('aborted') or 'the endpoint failed'}"
    if stopped == "duration":
        return f"the duration ran out after {len(steps)} step(s)"
    if stopped == "slo":
        last = steps[-1]
        return f"step {last['index']} ({last['level']:g}) broke {', '.join(last['slo_broken'])}"
    return f"all {len(steps)} levels ran"


# Any: probe()'s keyword arguments, of their own types
def execute(url: str, plan: Plan, **kwargs: Any) -> JsonDoc:
    """``probe`` in a fresh event loop, with Ctrl-C and SIGTERM stopping it gracefully (a partial result); a
    second Ctrl-C stops at once."""

    async def main() -> JsonDoc:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        me = asyncio.current_task()

        def on_signal() -> None:
            if stop.is_set() and me is not None:
                me.cancel()
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, on_signal)
        return await probe(url, plan, stop=stop, **kwargs)

    return asyncio.run(main())


def stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
