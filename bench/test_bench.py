"""The harness's own arithmetic and inputs (run with ``.venv/bin/python -m pytest bench``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import fixtures, host, report, run
from bench.scrape import ScrapeResult
from bench.stats import Spread, percentile, slope
from headroom.config import check_config_text
from headroom.simulation import parse_scenario

STAT = "4242 (my (odd) proc) S 1 4242 4242 0 -1 4194560 100 0 0 0 {utime} {stime} 0 0 20 0 3 0 5000 1000 200"


@pytest.mark.parametrize(
    ("utime", "stime"),
    [(0, 0), (150, 50), (123456, 7)],
    ids=["idle process", "busy process", "mostly user time"],
)
def test_cpu_seconds_come_from_utime_and_stime_even_with_parentheses_in_the_name(utime, stime):
    text = STAT.format(utime=utime, stime=stime)
    assert host.parse_stat_cpu_seconds(text) == pytest.approx((utime + stime) / host.CLK_TCK)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [([5.0], 99, 5.0), ([1, 2, 3, 4], 50, 2), (list(range(1, 101)), 99, 99), (list(range(100, 0, -1)), 1, 1)],
    ids=["one value", "even count median is the lower", "p99 of 100", "unsorted input"],
)
def test_percentile_is_nearest_rank(values, q, expected):
    assert percentile(values, q) == expected


def test_empty_measurements_are_refused():
    with pytest.raises(ValueError, match=r"^no measurements$"):
        Spread.of([])
    with pytest.raises(ValueError, match=r"^no measurements$"):
        percentile([], 50)


def test_slope_of_a_line_is_its_cost_per_unit():
    assert slope([1, 8, 16], [3.0, 10.0, 18.0]) == pytest.approx(1.0)


def test_generated_scenario_has_mig_on_every_fourth_gpu_and_the_given_pids():
    scenario = parse_scenario(fixtures.scenario_yaml(16, lambda i: [1000 + i, 2000 + i]))
    assert len(scenario.gpus) == 16
    mig = [g.index for g in scenario.gpus if g.mig_enabled]
    assert mig == [3, 7, 11, 15]
    assert [p.pid for p in scenario.gpus[5].processes] == [1005, 2005]


@pytest.mark.parametrize("workloads", [1, 3, 10])
def test_each_declared_workload_matches_its_own_processes_only(workloads):
    config = check_config_text(fixtures.config_yaml(workloads))
    assert [w.name for w in config.workloads] == [f"bench-wl{k:02d}" for k in range(1, workloads + 1)]
    for k, w in enumerate(config.workloads, start=1):
        pattern = re.compile(w.match.cmdline)
        assert pattern.search(host.workload_argv0(k, "worker2") + " 86400")
        assert not pattern.search(host.workload_argv0(k + 1, "server") + " 86400")
        assert not pattern.search("headroom-bench-idle 86400")


def test_scales_vary_one_axis_at_a_time_around_the_reference():
    scales = run.tick_scales()
    g, p, w = run.REFERENCE
    assert {s[0] for s in scales if s[1:] == (p, w)} == set(run.GPU_SCALES)
    assert {s[1] for s in scales if (s[0], s[2]) == (g, w)} == set(run.PROCESS_SCALES)
    assert {s[2] for s in scales if s[:2] == (g, p)} == set(run.WORKLOAD_SCALES)
    assert [s[1] for s in scales] == sorted(s[1] for s in scales), "processes outermost: the farm only grows"


def _scrape(server: str, encoding: str, cpu_ms: float, p50_ms: float, p99_ms: float) -> ScrapeResult:
    lat = tuple([p50_ms / 1e3] * 98 + [p99_ms / 1e3] * 2)
    return ScrapeResult(server, encoding, lat, Spread(cpu_ms / 1e3, cpu_ms / 1e3, cpu_ms / 1e3, 1),
                        Spread(0.01, 0.01, 0.01, 1), 1000, 800, 40 * report.MIB, 41 * report.MIB, 42 * report.MIB)


@pytest.mark.parametrize(
    ("headroom_ms", "node_ms", "met"),
    [(0.2, 8.0, True), (1.6, 8.0, True), (1.7, 8.0, False)],
    ids=["far cheaper", "exactly a fifth", "just over a fifth"],
)
def test_node_exporter_ratio_target_is_judged_at_one_fifth(headroom_ms, node_ms, met):
    results = report.Results(machine=host.machine(), command="x", quick=False, node_exporter="1.5.0")
    results.scrapes = [_scrape("headroom", "identity", headroom_ms, 0.5, 2.0),
                       _scrape("node_exporter", "identity", node_ms, 8.0, 12.0)]
    verdicts = {t: ok for t, _, ok in report.targets(results)}
    assert verdicts["server CPU per scrape <= 1/5 of node_exporter's (identity)"] is met


@pytest.mark.parametrize(
    ("p50_ms", "p99_ms", "met"),
    [(0.5, 2.0, True), (1.2, 2.0, False), (0.5, 6.0, False)],
    ids=["fast", "slow median", "slow tail"],
)
def test_latency_target_needs_both_percentiles(p50_ms, p99_ms, met):
    results = report.Results(machine=host.machine(), command="x", quick=False, node_exporter=None)
    results.scrapes = [_scrape("headroom", "identity", 0.2, p50_ms, p99_ms)]
    verdicts = {t: ok for t, _, ok in report.targets(results)}
    assert verdicts["scrape p50 < 1 ms, p99 < 5 ms (8 GPUs, loopback, identity)"] is met


def test_the_farm_starts_named_processes_and_kills_them_all():
    farm = host.ProcessFarm()
    try:
        farm.ensure_workloads(2)
        pids = farm.workload_pids(2)
        assert len(pids) == host.WORKLOAD_PROCESSES
        argv = Path(f"/proc/{pids[0]}/cmdline").read_bytes().split(b"\0")
        assert argv[0].decode() == host.workload_argv0(2, "server")
    finally:
        farm.close()
    assert farm.size == 0
    for pid in pids:
        with pytest.raises(FileNotFoundError):
            Path(f"/proc/{pid}/cmdline").read_bytes()


def test_the_processes_bench_lists_proc_only_in_the_listing_way():
    """bench/processes.py on a small tree: both ways find every member each tick (it asserts so), and only
    the listing way lists /proc every tick."""
    from bench.processes import fixture

    result = fixture(processes=60, ticks=6, forks=2)
    assert result["listing"][2] == 7 and result["allocated"][2] == 1


def test_the_gpu_section_counts_every_nvml_call_the_collector_makes_per_tick():
    """bench.gpu counts calls by wrapping the collector's library; the per-tick field read goes through the
    binding's function lookup, and is counted there (here over the driver stand-in, which counts too)."""
    from bench.gpu import _CountingLibrary
    from headroom.sources import SourceContext
    from headroom.sources.nvml import NvmlCollector

    scenario = parse_scenario(fixtures.scenario_yaml(2))
    lib = scenario.nvml_library()
    collector = NvmlCollector(SourceContext(scenario=scenario, settings={"pcie_poll_interval": 60.0}))
    import pynvml  # what bench.gpu wraps

    counting = _CountingLibrary(pynvml)
    collector.lib = counting
    try:
        collector.collect()
        counting.calls.clear()
        before = sum(n for (name, _), n in lib.calls.items() if name == "nvmlDeviceGetFieldValues")
        for _ in range(3):
            collector.collect()
        after = sum(n for (name, _), n in lib.calls.items() if name == "nvmlDeviceGetFieldValues")
    finally:
        collector.close()
    assert counting.calls["nvmlDeviceGetFieldValues"] == after - before == 3 * 2
    assert counting.calls["nvmlDeviceGetPowerUsage"] == 3 * 2


