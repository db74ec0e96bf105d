"""The synthetic host: a scenario's host: section, read back through the REAL host collectors."""

from __future__ import annotations

import textwrap

import pytest

from headroom.analysis import rates
from headroom.config import load_config
from headroom.daemon import Options, build_collectors
from headroom.exposition.render import render as render_exposition
from headroom.sampler import Sampler
from headroom.simulation import ManualClock, ScenarioError, list_scenarios, load_scenario, parse_scenario
from headroom.simulation.host_spec import parse_link_speed
from headroom.sources import SourceContext, load_all

GPUS = "gpus:\n  - {name: NVIDIA H100 80GB HBM3, memory_total: 80GiB, power_limit: 700}\n"

BUSY_HOST = GPUS + textwrap.dedent("""\
    host:
      cpu: {logical_cpus: 8, utilization: {steps: [[0s, 0.5], [5s, 0.9]]}, iowait: 0.05}
      pressure:
        cpu: {some: 0.45}
        memory: {some: 0.3, full: 0.25}
        io: {some: {avg10: 0.6, avg60: 0.5}}
      memory: {total: 64GiB, available: 1.28GiB, cached: 512MiB, major_faults: 800}
      disks: [{name: nvme0n1, busy: 0.98, read: 1GiB, write: 16MiB, queue_depth: 24}]
      network:
        - {name: eth0, speed: 25Gbit, rx: 2.96875GB, tx: 100MB}
        - {name: eth1, rx: 1MB}
      shm: [{mountpoint: /dev/shm, size: 64MiB, used: 63MiB}]
    """)


class Host:
    """A scenario's synthetic host read by the real collectors, ticking on a manual clock."""

    def __init__(self, text: str, names=("cpu", "memory", "disk", "net", "shm")) -> None:
        self.scenario = parse_scenario(text, "test.yaml")
        self.clock = ManualClock()
        self.scenario.synthetic_host(clock=self.clock)
        registry = load_all()
        self.collectors = [registry[n](SourceContext(paths=self.scenario.host_paths(n), scenario=self.scenario))
                           for n in names]
        self.sampler = Sampler(render=render_exposition, collectors=self.collectors, interval=1.0, collector_timeout=5.0, clock=self.clock,
                               before_tick=self.scenario.update_host)
        self.sampler.scenario_object = self.scenario

    def tick(self, advance: float = 0.0):
        self.clock.advance(advance)
        return self.sampler.tick().sample

    def close(self) -> None:
        self.sampler.stop()


@pytest.fixture
def busy():
    host = Host(BUSY_HOST)
    yield host
    host.close()


def rate(a, b, read, seconds):
    return (read(b) - read(a)) / seconds


def test_cpu_utilization_from_two_ticks_is_the_declared_share(busy):
    busy.tick()
    busy.tick(5.0)  # t 0-5 s at 0.5
    assert rates.cpu_utilization(busy.sampler.window) == pytest.approx(0.5, abs=1e-3)
    busy.tick(5.0)  # t 5-10 s at 0.9
    assert rates.cpu_utilization(busy.sampler.window, seconds=5) == pytest.approx(0.9, abs=1e-3)
    assert rates.cpu_utilization(busy.sampler.window, seconds=10) == pytest.approx(0.7, abs=1e-3)
    cpu = busy.sampler.window[-1].data("cpu")
    assert cpu.logical_cpus == 8


def test_iowait_share_is_its_own_mode(busy):
    a = busy.tick()
    b = busy.tick(4.0)
    total = 8 * 4.0
    assert rate(a, b, lambda s: s.data("cpu").times.iowait, total) == pytest.approx(0.05, abs=1e-3)


def test_psi_avg10_as_declared_totals_accumulate_and_avg60_follows_or_is_declared(busy):
    a = busy.tick()
    b = busy.tick(10.0)
    p = b.data("cpu").pressure
    assert p["cpu"].some.avg10 == pytest.approx(0.45)
    assert p["cpu"].full.avg10 == 0.0  # the kernel writes zeros for cpu full at system level
    assert p["memory"].full.avg10 == pytest.approx(0.25)
    assert p["io"].some.avg60 == pytest.approx(0.5)  # declared
    assert p["io"].full.avg10 == pytest.approx(0.3)  # undeclared full: half of some
    stalled = rate(a, b, lambda s: s.data("cpu").pressure["cpu"].some.total_seconds, 10.0)
    assert stalled == pytest.approx(0.45, abs=1e-4)


