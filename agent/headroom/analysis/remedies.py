"""What to do about a verdict: one remedy function per resource, drawn from that verdict's own signals.

Each function takes the :class:`Facts` the verdict was scored from (its GPUs' signals, the host's, the
workload's, its serving runtime's and its memory estimate) and returns one paragraph: the numbers that say
why, then the concrete change (the setting, flag or command) and its limit where the signals give one. Every
remedy links to its section of docs/runbook.md ("Bottleneck: <resource>"), so the page, /api/v1/status, the
``bottleneck_changed`` log event and the alerts point to the same text: ``runbook_url`` on GitHub (for readers
off the host: Alertmanager, a chat), ``runbook_path`` on the agent itself (``GET /runbook`` serves the same file
from the installed package, exposition/runbook.py), which the landing page links to so that the link works on an
air-gapped host. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from headroom.analysis.bottleneck import NONE, RESOURCES, Verdict, pct, plural
from headroom.analysis.signals import GpuSignals, HostSignals, WorkloadSignals
from headroom.units import format_bytes

if TYPE_CHECKING:
    from headroom.analysis.bottleneck import Reserved
    from headroom.analysis.serving import ServingSignals
    from headroom.workload.profiles.types import WorkloadProfile
    from headroom.workload.sizing.types import Estimate

# where the alert rules link too (grafana/rules/headroom-alerts.yml); the anchors are docs/runbook.md's headings
RUNBOOK_URL = "https://github.com/headroom-agent/headroom/blob/main/docs/runbook.md"
# where the agent serves the same runbook (exposition/server.py, exposition/runbook.py)
RUNBOOK_PATH = "/runbook"
# a container's shared memory to suggest: twice what it has, at least this much (PyTorch DataLoader workers
# pass each batch through /dev/shm; Docker's default is 64 MiB)
SHM_SUGGEST_MIN_BYTES = 1 << 30
# a shared-memory mount this large is a host's own (tmpfs defaults to half the RAM), not a container's 64 MiB: when it
# is full, the remedy leads with what fills it rather than a larger size
SHM_LARGE_BYTES = 16 << 30
# a limit within this many watts of the board's maximum counts as at the maximum
POWER_MAX_SLACK_WATTS = 1.0
# a workload using this share of its cgroup's cpu.max quota is held by the quota (the remedy names cpu.max)
QUOTA_BOUND_SHARE = 0.8
# a process using this many cores is one thread at its limit (as analysis.thresholds.cpu_saturation_low's default)
SINGLE_CORE_BOUND = 0.8
# its processes' main threads waiting this share of their runnable time for a CPU are oversubscribed, and this many
# runnable threads per core it may use are its own doing (as thresholds.cpu_wait_low's, threads_per_core_over's)
OVERSUBSCRIBED_WAIT = 0.2
OWN_THREADS_PER_CORE = 1.5
# SM activity below this on a busy GPU means small or waiting kernels (as thresholds.sm_active_low's default)
LAUNCH_BOUND_SM_ACTIVE = 0.5
# a throttled GPU this much hotter than its coolest neighbour has a cooling problem of its own
HOTTER_THAN_NEIGHBOUR_CELSIUS = 5.0


@dataclass(frozen=True)
class Remedy:
    resource: str
    text: str
    runbook_url: str

    @property
    def runbook_path(self) -> str:
        """The section on the agent's own ``/runbook`` page: '/runbook#bottleneck-gpu_power'."""
        return runbook_path(self.resource)


@dataclass(frozen=True)
class Facts:
    """The signals a verdict was scored from (pipeline.Analysis passes the same objects to the rules)."""

    gpus: Sequence[GpuSignals] = ()
    host: HostSignals | None = None
    workload: WorkloadSignals | None = None
    profile: WorkloadProfile | None = None  # None for a GPU's own verdict
    serving: ServingSignals | None = None
    estimate: Estimate | None = None
    reserved: Reserved | None = None  # the runtime on the GPU that reserves it up front, when one does


def runbook_anchor(resource: str) -> str:
    """The GitHub anchor of the heading '### Bottleneck: <resource>' in docs/runbook.md."""
    return f"bottleneck-{resource}"


def runbook_url(resource: str) -> str:
    return f"{RUNBOOK_URL}#{runbook_anchor(resource)}"


def runbook_path(resource: str) -> str:
    return f"{RUNBOOK_PATH}#{runbook_anchor(resource)}"


