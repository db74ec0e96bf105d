"""``headroom probe``: its flags, the target (a profile, an automatic workload, or --url), the output.

Exit status: 0 a capacity was measured (some step held the SLO), 1 none was (the endpoint failed or even the
first step broke the SLO), 2 bad input (one line), 130 interrupted (the partial result is still printed).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict

from headroom import probe as limits
from headroom import units
from headroom.jsontypes import JsonDoc

if TYPE_CHECKING:
    from headroom.config import Config
    from headroom.probe.run import Plan
    from headroom.workload.profiles.types import Lengths, WorkloadProfile

EXIT_OK, EXIT_NO_CAPACITY, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
STATUS_TIMEOUT = 2.0  # seconds for the agent's /api/v1/status when resolving the target
DEFAULT_MAX_CONCURRENCY = 64  # the ramp's top without --max-concurrency or a profile's peak
DEFAULT_RATE = 1.0  # requests/s the rate ramp is built around without a profile's rate


class ProbeInputError(Exception):
    """Bad input; the message is one line."""


# Any: argparse's private _SubParsersAction (cli.build_parser's subparsers)
def add_parser(sub: Any, add_common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "probe", help="measure capacity under load: how many requests fit within the SLO, and what binds",
        description="Drive a serving runtime's OpenAI-compatible API step by step with the load a workload "
                    "profile declares (load:) until a step breaks its SLO (slo:), and report the capacity at the "
                    "objective with what the host showed (docs/probe.md). Never run by the agent itself.")
    p.add_argument("--workload", metavar="NAME", help="a declared profile, or a workload the running agent found "
                   "(an automatic server such as vllm/Qwen3-0.6B:8001): its endpoint, load: and slo:")
    p.add_argument("--url", metavar="URL", help="the API (http://host:port or .../v1); overrides the profile's endpoint")
    p.add_argument("--simulate", metavar="NAME|FILE", help="also read the profiles of this scenario (as `run --simulate`)")
    p.add_argument("--agent", metavar="URL", help="the running agent (default: its listen address in the "
                   "configuration, http://127.0.0.1:9843): where the host is watched from")
    p.add_argument("--no-agent", action="store_true", help="do not ask a running agent: watch the host with the "
                   "agent's collectors in this process")
    p.add_argument("--no-host", dest="no_host", action="store_true", help="do not watch the host at all (no host "
                   "figures, nothing beside the client: to compare the client with another load tool)")
    p.add_argument("--api", choices=("completions", "chat"), default="completions",
                   help="/v1/completions (exact prompt lengths where the runtime tokenizes) or /v1/chat/completions")
    p.add_argument("--model", metavar="NAME", help="the served model to ask (default: the first /v1/models lists)")
    p.add_argument("--schedule", choices=("concurrency", "rate"), default=None,
                   help="concurrency: a closed-loop ramp (default); rate: Poisson arrivals at fixed rates")
    p.add_argument("--levels", metavar="LIST", help="the levels, e.g. 1,2,4,8 (concurrency) or 0.5,1,2 (requests/s)")
    p.add_argument("--max-concurrency", dest="max_concurrency", type=int, metavar="N",
                   help=f"top of the concurrency ramp; with --schedule rate the most requests in flight (at most "
                        f"{limits.MAX_CONCURRENCY})")
    p.add_argument("--max-rate", dest="max_rate", type=float, metavar="R",
                   help=f"top of the rate ramp, requests/s (at most {limits.MAX_RATE:g})")
    p.add_argument("--input-tokens", dest="input_tokens", type=int, metavar="N", help="prompt tokens per request")
    p.add_argument("--output-tokens", dest="output_tokens", type=int, metavar="N", help="output tokens per request")
    p.add_argument("--lengths", choices=("typical", "max"), default="typical",
                   help="the profile's typical lengths, or its max (the worst case)")
    p.add_argument("--step", metavar="DURATION", default=f"{limits.DEFAULT_STEP_SECONDS:g}s",
                   help=f"how long each level is held (default {limits.DEFAULT_STEP_SECONDS:g}s)")
    p.add_argument("--warmup", metavar="DURATION", default=f"{limits.DEFAULT_WARMUP_SECONDS:g}s",
                   help=f"the first part of each step, not counted (default {limits.DEFAULT_WARMUP_SECONDS:g}s)")
    p.add_argument("--duration", metavar="DURATION", default=f"{limits.DEFAULT_DURATION:g}s",
                   help=f"the whole probe at most (default {limits.DEFAULT_DURATION:g}s, at most "
                        f"{limits.MAX_DURATION:g}s)")
    p.add_argument("--request-timeout", dest="request_timeout", metavar="DURATION",
                   default=f"{limits.DEFAULT_REQUEST_TIMEOUT:g}s", help="one request at most, first byte to last")
    p.add_argument("--slo", action="append", default=[], metavar="OBJECTIVE=VALUE",
                   help="an objective over the profile's, repeatable: ttft_p95=500ms, itl_p99=50ms, error_rate=1%%")
    p.add_argument("--seed", type=int, default=0, help="prompts and arrivals are drawn from it (default 0)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the result as JSON (docs/probe.md)")
    fmt.add_argument("--markdown", action="store_true", help="print the answer and the step table as Markdown")
    p.add_argument("--output", metavar="FILE.json", help="also write the result there")
    p.add_argument("--state.dir", dest="state_dir", metavar="DIR", help="where the last result is kept for the "
                   "agent (probe-last.json; default $STATE_DIRECTORY, else /var/lib/headroom)")
    p.add_argument("--no-save", dest="no_save", action="store_true", help="do not keep the result for the agent")
    add_common(p)


# ------------------------------------------------------------------------------------------ inputs
def _seconds(text: str, flag: str, low: float, high: float) -> float:
    try:
        value = units.parse_duration(text)
    except ValueError as exc:
        raise ProbeInputError(f"{flag}: {exc}") from None
    if not low <= value <= high:
        raise ProbeInputError(f"{flag}: must be between {units.format_duration(low)} and "
                              f"{units.format_duration(high)}; got {text}")
    return value


def _slo_flags(items: list[str]) -> tuple[dict[str, float], float | None]:
    from headroom.workload.profiles import SLO_KEYS, ProfileErrors, profile_from_dict

    raw: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in SLO_KEYS:
            raise ProbeInputError(f"--slo {item!r}: expected OBJECTIVE=VALUE with OBJECTIVE one of {', '.join(SLO_KEYS)}")
        raw[key.strip()] = value.strip()
    if not raw:
        return {}, None
    try:  # the profile's own reader: the same checks and messages as slo: in a profile
        p = profile_from_dict({"name": "flags", "kind": "inference", "endpoint": "http://x/metrics", "slo": raw},
                              attributable=False)
    except ProfileErrors as exc:
        raise ProbeInputError("--slo " + str(exc.errors[0]).removeprefix("slo.")) from None
    return dict(p.slo), p.error_budget


def _levels(text: str, integer: bool) -> list[float]:
    out = []
    for part in text.split(","):
        try:
            v = float(part)
        except ValueError:
            raise ProbeInputError(f"--levels: {part.strip()!r} is not a number (e.g. 1,2,4,8)") from None
        if integer and (v != int(v) or v < 1):
            raise ProbeInputError(f"--levels: concurrency levels are whole numbers >= 1; got {part.strip()}")
        if not v > 0:
            raise ProbeInputError(f"--levels: levels are above 0; got {part.strip()}")
        out.append(int(v) if integer else v)
    if len(out) > limits.MAX_STEPS:
        raise ProbeInputError(f"--levels: at most {limits.MAX_STEPS} levels; got {len(out)}")
    return sorted(set(out))


def _status(url: str | None) -> dict | None:
    if not url:
        return None
    import urllib.request  # only here: `headroom run` never imports it (tests/test_architecture.py)

    try:
        with urllib.request.urlopen(url, timeout=STATUS_TIMEOUT) as r:  # noqa: S310 - an http URL the user gave
            doc = json.loads(r.read(8 << 20))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _status_url(args: argparse.Namespace, config: Config) -> str | None:
    if args.no_agent:
        return None
    if args.agent:
        base = args.agent.rstrip("/")
        return base if base.endswith("/api/v1/status") else base + "/api/v1/status"
    address = (config.web.get("listen_address") or [":9843"])[0]
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    scheme = "https" if config.web.get("config_file") else "http"
    return f"{scheme}://{host}:{port}/api/v1/status"


class Resolved(TypedDict):
    """What ``resolve`` found: the endpoint, the workload's name and profile, the status URL, the estimate."""

    url: str
    workload: str | None
    profile: WorkloadProfile | None
    status_url: str | None
    estimate: JsonDoc | None
    simulated: bool


