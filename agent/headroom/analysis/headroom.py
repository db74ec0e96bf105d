"""Headroom: how much room is left, in the workload's own units.

Pure functions of the signals, the workload's status (measured usage joined from NVML and /proc) and
its memory estimate (sizing.py). Sign convention: positive = room left, negative = over (the declared
load does not fit). None when the inputs are unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from headroom.analysis.signals import GpuSignals, HostSignals, WorkloadSignals
from headroom.units import format_bytes

if TYPE_CHECKING:
    from headroom.analysis.serving import ServingSignals
    from headroom.samples import ProbeSample
    from headroom.workload.profiles.types import WorkloadProfile
    from headroom.workload.sizing.types import Estimate

# where "more sequences" and "more context" come from (the `basis` label of headroom_workload_headroom_sequences
# and _context_tokens); the first that has its inputs wins
BASES: dict[str, str] = {
    "runtime": "the serving runtime's own KV cache: its capacity and usage (free tokens / context.max; free tokens "
               "/ the declared concurrency)",
    "memory_model": "the memory model's KV budget inside the runtime's reservation (vLLM reserves its pool up "
                    "front, so NVML cannot show what is left), against the declared concurrency and context.max",
    "free_vram": "measured free VRAM on the tightest GPU / the memory model's KV bytes per token",
}
# a memory-model capacity further than this from the runtime's is explained in words (WorkloadHeadroom.explanation)
CAPACITY_TOLERANCE = 0.10
# a `headroom probe` result younger than this gives the measured basis of "more sequences" (docs/probe.md): a
# week, so a probe run in a maintenance window counts until the next one; older, the host may have changed
PROBE_RECENT_SECONDS = 7 * 24 * 3600.0


class _ModelFigures(TypedDict):
    """The memory model's own figures (WorkloadHeadroom's ``estimate_*`` fields)."""

    estimate_sequences: int | None
    estimate_context_tokens: int | None
    estimate_basis: str
    estimate_kv_capacity_tokens: int | None


class _Capacity(TypedDict):
    """The runtime's own KV cache, in sequences and tokens (runtime_capacity)."""

    capacity: float  # KV tokens
    free: float
    sequences: int
    context_tokens: int
    context: int  # the context a sequence is sized at, and the concurrency: what the two figures divide by
    concurrency: int


@dataclass(frozen=True)
class WorkloadHeadroom:
    gpu_memory_bytes: int | None = None  # free VRAM on the workload's GPUs (summed)
    sequences: int | None = None  # more concurrent sequences that fit at max context (inference)
    context_tokens: int | None = None  # more tokens per sequence that fit at the declared concurrency
    cpu_cores: float | None = None  # idle cores the workload could still use
    host_memory_bytes: int | None = None  # MemAvailable
    shared_memory_bytes: int | None = None  # writable bytes left in the fullest shm mount
    power_watts: float | None = None  # limit - draw, summed over its GPUs
    thermal_celsius: float | None = None  # the least margin: each GPU's own thermal limit - its temperature
    power_watts_by_gpu: Mapping[int, float] = field(default_factory=dict)  # GPU index -> limit - draw, per GPU
    basis: str = ""  # where sequences/context come from: a key of BASES ("" when they are unknown)
    # the memory model's own figures, beside the runtime's when basis is runtime (else the same as above)
    estimate_sequences: int | None = None
    estimate_context_tokens: int | None = None
    estimate_basis: str = ""  # memory_model or free_vram
    kv_capacity_tokens: float | None = None  # the runtime's KV capacity (basis runtime)
    kv_free_tokens: float | None = None  # capacity x (1 - usage) (basis runtime)
    estimate_kv_capacity_tokens: int | None = None  # the memory model's
    # in words: why the estimate differs from the runtime by more than CAPACITY_TOLERANCE, and what a negative
    # figure means; "" when there is nothing to explain
    explanation: str = ""
    # a recent probe's capacity at the SLO minus the requests running now (basis measured), and when it was taken
    measured_sequences: int | None = None
    measured_at: float | None = None