def remedy(resource: str, facts: Facts) -> Remedy | None:
    """What to do about ``resource`` limiting the work; None for none (nothing to do) or an unknown name."""
    fn = REMEDIES.get(resource)
    if fn is None:
        return None
    try:
        text = fn(facts)
    except Exception as exc:  # noqa: BLE001 - a remedy's fault costs its words, never the verdict or the tick
        text = f"see the runbook (the remedy could not be worked out: {type(exc).__name__})"
    return Remedy(resource, text, runbook_url(resource))


def for_verdict(v: Verdict, facts: Facts) -> Mapping[str, Remedy]:
    """Remedies for the verdict's primary and its pending candidate (the two a reader acts on), worked out when
    first read (``Remedies``)."""
    return Remedies((v.primary, v.pending if v.is_pending else NONE), facts)


class Remedies(Mapping[str, Remedy]):
    """resource -> Remedy for the given resources, worked out on first use and kept: every verdict of every tick
    carries one, but only those a reader looks at (the page, /api/v1/status, a bottleneck_changed event) pay for
    the words (about 0.5 ms a tick at the reference scale when all were written each tick)."""

    __slots__ = ("_done", "_facts", "_resources")

    def __init__(self, resources: Sequence[str], facts: Facts) -> None:
        self._resources: tuple[str, ...] = tuple(r for r in dict.fromkeys(resources) if r != NONE)
        self._facts: Facts | None = facts if self._resources else None
        self._done: dict[str, Remedy] | None = None if self._resources else {}

    def _all(self) -> dict[str, Remedy]:
        done = self._done
        if done is None:  # two readers at once work it out twice, to the same result
            facts = self._facts
            done = {r: found for r in self._resources if facts is not None
                    and (found := remedy(r, facts)) is not None}
            self._done, self._facts = done, None  # the tick's signals are not held longer than needed
        return done

    def __getitem__(self, resource: str) -> Remedy:
        return self._all()[resource]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __repr__(self) -> str:
        return f"Remedies({self._all()!r})"


# ------------------------------------------------------------------------------------------------ helpers
def _gib(n: float | None) -> str:
    return "?" if n is None else format_bytes(n)


def _worst(gpus: Sequence[GpuSignals], key: Callable[[GpuSignals], float | None]) -> GpuSignals | None:
    up = [g for g in gpus if g.up]
    return max(up, key=lambda g: key(g) or 0.0) if up else None


def _gpu_names(gpus: Sequence[GpuSignals]) -> str:
    return ", ".join(str(g.index) for g in gpus if g.up)


def _on_cpu(f: Facts) -> bool:
    """The workload computes on the CPU: declared cpu-inference, or no GPU at all in its facts (a runtime on a
    GPU-less host); its remedies speak of cores and host RAM, never of GPU memory (bottleneck: work without a GPU)."""
    kind = getattr(getattr(f.profile, "kind", None), "value", str(getattr(f.profile, "kind", "")))
    return kind == "cpu-inference" or (f.profile is not None and not f.gpus)


def _runtime(facts: Facts) -> str:
    rt = getattr(getattr(facts.profile, "runtime", None), "name", None)
    return rt or (getattr(facts.serving, "runtime", None) or "")