def resolve(args: argparse.Namespace, config: Config) -> Resolved:
    """The target: url, workload name, its profile (or None), the status URL, and the estimate beside it."""
    status_url = _status_url(args, config)
    if not args.workload and not args.url:
        raise ProbeInputError("name a workload (--workload NAME: a profile or a workload the agent found) or an "
                              "endpoint (--url http://HOST:PORT)")
    profile = config.workload(args.workload) if args.workload else None
    status = _status(status_url) if args.workload else None
    entry = None
    if status is not None:
        entry = next((w for w in status.get("workloads", ()) if isinstance(w, dict)
                      and w.get("name") == args.workload), None)
    if profile is None and args.workload and status is not None and status.get("simulated_scenario"):
        profile = _scenario_profile(config, status["simulated_scenario"], args.workload)
    endpoint = args.url
    if endpoint is None and entry is not None:
        endpoint = (entry.get("serving") or {}).get("endpoint")
    if endpoint is None and profile is not None:
        endpoint = profile.endpoint
    if endpoint is None:
        known = [w.get("name") for w in (status or {}).get("workloads", ()) if isinstance(w, dict)
                 and (w.get("serving") or {}).get("endpoint")]
        where = (f"the agent at {status_url} serves endpoints for {', '.join(known)}" if known else
                 f"no running agent answered at {status_url}" if status is None else
                 f"the agent at {status_url} knows no serving endpoint for it")
        raise ProbeInputError(f"workload {args.workload!r}: no endpoint to probe ({where}); give --url")
    estimate = None
    if entry is not None:
        h = (entry.get("serving") or {}).get("headroom") or {}
        runtime, est = h.get("kv_capacity_runtime_tokens"), h.get("kv_capacity_estimate_tokens")
        if runtime or est:
            estimate = {"kv_capacity_tokens": runtime or est, "kv_capacity_estimate_tokens": est,
                        "headroom_sequences": h.get("sequences_observed"), "basis": "runtime" if runtime else "estimate"}
    return {"url": endpoint, "workload": args.workload, "profile": profile,
            "status_url": status_url if entry is not None else None, "estimate": estimate,
            "simulated": bool((status or {}).get("simulated_scenario")) or bool(args.simulate)}


