"""The starvation rules: what starves an under-used GPU (or work without a GPU) on the host side: cpu,
host_memory, shared_memory, disk_io and network, each a *starvation* term (``starvation``) times the corroborating
signal; ``HostView`` holds the host-wide half of them, worked out once per tick (``host_view``), which counts for a
workload in proportion to its own use of the resource."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from headroom.analysis.bottleneck.evidence import NO_GPM, Scored, gib, pct, plural
from headroom.analysis.signals import HostSignals, RankSignals, WorkloadSignals
from headroom.analysis.thresholds import ramp


@dataclass(frozen=True)
class HostView:
    """What the starvation rules read of the host alone, worked out once per tick (``host_view``) and shared by
    every GPU's and workload's verdict instead of once for each: per rule, the host-wide score and its evidence."""

    cpu: tuple[float, tuple[str, ...]]  # host CPU busy, PSI cpu and the run queue: (score, evidence parts)
    memory: tuple[float, tuple[str, ...]]  # PSI memory full, RAM available, major faults
    shm: tuple[float, str | None]  # (fill score, the fullest mount's sentence; None when unknown)
    disk: tuple[float, tuple[str, ...]]  # the busiest disk, PSI io, iowait


def host_view(h: HostSignals, t: Mapping[str, float]) -> HostView:
    return HostView(_host_cpu(h, t), _host_memory(h, t), _host_shm(h, t), _host_disk(h, t))


def _host_cpu(h: HostSignals, t: Mapping[str, float]) -> tuple[float, tuple[str, ...]]:
    host, parts = 0.0, []
    if h.cpu_busy is not None:
        host = max(host, ramp(h.cpu_busy, t["host_cpu_low"], t["host_cpu_high"]))
        parts.append(f"host CPU {pct(h.cpu_busy)} busy")
    psi = h.psi.get("cpu.some")
    if psi is not None:
        host = max(host, ramp(psi, t["psi_cpu_low"], t["psi_cpu_high"]))
        parts.append(f"PSI cpu some avg10 {pct(psi)}")
    if h.run_queue is not None and h.logical_cpus:  # more runnable tasks than CPUs: they wait for one
        host = max(host, ramp(h.run_queue / h.logical_cpus, t["run_queue_low"], t["run_queue_high"]))
        parts.append(f"run queue {h.run_queue:.0f} on {h.logical_cpus} CPUs")
    return host, tuple(parts)


def _host_shm(h: HostSignals, t: Mapping[str, float]) -> tuple[float, str | None]:
    fill = ramp(h.shm_fill, t["shm_low"], t["shm_high"])
    if h.shm_fill is None:
        return fill, None
    return fill, (f"{h.shm_mountpoint} {pct(h.shm_fill)} full ({gib(h.shm_available_bytes)} left of "
                  f"{gib(h.shm_size_bytes)})")


def _host_disk(h: HostSignals, t: Mapping[str, float]) -> tuple[float, tuple[str, ...]]:
    parts, host = [], 0.0
    if h.disk_busy is not None:
        host = max(host, ramp(h.disk_busy, t["disk_busy_low"], t["disk_busy_high"]))
        queue = "" if h.disk_queue is None else f", queue depth {h.disk_queue:.1f}"
        parts.append(f"{h.disk_device} busy {pct(h.disk_busy)}{queue}")
    psi = h.psi.get("io.some")
    if psi is not None:
        host = max(host, ramp(psi, t["psi_io_low"], t["psi_io_high"]))
        parts.append(f"PSI io some avg10 {pct(psi)}")
    if h.cpu_iowait is not None and h.cpu_iowait > 0.05:
        host = max(host, t["iowait_weight"] * ramp(h.cpu_iowait, 0.05, 0.5))
        parts.append(f"iowait {pct(h.cpu_iowait)} (weak signal)")
    return host, tuple(parts)


def starvation(busy: float | None, t: Mapping[str, float]) -> float:
    """1 when the GPUs are at or below busy_low, 0 at or above busy_high; 0 when unknown."""
    if busy is None:
        return 0.0
    return 1.0 - ramp(busy, t["busy_low"], t["busy_high"])


def _involvement(own: float | None, full: float) -> float:
    """How much a host-wide signal counts for a workload: its own use of the resource against ``full`` (1 when its
    processes are unknown: then the verdict is the GPU's own view, as for a GPU no profile claims)."""
    return 1.0 if own is None else ramp(own, 0.0, full)


def rule_cpu(starved: float, busy_text: str, h: HostSignals, w: WorkloadSignals | None,
             t: Mapping[str, float], cpu_is_compute: bool = False, view: HostView | None = None) -> Scored:
    """CPU starving the GPU. The workload's own saturation (all its cores, one process pinned at a core, its
    cgroup's PSI cpu) is direct evidence; busy host CPUs and host PSI count only in proportion to the CPU the
    workload itself uses (a compile job saturating the host does not starve a trainer that waits on storage)."""
    parts, own = [], 0.0
    if w is not None and w.cores_used is not None and w.cores_allowed:
        saturation = w.cores_used / w.cores_allowed
        own = max(own, ramp(saturation, t["cpu_saturation_low"], t["cpu_saturation_high"]))
        cores = f"{w.cores_allowed:.2f}".rstrip("0").rstrip(".")  # a quota may be 0.5 or 1.5 cores
        parts.append(f"the workload's {plural(w.processes, 'process')} used {w.cores_used:.2f} "
                     f"{'core' if round(w.cores_used, 2) == 1 else 'cores'}, of the {cores} it may use (cgroup quota "
                     "or CPU affinity, else logical CPUs)")
    # each rank feeds its own GPU: its DataLoader workers against the cores they can use (one each), and its own
    # process pinned at a core (the GIL of a rank with 0 workers, collation, a tokenizer) starve it whatever the
    # workload's total says. The worst rank speaks for the workload (synchronous ranks wait for the slowest)
    # work without a GPU computes on all its threads (OpenMP, ggml): its saturation is its cores against what it may
    # use, not one process at a full core, which there is only one thread of many
    worst = _worst_rank(w.ranks, t, w.dataloader_workers is not None) if w is not None and not cpu_is_compute else None
    if worst is not None:
        score, text = worst
        own = max(own, score)
        parts.append(text)
    elif w is not None and w.ranks and w.dataloader_workers is not None:  # the count, measured: 0 says 0
        parts.append(f"{plural(len(w.ranks), 'rank')} with {plural(w.dataloader_workers, 'DataLoader worker')}, "
                     "none at a full core")
    # no ranks known: one process at a full core (a thread that cannot go faster, the GIL of a DataLoader with 0
    # workers, a single-threaded decoder or tokenizer) while the host looks idle. DataLoader workers work in
    # parallel, so one hot worker among idle ones is not the limit: there only the main process counts. With ranks
    # known, any other process pinned at a core counts only where no rank has workers (a decoder the rank waits on)
    ranked = {r.pid for r in w.ranks} if w is not None else set()
    critical = w is not None and not cpu_is_compute and (not w.dataloader_workers or (w.busiest_is_main and not ranked))
    if critical and w is not None and ranked and w.busiest_process_pid in ranked:
        critical = False  # judged with its rank above
    if (critical and w is not None and w.busiest_process_cores is not None
            and w.busiest_process_cores >= t["cpu_saturation_low"]):
        which = "its main process" if w.busiest_is_main else "its busiest process"
        used = f"{which} (pid {w.busiest_process_pid}) used {w.busiest_process_cores:.2f} cores"
        if w.busiest_is_main and w.main_thread_cores is not None:  # its threads were read: the busiest decides
            single = ramp(w.main_thread_cores, t["cpu_saturation_low"], t["cpu_saturation_high"])
            used += f", its busiest thread (tid {w.main_thread_tid}) {w.main_thread_cores:.2f}"
            parts.append(used + (": one thread saturated (data loading in the main process, a decoder, a tokenizer)"
                                 if single > 0 else ": spread over its threads, none saturated"))
        else:
            single = ramp(w.busiest_process_cores, t["cpu_saturation_low"], t["cpu_saturation_high"])
            parts.append(used + ": one core saturated (a single thread: data loading in the main process, a "
                                "decoder, a tokenizer)")
        own = max(own, single)
    cgroup_psi = w.cgroup_pressure.get("cpu") if w is not None else None
    if cgroup_psi is not None:
        own = max(own, ramp(cgroup_psi, t["psi_cpu_low"], t["psi_cpu_high"]))
        parts.append(f"its cgroup's PSI cpu some avg10 {pct(cgroup_psi)}")
    waits = _cpu_waits(w, t) if w is not None else None
    if waits is not None:
        own = max(own, waits[0])
        parts.append(waits[1])
    host, host_parts = view.cpu if view is not None else _host_cpu(h, t)
    parts.extend(host_parts)
    own_cores = w.cores_used if w is not None else None
    involved = _involvement(own_cores, t["own_cpu_cores"])
    if host > 0 and own_cores is not None and involved < 1.0:
        parts.append(f"host-wide CPU counts {pct(involved)}: the workload itself uses {own_cores:.2f} cores")
    # its threads' measured waits say whether the host's contention reaches them: busy CPUs, PSI and a long run queue
    # of neighbours whose threads leave its own runnable threads a CPU are not its bottleneck
    if waits is not None and w is not None and waits[2] < involved:  # (waits are w's)
        involved = waits[2]
        if host > 0:
            parts.append(f"host-wide CPU counts {pct(involved)}: its threads waited only {pct(w.cpu_wait_share)} "
                         "for a CPU")
    signal = max(own, host * involved)
    factor = 1.0 if cpu_is_compute else starved
    return Scored(factor * signal, _join(busy_text, parts, cpu_is_compute), own > 0 and own >= host * involved)


def _cpu_waits(w: WorkloadSignals, t: Mapping[str, float]) -> tuple[float, str, float] | None:
    """(score, evidence, how much host-wide CPU signals count for it) from how long its processes' main threads
    waited runnable for a CPU (/proc/PID/schedstat): more runnable threads than cores (OpenMP, MKL or tokenizer pools
    times DataLoader workers or ranks) starve the work with no thread saturated and not every core used. The wait
    counts in proportion to its own use (own_cpu_cores), as host-wide CPU does: a workload using a tenth of a core
    whose few threads wait behind other processes' is barely slowed. None when unread, or too few of its threads
    were runnable to tell."""
    share, runnable = w.cpu_wait_share, w.runnable_main_threads
    if share is None or runnable is None or runnable < t["cpu_wait_runnable_min"]:
        return None
    score = ramp(share, t["cpu_wait_low"], t["cpu_wait_high"])
    text = f"its processes' main threads waited {pct(share)} of their runnable time for a CPU"
    threads = w.runnable_threads
    if threads is not None and w.cores_allowed:
        per_core = threads / w.cores_allowed
        cores = f"{w.cores_allowed:.2f}".rstrip("0").rstrip(".")
        of = f", of its {w.threads} threads" if w.threads else ""
        text += f": ≈ {threads:.0f} runnable threads on the {cores} cores it may use ({per_core:.1f} per core{of})"
        if score > 0:
            text += (": its own threads outnumber its cores (thread pools, OpenMP, MKL, a tokenizer, times its "
                     "processes)" if per_core >= t["threads_per_core_over"] else ": other processes' threads take the CPUs")
    involved = _involvement(w.cores_used, t["own_cpu_cores"])
    if score > 0 and involved < 1.0:
        score *= involved
        text += f" (counts {pct(involved)}: the workload itself uses {w.cores_used:.2f} cores)"
    return score, text, ramp(share, 0.0, t["cpu_wait_low"])


def _worst_rank(ranks: Sequence[RankSignals], t: Mapping[str, float], trainer: bool = True) -> tuple[float, str] | None:
    """(score, evidence) of the rank that starves its GPU most: its DataLoader workers' summed cores against their
    count (one core each: all busy, they cannot keep up), and its own process at a full core (its busiest thread
    decides where its threads were read); None when no rank shows either. ``trainer``: its worker count means
    something (not a serving runtime's main process), so 0 is said."""
    low, high = t["cpu_saturation_low"], t["cpu_saturation_high"]
    best: tuple[float, float, str] | None = None
    for r in ranks:
        who = f"rank pid {r.pid}" if r.launched else f"its main process (pid {r.pid})"
        score, texts = 0.0, []
        if r.workers and r.workers_cores is not None:
            ratio = r.workers_cores / r.workers
            score = ramp(ratio, low, high)
            texts.append(f"{who}'s {plural(r.workers, 'DataLoader worker')} used {r.workers_cores:.2f} of the "
                         + ("1 core it can use" if r.workers == 1 else f"{r.workers} cores they can use (one each)")
                         + ((": it cannot keep up" if r.workers == 1 else ": they cannot keep up") if score > 0 else ""))
            who = "the rank itself" if r.launched else "the main process itself"
        if r.cores is not None and r.cores >= low:
            used = f"{who} used {r.cores:.2f} cores"
            if r.thread_cores is not None:  # its threads were read: the busiest decides
                single = ramp(r.thread_cores, low, high)
                used += f", its busiest thread (tid {r.thread_tid}) {r.thread_cores:.2f}"
                used += (": one thread saturated (data loading in the main process, a decoder, a tokenizer)"
                         if single > 0 else ": spread over its threads, none saturated")
            else:
                single = ramp(r.cores, low, high)
                used += ": one core saturated (a single thread: data loading in the main process, a decoder, a tokenizer)"
            if not r.workers and trainer:
                used += ", with 0 DataLoader workers"
            score = max(score, single)
            texts.append(used)
        if not texts:
            continue
        key = (score, max(r.cores or 0.0, (r.workers_cores or 0.0) / max(r.workers, 1)))
        if best is None or key > best[:2]:
            many = f" (the worst of {len(ranks)} ranks)" if len(ranks) > 1 and score > 0 else ""
            best = (*key, "; ".join(texts) + many)
    return None if best is None else (best[0], best[2])


def rule_host_memory(starved: float, busy_text: str, h: HostSignals, t: Mapping[str, float],
                     view: HostView | None = None) -> tuple[float, str]:
    signal, parts = view.memory if view is not None else _host_memory(h, t)
    # memory pressure slows everything on the host: it needs no starved GPU to count, but a starved one
    # makes it more certain that it costs the workload throughput
    return signal * (0.6 + 0.4 * starved), _join(busy_text, parts)


def _host_memory(h: HostSignals, t: Mapping[str, float]) -> tuple[float, tuple[str, ...]]:
    parts, signal = [], 0.0
    full = h.psi.get("memory.full")
    if full is not None:
        signal = max(signal, ramp(full, t["psi_memory_low"], t["psi_memory_high"]))
        parts.append(f"PSI memory full avg10 {pct(full)}")
    if h.memory_available_bytes is not None and h.memory_total_bytes:
        available = h.memory_available_bytes / h.memory_total_bytes
        signal = max(signal, ramp(available, t["mem_available_low"], t["mem_available_high"]))
        parts.append(f"{gib(h.memory_available_bytes)} of {gib(h.memory_total_bytes)} RAM available")
    if h.major_faults_per_second is not None and h.major_faults_per_second >= 1:
        parts.append(f"{h.major_faults_per_second:.0f} major faults/s")
    return signal, tuple(parts)


def rule_shared_memory(starved: float, busy_text: str, h: HostSignals, t: Mapping[str, float],
                       workers: int | None, view: HostView | None = None, processes: int | None = None) -> Scored:
    """``workers``: the DataLoader workers running under the workload's ranks (measured; 0 or None: none).
    ``processes``: for work without a GPU, its process count: a multi-process runtime (vLLM's API server, engine
    core and CPU workers) passes its requests and tensors through /dev/shm, a single process (llama.cpp, Ollama's
    runner) passes nothing there; None for GPU work (the starvation term decides)."""
    fill, text = view.shm if view is not None else _host_shm(h, t)
    # a full /dev/shm kills DataLoader workers ("No space left on device", "Bus error"): it limits a
    # workload whose workers run even before the GPU starves
    factor = max(starved, 0.8 if workers else 0.0)
    if text is None:
        return Scored(0.0, "shared memory unknown", False)
    if workers:
        text += f" while {plural(workers, 'DataLoader worker')} {'runs' if workers == 1 else 'run'} under its ranks"
    elif processes is not None and processes >= 2:
        text += f" while its {plural(processes, 'process')} pass requests and tensors through it"
    elif processes is not None:
        factor = 0.0
        if fill > 0:
            text += (f"; not limiting: the workload runs {plural(processes, 'process')}, which passes nothing "
                     "through shared memory")
    return Scored(fill * factor, _join(busy_text, [text]), bool(workers) or bool(processes and processes >= 2))


def rule_disk_io(starved: float, busy_text: str, h: HostSignals, t: Mapping[str, float],
                 w: WorkloadSignals | None = None, view: HostView | None = None) -> Scored:
    """Storage starving the GPU. Its cgroup's PSI io is direct evidence; a busy disk, host PSI io and iowait count
    only in proportion to the block I/O the workload itself does (a backup saturating the disk does not starve a
    trainer whose data sits in RAM)."""
    host, host_parts = view.disk if view is not None else _host_disk(h, t)
    parts = list(host_parts)
    own_io = w.io_bytes_per_second if w is not None else None
    involved = _involvement(None if own_io is None else own_io / 2**20, t["own_io_mib_per_second"])
    if own_io is not None and host > 0:
        of = ""
        if h.disk_bytes_per_second:
            of = f" ({pct(own_io / h.disk_bytes_per_second)} of {h.disk_device}'s {h.disk_bytes_per_second / 1e6:.0f} MB/s)"
        note = "" if involved >= 1.0 else f": host-wide I/O counts {pct(involved)}"
        parts.append(f"the workload's own I/O {own_io / 1e6:.1f} MB/s{of}{note}")
    own = 0.0
    cgroup_psi = w.cgroup_pressure.get("io") if w is not None else None
    if cgroup_psi is not None:
        own = ramp(cgroup_psi, t["psi_io_low"], t["psi_io_high"])
        parts.append(f"its cgroup's PSI io some avg10 {pct(cgroup_psi)}")
    direct = own > 0 or (own_io is not None and involved > 0)
    return Scored(starved * max(own, host * involved), _join(busy_text, parts), direct)


def rule_network(starved: float, busy_text: str, h: HostSignals, t: Mapping[str, float],
                 distributed: bool, waiting: tuple[float, str] | None = None, busy: float | None = None) -> Scored:
    """A distributed workload's collectives over sockets or a NIC. Two ways: its GPUs starved while the busiest
    NIC runs near its link speed, or (``waiting``: not_computing over its GPUs, None without GPM) its GPUs busy
    but not computing while the busiest interface carries steady traffic, judged against its own level (a TCP
    transport reaches only a fraction of line rate, so saturation is the wrong test there). ``busy``: its GPUs'
    mean busy ratio, for the evidence of GPUs without GPM."""
    if not distributed:
        return Scored(0.0, "not a distributed workload", False)
    if h.net_ratio is None and h.net_busiest_bytes_per_second is None:
        return Scored(0.0, "network throughput unknown", False)
    saturated, parts = 0.0, []
    if h.net_ratio is not None:
        saturated = starved * ramp(h.net_ratio, t["net_low"], t["net_high"])
        parts.append(f"{h.net_device} at {(h.net_bytes_per_second or 0) * 8 / 1e9:.1f} Gbit/s, "
                     f"{pct(h.net_ratio)} of link speed")
    text = _join(busy_text, parts) if parts else busy_text
    rate = h.net_busiest_bytes_per_second
    if waiting is None:
        if busy is not None and ramp(busy, t["busy_low"], t["busy_high"]) > 0 and saturated < 1.0:
            text += f"; {NO_GPM}: busy GPUs count as waiting on the network only while its link is saturated"
        return Scored(saturated, text, False)
    bound = 0.0
    if waiting[0] > 0 and rate is not None:
        level = ramp(rate / 2**20, t["net_active_low_mib"], t["net_active_high_mib"])
        steadiness = ramp(h.net_steady, t["link_steady_low"], t["link_steady_high"])
        bound = waiting[0] * level * steadiness
        if level > 0:
            speed = "" if h.net_device != h.net_busiest_device or h.net_ratio is None else \
                f", {pct(h.net_ratio)} of link speed"
            steady = (f"at that level {pct(h.net_steady)} of the window" if steadiness > 0
                      else f"only {pct(h.net_steady)} of the window: bursts, not steady traffic")
            link = (f"{h.net_busiest_device} carries {rate / 1e6:.0f} MB/s ({rate * 8 / 1e9:.1f} Gbit/s{speed}), "
                    f"{steady}")
            if bound > saturated:
                return Scored(bound, f"{waiting[1]}; {link}: the ranks wait on collectives over the network (a TCP "
                                     "transport reaches only a fraction of line rate, so saturation is not the test)",
                              True)
            text += f"; {link}"
    return Scored(saturated, text, False)


def _join(busy_text: str, parts: Sequence[str], standalone: bool = False) -> str:
    if not parts:
        return f"{busy_text}; no corroborating signal"
    return ("" if standalone else f"{busy_text} while ") + "; ".join(parts)