# ---------------------------------------------------------------------------------------------- GPU-bound
def _gpu_power(f: Facts) -> str:
    g = _worst(f.gpus, lambda x: x.power_cap_share)
    if g is None:
        return "No GPU reading: check `nvidia-smi -q -d POWER` for the enforced and maximum power limits."
    shares = g.reason_shares
    external = (shares.get("hw_power_brake_slowdown") or 0) > 0 or \
        ((shares.get("hw_slowdown") or 0) > 0 and (shares.get("sw_power_cap") or 0) == 0)
    if external:
        return (f"GPU {g.index}'s hardware power brake is asserted from outside the GPU (the power supply, the chassis "
                "or the BMC): raising its limit will not help. Check the power supplies (a failed or missing PSU, "
                "redundancy lost), the chassis power capping (`ipmitool dcmi power reading`, the BMC's power "
                "policy) and the rack's circuit; `nvidia-smi -q -d PERFORMANCE -i "
                f"{g.index}` shows the brake while it lasts.")
    limit, most = g.power_limit_watts, g.power_limit_max_watts
    draw = "" if g.power_watts is None else f" draws {g.power_watts:.0f} W and is"
    if limit is None:
        return (f"GPU {g.index}{draw} held at its power limit: `nvidia-smi -q -d POWER -i {g.index}` shows the "
                "enforced and the maximum limit; below the maximum, raise it with "
                f"`sudo nvidia-smi -i {g.index} -pl <watts>`.")
    if most is not None and limit < most - POWER_MAX_SLACK_WATTS:
        return (f"GPU {g.index}{draw} capped at {limit:.0f} W, below its {most:.0f} W maximum: raise the limit "
                f"with `sudo nvidia-smi -i {g.index} -pl {most:.0f}` (until reboot; persistence mode keeps it "
                "while the driver stays loaded), after checking why it was lowered (a rack power budget, a "
                "datacenter policy) and that the supply and cooling carry it.")
    at_max = f" at its {limit:.0f} W limit, which is already the board's maximum" if most is not None else \
        f" at its {limit:.0f} W limit (its maximum unknown: `nvidia-smi -q -d POWER -i {g.index}`)"
    held = draw or " is"
    return (f"GPU {g.index}{held}{at_max}: the work needs more power than the GPU may draw. Accept the lower "
            "clocks, spread the load over more GPUs (another replica, more data parallelism), or lock the clocks "
            f"lower (`sudo nvidia-smi -i {g.index} -lgc <min>,<max>`) for a steady speed instead of a throttled one.")


def _gpu_thermal(f: Facts) -> str:
    g = _worst(f.gpus, lambda x: x.thermal_share)
    if g is None:
        return "No GPU reading: check `nvidia-smi -q -d TEMPERATURE,PERFORMANCE` for the active slowdown reasons."
    temp = g.temperature_peak_celsius if g.temperature_peak_celsius is not None else g.temperature_celsius
    where = ""
    if temp is not None and g.thermal_limit_celsius is not None:
        where = f" peaked at {temp:.0f} °C against its {g.thermal_limit_celsius:.0f} °C limit"
    elif temp is not None:
        where = f" peaked at {temp:.0f} °C"
    if g.memory_temperature_celsius is not None:
        where += f", memory at {g.memory_temperature_celsius:.0f} °C"
    others = [x for x in f.gpus if x.up and x is not g and x.temperature_celsius is not None]
    compare = ""
    if others and g.temperature_celsius is not None:
        coolest = min(others, key=lambda x: x.temperature_celsius or 0.0)
        gap = g.temperature_celsius - (coolest.temperature_celsius or 0.0)
        compare = (f" GPU {coolest.index} runs {gap:.0f} °C cooler: look at GPU {g.index}'s own fan and airflow."
                   if gap >= HOTTER_THAN_NEIGHBOUR_CELSIUS else " Its neighbours run as hot: look at the room, the rack and the inlet air.")
    return (f"GPU {g.index}{where}: check the fans (`nvidia-smi -q -d TEMPERATURE,PERFORMANCE -i {g.index}`), the "
            "airflow (blanking panels, dust filters, cables in the way) and the inlet temperature." + compare
            + " A lower power limit (`nvidia-smi -pl`) trades a little speed for less heat until it is fixed.")


def _gpu_compute(f: Facts) -> str:
    g = _worst(f.gpus, lambda x: x.busy)
    serving = f.serving is not None and getattr(f.serving, "up", False) and (f.serving.waiting or 0) > 0
    if g is None:
        return "The GPUs are the limit: more or faster GPUs, or less work per request."
    busy = f"GPU {_gpu_names(f.gpus)} busy {pct(g.busy)}"
    if g.sm_active is not None and g.sm_active < LAUNCH_BOUND_SM_ACTIVE:
        return (f"{busy} but SMs active only {pct(g.sm_active)}: the kernels are small or wait on each other. Larger "
                "batches, CUDA graphs (vLLM's default; `torch.compile(mode=\"reduce-overhead\")` in training), "
                "fewer host synchronisations (`.item()`, `.cpu()` in the loop) and fused kernels use the GPU better "
                "than more GPUs would.")
    sm = "" if g.sm_active is None else f", SMs active {pct(g.sm_active)}"
    more = ("another replica behind the load balancer takes the waiting requests" if serving
            else "more GPUs (data parallel) or faster ones")
    return (f"{busy}{sm}: the GPUs compute as fast as they can. For more throughput: {more}; lower precision "
            "(bf16 to fp8 weights and activations where the model allows it); or less work per step (a smaller "
            "model, shorter sequences).")


