"""Serving signals, the ``kv_cache`` rule and headroom in users, from the serving runtime's own metrics.

Pure functions of the window (the serving collector's ``ServingEndpoint`` per tick), the profile and its
memory estimate. docs/analysis.md ("Serving runtimes") explains each rule; docs/serving.md the inputs.

Latency percentiles are read from the runtime's histograms by latency.py (each with the bucket it fell in);
a counter that went down (the runtime restarted) restarts the window at the newest scrape. An objective is
judged from a percentile's bound where its bucket is too coarse for a value: breached only when the bucket lies
above it, met only when it lies at or below it, otherwise undecided ("not measurable from its buckets" when the
objective is inside the first bucket: below the runtime's resolution); there a recent probe's client-side percentile (exact per-request latencies), measured at no
less load than runs now, can show it met (``slo_status``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

from headroom.analysis.latency import Percentile, seconds_text, window_quantiles
from headroom.analysis.thresholds import BUCKET_WIDTH_MAX, DEFAULT_THRESHOLDS
from headroom.analysis.window import recent
from headroom.samples import Sample, ServingEndpoint

if TYPE_CHECKING:
    from headroom.samples import ProbeSample
    from headroom.workload.profiles.types import WorkloadProfile
    from headroom.workload.sizing.types import Estimate

LIMIT_HINTS = {
    "vllm": "max_num_seqs / max_num_batched_tokens",
    "sglang": "max_running_requests / chunked_prefill_size",
    "tgi": "max_batch_total_tokens / max_concurrent_requests",
    "triton": "max_batch_size / the TensorRT-LLM batch scheduler",
}

UP, DOWN, RESTARTING = "up", "down", "restarting"  # a serving endpoint's state (ServingSignals.state)
# counters a runtime restarts from 0 (ServingEndpoint fields): one that went down between two scrapes is a restart
_COUNTERS = (("preemptions_total", "preemptions"), ("prompt_tokens_total", "prompt tokens"),
             ("generation_tokens_total", "generation tokens"), ("admission_rejections_total", "admission rejections"))
# a runtime's process start time (seconds since the epoch, prometheus-client's) moved by more than this: a new process
# (the one process's value is fixed; the slack absorbs its float formatting)
START_TIME_TOLERANCE_SECONDS = 1.0
_HISTOGRAMS = (("time_to_first_token", "first-token latency observations"),
               ("inter_token_latency", "inter-token latency observations"),
               ("request_queue_time", "queue time observations"))
SLEEP_LEVELS = {1: "sleep level 1: its weights offloaded to CPU memory, its KV cache discarded",
                2: "sleep level 2: its weights and KV cache discarded"}  # vLLM's sleep mode (POST /sleep?level=N)


@dataclass(frozen=True)
class Scrape:
    """One answered scrape of the window, as the kv_cache rule judges it: KV usage, queue and preemptions together."""

    usage: float | None = None
    waiting: float | None = None  # all the requests waiting, whatever for
    running: float | None = None
    preemptions_per_minute: float | None = None  # since the scrape before it (None for the first one judged)
    deferred: float | None = None  # of ``waiting``, those deferred by a transient constraint (vLLM 0.2x), not capacity

    @property
    def queued(self) -> float | None:
        """Requests waiting for scheduling capacity (the KV cache, the batch): all waiting but the deferred ones,
        which wait for a LoRA slot, a KV transfer or a blocked request and say nothing of the cache."""
        if self.waiting is None:
            return None
        return max(0.0, self.waiting - (self.deferred or 0.0))


@dataclass(frozen=True)
class ServingSignals:
    workload: str
    endpoint: str
    up: bool | None
    error: str | None = None
    runtime: str | None = None
    oversized: str | None = None  # the newest scrape's answer was over a cap (sources/serving.py): what was not read
    usage: float | None = None  # mean KV cache usage over the window (headroom; the rule judges ``scrapes``)
    running: float | None = None  # mean requests running
    waiting: float | None = None  # mean requests waiting
    preemptions_per_minute: float | None = None
    capacity_tokens: float | None = None  # newest
    ttft: Mapping[float, float] = field(default_factory=dict)  # quantile -> seconds, over the window
    itl: Mapping[float, float] = field(default_factory=dict)
    # "ttft_p95", "itl_p50" ... -> the same percentiles with the bucket each fell in (a bound or a value)
    percentiles: Mapping[str, Percentile] = field(default_factory=dict)
    tokens_per_sequence: float | None = None  # KV tokens held per running sequence (mean)
    idle: bool = False  # up, and nothing ran or waited in any scrape of the window
    samples: int = 0
    # the window's answered scrapes since the runtime last (re)started, oldest first: judged one by one, never
    # as separate means (a window of idle and loaded scrapes has a mean of neither)
    scrapes: tuple[Scrape, ...] = ()
    state: str = UP  # up | down (failing for serving_down_seconds) | restarting (within serving_restart_seconds)
    state_reason: str = ""  # why it is down or restarting, for people; "" when up and nothing to say
    restarted_seconds_ago: float | None = None  # the window's last restart (counters reset, capacity changed ...)
    failed_scrapes: int = 0  # scrapes of the window that failed
    deferred: float | None = None  # mean requests waiting deferred by a transient constraint (vLLM 0.2x), not capacity
    rejections_per_minute: float | None = None  # requests the runtime's queue limit refused (vLLM admission_rejections)
    sleep_level: int | None = None  # newest scrape: 0 awake, 1 or 2 asleep (vLLM sleep mode); None: not exported
    resident_models: tuple[str, ...] = ()  # newest scrape: the models the runtime holds loaded (Ollama /api/ps)
    resident_bytes: float | None = None
    resident_vram_bytes: float | None = None


def _endpoint(sample: Sample, workload: str) -> ServingEndpoint | None:
    endpoints: tuple[ServingEndpoint, ...] = getattr(sample.data("serving"), "endpoints", ()) or ()
    for e in endpoints:
        if e.workload == workload:
            return e
    return None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _restart(before: ServingEndpoint, after: ServingEndpoint) -> str | None:
    """Why two consecutive answered scrapes belong to two runs of the runtime, or None: the same run."""
    if before.runtime != after.runtime:
        return f"its runtime changed from {before.runtime} to {after.runtime}"
    a, b = before.process_start_time_seconds, after.process_start_time_seconds
    if a is not None and b is not None and abs(b - a) > START_TIME_TOLERANCE_SECONDS:
        return f"its process start time moved by {b - a:,.0f} s"
    a, b = before.kv_cache_capacity_tokens, after.kv_cache_capacity_tokens
    if a is not None and b is not None and a != b:
        return f"its KV cache capacity changed from {a:,.0f} to {b:,.0f} tokens"
    for name, label in _COUNTERS:
        a, b = getattr(before, name), getattr(after, name)
        if a is not None and b is not None and b < a:
            return f"its counters went down ({label} {a:,.0f} -> {b:,.0f})"
    for name, label in _HISTOGRAMS:
        h, k = getattr(before, name), getattr(after, name)
        if h is not None and k is not None and k.count < h.count:
            return f"its counters went down ({label} {h.count:,.0f} -> {k.count:,.0f})"
    return None


# how far back (samples) the last answer before the judged span is looked for
ANSWER_LOOKBACK = 600


def _answered_before(window: Sequence[Sample], span: int, workload: str) -> tuple[float, ServingEndpoint] | None:
    """(when, what) of the newest answered scrape of ``workload`` older than the window's newest ``span`` samples."""
    walked = 0
    for sample in reversed(window):
        walked += 1
        if walked <= span:
            continue
        if walked > span + ANSWER_LOOKBACK:
            break
        e = _endpoint(sample, workload)
        if e is not None and e.up:
            return sample.monotonic, e
    return None


