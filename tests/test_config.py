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


# ------------------------------------------------------------------------------------------------- bounds
def _at(path: str, value: str, context: str = "") -> str:
    """A config text setting the dotted ``path`` to ``value`` (plus ``context`` lines at the top level)."""
    keys = path.split(".")
    lines = [("  " * i) + f"{k}:" for i, k in enumerate(keys[:-1])]
    lines.append(("  " * (len(keys) - 1)) + f"{keys[-1]}: {value}")
    return context + "\n".join(lines) + "\n"


# Every bounded option with its documented range (written here, not read from the code: a changed bound
# fails the row that says which), and a value just outside each end, in plain seconds or bytes.
# (path, lowest, just below, its message, highest, just above, its message); None: no bound on that side.
BOUNDS = [
    ("agent.sample_interval", "50ms", "0.049", ">= 50ms; got 49ms", "1m", "60.5", "<= 1m; got 60.5s"),
    ("agent.window", "10s", "9.5", ">= 10s; got 9.5s", "24h", "86400.5", "<= 1d; got 86400.5s"),
    ("agent.collector_timeout", "50ms", "0.049", ">= 50ms; got 49ms", "5m", "300.5", "<= 5m; got 300.5s"),
    ("collectors.nvml.pcie_poll_interval", "100ms", "0.099", ">= 100ms; got 99ms", None, None, None),
    ("collectors.serving.timeout", "10ms", "0.009", ">= 10ms; got 9ms", "30s", "30.5", "<= 30s; got 30.5s"),
    ("collectors.serving.max_body", "4096", "4095", ">= 4096; got 4095", "256MiB", str(256 * 2**20 + 1),
     f"<= {256 * 2**20}; got {256 * 2**20 + 1}"),
    ("collectors.serving.detect_interval", "1s", "0.5", ">= 1s; got 500ms", "1h", "3600.5", "<= 1h; got 3600.5s"),
    ("collectors.identity.pod_resources_timeout", "50ms", "0.049", ">= 50ms; got 49ms", "1m", "60.5",
     "<= 1m; got 60.5s"),
    ("collectors.identity.pod_resources_refresh", "100ms", "0.099", ">= 100ms; got 99ms", "1h", "3600.5",
     "<= 1h; got 3600.5s"),
    ("collectors.identity.max_workloads", "1", "0", ">= 1; got 0", "10000", "10001", "<= 10000; got 10001"),
    ("analysis.short_window", "2s", "1.5", ">= 2s; got 1.5s", "10m", "600.5", "<= 10m; got 600.5s"),
    ("analysis.long_window", "10s", "9.5", ">= 10s; got 9.5s", "24h", "86400.5", "<= 1d; got 86400.5s"),
    ("analysis.hold", "0", None, None, "1h", "3600.5", "<= 1h; got 3600.5s"),
    ("analysis.idle_busy_ratio", "0", "-0.001", ">= 0; got -0.001", "1", "1.001", "<= 1; got 1.001"),
    ("analysis.gpu_slowdown_celsius", "0", "-0.5", ">= 0; got -0.5", "150", "150.5", "<= 150; got 150.5"),
    ("analysis.cost_per_gpu_hour", "0", "-0.5", ">= 0; got -0.5", "1000000", "1000000.5",
     "<= 1e+06; got 1e+06"),
    ("analysis.thresholds.busy_high", "0", "-0.001", ">= 0; got -0.001", "1", "1.001", "<= 1; got 1.001"),
    ("analysis.thresholds.vram_fill_seconds_low", "0", None, None, "24h", "86400.5", "<= 1d; got 86400.5s"),
    ("sizing.cuda_context", "0", None, None, "64GiB", str(64 * 2**30 + 1),
     f"<= {64 * 2**30}; got {64 * 2**30 + 1}"),
    ("sizing.runtime_overhead", "0", None, None, "1024GiB", str(2**40 + 1), f"<= {2**40}; got {2**40 + 1}"),
    ("sizing.cpu_runtime_overhead", "0", None, None, "1024GiB", str(2**40 + 1),
     f"<= {2**40}; got {2**40 + 1}"),
]
SLOW = "agent:\n  sample_interval: 1m\n"  # a long window fits the memory budget only at a slow interval


def _ok(text: str) -> None:
    try:
        check_config_text(text, "c.yaml")
    except ConfigError as exc:
        pytest.fail(f"{text!r} refused: {[str(i) for i in exc.issues]}")


def _text(path: str, value: str) -> str:
    if path == "agent.window":
        return SLOW + f"  window: {value}\n"
    return _at(path, value)


@pytest.mark.parametrize(("path", "lo", "below", "lo_message", "hi", "above", "hi_message"), BOUNDS,
                         ids=[b[0] for b in BOUNDS])
