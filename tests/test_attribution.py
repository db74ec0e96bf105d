"""Workload attribution (workload/attribution.py): NVML process lists joined with the workload's pids, and
the memory model's expectation against it. Pure: Samples are built here, nothing reads the host."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from headroom.samples import (
    GpuProcess,
    GpuSample,
    MemorySample,
    MigInstance,
    NvmlSample,
    ProcessesSample,
    Sample,
    SourceResult,
    WorkloadProcesses,
)
from headroom.workload.attribution import attribute
from headroom.workload.profiles import profile_from_dict
from headroom.workload.sizing import estimate

GIB = 1 << 30
H100 = 81559 * (1 << 20)

CHAT = {
    "name": "chat", "kind": "inference", "model": "meta-llama/Llama-3.1-70B-Instruct",
    "runtime": {"name": "vllm", "version": "0.10.1", "gpu_memory_utilization": 0.9}, "params": "70.6B",
    "precision": "bf16",
    "architecture": {"layers": 80, "heads": 64, "kv_heads": 8, "head_dim": 128, "hidden_size": 8192},
    "context": 8192, "concurrency": 3, "parallel": {"tensor": 2}, "match": {"cmdline": "vllm serve"},
}  # fmt: skip


def gpu(index: int, *procs: GpuProcess, total: int = H100, up: bool = True, mig: tuple = ()) -> GpuSample:
    return GpuSample(index=index, uuid=f"GPU-{index}", name="NVIDIA H100 80GB HBM3", pci_bus_id=f"0:{index}",
                     up=up, memory_total_bytes=total if up else None, processes=procs, mig_instances=mig)


def members(name: str, *pids: int, ranks: dict | None = None) -> WorkloadProcesses:
    return WorkloadProcesses(name=name, pids=pids, threads=len(pids), cpu_user_seconds_total=1.0,
                             cpu_system_seconds_total=0.5, resident_memory_bytes=GIB, main_pid=pids[0] if pids else None,
                             ranks=MappingProxyType(ranks or {}))  # fmt: skip


def sample(*gpus: GpuSample, workloads: tuple = (), processes_ok: bool = True, host_memory: int | None = None) -> Sample:
    sources = {
        "nvml": SourceResult("nvml", True, 0.01, NvmlSample(up=True, gpus=gpus)),
        "processes": SourceResult("processes", processes_ok, 0.001,
                                  ProcessesSample(workloads) if processes_ok else None, None if processes_ok else "x"),
    }
    if host_memory is not None:
        sources["memory"] = SourceResult("memory", True, 0.001, MemorySample(host_memory, host_memory, host_memory))
    return Sample(timestamp=0.0, monotonic=0.0, sources=sources)


def prof(base: dict, **changes):
    return profile_from_dict({**base, **changes})


def test_vllm_on_two_gpus_memory_is_joined_by_pid_and_the_peak_is_the_reservation_on_both():
    s = sample(gpu(0, GpuProcess(201, 70 * GIB, sm_utilization_ratio=0.6), GpuProcess(999, 5 * GIB)),
               gpu(1, GpuProcess(202, 71 * GIB, sm_utilization_ratio=0.7)),
               gpu(2, GpuProcess(999, 3 * GIB)),
               workloads=(members("chat", 200, 201, 202),))
    (st,) = attribute(s, [prof(CHAT)])
    assert st.processes == 3 and st.measured.pids == (200, 201, 202)
    assert st.gpu_indices == (0, 1)
    assert [(g.index, g.memory_used_bytes, g.utilization_ratio) for g in st.gpus] == [(0, 70 * GIB, 0.6),
                                                                                    (1, 71 * GIB, 0.7)]
    assert st.gpu_memory_used_bytes == 141 * GIB
    assert st.gpu_memory_capacity_bytes == 2 * H100
    assert st.expected_per_gpu_bytes == int(H100 * 0.9)  # vLLM reserves 0.9 of each card up front
    assert st.expected_peak_bytes == 2 * int(H100 * 0.9)
    assert st.expected_components == {c.name: c.bytes for c in estimate(prof(CHAT), H100, 2).components}
    assert st.expected_components["weights"] == 2 * 70_600_000_000 // 2  # bf16, tensor parallel 2: half each
    assert (st.kind, st.model, st.precision, st.runtime) == ("inference", "meta-llama/Llama-3.1-70B-Instruct",
                                                             "bf16", "vllm")
    assert st.estimate_error is None and st.estimate is not None and st.estimate.fits


def test_a_declared_gpu_where_none_of_its_processes_runs_reads_zero():
    s = sample(gpu(0, GpuProcess(999, 5 * GIB)), gpu(1), workloads=(members("chat", 200),))
    (st,) = attribute(s, [prof(CHAT, gpus=[1, "GPU-0"])])
    assert [(g.index, g.memory_used_bytes, g.declared, g.attributed) for g in st.gpus] == [
        (0, 0, True, False), (1, 0, True, False)]
    assert st.gpu_memory_used_bytes == 0


@pytest.mark.parametrize(("situation", "procs", "used", "util"), [
    ("NVML cannot say the memory of any of its processes", (GpuProcess(201, None), GpuProcess(202, None)), None, None),
    ("one of two processes is unknown: the known one counts", (GpuProcess(201, 2 * GIB), GpuProcess(202, None)),
     2 * GIB, None),
    ("per-process utilization adds up, capped at 1", (GpuProcess(201, GIB, sm_utilization_ratio=0.7),
                                                       GpuProcess(202, GIB, sm_utilization_ratio=0.5)), 2 * GIB, 1.0),
])
def test_measured_gpu_values(situation, procs, used, util):
    (st,) = attribute(sample(gpu(0, *procs), workloads=(members("chat", 201, 202),)), [prof(CHAT)])
    (g,) = st.gpus
    assert (g.memory_used_bytes, g.utilization_ratio) == (used, util), situation


def test_a_profile_the_model_cannot_size_keeps_its_measured_values_and_says_why():
    p = prof({"name": "mystery", "kind": "inference", "match": {"exe": "server"}})
    (st,) = attribute(sample(gpu(0, GpuProcess(7, 9 * GIB)), workloads=(members("mystery", 7),)), [p])
    assert st.estimate_error and "params" in st.estimate_error
    assert st.expected_peak_bytes is None and dict(st.expected_components) == {}
    assert st.gpu_memory_used_bytes == 9 * GIB and st.processes == 1


def test_nothing_running_and_no_gpu_declared_expects_the_parallel_layout_without_a_capacity():
    (st,) = attribute(sample(gpu(0), workloads=(members("chat"),)), [prof(CHAT)])
    assert st.gpus == () and st.gpu_memory_capacity_bytes is None and st.gpu_memory_used_bytes is None
    e = estimate(prof(CHAT))  # memory unknown: no vLLM reservation, the components' sum
    assert st.expected_peak_bytes == 2 * e.needed_bytes


def test_cpu_inference_is_sized_against_host_memory_and_has_no_gpu_series():
    p = prof({"name": "cpu", "kind": "cpu-inference", "params": "7B", "precision": "int4",
              "architecture": {"layers": 32, "heads": 32, "kv_heads": 8, "head_dim": 128}, "context": 4096,
              "match": {"exe": "llama-server"}})
    (st,) = attribute(sample(gpu(0, GpuProcess(4000, GIB)), workloads=(members("cpu", 4000),),
                             host_memory=64 * GIB), [p])
    assert st.gpus == () and st.expected_peak_bytes is None and st.gpu_memory_capacity_bytes is None
    assert st.expected_components["weights"] == 3_500_000_000
    assert st.estimate.gpu_memory_bytes == 64 * GIB


def test_dataloader_workers_are_those_found_under_the_ranks_not_the_declared_count():
    """Issue 25: the count is measured (summed over the ranks the collector found), for a trainer whether or not its
    profile declares workers; under torchrun the launcher's children are the ranks, not its workers (the old count
    was the main process's children: 2 here, torchrun's ranks)."""
    base = {"name": "trainer", "kind": "finetune-lora", "match": {"cmdline": "train.py"}}
    torchrun = members("trainer", 900, 1000, 1001, 1010, 1011, 1012, ranks={1000: (1010, 1011, 1012), 1001: ()})
    (declared,) = attribute(sample(workloads=(torchrun,)), [prof(base, dataloader_workers=4)])
    (undeclared,) = attribute(sample(workloads=(torchrun,)), [prof(base)])
    assert declared.dataloader_workers == 3 and undeclared.dataloader_workers == 3
    assert declared.declared_dataloader_workers == 4 and undeclared.declared_dataloader_workers is None
    assert declared.dataloader_workers_problem == (
        "the profile declares dataloader_workers 4 (per rank) but 3 run under its 2 ranks (pid 1000 3, pid 1001 0); "
        "the measured count is used")
    assert undeclared.dataloader_workers_problem is None


def test_declared_workers_that_run_on_every_rank_are_no_problem_and_serving_has_no_count():
    base = {"name": "trainer", "kind": "training", "match": {"cmdline": "train.py"}}
    w = members("trainer", 1000, 1001, 1010, 1011, ranks={1000: (1010,), 1001: (1011,)})
    (st,) = attribute(sample(workloads=(w,)), [prof(base, dataloader_workers=1)])
    assert st.dataloader_workers == 2 and st.dataloader_workers_problem is None
    chat = members("chat", 300, 301, ranks={300: ()})
    (served,) = attribute(sample(workloads=(chat,)), [prof(CHAT, name="chat")])
    assert served.dataloader_workers is None  # a serving runtime's engine process is no DataLoader worker
    (unmeasured,) = attribute(sample(workloads=()), [prof(base, dataloader_workers=1)])
    assert unmeasured.dataloader_workers is None and unmeasured.dataloader_workers_problem is None


def test_collector_failure_leaves_measured_values_unknown_and_uses_declared_gpus():
    (st,) = attribute(sample(gpu(0, GpuProcess(201, GIB)), gpu(1), processes_ok=False), [prof(CHAT, parallel={"tensor": 1}, gpus=[1])])
    assert st.processes is None and st.measured is None
    assert st.gpu_indices == (1,)


def test_a_declared_mig_instance_brings_its_own_capacity_and_a_lost_gpu_reads_unknown():
    mig = (MigInstance(1, 0, "MIG-aaaa", 9 * GIB, 20 * GIB),)
    s = sample(gpu(0, mig=mig), gpu(1, up=False), workloads=(members("chat"),))
    (st,) = attribute(s, [prof(CHAT, gpus=["MIG-aaaa", 1])])
    assert [(g.index, g.memory_total_bytes, g.memory_used_bytes) for g in st.gpus] == [(0, 20 * GIB, 0),
                                                                                     (1, None, None)]
    assert st.gpu_memory_capacity_bytes is None  # one GPU's memory is unknown


def test_processes_listed_only_by_their_mig_instance_are_attributed_to_it():
    """On a MIG GPU the whole-GPU process list needs privileges a container lacks; the instance's own list
    names the workload's process: it is attributed there, counted once when both lists name it, and its
    capacity is the instance's (the sum when it holds several)."""
    mig = (MigInstance(1, 0, "MIG-a", 9 * GIB, 10 * GIB, processes=(GpuProcess(201, 8 * GIB),)),
           MigInstance(2, 0, "MIG-b", 19 * GIB, 20 * GIB, processes=(GpuProcess(202, 18 * GIB),)),
           MigInstance(3, 0, "MIG-c", 1 * GIB, 40 * GIB, processes=(GpuProcess(999, GIB),)))
    p = prof(CHAT, gpus=None, match={"exe": "server"}, parallel={"tensor": 1})
    (st,) = attribute(sample(gpu(0, mig=mig), workloads=(members("chat", 201, 202),)), [p])
    (g,) = st.gpus
    assert (g.mig_instances, g.memory_total_bytes, g.memory_used_bytes) == (("MIG-a", "MIG-b"), 30 * GIB, 26 * GIB)
    assert g.attributed and not g.declared
    both = gpu(0, GpuProcess(201, 8 * GIB), mig=mig[:1])  # the whole-GPU list names it too
    (st,) = attribute(sample(both, workloads=(members("chat", 201),)), [p])
    assert st.gpus[0].memory_used_bytes == 8 * GIB and st.gpus[0].mig_instances == ("MIG-a",)


