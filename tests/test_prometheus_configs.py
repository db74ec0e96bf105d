"""deploy/prometheus: every example configuration passes `promtool check config` (rule files included), the
file_sd generator writes what Prometheus reads, and the relabelling of every example turns what its service
discovery would find into a meaningful `instance` in a real Prometheus (/api/v1/targets).

Debian's Prometheus 2.42 is built without the Consul and Kubernetes discovery mechanisms; where promtool
rejects those blocks as unknown fields, the check runs once more with only that block replaced by an empty
file_sd block (so everything else, relabelling included, is still checked), and says so in the test name."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest
import yaml

from headroom.fleet import file_sd
from test_prometheus_integration import Prometheus

from conftest import ROOT, free_port

CONFIGS = ROOT / "deploy" / "prometheus"
EXAMPLES = sorted(CONFIGS.glob("*.yml"))
SD_BLOCKS = ("consul_sd_configs", "kubernetes_sd_configs")


def promtool(*args: str) -> subprocess.CompletedProcess:
    assert shutil.which("promtool"), "promtool missing: `make test` installs Debian's prometheus package"
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60)


def test_the_examples_are_there():
    assert {p.name for p in EXAMPLES} == {"file-sd.yml", "consul.yml", "kubernetes-pods.yml", "remote-write.yml"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_promtool_check_config(path, tmp_path):
    out = promtool("check", "config", str(path))
    if out.returncode != 0:
        unsupported = [b for b in SD_BLOCKS if f"field {b} not found" in out.stdout + out.stderr]
        assert unsupported, out.stdout + out.stderr
        # this promtool lacks the mechanism: check everything else with the block swapped for an empty file_sd
        config = yaml.safe_load(path.read_text())
        for job in config["scrape_configs"]:
            for block in unsupported:
                if job.pop(block, None) is not None:
                    job["file_sd_configs"] = [{"files": [str(tmp_path / "none" / "*.json")]}]
        config["rule_files"] = [str((path.parent / f).resolve()) for f in config["rule_files"]]
        (tmp_path / path.name).write_text(yaml.safe_dump(config))
        out = promtool("check", "config", str(tmp_path / path.name))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr


def test_the_generator_writes_the_checked_in_example(tmp_path):
    inventory = yaml.safe_load((CONFIGS / "inventory.example.yaml").read_text())
    dest = tmp_path / "targets" / "headroom.json"
    file_sd.write_atomically(dest, file_sd.target_groups(inventory))
    assert json.loads(dest.read_text()) == json.loads((CONFIGS / "targets" / "headroom.json").read_text())
    assert [p.name for p in dest.parent.iterdir()] == ["headroom.json"]  # no temporary file left behind


@pytest.mark.parametrize(("inventory", "message"), [
    ({"hosts": []}, "hosts: expected a non-empty list"),
    ({"hosts": ["a", "a"]}, "hosts[1].name: a is listed twice"),
    ({"hosts": [{"name": "a", "port": 70000}]}, "hosts[0].port: expected a port number"),
    ({"hosts": ["a"], "labels": {"instance": "x"}}, "labels.instance: not a label name you may set"),
    ({"hosts": [{"name": "a", "adress": "b"}]}, "hosts[0]: unknown keys: adress"),
    ({"hosts": ["a b"]}, "hosts[0].name: expected a host name"),
])
def test_bad_inventories_say_what_is_wrong(inventory, message):
    with pytest.raises(file_sd.InventoryError) as exc:
        file_sd.target_groups(inventory)
    assert message in str(exc.value)


def test_the_generator_cli_exits_2_with_the_file_name(tmp_path, capsys):
    bad = tmp_path / "inv.yaml"
    bad.write_text("hosts: [{name: a, port: x}]\n")
    assert file_sd.main([str(bad), str(tmp_path / "out.json")]) == 2
    assert f"{bad}: hosts[0].port: expected a port number" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


def _relabel_job(example: str, name: str) -> dict:
    [job] = yaml.safe_load((CONFIGS / example).read_text())["scrape_configs"]
    return {"job_name": name, "relabel_configs": job["relabel_configs"]}


def test_relabelling_makes_instance_the_host_name(tmp_path):
    """Targets carrying the labels each discovery mechanism attaches (file_sd: the generator's; Consul and
    Kubernetes: their documented __meta_* labels) go through each example's relabel_configs in a real
    Prometheus; the resulting instance is the host or node name, never an address:port."""
    port = free_port()  # nothing listens: the targets are down, their labels are what matters
    sd = tmp_path / "sd"
    sd.mkdir()
    groups = file_sd.target_groups({"port": port, "hosts": [
        "localhost", {"name": "gpu-node-07", "address": "127.0.0.1", "labels": {"pool": "h100"}}]})
    (sd / "file.json").write_text(json.dumps(groups))
    (sd / "consul.json").write_text(json.dumps([
        {"targets": [f"127.0.0.2:{port}"], "labels": {"__meta_consul_node": "gpu-node-08", "__meta_consul_dc": "eu1",
                                                      "__meta_consul_health": "passing",
                                                      "__meta_consul_metadata_gpu_pool": "a100"}},
        {"targets": [f"127.0.0.3:{port}"], "labels": {"__meta_consul_node": "gpu-node-09",
                                                      "__meta_consul_health": "critical"}}]))
    (sd / "k8s.json").write_text(json.dumps([
        {"targets": [f"127.0.0.4:{port}"], "labels": {
            "__meta_kubernetes_pod_container_port_name": "metrics", "__meta_kubernetes_pod_phase": "Running",
            "__meta_kubernetes_pod_node_name": "gpu-node-10", "__meta_kubernetes_namespace": "headroom",
            "__meta_kubernetes_pod_name": "headroom-x7k2p"}},
        {"targets": [f"127.0.0.5:{port}"], "labels": {
            "__meta_kubernetes_pod_container_port_name": "other", "__meta_kubernetes_pod_phase": "Running",
            "__meta_kubernetes_pod_node_name": "gpu-node-11"}}]))
    jobs = [(_relabel_job("file-sd.yml", "headroom-file"), "file.json"),
            (_relabel_job("consul.yml", "headroom-consul"), "consul.json"),
            (_relabel_job("kubernetes-pods.yml", "headroom-k8s"), "k8s.json")]
    config = {"global": {"scrape_interval": "1h"},
              "scrape_configs": [{**job, "file_sd_configs": [{"files": [str(sd / f)]}]} for job, f in jobs]}
    prom = Prometheus(tmp_path, "unused", config=config)
    try:
        prom.wait_ready()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            active = prom.api("/api/v1/targets")["data"]["activeTargets"]
            if len(active) >= 4:
                break
            time.sleep(0.3)
        found = sorted((t["labels"]["job"], t["labels"]["instance"], t["labels"].get("pool", ""),
                        t["labels"].get("datacenter", t["labels"].get("node", ""))) for t in active)
    finally:
        prom.stop()
    assert found == [
        ("headroom-consul", "gpu-node-08", "a100", "eu1"),
        ("headroom-file", "gpu-node-07", "h100", ""),
        ("headroom-file", "localhost", "", ""),
        ("headroom-k8s", "gpu-node-10", "", "gpu-node-10"),
    ]
