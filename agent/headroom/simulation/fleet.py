"""A simulated GPU fleet: N different hosts for `make fleet` (bench/fleet.py) and tests/test_fleet.py.

``fleet(n)`` returns N ``SimHost``s, each a scenario (the format of docs/scenario-format.md, as data) and the
agent configuration it runs with. Host i is always the same host (deterministic, seeded by i), so a fleet of 20
is the first 20 hosts of a fleet of 100. The mix is what a platform team sees:

- the first four hosts (first two when N < 12) run one data-parallel training job, ``llama-pretrain`` of team
  ``research``, 8 GPUs each; on the third host (the second when only two) GPU 5 is held by thermal slowdown at
  60 % of its clock: the cross-host straggler;
- the others cycle through: an inference service on A100s whose measured peak fits a smaller GPU and fewer
  GPUs; an H200 host serving a 70B model near its memory; L40S GPUs idle under a declared batch workload;
  a training host starved by its CPUs (data loading); one starved by its dataset disk; an H100 inference host
  held at its power cap; two H100s nobody claims, idle (one reported XID 79).

Starved GPUs keep a trickle of work in their waiting phases (never under the agent's idle threshold), so
what the fleet shows as idle is exactly the idle-batch and unclaimed hosts. Every host prices its GPUs (cost_per_gpu_hour by model), so idle cost adds up per team and workload.
Workloads are real stand-in processes (no CPU burnt, a few MiB each) whose command line carries the host name,
so each agent attributes only its own. Host signals are synthetic (``host:``), never the machine's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a scenario and a config.yaml built as data here, validated where the agent loads them
    from headroom.jsontypes import YamlDict, YamlValue

# model -> a scenario GPU's fields as data (name, memory_total, power_limit, sm_clock_max) and its price (cost)
GPU_MODELS: dict[str, YamlDict] = {
    "H100": {"name": "NVIDIA H100 80GB HBM3", "memory_total": "81559MiB", "power_limit": 700, "sm_clock_max": "1980MHz",
             "cost": 4.0},
    "H200": {"name": "NVIDIA H200", "memory_total": "143771MiB", "power_limit": 700, "sm_clock_max": "1980MHz",
             "cost": 5.0},
    "A100": {"name": "NVIDIA A100-SXM4-80GB", "memory_total": "81920MiB", "power_limit": 400, "sm_clock_max": "1410MHz",
             "cost": 2.5},
    "L40S": {"name": "NVIDIA L40S", "memory_total": "46068MiB", "power_limit": 350, "sm_clock_max": "2520MHz",
             "cost": 1.2},
}
TRAINING_JOB = "llama-pretrain"
STRAGGLER_GPU = 5
ARCHETYPES = ("serve-oversized", "serve-h200", "idle-batch", "cpu-starved", "disk-starved", "power-capped",
              "unclaimed")


@dataclass(frozen=True)
class SimHost:
    name: str  # the instance label Prometheus gives it (file_sd __host__)
    archetype: str
    scenario: YamlDict
    config: YamlDict = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return len(self.scenario["gpus"])


def _gpu(model: str, index: int, seed: int, **signals: YamlValue) -> YamlDict:
    m = GPU_MODELS[model]
    gpu = {"name": m["name"], "uuid": f"GPU-{seed:08x}-0000-4000-8000-{index:012x}",
           "pci_bus_id": f"00000000:{index + 0x10:02x}:00.0", "memory_total": m["memory_total"],
           "memory_reserved": "512MiB", "power_limit": m["power_limit"], "sm_clock_max": m["sm_clock_max"],
           "temperature": {"value": 45, "noise": 0.5}}
    gpu.update(signals)
    return gpu


def _training_host(i: int, name: str, rank: int, straggler: bool) -> SimHost:
    gpus = []
    for g in range(8):
        slow = straggler and g == STRAGGLER_GPU
        gpus.append(_gpu(
            "H100", g, i, utilization={"value": 0.97, "noise": 0.01}, memory_utilization=0.55,
            memory_used={"value": "71GiB", "noise": "64MiB"}, power={"value": 640 if not slow else 520, "noise": 8},
            temperature={"value": 89 if slow else 62, "noise": 0.5},
            sm_clock="1188MHz" if slow else "1980MHz",
            clock_events={"sw_thermal_slowdown": slow}))
    cmd = f"torchrun --nnodes 4 --node_rank {rank} train.py --config llama-8b.yaml --host {name}"
    scenario = {
        "description": f"{name}: rank {rank} of the {TRAINING_JOB} job" + (" (thermal straggler)" if straggler else ""),
        "seed": i, "gpus": gpus,
        "workloads": [{"name": "pretrain", "cmdline": cmd, "gpus": dict.fromkeys(range(8), "70GiB")}],
        "host": {"cpu": {"logical_cpus": 96, "utilization": 0.3}, "memory": {"total": "2TiB"},
                 "network": [{"name": "ib0", "speed": "400Gbit", "rx": "20GB", "tx": "20GB"}]},
        "profiles": [{"name": "pretrain", "kind": "training", "params": "8B", "precision": "bf16",
                      "training": {"optimizer": "adamw"}, "parallel": {"data": 8}, "gpus": list(range(8)),
                      "match": {"cmdline": f"--host {name}$"}, "job": TRAINING_JOB, "team": "research"}],
    }
    return SimHost(name, "train-straggler" if straggler else "train", scenario)


def _other_host(i: int, name: str, archetype: str) -> SimHost:
    host: YamlDict = {"cpu": {"logical_cpus": 64, "utilization": 0.15}, "memory": {"total": "512GiB"}}
    workloads: list[YamlDict] = []
    profiles: list[YamlDict] = []

    def workload(wname: str, cmd: str, gpus: dict[int, str], team: str, **profile: YamlValue) -> None:
        workloads.append({"name": wname, "cmdline": f"{cmd} --host {name}", "gpus": gpus})
        profiles.append({"name": wname, "gpus": sorted(gpus), "match": {"cmdline": f"--host {name}$"},
                         "team": team, **profile})

    if archetype == "serve-oversized":
        gpus = [_gpu("A100", g, i, utilization={"sine": {"min": 0.2, "max": 0.5, "period": "2m"}},
                     memory_used="17GiB", power={"value": 180, "noise": 5}) for g in range(2)]
        workload("search-embed", "python3 -m vllm.entrypoints.openai.api_server --model BAAI/bge-m3", {0: "16GiB", 1: "16GiB"},
                 "search", kind="inference", params="8B", precision="bf16")
    elif archetype == "serve-h200":
        gpus = [_gpu("H200", g, i, utilization={"value": 0.8, "noise": 0.05}, memory_used="126GiB",
                     power={"value": 560, "noise": 10}) for g in range(8)]
        workload("chat-70b", "vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 8",
                 dict.fromkeys(range(8), "125GiB"), "search", kind="inference", params="70B", precision="bf16")
    elif archetype == "idle-batch":
        gpus = [_gpu("L40S", g, i, utilization=0.0, memory_used="2GiB", power=40, temperature=30)
                for g in range(4)]
        workload("batch-embed", "python3 embed_batch.py --queue nightly", dict.fromkeys(range(4), "1GiB"), "vision",
                 kind="inference", params="1B", precision="fp16")
    elif archetype == "cpu-starved":
        gpus = [_gpu("H100", 0, i, utilization={"steps": [[0, 0.92], [1, 0.12], [2, 0.1], [3, 0.14]], "repeat": True,
                                                "period": 4, "noise": 0.02},
                     memory_used="38GiB", power={"steps": [[0, 520], [1, 140]], "repeat": True, "period": 4})]
        host = {"cpu": {"logical_cpus": 16, "utilization": {"value": 0.98, "noise": 0.01}},
                "pressure": {"cpu": {"some": 0.45}}, "memory": {"total": "128GiB"}}
        workload("vision-train", "python3 train.py --arch vit_large_patch16_224 --workers 4", {0: "37GiB"}, "vision",
                 kind="training", params="304M", precision="bf16", dataloader_workers=4)
    elif archetype == "disk-starved":
        gpus = [_gpu("A100", g, i, utilization={"steps": [[0, 0.85], [1, 0.12], [3, 0.1]], "repeat": True,
                                                "period": 5, "noise": 0.02},
                     memory_used="30GiB", power={"steps": [[0, 330], [1, 90]], "repeat": True, "period": 5})
                for g in range(4)]
        host = {"cpu": {"logical_cpus": 32, "utilization": 0.18, "iowait": 0.22},
                "pressure": {"io": {"some": 0.6, "full": 0.38}}, "memory": {"total": "256GiB"},
                "disks": [{"name": "nvme0n1", "busy": 0.03}, {"name": "sda", "busy": 0.98, "read": "480MiB",
                                                              "queue_depth": 30, "request_size": "64KiB"}]}
        workload("resnet-train", "python3 train_imagenet.py --arch resnet50 --data /mnt/sata/imagenet",
                 dict.fromkeys(range(4), "29GiB"), "vision", kind="training", params="25.6M", precision="fp16")
    elif archetype == "power-capped":
        gpus = [_gpu("H100", g, i, utilization={"value": 0.98, "noise": 0.01}, memory_used="60GiB",
                     power={"value": 699, "noise": 1}, sm_clock="1530MHz", clock_events={"sw_power_cap": True})
                for g in range(8)]
        workload("ranker", "python3 serve_ranker.py --replicas 8", dict.fromkeys(range(8), "59GiB"), "ads",
                 kind="inference", params="13B", precision="bf16")
    else:  # unclaimed
        gpus = [_gpu("H100", g, i, utilization=0.0, memory_used="0GiB", power=70, temperature=31) for g in range(2)]
        gpus[1]["xids"] = [{"at": "5s", "code": 79}]  # fell off the bus once: why nobody schedules on it
    scenario = {"description": f"{name}: {archetype}", "seed": i, "gpus": gpus, "workloads": workloads,
                "host": host, "profiles": profiles}
    return SimHost(name, archetype, scenario)


def fleet(n: int) -> list[SimHost]:
    """N simulated hosts (see the module docstring); at least 1."""
    if n < 1:
        raise ValueError("a fleet has at least one host")
    trainers = 4 if n >= 12 else 2 if n >= 3 else 0
    straggler = 2 if trainers == 4 else 1
    hosts = []
    for i in range(n):
        if i < trainers:
            h = _training_host(i, f"gpu-train-{i + 1:02d}", i, straggler=i == straggler)
        else:
            archetype = ARCHETYPES[(i - trainers) % len(ARCHETYPES)]
            h = _other_host(i, f"gpu-{archetype}-{i + 1:02d}", archetype)
        model = h.scenario["gpus"][0]["name"]
        cost = next(m["cost"] for m in GPU_MODELS.values() if m["name"] == model)
        hosts.append(SimHost(h.name, h.archetype, h.scenario, {"analysis": {"cost_per_gpu_hour": cost}}))
    return hosts
