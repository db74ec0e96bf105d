"""The suite itself: what `make test` (and so CI, .ci/run) runs, and that it runs in random order."""

from __future__ import annotations

import ast
import os
import re
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


# ------------------------------------------------------------------ the lanes (tests/lanes.py, docs/testing.md)
LANES_PROBE = """
import subprocess, sys, pytest

def test_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_swallows_the_refusal():
    try:
        subprocess.run([sys.executable, "-c", "pass"])
    except Exception:
        pass

def test_forks():
    import os
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)

@pytest.fixture(scope="module")
def server():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    yield p
    p.kill()

def test_uses_a_module_fixture_that_starts_one(server):
    pass

def test_starts_none():
    assert sum([1, 2]) == 3

@pytest.mark.external
def test_marked_external_may():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
"""


def test_a_test_that_starts_a_process_and_is_not_listed_external_fails_in_every_run(tmp_path):
    """The guard of tests/lanes.py: an unlisted test that starts a process fails, even where its code catches the
    refusal or a module fixture starts it, and says where to list it; a listed (external) one may, and a test that
    starts none passes. So a new test cannot join the fast lane (`make check`) by starting a process unnoticed."""
    (tmp_path / "test_probe_lanes.py").write_text(LANES_PROBE)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-p",
                        "no:xdist", "-c", os.devnull, "--rootdir", str(tmp_path), "-p", "lanes", "-rA",
                        str(tmp_path / "test_probe_lanes.py")], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "tests")})
    out = r.stdout
    outcome = {}
    for line in out.splitlines():
        for word in ("PASSED", "FAILED", "ERROR"):
            if line.startswith(word + " "):
                outcome[line.split("::")[1].split()[0]] = word
    assert outcome == {"test_starts_a_process": "FAILED", "test_swallows_the_refusal": "FAILED",
                       "test_forks": "FAILED", "test_uses_a_module_fixture_that_starts_one": "ERROR",
                       "test_starts_none": "PASSED", "test_marked_external_may": "PASSED"}, out[-4000:]
    assert "is not in EXTERNAL of tests/lanes.py: add it there" in out
    assert "test_starts_a_process started a process (" in out and "-c pass)" in out


def test_every_entry_of_the_lanes_names_a_test_that_exists():
    """A renamed or deleted test leaves no stale entry in EXTERNAL or SLOW (tests/lanes.py)."""
    import lanes

    for table in (lanes.EXTERNAL, lanes.SLOW):
        assert table
        for key, why in table.items():
            path, _, name = key.partition("::")
            assert (ROOT / path).is_file(), f"{key}: no such file"
            assert why.strip(), f"{key}: say why"
            if name:
                function = name.split("[", 1)[0].split("::")[-1]
                source = (ROOT / path).read_text()
                assert re.search(rf"^\s*(async )?def {function}\(", source, re.M), f"{key}: no such test"


# what in a test's own body says it starts a process (the guard above catches the rest, where it runs)
_STARTS = re.compile(r"\bsubprocess\b|\bPopen\b|shutil\.which|\bos\.(fork|forkpty|system|posix_spawnp?)\b|"
                     r"create_subprocess|\bAgent\(|\bagent_factory\b")


def _test_functions(path: Path):
    """(test name as in a node id, its code and argument names) of each test function of a file, methods of
    classes included."""
    source = path.read_text()
    lines = source.splitlines()
    for node in ast.parse(source).body:
        members = [(f"{node.name}::", n) for n in node.body] if isinstance(node, ast.ClassDef) else [("", node)]
        for prefix, fn in members:
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and fn.name.startswith("test_"):
                body = fn.body[1:] if ast.get_docstring(fn) is not None else fn.body  # the docstring may say so
                code = [line for part in fn.decorator_list for line in lines[part.lineno - 1:part.end_lineno]]
                code += lines[body[0].lineno - 1:fn.end_lineno] if body else []
                yield prefix + fn.name, " ".join([*code, *(a.arg for a in fn.args.args)])


def test_a_test_that_says_it_starts_a_process_is_listed_external():
    """Statically, beside the guard: a test whose body names subprocess, Popen, shutil.which, os.fork/system/
    posix_spawn, an Agent or agent_factory is in EXTERNAL (its file, itself or one of its parameters), so a test
    that only starts its tool where the tool is installed (shutil.which) is listed even on a machine without it."""
    import lanes

    unlisted = []
    for path in _test_files():
        key = path.as_posix()
        if key in lanes.EXTERNAL:
            continue
        for name, text in _test_functions(ROOT / path):
            test = f"{key}::{name}"
            if _STARTS.search(text) and test not in lanes.EXTERNAL and not any(
                    k.startswith(test + "[") for k in lanes.EXTERNAL):
                unlisted.append(test)
    assert not unlisted, f"these tests start a process: add them to EXTERNAL in tests/lanes.py (with why): {unlisted}"


def test_the_marks_of_the_lanes_are_given_in_tests_lanes_py_only():
    """One place: no test file marks itself external or slow, and every real-component file is EXTERNAL."""
    import lanes

    for path in _test_files():
        source = (ROOT / path).read_text()
        if path.as_posix() != "tests/test_suite_config.py":  # its LANES_PROBE marks a test on purpose
            assert not re.search(r"mark\.(external|slow)\b", source), f"{path}: list it in tests/lanes.py instead"
        if path.name.startswith("test_real_"):
            assert path.as_posix() in lanes.EXTERNAL, f"{path}: a real-component file, list it in EXTERNAL"


