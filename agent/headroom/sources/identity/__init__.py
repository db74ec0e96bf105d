"""The identity collector: automatic workloads for the pods, Slurm jobs, containers, systemd units and
serving or training launchers that hold a GPU, without a hand-written profile.

Per tick (docs/workload-identity.md):

1. the GPU processes are the pids NVML listed in the previous tick (``SourceContext.previous``; this
   collector never calls NVML, so an identity appears one tick after its first process on a GPU); with
   ``launchers`` on, launchers that hold no GPU (found among new processes, ``_LauncherScan``) are taken as
   processes on no GPU;
2. each one's /proc/PID/cgroup is read once, when it is new to the collector, and ``parse_cgroup_path`` turns
   the path into an identity: Kubernetes pod UID + container ID (cgroup v1
   and v2, cgroupfs and systemd drivers, containerd / CRI-O / Docker naming), Slurm job and step
   (``/slurm/uid_U/job_J/step_S`` in v1, ``.../job_J/step_S/...`` in v2), Docker / Podman container
   ID, or the innermost systemd unit;
3. names come from on-disk state only, read once per container (no daemon API): the OCI bundle's
   annotations (containerd, CRI-O: namespace, pod, container), Docker's ``config.v2.json``, Podman's
   ``containers.json``; and, with --kubernetes, from the kubelet's pod-resources API
   (``sources/kubelet.py``, polled in its own thread), which also says which GPU or MIG device each
   pod holds (pods with a GPU but no process on it yet are workloads too);
4. ``--hpc-job-mapping-dir`` (dcgm-exporter's format: a file per GPU index listing job IDs, one a line)
   assigns jobs to GPUs for sites whose prolog writes those files;
5. each identity's cgroup files (v2 cpu.stat, memory.current, pids.current, cpu.max, io.stat, PSI; their v1
   equivalents for an identity named by a v1 path) are read, and its member processes listed (cgroup.procs of
   its cgroup and every cgroup below: ``list_members``, for the processes collector to measure), when it
   appears, then again within CGROUP_REFRESH_SECONDS (10 s) of ticks, the ones read longest ago first: every
   tick while there are no more than CGROUP_EVERY_TICK (5) identities, a tenth of them a tick at 1 Hz beyond that;
6. the command lines of each new GPU process and its ancestors name its serving or training launcher
   (``vllm serve``, ``torchrun`` ...: workload/launchers.py), once per process (an ancestor is read once
   while it lives: the workers of one launcher, or the pods of one parent, share it): a launcher outside the
   identities above is a workload of its own, and its model's config.json, found as the process sees it
   (a path, or its Hugging Face cache, through /proc/PID/root) and read in a worker thread, lets
   attribution size it like a declared profile (``read_launcher_model``).

Work follows what changed, so that 50 pods churning cost little more per tick than the new pod
(docs/workload-identity.md, "Cost"): on the live /proc of the agent's pid namespace each GPU process is watched
through a pidfd (one poll a tick says which exited, so a process that ended leaves at once and a reused pid is
a new process, read anew; elsewhere /proc/PID's inode is compared each tick); the groups of the processes
that came, went or moved are rebuilt, what the kubelet and the job mapping add is merged again only where it
changed, and an identity whose group, cgroup figures and model are unchanged is last tick's IdentityGroup.

Identities beyond ``max_workloads`` are not exported (``headroom_workload_identities_dropped_total``
counts each one once); the collector keeps state only for live GPU processes and live identities, so
pods and jobs that end leave nothing behind.

One purpose a module, importing one way (``cgroup_paths``, ``containers``, ``jobs``, ``launchers``, ``models``,
``cgroup_files``, ``groups`` import none of the others; ``additions`` imports ``groups`` and ``jobs``; ``collector``
imports them all):

- ``cgroup_paths.py``: /proc/PID/cgroup and what a path names (pod, job, container, unit), who may name it (the
  directories' owners, users' and delegated subtrees) and the precedence (``RANK``);
- ``containers.py``: a container's names from its runtime's on-disk state;
- ``jobs.py``: the HPC job mapping directory (``JobMappingReader``);
- ``launchers.py``: a GPU process's launcher from its and its ancestors' command lines, its metrics address, and
  the launchers that hold no GPU among new processes (``_LauncherScan``);
- ``models.py``: a launcher's model files, read as the process sees them, off the tick (``_ModelReader``);
- ``cgroup_files.py``: an identity's cgroup figures and member processes, and which identities' directories a
  tick reads;
- ``groups.py``: the records the tick groups processes with (``_Slot``, ``_Pid``, ``_Group``, ``_Addition``);
- ``additions.py``: what the kubelet's pod-resources answer and a job mapping add to the groups;
- ``watch.py``: the GPU processes and their ancestors the collector knows, watched through pidfds;
- ``collector.py``: ``IdentityCollector``, the tick.

This module re-exports what the rest of the agent, the tests and the benchmarks import from
``headroom.sources.identity``; importing it registers the collector.
"""

from __future__ import annotations

from headroom.sources.identity.cgroup_files import list_members, read_identity_cgroup
from headroom.sources.identity.cgroup_paths import (
    Owners,
    cgroup_owners,
    classify,
    classify_cgroup_path,
    identity_of,
    parse_cgroup_path,
    v1_identity_cgroup,
)
from headroom.sources.identity.collector import DEFAULT_AUTO, DEFAULT_MAX_WORKLOADS, KINDS, IdentityCollector
from headroom.sources.identity.containers import ContainerMeta, container_meta
from headroom.sources.identity.jobs import (
    MAPPING_ENTRIES,
    MAPPING_FILE_BYTES,
    MAPPING_FILES,
    JobMappingReader,
    read_job_mapping,
)
from headroom.sources.identity.launchers import (
    CMDLINE_BYTES,
    find_launcher,
    is_local_address,
    launcher_step,
    ollama_endpoint,
    same_network_namespace,
)
from headroom.sources.identity.models import ProcessIdentity, process_identity, read_launcher_model

__all__ = [
    "CMDLINE_BYTES", "DEFAULT_AUTO", "DEFAULT_MAX_WORKLOADS", "KINDS", "MAPPING_ENTRIES", "MAPPING_FILES",
    "MAPPING_FILE_BYTES", "ContainerMeta", "IdentityCollector", "JobMappingReader", "Owners", "ProcessIdentity",
    "cgroup_owners", "classify", "classify_cgroup_path", "container_meta", "find_launcher", "identity_of",
    "is_local_address", "launcher_step", "list_members", "ollama_endpoint", "parse_cgroup_path", "process_identity",
    "read_identity_cgroup", "read_job_mapping", "read_launcher_model", "same_network_namespace", "v1_identity_cgroup",
]
