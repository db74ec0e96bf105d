"""GPU health: is this GPU fit for work, and if not, why and what would make it so (docs/analysis.md, GPU health).

Pure over the NVML collector's samples (no NVML call of its own: XIDs, ECC counters, row-remap state, clock-event
reasons and clocks are already read every tick). State across ticks (when a condition began, the XIDs last seen,
how long clocks have been held) lives in the ``HealthTracker``, so a replay reproduces it.

Each GPU has at most one entry per condition of ``CONDITIONS``, a closed set (the ``condition`` label of
``headroom_gpu_health_condition``); the GPU is healthy when none holds. Each condition clears when its cause does:

- ``gpu_lost``: NVML says the GPU is lost, not found or needs a reset (the collector marks it down); clears when it
  answers again.
- ``xid_reset_required``: an XID whose immediate action in NVIDIA's XID catalog is a GPU reset or a reboot
  (``XID_ACTIONS``) arrived. Clears when the GPU is seen to reset (it fell off NVML and came back, or its volatile
  uncorrected ECC count fell: both happen on a GPU reset or driver reload, and an agent restart starts the XID
  counts anew) or when no such XID recurred for ``health_xid_clear_seconds``.
- ``ecc_uncorrectable``: the volatile (since driver load) uncorrected ECC count is above 0; a GPU reset or driver
  reload zeroes it. The aggregate (lifetime) count never clears and is not a condition.
- ``row_remap_pending``: a row remap awaits a GPU reset; clears when the driver reports it done.
- ``row_remap_failed``: a row remap failed: the GPU needs service; clears when the driver stops reporting it.
- ``clocks_stuck``: a hardware slowdown (HW slowdown or power brake) held for ``health_clocks_stuck_seconds``, or a
  busy GPU's SM clock stayed at or below ``health_clock_low_ratio`` of its maximum with no clock-event reason that
  explains it (idle, application clocks, power cap, thermal) for as long; clears when the clocks move again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from headroom.samples import GpuSample

# the conditions, in the order they are reported; the action each asks for
CONDITIONS: tuple[str, ...] = (
    "gpu_lost", "xid_reset_required", "ecc_uncorrectable", "row_remap_pending", "row_remap_failed", "clocks_stuck",
)
ACTIONS: Mapping[str, str] = {
    "gpu_lost": "reboot",
    "xid_reset_required": "reset",  # or reboot, per XID_ACTIONS
    "ecc_uncorrectable": "reset",
    "row_remap_pending": "reset",
    "row_remap_failed": "service",
    "clocks_stuck": "inspect",
}
# XID -> what NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors, "Resolution Bucket (Immediate Action)") asks
# for: RESET_GPU ("reset") or RESTART_BM, a reboot of the machine ("reboot"). XIDs the catalog resolves by
# restarting the application (13, 31, 43, 45, 94 ...) or by nothing at all (92, a high correctable error rate) are
# not health conditions: 94's contained error leaves a pending row remap, which row_remap_pending reports.
XID_ACTIONS: Mapping[int, str] = {
    48: "reset",  # double-bit ECC error
    62: "reset",  # internal micro-controller halt
    63: "reset",  # ECC page retirement / row remapping recording event (takes effect at reset)
    64: "reset",  # ECC page retirement / row remapping failure
    74: "reset",  # NVLink error
    79: "reboot",  # GPU has fallen off the bus
    95: "reset",  # uncontained ECC error
    119: "reset",  # GSP RPC timeout
    120: "reset",  # GSP error
    140: "reset",  # ECC unrecovered error
}
# the clock-event reasons of a hardware slowdown (not the GPU's own power or thermal management)
HW_SLOWDOWN_REASONS = ("hw_slowdown", "hw_power_brake_slowdown")
# reasons that explain a low SM clock on a busy GPU (it is then not stuck)
EXPLAINED_LOW_CLOCK = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "sw_thermal_slowdown",
                       "hw_thermal_slowdown", "sync_boost", "display_clock_setting")
CLOCK_BUSY_RATIO = 0.5  # a GPU at least this busy whose clocks stay low is not low for lack of work


@dataclass(frozen=True, slots=True)
class Condition:
    condition: str  # one of CONDITIONS
    reason: str  # one line: what was seen
    action: str  # reset, reboot, service or inspect
    since: float  # sample monotonic time it began


@dataclass(frozen=True, slots=True)
class GpuHealth:
    index: int
    uuid: str
    conditions: tuple[Condition, ...] = ()

    @property
    def healthy(self) -> bool:
        return not self.conditions

    @property
    def status(self) -> str:
        return "healthy" if not self.conditions else "unhealthy"

    @property
    def reason(self) -> str:
        """One line: "healthy", or each condition's reason joined with "; "."""
        return "healthy" if not self.conditions else "; ".join(c.reason for c in self.conditions)


@dataclass
class _State:
    since: dict[str, float]  # condition -> when it began
    xids: Mapping[int, int]  # the XID counts last seen
    xid_last: float | None = None  # when a reset-class XID last arrived
    xid_codes: tuple[int, ...] = ()  # the reset-class XIDs since the last reset
    ecc_volatile: int | None = None
    was_down: bool = False
    hw_since: float | None = None
    low_since: float | None = None
    last: tuple[Mapping[str, tuple[str, str]], tuple[Condition, ...]] = ({}, ())  # the conditions found last tick and what they made


