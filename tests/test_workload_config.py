"""Workload profiles in config.yaml and the drop-in directory: positions, duplicates, sizing constants."""

from __future__ import annotations

import pytest

from headroom.config import ConfigError, check_config_text, load_config

GOOD = """\
workloads:
  - name: chat
    kind: inference
    params: 8B
    precision: bf16
    architecture: {layers: 32, heads: 32, kv_heads: 8, head_dim: 128, hidden_size: 4096}
    context: {max: 8192}
    concurrency: 16
    match: {cmdline: "vllm serve"}
"""


def errors(text):
    with pytest.raises(ConfigError) as exc:
        check_config_text(text, "c.yaml")
    return [str(i) for i in exc.value.issues]


def test_a_valid_profile_is_loaded():
    config = check_config_text(GOOD, "c.yaml")
    (w,) = config.workloads
    assert w.name == "chat" and w.params == 8_000_000_000 and w.architecture.kv_heads == 8


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("kv_heads: 8", "kv_heads: 48"), "c.yaml:6:53: workloads[0].architecture.kv_heads: kv_heads 48 exceeds heads 32"),
        (("hidden_size: 4096", "hidden_size: 4096, kv_layers: 40"), "c.yaml:6:101: workloads[0].architecture.kv_layers: kv_layers 40 exceeds layers 32"),
        (("kind: inference", "kind: inference\n    lora: {rank: 8}"), "c.yaml:4:11: workloads[0].lora:"),
        (("params: 8B", "params: lots"), "c.yaml:4:13: workloads[0].params:"),
        (("precision: bf16", "precision: fp12"), "c.yaml:5:16: workloads[0].precision:"),
        (("    match: {cmdline: \"vllm serve\"}\n", ""), "c.yaml:2:5: workloads[0].match: a profile needs at least one match rule"),
        (("concurrency: 16", "concurrency: 16\n    colour: red"), "c.yaml:9:5: workloads[0].colour:"),
        (("  - name: chat\n    kind", "  - kind"), "c.yaml:2:5: workloads[0].name: required"),
    ],
)
def test_invalid_profiles_fail_with_position(edit, expected):
    found = errors(GOOD.replace(*edit))
    assert any(e.startswith(expected) for e in found), found


def test_duplicate_names_in_one_file():
    text = GOOD + GOOD.split("workloads:\n", 1)[1]
    found = errors(text)
    assert any("workloads[1].name: duplicate workload name 'chat'" in e for e in found), found


def test_drop_in_directory(tmp_path):
    d = tmp_path / "workloads.d"
    d.mkdir()
    (tmp_path / "config.yaml").write_text(GOOD + "workloads_dir: workloads.d\n")
    (d / "trainer.yaml").write_text("name: trainer\nkind: training\nparams: 1B\nprecision: bf16\ngpus: [1]\n")
    (d / "ignored.txt").write_text("not yaml")
    config = load_config(tmp_path / "config.yaml")
    assert [w.name for w in config.workloads] == ["chat", "trainer"]


def test_drop_in_errors_name_the_drop_in_file(tmp_path):
    d = tmp_path / "w.d"
    d.mkdir()
    (tmp_path / "config.yaml").write_text(GOOD + "workloads_dir: w.d\n")
    (d / "bad.yaml").write_text("name: chat\nkind: inference\nparams: 7B\nprecision: bf16\ngpus: [0]\n"
                                "architecture: {heads: 4, kv_heads: 8}\n")
    (d / "dup.yaml").write_text("name: chat\nkind: inference\ngpus: [0]\n")
    with pytest.raises(ConfigError) as exc:
        load_config(tmp_path / "config.yaml")
    found = [str(i) for i in exc.value.issues]
    assert any(e.startswith(f"{d / 'bad.yaml'}:6:36: architecture.kv_heads:") for e in found), found
    assert any(e.startswith(f"{d / 'dup.yaml'}:1:1: name: workload 'chat' is already declared") for e in found), found


def test_missing_drop_in_directory_is_an_error(tmp_path):
    (tmp_path / "config.yaml").write_text("workloads_dir: nowhere\n")
    with pytest.raises(ConfigError, match=r"config.yaml:1:16: workloads_dir: directory .*nowhere does not exist"):
        load_config(tmp_path / "config.yaml")


def test_sizing_constants_are_configurable():
    config = check_config_text("sizing:\n  cuda_context: 300MiB\n  vllm_gpu_memory_utilization: 0.8\n", "c.yaml")
    assert config.sizing.cuda_context_bytes == 300 * 2**20
    assert config.sizing.vllm_gpu_memory_utilization == 0.8
    found = errors("sizing:\n  cuda_context: -1GiB\n")
    assert found and found[0].startswith("c.yaml:2:17: sizing.cuda_context:")


def test_a_scenarios_profiles_join_the_configuration_which_wins_on_a_name():
    """with_profiles: what `--simulate` and `replay` do with a scenario's profiles (in-process here)."""
    import yaml

    from headroom.config import ConfigError, check_config_text, with_profiles

    config = check_config_text(GOOD)
    scenario = yaml.compose("- {name: chat, kind: training, params: 1B, precision: bf16, gpus: [0]}\n"
                            "- {name: batch, kind: training, params: 1B, precision: bf16, gpus: [1]}\n")
    merged = with_profiles(config, scenario, "s.yaml")
    assert [w.name for w in merged.workloads] == ["chat", "batch"]
    assert merged.workload("chat") == config.workload("chat")  # the configuration's chat, not the scenario's
    assert merged.workload("batch").kind == "training" and merged.workload("nope") is None
    assert with_profiles(config, None, "s.yaml") is config
    with pytest.raises(ConfigError) as info:
        with_profiles(config, yaml.compose("- {name: x, kind: inference, params: lots}\n"), "s.yaml")
    assert str(info.value.issues[0]).startswith("s.yaml:1:"), info.value.issues
    assert "profiles[0].params" in str(info.value.issues[0])
    with pytest.raises(ConfigError) as info:
        with_profiles(config, yaml.compose("name: x\n"), "s.yaml")
    assert str(info.value.issues[0]) == "s.yaml:1:1: profiles: expected a list of workload profiles"


def test_an_issue_found_after_loading_points_at_its_key(tmp_path):
    """issue_at: check-config's checks after loading (web.config_file) name the key's line and column."""
    from headroom.config import issue_at

    cfg = tmp_path / "c.yaml"
    cfg.write_text("agent:\n  sample_interval: 1s\nweb:\n  config_file: web.yml\n")
    assert str(issue_at(str(cfg), ["web", "config_file"], "cannot read it")) == \
        f"{cfg}:4:16: web.config_file: cannot read it"
    assert str(issue_at(str(tmp_path / "gone.yaml"), ["web", "config_file"], "x")).startswith(
        f"{tmp_path / 'gone.yaml'}:1:1: web.config_file: x")
