"""A verdict and how it is decided: ``Verdict`` (scores, evidence, candidate, primary), ``decide`` (the candidate
among the scores; ties go to the cause (``EXPLAINS``), then to direct evidence; ``CPU_WORK_PRECEDES`` for work without
a GPU), ``_verdict`` (the rules' results into a Verdict) and ``Hysteresis`` (a candidate becomes the primary after
``analysis.hold``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from headroom.analysis.bottleneck.evidence import NONE, RESOURCES, STARVATION_RULES, Result

if TYPE_CHECKING:
    from headroom.analysis.remedies import Remedy


@dataclass(frozen=True)
class Verdict:
    """Scores and evidence for one GPU or workload, and the primary after hysteresis."""

    scores: Mapping[str, float]
    evidence: Mapping[str, str]
    candidate: str  # the top-scoring resource this tick (or none)
    primary: str = NONE  # after hysteresis
    long_scores: Mapping[str, float] = field(default_factory=dict)
    # the candidate that differs from the primary and holds, not yet for analysis.hold (none when nothing is
    # pending): how long it has held and how long it still must to become the primary (Hysteresis.pending)
    pending: str = NONE
    pending_seconds: float | None = None
    confirm_in_seconds: float | None = None
    # resource -> what to do about it (analysis/remedies.py), for the primary and the pending candidate
    remedies: Mapping[str, Remedy] = field(default_factory=dict)

    @property
    def is_pending(self) -> bool:
        """A candidate other than the primary waits out its hold (it may be none: a return to nothing)."""
        return self.pending_seconds is not None


# cause -> the resources whose signals it produces (docs/analysis.md, "Ties"): when a cause and its effect tie, the
# cause is the bottleneck. Memory pressure burns CPU in reclaim (kswapd, direct reclaim) and turns into disk I/O
# (swap, page cache refaults); a throttled GPU is slow at computing because of the throttling.
EXPLAINS: dict[str, tuple[str, ...]] = {
    "host_memory": ("cpu", "disk_io"),
    "gpu_thermal": ("gpu_compute",),
    "gpu_power": ("gpu_compute",),
    # a kernel that waits on a transfer or a collective counts as "utilization"; a NIC's traffic crosses PCIe
    # (bounce buffers of a socket transport, GPUDirect RDMA)
    "pcie": ("gpu_compute",),
    "nvlink": ("gpu_compute",),
    "network": ("gpu_compute", "pcie"),
}


# work without a GPU (cpu-inference, a serving runtime on a GPU-less host): cause -> the effects it explains whatever
# their scores, once the cause itself is at or above primary_min_score (docs/analysis.md, "Work without a GPU"). A
# runtime whose KV cache is full while requests wait or are preempted saturates its cores with that very work (a
# preempted sequence is recomputed from its prompt, every step re-reads a cache it cannot grow): more cache is what
# lets it through, so kv_cache is the verdict and its remedy; with room in the cache, cpu (the compute) is.
CPU_WORK_PRECEDES: dict[str, tuple[str, ...]] = {"kv_cache": ("cpu",)}
PRECEDENCE_WHY = {"kv_cache": "the cores are busy with sequences the full cache preempts and recomputes, and more "
                              "cache admits the waiting requests"}


def candidate_of(scores: Mapping[str, float], t: Mapping[str, float],
                 direct: frozenset[str] | set[str] | None = None) -> str:
    """The top-scoring resource at or above primary_min_score, else none; ties are decided by :func:`decide`."""
    return decide(scores, t, direct)[0]


def decide(scores: Mapping[str, float], t: Mapping[str, float],
           direct: frozenset[str] | set[str] | None = None,
           precedes: Mapping[str, tuple[str, ...]] | None = None) -> tuple[str, str]:
    """(candidate, why the tie went its way or ""). ``precedes`` (cause -> effects, CPU_WORK_PRECEDES) first: the
    top resource gives way to a cause of it that scores at or above primary_min_score, however much lower. Then
    scores within ``tie_margin`` of the top tie; among them (1) a cause beats the effects it explains
    (EXPLAINS), (2) direct evidence (the GPU's own counters, the workload's own consumption or stall) beats a
    host-wide correlation, (3) the higher score wins, and only an exact tie left after all that falls back to the
    fixed order of RESOURCES."""
    top = max(scores.get(r, 0.0) for r in RESOURCES)
    if top < t["primary_min_score"]:
        return NONE, ""
    for cause, effects in (precedes or {}).items():
        if scores.get(cause, 0.0) >= t["primary_min_score"]:
            beaten = [r for r in effects if scores.get(r, 0.0) >= top - t.get("tie_margin", 0.0)]
            if beaten:
                return cause, f"{cause} precedes {', '.join(beaten)} for work without a GPU"
    tied = [r for r in RESOURCES if scores.get(r, 0.0) >= max(top - t.get("tie_margin", 0.0), t["primary_min_score"])]
    if len(tied) == 1:
        return tied[0], ""
    why = []
    causes = [r for r in tied if not any(r in EXPLAINS.get(o, ()) for o in tied if o != r)]
    if causes and len(causes) < len(tied):
        explained = [r for r in tied if r not in causes]
        why.append(f"{', '.join(causes)} explains {', '.join(explained)}")
        tied = causes
    if direct is not None and len(tied) > 1:
        own = [r for r in tied if r in direct]
        if own and len(own) < len(tied):
            why.append(f"direct evidence for {', '.join(own)}, host-wide only for "
                       f"{', '.join(r for r in tied if r not in own)}")
            tied = own
    best = max(tied, key=lambda r: scores.get(r, 0.0))  # max keeps the first (RESOURCES order) of equal scores
    return best, "; ".join(why)


def _verdict(results: Mapping[str, Result], t: Mapping[str, float],
             precedes: Mapping[str, tuple[str, ...]] | None = None) -> Verdict:
    scores = {r: round(results[r][0], 4) for r in RESOURCES}
    evidence = {r: results[r][1] for r in RESOURCES}
    direct = {r for r in RESOURCES if getattr(results[r], "direct", r not in STARVATION_RULES)}
    candidate, why = decide(scores, t, direct, precedes)
    if why and " precedes " in why:
        evidence[candidate] = f"{evidence[candidate]} (decided by causal evidence: {why}: {PRECEDENCE_WHY[candidate]})"
    elif why:
        evidence[candidate] = f"{evidence[candidate]} (a tie decided by causal evidence: {why})"
    return Verdict(scores=scores, evidence=evidence, candidate=candidate)


@dataclass
class Hysteresis:
    """The primary changes only after a new candidate has held for ``hold`` seconds."""

    hold: float
    primary: str = NONE
    candidate: str = NONE
    since: float | None = None

    def update(self, candidate: str, now: float) -> tuple[str, bool]:
        """(primary, changed) after seeing ``candidate`` at monotonic time ``now``."""
        if candidate == self.primary:
            self.candidate, self.since = candidate, None
            return self.primary, False
        if candidate != self.candidate or self.since is None:
            self.candidate, self.since = candidate, now
        if now - self.since >= self.hold:
            self.primary, self.since = candidate, None
            return self.primary, True
        return self.primary, False

    def pending(self, now: float) -> tuple[str, float, float] | None:
        """(candidate, seconds it has held, seconds it must still hold) while a candidate other than the primary
        waits out its hold, else None. Called after :meth:`update` with the same ``now``."""
        if self.since is None or self.candidate == self.primary:
            return None
        held = max(0.0, now - self.since)
        return self.candidate, held, max(0.0, self.hold - held)

    def interrupt(self) -> None:
        """A tick without a verdict (the GPU or workload was not seen): a pending candidate must start its
        hold again when it comes back; the primary stays."""
        self.candidate, self.since = self.primary, None