def _cost_result(now_ms: float, fake_ms: float) -> dict:
    def run(ms: float) -> dict:
        return {"own": [ms / 1e3] * 5, "inside": [1e-3] * 5, "entry_calls_per_tick": 100.0, "plumbing_per_call": 1e-6}

    return {"gpus": 8, "ticks": 5, "now": [run(now_ms)], "baseline": [run(fake_ms)], "baseline_binding": [run(now_ms)],
            "baseline_missing": None}


@pytest.mark.parametrize(("now_ms", "fake_ms", "verdict"), [(1.0, 0.95, "met"), (1.0, 0.6, "**missed**")])
def test_the_nvml_cost_section_judges_the_ratio_to_the_baseline_at_ten_percent(now_ms, fake_ms, verdict):
    from bench import nvml_cost

    text = nvml_cost.markdown(_cost_result(now_ms, fake_ms), "python -m bench.nvml_cost")
    assert text.startswith(nvml_cost.BEGIN) and text.rstrip().endswith(nvml_cost.END)
    assert f"**{now_ms / fake_ms:.2f}** (the issue allows 1.10: {verdict})" in text
    assert "| 0.125 ms" not in text and "| 125 µs |" in text  # per GPU: 1.0 ms over 8 GPUs


def test_the_nvml_cost_section_replaces_its_markers_and_keeps_the_rest(tmp_path):
    from bench import nvml_cost

    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\nbefore\n{nvml_cost.BEGIN}\nold\n{nvml_cost.END}\nafter\n<!-- fleet:begin -->\nfleet\n")
    nvml_cost.write_docs(f"{nvml_cost.BEGIN}\nnew\n{nvml_cost.END}\n", doc)
    assert doc.read_text() == f"# Benchmarks\n\nbefore\n{nvml_cost.BEGIN}\nnew\n{nvml_cost.END}\nafter\n<!-- fleet:begin -->\nfleet\n"
    fresh = tmp_path / "fresh.md"
    fresh.write_text("# Benchmarks\n\n<!-- fleet:begin -->\nfleet\n")
    nvml_cost.write_docs(f"{nvml_cost.BEGIN}\nnew\n{nvml_cost.END}\n", fresh)
    assert fresh.read_text().index("new") < fresh.read_text().index("fleet")