def _gpu_memory(f: Facts) -> str:
    g = _worst(f.gpus, lambda x: x.memory_used_ratio)
    if g is None:
        return "Check `nvidia-smi --query-compute-apps=pid,used_memory --format=csv` for who holds the memory."
    text = (f"GPU {g.index} VRAM {_gib(g.memory_used_bytes)} of {_gib(g.memory_total_bytes)} used: "
            f"`nvidia-smi --query-compute-apps=pid,used_memory --format=csv -i {g.index}` shows who holds it.")
    r = f.reserved
    if r is not None and r.others:
        text += (f" {r.runtime} reserves the card up front ({r.setting}) and leaves {', '.join(r.others)} no room: "
                 "lower its reservation, unload its model when idle, or give them GPUs of their own.")
    if g.memory_growth_bytes_per_second and g.memory_growth_bytes_per_second > 0:
        text += " It keeps growing: a leak (tensors kept across steps, a cache never freed) or longer inputs."
    kind = getattr(getattr(f.profile, "kind", None), "value", str(getattr(f.profile, "kind", "")))
    if kind == "training":
        text += (" Lower the micro-batch (with gradient accumulation for the same global batch), turn on "
                 "activation checkpointing, shard the optimizer state (ZeRO / FSDP), or train in bf16.")
    else:
        text += (" Lower the batch or the context, use a smaller precision (fp8, int8, int4), or split the model "
                 "over more GPUs (tensor parallel).")
    text += " `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` helps when the memory is fragmented."
    est = f.estimate
    if est is not None and getattr(est, "fits", None) is False:
        text += (f" The memory model says the profile does not fit ({format_bytes(-(est.margin_bytes or 0))} short "
                 "per GPU): `headroom estimate` shows what would.")
    return text


def _kv_cache(f: Facts) -> str:
    s, p, est = f.serving, f.profile, f.estimate
    runtime = _runtime(f)
    used = ""
    if s is not None and getattr(s, "up", False):
        cap = f" of {s.capacity_tokens:,.0f} tokens" if s.capacity_tokens else ""
        used = f"KV cache {pct(s.usage)} used{cap}, {s.waiting or 0:.1f} requests waiting on average: "
    if _on_cpu(f):
        avail = getattr(f.host, "memory_available_bytes", None)
        room = f" ({_gib(avail)} of RAM available now)" if avail is not None else ""
        if runtime in ("llama.cpp", "ollama"):
            ctx = "`--ctx-size` (`-c`) with `--parallel`" if runtime == "llama.cpp" else \
                "`OLLAMA_CONTEXT_LENGTH` (or `num_ctx`) with `OLLAMA_NUM_PARALLEL`"
            return (f"{used}on CPU the KV cache is host RAM, sized by {ctx}: a larger context per slot or fewer "
                    f"parallel slots{room}, a quantized cache (`--cache-type-k q8_0`), or another replica.")
        return (f"{used}on CPU the KV cache is host RAM: give it more with vLLM's `--kv-cache-memory-bytes` "
                f"(or `VLLM_CPU_KVCACHE_SPACE`, GiB){room}, store it as fp8 (`--kv-cache-dtype fp8`), shorten "
                "`--max-model-len`, cap `--max-num-seqs` so requests queue instead of being preempted, or run "
                "another replica.")
    parts = []
    if runtime == "sglang":
        parts.append("raise `--mem-fraction-static`")
    elif runtime in ("tgi",):
        parts.append("raise `--cuda-memory-fraction` or `--max-batch-total-tokens`")
    else:
        util = getattr(getattr(p, "runtime", None), "gpu_memory_utilization", None)
        now = f" from {util:.2f}" if util else ""
        parts.append(f"raise `--gpu-memory-utilization`{now} while the GPU has memory left")
    free = [(g.memory_total_bytes - g.memory_used_bytes, g.memory_total_bytes) for g in f.gpus
            if g.up and g.memory_total_bytes and g.memory_used_bytes is not None]
    if free:
        left, total = min(free)
        parts[-1] += (f" (NVML: {format_bytes(left)} free on the fullest GPU, {max(0.0, left / total):.2f} of it: the "
                      "most the utilisation can grow, less what the runtime keeps outside its reservation)")
    parts += ["store the KV cache as fp8 (`--kv-cache-dtype fp8`)", "shorten `--max-model-len` if requests allow it",
              "or add a replica (or a GPU: more tensor parallelism)"]
    text = f"{used}" + ", ".join(parts) + "."
    alt = ""
    if p is not None and est is not None:
        from headroom.analysis import serving as serving_analysis

        alt = serving_analysis.alternatives(p, est.gpu_memory_bytes, est.gpus_available,
                                            getattr(s, "capacity_tokens", None))
    return text + (f" What the memory model says each gives on this device: {alt.removeprefix('headroom estimate: ')}."
                   if alt else "")


