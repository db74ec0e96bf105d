"""The README names every command `headroom --help` has and every resource the analysis classifies (issue 29:
`fleet-report`, `nvlink` and `kv_cache` were missing)."""

from __future__ import annotations

import re

from headroom.analysis.bottleneck import RESOURCES
from headroom.cli import build_parser

from conftest import ROOT

README = (ROOT / "README.md").read_text()


def _commands() -> set[str]:
    # private: argparse's own list of a parser's actions: argparse has no public one
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    return set(sub.choices)


def test_the_readme_lists_every_command():
    line = next(x for x in README.split("\n\n") if "Commands: `" in x)
    listed = set(re.findall(r"`([a-z-]+)`", line.split("Commands:", 1)[1].split(";", 1)[0]))
    assert listed == _commands()


def test_the_readme_lists_every_resource():
    section = README.split("## What limits it", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"`([a-z_]+)`", section.split("names a primary", 1)[0])
    assert set(RESOURCES) <= set(listed), sorted(set(RESOURCES) - set(listed))
