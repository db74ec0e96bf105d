"""The answer of a probe in words: ``capacity_answer(result)`` (docs/probe.md, "The answer").

"Capacity at the SLO (TTFT p95 <= 500 ms, ...): 4 concurrent sequences / 3.9 requests/s at 256 input / 128 output
tokens, bound by kv_cache from step 3 (level 8: KV cache 97 % used, 9 waiting)." Then the estimate beside the
measurement: the KV capacity the memory model (or the runtime) gave and the sequences it holds at these lengths,
and the headroom in sequences the agent predicted, against what the probe measured. When the client itself
saturated (the load generator's CPU, not the server), it says so instead of naming a server resource; when the
SLO held at every step, the capacity is "at least" the highest level tried.

``result``: the probe's result dict (PROBE_CONTRACT; store.validate's shape). Pure; no I/O.
"""

from __future__ import annotations

from headroom.jsontypes import JsonDoc

UNITS = {"concurrency": "concurrent sequences", "rate": "requests/s"}


def _n(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "-"
    if abs(x - round(x)) < 1e-9:
        return f"{round(x):,}".replace(",", " ")
    return f"{x:,.{digits}f}".replace(",", " ")


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


def slo_text(slo: JsonDoc) -> str:
    """'TTFT p95 <= 500 ms, ITL p95 <= 50 ms, errors <= 1 %' ('no objective' without one)."""
    parts = []
    for key, value in sorted(slo.items(), key=lambda kv: (ORDER.get(kv[0].split("_")[0], 9), kv[0])):
        if value is None:
            continue
        if key == "error_rate":
            parts.append(f"errors <= {value * 100:g} %")
        else:
            what, _, q = key.partition("_")
            parts.append(f"{what.upper()} {q} <= {_ms(value)}")
    return ", ".join(parts) or "no objective"


ORDER = {"ttft": 0, "itl": 1, "e2e": 2, "error": 3}


def lengths_text(result: JsonDoc, step: JsonDoc | None = None) -> str:
    """'256 input / 128 output tokens' (the step's measured means where known, else the load's typical)."""
    load = result.get("load") or {}
    ins = (step or {}).get("input_tokens_mean")
    outs = (step or {}).get("output_tokens_mean")
    if ins is None:
        ins = (load.get("input_tokens") or {}).get("typical")
    if outs is None:
        outs = (load.get("output_tokens") or {}).get("typical")
    exact = (step or {}).get("lengths_exact")
    how = "" if step is None else " (exact)" if exact else " (measured from usage)"
    return f"{_n(ins, 0)} input / {_n(outs, 0)} output tokens{how}"


def _step(result: JsonDoc, index: int | None) -> JsonDoc | None:
    return next((s for s in result.get("steps") or () if s.get("index") == index), None) if index is not None \
        else None


def _good_steps(result: JsonDoc) -> list[JsonDoc]:
    return [s for s in result.get("steps") or () if s.get("slo_ok")]


def _host_evidence(step: JsonDoc | None) -> str:
    """'KV cache 97 % used, 9 waiting, 2 preempted' from a step's host peaks."""
    peaks = ((step or {}).get("host") or {}).get("peaks") or {}
    parts = []
    if peaks.get("kv_cache_usage_ratio") is not None:
        parts.append(f"KV cache {peaks['kv_cache_usage_ratio'] * 100:.0f} % used")
    if peaks.get("requests_waiting"):
        parts.append(f"{_n(peaks['requests_waiting'], 0)} waiting")
    if peaks.get("preemptions"):
        parts.append(f"{_n(peaks['preemptions'], 0)} preempted")
    if peaks.get("cpu_busy_ratio") is not None:
        parts.append(f"CPU {peaks['cpu_busy_ratio'] * 100:.0f} % busy")
    return ", ".join(parts)


def measured_kv_tokens(result: JsonDoc) -> float | None:
    """The KV capacity the runtime reported during the probe (the largest any step saw), None when none did."""
    seen = [((s.get("host") or {}).get("peaks") or {}).get("kv_cache_capacity_tokens") for s in result.get("steps") or ()]
    seen = [v for v in seen if v]
    return max(seen) if seen else None


def estimate_text(result: JsonDoc, measured: float | None) -> str:
    """The estimate beside the measurement: KV capacity (estimate vs the runtime's), the sequences it holds at the
    probe's lengths, and the headroom in sequences the agent predicted before the probe."""
    est = result.get("estimate") or {}
    load = result.get("load") or {}
    per_seq = sum(v for v in ((load.get("input_tokens") or {}).get("typical"),
                              (load.get("output_tokens") or {}).get("typical")) if v) or None
    parts = []
    kv = est.get("kv_capacity_tokens")
    runtime_kv = measured_kv_tokens(result)
    basis = est.get("basis") or "estimate"
    if kv:
        held = f", {_n(kv // per_seq, 0)} sequences at these lengths" if per_seq else ""
        parts.append(f"KV capacity {_n(kv, 0)} tokens ({basis}){held}")
    model_kv = est.get("kv_capacity_estimate_tokens")
    if model_kv and model_kv != kv:
        held = f", {_n(model_kv // per_seq, 0)} sequences at these lengths" if per_seq else ""
        parts.append(f"the memory model's estimate {_n(model_kv, 0)} tokens{held}")
    if runtime_kv and runtime_kv != kv:
        held = f", {_n(runtime_kv // per_seq, 0)} sequences at these lengths" if per_seq else ""
        parts.append(f"the runtime reported {_n(runtime_kv, 0)} tokens{held}")
    if est.get("headroom_sequences") is not None:
        parts.append(f"predicted headroom {_n(est['headroom_sequences'], 0)} more sequences at max context ({basis})")
    if not parts:
        return ""
    got = f"measured {_n(measured, 1)} {UNITS.get(result.get('schedule') or '', '')}".rstrip() if measured is not None \
        else "measured: no level met the SLO"
    return "Estimate beside the measurement: " + "; ".join(parts) + f"; {got}."


def capacity_answer(result: JsonDoc) -> str:
    """The one-paragraph answer of a result (module docstring)."""
    cap = result.get("capacity") or {}
    steps = result.get("steps") or []
    slo = slo_text(result.get("slo") or {})
    schedule = result.get("schedule") or "concurrency"
    prefix = ""
    if result.get("partial") or result.get("stopped") in ("interrupted", "error"):
        why = result.get("message") or result.get("stopped") or "stopped early"
        prefix = f"Partial result ({why}). "
    if not steps:
        return prefix + "No step completed: no capacity measured."
    good = _good_steps(result)
    best = good[-1] if good else None
    conc = cap.get("concurrency")
    rps = cap.get("requests_per_second")
    if conc is None and best is not None and schedule == "concurrency":
        conc = best.get("level")
    if rps is None and best is not None:
        rps = best.get("requests_per_second")
    bound = cap.get("bound_by") or "none"
    k = cap.get("from_step")
    binding = _step(result, k)
    lengths = lengths_text(result, best or steps[0])
    evidence = cap.get("evidence") or _host_evidence(binding) or ((binding or {}).get("host") or {}).get("evidence", "")
    names_step = evidence.startswith(f"step {k} ")  # the engine's evidence says the step and level itself
    at = f" (level {_n(binding['level'])}: {evidence})" if binding is not None and evidence and not names_step else \
        f" ({evidence})" if evidence else ""
    saturated = next((s for s in steps if s.get("client_saturated")), None)
    if best is None:
        first = steps[0]
        text = (f"Capacity at the SLO ({slo}): none; the first step (level {_n(first.get('level'))}) already broke "
                f"it ({', '.join(first.get('slo_broken') or []) or 'errors'}) at {lengths}")
        text += f", bound by {bound}{at}." if bound not in ("none", "client") else "."
    else:
        measured = f"{_n(conc)} concurrent sequences / {_n(rps)} requests/s" if conc is not None \
            else f"{_n(rps)} requests/s"
        held_all = len(good) == len(steps) and result.get("stopped") in ("max", "duration", "done")
        if held_all:
            text = (f"Capacity at the SLO ({slo}): at least {measured} at {lengths}; the SLO held at every step up "
                    f"to the highest level tried ({result.get('stopped')}), so the limit is beyond it.")
        elif bound == "client" or (saturated is not None and bound in ("none", "client")):
            text = (f"Capacity at the SLO ({slo}): at least {measured} at {lengths}; the load generator itself "
                    "saturated (its own CPU" + (f", {(saturated.get('client_cpu_seconds_per_request') or 0) * 1000:.1f}"
                                                " ms per request" if saturated else "")
                    + f") from step {_n(saturated['index'] if saturated else k)}, so this measures the client, not "
                    "the server: run the probe from another host or with fewer levels.")
        else:
            text = f"Capacity at the SLO ({slo}): {measured} at {lengths}, bound by {bound}"
            text += f" from step {k}{at}." if k is not None else f"{at}."
    if saturated is not None and "saturated" not in text:
        text += (f" Note: the client saturated at step {saturated['index']}; figures from that step on "
                 "understate the server.")
    extra = estimate_text(result, conc if schedule == "concurrency" else rps)
    return prefix + text + (" " + extra if extra else "")