def test_every_bounded_option_accepts_its_range_and_refuses_just_outside_it(path, lo, below, lo_message, hi, above,
                                                                             hi_message):
    _ok(_text(path, lo))
    if below is not None:
        assert [i.split(": ", 1)[1] for i in issues(_text(path, below))] == [f"{path}: must be {lo_message}"]
    if hi is not None:
        _ok(_text(path, hi))
        assert [i.split(": ", 1)[1] for i in issues(_text(path, above))] == [f"{path}: must be {hi_message}"]


def test_the_vllm_memory_fraction_excludes_0_and_includes_1():
    assert issues(_at("sizing.vllm_gpu_memory_utilization", "0")) == [
        "c.yaml:2:32: sizing.vllm_gpu_memory_utilization: must be > 0; got 0"]
    _ok(_at("sizing.vllm_gpu_memory_utilization", "0.001"))
    _ok(_at("sizing.vllm_gpu_memory_utilization", "1"))
    assert issues(_at("sizing.vllm_gpu_memory_utilization", "1.001")) == [
        "c.yaml:2:32: sizing.vllm_gpu_memory_utilization: must be <= 1; got 1.001"]


def test_lists_that_need_an_item_refuse_an_empty_list():
    assert issues("collectors:\n  shm:\n    mountpoints: []\n") == [
        "c.yaml:3:18: collectors.shm.mountpoints: needs at least 1 item(s)"]
    assert issues("web:\n  listen_address: []\n") == ["c.yaml:2:19: web.listen_address: needs at least 1 item(s)"]


def test_an_integer_option_refuses_a_fraction_and_keeps_an_int():
    assert issues(_at("collectors.identity.max_workloads", "2.5")) == [
        "c.yaml:3:20: collectors.identity.max_workloads: expected an integer, got 2.5"]
    value = check_config_text(_at("collectors.identity.max_workloads", "7.0")).collectors["identity"]["max_workloads"]
    assert value == 7 and isinstance(value, int)


# ------------------------------------------------------------------------------------------------ defaults
# What docs and config.yaml promise when an option is left out (written here, not read from the code).
DEFAULTS = {
    ("agent", "sample_interval"): 1.0,
    ("agent", "window"): 600.0,
    ("collectors", "nvml", "pcie_poll_interval"): 5.0,
    ("collectors", "shm", "mountpoints"): ["/dev/shm"],
    ("collectors", "serving", "timeout"): 0.5,
    ("collectors", "serving", "max_body"): 8 * 2**20,
    ("collectors", "serving", "detect"): True,
    ("collectors", "serving", "detect_interval"): 30.0,
}


def _get(config, keys):
    section = {"agent": config.agent, "collectors": config.collectors, "web": config.web}[keys[0]]
    for k in keys[1:]:
        section = section[k]
    return section


@pytest.mark.parametrize("text", ["", "agent: {}\ncollectors: {}\n", "agent:\ncollectors:\n", "agent: ~\ncollectors: null\n",
                                  "collectors:\n  nvml:\n  shm:\n  serving:\n"],
                         ids=["empty file", "empty mappings", "empty values", "nulls", "empty sections"])
def test_an_option_left_out_takes_its_documented_default(text):
    config = check_config_text(text, "c.yaml")
    assert {keys: _get(config, keys) for keys in DEFAULTS} == DEFAULTS
    assert config.source == "c.yaml"
    assert config.collector_enabled("nvml", True) is True and config.collector_enabled("nvml", False) is False


def test_the_example_config_states_the_defaults_it_shows():
    config = load_config(ROOT / "config.yaml")
    assert {keys: _get(config, keys) for keys in DEFAULTS} == DEFAULTS


def test_collector_enabled_reads_the_file_over_the_default():
    config = check_config_text("collectors:\n  nvml:\n    enabled: false\n  cpu:\n    enabled: true\n")
    assert config.collector_enabled("nvml", True) is False
    assert config.collector_enabled("cpu", False) is True
    assert config.collector_enabled("disk", True) is True and config.collector_enabled("disk", False) is False


# ---------------------------------------------------------------------------------- window memory budget
def test_the_window_must_fit_the_memory_budget_at_its_interval():
    """256 MiB for the window at 20 KiB a sample with 8 GPUs (4 KiB + 2 KiB per GPU): at 50 ms, 655.31 s fit."""
    _ok("agent:\n  sample_interval: 50ms\n  window: 655s\n")
    assert issues("agent:\n  sample_interval: 50ms\n  window: 656s\n") == [
        "c.yaml:3:11: agent.window: a window of 10m56s sampled every 50ms with 8 GPUs needs about 256 MiB, above "
        "the 256 MiB budget; at this interval at most 655.31s fits (or sample less often) (validation assumes 8 GPUs)"]
    assert issues("agent:\n  sample_interval: 50ms\n  window: 24h\n") == [
        "c.yaml:3:11: agent.window: a window of 1d sampled every 50ms with 8 GPUs needs about 33,750 MiB, above "
        "the 256 MiB budget; at this interval at most 655.31s fits (or sample less often) (validation assumes 8 GPUs)"]
    _ok("agent:\n  sample_interval: 100ms\n  window: 1310s\n")  # twice the interval, twice the window