def _pcie(f: Facts) -> str:
    g = _worst(f.gpus, lambda x: x.pcie_ratio)
    if g is None:
        return "Use pinned memory and non_blocking copies; keep data on the GPU between steps."
    gen, width, max_gen, max_width = g.pcie_link
    link = ""
    if gen and width:
        link = f", link gen {gen} x{width}"
        if max_gen and max_width and (gen < max_gen or width < max_width):
            link += (f" of gen {max_gen} x{max_width} possible: the link runs below its best (reseat the card, "
                     "check the slot's lanes and the BIOS PCIe setting; an idle GPU also drops its link speed)")
    return (f"GPU {g.index} moves {(g.pcie_bytes_per_second or 0) / 1e9:.1f} of "
            f"{(g.pcie_capability_bytes_per_second or 0) / 1e9:.1f} GB/s over PCIe{link}. Weights or a KV cache "
            "offloaded to host memory cross PCIe every step: offload less or nothing where they fit (vLLM "
            "`--cpu-offload-gb`, DeepSpeed ZeRO offload), quantize, or add a GPU. Copy from pinned memory "
            "(`DataLoader(pin_memory=True)`, `.to(device, non_blocking=True)`), keep tensors on the GPU between "
            "steps, do augmentation on the GPU, and move less (uint8 images, not float32).")


def _nvlink(f: Facts) -> str:
    g = _worst(f.gpus, lambda x: x.nvlink_ratio)
    if g is None:
        return "Check the NVLink links (`nvidia-smi nvlink -s`) and the parallelism layout."
    return (f"GPU {g.index} NVLink {(g.nvlink_bytes_per_second or 0) / 1e9:.0f} of "
            f"{(g.nvlink_capability_bytes_per_second or 0) / 1e9:.0f} GB/s: the collectives fill the links. "
            f"Check every link is up (`nvidia-smi nvlink -s -i {g.index}`); use less tensor parallelism and more "
            "data or pipeline parallelism, larger micro-batches per all-reduce, or overlap communication with "
            "compute (DDP `bucket_cap_mb`, FSDP prefetch).")


# ------------------------------------------------------------------------------------------ host-bound
def _cpu_compute(f: Facts) -> str:
    """cpu for work without a GPU: its cores are its compute (no DataLoader to feed)."""
    w, h, runtime = f.workload, f.host, _runtime(f)
    used, allowed = getattr(w, "cores_used", None), getattr(w, "cores_allowed", None)
    have = f"the workload computes on the CPU and uses {used:.2f} of the {allowed:g} cores it may use: " \
        if used is not None and allowed else "the workload computes on the CPU and its cores are saturated: "
    parts = []
    quota = getattr(w, "cpu_quota_cores", None)
    if quota:
        parts.append(f"raise its cgroup's quota of {quota:g} cores (`cpu.max`: systemd `CPUQuota=`, Kubernetes "
                     "`resources.limits.cpu`, `docker run --cpus`)")
    if runtime == "vllm" or not runtime:
        parts.append("pin vLLM's threads to the physical cores of one NUMA node (`VLLM_CPU_OMP_THREADS_BIND`, e.g. "
                     "`0-31`, leaving a core or two for the API server), with `VLLM_CPU_KVCACHE_SPACE` in that node's "
                     "memory")
    if runtime in ("llama.cpp", "ollama") or not runtime:
        parts.append("set the threads to the physical cores (llama.cpp `--threads`, Ollama `num_thread`), not the "
                     "logical CPUs")
    parts.append("give it more cores (a larger instance, a second replica behind the load balancer), or less "
                 "work per token (a smaller or more quantized model, int8/int4 weights)")
    if h is not None and h.neighbours:
        top = [n for n in h.neighbours if n.workload != getattr(w, "name", None) and (n.cpu_cores or 0) >= 0.1][:2]
        if top:
            parts.append("other processes take CPUs: " + ", ".join(f"{n.name} (pid {n.pid}, {n.cpu_cores:.1f} cores)"
                                                                  for n in top) + "; nice, move or stop them")
    return have + "; ".join(parts) + "."


