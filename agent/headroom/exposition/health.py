"""The agent's health as /healthz and the status API both say it (one text for both): the state the server and the
status read (``State``), ``health`` and what is degraded while the agent itself works. Below server.py and
status_api.py, which both use it (server.py serves status_api.py's document, so neither may import the other
for it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from headroom.samples import Snapshot


class State(Protocol):
    snapshot: Snapshot | None

    def healthy(self) -> tuple[bool, str]: ...


def health(state: State, snapshot: Snapshot | None) -> tuple[bool, str, list[str]]:
    """(ok, text, degraded): /healthz's answer and the status API's ``health``, one text for both: 'ok', or 'ok;
    degraded: nvml: NVML unavailable ...' while the agent works but a collector or GPU does not."""
    ok, reason = state.healthy()
    degraded = _degraded(state, snapshot)
    return ok, reason if not degraded else reason + "; degraded: " + "; ".join(degraded), degraded


def _degraded(state: State, snapshot: Snapshot | None) -> list[str]:
    """What is broken while the agent itself works: failing collectors, then GPUs that stopped answering."""
    out = [f"{k}: {v}" for k, v in sorted(getattr(state, "failing", {}).items())]
    nvml = snapshot.sample.data("nvml") if snapshot is not None else None
    for g in getattr(nvml, "gpus", ()):
        if not g.up:
            out.append(f"gpu {g.index}" + (f" {g.uuid}" if g.uuid else "") + f": {g.error or 'down'}")
    return out