def test_psi_avg60_is_an_exponential_average_of_a_changing_avg10():
    host = Host(GPUS + "host:\n  pressure:\n    cpu: {some: {steps: [[0s, 0.0], [1s, 0.6]]}}\n", names=("cpu",))
    try:
        host.tick()
        first = host.tick(60.0).data("cpu").pressure["cpu"].some
        assert first.avg10 == pytest.approx(0.6)
        assert 0.3 < first.avg60 < 0.45  # 1 - e^-1 of the way after one time constant
        assert first.avg300 < first.avg60
        later = host.tick(600.0).data("cpu").pressure["cpu"].some
        assert later.avg60 == pytest.approx(0.6, abs=1e-3)
    finally:
        host.close()


def test_memory_available_and_major_fault_rate(busy):
    a = busy.tick()
    b = busy.tick(2.0)
    m = b.data("memory")
    assert m.total_bytes == 64 * 2**30
    assert m.available_bytes == pytest.approx(1.28 * 2**30, abs=1024)
    assert m.available_bytes / m.total_bytes == pytest.approx(0.02, abs=1e-4)
    assert m.cached_bytes == 512 * 2**20
    assert rate(a, b, lambda s: s.data("memory").major_faults_total, 2.0) == pytest.approx(800, abs=1)


def test_disk_busy_ratio_queue_depth_and_throughput_from_counter_deltas(busy):
    a = busy.tick()
    b = busy.tick(10.0)
    (da,), (db,) = a.data("disk").devices, b.data("disk").devices
    assert db.device == "nvme0n1"
    assert (db.io_time_seconds - da.io_time_seconds) / 10 == pytest.approx(0.98, abs=1e-3)
    assert (db.weighted_io_time_seconds - da.weighted_io_time_seconds) / 10 == pytest.approx(24, abs=1e-2)
    assert (db.read_bytes - da.read_bytes) / 10 == pytest.approx(2**30, rel=1e-6)
    assert db.in_flight == 24


def test_network_throughput_against_link_speed(busy):
    a = busy.tick()
    b = busy.tick(10.0)
    na = {d.device: d for d in a.data("net").devices}
    nb = {d.device: d for d in b.data("net").devices}
    assert sorted(nb) == ["eth0", "eth1"]  # lo is written too, and dropped by the default filter
    rx = (nb["eth0"].receive_bytes - na["eth0"].receive_bytes) / 10
    assert nb["eth0"].speed_bytes_per_second == 3_125_000_000
    assert rx / nb["eth0"].speed_bytes_per_second == pytest.approx(0.95, abs=1e-6)
    assert nb["eth1"].speed_bytes_per_second is None  # no speed declared: sysfs says -1


def test_shm_comes_from_the_statvfs_stand_in_and_undeclared_mounts_are_missing():
    host = Host(BUSY_HOST, names=())
    try:
        registry = load_all()
        paths = host.scenario.host_paths("shm")
        shm = registry["shm"](SourceContext(paths=paths, scenario=host.scenario,
                                            settings={"mountpoints": ["/dev/shm", "/run/shm"]})).collect()
        (mount,) = shm.mounts
        assert (mount.mountpoint, mount.fstype) == ("/dev/shm", "tmpfs")
        assert mount.used_bytes / mount.size_bytes == pytest.approx(63 / 64)
        assert mount.available_bytes == 1 * 2**20
        assert shm.missing == ("/run/shm",)
    finally:
        host.close()


def test_an_empty_host_section_is_a_calm_host_with_defaults():
    host = Host(GPUS + "host: {}\n")
    try:
        host.tick()
        s = host.tick(5.0)
        assert rates.cpu_utilization(host.sampler.window) == pytest.approx(0.10, abs=1e-3)
        assert s.data("cpu").pressure["cpu"].some.avg10 == pytest.approx(0.01)
        assert s.data("memory").available_bytes == int(0.75 * 256 * 2**30)
        assert [d.device for d in s.data("disk").devices] == ["nvme0n1"]
        assert [(d.device, d.speed_bytes_per_second) for d in s.data("net").devices] == [("eth0", 3_125_000_000)]
        assert [m.mountpoint for m in s.data("shm").mounts] == ["/dev/shm"]
    finally:
        host.close()