def test_make_check_is_lint_and_the_unlisted_tests_and_make_test_lints_too():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^check: lint$", makefile, re.M)
    assert '-m "not external and not slow"' in makefile
    lint = re.search(r"^lint: venv\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert "ruff check" in lint and "mypy" in lint
    test = re.search(r"^test: .*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert test.splitlines()[0].strip() == "@$(MAKE) --no-print-directory lint"
    markers = PYPROJECT["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("external:") for m in markers) and any(m.startswith("slow:") for m in markers)


def _described_targets() -> dict[str, list[str]]:
    """Target -> its "## " lines, for every target line of the Makefile (rule lines of files excluded)."""
    targets, lines = {}, []
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line.startswith("## "):
            lines.append(line[3:])
        elif m := re.match(r"^([a-z][a-z-]*):(?!=)", line):
            targets[m.group(1)] = lines
            lines = []
    return targets


def test_every_target_has_a_description():
    makefile = (ROOT / "Makefile").read_text()
    phony = re.search(r"^\.PHONY: (.*)$", makefile, re.M).group(1).split()
    targets = _described_targets()
    assert set(phony) <= set(targets), set(phony) - set(targets)
    missing = [t for t, lines in targets.items() if not lines]
    assert not missing, f"targets without a '## ' line above them: {missing}"
    assert set(targets) <= set(phony), f"not in .PHONY: {set(targets) - set(phony)}"


def test_make_help_lists_every_target_with_its_description():
    r = subprocess.run(["make", "--no-print-directory", "-s", "help"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    listed = {}
    for line in r.stdout.splitlines():
        name, _, text = line.strip().partition(" ")
        if line.startswith("  ") and not line.startswith("   "):
            listed[name] = text.strip()
    targets = _described_targets()
    assert set(listed) == set(targets)
    for target, lines in targets.items():
        assert listed[target] == lines[0], target
    assert all(line in r.stdout for lines in targets.values() for line in lines)


# The names with a leading underscore that are public API of the standard library, not private: a namedtuple's
# _fields/_asdict/_replace/_make, a ctypes Structure's _fields_, os._exit (the only exit a forked child may take).
PUBLIC_UNDERSCORED = {"_fields", "_asdict", "_replace", "_make", "_fields_", "_exit"}
PRIVATE_MARK = "# private:"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__")) and \
        name not in PUBLIC_UNDERSCORED


def private_reaches(source: str) -> list[tuple[int, str]]:
    """(line, what) of each place ``source`` reaches a private name that is not its own and that no ``# private:``
    comment explains: ``x._name`` (not on self/cls), ``from headroom... import _name``, and a private name given as
    a string to setattr/delattr/getattr/hasattr (monkeypatch.setattr(module, "_NAME", ...)). The comment stands on
    the reach's line, on a line of its statement before it, or alone on the line above the statement."""
    tree, lines = ast.parse(source), source.splitlines()
    own = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    for n in ast.walk(tree):  # the file's own private names: module-level or local variables and self attributes
        for t in n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []:
            if isinstance(t, ast.Name):
                own.add(t.id)
            elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                own.add(t.attr)
    starts: dict[int, int] = {}  # line -> first line of the innermost statement holding it
    for stmt in sorted((n for n in ast.walk(tree) if isinstance(n, ast.stmt)), key=lambda s: -s.lineno):
        body_start = min((c.lineno for f in ("body", "orelse", "finalbody", "handlers")
                          for c in getattr(stmt, f, []) or []), default=stmt.end_lineno + 1)
        for line in range(stmt.lineno, min(stmt.end_lineno, body_start - 1) + 1):
            starts.setdefault(line, stmt.lineno)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "headroom":
            found += [(node.lineno, f"import {a.name}") for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append((node.end_lineno or node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name) and \
                getattr(node.func, "attr", getattr(node.func, "id", "")) in ("setattr", "delattr", "getattr", "hasattr"):
            found += [(node.lineno, f"{a.value!r}") for a in node.args[:2] if isinstance(a, ast.Constant) and
                      isinstance(a.value, str) and any(_private(p) for p in a.value.split("."))]

    def explained(line: int) -> bool:
        first = starts.get(line, line)
        above = lines[first - 2].strip() if first >= 2 else ""
        return any(PRIVATE_MARK in lines[i - 1] for i in range(first, line + 1)) or \
            (above.startswith("#") and PRIVATE_MARK in above)

    return sorted({(line, what) for line, what in found if not explained(line)})


def test_the_private_reach_finder_finds_each_kind_and_takes_the_comment():
    """The scan below can fail: each kind of reach is found, and a `# private:` comment explains it."""
    src = '''
from headroom.sampler import Sampler, _hidden
import os
def f(monkeypatch, c, s):
    c._cache.clear()
    monkeypatch.setattr(s, "_LIMIT", 1)
    monkeypatch.setattr("headroom.x._LIMIT", 1)
    os._exit(0)
    c._seen  # private: the cache's bound is what is tested
    # private: the counter is the collector's own
    assert (c.a and
            c._count == 1)
    return c.__class__, c.x._fields
'''
    assert private_reaches(src) == [(2, "import _hidden"), (5, "._cache"), (6, "'_LIMIT'"), (7, "'headroom.x._LIMIT'")]


def test_tests_speak_to_public_behaviour_and_each_private_reach_says_why():
    """Issue 31: a test reaches a private name of the agent only where no public one can say it, and says why there
    (`# private: ...` on the line, in its statement, or alone above it). This scan fails on an uncommented reach."""
    files = sorted((ROOT / "tests").rglob("*.py")) + [ROOT / "bench" / "test_bench.py"]
    bad = [f"{f.relative_to(ROOT)}:{line}: {what}" for f in files if "fixtures" not in f.parts
           for line, what in private_reaches(f.read_text())]
    assert not bad, ("private reaches without a `# private: why` comment (use the public behaviour, or say why "
                     "no public name can say it):\n") + "\n".join(bad)
