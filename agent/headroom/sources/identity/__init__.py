"""The identity collector (automatic workloads: pods, Slurm jobs, containers, units, launchers that hold a GPU).

This module re-exports what the rest of the agent, the tests and the benchmarks import from
``headroom.sources.identity``; importing it registers the collector.
"""

from __future__ import annotations

from headroom.sources.identity.collector import (
    CMDLINE_BYTES,
    DEFAULT_AUTO,
    DEFAULT_MAX_WORKLOADS,
    KINDS,
    MAPPING_ENTRIES,
    MAPPING_FILE_BYTES,
    MAPPING_FILES,
    ContainerMeta,
    IdentityCollector,
    JobMappingReader,
    Owners,
    ProcessIdentity,
    cgroup_owners,
    classify,
    classify_cgroup_path,
    container_meta,
    find_launcher,
    identity_of,
    is_local_address,
    launcher_step,
    list_members,
    ollama_endpoint,
    parse_cgroup_path,
    process_identity,
    read_identity_cgroup,
    read_job_mapping,
    read_launcher_model,
    same_network_namespace,
    v1_identity_cgroup,
)

__all__ = [
    "CMDLINE_BYTES", "DEFAULT_AUTO", "DEFAULT_MAX_WORKLOADS", "KINDS", "MAPPING_ENTRIES", "MAPPING_FILES",
    "MAPPING_FILE_BYTES", "ContainerMeta", "IdentityCollector", "JobMappingReader", "Owners", "ProcessIdentity",
    "cgroup_owners", "classify", "classify_cgroup_path", "container_meta", "find_launcher", "identity_of",
    "is_local_address", "launcher_step", "list_members", "ollama_endpoint", "parse_cgroup_path", "process_identity",
    "read_identity_cgroup", "read_job_mapping", "read_launcher_model", "same_network_namespace", "v1_identity_cgroup",
]