def test_workloads_come_back_in_declaration_order_even_when_one_has_no_entry():
    a, b = prof(CHAT, name="a"), prof(CHAT, name="b")
    statuses = attribute(sample(workloads=(members("b", 5),)), [a, b])
    assert [(s.name, s.processes) for s in statuses] == [("a", None), ("b", 1)]


def test_each_automatic_workload_gets_exactly_its_own_gpus_among_many():
    """50 pods time-slicing 4 GPUs (one with MIG), and a pod the kubelet gave a MIG instance before its process
    started: each gets the GPUs that list its process or that it holds, with its own processes' memory only."""
    from headroom.samples import IdentityGroup, IdentitySample

    mig = (MigInstance(gpu_instance_id=1, compute_instance_id=0, uuid="MIG-3a", memory_total_bytes=40 * GIB,
                       memory_used_bytes=0),
           MigInstance(gpu_instance_id=2, compute_instance_id=0, uuid="MIG-3b", memory_total_bytes=20 * GIB,
                       memory_used_bytes=5 * GIB, processes=(GpuProcess(2000, 5 * GIB),)))  # listed by it only
    gpus = [gpu(i, *(GpuProcess(1000 + p, (p + 1) * GIB) for p in range(50) if p % 4 == i),
                mig=mig if i == 3 else ()) for i in range(4)]
    pods = tuple(IdentityGroup("pod", f"ns/pod-{p}", pids=(1000 + p,), gpus=(f"GPU-{p % 4}",)) for p in range(50))
    waiting = IdentityGroup("pod", "ns/waiting", gpus=("MIG-3a",))
    both = IdentityGroup("pod", "ns/two-gpus", pids=(1001, 1002), gpus=("GPU-1", "GPU-2"))
    inside = IdentityGroup("pod", "ns/in-instance", pids=(2000,))  # its GPU found by its process alone
    s = sample(*gpus)
    s = Sample(0.0, 0.0, {**s.sources, "identity": SourceResult("identity", True, 0.0, IdentitySample(
        groups=(*pods, waiting, both, inside), max_groups=100))})
    by_name = {st.name: st for st in attribute(s, [])}
    for p in range(50):
        st = by_name[f"ns/pod-{p}"]
        assert [(g.index, g.memory_used_bytes, g.attributed) for g in st.gpus] == [(p % 4, (p + 1) * GIB, True)]
    assert [(g.index, g.memory_used_bytes, g.memory_total_bytes, g.attributed) for g in by_name["ns/waiting"].gpus] \
        == [(3, 0, 40 * GIB, False)]
    assert [(g.index, g.memory_used_bytes) for g in by_name["ns/two-gpus"].gpus] == [(1, 2 * GIB), (2, 3 * GIB)]
    assert [(g.index, g.memory_used_bytes, g.memory_total_bytes, g.mig_instances)
            for g in by_name["ns/in-instance"].gpus] == [(3, 5 * GIB, 20 * GIB, ("MIG-3b",))]