def workload_headroom(profile: WorkloadProfile, w: WorkloadSignals, gpus: list[GpuSignals], h: HostSignals,
                      estimate: Estimate | None, slowdown_celsius: float, serving: ServingSignals | None = None
                      ) -> WorkloadHeadroom:
    """``serving``: the runtime's view (analysis/serving.py ServingSignals); where it reports its KV capacity and
    usage, "more sequences" and "more context" come from it (basis runtime) and the memory model's figures stand
    beside them as an estimate."""
    up = [g for g in gpus if g.up]
    free = [g.memory_total_bytes - g.memory_used_bytes for g in up
            if g.memory_total_bytes is not None and g.memory_used_bytes is not None]
    kind = getattr(profile.kind, "value", str(profile.kind))
    sequences = context = None
    basis = ""
    kv = getattr(estimate, "kv_bytes_per_token", None) if estimate is not None else None
    if kind in ("inference", "cpu-inference") and estimate is not None:
        vllm = getattr(getattr(profile, "runtime", None), "is_vllm", False)
        if vllm and estimate.max_concurrency_at_max_context is not None:
            # vLLM reserves its KV pool up front, so NVML cannot show what is left: use the model's budget
            sequences = estimate.max_concurrency_at_max_context - estimate.concurrency
            context = (estimate.max_context_at_concurrency - estimate.context
                       if estimate.max_context_at_concurrency is not None else None)
            basis = "memory_model"
        elif kv and free and kind == "inference":
            # the smallest free VRAM among its GPUs bounds what one more sequence can use
            spare = min(free)
            sequences = spare // (kv * max(1, estimate.context))
            context = spare // (kv * max(1, estimate.concurrency))
            basis = "free_vram"
    capacity = runtime_capacity(profile, serving, estimate)
    cores = None
    if h.cpu_busy is not None and h.logical_cpus:
        idle = h.logical_cpus * (1.0 - h.cpu_busy - (h.cpu_iowait or 0.0))
        allowed_left = (w.cores_allowed - w.cores_used) if w.cores_allowed and w.cores_used is not None else idle
        cores = max(0.0, min(idle, allowed_left))
    power = [g.power_limit_watts - g.power_watts for g in up
             if g.power_limit_watts is not None and g.power_watts is not None]
    # each GPU against its own limit (NVML's max operating or slowdown temperature, signals.thermal_limit),
    # else the configured one: an 83 degC limit on one card and 90 on the next are not the same margin
    margins = [(g.thermal_limit_celsius if g.thermal_limit_celsius is not None else slowdown_celsius)
               - g.temperature_celsius for g in up if g.temperature_celsius is not None]
    model: _ModelFigures = {
        "estimate_sequences": sequences, "estimate_context_tokens": context, "estimate_basis": basis,
        "estimate_kv_capacity_tokens": getattr(estimate, "kv_capacity_tokens", None) if estimate else None}
    if capacity is not None:
        sequences, context, basis = capacity["sequences"], capacity["context_tokens"], "runtime"
    return WorkloadHeadroom(
        gpu_memory_bytes=sum(free) if free else None,
        sequences=sequences,
        context_tokens=context,
        cpu_cores=None if cores is None else round(cores, 3),
        host_memory_bytes=h.memory_available_bytes,
        shared_memory_bytes=h.shm_available_bytes,
        power_watts=round(sum(power), 3) if power else None,
        thermal_celsius=min(margins) if margins else None,
        basis=basis,
        power_watts_by_gpu={g.index: round(g.power_limit_watts - g.power_watts, 3) for g in up
                            if g.power_limit_watts is not None and g.power_watts is not None},
        **model,
        kv_capacity_tokens=capacity["capacity"] if capacity else None,
        kv_free_tokens=capacity["free"] if capacity else None,
        explanation=explain(profile, estimate, capacity, model) if kind in ("inference", "cpu-inference") else "",
    )


def measured_headroom(room: WorkloadHeadroom, probe: ProbeSample | None, name: str, serving: ServingSignals | None,
                      now: float) -> WorkloadHeadroom:
    """``room`` with the measured basis beside its own: when ``probe`` (samples.ProbeSample) holds a complete
    concurrency result for workload ``name`` measured within PROBE_RECENT_SECONDS before ``now`` (unix seconds),
    more sequences = its capacity - the requests running now (the runtime's mean over the short window; 0 when
    the runtime is unread)."""
    from dataclasses import replace

    if (probe is None or not getattr(probe, "found", False) or probe.workload != name or probe.partial
            or probe.concurrency is None or probe.measured_at is None
            or not 0 <= now - probe.measured_at <= PROBE_RECENT_SECONDS):
        return room
    running = getattr(serving, "running", None) if serving is not None and getattr(serving, "up", False) else None
    return replace(room, measured_sequences=int(probe.concurrency - (running or 0.0)), measured_at=probe.measured_at)


