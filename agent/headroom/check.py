"""`headroom check CHECK`: one verdict of the local agent as a node-problem-detector custom plugin.

node-problem-detector's custom plugin monitor (pkg/custompluginmonitor) runs a rule's command every
invoke_interval and reads its exit status: 0 OK, 1 NonOK (the problem is there), anything else Unknown; the
trimmed standard output, cut at the monitor's max_output_length (80 by default), is the condition's message. So
each check asks the agent's status API (``--agent``, default http://127.0.0.1:9843) once and prints one line of
at most ``--max-length`` characters:

- ``gpu-health``: a GPU has a health condition (analysis/health.py: lost, an XID that needs a reset or reboot,
  uncorrected ECC errors, a pending or failed row remap, stuck clocks);
- ``gpu-idle --for 1h``: a GPU held by a workload (a pod's or job's device, a declared profile's GPU) has been idle
  without a break for at least that long;
- ``gpu-starved``: a GPU or a workload has a host resource (cpu, host_memory, shared_memory, disk_io, network) as
  its primary bottleneck;
- ``gpu-throttled``: a GPU or a workload has gpu_thermal or gpu_power as its primary bottleneck.

An agent that cannot be reached, answers with an error or with something other than its status, or has no
GPU figures (NVML down) is Unknown (exit 3) with the reason, never a traceback: the check cannot tell.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from typing import Any

from headroom.analysis.bottleneck import STARVATION_RULES
from headroom.jsontypes import JsonDoc

OK, NON_OK, UNKNOWN = 0, 1, 3  # node-problem-detector: 0 OK, 1 NonOK, any other status Unknown
DEFAULT_AGENT = "http://127.0.0.1:9843"
STATUS_PATH = "/api/v1/status"
DEFAULT_TIMEOUT_SECONDS = 5.0  # node-problem-detector's own default plugin timeout
DEFAULT_MAX_LENGTH = 80  # node-problem-detector's default max_output_length
MAX_STATUS_BYTES = 16 * 2**20  # the status document read, at most
THROTTLE_RESOURCES = ("gpu_thermal", "gpu_power")
_DURATION = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)?$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


class CheckUnknown(Exception):
    """The check cannot tell (agent unreachable, no GPU figures): Unknown, with this one-line reason."""


def _duration(text: str) -> float:
    m = _DURATION.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: expected e.g. 90s, 30m or 1h")
    return float(m.group(1)) * _UNIT_SECONDS[m.group(2)]


def add_parser(sub: Any) -> None:  # Any: argparse's private _SubParsersAction (cli's subparsers)
    p = sub.add_parser("check", help="one verdict of the local agent as a node-problem-detector custom plugin: "
                                     "exit 0 OK, 1 problem, 3 unknown, one line of output")
    p.add_argument("check", choices=tuple(CHECKS), help="what to check")
    p.add_argument("--agent", default=DEFAULT_AGENT, metavar="URL",
                   help=f"the agent's base URL or its {STATUS_PATH} URL (default {DEFAULT_AGENT})")
    p.add_argument("--for", dest="for_seconds", type=_duration, default=3600.0, metavar="DURATION",
                   help="gpu-idle: how long an allocated GPU must have been idle (default 1h)")
    p.add_argument("--timeout", type=_duration, default=DEFAULT_TIMEOUT_SECONDS, metavar="DURATION",
                   help="for the agent's answer (default 5s; keep it under the plugin's timeout)")
    p.add_argument("--max-length", dest="max_length", type=int, default=DEFAULT_MAX_LENGTH, metavar="N",
                   help="characters of the message, at most (node-problem-detector's max_output_length, default 80)")


def fetch_status(agent: str, timeout: float) -> JsonDoc:
    """The agent's status document; raises CheckUnknown with a one-line reason."""
    import urllib.error  # here, not at import: `headroom run` builds the parser and never fetches
    import urllib.request

    url = agent.rstrip("/")
    if not url.endswith(STATUS_PATH):
        url += STATUS_PATH
    if not url.startswith(("http://", "https://")):
        raise CheckUnknown(f"--agent {agent!r} is not an http(s) URL")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - an http(s) URL checked above
            body = r.read(MAX_STATUS_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise CheckUnknown(f"agent answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CheckUnknown(f"agent unreachable ({getattr(reason, 'strerror', None) or reason}) at {url}") from None
    if len(body) > MAX_STATUS_BYTES:
        raise CheckUnknown("agent status larger than expected")
    try:
        doc = json.loads(body)
    except ValueError:
        raise CheckUnknown("agent status is not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("gpus"), list):
        raise CheckUnknown("agent status has no gpus list")
    return doc


def _gpus(doc: JsonDoc) -> list[JsonDoc]:
    gpus = [g for g in doc["gpus"] if isinstance(g, dict)]
    if not gpus:
        nvml = (doc.get("collectors") or {}).get("nvml") or {}
        raise CheckUnknown(f"no GPU figures: {nvml.get('error') or 'the agent reports no GPU'}")
    return gpus


def gpu_health(doc: JsonDoc, args: argparse.Namespace) -> tuple[int, str]:
    gpus = _gpus(doc)
    judged = [g for g in gpus if isinstance(g.get("health"), dict)]
    if not judged:
        raise CheckUnknown("the agent has not judged GPU health yet")
    bad = [g for g in judged if g["health"].get("status") != "healthy"]
    if not bad:
        return OK, f"{len(judged)} GPU(s) healthy"
    return NON_OK, "; ".join(f"GPU {g.get('index')}: {g['health'].get('reason')}" for g in bad)


def gpu_idle(doc: JsonDoc, args: argparse.Namespace) -> tuple[int, str]:
    gpus = _gpus(doc)
    want = args.for_seconds
    found = [g for g in gpus if isinstance(g.get("allocated_to"), list) and g["allocated_to"] and g.get("idle") is True
             and isinstance(g.get("idle_seconds"), (int, float)) and g["idle_seconds"] >= want]
    if not found:
        held = sum(1 for g in gpus if g.get("allocated_to"))
        return OK, f"no allocated GPU idle for {_span(want)} ({held} allocated)"
    return NON_OK, "; ".join(f"GPU {g['index']} idle {_span(g['idle_seconds'])}, held by "
                             f"{', '.join(map(str, g['allocated_to']))}" for g in found)


def _verdicts(doc: JsonDoc, gpus: list[JsonDoc], resources: tuple[str, ...]) -> list[str]:
    out = [f"GPU {g.get('index')} {g.get('primary_bottleneck')}" for g in gpus
           if g.get("primary_bottleneck") in resources]
    out += [f"{w.get('name')} {w.get('primary_bottleneck')}" for w in doc.get("workloads") or ()
            if isinstance(w, dict) and w.get("primary_bottleneck") in resources]
    return out


def gpu_starved(doc: JsonDoc, args: argparse.Namespace) -> tuple[int, str]:
    found = _verdicts(doc, _gpus(doc), STARVATION_RULES)
    return (NON_OK, "starved: " + "; ".join(found)) if found else (OK, "no GPU starved by the host")


def gpu_throttled(doc: JsonDoc, args: argparse.Namespace) -> tuple[int, str]:
    found = _verdicts(doc, _gpus(doc), THROTTLE_RESOURCES)
    return (NON_OK, "throttled: " + "; ".join(found)) if found else (OK, "no GPU throttled")


CHECKS: dict[str, Callable[[JsonDoc, argparse.Namespace], tuple[int, str]]] = {
    "gpu-health": gpu_health, "gpu-idle": gpu_idle, "gpu-starved": gpu_starved, "gpu-throttled": gpu_throttled,
}


def _span(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 60:.0f}m" if seconds >= 60 else f"{seconds:.0f}s"


def _line(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters (control characters out: a hostile name cannot break it)."""
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def run(args: argparse.Namespace) -> tuple[int, str]:
    """(exit status, the one line to print)."""
    limit = max(1, args.max_length)
    try:
        code, message = CHECKS[args.check](fetch_status(args.agent, args.timeout), args)
    except CheckUnknown as exc:
        code, message = UNKNOWN, f"unknown: {exc}"
    except (TypeError, AttributeError, KeyError, ValueError) as exc:  # a status document not shaped as the agent's
        code, message = UNKNOWN, f"unknown: agent status malformed ({type(exc).__name__})"
    return code, _line(message, limit) + "\n"