def _scenario_profile(config: Config, scenario: str, name: str) -> WorkloadProfile | None:
    from headroom import daemon

    try:
        return daemon.with_scenario_profiles(config, daemon.load_scenario(scenario)).workload(name)
    except daemon.StartupError:
        return None


def plan_from(args: argparse.Namespace, profile: WorkloadProfile | None) -> Plan:
    from headroom.probe.load import ramp
    from headroom.probe.run import Plan

    load = getattr(profile, "load", None)
    step = _seconds(args.step, "--step", limits.MIN_STEP_SECONDS, limits.MAX_STEP_SECONDS)
    warmup = _seconds(args.warmup, "--warmup", 0.0, limits.MAX_STEP_SECONDS)
    if warmup >= step:
        raise ProbeInputError(f"--warmup {args.warmup} must be shorter than --step {args.step}")
    duration = _seconds(args.duration, "--duration", limits.MIN_STEP_SECONDS, limits.MAX_DURATION)
    timeout = _seconds(args.request_timeout, "--request-timeout", 0.1, limits.MAX_REQUEST_TIMEOUT)
    schedule = args.schedule or ("rate" if load is not None and load.rate.normal and not load.concurrency.normal
                                 else "concurrency")

    def tokens(flag: str | None, lengths: Lengths | None, default: int, most: int, name: str) -> tuple[int, int | None, str]:
        value = getattr(args, flag)
        if value is not None:
            if not 1 <= value <= most:
                raise ProbeInputError(f"--{name}: must be between 1 and {most}; got {value}")
            return value, None, "fixed"
        if lengths is not None and lengths.typical is not None:
            typical = lengths.max if args.lengths == "max" and lengths.max else lengths.typical
            return typical, lengths.max, "fixed" if args.lengths == "max" else lengths.distribution
        return default, None, "fixed"

    in_len = tokens("input_tokens", getattr(load, "input_tokens", None), _default_input(profile),
                    limits.MAX_INPUT_TOKENS, "input-tokens")
    out_len = tokens("output_tokens", getattr(load, "output_tokens", None),
                     getattr(profile, "output_tokens", None) or limits.DEFAULT_OUTPUT_TOKENS,
                     limits.MAX_OUTPUT_TOKENS, "output-tokens")
    if args.max_concurrency is not None and not 1 <= args.max_concurrency <= limits.MAX_CONCURRENCY:
        raise ProbeInputError(f"--max-concurrency: must be between 1 and {limits.MAX_CONCURRENCY}; "
                              f"got {args.max_concurrency}")
    if args.max_rate is not None and not limits.MIN_RATE <= args.max_rate <= limits.MAX_RATE:
        raise ProbeInputError(f"--max-rate: must be between {limits.MIN_RATE:g} and {limits.MAX_RATE:g} "
                              f"requests/s; got {args.max_rate:g}")
    if schedule == "concurrency":
        normal, peak = (load.concurrency.normal, load.concurrency.peak) if load is not None else (None, None)
        normal = normal or getattr(profile, "concurrency", None)
        top = args.max_concurrency or min(limits.MAX_CONCURRENCY, 2 * int(peak or normal or 0)
                                          or DEFAULT_MAX_CONCURRENCY)
        levels = _levels(args.levels, True) if args.levels else ramp(1, top, (normal, peak), True, limits.MAX_STEPS)
        if max(levels) > limits.MAX_CONCURRENCY:
            raise ProbeInputError(f"--levels: at most {limits.MAX_CONCURRENCY} concurrent requests; got {max(levels)}")
        if args.max_concurrency and max(levels) > args.max_concurrency:
            levels = [x for x in levels if x <= args.max_concurrency] or [args.max_concurrency]
        in_flight = int(max(levels))
    else:
        normal, peak = (load.rate.normal, load.rate.peak) if load is not None else (None, None)
        base = normal or DEFAULT_RATE
        top = args.max_rate or min(limits.MAX_RATE, 2 * (peak or base) if normal else 16 * base)
        levels = _levels(args.levels, False) if args.levels else ramp(max(limits.MIN_RATE, base / 4), top,
                                                                      (normal, peak), False, limits.MAX_STEPS)
        if max(levels) > limits.MAX_RATE or min(levels) < limits.MIN_RATE:
            raise ProbeInputError(f"--levels: rates are between {limits.MIN_RATE:g} and {limits.MAX_RATE:g} "
                                  "requests/s")
        if args.max_rate and max(levels) > args.max_rate:
            levels = [x for x in levels if x <= args.max_rate] or [args.max_rate]
        in_flight = args.max_concurrency or limits.MAX_CONCURRENCY
    slo = dict(getattr(profile, "slo", ()) or ())
    budget = getattr(profile, "error_budget", None)
    flag_slo, flag_budget = _slo_flags(args.slo)
    slo.update(flag_slo)
    budget = flag_budget if flag_budget is not None else budget
    return Plan(schedule=schedule, levels=levels, step_seconds=step, warmup_seconds=warmup, duration=duration,
                input_tokens=in_len[0], input_max=in_len[1], input_distribution=in_len[2],
                output_tokens=out_len[0], output_max=out_len[1], output_distribution=out_len[2],
                request_timeout=timeout, max_in_flight=in_flight, seed=args.seed, slo=slo,
                error_budget=limits.DEFAULT_ERROR_BUDGET if budget is None else budget)


