"""Parsers and readers of headroom.sources.procfs, on fixture trees and on tricky strings."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headroom.sources import procfs
from headroom.sources.procfs import ProcessGone

FIXTURES = Path(__file__).parent / "fixtures" / "proc"
MODERN = FIXTURES / "modern"
OLD = FIXTURES / "old"

ALL_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")


# --------------------------------------------------------------------------------------- /proc/stat
def test_stat_of_a_modern_16_cpu_host_sums_per_cpu_lines_into_the_aggregate():
    text = (MODERN / "stat").read_text()
    info = procfs.parse_stat(text, user_hz=100)
    per_cpu = [line.split() for line in text.splitlines() if re.match(r"cpu\d+ ", line)]
    assert info.logical_cpus == len(per_cpu) == 16
    for index, mode in enumerate(ALL_MODES, start=1):
        assert getattr(info.times, mode) == pytest.approx(sum(int(r[index]) for r in per_cpu) / 100)
    assert (info.procs_running, info.procs_blocked, info.boot_time) == (5, 1, 1767225600)


def test_stat_guest_time_is_kept_as_read_and_is_part_of_user():
    info = procfs.parse_stat((MODERN / "stat").read_text())
    assert info.times.guest == pytest.approx((2003 + 2007) / 100)
    assert info.times.user > info.times.guest


@pytest.mark.parametrize(
    ("situation", "cpu_line", "present"),
    [
        ("linux 2.4: four modes", "cpu 10 20 30 40", 4),
        ("linux 2.6.0: iowait irq softirq, no steal", "cpu 10 20 30 40 50 60 70", 7),
        ("linux 2.6.11: steal, no guest", "cpu 10 20 30 40 50 60 70 80", 8),
        ("linux 2.6.24: guest, no guest_nice", "cpu 10 20 30 40 50 60 70 80 90", 9),
        ("linux 2.6.33+: all ten", "cpu 10 20 30 40 50 60 70 80 90 100", 10),
        ("a future kernel with an eleventh field", "cpu 10 20 30 40 50 60 70 80 90 100 110", 10),
    ],
)
def test_stat_layouts_of_old_kernels_leave_missing_modes_none(situation, cpu_line, present):
    info = procfs.parse_stat(cpu_line + "\ncpu0 " + cpu_line[4:] + "\n", user_hz=100)
    for index, mode in enumerate(ALL_MODES):
        value = getattr(info.times, mode)
        if index < present:
            assert value == pytest.approx((index + 1) * 10 / 100), (situation, mode)
        else:
            assert value is None, (situation, mode)
    assert list(info.times.modes()) == list(ALL_MODES[:present])
    assert info.procs_running is None and info.boot_time is None


def test_stat_converts_ticks_with_the_given_user_hz():
    assert procfs.parse_stat("cpu 250 0 500 1000\n", user_hz=250).times.idle == 4.0


def test_stat_old_fixture_is_the_seven_field_layout_with_four_cpus():
    info = procfs.parse_stat((OLD / "stat").read_text())
    assert info.logical_cpus == 4
    assert info.times.softirq is not None and info.times.steal is None and info.times.guest is None


@pytest.mark.parametrize(
    ("situation", "text", "message"),
    [
        ("empty file", "", 'no aggregate "cpu" line'),
        ("only per-cpu lines", "cpu0 1 2 3 4\n", 'no aggregate "cpu" line'),
        ("too few fields", "cpu 1 2 3\n", "line 1 (cpu): 3 fields, at least 4 expected"),
        ("not a number", "cpu 1 2 x 4\n", "line 1 (cpu)"),
        ("procs_running without a value", "cpu 1 2 3 4\nprocs_running\n", "line 2 (procs_running)"),
    ],
)
def test_stat_rejects_text_the_kernel_does_not_write(situation, text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        procfs.parse_stat(text)


def test_loadavg_fixture_and_garbage():
    assert procfs.parse_loadavg((MODERN / "loadavg").read_text()) == (7.52, 6.98, 6.41)
    with pytest.raises(ValueError, match="expected three load averages"):
        procfs.parse_loadavg("0.5 0.4\n")


# ---------------------------------------------------------------------------------------------- PSI
def test_pressure_percents_become_ratios_and_microseconds_seconds():
    p = procfs.parse_pressure((MODERN / "pressure" / "io").read_text())
    assert (p.some.avg10, p.some.avg60, p.some.avg300) == pytest.approx((0.034, 0.021, 0.0155))
    assert p.some.total_seconds == pytest.approx(733.219004)
    assert p.full is not None and p.full.total_seconds == pytest.approx(611.002117)


def test_pressure_cpu_before_5_13_has_no_full_line():
    p = procfs.parse_pressure("some avg10=100.00 avg60=50.00 avg300=0.00 total=1\n")
    assert p.full is None
    assert (p.some.avg10, p.some.avg60, p.some.total_seconds) == (1.0, 0.5, 1e-6)


@pytest.mark.parametrize(
    ("situation", "text", "message"),
    [
        ("empty file", "", 'no "some" line'),
        ("only full", "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", 'no "some" line'),
        ("total missing", "some avg10=0.00 avg60=0.00 avg300=0.00\n", "bad 'some' line .*KeyError\\('total'\\)"),
        ("not a number", "some avg10=x avg60=0.00 avg300=0.00 total=0\n", "bad 'some' line .*could not convert"),
    ],
)
def test_pressure_rejects_broken_files(situation, text, message):
    with pytest.raises(ValueError, match=message):
        procfs.parse_pressure(text)


def test_read_pressure_modern_host_has_all_three_resources():
    pressure = procfs.read_pressure(MODERN)
    assert sorted(pressure) == ["cpu", "io", "memory"]
    assert pressure["cpu"].some.avg10 == pytest.approx(0.125)


def test_read_pressure_kernel_without_psi_is_empty():
    assert not (OLD / "pressure").exists()
    assert procfs.read_pressure(OLD) == {}


class _FailingPressure(procfs.ProcFile):
    """A PSI file whose read fails with ``err``, as the kernel's would."""

    def __init__(self, path, err: int) -> None:
        super().__init__(path, keep=False)
        self.err = err

    def read(self) -> bytes:
        raise OSError(self.err, os.strerror(self.err), self.path)