# ------------------------------------------------------------------------------- unreadable YAML, positioned
@pytest.mark.parametrize(("raw", "expected"), [
    (b"\xffagent: {}\n", "c.yaml:1:1: (document): file is not valid UTF-8"),
    (b"a: 1\nb: 2\nc: x\xff\n", "c.yaml:3:5: (document): file is not valid UTF-8"),
    ("a: 1\nb: 2\n\x07c: 3\n", "c.yaml:3:1: (document): YAML error: character #x0007 is not allowed: "
                               "special characters are not allowed"),
    ('agent: "\x00"\n', "c.yaml:1:9: (document): YAML error: character #x0000 is not allowed: "
                        "special characters are not allowed"),
    ("agent: [\n", "c.yaml:2:1: (document): YAML syntax error: expected the node content, but found "
                   "'<stream end>' (while parsing a flow node)"),
    ('agent:\n  window: "x\n', "c.yaml:3:1: (document): YAML syntax error: found unexpected end of stream "
                               "(while scanning a quoted scalar)"),
    ("x: &a\n  - *b\n", "c.yaml:2:5: (document): YAML syntax error: found undefined alias 'b'"),
    ("[" * 5000, "c.yaml:1:1: (document): YAML nesting is too deep"),
], ids=["bad UTF-8 on line 1", "bad UTF-8 on line 3", "control character", "NUL in a string", "unclosed list",
        "unclosed quote", "undefined alias", "nesting"])
def test_unreadable_yaml_is_one_positioned_issue(raw, expected):
    with pytest.raises(ConfigError) as exc:
        check_config_text(raw, "c.yaml")
    assert [str(i) for i in exc.value.issues] == [expected]


# ------------------------------------------------------------------------------- the wrong kind of value
@pytest.mark.parametrize(("text", "expected"), [
    ("agent:\n  sample_interval: [1]\n", "c.yaml:2:20: agent.sample_interval: expected a duration, got a list"),
    ("analysis:\n  idle_busy_ratio: {a: 1}\n", "c.yaml:2:20: analysis.idle_busy_ratio: expected a number, got a mapping"),
    ("web:\n  telemetry_path: [x]\n", "c.yaml:2:19: web.telemetry_path: expected a string, got a list"),
    ("collectors:\n  nvml:\n    enabled: [x]\n", "c.yaml:3:14: collectors.nvml.enabled: expected true or false, got a list"),
    ("collectors:\n  identity:\n    max_workloads: 1" + "0" * 400 + "\n",
     "c.yaml:3:20: collectors.identity.max_workloads: a number of 401 digits is too large"),
    ("analysis:\n  idle_busy_ratio: .nan\n", "c.yaml:2:20: analysis.idle_busy_ratio: must be a finite number"),
    ('collectors:\n  disk:\n    device_include: "(["\n', "c.yaml:3:21: collectors.disk.device_include: invalid "
                                                         "regular expression: unterminated character set at position 1"),
    ('collectors:\n  net:\n    device_include: "(["\n', "c.yaml:3:21: collectors.net.device_include: invalid "
                                                        "regular expression: unterminated character set at position 1"),
    ('collectors:\n  net:\n    device_exclude: "(["\n', "c.yaml:3:21: collectors.net.device_exclude: invalid "
                                                        "regular expression: unterminated character set at position 1"),
    ("collectors:\n  identity:\n    auto: [pods, vms]\n",
     "c.yaml:3:18: collectors.identity.auto[1]: must be one of pods, jobs, containers, units, launchers; got 'vms'"),
], ids=["duration", "number", "string", "bool", "huge integer", "nan", "disk include regex", "net include regex",
        "net exclude regex", "choice"])
def test_the_wrong_kind_of_value_is_one_positioned_issue(text, expected):
    assert issues(text) == [expected]


