"""The processes collector (``collector.py``); this module re-exports what the rest of the agent, the tests and the
benchmarks import from ``headroom.sources.processes``; importing it registers the collector."""

from __future__ import annotations

from headroom.sources.processes.collector import (
    ARGV_SETTLE_SECONDS,
    CMDLINE_MATCH_BYTES,
    FULL_SCAN_SECONDS,
    HOT_CORES,
    MIN_LISTING_WORTH,
    OPEN_MEMBER_FILES,
    PAGE_SIZE,
    RECHECKS,
    Matcher,
    ProcessesCollector,
    Rule,
    cgroup_root,
    is_thread_group_leader,
    parse_cpu_max,
    parse_cpu_stat,
    parse_io_stat,
    read_cgroup,
    read_last_pid,
)

__all__ = ["ARGV_SETTLE_SECONDS", "CMDLINE_MATCH_BYTES", "FULL_SCAN_SECONDS", "HOT_CORES", "MIN_LISTING_WORTH",
           "OPEN_MEMBER_FILES", "PAGE_SIZE", "RECHECKS", "Matcher", "ProcessesCollector", "Rule", "cgroup_root",
           "is_thread_group_leader", "parse_cpu_max", "parse_cpu_stat", "parse_io_stat", "read_cgroup",
           "read_last_pid"]