def test_the_estimate_and_a_refusal_are_memoised_across_ticks():
    """attribute() runs every tick: the memory model runs once per (profile, GPU memory, GPU count), a
    refusal included (an unsizable profile once re-ran the whole model every tick)."""
    from headroom.workload import attribution

    mystery = prof({"name": "mystery", "kind": "inference", "match": {"exe": "server"}})
    chat = prof(CHAT)
    ticks = [sample(gpu(0, GpuProcess(7, 9 * GIB), GpuProcess(201, 60 * GIB)),
                    workloads=(members("mystery", 7), members("chat", 201))) for _ in range(3)]
    # private: the lru_cache of the estimate: the cache hit is what is tested, no public name shows it
    attribution._estimate.cache_clear()
    results = [attribute(s, [mystery, chat]) for s in ticks]
    # private: the lru_cache of the estimate: the cache hit is what is tested, no public name shows it
    info = attribution._estimate.cache_info()
    assert (info.misses, info.hits) == (2, 4)
    for m, c in results:  # the memoised answers are the first tick's, refusal and estimate alike
        assert m.estimate_error == results[0][0].estimate_error and "params" in m.estimate_error
        assert c.estimate == results[0][1].estimate and c.estimate_error is None


# ------------------------------------------------------------------ automatic workloads remembered across ticks
def _tick(gpus: list[GpuSample], groups: tuple, workloads: tuple = ()) -> Sample:
    from headroom.samples import IdentitySample

    s = sample(*gpus, workloads=workloads)
    return Sample(0.0, 0.0, {**s.sources, "identity": SourceResult("identity", True, 0.0, IdentitySample(
        groups=groups, max_groups=100))})