def _default_input(profile: WorkloadProfile | None) -> int:
    """Without load.input_tokens: the profile's typical context less its output, else DEFAULT_INPUT_TOKENS."""
    context = getattr(getattr(profile, "context", None), "typical", None)
    out = getattr(profile, "output_tokens", None) or limits.DEFAULT_OUTPUT_TOKENS
    return context - out if context and context > out else limits.DEFAULT_INPUT_TOKENS


# ------------------------------------------------------------------------------------------ output
def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f}ms" if v < 1 else f"{v:.2f}s"


def rows(result: JsonDoc) -> list[list[str]]:
    unit = "conc." if result["schedule"] == "concurrency" else "req/s"
    out = [["step", unit, "requests", "errors", "ttft p50", "ttft p95", "itl p95", "e2e p95", "req/s", "tok/s",
            "goodput", "in/out tok", "kv peak", "bottleneck", "slo"]]
    for s in result["steps"]:
        host = s.get("host") or {}
        kv = (host.get("peaks") or {}).get("kv_cache_usage_ratio")
        out.append([str(s["index"]), f"{s['level']:g}", f"{s['completed']}/{s['requests']}",
                    ",".join(f"{k}:{v}" for k, v in s["errors"].items()) or "0",
                    _secs(s["ttft"]["p50"]), _secs(s["ttft"]["p95"]), _secs(s["itl"]["p95"]), _secs(s["e2e"]["p95"]),
                    f"{s['requests_per_second']:g}", f"{s['output_tokens_per_second']:g}",
                    f"{s['goodput_requests_per_second']:g}",
                    f"{_num(s['input_tokens_mean'])}/{_num(s['output_tokens_mean'])}"
                    + ("" if s["lengths_exact"] else "~"),
                    "-" if kv is None else f"{kv:.0%}", str(host.get("bottleneck") or "-"),
                    "ok" if s["slo_ok"] else "broke " + ",".join(s["slo_broken"])
                    + (" [client saturated]" if s.get("client_saturated") else "")])
    return out


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def _estimate_line(result: JsonDoc) -> str:
    est = result.get("estimate")
    if not est:
        return ""
    cap = result.get("capacity") or {}
    return (f"estimate beside it ({est.get('basis')}): KV capacity {est.get('kv_capacity_tokens'):,.0f} tokens, "
            f"headroom {est.get('headroom_sequences')} more sequences; measured: "
            f"{cap.get('concurrency')} concurrent within the SLO")


