"""The vocabulary of the bottleneck rules: the resources a verdict scores (``RESOURCES``, ``NONE``, the starvation
rules among them), a rule's result (``Result``: (score, evidence); ``Scored``: with whether it rests on direct
evidence) and the wording of the evidence (``pct``, ``plural``, ``gib``, ``NO_GPM``). Imports no other module of
the package."""

from __future__ import annotations

from headroom.units import format_size

RESOURCES = ("gpu_compute", "gpu_memory", "cpu", "host_memory", "shared_memory", "disk_io", "pcie",
             "gpu_thermal", "gpu_power", "network", "nvlink", "kv_cache")  # fmt: skip
NONE = "none"

Result = tuple[float, str]  # (score, evidence), a Scored where the rule tells direct evidence from host-wide (see decide)
STARVATION_RULES = ("cpu", "host_memory", "shared_memory", "disk_io", "network")
NO_GPM = "utilization alone: no GPM activity ratios on this GPU, a weaker signal"


def pct(x: float | None) -> str:
    return "?" if x is None else f"{x * 100:.0f} %"


def plural(n: float | None, word: str, words: str | None = None) -> str:
    """'1 DataLoader worker', '4 DataLoader workers', '1 process', '? processes' (unknown count)."""
    many = words or (word + "es" if word.endswith(("s", "x", "ch", "sh")) else word + "s")
    if n is None:
        return f"? {many}"
    return f"{n:g} {word if n == 1 else many}"


def gib(n: float | None) -> str:
    """A size in the evidence: the unit chosen by its size (units.format_size: '64.0 MiB left of 512 MiB', never
    '0.0 GiB left of 0.1 GiB')."""
    return format_size(n)


class Scored(tuple[float, str]):
    """A rule's (score, evidence), which unpacks as the pair every caller expects, plus ``direct``: whether the
    score rests on direct evidence (the workload's own consumption or stall) rather than a host-wide
    correlation. Ties use it (see decide); a plain (score, evidence) pair counts as direct for the GPU's own
    rules and host-wide for the starvation rules."""

    direct: bool

    def __new__(cls, score: float, text: str, direct: bool) -> Scored:
        obj = super().__new__(cls, (score, text))
        obj.direct = direct
        return obj