def test_an_unchanged_automatic_workload_keeps_its_status_and_a_change_makes_a_new_one():
    """AutoStatuses: last tick's status comes back (the same object) while its inputs are equal; each input
    that changes gives a status equal to one made without the memo (never last tick's)."""
    from dataclasses import replace

    from headroom.samples import CgroupStats, IdentityGroup
    from headroom.workload.attribution import AutoStatuses

    a, b = GpuProcess(1000, 4 * GIB, sm_utilization_ratio=0.1), GpuProcess(1001, 2 * GIB)
    gpus = [gpu(0, a, GpuProcess(1500, GIB)), gpu(1, b)]
    pod = IdentityGroup("pod", "ns/a", pids=(1000,), gpus=("GPU-0",), cgroup=CgroupStats("/a", 1.0, 0.5))
    other = IdentityGroup("pod", "ns/b", pids=(1001,), gpus=("GPU-1",))
    memo = AutoStatuses()
    first = {st.name: st for st in attribute(_tick(gpus, (pod, other)), [], memo=memo)}
    again = {st.name: st for st in attribute(_tick(gpus, (replace(pod), other)), [], memo=memo)}
    assert again["ns/a"] is first["ns/a"] and again["ns/b"] is first["ns/b"]
    # a neighbour on its GPU comes and goes (its own listing moves in the list): still the same status
    moved = [gpu(0, GpuProcess(1600, GIB), GpuProcess(1700, GIB), a), gpu(1, b)]
    assert {st.name: st for st in attribute(_tick(moved, (pod, other)), [], memo=memo)}["ns/a"] is first["ns/a"]

    changes = {
        "its process's memory": ([gpu(0, GpuProcess(1000, 9 * GIB, sm_utilization_ratio=0.1)), gpu(1, b)], (pod,)),
        "its utilization": ([gpu(0, GpuProcess(1000, 4 * GIB, sm_utilization_ratio=0.7)), gpu(1, b)], (pod,)),
        "its GPU": ([gpu(0), gpu(1, a, b)], (pod,)),
        "its GPU down": ([gpu(0, a, up=False), gpu(1, b)], (pod,)),
        "its GPU's memory": ([gpu(0, a, total=40 * GIB), gpu(1, b)], (pod,)),
        "a second process": ([gpu(0, a), gpu(1, b)], (replace(pod, pids=(1000, 1001)),)),
        "a process NVML does not list": ([gpu(0, a), gpu(1, b)], (replace(pod, pids=(1000, 1999)),)),
        "a GPU assigned": ([gpu(0, a), gpu(1, b)], (replace(pod, gpus=("GPU-0", "GPU-1")),)),
        "its process count": ([gpu(0, a), gpu(1, b)], (replace(pod, processes=7),)),
        "its cgroup": ([gpu(0, a), gpu(1, b)], (replace(pod, cgroup=CgroupStats("/a", 2.0, 0.5)),)),
        "its kind": ([gpu(0, a), gpu(1, b)], (replace(pod, kind="job"),)),
    }
    for why, (tick_gpus, groups) in changes.items():
        memo = AutoStatuses()
        before = attribute(_tick(gpus, (pod,)), [], memo=memo)[0]
        after = attribute(_tick(tick_gpus, groups), [], memo=memo)[0]
        fresh = attribute(_tick(tick_gpus, groups), [])[0]
        assert after == fresh and after != before, why
    # a declared profile that takes its process: the pod is gone, and forgotten
    memo = AutoStatuses()
    attribute(_tick(gpus, (pod, other)), [], memo=memo)
    assert len(memo) == 2
    statuses = attribute(_tick(gpus, (pod, other), workloads=(members("mine", 1000),)),
                         [prof({"name": "mine", "kind": "training", "match": {"exe": "x"}})], memo=memo)
    assert [st.name for st in statuses] == ["mine", "ns/b"] and len(memo) == 1
    attribute(_tick(gpus, ()), [], memo=memo)
    assert len(memo) == 0  # ended workloads leave nothing behind