def serving_signals(window: Sequence[Sample], seconds: float, workload: str,
                    thresholds: Mapping[str, float] | None = None) -> ServingSignals | None:
    """What the runtime said over the last ``seconds``; None when the workload has no endpoint.

    Only the scrapes since the runtime last (re)started are judged: a counter that went down, a process start time,
    a KV capacity or a runtime that changed between two answered scrapes, or an answer after failed scrapes with
    none before them in the window, starts a new run. Within ``serving_restart_seconds`` of that restart the
    endpoint is ``restarting``; one whose scrapes have failed for ``serving_down_seconds`` since its last answer (or
    with none in the window) is ``down``; a newer failure than that (a scrape that timed out under load) leaves it
    ``up``, judged from its answers (``thresholds``: DEFAULT_THRESHOLDS when None; its latency_bucket_width_max: a percentile in a wider
    bucket is a bound)."""
    if thresholds is None:
        thresholds = DEFAULT_THRESHOLDS
    bucket_width_max = thresholds.get("latency_bucket_width_max", BUCKET_WIDTH_MAX)
    if not window:
        return None
    # only the samples within ``seconds`` of the newest: walked back from it, not filtered out of the whole window
    span = recent(window, seconds)
    timed = [(s.monotonic, e) for s in span if (e := _endpoint(s, workload)) is not None]
    if not timed:
        return None
    now_t, now = timed[-1]
    base = ServingSignals(workload, now.endpoint, now.up, now.error, now.runtime, now.oversized,
                          resident_models=now.resident_models, resident_bytes=now.resident_bytes,
                          resident_vram_bytes=now.resident_vram_bytes)
    judged: list[tuple[float, ServingEndpoint]] = []
    # the last answer before the judged span, where the window holds one: the span's first answer is compared with
    # it, so a span that happens to begin with failed scrapes (the window slid past the answers before them) is no
    # restart when the runtime's counters go on
    before = _answered_before(window, len(span), workload)
    last: ServingEndpoint | None = before[1] if before is not None else None
    failed = failed_since = timeouts_since = 0
    restart_at, why = None, ""
    for t, e in timed:
        if e.up is None:  # no scrape had finished yet: neither an answer nor a failure
            continue
        if not e.up:
            failed += 1
            failed_since += 1
            timeouts_since += e.timed_out
            continue
        reason = _restart(last, e) if last is not None else None
        if reason is None and last is None and failed_since:
            reason = f"it answers again after {failed_since} failed scrapes"
        elif reason is not None and failed_since:
            reason += f", after {failed_since} failed scrapes"
        if reason is not None:
            restart_at, why, judged = t, reason, []
        judged.append((t, e))
        last, failed_since, timeouts_since = e, 0, 0
    ago = None if restart_at is None else now_t - restart_at
    if not now.up and not judged and before is not None and restart_at is None:
        judged = [before]  # failing through the whole span: its last answer is older (judged from it while slow)
    silent = None if now.up or not judged else now_t - judged[-1][0]  # seconds since its last answer, while failing
    # every scrape since its last answer connected and then timed out: a runtime answering late (its event loop
    # saturated by the load), which is down only once that lasts serving_unresponsive_seconds
    slow = failed_since > 0 and timeouts_since == failed_since
    down_after = thresholds["serving_unresponsive_seconds" if slow else "serving_down_seconds"]
    if not now.up and (silent is None or silent >= down_after):
        state, text = DOWN, f"serving endpoint down: {now.error or 'no answer'}"
        if failed > 1:
            text += f" ({failed} of {len(timed)} scrapes of the window failed)"
    elif ago is not None and ago < thresholds["serving_restart_seconds"]:
        state, text = RESTARTING, (f"serving endpoint restarting: {why} {ago:.0f} s ago; what the runtime and the "
                                   "host show now is the restart's own work, not a bottleneck")
    else:
        state = UP
        text = "" if ago is None else f"restarted {ago:.0f} s ago ({why}): judged from the scrapes since"
        if failed:
            text += ("; " if text else "") + f"{failed} of {len(timed)} scrapes of the window failed"
    if silent is not None and state != DOWN:  # failing for less than serving_down_seconds: judged from its answers
        text += f"; its newest scrape failed ({now.error}), {silent:.1f} s after its last answer"
        now = judged[-1][1]
        base = replace(base, up=True, runtime=now.runtime)
    base = replace(base, state=state, state_reason=text.removeprefix("; "), restarted_seconds_ago=ago,
                   failed_scrapes=failed)
    if state == DOWN or not judged:
        return base
    ups = judged
    usage = [e.kv_cache_usage_ratio for _, e in ups if e.kv_cache_usage_ratio is not None]
    running = [e.requests_running for _, e in ups if e.requests_running is not None]
    waiting = [e.requests_waiting for _, e in ups if e.requests_waiting is not None]
    pre = [(t, e.preemptions_total) for t, e in ups if e.preemptions_total is not None]
    ppm = _per_minute(pre)
    rpm = _per_minute([(t, e.admission_rejections_total) for t, e in ups if e.admission_rejections_total is not None])
    deferred = [e.requests_waiting_deferred for _, e in ups if e.requests_waiting_deferred is not None]
    scrapes = []
    previous: tuple[float, ServingEndpoint] | None = None
    for t, e in ups:
        rate = None
        if previous is not None and e.preemptions_total is not None and previous[1].preemptions_total is not None \
                and t > previous[0]:
            rate = max(0.0, e.preemptions_total - previous[1].preemptions_total) / (t - previous[0]) * 60.0
        scrapes.append(Scrape(e.kv_cache_usage_ratio, e.requests_waiting, e.requests_running, rate,
                              e.requests_waiting_deferred))
        previous = (t, e)
    tokens = None
    if now.kv_cache_usage_ratio is not None and now.kv_cache_capacity_tokens and now.requests_running:
        tokens = now.kv_cache_usage_ratio * now.kv_cache_capacity_tokens / now.requests_running
    # idle needs the runtime to say what runs (Triton without TensorRT-LLM reports only pending requests)
    # (requests its queue limit refused are demand too: the runtime was asked for more than it queues)
    idle = bool(running) and not any(running) and not any(waiting) and not rpm
    ttft = window_quantiles([e.time_to_first_token for _, e in ups if e.time_to_first_token is not None], bucket_width_max)
    itl = window_quantiles([e.inter_token_latency for _, e in ups if e.inter_token_latency is not None], bucket_width_max)
    queue = window_quantiles([e.request_queue_time for _, e in ups if e.request_queue_time is not None], bucket_width_max)
    return replace(
        base, usage=_mean(usage), running=_mean(running), waiting=_mean(waiting), preemptions_per_minute=ppm,
        capacity_tokens=now.kv_cache_capacity_tokens,
        ttft={q: p.value for q, p in ttft.items()}, itl={q: p.value for q, p in itl.items()},
        percentiles={f"{metric}_p{q * 100:g}": p for metric, found in (("ttft", ttft), ("itl", itl), ("queue", queue))
                     for q, p in found.items()},
        tokens_per_sequence=tokens, idle=idle, samples=len(ups), scrapes=tuple(scrapes),
        deferred=_mean(deferred), rejections_per_minute=rpm, sleep_level=now.sleep_level,
    )