def _pressure_failing(err: int) -> dict[str, procfs.ProcFile]:
    return {r: _FailingPressure(MODERN / "pressure" / r, err) for r in procfs.PRESSURE_RESOURCES}


def test_read_pressure_psi_disabled_at_boot_eopnotsupp_counts_as_absent():
    assert procfs.read_pressure_files(_pressure_failing(errno.EOPNOTSUPP)) == {}


def test_read_pressure_other_errors_are_not_hidden():
    with pytest.raises(OSError) as caught:  # noqa: PT011 - its errno is the check, below
        procfs.read_pressure_files(_pressure_failing(errno.EIO))
    assert caught.value.errno == errno.EIO


# ------------------------------------------------------------------------------------- kept files
def test_a_kept_proc_file_is_regenerated_by_every_read_from_offset_0():
    """The real /proc/self/stat through one descriptor: after burning CPU, the next read shows it."""
    f = procfs.ProcFile(f"/proc/{os.getpid()}/stat", keep=True)
    try:
        before = procfs.parse_pid_stat(f.text())
        start = time.process_time()
        while time.process_time() - start < 0.05:
            pass
        after = procfs.parse_pid_stat(f.text())
        fd = f.descriptor
        assert fd is not None and f.text().split()[0] == str(os.getpid())
        assert f.descriptor == fd, "the descriptor is kept between reads"
    finally:
        f.close()
    assert after.utime_seconds + after.stime_seconds >= before.utime_seconds + before.stime_seconds + 0.03


def test_a_kept_file_longer_than_one_read_is_read_whole(tmp_path):
    path = tmp_path / "long"
    text = "".join(f"line {i} {'x' * 50}\n" for i in range(2000))  # 120 KB: many reads of the first chunk size
    path.write_text(text)
    f = procfs.ProcFile(path, keep=True)
    try:
        assert f.text() == text
        path.write_text("short now\n")  # rewritten in place: the same file, read again from offset 0
        assert f.text() == "short now\n"
    finally:
        f.close()


