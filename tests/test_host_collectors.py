"""The cpu, memory, shm and disk collectors on fixture host trees, a real tmpfs and the real /proc."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from headroom.samples import CpuSample, DiskSample, MemorySample, ShmSample
from headroom.sources import CollectorError, Paths, SourceContext
from headroom.sources.cpu import CpuCollector
from headroom.sources.disk import DiskCollector
from headroom.sources.memory import MemoryCollector
from headroom.sources.shm import ShmCollector

FIXTURES = Path(__file__).parent / "fixtures" / "proc"
MODERN = FIXTURES / "modern"
OLD = FIXTURES / "old"


def ctx(procfs: Path = MODERN, rootfs: Path = Path("/"), **settings) -> SourceContext:
    return SourceContext(paths=Paths(procfs=procfs, rootfs=rootfs), settings=settings)


def test_registered_names_and_defaults():
    from headroom.sources import REGISTRY

    for name, cls in [("cpu", CpuCollector), ("memory", MemoryCollector), ("shm", ShmCollector),
                      ("disk", DiskCollector)]:
        assert REGISTRY[name] is cls
        assert cls.default_enabled is True


# --------------------------------------------------------------------------------------------- cpu
def test_cpu_on_a_modern_host_has_psi_for_three_resources():
    s = CpuCollector(ctx()).collect()
    assert isinstance(s, CpuSample)
    assert s.logical_cpus == 16
    assert (s.load1, s.load5, s.load15) == (7.52, 6.98, 6.41)
    assert (s.procs_running, s.procs_blocked) == (5, 1)
    assert s.times.steal is not None and s.times.guest_nice is not None
    assert sorted(s.pressure) == ["cpu", "io", "memory"]
    assert s.pressure["memory"].full is not None
    assert s.pressure["memory"].full.avg10 == pytest.approx(0.001)


def test_cpu_on_an_old_host_has_no_psi_and_no_steal():
    s = CpuCollector(ctx(OLD)).collect()
    assert s.logical_cpus == 4
    assert dict(s.pressure) == {}
    assert s.times.iowait is not None and s.times.steal is None


def test_cpu_unreadable_psi_degrades_to_absent_and_logs_once(tmp_path):
    root = tmp_path / "proc"
    shutil.copytree(MODERN, root)
    (root / "pressure" / "io").write_text("some garbage\n")
    collector = CpuCollector(ctx(root))
    with capture_logs() as logs:
        first = collector.collect()
        second = collector.collect()
        (root / "pressure" / "io").write_text((MODERN / "pressure" / "io").read_text())
        third = collector.collect()
    assert dict(first.pressure) == {} and dict(second.pressure) == {}
    assert sorted(third.pressure) == ["cpu", "io", "memory"]
    assert [e["event"] for e in logs] == ["pressure_unreadable", "pressure_readable_again"]
    assert "cannot parse" in logs[0]["error"]


def test_cpu_values_that_did_not_change_are_the_previous_ticks_objects(tmp_path):
    """Load and PSI averages move every few seconds: an unchanged one is kept once in the window, a changed one
    is the new value, and the previous sample is left as it was."""
    root = tmp_path / "proc"
    shutil.copytree(MODERN, root)
    collector = CpuCollector(ctx(root))
    first = collector.collect()
    second = collector.collect()
    assert second.pressure["memory"] is first.pressure["memory"] and second.load1 is first.load1
    memory = (root / "pressure" / "memory").read_text()
    (root / "pressure" / "memory").write_text(memory.replace("total=", "total=9", 1))  # "some" stalled longer
    third = collector.collect()
    assert third.pressure["memory"].some.total_seconds != second.pressure["memory"].some.total_seconds
    assert third.pressure["memory"].some.avg10 is second.pressure["memory"].some.avg10
    assert third.pressure["memory"].full is second.pressure["memory"].full
    assert third.pressure["cpu"] is first.pressure["cpu"]
    assert second.pressure["memory"] == first.pressure["memory"]  # not changed by the later tick
    assert third == CpuCollector(ctx(root)).collect()  # the same values a collector without a past reads


def test_disk_and_memory_values_that_did_not_move_are_the_previous_ticks_objects(tmp_path):
    root = tmp_path / "proc"
    shutil.copytree(MODERN, root)
    disk, memory = DiskCollector(ctx(root)), MemoryCollector(ctx(root))
    d1, m1 = disk.collect(), memory.collect()
    d2, m2 = disk.collect(), memory.collect()
    assert d2.devices and all(a is b for a, b in zip(d1.devices, d2.devices, strict=True))
    assert m2 is m1  # nothing in meminfo or vmstat changed
    meminfo = (root / "meminfo").read_text()
    (root / "meminfo").write_text(meminfo.replace("MemFree:        112233440", "MemFree:        112233441"))
    m3 = memory.collect()
    assert m3.free_bytes == m1.free_bytes + 1024 and m3.total_bytes is m1.total_bytes
    assert m3 == MemoryCollector(ctx(root)).collect() and m2 == m1
    assert disk.collect() == DiskCollector(ctx(root)).collect()


# ------------------------------------------------------------------------------------------ memory
def test_memory_modern_with_major_faults():
    m = MemoryCollector(ctx()).collect()
    assert isinstance(m, MemorySample)
    assert m.total_bytes == 263855104 * 1024
    assert m.available_bytes == 201456780 * 1024
    assert m.major_faults_total == 123456


def test_memory_old_kernel_without_mem_available():
    m = MemoryCollector(ctx(OLD)).collect()
    assert m.available_bytes is None
    assert m.major_faults_total == 4321


def test_memory_without_vmstat_keeps_going_with_unknown_major_faults(tmp_path):
    shutil.copy(MODERN / "meminfo", tmp_path / "meminfo")
    m = MemoryCollector(ctx(tmp_path)).collect()
    assert m.total_bytes == 263855104 * 1024
    assert m.major_faults_total is None


def test_memory_reads_major_faults_alone_and_says_which_line_is_garbled(tmp_path):
    shutil.copy(MODERN / "meminfo", tmp_path / "meminfo")
    (tmp_path / "vmstat").write_text("nr_free_pages 12\nworkingset x y z\npgmajfault 77\n")
    collector = MemoryCollector(ctx(tmp_path))
    assert collector.collect().major_faults_total == 77  # a line it does not read is not its concern
    (tmp_path / "vmstat").write_text("nr_free_pages 12\npgmajfault lots\n")
    with capture_logs() as logs:
        assert collector.collect().major_faults_total is None
    assert [(e["event"], e["error"]) for e in logs] == [
        ("vmstat_unreadable", f"cannot parse {tmp_path}/vmstat: line 2: pgmajfault is not an integer: 'lots'")]
    (tmp_path / "vmstat").write_text("nr_free_pages 12\n")
    assert collector.collect().major_faults_total is None  # no such counter: unknown


# -------------------------------------------------------------------------------------------- disk
def test_disk_default_filter_keeps_the_two_whole_disks():
    s = DiskCollector(ctx()).collect()
    assert isinstance(s, DiskSample)
    assert [d.device for d in s.devices] == ["nvme0n1", "sda"]


def test_disk_old_kernel_keeps_device_mapper_and_has_no_discards():
    s = DiskCollector(ctx(OLD)).collect()
    assert [d.device for d in s.devices] == ["sda", "dm-0"]
    assert all(d.discards_completed is None for d in s.devices)


@pytest.mark.parametrize(
    ("situation", "settings", "devices"),
    [
        ("custom exclude replaces the default", {"device_exclude": "^loop"},
         ["nvme0n1", "nvme0n1p1", "nvme0n1p2", "sda", "sda1", "sda2", "sr0"]),
        ("include alone keeps only matches, partitions too", {"device_include": "^sda"}, ["sda", "sda1", "sda2"]),
        ("include and exclude together", {"device_include": "^sda", "device_exclude": r"\d$"}, ["sda"]),
        ("empty exclude keeps everything", {"device_exclude": ""}, None),
    ],
)
def test_disk_filter_settings(situation, settings, devices):
    s = DiskCollector(ctx(**settings)).collect()
    all_names = [line.split()[2] for line in (MODERN / "diskstats").read_text().splitlines()]
    assert [d.device for d in s.devices] == (all_names if devices is None else devices)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"device_exclude": "(["}, "collectors.disk.device_exclude: invalid regex '(['"),
        ({"device_include": 3}, "collectors.disk.device_include: expected a regex string, got 3"),
    ],
)
def test_disk_bad_settings_are_a_clear_error(settings, message):
    with pytest.raises(CollectorError, match=rf"^{re.escape(message)}"):
        DiskCollector(ctx(**settings))


# --------------------------------------------------------------------------------- missing / broken
@pytest.mark.parametrize(
    ("collector", "file"),
    [(CpuCollector, "stat"), (CpuCollector, "loadavg"), (MemoryCollector, "meminfo"), (DiskCollector, "diskstats")],
)
def test_collector_error_when_its_main_file_is_missing(tmp_path, collector, file):
    for name in ("stat", "loadavg", "meminfo", "diskstats"):
        if name != file:
            shutil.copy(MODERN / name, tmp_path / name)
    with pytest.raises(CollectorError) as caught:
        collector(ctx(tmp_path)).collect()
    assert str(caught.value) == f"cannot read {tmp_path / file}: No such file or directory"


@pytest.mark.parametrize(
    ("collector", "file", "content", "detail"),
    [
        (CpuCollector, "stat", "intr 1 2 3\n", 'no aggregate "cpu" line'),
        (CpuCollector, "loadavg", "\n", "expected three load averages, got ''"),
        (MemoryCollector, "meminfo", "MemFree: 1 kB\n", "no MemTotal"),
        (DiskCollector, "diskstats", "8 0 sda 1 2\n", "line 1: 5 fields, 14, 18 or 20 expected"),
    ],
)
def test_collector_error_when_its_main_file_is_garbage(tmp_path, collector, file, content, detail):
    for name in ("stat", "loadavg", "meminfo", "diskstats"):
        shutil.copy(MODERN / name, tmp_path / name)
    (tmp_path / file).write_text(content)
    with pytest.raises(CollectorError) as caught:
        collector(ctx(tmp_path)).collect()
    assert str(caught.value) == f"cannot parse {tmp_path / file}: {detail}"


# --------------------------------------------------------------------------------------------- shm
def test_shm_fixture_table_gives_tmpfs_and_the_label_is_the_host_path(tmp_path):
    (tmp_path / "dev" / "shm").mkdir(parents=True)
    s = ShmCollector(ctx(MODERN, rootfs=tmp_path)).collect()
    assert isinstance(s, ShmSample)
    assert s.missing == ()
    (usage,) = s.mounts
    assert (usage.mountpoint, usage.fstype) == ("/dev/shm", "tmpfs")
    st = os.statvfs(tmp_path / "dev" / "shm")
    assert usage.size_bytes == st.f_blocks * st.f_frsize > 0
    assert 0 <= usage.available_bytes <= usage.size_bytes - usage.used_bytes


def test_shm_old_host_uses_proc_mounts_and_unknown_for_dirs_not_in_the_table(tmp_path):
    (tmp_path / "dev" / "shm").mkdir(parents=True)
    (tmp_path / "scratch").mkdir()
    s = ShmCollector(ctx(OLD, rootfs=tmp_path, mountpoints=["/dev/shm", "/scratch"])).collect()
    assert [(m.mountpoint, m.fstype) for m in s.mounts] == [("/dev/shm", "tmpfs"), ("/scratch", "unknown")]


def test_shm_missing_mountpoint_is_reported_not_raised_and_logged_on_change(tmp_path):
    (tmp_path / "dev" / "shm").mkdir(parents=True)
    collector = ShmCollector(ctx(MODERN, rootfs=tmp_path, mountpoints=["/dev/shm", "/run/shm"]))
    with capture_logs() as logs:
        first = collector.collect()
        second = collector.collect()
        (tmp_path / "run" / "shm").mkdir(parents=True)
        third = collector.collect()
    assert first.missing == second.missing == ("/run/shm",)
    assert [m.mountpoint for m in first.mounts] == ["/dev/shm"]
    assert third.missing == () and [m.mountpoint for m in third.mounts] == ["/dev/shm", "/run/shm"]
    assert [(e["event"], e["mountpoint"]) for e in logs] == [
        ("shm_mountpoint_missing", "/run/shm"),
        ("shm_mountpoint_found", "/run/shm"),
    ]


def test_shm_follows_a_mount_table_that_changes_between_ticks(tmp_path):
    """The table is parsed again only when its text changed: a change must still show on the next tick."""
    (tmp_path / "dev" / "shm").mkdir(parents=True)
    procfs = tmp_path / "proc"
    (procfs / "self").mkdir(parents=True)
    mounts = procfs / "self" / "mounts"
    mounts.write_text("tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0\n")
    collector = ShmCollector(ctx(procfs, rootfs=tmp_path))
    assert [m.fstype for m in collector.collect().mounts] == ["tmpfs"]
    assert [m.fstype for m in collector.collect().mounts] == ["tmpfs"]
    mounts.write_text("tmpfs /dev/shm tmpfs rw 0 0\nnone /dev/shm ramfs rw 0 0\n")  # ramfs mounted over it
    assert [m.fstype for m in collector.collect().mounts] == ["ramfs"]
    mounts.unlink()
    with capture_logs() as logs:
        assert [m.fstype for m in collector.collect().mounts] == ["unknown"]
    assert [e["event"] for e in logs] == ["mount_table_unreadable"]


def test_shm_without_a_readable_mount_table_still_measures(tmp_path):
    (tmp_path / "dev" / "shm").mkdir(parents=True)
    with capture_logs() as logs:
        s = ShmCollector(ctx(tmp_path / "no-proc", rootfs=tmp_path)).collect()
    assert [(m.mountpoint, m.fstype) for m in s.mounts] == [("/dev/shm", "unknown")]
    assert [e["event"] for e in logs] == ["mount_table_unreadable"]


@pytest.mark.parametrize("value", ["/dev/shm", [""], [1], None])
def test_shm_bad_mountpoints_setting_is_a_clear_error(value):
    with pytest.raises(CollectorError, match=r"collectors\.shm\.mountpoints: expected a list of paths"):
        ShmCollector(ctx(mountpoints=value))


@pytest.fixture
def real_tmpfs(tmp_path):
    """A real 8 MiB tmpfs at <tmp>/dev/shm (we run as root in CI: failing to mount is a failure)."""
    target = tmp_path / "dev" / "shm"
    target.mkdir(parents=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(target)],
                            capture_output=True, text=True)
    assert result.returncode == 0, f"cannot mount tmpfs (tests run as root): {result.stderr.strip()}"
    try:
        yield tmp_path
    finally:
        subprocess.run(["umount", str(target)], check=True)


def test_shm_on_a_real_tmpfs_sees_size_fstype_and_what_is_written(real_tmpfs):
    collector = ShmCollector(ctx(Path("/proc"), rootfs=real_tmpfs))
    (before,) = collector.collect().mounts
    assert (before.mountpoint, before.fstype, before.size_bytes) == ("/dev/shm", "tmpfs", 8 * 1024 * 1024)
    (real_tmpfs / "dev" / "shm" / "batch").write_bytes(b"\1" * (3 * 1024 * 1024))
    (after,) = collector.collect().mounts
    assert after.used_bytes - before.used_bytes == 3 * 1024 * 1024
    assert after.available_bytes == before.available_bytes - 3 * 1024 * 1024


# ------------------------------------------------------------------------------------- real /proc
def test_every_collector_on_this_machines_real_proc():
    real = SourceContext()
    cpu = CpuCollector(real).collect()
    assert cpu.logical_cpus == os.cpu_count()
    assert cpu.times.user > 0 and cpu.times.idle > 0 and cpu.load1 >= 0
    assert cpu.procs_running is not None and cpu.procs_running >= 1
    mem = MemoryCollector(real).collect()
    assert 0 < mem.free_bytes <= mem.total_bytes
    assert mem.available_bytes is not None and 0 < mem.available_bytes <= mem.total_bytes
    assert mem.major_faults_total is not None and mem.major_faults_total >= 0
    shm = ShmCollector(real).collect()
    assert shm.missing == () and shm.mounts[0].mountpoint == "/dev/shm" and shm.mounts[0].size_bytes > 0
    disk = DiskCollector(real).collect()
    assert all(not d.device.startswith("loop") for d in disk.devices)
    assert all(d.read_bytes >= 0 and d.io_time_seconds >= 0 for d in disk.devices)