def _per_minute(points: Sequence[tuple[float, float]]) -> float | None:
    """A counter's rate per minute between the first and the last (time, value) of the window; 0 with one point."""
    if len(points) >= 2 and points[-1][0] > points[0][0]:
        return max(0.0, points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0]) * 60.0
    return 0.0 if len(points) == 1 else None


# ----------------------------------------------------------------------------------------- rule
def _ramp(x: float | None, low: float, high: float) -> float:
    if x is None:
        return 0.0
    if high == low:
        return 1.0 if x >= high else 0.0
    return max(0.0, min(1.0, (x - low) / (high - low)))


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{x * 100:.0f} %"


class Joint(NamedTuple):
    """The window's scrapes judged one by one (``judge``): KV usage, queue and preemptions of the same scrape."""

    score: float  # kv_cache: the share of pressed scrapes, over the window or over its latest ones, the higher
    scrapes: int  # answered scrapes judged (since the runtime last started)
    full: int  # the cache >= kv_usage_high while requests waited or sequences were preempted
    filling: int  # the cache >= kv_usage_low (below kv_usage_high) while requests waited or were preempted
    room: int  # requests waited (>= half serving_waiting_high) while the cache was below kv_usage_low
    idle: int  # nothing running or waiting
    recent: int  # the latest scrapes looked at on their own (kv_recent_scrapes)
    recent_pressed: int  # of them, those in full or filling


