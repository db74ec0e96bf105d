"""Scenario files and signals: loading, precise errors, and the value of each signal kind over time."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from headroom.simulation import (
    CLOCK_EVENT_REASONS,
    ManualClock,
    ScenarioError,
    list_scenarios,
    load_scenario,
    parse_frequency,
    parse_scenario,
)

MINIMAL = """\
gpus:
  - name: Test GPU
    memory_total: 16GiB
    power_limit: 250
"""


def gpu_with(extra: str) -> str:
    """A one-GPU scenario with ``extra`` (YAML lines at GPU level, 4-space indented) appended."""
    return MINIMAL + "".join(f"    {line}\n" for line in extra.strip("\n").splitlines())


def signal(text: str, kind_key: str = "utilization"):
    return parse_scenario(gpu_with(f"{kind_key}: {text}")).gpus[0].signals[kind_key]


# ------------------------------------------------------------------------------------ built-ins
def test_built_in_scenarios_are_listed_and_load():
    names = list_scenarios()
    assert {"demo", "golden"} <= set(names)
    for name in names:
        scenario = load_scenario(name)
        assert scenario.name == name
        assert scenario.gpus


def test_demo_is_a_two_gpu_h100_host_serving_an_llm():
    demo = load_scenario("demo")
    assert demo.driver_version == "550.54.15"
    assert [g.pci_bus_id for g in demo.gpus] == ["00000000:19:00.0", "00000000:3B:00.0"]
    for g in demo.gpus:
        assert "H100" in g.name and g.power_limit == 700 and g.mig_enabled is False
        utils = [g.signals["utilization"].at(t) for t in range(0, 600, 5)]
        assert 0.5 <= min(utils) and max(utils) <= 1.0 and max(utils) - min(utils) > 0.25
        temps = [g.signals["temperature"].at(t) for t in range(0, 600, 5)]
        assert 54 <= min(temps) and max(temps) <= 71
        assert 65 * 2**30 < g.signals["memory_used"].at(100) < 75 * 2**30
        assert g.processes == ()  # its processes are the stand-ins of `workloads:` (real pids when started)
    chat, summarizer = demo.workloads
    assert [u.gpu for c in chat.process.children for u in c.gpus] == [0, 1]  # one tensor-parallel worker per GPU
    # not declared in config.yaml: found by its command line, its model config in the cache its env names
    assert summarizer.process.argv[:3] == ("vllm", "serve", "Qwen/Qwen3-0.6B")
    hf_home = Path(dict(summarizer.env)["HF_HOME"])
    assert (hf_home / "hub/models--Qwen--Qwen3-0.6B/refs/main").is_file()
    episode = [t for t in range(600) if demo.gpus[0].clock_events["sw_power_cap"].at(t) > 0.5]
    assert episode[0] == 0 and episode[-1] == 299  # GPU 0 at its power cap for the first 5 of 10 minutes


def test_golden_is_fully_deterministic():
    golden = load_scenario("golden")
    for g in golden.gpus:
        for s in [*g.signals.values(), *g.clock_events.values()]:
            assert s.kind in ("constant", "steps") and s.noise == 0
    assert golden.gpus[1].mig_enabled is True and len(golden.gpus[1].mig_instances) == 2
    assert [(x.at, x.code) for x in golden.gpus[0].xids] == [(0.0, 13)]
    assert {"fan_speed", "memory_temperature"} <= golden.gpus[1].unsupported


def test_a_path_loads_a_file_and_names_the_scenario_after_it(tmp_path: Path):
    path = tmp_path / "lab-box.yaml"
    path.write_text(MINIMAL)
    scenario = load_scenario(str(path))
    assert scenario.name == "lab-box" and scenario.source == str(path)
    assert scenario.gpus[0].memory_total == 16 * 2**30


def test_unknown_name_lists_the_built_ins():
    with pytest.raises(ScenarioError, match=r"unknown scenario 'nope' \(built-in: .*demo.*golden"):
        load_scenario("nope")


def test_a_mistyped_name_gets_did_you_mean_and_hyphen_or_underscore_both_work():
    """Issue 29: `--simulate helthy` listed 19 names and no suggestion; `bottleneck-gpu-power` was unknown."""
    with pytest.raises(ScenarioError, match=r"unknown scenario 'helthy' \(did you mean healthy\? built-in: "):
        load_scenario("helthy")
    with pytest.raises(ScenarioError, match=r"did you mean bottleneck-gpu_power"):
        load_scenario("botleneck-gpu-power")
    assert load_scenario("bottleneck-gpu-power").name == "bottleneck-gpu_power"
    assert load_scenario("Serving_KV_Bound").name == "serving-kv-bound"
    with pytest.raises(ScenarioError, match=r"unknown scenario 'xxxx.*\(500 characters\)"):  # was ENAMETOOLONG
        load_scenario("x" * 500)


def test_missing_file_says_which(tmp_path: Path):
    with pytest.raises(ScenarioError, match=r"absent\.yaml: cannot read scenario file"):
        load_scenario(str(tmp_path / "absent.yaml"))


def test_a_scenario_file_is_read_as_config_yaml_is(tmp_path: Path):
    """Through headroom.schema and safeio: bytes that are not UTF-8 are a positioned error (was a UnicodeDecodeError
    traceback), a FIFO is refused at once (reading it blocked until a writer came)."""
    import os

    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"gpus: []\n\xff\n")
    with pytest.raises(ScenarioError, match=r"^.*bad\.yaml:2:1: file is not valid UTF-8$"):
        load_scenario(str(bad))
    os.mkfifo(tmp_path / "fifo.yaml")
    with pytest.raises(ScenarioError, match=r"fifo\.yaml: cannot read scenario file: is a FIFO, not a regular file$"):
        load_scenario(str(tmp_path / "fifo.yaml"))


def test_host_section_is_parsed_into_a_host_spec():
    # (workloads: stand-in processes are tested in test_workload_e2e.py; the synthetic host in test_simulation_host.py)
    scenario = parse_scenario(MINIMAL + "host:\n  cpu: {utilization: 0.5}\n")
    assert scenario.host.utilization.at(0) == 0.5


def test_defaults_fill_identity_and_limits():
    g = parse_scenario(MINIMAL).gpus[0]
    assert re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", g.uuid)
    assert g.pci_bus_id == "00000000:01:00.0"
    assert g.supported_clock_events == CLOCK_EVENT_REASONS
    assert g.mig_enabled is None  # no mig key: the GPU has no MIG support
    assert {"fan_speed", "memory_temperature"} <= g.unsupported  # no such sensors declared


# ---------------------------------------------------------------------------------- bad files
@pytest.mark.parametrize(
    ("situation", "text", "expected"),
    [
        ("yaml syntax error", "seed: 1\nbad: : x\n", r"^f\.yaml:2:\d+: YAML syntax error: mapping values are not allowed here$"),
        # the shared reader (headroom.schema): a scalar YAML cannot construct, and aliases, fail as in config.yaml
        ("an impossible date", "seed: 2024-13-01\ngpus: []\n", r"^f\.yaml:1:7: seed: invalid value '2024-13-01': month "),
        ("an impossible date in a profile", "gpus: []\nprofiles: [{name: 2024-13-01}]\n",
         r"^f\.yaml:2:19: profiles: invalid value '2024-13-01'"),
        ("a recursive alias", "gpus: &a [*a]\n", r"^f\.yaml:1:\d+: an alias refers to a node that contains it"),
        ("an alias bomb", "a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
         "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n",
         r"^f\.yaml:\d+:\d+: aliases expand the document past 100000 nodes"),
        ("a long value is quoted in part, as in config.yaml's errors", "gpus: []\nseed: '" + "x" * 200 + "'\n",
         r"^f\.yaml:2:7: seed: expected a whole number, got 'x{32}'\.\.\. \(200 characters\)$"),
        ("a typo of a top-level key", MINIMAL + "gpuz: []\n", r"^f\.yaml:5:1: gpuz: unknown key \(did you mean 'gpus'\?\)$"),
        ("empty file", "", r"^f\.yaml: scenario: the file is empty$"),
        ("top level not a mapping", "- 1\n", r"^f\.yaml:1:1: \(document\): expected a mapping$"),
        ("unknown top-level key", MINIMAL + "gpu_count: 2\n", r"^f\.yaml:5:1: gpu_count: unknown key \(expected one of: "),
        ("missing gpus", "seed: 1\n", r"^f\.yaml:1:1: gpus: is required$"),
        ("gpus not a list", "gpus: {a: 1}\n", r"^f\.yaml:1:7: gpus: expected a list$"),
        ("missing power limit", "gpus:\n  - name: x\n    memory_total: 1GiB\n", r"^f\.yaml:2:5: gpus\[0\]\.power_limit: is required$"),
        ("bad size", gpu_with("memory_used: 12 parsecs"), r"^f\.yaml:5:18: gpus\[0\]\.memory_used: invalid size '12 parsecs'"),
        ("ratio above one", gpu_with("utilization: 1.5"), r"^f\.yaml:5:18: gpus\[0\]\.utilization: expected a ratio between 0 and 1, got 1\.5$"),
        ("bad duration in sine", gpu_with("utilization: {sine: {min: 0.1, max: 0.9, period: soon}}"),
         r"^f\.yaml:5:\d+: gpus\[0\]\.utilization\.sine\.period: invalid duration 'soon'"),
        ("sine without period", gpu_with("utilization: {sine: {min: 0.1, max: 0.9}}"),
         r"^f\.yaml:5:\d+: gpus\[0\]\.utilization\.sine\.period: is required$"),
        ("sine min above max", gpu_with("utilization: {sine: {min: 0.9, max: 0.1, period: 1m}}"),
         r"gpus\[0\]\.utilization\.sine\.max: must be >= min \(0\.9\)$"),
        ("two shapes", gpu_with("utilization: {value: 0.5, ramp: {from: 0, to: 1, over: 1m}}"),
         r"gpus\[0\]\.utilization: expected exactly one of value, sine, steps, ramp$"),
        ("steps out of order", gpu_with("utilization: {steps: [[10s, 0.1], [5s, 0.2]]}"),
         r"^f\.yaml:5:\d+: gpus\[0\]\.utilization\.steps\[1\]\[0\]: step times must increase"),
        ("repeat without period", gpu_with("utilization: {steps: [[0s, 0.1]], repeat: true}"),
         r"gpus\[0\]\.utilization: repeat: true needs a period"),
        ("period too short for the steps", gpu_with("utilization: {steps: [[0s, 0.1], [60s, 0.2]], repeat: true, period: 30s}"),
         r"gpus\[0\]\.utilization\.period: must be longer than the last step time \(60s\)$"),
        ("unknown clock event", gpu_with("clock_events: {turbo: true}"),
         r"^f\.yaml:5:20: gpus\[0\]\.clock_events\.turbo: unknown key"),
        ("unknown unsupported query", gpu_with("unsupported: [fan_speed, warp_drive]"),
         r"^f\.yaml:5:\d+: gpus\[0\]\.unsupported\[1\]: unknown query 'warp_drive'"),
        ("mig instances while disabled", gpu_with("mig: {enabled: false, instances: [{gpu_instance_id: 1, memory_total: 1GiB}]}"),
         r"gpus\[0\]\.mig\.instances: instances need enabled: true$"),
        ("unknown NVML error in a fault", MINIMAL + "faults:\n  - {call: nvmlDeviceGetPowerUsage, error: ON_FIRE}\n",
         r"^f\.yaml:6:\d+: faults\[0\]\.error: unknown NVML error 'ON_FIRE' \(expected one of: .*GPU_IS_LOST"),
        ("fault on a GPU that does not exist", MINIMAL + "faults:\n  - {call: nvmlInit, gpu: 3, error: GPU_IS_LOST}\n",
         r"faults\[0\]\.gpu: no such GPU \(the scenario has 1\)$"),
        ("fault without effect", MINIMAL + "faults:\n  - {call: nvmlInit}\n", r"faults\[0\]: a fault needs error, hang or both$"),
        ("duplicate key", MINIMAL + "seed: 1\nseed: 2\n", r"^f\.yaml:6:1: seed: duplicate key$"),
        ("duplicate uuid", "gpus:\n" + 2 * "  - {name: x, uuid: GPU-1, memory_total: 1GiB, power_limit: 1}\n",
         r"gpus: uuids must be unique$"),
    ],
)
def test_invalid_scenario_fails_with_file_line_column_and_path(situation, text, expected):
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, filename="f.yaml")
    assert re.search(expected, str(info.value)), f"{situation}: {info.value}"


# ------------------------------------------------------------------------------------ signals
def test_constant_accepts_units():
    assert signal("70.5GiB", "memory_used").at(123) == 70.5 * 2**30
    assert signal("1980MHz", "sm_clock").at(0) == 1.98e9
    assert signal("0.25").at(99) == 0.25


def test_sine_spans_min_to_max_over_one_period():
    s = signal("{sine: {min: 0.2, max: 0.8, period: 60s}}")
    assert s.at(0) == pytest.approx(0.5)
    assert s.at(15) == pytest.approx(0.8)
    assert s.at(45) == pytest.approx(0.2)
    assert s.at(75) == pytest.approx(s.at(15))


def test_sine_phase_shifts_time():
    s = signal("{sine: {min: 0, max: 1, period: 1m, phase: 15s}}")
    assert s.at(0) == pytest.approx(1.0)


def test_steps_hold_each_value_until_the_next_step():
    s = signal("{steps: [[0s, 0.3], [30s, 0.95]]}")
    assert [s.at(t) for t in (0, 29.9, 30, 1000)] == [0.3, 0.3, 0.95, 0.95]


def test_steps_repeat_with_a_period():
    s = signal("{steps: [[0s, 0.1], [10s, 0.9]], repeat: true, period: 20s}")
    assert [s.at(t) for t in (5, 15, 25, 35, 45)] == [0.1, 0.9, 0.1, 0.9, 0.1]


def test_steps_accept_booleans_for_clock_events():
    g = parse_scenario(gpu_with("clock_events: {hw_slowdown: {steps: [[0s, false], [5s, true]]}}")).gpus[0]
    assert [g.clock_events["hw_slowdown"].at(t) for t in (0, 5)] == [0.0, 1.0]


def test_ramp_rises_linearly_then_holds():
    s = signal("{ramp: {from: 100, to: 300, over: 2m, start: 1m}}", "power")
    assert [s.at(t) for t in (0, 60, 120, 180, 999)] == [100, 100, 200, 300, 300]


def test_noise_is_bounded_seeded_and_reproducible():
    text = gpu_with("utilization: {value: 0.5, noise: 0.1}")
    a = parse_scenario("seed: 1\n" + text).gpus[0].signals["utilization"]
    b = parse_scenario("seed: 1\n" + text).gpus[0].signals["utilization"]
    c = parse_scenario("seed: 2\n" + text).gpus[0].signals["utilization"]
    values = [a.at(t) for t in range(200)]
    assert values == [b.at(t) for t in range(200)]
    assert values != [c.at(t) for t in range(200)]
    assert all(0.4 <= v <= 0.6 for v in values)
    assert max(values) - min(values) > 0.1  # it does move
    assert a.at(3.2) == a.at(3.9)  # held for one second


def test_ratio_signals_are_clamped_to_zero_and_one():
    s = signal("{value: 0.98, noise: 0.1}")
    assert all(0 <= s.at(t) <= 1 for t in range(100))
    assert max(s.at(t) for t in range(100)) == 1.0


@pytest.mark.parametrize(
    ("text", "hertz"), [("1980MHz", 1.98e9), ("1.5GHz", 1.5e9), ("500kHz", 5e5), (100, 100.0), ("7 Hz", 7.0)]
)
def test_frequencies(text, hertz):
    assert parse_frequency(text) == hertz


@pytest.mark.parametrize("text", ["fast", "10 MPH", -5, True])
def test_bad_frequencies(text):
    with pytest.raises(ValueError, match="invalid frequency"):
        parse_frequency(text)


def test_manual_clock_moves_only_when_told():
    clock = ManualClock(5)
    assert clock() == 5
    assert clock.advance(2.5) == 7.5 and clock() == 7.5
    assert math.isclose(clock.advance(0.1), 7.6)


def test_the_example_in_the_format_docs_loads():
    doc = (Path(__file__).parent.parent / "docs" / "scenario-format.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", doc, flags=re.S)
    full = [b for b in blocks if b.startswith(("description:", "gpus:", "seed:"))]
    assert full, "the docs must carry a complete example"
    for block in full:
        scenario = parse_scenario(block, filename="docs/scenario-format.md")
        assert scenario.gpus


def test_attach_lists_real_processes_by_pid_file_and_cmdline_on_their_gpus(tmp_path: Path):
    """``attach:`` puts real processes of this host in a simulated GPU's process list under their real pid, found by
    a pid-file glob or a command-line pattern; one that ends leaves the list at the next look."""
    import subprocess
    import sys
    import time

    from headroom.simulation.scenario import runtime  # how often the attach rules look again (no public name)

    marker = f"headroom-attach-test-{tmp_path.name}"
    by_file = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    by_cmdline = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        (tmp_path / "a.pid").write_text(f"{by_file.pid}\n")
        text = f"""\