def test_remembered_statuses_equal_fresh_ones_over_random_churn():
    """Ticks of pods coming, going, moving, changing memory and utilization, reordered in NVML's lists (float
    sums depend on the order), MIG instances resized, GPUs lost, declared profiles claiming pids: with the
    memo every tick's statuses equal those made without it, and most are reused."""
    import random
    from dataclasses import replace

    from headroom.samples import CgroupStats, IdentityGroup
    from headroom.workload.attribution import AutoStatuses

    rng = random.Random(15)
    claimer = prof({"name": "claimer", "kind": "training", "match": {"exe": "x"}})
    pods: dict[str, IdentityGroup] = {}
    procs: dict[int, tuple[int, int, GpuProcess]] = {}  # pid -> (GPU, MIG instance or -1, entry)
    mig_totals = [40 * GIB, 20 * GIB]
    down: set[int] = set()
    serial = 0

    def new_pod() -> None:
        nonlocal serial
        serial += 1
        pids = tuple(10_000 + serial * 10 + k for k in range(rng.choice((1, 1, 3))))
        where = rng.randrange(4)
        for pid in pids:
            procs[pid] = (where, rng.choice((0, 1)) if where == 3 else -1,
                          GpuProcess(pid, rng.choice((GIB, 2 * GIB, None)), sm_utilization_ratio=rng.choice((0.1, 0.2, 0.3, None))))
        refs = (f"GPU-{where}",) if rng.random() < 0.7 else ()
        pods[f"ns/p{serial}"] = IdentityGroup("pod", f"ns/p{serial}", pids=pids, gpus=refs,
                                              cgroup=CgroupStats(f"/p{serial}", 1.0, 1.0))

    for _ in range(12):
        new_pod()
    memo = AutoStatuses()
    reused = total = 0
    previous: dict[str, object] = {}
    for _tick_number in range(150):
        for _ in range(rng.randrange(4)):
            what = rng.randrange(9)
            name = rng.choice(sorted(pods))
            g = pods[name]
            pid = rng.choice(g.pids)
            if what == 0:
                del pods[name]
                new_pod()
            elif what == 1:
                i, j, x = procs[pid]
                procs[pid] = (i, j, replace(x, used_memory_bytes=rng.choice((GIB, 3 * GIB))))
            elif what == 2:
                i, j, x = procs[pid]
                procs[pid] = (i, j, replace(x, sm_utilization_ratio=rng.choice((0.1, 0.2, 0.3, 0.7))))
            elif what == 3:
                where = rng.randrange(4)
                procs[pid] = (where, rng.choice((0, 1)) if where == 3 else -1, procs[pid][2])
            elif what == 4:
                pods[name] = replace(g, cgroup=CgroupStats(g.cgroup.path, rng.random(), 1.0))
            elif what == 5:
                mig_totals[rng.randrange(2)] = rng.choice((20 * GIB, 40 * GIB))
            elif what == 6:
                down ^= {rng.randrange(4)}
            elif what == 7:
                pods[name] = replace(g, processes=rng.choice((None, 1, 5)))
            else:
                items = list(procs.items())
                rng.shuffle(items)  # NVML lists the same processes in another order
                procs.clear()
                procs.update(items)
        gpus = []
        for i in range(4):
            listed = tuple(x for (w, j, x) in procs.values() if w == i and j == -1)
            mig = ()
            if i == 3:
                mig = tuple(MigInstance(gpu_instance_id=k, compute_instance_id=0, uuid=f"MIG-3{k}",
                                        memory_total_bytes=mig_totals[k], memory_used_bytes=0,
                                        processes=tuple(x for (w, j, x) in procs.values() if w == 3 and j == k))
                            for k in (0, 1))
            gpus.append(gpu(i, *listed, up=i not in down, mig=mig))
        claimed = rng.choice(sorted(procs)) if rng.random() < 0.2 else None
        workloads = (members("claimer", claimed),) if claimed is not None else ()
        s = _tick(gpus, tuple(pods.values()), workloads)
        remembered = attribute(s, [claimer], memo=memo)
        fresh = attribute(s, [claimer])
        assert remembered == fresh
        assert [repr(st) for st in remembered] == [repr(st) for st in fresh]  # -0.0, 1 and 1.0 told apart
        total += len(remembered)
        reused += sum(previous.get(st.name) is st for st in remembered)
        previous = {st.name: st for st in remembered}
    assert reused > total / 3