def _pressure(x: Scrape, t: Mapping[str, float]) -> float:
    """How hard one scrape's cache is pressed: its fill times its queue or its preemptions since the one before."""
    queue = max(_ramp(x.queued, 0.0, t["serving_waiting_high"]),
                _ramp(x.preemptions_per_minute, 0.0, t["preemptions_per_minute_high"]))
    return _ramp(x.usage, t["kv_usage_low"], t["kv_usage_high"]) * queue


def judge(s: ServingSignals, t: Mapping[str, float]) -> Joint:
    """Each scrape of the window classified, and the kv_cache score from the share of pressed ones: over the whole
    window, or over its latest ``kv_recent_scrapes`` when higher (a cache that just filled scores at once)."""
    xs = s.scrapes
    pressed = [_pressure(x, t) for x in xs]
    recent = max(1, int(t["kv_recent_scrapes"]))
    latest = pressed[-recent:]
    score = max(sum(pressed) / len(pressed), sum(latest) / len(latest)) if pressed else 0.0
    full = sum(1 for x, p in zip(xs, pressed, strict=True) if p > 0 and (x.usage or 0) >= t["kv_usage_high"])
    filling = sum(1 for p in pressed if p > 0) - full
    room = sum(1 for x in xs if (x.queued or 0) >= t["serving_waiting_high"] * 0.5
               and x.usage is not None and x.usage < t["kv_usage_low"])
    idle = sum(1 for x in xs if x.running == 0 and not x.waiting)
    return Joint(score, len(xs), full, filling, room, idle, len(latest), sum(1 for p in latest if p > 0))


