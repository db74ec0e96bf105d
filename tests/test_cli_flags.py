"""Flags an SRE brings from node_exporter: --collector.disable-defaults and --log.format logfmt|json."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from conftest import ROOT, Agent


def snapshot(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "headroom", "snapshot", "--simulate", "golden", "--samples", "1",
                           *args], capture_output=True, text=True, timeout=60, cwd=ROOT)


def collectors_in(exposition: str) -> set[str]:
    return set(re.findall(r'^headroom_collector_success\{collector="([a-z]+)"\}', exposition, re.M))


def test_disable_defaults_runs_only_the_collectors_named_by_flag():
    everything = snapshot()
    assert everything.returncode == 0, everything.stderr
    assert {"cpu", "memory", "nvml", "disk"} <= collectors_in(everything.stdout)
    only = snapshot("--collector.disable-defaults", "--collector.cpu", "--collector.nvml")
    assert only.returncode == 0, only.stderr
    assert collectors_in(only.stdout) == {"cpu", "nvml"}
    assert "headroom_memory_size_bytes" not in only.stdout


def test_log_format_logfmt_writes_node_exporter_style_lines():
    agent = Agent("--simulate", "golden", "--log.format", "logfmt", "--no-collector.processes")
    try:
        agent.wait_ready()
    finally:
        _code, err = agent.stop()
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, "the agent logs its start"
    for line in lines:
        assert re.match(r'^ts=\d{4}-\d\d-\d\dT\S+Z level=(debug|info|warning|error) msg=\S+', line), line
    assert any(re.search(r"msg=listening address=127\.0\.0\.1:\d+ ", line) for line in lines), lines


def test_log_format_json_writes_one_object_per_line():
    agent = Agent("--simulate", "golden", "--log.format", "json", "--no-collector.processes")
    try:
        agent.wait_ready()
    finally:
        _code, err = agent.stop()
    events = [json.loads(line) for line in err.splitlines() if line.strip()]
    assert any(e["event"] == "listening" for e in events)


def test_log_format_refuses_an_unknown_value():
    r = snapshot("--log.format", "yaml")
    assert r.returncode == 2 and "invalid choice: 'yaml'" in r.stderr and "logfmt" in r.stderr


def test_logging_writes_to_the_standard_error_of_the_moment_not_a_closed_one(monkeypatch):
    """A thread that outlives the code which configured logging (the collectors `headroom probe` runs in
    process; a test's captured stderr) logs into sys.stderr as it is now, never into one closed since."""
    import io

    import structlog

    from headroom import logs

    saved = structlog.get_config()
    try:
        first = io.StringIO()
        monkeypatch.setattr(sys, "stderr", first)
        logs.configure("info", "logfmt")
        structlog.get_logger("t").info("one")
        first.close()
        second = io.StringIO()
        monkeypatch.setattr(sys, "stderr", second)
        structlog.get_logger("t").info("two")  # raised "I/O operation on closed file" when bound at configure
        assert "msg=two" in second.getvalue()
    finally:
        structlog.configure(**saved)