def _cpu(f: Facts) -> str:
    if _on_cpu(f):
        return _cpu_compute(f)
    w, h = f.workload, f.host
    parts: list[str] = []
    idle = None
    if h is not None and h.logical_cpus and h.cpu_busy is not None:
        idle = max(0.0, h.logical_cpus * (1.0 - h.cpu_busy - (h.cpu_iowait or 0.0)))
    quota = getattr(w, "cpu_quota_cores", None)
    used = getattr(w, "cores_used", None)
    # per rank, measured: num_workers is each rank's DataLoader's, so the rank whose workers are busiest speaks
    ranks = tuple(getattr(w, "ranks", ()) or ())
    busy = [r for r in ranks if r.workers and r.workers_cores is not None]
    busiest = max(busy, key=lambda r: r.workers_cores / r.workers, default=None)
    workers = busiest.workers if busiest is not None else (None if ranks else getattr(w, "dataloader_workers", None))
    trainer = getattr(w, "dataloader_workers", None) is not None  # a serving runtime's processes have no workers
    pinned = next((r for r in ranks if trainer and not r.workers and (r.cores or 0.0) >= SINGLE_CORE_BOUND), None)
    runnable = getattr(w, "runnable_threads", None)
    allowed = getattr(w, "cores_allowed", None)
    oversubscribed = (w is not None and runnable is not None and allowed and (w.cpu_wait_share or 0.0) >= OVERSUBSCRIBED_WAIT
                      and runnable / allowed >= OWN_THREADS_PER_CORE)
    if oversubscribed and w is not None:  # more of its threads than cores: fewer threads, not more workers
        parts.append(f"≈ {runnable:.0f} of its threads are runnable on {allowed:g} cores and wait "
                     f"{pct(w.cpu_wait_share)} of the time for one: cap each process's thread pools at its share of "
                     "the cores (cores / processes): `OMP_NUM_THREADS` and `MKL_NUM_THREADS` set before the libraries "
                     "load, `torch.set_num_threads(1)` in the DataLoader's `worker_init_fn`, "
                     "`TOKENIZERS_PARALLELISM=false` for tokenizers in workers, `cv2.setNumThreads(0)`; and no more "
                     "DataLoader workers or ranks than cores")
    if w is not None and quota and used is not None and used >= QUOTA_BOUND_SHARE * quota:
        where = f" ({w.cgroup_path})" if w.cgroup_path else ""
        parts.append(f"its cgroup{where} allows {quota:g} cores (`cpu.max`) and it uses {used:.2f}: raise the "
                     "quota (systemd `CPUQuota=`, Kubernetes `resources.limits.cpu`, `docker run --cpus`)")
    if oversubscribed:
        pass  # more workers, or data loading moved into them, would add threads: the advice above stands alone
    elif workers and (busiest is None or busiest.workers_cores / busiest.workers >= SINGLE_CORE_BOUND):
        more = max(workers + 1, min(2 * workers, workers + int(idle or 0)))
        free = f" ({idle:.0f} cores idle on the host)" if idle is not None else ""
        whose = f" (rank pid {busiest.pid})" if busiest is not None and busiest.launched else ""
        parts.append(f"{plural(workers, 'DataLoader worker')}{whose} cannot keep up: raise `num_workers` towards {more}{free}, "
                     "with `pin_memory=True` and `persistent_workers=True` (no restart each epoch) and "
                     "`prefetch_factor` 4")
    elif pinned is not None:
        who = f"rank pid {pinned.pid}" if pinned.launched else f"the main process (pid {pinned.pid})"
        parts.append(f"{who} runs 0 DataLoader workers and uses {pinned.cores:.2f} cores: load data in DataLoader "
                     "workers (`num_workers` > 0, `pin_memory=True`, `persistent_workers=True`) instead of the main "
                     "process, or move the tokenizer/decoder off the critical path (pre-process once and cache)")
    elif w is not None and w.busiest_process_cores is not None and w.busiest_process_cores >= SINGLE_CORE_BOUND:
        parts.append(f"one process (pid {w.busiest_process_pid}) runs at a full core: load data in DataLoader "
                     "workers (`num_workers` > 0, `pin_memory=True`, `persistent_workers=True`) instead of the main "
                     "process, or move the tokenizer/decoder off the critical path (pre-process once and cache)")
    if not parts:
        parts.append("move host-side work off the critical path: pre-process and cache the data, decode on the "
                     "GPU (DALI, nvJPEG), use a faster tokenizer")
    if h is not None and h.neighbours:
        top = [n for n in h.neighbours if n.workload != getattr(w, "name", None) and (n.cpu_cores or 0) >= 0.1][:2]
        if top:
            parts.append("other processes take CPUs: " + ", ".join(f"{n.name} (pid {n.pid}, {n.cpu_cores:.1f} cores)"
                                                                  for n in top) + "; nice, move or stop them")
    return "; ".join(parts) + "."