def _count(n: float | None) -> str:
    return "?" if n is None else f"{n:.0f}"


def describe(s: ServingSignals) -> str:
    """One line: usage, queue, preemptions now and at their peak in the window (the facts every serving verdict
    quotes; never means that would mix idle and loaded scrapes)."""
    cap = f" of {s.capacity_tokens:,.0f} tokens" if s.capacity_tokens else ""
    ppm = "" if s.preemptions_per_minute is None else f", {s.preemptions_per_minute:.1f} preemptions/min"
    if not s.scrapes:
        return f"KV cache {_pct(s.usage)} used{cap}, {s.waiting or 0:.0f} requests waiting{ppm} ({s.runtime})"
    now = s.scrapes[-1]
    usages = [x.usage for x in s.scrapes if x.usage is not None]
    waits = [x.waiting for x in s.scrapes if x.waiting is not None]
    peak = []  # where the window held more than its newest scrape
    if usages and max(usages) > (now.usage or 0):
        peak.append(f"KV cache {_pct(max(usages))}")
    if waits and max(waits) > (now.waiting or 0):
        peak.append(f"{max(waits):.0f} waiting")
    peaks = f" (peak over the window's {len(s.scrapes)} scrapes: {', '.join(peak)})" if peak else ""
    deferred = (f" ({now.deferred:.0f} of them deferred by a LoRA budget, a KV transfer or a blocked request, not "
                "for capacity)") if now.deferred else ""
    return (f"KV cache {_pct(now.usage)} used{cap}, {_count(now.waiting)} requests waiting{deferred} and "
            f"{_count(now.running)} running in the newest scrape{peaks}{ppm}{_queueing(s)} ({s.runtime})")


def _queueing(s: ServingSignals) -> str:
    """What the runtime says of its queue beyond the gauges: queue time p95, requests its queue limit refused."""
    text = ""
    p = s.percentiles.get("queue_p95")
    if p is not None:
        text += f", queue time p95 {p.text}"
    if s.rejections_per_minute:
        text += f", {s.rejections_per_minute:.1f} requests/min refused by its queue limit (admission rejections)"
    return text