def format_table(result: JsonDoc, answer: str) -> str:
    table = rows(result)
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = [answer, ""] + ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    est = _estimate_line(result)
    if est:
        lines += ["", est]
    lines.append(f"stopped: {result['stopped']}" + (f" ({result['message']})" if result.get("message") else "")
                 + (" - partial result" if result.get("partial") else ""))
    return "\n".join(lines) + "\n"


def format_markdown(result: JsonDoc, answer: str) -> str:
    table = rows(result)
    lines = [f"**{answer}**", "", "| " + " | ".join(table[0]) + " |", "|" + "---|" * len(table[0])]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in table[1:]]
    est = _estimate_line(result)
    if est:
        lines += ["", est]
    lines += ["", f"Stopped: {result['stopped']}" + (f" ({result['message']})" if result.get("message") else "")]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------- run
def run(args: argparse.Namespace, config: Config) -> tuple[int, str]:
    """(exit status, what stdout gets); raises ProbeInputError for bad input."""
    from headroom import daemon
    from headroom.probe.answer import capacity_answer
    from headroom.probe.client import ProbeError, api_base
    from headroom.probe.host import HostWatch, NoWatch
    from headroom.probe.run import execute, stderr_progress

    if args.simulate:
        try:
            config = daemon.with_scenario_profiles(config, daemon.load_scenario(args.simulate))
        except daemon.StartupError as exc:
            raise ProbeInputError(str(exc)) from None
    target = resolve(args, config)
    if args.workload and target["profile"] is None and target["status_url"] is None:
        raise ProbeInputError(f"workload {args.workload!r}: no such profile in {config.source or 'the configuration'}"
                              " and no running agent knows it")
    try:
        url = api_base(target["url"])
    except ProbeError as exc:
        raise ProbeInputError(str(exc)) from None
    plan = plan_from(args, target["profile"])
    # no agent to ask: the agent's collectors and analysis run in this process (probe/host.py)
    host = NoWatch() if args.no_host else HostWatch(target["workload"], target["status_url"], url=url,
                                                     config=config, options=daemon.Options(simulate=args.simulate))
    try:
        result = execute(url, plan, workload=target["workload"], model=args.model, api=args.api, host=host,
                         estimate=target["estimate"], progress=stderr_progress)
    finally:
        host.close()
    answer = capacity_answer(result)
    if args.output:
        _write(args.output, result)
    if not args.no_save:
        from headroom.probe import store

        try:
            # an agent under --simulate keeps its state elsewhere (probeview's store.state_dir)
            store.save(result, store.state_dir(args.state_dir, simulate=target["simulated"]))
        except store.StoreError as exc:  # the result is still printed
            print(f"headroom: probe: cannot keep the result for the agent: {exc}", file=sys.stderr)
    if args.json:
        text = json.dumps(result, indent=1) + "\n"
    elif args.markdown:
        text = format_markdown(result, answer)
    else:
        text = format_table(result, answer)
    if result["stopped"] == "interrupted":
        return EXIT_INTERRUPTED, text
    if result["stopped"] == "error" and not result["steps"]:
        print(f"headroom: probe: {result['message']}", file=sys.stderr)
    ok = (result.get("capacity") or {}).get("concurrency") is not None or \
        (result.get("capacity") or {}).get("requests_per_second") is not None
    return (EXIT_OK if ok else EXIT_NO_CAPACITY), text


def _write(path: str, result: JsonDoc) -> None:
    import os

    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
        os.replace(tmp, path)
    except OSError as exc:
        raise ProbeInputError(f"--output {path}: {exc.strerror or exc}") from None
