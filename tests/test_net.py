"""The net collector and its parsers: /proc/net/dev and /sys/class/net/<dev>/speed on fixture trees."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from headroom.samples import NetSample
from headroom.sources import REGISTRY, CollectorError, Paths, SourceContext, load_all, procfs
from headroom.sources.net import NetCollector

FIXTURES = Path(__file__).parent / "fixtures" / "proc"
MODERN = FIXTURES / "modern"
OLD = FIXTURES / "old"


def ctx(procfs_root: Path = MODERN, sysfs: Path = MODERN / "sys", **settings) -> SourceContext:
    return SourceContext(paths=Paths(procfs=procfs_root, sysfs=sysfs), settings=settings)


def test_net_is_registered_and_on_by_default():
    load_all()
    assert REGISTRY["net"] is NetCollector and NetCollector.default_enabled is True


# ------------------------------------------------------------------------------------------- parsing
def test_net_dev_modern_fixture_lists_every_interface_with_its_counters():
    devices = procfs.parse_net_dev((MODERN / "net" / "dev").read_text())
    assert [d.device for d in devices] == ["lo", "enp65s0f0", "enp65s0f1", "ib0", "docker0", "veth1a2b3c4", "wg0"]
    eth = devices[1]
    assert (eth.receive_bytes, eth.receive_packets, eth.receive_errors, eth.receive_drops) == (
        8123456789012, 6123456789, 3, 17)
    assert (eth.transmit_bytes, eth.transmit_packets, eth.transmit_errors, eth.transmit_drops) == (
        4123456789012, 3123456789, 0, 2)
    assert all(d.speed_bytes_per_second is None for d in devices)  # the parser knows nothing of sysfs


def test_net_dev_old_kernel_writes_the_counter_right_after_the_colon():
    eth = procfs.parse_net_dev((OLD / "net" / "dev").read_text())[1]
    assert (eth.device, eth.receive_bytes, eth.receive_drops, eth.transmit_bytes) == ("eth0", 4294967295, 2, 98765432)


@pytest.mark.parametrize(
    ("situation", "text", "message"),
    [
        ("a line cut short", "eth0: 1 2 3\n", "expected 'name: 16 counters'"),
        ("a counter that is not a number", "eth0: " + " ".join(["1"] * 15 + ["x"]) + "\n", "non-integer counter"),
        ("no interface name", ": " + " ".join(["1"] * 16) + "\n", "expected 'name: 16 counters'"),
    ],
)
def test_net_dev_rejects_text_the_kernel_does_not_write(situation, text, message):
    with pytest.raises(ValueError, match=message):
        procfs.parse_net_dev(text)


@pytest.mark.parametrize(
    ("situation", "text", "expected"),
    [
        ("25 Gbit/s port", "25000\n", 3_125_000_000),
        ("1 Gbit/s port", "1000", 125_000_000),
        ("200 Gbit/s InfiniBand", "200000\n", 25_000_000_000),
        ("virtual interface: SPEED_UNKNOWN", "-1\n", None),
        ("SPEED_UNKNOWN printed unsigned by an old driver", "4294967295\n", None),
        ("no speed negotiated", "0\n", None),
    ],
)
def test_net_speed_megabits_become_bytes_per_second(situation, text, expected):
    assert procfs.parse_net_speed(text) == expected


def test_net_speed_rejects_garbage_and_the_reader_calls_it_unknown(tmp_path):
    with pytest.raises(ValueError, match="expected megabits per second"):
        procfs.parse_net_speed("fast\n")
    (tmp_path / "class" / "net" / "eth0").mkdir(parents=True)
    (tmp_path / "class" / "net" / "eth0" / "speed").write_text("fast\n")
    assert procfs.read_net_speed(tmp_path, "eth0") is None
    assert procfs.read_net_speed(tmp_path, "missing0") is None


# ----------------------------------------------------------------------------------------- collector
def test_collector_drops_loopback_bridges_and_veths_by_default_and_reads_speeds():
    s = NetCollector(ctx()).collect()
    assert isinstance(s, NetSample)
    speeds = {d.device: d.speed_bytes_per_second for d in s.devices}
    assert speeds == {"enp65s0f0": 3_125_000_000, "enp65s0f1": None, "ib0": 25_000_000_000, "wg0": None}


@pytest.mark.parametrize(
    ("situation", "settings", "kept"),
    [
        ("empty exclude keeps everything", {"device_exclude": ""},
         ["lo", "enp65s0f0", "enp65s0f1", "ib0", "docker0", "veth1a2b3c4", "wg0"]),
        ("include alone replaces the default exclude", {"device_include": "^(lo|ib)"}, ["lo", "ib0"]),
        ("include and explicit exclude combine", {"device_include": "^enp", "device_exclude": "f1$"}, ["enp65s0f0"]),
    ],
)
def test_collector_filters(situation, settings, kept):
    assert [d.device for d in NetCollector(ctx(**settings)).collect().devices] == kept


def test_collector_without_sysfs_reports_speeds_unknown(tmp_path):
    s = NetCollector(ctx(sysfs=tmp_path)).collect()
    assert s.devices and all(d.speed_bytes_per_second is None for d in s.devices)


def test_collector_fails_clearly_without_net_dev(tmp_path):
    with pytest.raises(CollectorError, match=r"cannot read .*net/dev"):
        NetCollector(ctx(procfs_root=tmp_path)).collect()


def test_collector_fails_clearly_on_a_broken_net_dev(tmp_path):
    root = tmp_path / "proc"
    shutil.copytree(MODERN / "net", root / "net")
    (root / "net" / "dev").write_text("eth0: 1 2\n")
    with pytest.raises(CollectorError, match=r"cannot parse .*net/dev: line 1"):
        NetCollector(ctx(procfs_root=root)).collect()


def test_bad_regex_setting_is_a_clear_error():
    with pytest.raises(CollectorError, match=r"collectors.net.device_exclude: invalid regex"):
        NetCollector(ctx(device_exclude="("))


def test_collector_reads_the_real_proc_net_dev():
    s = NetCollector(SourceContext(settings={"device_exclude": ""})).collect()
    assert "lo" in [d.device for d in s.devices]


def test_an_interface_whose_counters_did_not_move_is_the_previous_ticks_object(tmp_path):
    """Idle interfaces are kept once in the window, not once per sample; one that moved is read anew, and the
    samples equal what a collector without a past reads."""
    root = tmp_path / "proc"
    shutil.copytree(MODERN, root, symlinks=True)
    collector = NetCollector(ctx(root, MODERN / "sys"))
    first = collector.collect()
    second = collector.collect()
    assert second.devices and all(a is b for a, b in zip(first.devices, second.devices, strict=True))
    dev = root / "net" / "dev"
    dev.write_text(dev.read_text().replace("8123456789012", "8123456799012"))  # enp65s0f0 received 10 kB
    third = collector.collect()
    moved = {d.device for a, d in zip(second.devices, third.devices, strict=True) if a is not d}
    assert moved == {"enp65s0f0"}
    assert third == NetCollector(ctx(root, MODERN / "sys")).collect()
    assert second == first  # the earlier sample is as it was