def _scrape_counts(j: Joint, t: Mapping[str, float]) -> str:
    """'in 12 of 15 scrapes the KV cache was >= 95 % full while requests waited ...', with the latest ones, and a
    window that mixes idle and loaded scrapes said to do so."""
    text = (f"in {j.full} of {j.scrapes} scrapes the KV cache was >= {_pct(t['kv_usage_high'])} full while requests "
            "waited or sequences were preempted")
    if j.filling:
        text += f" (in {j.filling} more >= {_pct(t['kv_usage_low'])})"
    if j.recent < j.scrapes:
        text += f", {j.recent_pressed} of the latest {j.recent} scrapes"
    if j.room:
        text += f"; in {j.room} requests waited while the cache had room"
    if j.idle and j.idle < j.scrapes:
        text += (f"; the window mixes {j.idle} idle scrapes (nothing running or waiting) with "
                 f"{j.scrapes - j.idle} loaded ones")
    return text


def _limited(s: ServingSignals, j: Joint, t: Mapping[str, float], gpu_busy: float | None) -> bool:
    """Requests waited while the KV cache had room in the same scrapes (at least serving_scrape_share of them),
    none of the latest ones pressed the cache, and the GPU has room: the runtime's own limits hold them back."""
    return (j.scrapes > 0 and j.room >= t["serving_scrape_share"] * j.scrapes and j.recent_pressed == 0
            and (gpu_busy is None or gpu_busy < t["compute_busy_low"]))


def rule_kv_cache(s: ServingSignals | None, t: Mapping[str, float], gpu_busy: float | None,
                  alternatives: str = "") -> tuple[float, str]:
    """KV memory limits the server: in the same scrapes the KV cache is nearly full while requests wait or
    sequences are preempted."""
    if s is None:
        return 0.0, "no serving endpoint declared (endpoint: in the profile)"
    if s.state != UP:
        return 0.0, s.state_reason
    j = judge(s, t)
    text = f"{describe(s)}; {_scrape_counts(j, t)}"
    if s.state_reason:
        text += f"; {s.state_reason}"
    if _limited(s, j, t, gpu_busy):
        hint = LIMIT_HINTS.get(s.runtime or "", "its batch limits")
        busy = "" if gpu_busy is None else f" and the GPU {_pct(gpu_busy)} busy"
        text += (f"; requests wait while the KV cache has room{busy}: the runtime's own limits "
                 f"({hint}) hold them back")
    elif j.score > 0 and alternatives:
        text += f"; {alternatives}"
    return j.score, text


def runtime_limited(s: ServingSignals | None, t: Mapping[str, float], gpu_busy: float | None) -> str | None:
    """Evidence when requests queue while both the KV cache and the GPU have room (in the same scrapes), else None."""
    if s is None or s.state != UP or not _limited(s, judge(s, t), t, gpu_busy):
        return None
    return rule_kv_cache(s, t, gpu_busy)[1]


def not_judged(s: ServingSignals | None) -> str | None:
    """Evidence for ``none`` while the serving endpoint is down or restarting (no resource is judged: what the host
    shows then is the outage's or the restart's, not the workload's bottleneck), else None."""
    if s is None or s.state == UP:
        return None
    return s.state_reason


def idle_for_demand(s: ServingSignals | None) -> str | None:
    """Evidence for ``none`` when the server had nothing to do, else None."""
    if s is None or not s.up:
        return None
    if s.sleep_level:  # put to sleep: idle on purpose, not broken
        waiting = s.scrapes[-1].waiting if s.scrapes else None
        parked = (f"; {waiting:.0f} requests wait for it to wake (a request that arrives while it sleeps is parked "
                  "in its queue, vllm#45326)") if waiting else ""
        return (f"the engine at {s.endpoint} ({s.runtime}) is asleep ({SLEEP_LEVELS.get(s.sleep_level, 'asleep')}; "
                f"vllm:engine_sleep_state): idle, not broken, until it is woken up (POST /wake_up){parked}")
    if not s.idle:
        return None
    return f"no requests running or waiting at {s.endpoint} ({s.runtime}): idle for lack of demand"


