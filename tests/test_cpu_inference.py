"""Work without a GPU (issue 26, class 5): a cpu-inference profile or a runtime on a GPU-less host gets real scores from
its own work, no rule is 0 while its evidence says the resource is saturated and the workload takes part in it, the
KV cache precedes cpu when the cache is full with requests waiting, and the remedies fit the device."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from headroom.analysis import bottleneck, remedies
from headroom.analysis.bottleneck import DEFAULT_THRESHOLDS as T
from headroom.analysis.serving import Scrape, ServingSignals
from headroom.analysis.signals import GpuSignals, HostSignals, WorkloadSignals

GIB = 2**30


def profile(kind: str = "cpu-inference", runtime: str = "vllm"):
    return SimpleNamespace(name="chat", kind=SimpleNamespace(value=kind), runtime=SimpleNamespace(name=runtime),
                           parallel=None)


def work(cores: float = 4.0, allowed: float = 16.0, processes: int = 3, io: float | None = 0.0) -> WorkloadSignals:
    return WorkloadSignals("chat", processes=processes, cores_used=cores, cores_allowed=allowed, io_bytes_per_second=io)


def serving(usage: float = 0.4, waiting: float = 0.0, running: float = 4.0, ppm: float = 0.0) -> ServingSignals:
    # ten scrapes alike: the kv_cache rule judges each scrape's usage, queue and preemptions together
    scrapes = tuple(Scrape(usage, waiting, running, ppm) for _ in range(10))
    return ServingSignals("chat", "http://127.0.0.1:8000/metrics", True, runtime="vllm", usage=usage, running=running,
                          waiting=waiting, preemptions_per_minute=ppm, capacity_tokens=65536.0, samples=10,
                          scrapes=scrapes)


CALM = dict(logical_cpus=16, cpu_busy=0.3, memory_total_bytes=64 * GIB, memory_available_bytes=40 * GIB,
            shm_fill=0.1, shm_mountpoint="/dev/shm", shm_available_bytes=29 * GIB, shm_size_bytes=32 * GIB,
            disk_busy=0.1, disk_device="nvme0n1", disk_bytes_per_second=1e6)

# resource -> (host fields that saturate it, the workload's own signals that involve it in that resource)
SATURATED = {
    "cpu": (dict(cpu_busy=0.99), work(cores=15.8)),
    "host_memory": (dict(memory_available_bytes=int(0.5 * GIB), psi={"memory.full": 0.3}), work(cores=1.0)),
    "shared_memory": (dict(shm_fill=0.99, shm_available_bytes=GIB // 4), work(cores=4.0, processes=3)),
    "disk_io": (dict(disk_busy=0.97, psi={"io.some": 0.7}, disk_bytes_per_second=300e6), work(cores=2.0, io=200e6)),
}
# the same saturation with the workload not taking part: 0, with evidence that says why
UNINVOLVED = {
    "cpu": work(cores=0.0),
    "shared_memory": work(cores=4.0, processes=1),
    "disk_io": work(cores=2.0, io=0.0),
}


@pytest.mark.parametrize("kind", ["cpu-inference", "inference"])  # declared, and a runtime on a GPU-less host
@pytest.mark.parametrize("resource", sorted(SATURATED))
def test_no_rule_is_zero_by_construction_for_work_without_a_gpu(kind, resource):
    fields, w = SATURATED[resource]
    host = HostSignals(**{**CALM, **fields})
    v = bottleneck.score_workload(profile(kind), w, [], host, T)
    assert v.scores[resource] >= T["primary_min_score"], (resource, v.scores, v.evidence[resource])
    assert v.candidate == resource, (v.scores, v.evidence)


@pytest.mark.parametrize("resource", sorted(UNINVOLVED))
def test_a_zero_score_says_why_when_the_host_is_saturated(resource):
    fields, _ = SATURATED[resource]
    host = HostSignals(**{**CALM, **fields})
    v = bottleneck.score_workload(profile(), UNINVOLVED[resource], [], host, T)
    assert v.scores[resource] == 0.0, (resource, v.scores)
    text = v.evidence[resource]
    assert "not limiting" in text or "counts 0 %" in text, text


def test_an_idle_cpu_server_is_none_whatever_the_host_does():
    host = HostSignals(**{**CALM, **SATURATED["shared_memory"][0], "memory_available_bytes": GIB // 2,
                          "psi": {"memory.full": 0.3}})
    v = bottleneck.score_workload(profile("cpu-inference", "llama.cpp"), work(cores=0.01, processes=1), [], host, T)
    assert v.candidate == "none" and max(v.scores.values()) == 0.0, v.scores
    assert "idle for lack of work" in v.evidence["none"]


def test_a_full_kv_cache_with_a_queue_precedes_saturated_cores():
    """The real case: vLLM CPU on 2 cores, cache full, 9 waiting, preempting: cpu scores 1, yet more cache is the fix."""
    host = HostSignals(**{**CALM, "logical_cpus": 2, "cpu_busy": 0.98})
    full = serving(usage=0.97, waiting=9, running=2, ppm=30)
    v = bottleneck.score_workload(profile(), work(cores=1.95, allowed=2.0), [], host, T, serving=full)
    assert v.scores["cpu"] >= v.scores["kv_cache"] >= T["primary_min_score"], v.scores
    assert v.candidate == "kv_cache", (v.scores, v.evidence["kv_cache"])
    assert "kv_cache precedes cpu" in v.evidence["kv_cache"]


def test_saturated_cores_with_room_in_the_cache_are_cpu():
    host = HostSignals(**{**CALM, "logical_cpus": 2, "cpu_busy": 0.98})
    room = serving(usage=0.4, waiting=6, running=2)
    v = bottleneck.score_workload(profile(), work(cores=1.95, allowed=2.0), [], host, T, serving=room)
    assert v.candidate == "cpu" and v.scores["kv_cache"] == 0.0, v.scores
    assert "runtime's own limits" not in v.evidence["kv_cache"]  # the cores hold the queue back, not max_num_seqs


def test_precedence_is_not_applied_on_a_gpu():
    gpu = GpuSignals(0, "GPU-0", "H100", up=True, busy=0.99, memory_used_ratio=0.9)
    full = serving(usage=0.97, waiting=9, running=2, ppm=30)
    v = bottleneck.score_workload(profile("inference"), work(cores=1.95, allowed=2.0), [gpu],
                                  HostSignals(**{**CALM, "cpu_busy": 0.98}), T, serving=full)
    assert "precedes" not in v.evidence.get(v.candidate, "")


def test_decide_gives_way_to_a_cause_that_scores_high_enough():
    scores = {"cpu": 1.0, "kv_cache": 0.6}
    assert bottleneck.decide(scores, T, precedes=bottleneck.CPU_WORK_PRECEDES)[0] == "kv_cache"
    assert bottleneck.decide(scores, T)[0] == "cpu"
    assert bottleneck.decide({"cpu": 1.0, "kv_cache": 0.4}, T, precedes=bottleneck.CPU_WORK_PRECEDES)[0] == "cpu"


@pytest.mark.parametrize("kind", ["cpu-inference", "inference"])
def test_remedies_fit_the_device(kind):
    facts = remedies.Facts(gpus=(), host=HostSignals(memory_available_bytes=48 * GIB), workload=work(15.8),
                           profile=profile(kind), serving=serving(usage=0.97, waiting=9))
    kv = remedies.remedy("kv_cache", facts).text
    assert "`--kv-cache-memory-bytes`" in kv and "VLLM_CPU_KVCACHE_SPACE" in kv and "gpu-memory-utilization" not in kv
    cpu = remedies.remedy("cpu", facts).text
    assert "VLLM_CPU_OMP_THREADS_BIND" in cpu and "15.80 of the 16 cores" in cpu and "num_workers" not in cpu
    llama = remedies.Facts(gpus=(), host=facts.host, workload=work(15.8), profile=profile(kind, "llama.cpp"))
    assert "`--threads`" in remedies.remedy("cpu", llama).text
    assert "--ctx-size" in remedies.remedy("kv_cache", llama).text


def test_gpu_remedies_keep_speaking_of_the_gpu():
    gpu = GpuSignals(0, "GPU-0", "H100", up=True, busy=0.9, memory_used_bytes=72 * GIB, memory_total_bytes=80 * GIB)
    facts = remedies.Facts(gpus=(gpu,), host=HostSignals(), workload=work(2.0), profile=profile("inference"),
                           serving=serving(usage=0.97, waiting=9))
    assert "`--gpu-memory-utilization`" in remedies.remedy("kv_cache", facts).text
    assert "VLLM_CPU_OMP_THREADS_BIND" not in remedies.remedy("cpu", facts).text