gpus:
  - {{name: NVIDIA H100 80GB HBM3, memory_total: 80GiB, power_limit: 700}}
  - {{name: NVIDIA H100 80GB HBM3, memory_total: 80GiB, power_limit: 700}}
attach:
  - {{pid_file: "{tmp_path}/*.pid", gpu: 0, memory: 2GiB}}
  - {{cmdline: "{marker}", gpu: 1, memory: 3GiB, utilization: 0.5}}
"""
        sc = parse_scenario(text)
        on0 = [(pid, use.gpu) for pid, use in sc.standin_processes(0)]
        on1 = [(pid, use.gpu) for pid, use in sc.standin_processes(1)]
        assert on0 == [(by_file.pid, 0)]
        assert on1 == [(by_cmdline.pid, 1)]
        by_file.kill()
        by_file.wait()
        time.sleep(runtime.ATTACH_REFRESH_SECONDS + 0.1)
        assert sc.standin_processes(0) == []
    finally:
        for p in (by_file, by_cmdline):
            p.kill()
            p.wait()


@pytest.mark.parametrize(("attach", "message"), [
    ("[{gpu: 0, memory: 1GiB}]", "exactly one of pid_file"),
    ("[{pid_file: /x, cmdline: y, gpu: 0, memory: 1GiB}]", "exactly one of pid_file"),
    ("[{pid_file: /x, gpu: 3, memory: 1GiB}]", "no such GPU"),
    ("[{cmdline: 'a(?=b)', gpu: 0, memory: 1GiB}]", "invalid pattern"),
    ("[{pid_file: /x, gpu: 0}]", "memory"),
])
def test_attach_rules_are_checked_when_the_scenario_loads(attach: str, message: str):
    with pytest.raises(ScenarioError, match=re.escape(message)):
        parse_scenario(f"gpus:\n  - {{name: NVIDIA H100 80GB HBM3, memory_total: 80GiB, power_limit: 700}}\n"
                       f"attach: {attach}\n")
