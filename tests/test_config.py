"""Configuration: valid files load, every invalid one fails with FILE:LINE:COLUMN: field.path: message."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from headroom.config import ConfigError, check_config_text, load_config

ROOT = Path(__file__).resolve().parent.parent


def issues(text: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        check_config_text(text, "c.yaml")
    return [str(i) for i in exc.value.issues]


def test_repository_example_config_is_valid():
    config = load_config(ROOT / "config.yaml")
    assert config.sample_interval == 1.0
    assert config.collectors["shm"]["mountpoints"] == ["/dev/shm"]


def test_defaults_without_a_file():
    config = load_config(None)
    assert config.source is None
    assert config.sample_interval == 1.0
    assert config.agent["window"] == 600.0
    assert config.collectors["nvml"]["pcie_poll_interval"] == 5.0


def test_empty_file_means_defaults(tmp_path):
    f = tmp_path / "empty.yaml"
    f.write_text("")
    assert load_config(f).sample_interval == 1.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("agent:\n  sample_interval: 0\n", "c.yaml:2:20: agent.sample_interval: must be >= 50ms; got 0s"),
        ("agent:\n  sample_interval: fast\n", "c.yaml:2:20: agent.sample_interval:"),
        ("agent:\n  windw: 5m\n", "c.yaml:2:3: agent.windw: unknown key (did you mean 'window'?)"),
        ("collectors:\n  shm:\n    mountpoints: /dev/shm\n", "c.yaml:3:18: collectors.shm.mountpoints: expected a list"),
        ("collectors:\n  disk:\n    device_exclude: '(['\n",
         "c.yaml:3:21: collectors.disk.device_exclude: invalid regular expression"),
        ("collectors:\n  gpu: {}\n", "c.yaml:2:3: collectors.gpu: unknown key"),
        ("collectors:\n  nvml:\n    enabled: yes please\n", "c.yaml:3:14: collectors.nvml.enabled: expected true or false"),
        ("web:\n  telemetry_path: 5\n", "c.yaml:2:19: web.telemetry_path: expected a string, got a number"),
        ("web:\n  telemetry_path: metrics\n", "c.yaml:2:19: web.telemetry_path: must be a URL path"),
        ("agent: [1, 2]\n", "c.yaml:1:8: agent: expected a mapping"),
        ("- a\n- b\n", "c.yaml:1:1: (document): expected a mapping"),
        ("agent:\n  window: 1e400\n", "c.yaml:2:11: agent.window:"),
        ("agent:\n  sample_interval: 1s\n  sample_interval: 2s\n", "c.yaml:3:3: agent.sample_interval: duplicate key"),
        ("agent:\n  window: [\n", "c.yaml:3:1: (document): YAML syntax error"),
    ],
)
def test_invalid_values_are_reported_with_position(text, expected):
    found = issues(text)
    assert any(i.startswith(expected) for i in found), found


def test_every_error_is_reported_not_just_the_first():
    found = issues("agent:\n  sample_interval: 0\n  window: 1s\ncollectors:\n  nope: {}\n")
    assert len(found) == 3, found


def test_non_utf8_file_is_a_positioned_error(tmp_path):
    f = tmp_path / "bin.yaml"
    f.write_bytes(b"agent:\n  window: \xff\xfe\n")
    with pytest.raises(ConfigError) as exc:
        load_config(f)
    assert str(exc.value).startswith(f"{f}:2:11: (document): file is not valid UTF-8")


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_deep_nesting_does_not_crash():
    text = "agent: " + "[" * 5000 + "]" * 5000 + "\n"
    with pytest.raises(ConfigError):
        check_config_text(text, "c.yaml")


def run_cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "headroom", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60)


def test_check_config_exit_codes(tmp_path):
    ok = run_cli("check-config", "--config.file", str(ROOT / "config.yaml"))
    assert ok.returncode == 0, ok.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("agent:\n  sample_interval: 0\n  windw: 1m\n")
    r = run_cli("check-config", "--config.file", str(bad))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert lines == [
        f"{bad}:2:20: agent.sample_interval: must be >= 50ms; got 0s",
        f"{bad}:3:3: agent.windw: unknown key (did you mean 'window'?)",
    ]
    assert "Traceback" not in r.stderr


def test_default_config_path_is_cwd_config_yaml(tmp_path):
    (tmp_path / "config.yaml").write_text("agent:\n  window: 2s\n")
    r = run_cli("check-config", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.startswith("config.yaml:2:11: agent.window: must be >= 10s")


@pytest.mark.parametrize("collector", ["disk", "net"])
def test_empty_device_filters_are_accepted_and_reach_the_collector_as_drops_nothing(collector):
    """The collectors document device_exclude: "" as "drops nothing" (like node_exporter's empty flag)."""
    from headroom.sources import Paths, SourceContext
    from headroom.sources.disk import DiskCollector

    config = check_config_text(f'collectors:\n  {collector}:\n    device_exclude: ""\n    device_include: ""\n',
                               "c.yaml")
    settings = config.collectors[collector]
    assert settings["device_exclude"] == "" and settings["device_include"] == ""
    if collector == "disk":
        fixture = ROOT / "tests" / "fixtures" / "proc" / "modern"
        ctx = SourceContext(paths=Paths(procfs=fixture), settings={k: v for k, v in settings.items() if k != "enabled"})
        names = [line.split()[2] for line in (fixture / "diskstats").read_text().splitlines()]
        assert [d.device for d in DiskCollector(ctx).collect().devices] == names


def test_config_yaml_quotes_the_collectors_default_filters_exactly():
    from headroom.sources import procfs

    text = (ROOT / "config.yaml").read_text()
    quoted = {m.group(1): m.group(2) for m in re.finditer(
        r"^  (disk|net):\n(?:    .*\n)*?    # device_exclude: '([^']*)'\s+\(the default\)", text, re.M)}
    assert quoted == {"disk": procfs.DEFAULT_DISK_EXCLUDE, "net": procfs.DEFAULT_NET_EXCLUDE}


@pytest.mark.parametrize(("address", "message"), [
    (":99999", "port must be 0-65535"),
    ("::1:9843", "write IPv6 addresses in brackets"),
    ("localhost", "must be HOST:PORT"),
    (":http", "is not a number"),
])
def test_check_config_refuses_the_listen_addresses_run_refuses(tmp_path, address, message):
    f = tmp_path / "c.yaml"
    f.write_text(f'agent:\n  window: 10m\nweb:\n  listen_address: ["127.0.0.1:9843", "{address}"]\n')
    r = run_cli("check-config", "--config.file", str(f))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"{f}:4:38: web.listen_address[1]: ") and message in r.stderr, r.stderr
    # and run refuses the same file the same way, before binding anything
    r = run_cli("run", "--config.file", str(f), "--no-collector.nvml")
    assert r.returncode != 0 and message in r.stderr


def test_check_config_reads_the_web_config_file_as_run_does(tmp_path):
    (tmp_path / "web.yml").write_text("tls_server_config:\n  cert_file: server.crt\n")
    f = tmp_path / "c.yaml"
    f.write_text("web:\n  config_file: web.yml\n")
    r = run_cli("check-config", "--config.file", str(f), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"{f}:2:16: web.config_file: web.yml:2:3: tls_server_config.key_file"), r.stderr
    (tmp_path / "web.yml").write_text("http_server_config:\n  http2: false\n")
    assert run_cli("check-config", "--config.file", str(f), cwd=tmp_path).returncode == 0