def test_a_failed_read_drops_the_descriptor_and_the_next_read_opens_the_path_again(tmp_path):
    path = tmp_path / "speed"
    path.mkdir()  # opens, but reading it fails (EISDIR), like a sysfs attribute whose device went away
    f = procfs.ProcFile(path, keep=True)
    with pytest.raises(IsADirectoryError):
        f.read()
    assert f.descriptor is None
    path.rmdir()
    path.write_text("25000\n")
    try:
        assert f.text() == "25000\n"
    finally:
        f.close()


def test_a_file_not_kept_is_opened_on_every_read(tmp_path):
    """Fixture trees: a file replaced by another (a new inode) is what the next read sees."""
    path = tmp_path / "loadavg"
    path.write_text("1 2 3 1/100 42\n")
    f = procfs.ProcFile(path, keep=False)
    assert f.text() == "1 2 3 1/100 42\n"
    replacement = tmp_path / "new"
    replacement.write_text("4 5 6 1/100 43\n")
    replacement.replace(path)
    assert f.text() == "4 5 6 1/100 43\n" and f.descriptor is None


# ------------------------------------------------------------------------------------ memory, vmstat
def test_meminfo_modern_is_in_bytes():
    m = procfs.parse_meminfo((MODERN / "meminfo").read_text())
    assert m.total_bytes == 263855104 * 1024
    assert m.available_bytes == 201456780 * 1024
    assert m.free_bytes == 112233440 * 1024
    assert m.shmem_bytes == 12582912 * 1024
    assert m.swap_total_bytes == m.swap_free_bytes == 8388604 * 1024
    assert (m.dirty_bytes, m.writeback_bytes) == (10240 * 1024, 128 * 1024)
    assert m.major_faults_total is None


def test_meminfo_before_3_14_has_no_mem_available():
    m = procfs.parse_meminfo((OLD / "meminfo").read_text())
    assert m.available_bytes is None
    assert m.total_bytes == 8061780 * 1024


def test_meminfo_without_unit_lines_are_counts_not_kilobytes():
    m = procfs.parse_meminfo("MemTotal: 4 kB\nMemFree: 2 kB\nHugePages_Total: 3\n")
    assert (m.total_bytes, m.free_bytes, m.cached_bytes) == (4096, 2048, None)


