"""Time-varying signals of a scenario, and the clock they are read on.

``Signal`` is a value over scenario time (constant, sine, steps or ramp, plus reproducible noise): how a
scenario file declares each GPU reading, host reading and stand-in's use (docs/scenario-format.md).
``ManualClock`` is the clock that moves only when told (tests, ``make accuracy``). The bottom of the
simulation: its other modules may import this one, and it imports none of them.
"""

from __future__ import annotations

import hashlib
import math
import threading
from bisect import bisect_right
from dataclasses import dataclass


# ---------------------------------------------------------------------------------------------- clock
class ManualClock:
    """A clock that moves only when told: ``clock()`` returns seconds, ``advance(dt)`` moves it on."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock forward; return the new time."""
        with self._lock:
            self._now += seconds
            return self._now

    def set(self, seconds: float) -> None:
        self._now = float(seconds)


# -------------------------------------------------------------------------------------------- signals
@dataclass(frozen=True, slots=True)
class Signal:
    """A value over scenario time: constant, sine, steps (piecewise constant) or ramp, plus noise.

    ``at(t)`` returns the value at ``t`` seconds since the scenario started. Noise is uniform in
    [-noise, +noise], held for one second, and derived from (seed, key, second): the same scenario gives
    the same values whatever order they are read in.
    """

    kind: str  # constant | sine | steps | ramp
    value: float = 0.0  # constant
    low: float = 0.0  # sine min, ramp from
    high: float = 0.0  # sine max, ramp to
    period: float = 0.0  # sine period; steps cycle length when repeat
    phase: float = 0.0  # sine: seconds added to t
    start: float = 0.0  # ramp start
    over: float = 0.0  # ramp length
    steps: tuple[tuple[float, float], ...] = ()
    repeat: bool = False
    noise: float = 0.0
    seed: int = 0
    key: str = ""
    lower: float | None = None  # clamp
    upper: float | None = None

    def at(self, t: float) -> float:
        """The signal's value at scenario time ``t`` (seconds), clamped to its bounds."""
        if self.kind == "constant":
            v = self.value
        elif self.kind == "sine":
            mid, amp = (self.low + self.high) / 2, (self.high - self.low) / 2
            v = mid + amp * math.sin(2 * math.pi * (t + self.phase) / self.period)
        elif self.kind == "steps":
            if self.repeat:
                t = t % self.period
            i = bisect_right([s[0] for s in self.steps], t) - 1
            v = self.steps[max(i, 0)][1]
        elif self.kind == "ramp":
            if t <= self.start or self.over <= 0:
                v = self.low if t <= self.start else self.high
            else:
                v = self.low + (self.high - self.low) * min(1.0, (t - self.start) / self.over)
        else:  # pragma: no cover - kinds are fixed by the parser
            raise ValueError(f"unknown signal kind {self.kind!r}")
        if self.noise:
            v += self.noise * _unit_noise(self.seed, self.key, math.floor(t))
        if self.lower is not None and v < self.lower:
            v = self.lower
        if self.upper is not None and v > self.upper:
            v = self.upper
        return v


def constant(value: float) -> Signal:
    """A signal that always reads ``value``."""
    return Signal("constant", value=float(value))


def _unit_noise(seed: int, key: str, second: int) -> float:
    """A reproducible number in [-1, 1] for (seed, key, second)."""
    digest = hashlib.blake2b(f"{seed}:{key}:{second}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**63 - 1.0