def runtime_capacity(profile: WorkloadProfile, serving: ServingSignals | None, estimate: Estimate | None
                     ) -> _Capacity | None:
    """More sequences and context from the runtime's own KV cache, where it reports capacity and usage: free
    tokens = capacity x (1 - usage); more sequences = free // context.max; more context = free // the declared
    concurrency (at least 1). None when the runtime is unread or does not report both."""
    if serving is None or not getattr(serving, "up", False):
        return None
    cap, usage = getattr(serving, "capacity_tokens", None), getattr(serving, "usage", None)
    if not cap or usage is None:
        return None
    context = getattr(getattr(profile, "context", None), "max", None) or getattr(estimate, "context", None)
    if not context:
        return None
    concurrency = getattr(profile, "concurrency", None) or getattr(estimate, "concurrency", None) or 1
    free = cap * max(0.0, 1.0 - usage)
    return {"capacity": cap, "free": round(free, 1), "sequences": int(free // context),
            "context_tokens": int(free // max(1, concurrency)), "context": context, "concurrency": concurrency}


def _tokens(n: float) -> str:
    return f"{n:,.0f}".replace(",", " ")


def explain(profile: WorkloadProfile, estimate: Estimate | None, capacity: _Capacity | None, model: _ModelFigures
            ) -> str:
    """In words: where the memory model's capacity differs from the runtime's by more than CAPACITY_TOLERANCE,
    which assumption accounts for it (gpu_memory_utilization, KV precision, block size, the runtime version's
    profiling); and what a negative model figure means. "" when there is nothing to explain."""
    parts = []
    est_cap = model.get("estimate_kv_capacity_tokens")
    if capacity is not None and est_cap:
        parts += _difference(profile, estimate, capacity["capacity"], est_cap)
    seq = model.get("estimate_sequences")
    if seq is not None and seq < 0 and estimate is not None:
        holds = getattr(estimate, "max_concurrency_at_max_context", None)
        what = (f"its {_tokens(est_cap)}-token KV budget" if est_cap else "the memory it budgets")
        parts.append(f"The memory model's {seq} more sequences is a shortfall: {what} holds "
                     f"{holds if holds is not None else '?'} of the {estimate.concurrency} sequences of "
                     f"{_tokens(estimate.context)} tokens declared (concurrency, context.max), so the declared load "
                     "would not fit on the model's figures" + (", while the runtime's own cache has room."
                                                               if capacity is not None and capacity["sequences"] >= 0
                                                               else "."))
    return " ".join(parts)


def _difference(profile: WorkloadProfile, estimate: Estimate | None, runtime_tokens: float, estimate_tokens: int
                ) -> list[str]:
    ratio = runtime_tokens / estimate_tokens
    if abs(ratio - 1.0) <= CAPACITY_TOLERANCE:
        return []
    diff = estimate_tokens / runtime_tokens - 1.0
    out = [f"The runtime reports {_tokens(runtime_tokens)} KV tokens, the memory model expects "
           f"{_tokens(estimate_tokens)}, {abs(diff) * 100:.0f} % {'more' if diff > 0 else 'fewer'}."]
    kvpt = getattr(estimate, "kv_bytes_per_token", None)
    report = getattr(estimate, "runtime_report", None) or {}
    total = getattr(estimate, "gpu_memory_bytes", None)
    why = []
    if kvpt:
        delta = (runtime_tokens - estimate_tokens) * kvpt  # per GPU: kv_bytes_per_token is per GPU
        more = "more" if delta > 0 else "less"
        head = f"That is {format_bytes(abs(delta))} {more} KV memory per GPU than the model budgets"
        rt = getattr(profile, "runtime", None)
        name = getattr(rt, "name", None)
        declared = getattr(rt, "gpu_memory_utilization", None) if name == "vllm" else \
            getattr(rt, "mem_fraction_static", None) if name == "sglang" else None
        knob = {"vllm": "gpu_memory_utilization", "sglang": "mem_fraction_static"}.get(name or "")
        if knob and total and report.get("budget_bytes"):
            util = report["budget_bytes"] / total
            implied = util + delta / total
            said = "declared" if declared else "assumed (the profile does not say)"
            why.append(f"utilisation: the runtime's figure matches {knob} {implied:.2f}, not the {util:.2f} "
                       f"{said}")
        if abs(ratio - 2.0) <= CAPACITY_TOLERANCE * 2 or abs(ratio - 0.5) <= CAPACITY_TOLERANCE:
            prec = getattr(getattr(profile, "kv_cache_precision", None), "value", None)
            why.append(f"KV precision: the runtime's cache holds {'twice' if ratio > 1 else 'half'} the tokens, as "
                       f"if it stored them at {'half' if ratio > 1 else 'twice'} the bytes of the profile's "
                       f"{prec or 'KV precision'} (--kv-cache-dtype)")
        block = report.get("block_size")
        concurrency = getattr(estimate, "concurrency", 1) or 1
        if block and abs(runtime_tokens - estimate_tokens) <= block * concurrency:
            why.append(f"block size: the difference is within whole {block}-token blocks")
        if report.get("runtime"):
            pinned = getattr(getattr(profile, "runtime", None), "version", None)
            version = f"runtime.version {pinned}" if pinned else "runtime.version not given"
            why.append(f"version: the model assumes {report['runtime']} accounting ({version}): activations "
                       f"{format_bytes(report.get('activation_bytes') or 0)} and non-torch memory "
                       f"{format_bytes(report.get('non_torch_bytes') or 0)} per GPU inside the budget; another "
                       "version profiles them differently")
        out.append(head + (": " + "; or ".join(why) + "." if why else "."))
    out.append("More sequences and more context come from the runtime's figure; the estimate is the model's.")
    return out