def test_check_config_accepts_a_profile_with_only_an_endpoint(tmp_path):
    """docs/analysis.md, "Serving runtimes": a profile with only `endpoint:` is its runtime's view (a server in a pod or
    another network namespace); check-config once refused it for want of a match rule. One with neither a match rule,
    gpus nor an endpoint is still refused, the endpoint named among what it lacks."""
    f = tmp_path / "c.yaml"
    f.write_text("workloads:\n  - name: chat\n    kind: inference\n    endpoint: http://10.0.0.5:8000/metrics\n")
    r = run_cli("check-config", "--config.file", str(f))
    assert r.returncode == 0, r.stderr
    from headroom.workload.profiles import profile_from_dict

    p = profile_from_dict({"name": "chat", "kind": "inference", "endpoint": "http://10.0.0.5:8000/metrics"})
    assert p.endpoint == "http://10.0.0.5:8000/metrics" and p.match.empty and not p.gpus
    f.write_text("workloads:\n  - name: chat\n    kind: inference\n")
    r = run_cli("check-config", "--config.file", str(f))
    assert r.returncode == 2
    assert "workloads[0].match: a profile needs at least one match rule" in r.stderr
    assert "or a serving endpoint" in r.stderr and "Traceback" not in r.stderr


# ------------------------------------------------------------- one wording for the four validators (headroom.schema)
def _four_errors(tmp_path: Path, config: str, web: str, scenario: str) -> list[str]:
    """The first message of config.yaml's, the web config's, a profile's (a drop-in) and a scenario's validator."""
    from headroom.exposition.webconfig import WebConfigError, load_web_config
    from headroom.simulation.scenario import ScenarioError, parse_scenario

    out = issues(config)[:1]
    (tmp_path / "web.yml").write_text(web)
    with pytest.raises(WebConfigError) as web_error:
        load_web_config(tmp_path / "web.yml")
    out.append(str(web_error.value).replace(str(tmp_path / "web.yml"), "web.yml"))
    with pytest.raises(ScenarioError) as scenario_error:
        parse_scenario(scenario, filename="s.yaml")
    out.append(str(scenario_error.value))
    return out


def test_the_four_validators_word_an_unknown_key_alike(tmp_path):
    """config.yaml, a workload profile, the web config and a scenario: FILE:LINE:COLUMN: path: unknown key, with a
    "did you mean" for a near miss and the keys allowed otherwise (each had its own words before issue 31)."""
    got = _four_errors(tmp_path, "agent:\n  windw: 5m\n", "tls_server_config:\n  cert_fil: a\n",
                       "gpus: []\ngpuz: 1\n")
    assert got == ["c.yaml:2:3: agent.windw: unknown key (did you mean 'window'?)",
                   "web.yml:2:3: tls_server_config.cert_fil: unknown key (did you mean 'cert_file'?)",
                   "s.yaml:2:1: gpuz: unknown key (did you mean 'gpus'?)"]
    profile = issues("workloads:\n  - {name: w, kind: inference, gpus: [0], paramz: 7B}\n")
    assert profile == ["c.yaml:2:43: workloads[0].paramz: unknown key (did you mean 'params'?)"]
    far = _four_errors(tmp_path, "bogus: 1\n", "nothing: 1\n", "gpus: []\nnothing: 1\n")
    assert far[0] == ("c.yaml:1:1: bogus: unknown key (expected one of: agent, web, collectors, workloads, workloads_dir, "
                      "analysis, sizing)")
    assert far[1] == ("web.yml:1:1: nothing: unknown key (expected one of: tls_server_config, http_server_config, "
                      "basic_auth_users)")
    assert far[2].startswith("s.yaml:2:1: nothing: unknown key (expected one of: attach, ")
    many = issues("analysis:\n  thresholds:\n    zzz: 1\n")  # seventy names are counted, not listed
    assert re.fullmatch(r"c\.yaml:3:5: analysis\.thresholds\.zzz: unknown key \(not one of the \d+ keys allowed here\)",
                        many[0]), many


def test_the_four_validators_word_yaml_errors_alike(tmp_path):
    """A syntax error and a recursive alias read the same in config.yaml, the web config and a scenario."""
    syntax = _four_errors(tmp_path, "a: [1\n", "a: [1\n", "a: [1\n")
    assert [s.split(": ", 1)[1] for s in syntax] == [
        "(document): YAML syntax error: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence)",
        "YAML syntax error: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence)",
        "YAML syntax error: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence)"]
    assert [s.split(": ", 1)[0] for s in syntax] == ["c.yaml:2:1", "web.yml:2:1", "s.yaml:2:1"]
    recursive = _four_errors(tmp_path, "a: &x [*x]\n", "a: &x [*x]\n", "a: &x [*x]\n")
    assert all(r.endswith("an alias refers to a node that contains it (recursive YAML)") for r in recursive), recursive
    kinds = _four_errors(tmp_path, "agent:\n  sample_interval: [1]\n", "basic_auth_users:\n  u: [5]\n",
                         "gpus: []\nseed: [1]\n")
    assert [k.rsplit(", ", 1)[1] for k in kinds] == ["got a list"] * 3, kinds
