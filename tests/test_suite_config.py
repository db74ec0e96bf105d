"""The suite itself: what `make test` (and so CI, .ci/run) runs, and that it runs in random order."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SKIP = {".venv", ".venv-real", ".git", "build", ".pytest_cache", ".hypothesis", "mutants", "node_modules"}


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


def test_make_test_runs_the_files_in_parallel_workers():
    makefile = (ROOT / "Makefile").read_text()
    assert "-n $(TEST_JOBS) --dist loadfile" in makefile
    assert "$(PY) -m pytest $(PARALLEL)" in makefile
    extra = PYPROJECT["project"]["optional-dependencies"]["test"]
    assert any(d.startswith("pytest-xdist") for d in extra), extra


ORDER_PROBE = """
import os, pytest

@pytest.mark.parametrize("i", range(12))
def test_n(i):
    with open(os.environ["ORDER_LOG"], "a") as f:
        f.write(f"{i}\\n")
"""


def _order(tmp_path, *args: str) -> tuple[list[str], str]:
    log = tmp_path / f"order-{len(list(tmp_path.iterdir()))}.log"
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-c", os.devnull,
                        "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py"), *args],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "ORDER_LOG": str(log)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return log.read_text().split(), r.stdout


def test_the_seed_is_printed_and_orders_the_tests_the_same_with_workers_or_without(tmp_path):
    """The seed `make test` prints reproduces its order: pytest-xdist workers shuffle with the controller's
    seed (a file runs in one worker with --dist loadfile), so a run in one process with that seed sees
    each file's tests in the same order."""
    (tmp_path / "test_probe.py").write_text(ORDER_PROBE)
    parallel, out = _order(tmp_path, "-n", "2", "--dist", "loadfile", "-p", "randomly", "--randomly-seed=4242")
    assert "Using --randomly-seed=4242" in out
    serial, out = _order(tmp_path, "-p", "no:xdist", "-p", "randomly", "--randomly-seed=4242")
    assert "Using --randomly-seed=4242" in out
    other, _ = _order(tmp_path, "-p", "no:xdist", "-p", "randomly", "--randomly-seed=4243")
    assert parallel == serial and sorted(serial, key=int) == [str(i) for i in range(12)]
    assert other != serial  # the seed does order them (12! orders: the same one by chance is out of reach)
