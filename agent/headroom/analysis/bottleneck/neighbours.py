"""The processes outside a workload that press on the host (sources/neighbours.py found them): ``neighbours_of``
ranks them per resource, ``neighbour_text`` words them, ``_name_neighbours`` adds them to a workload's evidence for
cpu, disk_io and host_memory."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from headroom.analysis.bottleneck.evidence import Result, Scored, gib, pct
from headroom.analysis.signals import HostSignals

if TYPE_CHECKING:
    from headroom.samples import Neighbour

# resource -> (what a neighbour uses of it, its share, how to say it): the evidence names who else presses
NEIGHBOUR_RESOURCES: dict[str, tuple[str, str, str]] = {
    "cpu": ("cpu_cores", "cpu_share", "of the CPUs"),
    "disk_io": ("io_bytes_per_second", "io_share", "of the processes' disk I/O"),
    "host_memory": ("rss_bytes", "memory_share", "of RAM"),
}
NEIGHBOUR_MIN = {"cpu": 0.1, "disk_io": 1e6, "host_memory": 256 * 2**20}  # as sources/neighbours.py names them


# (id of a neighbours tuple, resource) -> (that tuple, its neighbours above NEIGHBOUR_MIN for the resource, largest
# first): ranked once per scan, not once per workload scored (50 pods a tick, each asking for three resources twice)
_RANKED: dict[tuple[int, str], tuple[tuple[Neighbour, ...], tuple[Neighbour, ...]]] = {}
RANKED_MAX = 64  # entries kept (a scan's short and long host signals share its tuple; three resources each)
NEIGHBOUR_TEXTS = 256  # evidence texts kept (neighbour_text): one per resource and top 3 in the windows scored


def neighbours_of(h: HostSignals, resource: str, workload: str | None) -> list[Neighbour]:
    """The top 3 processes outside ``workload`` pressing on ``resource``, largest first (issue 12, class 8):
    what sources/neighbours.py found while the host was under pressure; empty on a calm host."""
    everyone = h.neighbours
    if not everyone:
        return []
    key = (id(everyone), resource)
    known = _RANKED.get(key)
    if known is None or known[0] is not everyone:
        amount, floor = NEIGHBOUR_RESOURCES[resource][0], NEIGHBOUR_MIN[resource]
        if len(_RANKED) >= RANKED_MAX:
            _RANKED.clear()
        known = _RANKED[key] = (everyone, tuple(sorted(
            (n for n in everyone if (getattr(n, amount) or 0) >= floor), key=lambda n: -(getattr(n, amount) or 0))))
    out = []  # a stable sort then a filter: the order filtering first and sorting then gives
    for n in known[1]:
        if n.workload != workload:
            out.append(n)
            if len(out) == 3:
                break
    return out


def neighbour_text(resource: str, found: Sequence[Neighbour]) -> str:
    """'outside the workload: stress-ng (user bob, pid 4242) 7.90 cores, 49 % of the CPUs; ...'. The same
    neighbours (equal values) make the same text: kept (NEIGHBOUR_TEXTS), since every workload scored while they
    press on the host names them."""
    try:
        return _neighbour_text(resource, tuple(found))
    except TypeError:  # an unhashable field: made each time
        return _neighbour_text.__wrapped__(resource, tuple(found))


@functools.lru_cache(maxsize=NEIGHBOUR_TEXTS)
def _neighbour_text(resource: str, found: tuple[Neighbour, ...]) -> str:
    amount, share, of = NEIGHBOUR_RESOURCES[resource]
    parts = []
    for n in found:
        value = getattr(n, amount)
        used = {"cpu": f"{value:.2f} {'core' if value == 1 else 'cores'}", "disk_io": f"{value / 1e6:.0f} MB/s",
                "host_memory": gib(value)}[resource]
        owner = f"workload {n.workload}, " if n.workload else ""
        ratio = getattr(n, share)
        parts.append(f"{n.name} ({owner}user {n.user}, pid {n.pid}) {used}"
                     + (f", {pct(ratio)} {of}" if ratio is not None else ""))
    return "outside the workload: " + "; ".join(parts)


def _name_neighbours(results: dict[str, Result], h: HostSignals, workload: str) -> None:
    for resource in NEIGHBOUR_RESOURCES:
        found = neighbours_of(h, resource, workload)
        if found:
            res = results[resource]  # keep a Scored's direct-evidence flag (ties, decide)
            results[resource] = Scored(res[0], f"{res[1]}; {neighbour_text(resource, found)}",
                                       getattr(res, "direct", False))