def test_noise_and_steps_integrate_exactly_over_whole_seconds():
    host = Host(GPUS + "seed: 5\nhost:\n  cpu: {logical_cpus: 4, utilization: {value: 0.5, noise: 0.2}}\n",
                names=("cpu",))
    try:
        host.tick()
        host.tick(7.0)
        expected = sum(host.scenario.host.utilization.at(t + 0.5) for t in range(7)) / 7
        assert rates.cpu_utilization(host.sampler.window) == pytest.approx(expected, abs=1e-3)
    finally:
        host.close()


def test_only_host_collectors_get_the_synthetic_tree_and_stop_removes_it(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(BUSY_HOST)
    scenario = load_scenario(path)
    config = load_config(None)
    collectors = {c.name: c for c in build_collectors(config, Options(simulate=str(path)), scenario)}
    tree = scenario.host_paths("cpu")
    synthetic = {"cpu", "memory", "disk", "net", "infiniband", "shm", "processes", "identity"}
    for name in synthetic:
        assert collectors[name].ctx.paths == tree
    for name in set(collectors) - synthetic:  # nvml (its driver stand-in), serving (HTTP), agent (itself)
        assert collectors[name].ctx.paths == Options().paths
        assert scenario.host_paths(name) is None
    sampler = Sampler(render=render_exposition, collectors=list(collectors.values()), before_tick=scenario.update_host)
    sampler.scenario_object = scenario
    assert (tree.procfs / "stat").is_file()
    sampler.stop()
    assert not tree.procfs.exists()


def test_a_scenario_without_host_reads_the_real_host():
    scenario = parse_scenario(GPUS)
    assert scenario.host is None and scenario.host_paths("cpu") is None and scenario.host_statvfs("/dev/shm") is None


@pytest.mark.parametrize(
    ("situation", "host", "message"),
    [
        ("an unknown key", "  cpus: 4\n", r"test.yaml:\d+:3: host.cpus: unknown key"),
        ("bytes for a link speed", "  network: [{name: eth0, speed: 25GB}]\n",
         r"host.network\[0\].speed: invalid link speed '25GB'"),
        ("a utilization above 1", "  cpu: {utilization: 1.5}\n", r"host.cpu.utilization: expected a ratio"),
        ("two disks with one name", "  disks: [{name: sda}, {name: sda}]\n", r"host.disks: names must be unique"),
        ("a relative shm mountpoint", "  shm: [{mountpoint: dev/shm, size: 1GiB}]\n",
         r"host.shm\[0\].mountpoint: expected an absolute path"),
        ("a PSI line without avg10", "  pressure: {io: {some: {avg60: 0.2}}}\n",
         r"host.pressure.io.some.avg10: is required"),
        ("a device name the kernel could not use", "  disks: [{name: 'my disk'}]\n", r"not a device name"),
    ],
)
def test_bad_host_sections_fail_with_position_and_path(situation, host, message):
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(GPUS + "host:\n" + host, "test.yaml")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("25Gbit", 3_125_000_000), ("100Gbps", 12_500_000_000), ("10000Mbit/s", 1_250_000_000), ("1Gb", 125_000_000),
     (None, None)],
)
def test_link_speeds(text, expected):
    assert parse_link_speed(text) == expected


def test_every_builtin_scenario_loads_and_every_resource_has_one():
    names = list_scenarios()
    resources = ("gpu_compute", "gpu_memory", "cpu", "host_memory", "shared_memory", "disk_io", "pcie",
                 "gpu_thermal", "gpu_power", "network")
    for resource in resources:
        assert f"bottleneck-{resource}" in names
    assert "healthy" in names
    for name in names:
        scenario = load_scenario(name)
        if name.startswith("bottleneck-") or name == "healthy":
            assert scenario.description and scenario.host is not None
            assert isinstance(scenario.profiles, list) and scenario.profiles, name


@pytest.mark.parametrize("name", ["healthy"] + [f"bottleneck-{r}" for r in (
    "gpu_compute", "gpu_memory", "cpu", "host_memory", "shared_memory", "disk_io", "pcie", "gpu_thermal",
    "gpu_power", "network")])