# ------------------------------------------------------------------------------------- headroom
@dataclass(frozen=True)
class ServingHeadroom:
    kv_capacity_runtime_tokens: float | None = None
    kv_capacity_estimate_tokens: int | None = None
    sequences_observed: int | None = None  # more sequences at the observed mean tokens per running sequence
    sequences_max_context: int | None = None  # more sequences at the profile's max context


def serving_headroom(s: ServingSignals | None, profile: WorkloadProfile, estimate: Estimate | None
                     ) -> ServingHeadroom | None:
    if s is None:
        return None
    estimate_tokens = getattr(estimate, "kv_capacity_tokens", None) if estimate is not None else None
    if not s.up or not s.capacity_tokens or s.usage is None:
        return ServingHeadroom(kv_capacity_estimate_tokens=estimate_tokens)
    free = s.capacity_tokens * max(0.0, 1.0 - s.usage)
    observed = int(free // s.tokens_per_sequence) if s.tokens_per_sequence else None
    context = getattr(getattr(profile, "context", None), "max", None)
    at_max = int(free // context) if context else None
    return ServingHeadroom(s.capacity_tokens, estimate_tokens, observed, at_max)


@lru_cache(maxsize=64)
def alternatives(profile: WorkloadProfile, gpu_memory_bytes: int | None, gpus: int | None, measured: float | None) -> str:
    """What the memory model says more KV room would give: higher gpu_memory_utilization, fp8 KV, one more GPU.

    Gains are the model's ratios applied to the measured capacity when the runtime reports one."""
    from headroom.workload.profiles import Precision
    from headroom.workload.sizing import SizingError, estimate

    try:
        base = estimate(profile, gpu_memory_bytes=gpu_memory_bytes, gpus=gpus).kv_capacity_tokens
    except SizingError:
        return ""
    if not base:
        return ""
    variants = []
    rt = profile.runtime
    if rt.is_vllm:
        util = rt.gpu_memory_utilization or 0.9
        if util < 0.95:
            variants.append((f"gpu_memory_utilization {min(0.95, util + 0.05):.2f}",
                             replace(profile, runtime=replace(rt, gpu_memory_utilization=min(0.95, util + 0.05))),
                             gpus))
    if profile.kv_cache_precision not in (Precision.FP8, Precision.INT8, Precision.INT4):
        variants.append(("fp8 KV cache", replace(profile, kv_cache_precision=Precision.FP8), gpus))
    n = gpus or profile.parallel.gpus
    variants.append((f"one more GPU (tensor {profile.parallel.tensor + 1})",
                     replace(profile, parallel=replace(profile.parallel, tensor=profile.parallel.tensor + 1)), n + 1))
    parts = []
    for label, p, g in variants:
        try:
            cap = estimate(p, gpu_memory_bytes=gpu_memory_bytes, gpus=g).kv_capacity_tokens
        except SizingError:
            continue
        if cap is None:
            continue
        ratio = cap / base
        tokens = (measured or base) * ratio
        parts.append(f"{label}: {tokens:,.0f} tokens ({ratio:.2f}x)")
    return ("headroom estimate: " + ", ".join(parts)) if parts else ""


# ------------------------------------------------------------------------------------------ SLOs
JUDGEMENTS = ("met", "breached", "undecided", "not_measurable", "no_data")


@dataclass(frozen=True)
class SloStatus:
    objective: str  # ttft_p95, itl_p99 ...
    target_seconds: float
    observed_seconds: float | None  # the window's percentile; None: no request observed in the window
    met: bool | None  # None: no observation, or the buckets cannot tell (judgement says which)
    # met | breached | undecided (the objective lies inside a coarse bucket the percentile fell in) |
    # not_measurable (inside the runtime's first bucket: below its resolution) | no_data
    judgement: str = "no_data"
    percentile: Percentile | None = None  # the window's percentile with its bucket
    basis: str = "buckets"  # buckets | probe: the last probe's client-side percentile decided
    text: str = ""  # one line: what was judged and why


def _probe_percentile(probe: ProbeSample | None, workload: str, objective: str, running: float | None, now: float | None,
                      recent_seconds: float) -> tuple[float, str] | None:
    """The last probe's client-side percentile for ``objective`` at its capacity step and how it is quoted, when
    the probe is of this workload, complete, younger than ``recent_seconds`` and measured at no less load than
    runs now (its ``concurrency`` at least the requests running); else None."""
    if (probe is None or not getattr(probe, "found", False) or probe.workload != workload or probe.partial
            or now is None or probe.measured_at is None or not 0 <= now - probe.measured_at <= recent_seconds
            or probe.concurrency is None or (running or 0.0) > probe.concurrency):
        return None
    value = (getattr(probe, "latency", None) or {}).get(objective)
    if value is None:
        return None
    return value, (f"the last probe measured the client-side {objective.partition('_')[2]} at "
                   f"{seconds_text(value)} with {probe.concurrency:g} concurrent requests")


def _judge(objective: str, target: float, p: Percentile | None, runtime: str | None) -> tuple[str, str]:
    """(judgement, text) of one objective from the window's percentile and its bucket."""
    q = objective.partition("_")[2]
    goal = f"{objective} {seconds_text(target)}"
    if p is None:
        return "no_data", f"{goal}: no request observed in the window"
    if not p.bounded:
        return ("met" if p.value <= target else "breached"), f"{goal}: {q} {p.text}"
    seen = f"{q} {p.text} ({runtime or 'the runtime'}'s bucket {_bucket_text(p)})"
    if p.lower >= target:  # every observation in (lower, upper] is above the objective
        return "breached", f"{goal}: {seen}"
    if p.upper is not None and p.upper <= target:
        return "met", f"{goal}: {seen}"
    if p.lower <= 0 and p.upper is not None:
        return "not_measurable", (f"{goal}: not measurable from its buckets: the objective is below the runtime's "
                                  f"resolution, its first bucket ends at {seconds_text(p.upper)}, {seen}")
    return "undecided", f"{goal}: undecided from its buckets: the objective lies inside the bucket of the {seen}"


def _bucket_text(p: Percentile) -> str:
    upper = "+Inf" if p.upper is None else seconds_text(p.upper)
    return f"{seconds_text(p.lower) if p.lower > 0 else '0'} to {upper}"


def slo_status(profile: WorkloadProfile, s: ServingSignals | None, probe: ProbeSample | None = None, now: float | None = None,
               recent_seconds: float = 0.0) -> tuple[SloStatus, ...]:
    """Each latency objective of the profile against the short window's percentile and its bucket. Where the
    buckets cannot tell (undecided, not measurable), a recent probe of this workload (``probe``:
    samples.ProbeSample, younger than ``recent_seconds`` at ``now``) whose client-side percentile, measured at no
    less load than runs now, is within the objective shows it met (basis "probe")."""
    out = []
    for objective, target in getattr(profile, "slo", ()) or ():
        p = s.percentiles.get(objective) if s is not None and s.up else None
        judgement, text = _judge(objective, target, p, s.runtime if s is not None else None)
        basis = "buckets"
        if judgement in ("undecided", "not_measurable"):
            measured = _probe_percentile(probe, getattr(profile, "name", ""), objective,
                                         s.running if s is not None else None, now, recent_seconds)
            if measured is not None and measured[0] <= target:
                # exact latencies at no less load than now met it: latency grows with load, so it holds now
                judgement, basis = "met", "probe"
                text += f"; {measured[1]}: met"
            elif measured is not None:  # above it at a load at least today's: not a measurement of now
                text += f"; {measured[1]}, above it, at no less load than now: still undecided"
        met = {"met": True, "breached": False}.get(judgement)
        out.append(SloStatus(objective, target, None if p is None else p.value, met, judgement, p, basis, text))
    return tuple(out)