@pytest.mark.parametrize(
    ("situation", "text", "message"),
    [
        ("no MemTotal", "MemFree: 1 kB\n", "no MemTotal"),
        ("not a number", "MemTotal: lots kB\nMemFree: 1 kB\n", "line 1: MemTotal is not an integer"),
        ("no colon", "MemTotal 1 kB\n", "line 1: expected 'Name: value [kB]'"),
    ],
)
def test_meminfo_rejects_broken_files(situation, text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        procfs.parse_meminfo(text)


def test_vmstat_fixture_and_garbage():
    assert procfs.parse_vmstat((MODERN / "vmstat").read_text())["pgmajfault"] == 123456
    assert procfs.parse_vmstat((OLD / "vmstat").read_text())["pgmajfault"] == 4321
    with pytest.raises(ValueError, match="line 2: pgmajfault is not an integer"):
        procfs.parse_vmstat("pgfault 1\npgmajfault x\n")


@pytest.mark.parametrize("fixture", [MODERN, OLD], ids=["modern", "old"])
def test_vmstat_counter_is_what_the_whole_parse_says(fixture):
    text = (fixture / "vmstat").read_text()
    full = procfs.parse_vmstat(text)
    for name in ("pgmajfault", "pgfault", next(iter(full)), list(full)[-1]):  # first and last lines too
        assert procfs.vmstat_counter(text, name) == full[name]
    assert procfs.vmstat_counter(text, "no_such_counter") is None
    assert procfs.vmstat_counter(text, "pgmaj") is None  # a prefix of a name is not the name


def test_vmstat_counter_garbage():
    with pytest.raises(ValueError, match="line 2: pgmajfault is not an integer: 'x'"):
        procfs.vmstat_counter("pgfault 1\npgmajfault x\n", "pgmajfault")
    with pytest.raises(ValueError, match="line 1: expected 'name value'"):
        procfs.vmstat_counter("pgmajfault 1 2", "pgmajfault")


# --------------------------------------------------------------------------------------- diskstats
LINE_14 = "   8       0 sda 100 2 300 4000 500 6 700 8000 9 10000 11000"
LINE_18 = LINE_14 + " 12 13 14 15000"
LINE_20 = LINE_18 + " 16 17000"


@pytest.mark.parametrize(
    ("situation", "line", "discards"),
    [
        ("before 4.18: 14 fields", LINE_14, None),
        ("4.18: discard counters", LINE_18, (12, 14 * 512)),
        ("5.5+: flush counters", LINE_20, (12, 14 * 512)),
    ],
)
def test_diskstats_layouts(situation, line, discards):
    (d,) = procfs.parse_diskstats(line + "\n")
    assert d.device == "sda"
    assert (d.reads_completed, d.read_bytes) == (100, 300 * 512)
    assert (d.writes_completed, d.written_bytes) == (500, 700 * 512)
    assert d.in_flight == 9
    assert (d.io_time_seconds, d.weighted_io_time_seconds) == (10.0, 11.0)
    assert (d.discards_completed, d.discarded_bytes) == (discards or (None, None))


def test_device_names_are_one_string_for_every_tick():
    """A device's name is the same object in every sample of the window, not a new string per tick."""
    text = (MODERN / "diskstats").read_text()
    first, second = procfs.parse_diskstats(text), procfs.parse_diskstats(text[:-1] + "\n")
    assert [d.device for d in first] == [d.device for d in second]
    assert all(a.device is b.device for a, b in zip(first, second, strict=True))
    net = (MODERN / "net" / "dev").read_text()
    first, second = procfs.parse_net_dev(net), procfs.parse_net_dev(net[:-1] + "\n")
    assert first and all(a.device is b.device for a, b in zip(first, second, strict=True))


def test_diskstats_old_partition_lines_with_seven_fields_are_skipped():
    devices = procfs.parse_diskstats("   8    1 sda1 10 20 30 40\n" + LINE_14 + "\n")
    assert [d.device for d in devices] == ["sda"]


def test_diskstats_rejects_truncated_and_garbage_lines():
    with pytest.raises(ValueError, match="line 1: 10 fields, 14, 18 or 20 expected"):
        procfs.parse_diskstats("8 0 sda 1 2 3 4 5 6 7\n")
    with pytest.raises(ValueError, match=r"line 1 \(sda\): non-integer counter"):
        procfs.parse_diskstats(LINE_14.replace("4000", "x") + "\n")


def test_diskstats_modern_fixture_lists_every_line():
    devices = procfs.parse_diskstats((MODERN / "diskstats").read_text())
    assert len(devices) == len((MODERN / "diskstats").read_text().splitlines()) == 11
    nvme = next(d for d in devices if d.device == "nvme0n1")
    assert nvme.read_bytes == 9823451234 * 512
    assert nvme.io_time_seconds == pytest.approx(9876.543)
    assert nvme.discarded_bytes == 987654321 * 512


@pytest.mark.parametrize(
    ("device", "kept"),
    [
        ("sda", True),
        ("sda1", False),
        ("sdaa", True),
        ("sdaa12", False),
        ("vda", True),
        ("vda2", False),
        ("xvdb", True),
        ("xvdb1", False),
        ("hda1", False),
        ("nvme0n1", True),
        ("nvme0n1p1", False),
        ("nvme12n3p14", False),
        ("mmcblk0", True),
        ("mmcblk0p1", False),
        ("dm-0", True),
        ("dm-12", True),
        ("md0", True),
        ("nbd0", True),
        ("loop0", False),
        ("loop17", False),
        ("ram0", False),
        ("zram0", False),
        ("fd0", False),
        ("sr0", False),
    ],
)
def test_default_disk_filter_keeps_whole_disks_and_drops_the_rest(device, kept):
    assert (re.search(procfs.DEFAULT_DISK_EXCLUDE, device) is None) is kept


# ------------------------------------------------------------------------------------------ mounts
def test_mounts_decode_octal_escapes():
    entries = procfs.parse_mounts((MODERN / "self" / "mounts").read_text())
    by_mountpoint = {e.mountpoint: e for e in entries}
    assert by_mountpoint["/dev/shm"].fstype == "tmpfs"
    assert "size=131927552k" in by_mountpoint["/dev/shm"].options
    assert by_mountpoint["/data/model weights"].device == "/dev/sda1"
    assert "/run/nvidia\tdriver" in by_mountpoint
    assert procfs.parse_mounts(r"a\134b /x\012y ext4 rw 0 0")[0][:2] == ("a\\b", "/x\ny")


def test_mounts_rejects_short_lines():
    with pytest.raises(ValueError, match="line 2"):
        procfs.parse_mounts("tmpfs /dev/shm tmpfs rw 0 0\nbroken /x\n")


def test_read_mounts_falls_back_to_proc_mounts_without_self():
    assert not (OLD / "self").exists()
    assert [e.mountpoint for e in procfs.read_mounts(OLD)][:2] == ["/", "/proc"]


# ------------------------------------------------------------------------------------- per process
def test_pid_stat_vllm_fixture():
    s = procfs.parse_pid_stat((MODERN / "4242" / "stat").read_text(), user_hz=100)
    assert (s.pid, s.comm, s.state, s.ppid) == (4242, "python3", "S", 1)
    assert (s.utime_seconds, s.stime_seconds) == (12345.67, 234.56)
    assert (s.num_threads, s.starttime_ticks, s.rss_pages) == (187, 5123456, 2621440)


@pytest.mark.parametrize(
    "comm",
    ["evil) (S 1 2 3", "a b", "(sd-pam)", "x)", ")", "", "kworker/0:1-events"],
)
def test_pid_stat_comm_with_spaces_and_parentheses_splits_on_the_last_paren(comm):
    text = f"77 ({comm}) D 5 77 77 0 -1 0 0 0 0 0 300 200 0 0 20 0 9 0 4444 1000 55 0 0 0\n"
    s = procfs.parse_pid_stat(text, user_hz=100)
    assert (s.pid, s.comm, s.state, s.ppid, s.num_threads, s.starttime_ticks, s.rss_pages) == (
        77, comm, "D", 5, 9, 4444, 55,
    )
    assert (s.utime_seconds, s.stime_seconds) == (3.0, 2.0)


def test_pid_stat_fixture_with_hostile_comm():
    s = procfs.parse_pid_stat((MODERN / "4300" / "stat").read_text())
    assert (s.comm, s.state, s.ppid) == ("evil) (S 1 2 3", "R", 4242)


@pytest.mark.parametrize(
    ("situation", "text", "message"),
    [("no parentheses", "77 bash S 1", r"no '\(comm\)'"), ("truncated", "77 (bash) S 1 2 3", "4 fields after comm"),
     ("pid not a number", "x (a) " + "1 " * 30, "bad field in /proc/PID/stat")],
)
def test_pid_stat_rejects_broken_lines(situation, text, message):
    with pytest.raises(ValueError, match=message):
        procfs.parse_pid_stat(text)


def test_pid_status_fixture():
    st = procfs.parse_pid_status((MODERN / "4242" / "status").read_text())
    assert (st.name, st.uid, st.threads) == ("python3", 998, 187)
    assert (st.vm_rss_bytes, st.vm_swap_bytes) == (10485760 * 1024, 0)


def test_pid_status_without_vm_lines_like_zombies_and_kernel_threads():
    st = procfs.parse_pid_status((MODERN / "4300" / "status").read_text())
    assert (st.uid, st.threads, st.vm_rss_bytes) == (1000, 4, None)
    with pytest.raises(ValueError, match="Threads"):
        procfs.parse_pid_status("Name:\tx\nUid:\t0\t0\t0\t0\n")


def test_pid_schedstat_is_seconds_ran_and_waited_and_bad_text_is_one_clear_error():
    st = procfs.parse_pid_schedstat("2500000000 750000000 1234\n")
    assert (st.run_seconds, st.wait_seconds) == (2.5, 0.75)
    for bad in ("", "12", "12 x 3"):
        with pytest.raises(ValueError, match="schedstat"):
            procfs.parse_pid_schedstat(bad)
    live = procfs.read_pid_schedstat(Path("/proc"), os.getpid())
    assert live is not None and live.run_seconds > 0  # this process has run


def test_pid_io_fixture_and_missing_field():
    io = procfs.parse_pid_io((MODERN / "4242" / "io").read_text())
    assert io == procfs.PidIo(rchar=29876543210, wchar=1234567890, read_bytes=15032385536, write_bytes=1073741824)
    with pytest.raises(ValueError, match="no write_bytes"):
        procfs.parse_pid_io("rchar: 1\nwchar: 2\nread_bytes: 3\n")


def test_pid_stat_fields_past_rss_are_not_split_and_do_not_matter():
    """Only the fields up to rss are split off: a stat line with more fields after them (newer kernels) or
    just enough parses the same."""
    base = "77 (x y) S 1 77 77 0 -1 4194560 10 0 0 0 250 50 0 0 20 0 3 0 900 1000000 12"
    longer = procfs.parse_pid_stat(base + " " + " ".join(["0"] * 30) + "\n", user_hz=100)
    assert longer == procfs.parse_pid_stat(base + "\n", user_hz=100)
    assert (longer.comm, longer.utime_seconds, longer.num_threads, longer.starttime_ticks, longer.rss_pages) == (
        "x y", 2.5, 3, 900, 12)


@pytest.mark.parametrize(
    ("situation", "data", "argv"),
    [
        ("usual trailing NUL", b"python3\0-m\0vllm\0", ["python3", "-m", "vllm"]),
        ("no trailing NUL (setproctitle)", b"vllm: worker rank 0", ["vllm: worker rank 0"]),
        ("empty argument kept", b"a\0\0b\0", ["a", "", "b"]),
        ("kernel thread or zombie", b"", []),
        ("invalid utf-8 survives", b"\xff\0", ["\udcff"]),
    ],
)
def test_pid_cmdline(situation, data, argv):
    assert procfs.parse_pid_cmdline(data) == argv


def test_pid_cmdline_fixture():
    argv = procfs.parse_pid_cmdline((MODERN / "4242" / "cmdline").read_bytes())
    assert argv[:3] == ["/opt/vllm/bin/python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[-2:] == ["--gpu-memory-utilization", "0.9"]


@pytest.mark.parametrize(
    ("situation", "text", "unified", "controllers"),
    [
        ("cgroup v2 systemd unit", "0::/system.slice/vllm.service\n", "/system.slice/vllm.service", {}),
        ("cgroup v1 docker", "4:memory:/docker/ab\n2:cpu,cpuacct:/docker/ab\n", None,
         {"memory": "/docker/ab", "cpu": "/docker/ab", "cpuacct": "/docker/ab"}),
        ("hybrid", "1:name=systemd:/user.slice\n0::/user.slice/x.scope\n", "/user.slice/x.scope",
         {"name=systemd": "/user.slice"}),
        ("path with a colon", "0::/kubepods/pod:1\n", "/kubepods/pod:1", {}),
    ],
)
def test_pid_cgroup(situation, text, unified, controllers):
    cg = procfs.parse_pid_cgroup(text)
    assert cg.unified == unified
    assert dict(cg.controllers) == controllers


def test_pid_cgroup_rejects_garbage():
    with pytest.raises(ValueError, match="expected 'id:controllers:path'"):
        procfs.parse_pid_cgroup("garbage\n")


def test_pid_readers_on_the_fixture_tree():
    assert procfs.read_pid_stat(MODERN, 4242).comm == "python3"
    assert procfs.read_pid_status(MODERN, 4242).threads == 187
    assert procfs.read_pid_io(MODERN, 4242).read_bytes == 15032385536
    assert procfs.read_pid_cmdline(MODERN, 4300) == []
    assert procfs.read_pid_cgroup(MODERN, 4300).controllers["cpuacct"] == "/docker/3f2a"


@pytest.mark.parametrize(
    "reader",
    [procfs.read_pid_stat, procfs.read_pid_status, procfs.read_pid_io, procfs.read_pid_cmdline,
     procfs.read_pid_cgroup],
)
def test_pid_readers_raise_process_gone_for_a_pid_that_exited(reader):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: /proc/<pid> no longer exists
    with pytest.raises(ProcessGone, match=f"pid {child.pid} is gone"):
        reader(Path("/proc"), child.pid)
    with pytest.raises(ProcessGone):
        reader(MODERN, 999999)


@pytest.mark.parametrize("exc", [ProcessLookupError(errno.ESRCH, "No such process"), OSError(errno.ESRCH, "x")])
def test_pid_reader_process_vanishing_during_the_read_is_process_gone(monkeypatch, exc):
    def fake_open(*args, **kwargs):
        raise exc

    monkeypatch.setattr(os, "open", fake_open)  # the pid readers open with os.open
    with pytest.raises(ProcessGone):
        procfs.read_pid_stat(MODERN, 4242)


def test_pid_reader_other_os_errors_propagate(monkeypatch):
    def fake_open(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "open", fake_open)  # the pid readers open with os.open
    with pytest.raises(OSError, match="Input/output error"):
        procfs.read_pid_io(MODERN, 4242)


def test_pid_reader_permission_denied_is_none_for_a_real_unprivileged_reader():
    """A non-root process may not read /proc/1/io (ptrace access check): the reader says None."""
    assert os.getuid() == 0, "this test drops privileges in a child and needs root to do so"
    pid = os.fork()
    if pid == 0:  # child: become nobody and read pid 1 (root-owned) like the agent's systemd user would
        code = 3
        try:
            os.setgid(65534)
            os.setuid(65534)
            io = procfs.read_pid_io(Path("/proc"), 1)
            stat = procfs.read_pid_stat(Path("/proc"), 1)
            code = 0 if io is None and stat is not None and stat.pid == 1 else 1
        except BaseException:
            code = 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "expected io None (EACCES) and stat readable"


def test_pid_files_longer_than_one_read_are_read_whole_and_argv_up_to_its_limit(tmp_path):
    (tmp_path / "77").mkdir()
    lines = [f"{i}:controller{i}:/kubepods/burstable/pod{'x' * 100}/{i}" for i in range(1, 80)]  # ~10 KB
    (tmp_path / "77" / "cgroup").write_text("\n".join(lines) + "\n0::/system.slice/long.service\n")
    groups = procfs.read_pid_cgroup(tmp_path, 77)
    assert groups.unified == "/system.slice/long.service" and len(groups.controllers) == 79
    argv = [f"--arg{i}={'y' * 90}" for i in range(100)]  # ~10 KB
    (tmp_path / "77" / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    assert procfs.read_pid_cmdline(tmp_path, 77) == argv
    cut = procfs.read_pid_cmdline(tmp_path, 77, limit=5000)
    assert "\0".join(cut).encode() == (b"\0".join(a.encode() for a in argv) + b"\0")[:5000].rstrip(b"\0")


def test_kept_pid_files_read_a_live_process_afresh_and_say_gone_once_it_is_reaped():
    """PidFiles opens a process's stat and io once and reads them again from offset 0: the kernel regenerates
    them (the CPU seconds move while it runs); once the process is reaped its descriptors answer ESRCH
    (ProcessGone), never the files of a process that took the pid afterwards."""
    child = subprocess.Popen([sys.executable, "-c", "import sys\nwhile sys.stdin.read(1): sum(range(300000))"],
                             stdin=subprocess.PIPE)
    files = procfs.PidFiles(Path("/proc"), child.pid)
    try:
        first = files.stat()
        assert first.pid == child.pid and files.io() is not None and files.open_descriptors == 2
        # private: the kept descriptors: that the same ones are read again is what is tested
        opened = files._fds.copy()
        for _ in range(20):  # let it burn some CPU
            child.stdin.write(b"x")
            child.stdin.flush()
        deadline = time.monotonic() + 10
        while (later := files.stat()).utime_seconds + later.stime_seconds <= first.utime_seconds + first.stime_seconds:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        # private: the kept descriptors: that the same ones are read again is what is tested
        assert files._fds == opened  # the same descriptors, read again
        child.stdin.close()
        child.wait()
        with pytest.raises(ProcessGone, match=f"pid {child.pid} is gone"):
            files.stat()
        assert files.open_descriptors == 1  # the failed one is closed; io goes when the collector forgets it
        files.close()
        assert files.open_descriptors == 0
    finally:
        child.kill()
        child.wait()
        files.close()


def test_kept_pid_files_of_a_denied_file_are_none_and_keep_no_descriptor():
    """Without the right to read a file (another user's io), the read is None and nothing stays open."""
    assert os.getuid() == 0, "this test drops privileges in a child and needs root to do so"
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            os.setgid(65534)
            os.setuid(65534)
            files = procfs.PidFiles(Path("/proc"), 1)
            code = 0 if files.io() is None and files.stat().pid == 1 and files.open_descriptors == 1 else 1
        except BaseException:
            code = 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "expected io None (EACCES), stat read and kept"
