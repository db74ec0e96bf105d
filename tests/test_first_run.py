"""A newcomer's first ten minutes: `make demo` tells the truth about its address, the install is quiet,
the README's commands run as written and its claims match the measurements."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import structlog

from conftest import ROOT, free_port, http_get

README = ROOT / "README.md"
VENV = Path(sys.prefix)
SUBCOMMANDS = ("run", "snapshot", "check-config", "estimate", "replay", "fleet-report")


def make_demo(address: str) -> subprocess.Popen:
    """`make demo` with the virtual environment the tests run in (never reinstalled: -o)."""
    assert (VENV / "bin" / "headroom").exists(), f"run the tests from the project's virtual environment, not {VENV}"
    return subprocess.Popen(["make", "-s", "-o", f"{VENV}/.installed", "demo", f"VENV={VENV}", f"ADDRESS={address}"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def test_make_demo_on_a_taken_port_suggests_another_address_and_announces_no_url():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        proc = make_demo(address)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert f"cannot listen on {address}: Address already in use" in err
    assert "make demo ADDRESS=" in err
    assert f"http://{address}" not in out + err, "a URL was announced although nothing listens there"
    assert "Traceback" not in err


def test_make_demo_with_a_mistyped_scenario_says_did_you_mean_and_not_the_port_hint():
    """Issue 29: `make demo SCENARIO=helthy` printed "if ADDRESS is taken, choose another address" (any exit 1)."""
    proc = subprocess.run(["make", "-s", "-o", f"{VENV}/.installed", "demo", f"VENV={VENV}", "SCENARIO=helthy",
                           f"ADDRESS=127.0.0.1:{free_port()}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "did you mean healthy?" in proc.stderr
    assert "ADDRESS=" not in proc.stderr and "taken" not in proc.stderr, proc.stderr


def test_a_port_held_by_another_headroom_names_its_pid():
    """The listener's pid from /proc/net/tcp (its socket inode) and /proc/PID/fd: "another headroom (pid N)"."""
    address = f"127.0.0.1:{free_port()}"
    first = subprocess.Popen([str(VENV / "bin" / "headroom"), "run", "--simulate", "golden", "--web.listen-address",
                              address], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while '"listening"' not in (first.stderr.readline() or ""):
            assert first.poll() is None and time.monotonic() < deadline, "the first agent did not listen"
        second = subprocess.run([str(VENV / "bin" / "headroom"), "run", "--simulate", "golden",
                                 "--web.listen-address", address], cwd=ROOT, capture_output=True, text=True,
                                timeout=60)
    finally:
        first.terminate()
        first.wait(20)
    assert second.returncode == 3
    assert f"another headroom (pid {first.pid}) listens there (stop it with kill {first.pid})" in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1 and "Traceback" not in second.stderr


def test_make_demo_logs_its_url_once_it_listens():
    address = f"127.0.0.1:{free_port()}"
    proc = make_demo(address)
    try:
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "make demo exited: " + (proc.stderr.read() or "")
            if '"listening"' in line:
                url = json.loads(line)["url"]
        assert url == f"http://{address}/"
        status, _headers, body = http_get(url + "metrics")
        assert status == 200 and b"headroom_simulation_info" in body
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches make and the agent, as in a terminal
        timed_out = False
        try:
            out, rest = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, rest = proc.communicate()
    # what a failure needs to be understood (seen once under a loaded suite with an empty stderr)
    why = (f"Ctrl-C stops the agent cleanly; timed out after 20 s: {timed_out}, make's exit status "
           f"{proc.returncode}, stdout {out[-500:]!r}, stderr after listening {rest[-2000:]!r}")
    assert '"stopped"' in rest and "Traceback" not in rest, why


def test_install_steps_print_one_line_each():
    """pip's own output only on failure: every command of the venv recipe is silent (@, --quiet) after an echo."""
    text = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^\$\(VENV\)/\.installed:.*\n((?:\t.*\n)+)", text, re.M).group(1).splitlines()
    assert all(line.startswith("\t@") for line in recipe), recipe
    pip = [line for line in recipe if "pip install" in line]
    assert pip and all("--quiet" in line for line in pip)
    assert sum(line.startswith("\t@echo") for line in recipe) >= 2
    deps = (ROOT / "tests" / "install-system-deps.sh").read_text()
    assert re.search(r'^source .*apt-install\.sh"$', deps, re.M)
    assert re.search(r'^apt_install install-system-deps "the tests" ', deps, re.M)
    apt = (ROOT / "tests" / "apt-install.sh").read_text()  # the one apt step both install scripts share
    assert re.search(r'^  echo "make: installing Debian packages for \$what: ', apt, re.M)
    assert re.search(r"apt-get install -y -qq .*>/dev/null$", apt, re.M)


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory):
    """`pip wheel` of a copy of what the package is built from (pip builds in-tree: a copy keeps build/ out of
    the checkout): (pip's output, the wheel's path). The package's runbook is a symlink to docs/runbook.md."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "agent", src / "agent", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"),
                    symlinks=True)
    (src / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "runbook.md", src / "docs" / "runbook.md")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--disable-pip-version-check",
                        "-w", str(tmp_path), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout + r.stderr, next(tmp_path.glob("headroom-*.whl"))


def test_building_the_package_prints_no_deprecation_warning(built_wheel):
    """The SPDX license string (PEP 639): the first install used to print setuptools' license-table warning 3x."""
    output, wheel = built_wheel
    assert "Deprecat" not in output, [line for line in output.splitlines() if "eprecat" in line][:5]
    with zipfile.ZipFile(wheel) as z:
        metadata = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata


def test_the_wheel_ships_the_runbook_the_agent_serves(built_wheel, tmp_path):
    """`pip install` (systemd/install.sh, the Dockerfile) puts docs/runbook.md's text in the package, as a
    regular file, so GET /runbook works on a host without the checkout or a network."""
    _, wheel = built_wheel
    with zipfile.ZipFile(wheel) as z:
        info = z.getinfo("headroom/docs/runbook.md")
        assert (info.external_attr >> 28) != 0o12  # not a symlink entry
        assert z.read(info) == (ROOT / "docs" / "runbook.md").read_bytes()
        z.extractall(tmp_path / "site")
    # the installed package, not the checkout, is what /runbook renders
    probe = ("import headroom, sys; from headroom.exposition import runbook; page = runbook.page(); "
             "print(headroom.__file__); sys.exit(b'<h3 id=\"bottleneck-gpu_power\">' not in page)")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(tmp_path / "site")), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == str(tmp_path / "site" / "headroom" / "__init__.py")


def test_debug_events_of_in_process_code_stay_out_of_the_test_output(capfd, caplog):
    """A server thread's debug event (tls_handshake_failed) used to print into the test report."""
    caplog.set_level("DEBUG")
    structlog.get_logger("headroom.server").debug("tls_handshake_failed", client="127.0.0.1", error="UNSUPPORTED")
    out, err = capfd.readouterr()
    assert "tls_handshake_failed" not in out + err
    assert any("tls_handshake_failed" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------------------------------ README
def readme_commands() -> list[str]:
    """Every `.venv/bin/headroom ...` command of the README's shell blocks, continuation lines joined, comments cut."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", README.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line.startswith(".venv/bin/headroom"):
                commands.append(line)
    return commands


def test_readme_has_commands_to_check():
    subcommands = {shlex.split(c)[1] for c in readme_commands()}
    assert {"run", "snapshot", "check-config", "estimate"} <= subcommands


@pytest.mark.parametrize("command", readme_commands())
def test_readme_command_runs_as_written(command):
    """Every README command works after `make demo` (services are checked with --help)."""
    args = shlex.split(command)[1:]
    if args[0] == "run":
        args = ["run", "--help"]  # a service: that it parses is what can be checked here
    r = subprocess.run([sys.executable, "-m", "headroom", *args], capture_output=True, text=True, timeout=120,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert r.stdout.strip()


def test_readme_names_commands_by_the_path_that_exists_after_make_demo():
    bare = re.findall(rf"(?<![\w/.-])headroom (?:{'|'.join(SUBCOMMANDS)})\b", README.read_text())
    assert not bare, f"write .venv/bin/headroom: {bare}"


def _bench_row(after: str, gpus: int, processes: int, workloads: int) -> dict[str, str]:
    """The docs/benchmarks.md table row for that host size in the first table after ``after``: column -> cell
    (a repeated column name, like the processes collector after the processes count, gets a ``#2`` suffix)."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    lines = [line for line in text[text.index(after):].splitlines() if line.startswith("|")]
    header = []
    for cell in (c.strip() for c in lines[0].strip("|").split("|")):
        header.append(cell + "#2" if cell in header else cell)
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[:3] == [str(gpus), str(processes), str(workloads)]:
            return dict(zip(header, cells, strict=True))
    raise AssertionError(f"no row {gpus}/{processes}/{workloads} after {after!r} in docs/benchmarks.md")


def test_readme_tick_cost_matches_docs_benchmarks():
    readme = " ".join(README.read_text().split())
    m = re.search(r"with 1 000 processes on the host the processes collector costs about ([\d.]+) ms of CPU per "
                  r"tick and the whole tick about ([\d.]+) ms with 8 GPUs and 3 workloads", readme)
    assert m, "the README states the tick cost at 1 000 processes"
    collector_ms, tick_ms = float(m.group(1)), float(m.group(2))
    measured_collector = float(_bench_row("CPU per `collect()` by collector", 8, 1000, 3)["processes#2"])
    measured_tick = float(_bench_row("## CPU per tick", 8, 1000, 3)["CPU per tick ms"].split()[0])
    assert abs(collector_ms - measured_collector) <= 0.15 * measured_collector, (collector_ms, measured_collector)
    assert abs(tick_ms - measured_tick) <= 0.15 * measured_tick, (tick_ms, measured_tick)


DOCS = [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_docs_cite_only_files_inside_the_repository(doc):
    """Relative links land on a file of the repository; no path leaves it (`../shared/...` did)."""
    text = doc.read_text()
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:|#", target):
            continue
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        if not path.is_relative_to(ROOT) or not path.exists():
            bad.append(target)
    bad += re.findall(r"`(\.\./[^`]*|/work/[^`]*)`", text)
    assert not bad, bad