def test_the_reference_tick_with_pods_churning_names_each_live_pod_and_leaves_nothing_behind(tmp_path):
    """bench.pods + ticks.measure_pair on a tiny scale (2 GPUs, 3 pods, a few ticks): the churning sampler
    exports each live pod as an automatic `pod` workload named from containerd's annotations, the plain one
    none; the kubelet was asked; the report gets the row and the target line; the pods' processes and
    cgroups are gone afterwards."""
    from bench import pods as pods_module
    from bench import ticks

    base, why = pods_module.cgroup_v2_base()
    if base is None:
        pytest.skip(why)  # needs root and a cgroup v2 hierarchy: the bench says so in the report instead
    scenario_path = tmp_path / "scenario.yaml"
    scenario_path.write_text(fixtures.scenario_yaml(4))  # GPU 3 is a MIG GPU: a pod runs in an instance
    config = check_config_text(fixtures.config_yaml(1, fixtures.optional_collectors(), window="20s"))
    churn = pods_module.PodChurn(5, parse_scenario(scenario_path.read_text()).gpus, tmp_path / "pods")
    try:
        without, with_pods = ticks.measure_pair(config, scenario_path, 4, 100, churn, ticks=4, warmup=3, spacing=0.0)
        pids = churn.pids
        top = churn.top
    finally:
        churn.close()
    info = [line for line in with_pods.exposition.decode().splitlines() if line.startswith("headroom_workload_info{")]
    auto = sorted(re.search(r'workload="([^"]+)"', line).group(1) for line in info
                  if 'kind="pod"' in line and 'source="auto"' in line)
    # 7 ticks, one pod replaced before each: pods 8-12 live at the last tick, and identity is a tick behind NVML
    # (pod 12's process is not in the previous tick's process list yet): pods 8-11 come from their processes,
    # with NVML's memory of each on its time-sliced GPU and their cgroup's CPU; a pod that ended may still be
    # named by the kubelet's last answer (without a process: no memory), as on a real node
    from_processes = [f"{pods_module.NAMESPACE}/job-{n:05d}" for n in range(8, 12)]
    text = with_pods.exposition.decode()
    used = {m.group(1): int(m.group(2)) for m in re.finditer(
        r'^headroom_workload_gpu_memory_used_bytes\{workload="([^"]+)",gpu="\d+"\} (\d+)$', text, re.M)}
    assert {name: used.get(name) for name in from_processes} == dict.fromkeys(from_processes, pods_module.GPU_MEMORY)
    cpu = re.findall(r'^headroom_workload_cgroup_cpu_seconds_total\{workload="(bench/[^"]+)",mode="user"\}', text,
                     re.M)
    assert set(from_processes) <= set(cpu) <= set(auto)
    assert set(from_processes) <= set(auto) <= {f"{pods_module.NAMESPACE}/job-{n:05d}" for n in range(2, 13)}, auto
    assert ticks.auto_workloads(without.exposition) == 0
    assert with_pods.pods == 5 and with_pods.kubelet_list_cpu is not None and "identity" in with_pods.collector_cpu
    assert with_pods.without_pods == without.tick_cpu and with_pods.pods_added.n == 4
    assert churn.started == 5 + 7 + 4 and churn.ended == churn.started
    assert not top.exists()
    for pid in pids:
        cmdline = Path(f"/proc/{pid}/cmdline")
        assert not cmdline.exists() or b"headroom-bench-pod" not in cmdline.read_bytes()
    results = report.Results(machine=host.machine(), command="x", quick=True, node_exporter=None)
    results.ticks = [without, with_pods]
    text = report.markdown(results)
    assert "| 4 | 100 | 1 + 5 pods churning |" in text
    target = next(t for t in report.targets(results) if "pods churning" in t[0])
    assert target[0] == "CPU per tick, reference + 5 pods churning (--kubernetes): < 10 ms"
    assert f"{with_pods.tick_cpu_with_kubelet * 1e3:.2f} ms median" in target[1]
    assert "pods churning over 10 ms" not in text or target[2] is False
    import dataclasses

    results.ticks = [without, dataclasses.replace(with_pods, tick_cpu=Spread(0.02, 0.02, 0.02, 4))]
    assert "**CPU per tick with 5 pods churning over 10 ms**: the pods add" in report.markdown(results)