def test_a_tick_the_identity_collector_failed_keeps_the_automatic_workloads_for_a_while():
    """On a host saturated by the load being diagnosed (a CPU vLLM on 2 cores), the identity collector misses a
    tick's deadline now and then: its automatic workloads vanished for that tick and their verdicts' holds began
    again (a real vLLM past its KV cache was named 80 s after it filled instead of within the hold). They are
    unknown, not gone: the last answer stands for UNKNOWN_IDENTITY_TICKS failed ticks in a row, then they go; a
    host without the identity collector, or an answer that lists none, has none."""
    from headroom.samples import IdentityGroup
    from headroom.workload.attribution import UNKNOWN_IDENTITY_TICKS, AutoStatuses

    a = GpuProcess(1000, 4 * GIB, sm_utilization_ratio=0.1)
    gpus = [gpu(0, a)]
    pod = IdentityGroup("pod", "ns/a", pids=(1000,), gpus=("GPU-0",))
    good = _tick(gpus, (pod,))
    failed = Sample(0.0, 0.0, {**sample(*gpus).sources, "identity": SourceResult("identity", False, 0.6, None,
                                                                                  "stuck: collect() has not returned")})
    absent = sample(*gpus)  # no identity collector configured
    memo = AutoStatuses()
    first = attribute(good, [], memo=memo)
    assert [st.name for st in first] == ["ns/a"]
    for _ in range(UNKNOWN_IDENTITY_TICKS):
        held = attribute(failed, [], memo=memo)
        assert held == first and held[0] is first[0]  # the same status: nothing about it is new
    assert attribute(failed, [], memo=memo) == ()  # failed for longer: unknown, and no longer shown
    assert [st.name for st in attribute(good, [], memo=memo)] == ["ns/a"]
    assert [st.name for st in attribute(failed, [], memo=memo)] == ["ns/a"]  # the count starts again
    assert attribute(absent, [], memo=memo) == ()
    assert attribute(failed, [], memo=memo) == ()  # an identity that was not there is not held
    memo = AutoStatuses()
    attribute(good, [], memo=memo)
    assert attribute(_tick(gpus, ()), [], memo=memo) == () and attribute(failed, [], memo=memo) == ()
    assert attribute(failed, []) == ()  # no memo (a one-off attribution): nothing to hold