def _host_memory(f: Facts) -> str:
    h = f.host
    have = ""
    if h is not None and h.memory_total_bytes:
        have = f"{_gib(h.memory_available_bytes)} of {_gib(h.memory_total_bytes)} RAM available"
        full = h.psi.get("memory.full")
        if full is not None:
            have += f", tasks stalled on memory {pct(full)} of the time"
        have += ": "
    return (f"{have}find the largest processes (`ps aux --sort=-rss | head`) and `dmesg -T | grep -i oom` for kills; "
            "each DataLoader worker holds its own copy of the dataset index (lower `num_workers` or "
            "`prefetch_factor`, keep the index in shared numpy arrays), pinned-memory buffers count too; give the "
            "workload a host with more RAM if it needs it (`headroom estimate` sizes the host side).")


def _shared_memory(f: Facts) -> str:
    h = f.host
    mount = getattr(h, "shm_mountpoint", None) or "/dev/shm"
    size = getattr(h, "shm_size_bytes", None)
    left = getattr(h, "shm_available_bytes", None)
    suggest = max(2 * (size or 0), SHM_SUGGEST_MIN_BYTES)
    gib = max(1, math.ceil(suggest / 2**30))
    state = f"{mount} has {_gib(left)} left of {_gib(size)}: " if size else ""
    grow = (f"give the container more: `docker run --shm-size={gib}g`, or in Kubernetes an `emptyDir` volume with "
            f"`medium: Memory` and `sizeLimit: {gib}Gi` mounted at /dev/shm (it counts against the pod's memory "
            "limit)")
    clean = (f"find what fills it (`du -sh {mount}/* | sort -h | tail`) and remove segments left by dead jobs, or "
             "lower `num_workers` / `prefetch_factor`")
    if size and size >= SHM_LARGE_BYTES:  # a host's own tmpfs (half the RAM by default): full means something fills it
        return f"{state}DataLoader workers pass every batch through it. First {clean}; in a container, {grow}."
    return f"{state}DataLoader workers pass every batch through it. First {grow}; or {clean}."


def _disk_io(f: Facts) -> str:
    h, w = f.host, f.workload
    disk = ""
    if h is not None and h.disk_device and h.disk_busy is not None:
        disk = f"{h.disk_device} busy {pct(h.disk_busy)}"
        if h.disk_queue is not None:
            disk += f", queue depth {h.disk_queue:.1f}"
        if w is not None and w.io_bytes_per_second is not None:
            disk += f", the workload reads and writes {w.io_bytes_per_second / 1e6:.0f} MB/s"
        disk += ": "
    others = ""
    if h is not None and h.neighbours:
        top = [n for n in h.neighbours if n.workload != getattr(w, "name", None) and (n.io_bytes_per_second or 0) >= 1e6]
        if top:
            others = " Other processes use the disk: " + ", ".join(
                f"{n.name} (pid {n.pid}, {(n.io_bytes_per_second or 0) / 1e6:.0f} MB/s)" for n in top[:2]) + \
                "; move them (`ionice -c3`) or schedule them elsewhere."
    return (f"{disk}stage the dataset on local NVMe (or in RAM: the page cache holds what fits), read it in large "
            "sequential shards (WebDataset, TFRecord, Parquet) with more DataLoader workers reading in parallel, "
            "and write checkpoints less often or asynchronously." + others)