def test_the_bench_pods_have_the_pids_controller_so_an_idle_pods_refresh_lists_no_tree(tmp_path, monkeypatch):
    """A kubelet's pod cgroups have the pids controller; the bench's do too (cgroup v2's subtree_control, or the v1
    pids hierarchy at the same paths on a hybrid host), so the identity collector's refresh of an idle pod reads
    pids.current and does not list the pod's tree (sources/identity/cgroup_files.py _CgroupDir.refresh). Without it every
    refresh walked every pod's tree, an overstatement of the bench."""
    from bench import pods as pods_module

    # _CgroupDir (private) and list_members (patched where _CgroupDir.refresh looks it up): their module
    from headroom.sources.identity import cgroup_files as identity

    base, why = pods_module.cgroup_v2_base()
    if base is None:
        pytest.skip(why)
    scenario_path = tmp_path / "scenario.yaml"
    scenario_path.write_text(fixtures.scenario_yaml(2))
    churn = pods_module.PodChurn(2, parse_scenario(scenario_path.read_text()).gpus, tmp_path / "pods")
    try:
        v2_pids = "pids" in (base / "cgroup.subtree_control").read_text().split()
        hybrid = not v2_pids and base.name == "unified" and (base.parent / "pids" / "cgroup.procs").exists()
        if not v2_pids and not hybrid:
            pytest.skip("this host's cgroups have no pids controller to enable")
        # private: the bench harness's own pods (bench/pods.py), not agent code
        pod = churn._pods[0]
        cgroup = "/" + str(pod.pod_dir.relative_to(base))
        # private: the identity collector's directory reader: the bench opens one as the collector does
        d = identity._CgroupDir.open(str(pod.pod_dir), True, cgroup,
                                     v1_base=str(base.parent) if hybrid else "")
        try:
            walks = []
            listed = identity.list_members
            monkeypatch.setattr(identity, "list_members", lambda path: walks.append(path) or listed(path))
            assert d.refresh(0) and d.processes == 1 and d.members == (pod.process.pid,)
            assert not d.refresh(1) and d.processes == 1
            assert walks == [str(pod.pod_dir)]  # the first read only: the idle pod's tree is not walked again
        finally:
            d.close()
        mirror = base.parent / "pids" / churn.top.relative_to(base) if hybrid else None
    finally:
        churn.close()
    assert mirror is None or not mirror.exists()


