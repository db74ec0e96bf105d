"""The suite itself: what `make test` (and so CI, .ci/run) runs, and that it runs in random order."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SKIP = {".venv", ".git", "build", ".pytest_cache", ".hypothesis", "mutants", "node_modules"}


def _test_files():
    """Every test_*.py of the repository (virtualenvs, build trees and caches pruned, not walked)."""
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP and not d.endswith(".egg-info")]
        for name in files:
            if name.startswith("test_") and name.endswith(".py"):
                yield (Path(top) / name).relative_to(ROOT)


def test_every_test_file_is_under_a_testpath():
    """A test file outside ``testpaths`` never runs in `make test` (bench/test_bench.py did not)."""
    testpaths = PYPROJECT["tool"]["pytest"]["ini_options"]["testpaths"]
    outside = [str(f) for f in _test_files() if f.parts[0] not in testpaths]
    assert not outside, f"never run by `make test`: {outside}; add their folder to testpaths"
    assert "bench" in testpaths


def test_the_suite_runs_in_random_order():
    """pytest-randomly shuffles every run and prints its seed; -p no:randomly is for local bisecting only."""
    extra = PYPROJECT["project"]["optional-dependencies"]["test"]
    assert any(d.startswith("pytest-randomly") for d in extra), extra
    addopts = PYPROJECT["tool"]["pytest"]["ini_options"].get("addopts", "")
    assert "no:randomly" not in addopts and "randomly-dont-reorganize" not in addopts
