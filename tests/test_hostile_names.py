"""A device or mount name that is not UTF-8 affects only that device (issue 11 item 11)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from headroom.exposition.render import render as render_exposition
from headroom.sampler import Sampler
from headroom.sources import Paths, SourceContext
from headroom.sources.disk import DiskCollector
from headroom.sources.net import NetCollector

DISK = "   8       0 {name} 100 0 2000 10 50 0 800 20 0 30 30 0 0 0 0\n"
NET_HEAD = ("Inter-|   Receive                                                |  Transmit\n"
            " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls "
            "carrier compressed\n")
NET = "{name}: 1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0\n"


def _procfs(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    (root / "net").mkdir(parents=True)
    (root / "diskstats").write_bytes(DISK.format(name="sda").encode() + DISK.format(name="sd\udcff").encode(
        "utf-8", "surrogateescape") + DISK.format(name="nvme0n1").encode())
    (root / "net" / "dev").write_bytes(NET_HEAD.encode() + NET.format(name="  eth0").encode()
                                       + NET.format(name="  et\udcfe").encode("utf-8", "surrogateescape"))
    return root


def test_a_non_utf8_disk_name_affects_only_that_disk(tmp_path):
    ctx = SourceContext(paths=Paths(procfs=_procfs(tmp_path), sysfs=tmp_path / "sys"))
    sample = DiskCollector(ctx).collect()
    assert [d.device for d in sample.devices] == ["sda", "sd\\xff", "nvme0n1"]


def test_a_non_utf8_interface_name_affects_only_that_interface(tmp_path):
    ctx = SourceContext(paths=Paths(procfs=_procfs(tmp_path), sysfs=tmp_path / "sys"))
    sample = NetCollector(ctx).collect()
    assert sorted(d.device for d in sample.devices) == ["et\\xfe", "eth0"]


def test_the_exposition_stays_valid_with_such_names(tmp_path):
    ctx = SourceContext(paths=Paths(procfs=_procfs(tmp_path), sysfs=tmp_path / "sys"))
    sampler = Sampler(render=render_exposition, collectors=[DiskCollector(ctx), NetCollector(ctx)], interval=1.0)
    try:
        snap = sampler.tick()
    finally:
        sampler.stop()
    text = snap.exposition.decode("utf-8")
    assert 'headroom_collector_success{collector="disk"} 1' in text
    assert 'headroom_collector_success{collector="net"} 1' in text
    assert re.search(r'device="sd\\\\xff"', text)
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is needed (Debian: prometheus)")
    r = subprocess.run([promtool, "check", "metrics"], input=snap.exposition, capture_output=True, timeout=60)
    assert b"error" not in (r.stdout + r.stderr).lower(), (r.stdout + r.stderr)[-2000:]


def test_a_surrogate_in_a_label_value_is_escaped_not_fatal():
    from headroom.exposition.render.text import _escape  # private: no public name

    assert _escape("/mnt/\udcff") == "/mnt/\\\\udcff"
    assert _escape("plain") == "plain" and _escape("ü") == "ü"