class HealthTracker:
    """Per-GPU health from each tick's NVML sample; keyed by UUID (an index can change across re-enumeration)."""

    def __init__(self, thresholds: Mapping[str, float]) -> None:
        self.clear_seconds = float(thresholds.get("health_xid_clear_seconds", 3600.0))
        self.stuck_seconds = float(thresholds.get("health_clocks_stuck_seconds", 300.0))
        self.low_ratio = float(thresholds.get("health_clock_low_ratio", 0.5))
        self._state: dict[str, _State] = {}

    def __call__(self, gpus: Sequence[GpuSample], now: float) -> tuple[GpuHealth, ...]:
        out = []
        seen = set()
        for g in gpus:
            key = g.uuid or f"index:{g.index}"
            seen.add(key)
            st = self._state.get(key)
            if st is None:
                st = self._state[key] = _State(since={}, xids={})  # the counts are since the agent started: all new
            out.append(GpuHealth(g.index, g.uuid, self._judge(g, st, now)))
        for key in [k for k in self._state if k not in seen]:
            del self._state[key]
        return tuple(out)

    def _judge(self, g: GpuSample, st: _State, now: float) -> tuple[Condition, ...]:
        found: dict[str, tuple[str, str]] = {}  # condition -> (reason, action)
        if not g.up:
            st.was_down = True
            found["gpu_lost"] = (f"does not answer NVML: {g.error or 'lost'}", ACTIONS["gpu_lost"])
        else:
            reset = st.was_down  # it fell off NVML and came back: a reset or driver reload
            st.was_down = False
            ecc = g.ecc_uncorrected_volatile_total
            if ecc is not None and st.ecc_volatile is not None and ecc < st.ecc_volatile:
                reset = True  # the volatile counter restarts at a reset or driver reload
            if ecc is not None:
                st.ecc_volatile = ecc
            self._xids(g, st, now, reset)
            if st.xid_codes:
                codes = ", ".join(str(c) for c in st.xid_codes)
                action = "reboot" if any(XID_ACTIONS[c] == "reboot" for c in st.xid_codes) else "reset"
                found["xid_reset_required"] = (f"XID {codes} needs a GPU {action}", action)
            if ecc:
                found["ecc_uncorrectable"] = (f"{ecc} uncorrected ECC error(s) since the driver loaded",
                                              ACTIONS["ecc_uncorrectable"])
            if g.remapped_rows_pending:
                found["row_remap_pending"] = ("a row remap awaits a GPU reset",
                                              ACTIONS["row_remap_pending"])
            if g.remapped_rows_failure:
                found["row_remap_failed"] = ("a row remap failed: the GPU needs service",
                                             ACTIONS["row_remap_failed"])
            stuck = self._clocks(g, st, now)
            if stuck:
                found["clocks_stuck"] = (stuck, ACTIONS["clocks_stuck"])
        if found == st.last[0]:  # the same as last tick (the usual case): last tick's objects, nothing rebuilt
            return st.last[1]
        for name in [c for c in st.since if c not in found]:
            del st.since[name]
        made = tuple(Condition(name, *found[name], st.since.setdefault(name, now)) for name in CONDITIONS if name in found)
        st.last = (found, made)
        return made

    def _xids(self, g: GpuSample, st: _State, now: float, reset: bool) -> None:
        counts = g.xid_errors_total
        if reset:
            st.xid_codes, st.xid_last = (), None
        if counts is not st.xids:
            new = [c for c, n in counts.items() if n > st.xids.get(c, 0) and c in XID_ACTIONS]
            if new:
                st.xid_codes = tuple(sorted({*st.xid_codes, *new}))
                st.xid_last = now
            st.xids = counts
        if st.xid_last is not None and self.clear_seconds > 0 and now - st.xid_last >= self.clear_seconds:
            st.xid_codes, st.xid_last = (), None

    def _clocks(self, g: GpuSample, st: _State, now: float) -> str:
        """Why the clocks count as stuck ("" when they do not): a hardware slowdown, or a low clock nothing explains,
        held for health_clocks_stuck_seconds. The text does not grow with the time held: it stays the same while
        the cause does (node-problem-detector can be set to update a condition on every new message)."""
        events = g.clock_events_active
        hw = [r for r in HW_SLOWDOWN_REASONS if events.get(r)]
        st.hw_since = (st.hw_since if st.hw_since is not None else now) if hw else None
        clock, top = g.sm_clock_hertz, g.sm_clock_max_hertz
        low = (clock is not None and top and g.utilization_ratio is not None
               and g.utilization_ratio >= CLOCK_BUSY_RATIO and clock <= self.low_ratio * top
               and not any(events.get(r) for r in EXPLAINED_LOW_CLOCK) and not hw)
        st.low_since = (st.low_since if st.low_since is not None else now) if low else None
        if st.hw_since is not None and now - st.hw_since >= self.stuck_seconds:
            return f"{' and '.join(hw)} active for {self.stuck_seconds:.0f} s or more"
        if st.low_since is not None and now - st.low_since >= self.stuck_seconds and clock is not None and top:
            return (f"SM clock held at {clock / 1e6:.0f} MHz ({clock / top:.0%} of max) for "
                    f"{self.stuck_seconds:.0f} s or more while busy, with no clock-event reason")
        return ""