def test_the_bench_enables_the_pids_controller_in_its_own_v2_cgroups_only(tmp_path):
    """On a cgroup v2 host whose root hands the pids controller down, the bench enables it from its top cgroup to
    the pods' parent (a tree of plain files stands in for cgroupfs here); the host's root is never written, and
    where the root does not hand it down nothing is."""
    from bench.pods import _enable_pids

    base = tmp_path / "cgroup"
    kubepods = base / "headroom-bench-1" / "kubepods.slice" / "kubepods-burstable.slice"
    kubepods.mkdir(parents=True)
    (base / "cgroup.subtree_control").write_text("cpu memory pids\n")
    assert _enable_pids(base, kubepods)
    chain = [base / "headroom-bench-1", base / "headroom-bench-1" / "kubepods.slice", kubepods]
    assert [(d / "cgroup.subtree_control").read_text() for d in chain] == ["+pids"] * 3
    assert (base / "cgroup.subtree_control").read_text() == "cpu memory pids\n"
    for d in chain:
        (d / "cgroup.subtree_control").unlink()
    (base / "cgroup.subtree_control").write_text("cpu memory\n")
    assert not _enable_pids(base, kubepods)
    assert not any((d / "cgroup.subtree_control").exists() for d in chain)


def test_a_child_started_on_port_0_is_found_on_the_port_the_kernel_gave_it():
    import subprocess
    import sys
    import urllib.request

    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port = host.listening_port(server, timeout=30, what="http.server")
        assert port != 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as resp:
            assert resp.status == 200
    finally:
        server.kill()
        server.wait()


def test_a_child_that_exits_before_listening_is_reported_not_waited_for():
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    child.wait()
    with pytest.raises(RuntimeError, match="agent exited with 3 before listening"):
        host.listening_port(child, timeout=30, what="agent")


def test_the_gpu_section_never_measures_the_driver_stand_in_as_a_real_gpu():
    """make bench's simulated rows install the stand-in under pynvml in its process; the GPU section once ran
    on it afterwards and reported its simulated H100s as a real GPU. probe() refuses it by name."""
    from bench.gpu import measure, probe

    parse_scenario(fixtures.scenario_yaml(2)).nvml_library()  # installed, as the tick rows do
    why = probe()
    assert why is not None and "stand-in" in why
    assert measure().absent == why


def test_the_memory_section_says_what_a_sample_and_a_gpu_cost_in_this_run():
    results = report.Results(machine=host.machine(), command="x", quick=False, node_exporter=None)
    results.window_rss = {8: [(0.0, 46 * report.MIB), (30.0, 46 * report.MIB + 601 * 12 * 1024)],
                          16: [(0.0, 47 * report.MIB), (60.0, 47 * report.MIB + 601 * 20 * 1024)]}
    results.window_full_at = {8: 30.0, 16: 60.0}
    # private: the bench report's own helper (bench/report.py), not agent code
    text = report._why_rss(results)
    assert "the 46 MiB before the window fills" in text
    assert "(here 12 KiB at 8 GPUs, 20 KiB at 16: 1.0 KiB per GPU)" in text


@pytest.mark.parametrize(("weight", "shares"), [(100, 1024), (1000, 10240), (1, 10), (10000, 102400)])
def test_the_storm_bench_maps_a_cpu_weight_to_cgroup_v1_shares_as_systemd_does(weight, shares):
    from bench.storm import shares_of_weight

    assert shares_of_weight(weight) == shares