def _network(f: Facts) -> str:
    h = f.host
    link = ""
    if h is not None and h.net_device and h.net_ratio:
        rate = (h.net_bytes_per_second or 0) * 8 / 1e9
        link = f"{h.net_device} at {rate:.1f} Gbit/s, {pct(h.net_ratio)} of its link: "
    elif h is not None and h.net_busiest_device and h.net_busiest_bytes_per_second:
        link = f"{h.net_busiest_device} at {h.net_busiest_bytes_per_second * 8 / 1e9:.1f} Gbit/s (its speed unknown): "
    return (f"{link}the traffic between hosts limits the job (over TCP sockets NCCL reaches a fraction of the "
            "link's speed). Use RDMA where the hosts have it (InfiniBand or RoCE: "
            "`NCCL_IB_HCA`, check `NCCL_DEBUG=INFO` says NET/IB, not Socket), a faster link, fewer hosts with more "
            "GPUs each, larger gradient buckets or gradient compression, and overlap communication with compute.")


# per resource, the remedy in general (no numbers): the `remedy` annotation of the alerts that fire for that
# resource (grafana/rules/headroom-alerts.yml; tests/test_verdict_actions.py keeps them equal), where Prometheus
# has no verdict's signals to work the concrete one out from
SUMMARY: Mapping[str, str] = {
    "gpu_compute": "The GPUs compute as fast as they can: larger batches or CUDA graphs when SM activity is low; "
                   "otherwise more or faster GPUs, another replica, or lower precision.",
    "gpu_memory": "Find who holds the memory (nvidia-smi --query-compute-apps=pid,used_memory --format=csv); lower "
                  "the batch or context, checkpoint activations, shard the optimizer, or split the model over more "
                  "GPUs.",
    "kv_cache": "Give the KV cache more room: raise --gpu-memory-utilization while the card has memory left, "
                "--kv-cache-dtype fp8, a shorter --max-model-len, or another replica; on CPU raise "
                "--kv-cache-memory-bytes.",
    "cpu": "Feed the GPUs faster: more DataLoader workers (num_workers) with pin_memory=True and "
           "persistent_workers=True, data loading out of the main process, a higher cgroup CPU quota (cpu.max), "
           "or fewer neighbours on the CPUs.",
    "host_memory": "Free host memory: stop or shrink the process that grew, lower DataLoader workers or "
                   "prefetching, or give the workload a host with more RAM.",
    "shared_memory": "Enlarge /dev/shm (docker --shm-size, or a Kubernetes emptyDir with medium: Memory and a "
                     "sizeLimit), or lower num_workers / prefetch_factor; remove leftover segments.",
    "disk_io": "Stage the data on local NVMe or in RAM, read large sequential shards with more DataLoader workers, "
               "write checkpoints less often, and move other disk users away.",
    "network": "Use RDMA (InfiniBand or RoCE; NCCL_DEBUG=INFO should say NET/IB), a faster link, fewer hosts with "
               "more GPUs each, larger gradient buckets, and overlap communication with compute.",
    "pcie": "Copy from pinned memory with non_blocking=True, keep tensors on the GPU between steps, move compact "
            "data, and check the link runs at its maximum generation and width.",
    "nvlink": "Check every NVLink link is up (nvidia-smi nvlink -s); use less tensor parallelism, larger "
              "micro-batches per all-reduce, and overlap communication with compute.",
    "gpu_thermal": "Check the GPU's fans, airflow, blanking panels and the inlet temperature (one hot GPU: its "
                   "cooling; all of them: the room or rack); a lower power limit trades a little speed for less heat.",
    "gpu_power": "If the enforced limit is below the board's maximum (nvidia-smi -q -d POWER), raise it with "
                 "nvidia-smi -pl; at the maximum, spread the load over more GPUs; a hardware power brake means the "
                 "power supply or the chassis: check the PSUs.",
}

REMEDIES: Mapping[str, Callable[[Facts], str]] = {
    "gpu_compute": _gpu_compute, "gpu_memory": _gpu_memory, "cpu": _cpu, "host_memory": _host_memory,
    "shared_memory": _shared_memory, "disk_io": _disk_io, "pcie": _pcie, "gpu_thermal": _gpu_thermal,
    "gpu_power": _gpu_power, "network": _network, "nvlink": _nvlink, "kv_cache": _kv_cache,
}
if set(REMEDIES) != set(RESOURCES) or set(SUMMARY) != set(RESOURCES):  # pragma: no cover - a test guards it too
    raise RuntimeError("every resource needs a remedy")
