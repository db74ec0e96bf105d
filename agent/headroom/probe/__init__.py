"""``headroom probe``: capacity under representative load (docs/probe.md, issue 28).

A command, never run by the daemon: it drives a serving runtime's OpenAI-compatible API with the load a
workload profile declares (``load:``), step by step, until a step breaks the profile's ``slo:`` or error budget,
and reports the capacity at the objective with what the host showed meanwhile.

Modules: client.py (the HTTP client: one streamed request, prompts of exact length), load.py (schedules: the
levels of a ramp, Poisson arrivals), stats.py (percentiles, a step's figures), run.py (the orchestration and the
stop rules), host.py (what the host does during a step), answer.py (the capacity sentence), store.py (the last
result on disk). Every limit below is refused with one line when a flag or profile asks for more.
"""

from __future__ import annotations

# bounds of a run (flags and profiles beyond them are refused with one line: absurd, or a denial of service)
MAX_CONCURRENCY = 1024  # concurrent requests (closed loop), and requests in flight (open loop)
MAX_RATE = 1000.0  # requests/s of an open-loop step
MIN_RATE = 0.01  # requests/s: below this a step of minutes sees no request
MAX_DURATION = 3600.0  # seconds of a whole probe (--duration)
DEFAULT_DURATION = 600.0
MIN_STEP_SECONDS = 1.0  # a step shorter than this measures nothing steady
MAX_STEP_SECONDS = 600.0
DEFAULT_STEP_SECONDS = 20.0  # each level is held this long ...
DEFAULT_WARMUP_SECONDS = 5.0  # ... of which the first seconds are discarded (requests started in them)
MAX_STEPS = 64  # levels of one schedule
MAX_INPUT_TOKENS = 1 << 20  # tokens of one prompt (also profiles.MAX_LOAD_TOKENS)
MAX_OUTPUT_TOKENS = 1 << 17  # tokens one request may ask for
DEFAULT_INPUT_TOKENS = 256  # without a profile's load: (nor --input-tokens)
DEFAULT_OUTPUT_TOKENS = 128
DEFAULT_REQUEST_TIMEOUT = 120.0  # seconds one request may take, first byte to last (--request-timeout)
MAX_REQUEST_TIMEOUT = 3600.0
DEFAULT_ERROR_BUDGET = 0.01  # share of failed requests a step may have without slo.error_rate
ABORT_ERROR_RATE = 0.5  # a step aborts at once when more than this share of its finished requests failed ...
ABORT_MIN_FINISHED = 8  # ... once at least this many finished (a refused or broken endpoint: stop within a second)
STOP_GRACE_SECONDS = 1.0  # Ctrl-C and aborts: requests in flight are cancelled within this
LAG_SATURATED = 0.05  # seconds the client's event loop may lag (p95 of a 50 ms ticker) before it is "saturated"
CPU_SATURATED = 0.9  # share of one core the client process may use before it is "saturated"
