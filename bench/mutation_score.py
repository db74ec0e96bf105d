"""Mutation score per module from `mutmut results --all true` (make mutate; docs/testing.md).

Score = killed / (every mutant but the skipped ones): a mutant no selected test reaches ("no tests")
counts as surviving, because it does.
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict

LINE = re.compile(r"^\s*(?P<name>[\w.]+)__mutmut_\d+: (?P<status>.+?)\s*$")
KILLED = {"killed", "timeout", "segfault", "caught by type check"}


def module_of(name: str) -> str:
    """src.headroom.analysis.bottleneck.x_rule_cpu -> headroom.analysis.bottleneck"""
    parts = name.split(".")
    while parts and ("ǁ" in parts[-1] or parts[-1].startswith("x_")):
        parts.pop()
    return ".".join(p for p in parts if p != "src")


def scores(lines: list[str]) -> dict[str, Counter]:
    out: dict[str, Counter] = defaultdict(Counter)
    for line in lines:
        m = LINE.match(line)
        if m:
            out[module_of(m["name"])][m["status"]] += 1
    return out


def table(by_module: dict[str, Counter]) -> str:
    rows = ["| module | mutants | killed | survived | no tests | score |", "|---|---:|---:|---:|---:|---:|"]
    total = Counter()
    for module in sorted(by_module):
        c = by_module[module]
        total.update(c)
        rows.append(_row(module, c))
    rows.append(_row("**all**", total))
    return "\n".join(rows) + "\n"


def _row(label: str, c: Counter) -> str:
    counted = sum(v for k, v in c.items() if k != "skipped")
    killed = sum(v for k, v in c.items() if k in KILLED)
    score = f"{100 * killed / counted:.1f} %" if counted else "-"
    return f"| {label} | {counted} | {killed} | {c['survived']} | {c['no tests']} | {score} |"


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(table(scores(f.readlines())), end="")