def test_builtin_scenario_hosts_are_readable_by_the_real_collectors(name):
    scenario = load_scenario(name)
    host = Host.__new__(Host)
    host.scenario, host.clock = scenario, ManualClock()
    scenario.synthetic_host(clock=host.clock)
    registry = load_all()
    collectors = [registry[n](SourceContext(paths=scenario.host_paths(n), scenario=scenario))
                  for n in ("cpu", "memory", "disk", "net", "shm")]
    host.sampler = Sampler(render=render_exposition, collectors=collectors, collector_timeout=5.0, clock=host.clock, before_tick=scenario.update_host)
    host.sampler.scenario_object = scenario
    try:
        host.tick()
        sample = host.tick(10.0)
        assert all(r.ok for r in sample.sources.values()), {n: r.error for n, r in sample.sources.items()}
    finally:
        host.close()


def test_builtin_scenario_profiles_are_valid_workload_profiles():
    from headroom.workload.profiles import profile_from_dict

    for name in list_scenarios():
        for raw in load_scenario(name).profiles or ():
            profile_from_dict(raw)  # raises ProfileErrors with every problem


def _host_headline(name: str):
    """Host signals of a built-in scenario over 10 s, read through the real collectors."""
    scenario = load_scenario(name)
    clock = ManualClock()
    scenario.synthetic_host(clock=clock)
    registry = load_all()
    got = {}
    collectors = {n: registry[n](SourceContext(paths=scenario.host_paths(n), scenario=scenario))
                  for n in ("cpu", "memory", "disk", "net", "shm")}
    try:
        a = {n: c.collect() for n, c in collectors.items()}
        clock.advance(10.0)
        scenario.update_host()
        b = {n: c.collect() for n, c in collectors.items()}
        ta, tb = a["cpu"].times.modes(), b["cpu"].times.modes()
        total = sum(tb[k] - ta[k] for k in tb if k not in ("guest", "guest_nice"))
        got["cpu"] = 1 - (tb["idle"] - ta["idle"] + tb["iowait"] - ta["iowait"]) / total
        got["psi_cpu"] = b["cpu"].pressure["cpu"].some.avg10
        got["psi_io"] = b["cpu"].pressure["io"].some.avg10
        got["psi_memory_full"] = b["cpu"].pressure["memory"].full.avg10
        got["mem_available"] = b["memory"].available_bytes / b["memory"].total_bytes
        got["disk_busy"] = max((d2.io_time_seconds - d1.io_time_seconds) / 10
                               for d1, d2 in zip(a["disk"].devices, b["disk"].devices, strict=True))
        got["net"] = max((n2.receive_bytes - n1.receive_bytes) / 10 / n2.speed_bytes_per_second
                         for n1, n2 in zip(a["net"].devices, b["net"].devices, strict=True) if n2.speed_bytes_per_second)
        got["shm"] = max(m.used_bytes / m.size_bytes for m in b["shm"].mounts)
    finally:
        scenario.close()
    return got


CALM = {"cpu": (0, 0.4), "psi_cpu": (0, 0.06), "psi_io": (0, 0.05), "psi_memory_full": (0, 0.02),
        "mem_available": (0.3, 1), "disk_busy": (0, 0.4), "net": (0, 0.2), "shm": (0, 0.2)}


@pytest.mark.parametrize(
    ("name", "limiting"),
    [
        ("healthy", {}),
        ("bottleneck-gpu_compute", {}),
        ("bottleneck-gpu_memory", {}),
        ("bottleneck-gpu_thermal", {}),
        ("bottleneck-gpu_power", {}),
        ("bottleneck-pcie", {}),
        ("bottleneck-cpu", {"cpu": (0.95, 1), "psi_cpu": (0.35, 0.55), "disk_busy": (0, 0.4)}),
        ("bottleneck-host_memory", {"mem_available": (0.01, 0.03), "psi_memory_full": (0.2, 0.3),
                                    "psi_io": (0.05, 0.2), "cpu": (0.25, 0.45)}),
        ("bottleneck-shared_memory", {"shm": (0.98, 1)}),
        ("bottleneck-disk_io", {"disk_busy": (0.95, 1), "psi_io": (0.5, 0.7)}),
        ("bottleneck-network", {"net": (0.9, 0.99)}),
    ],
)
def test_builtin_scenario_hosts_limit_only_where_they_claim(name, limiting):
    got = _host_headline(name)
    for signal, (low, high) in {**CALM, **limiting}.items():
        assert low <= got[signal] <= high, f"{name}: {signal} = {got[signal]:.3f}, expected {low}-{high}"
