"""Faults of --record: a full disk and a read-only one, injected into a running agent on a real tmpfs.

Sampling and serving must go on (/metrics within 1 s), the recorder reports headroom_record_success 0
with a single log event, /healthz says "degraded: record: ...", and writing resumes by itself when the
disk accepts it again.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from conftest import http_get


def metric(body: bytes, name: str) -> float | None:
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def wait(predicate, timeout=15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def scrape(agent) -> bytes:
    t0 = time.monotonic()
    status, _, body = http_get(agent.url + "/metrics", timeout=2)
    assert status == 200 and time.monotonic() - t0 < 1.0
    return body


def _mounts_at(path) -> int:
    return sum(1 for line in Path("/proc/self/mountinfo").read_text().splitlines() if line.split()[4] == str(path))


def _bind_read_only(path) -> None:
    """A read-only bind mount of ``path`` over itself. Two steps (bind, then make the bind read-only); the second is
    refused (EBUSY) when the agent's rotation opened its next file through the new bind in between (a CI run met
    it): the bind is then undone and both steps tried again."""
    for _ in range(5):
        before = _mounts_at(path)
        subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
        r = subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], capture_output=True, text=True)
        if r.returncode == 0:
            return
        if _mounts_at(path) > before:
            subprocess.run(["umount", "-l", str(path)], check=True)  # the writable bind only
    pytest.fail(f"could not make {path} read-only: {r.stderr.strip()}")


def test_full_then_read_only_disk_for_record(tmp_path, agent_factory):
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True)
    try:
        config = tmp_path / "c.yaml"
        config.write_text("agent:\n  sample_interval: 100ms\n")
        agent = agent_factory("--config.file", str(config), "--simulate", "demo", "--record", str(disk / "r.jsonl"),
                              "--record.max-size", "64KiB")  # rotates about every second
        assert wait(lambda: metric(scrape(agent), "headroom_record_success") == 1)

        # 1. the disk fills up
        filler = disk / "filler"
        with open(filler, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        assert wait(lambda: metric(scrape(agent), "headroom_record_success") == 0)
        status, _, body = http_get(agent.url + "/healthz")
        assert status == 200 and b"degraded: record: cannot write" in body and b"No space left on device" in body
        for _ in range(10):  # keeps serving, and keeps sampling (a tick may take over 100 ms on a loaded machine)
            before = metric(scrape(agent), "headroom_samples_total")
            assert wait(lambda before=before: metric(scrape(agent), "headroom_samples_total") > before)
        filler.unlink()
        assert wait(lambda: metric(scrape(agent), "headroom_record_success") == 1)

        # 2. the directory turns read-only (a read-only bind mount over it: the next rotation cannot
        #    rename or create), then writable again (the bind mount goes away)
        _bind_read_only(disk)
        assert wait(lambda: metric(scrape(agent), "headroom_record_success") == 0)
        assert b"Read-only file system" in http_get(agent.url + "/healthz")[2]
        subprocess.run(["umount", str(disk)], check=True)
        assert wait(lambda: metric(scrape(agent), "headroom_record_success") == 1)
        assert b"degraded" not in http_get(agent.url + "/healthz")[2]
        # a few ticks recorded after the recovery (a loaded CI machine stopped the agent after 5 at most)
        recovered = metric(scrape(agent), "headroom_samples_total")
        assert wait(lambda: metric(scrape(agent), "headroom_samples_total") >= recovered + 8, timeout=30.0)

        code, err = agent.stop()
        assert code == 0 and "Traceback" not in err
        events = [json.loads(line)["event"] for line in err.splitlines() if line.startswith("{")]
        assert events.count("record_failing") == 2  # once per fault, not once per tick
        assert events.count("record_recovered") == 2
        # the recording is still a readable trace after the faults
        from headroom.record import read_traces

        rotated = disk / "r.jsonl.1.gz"  # compressed (issue 29); left as r.jsonl.1 when the full disk refused that
        rotated = rotated if rotated.exists() else disk / "r.jsonl.1"
        # readable after the faults: at least two traces (how many the last two files hold depends on how fast
        # ticks came under load; a loaded run had 5)
        assert sum(1 for _ in read_traces([rotated, disk / "r.jsonl"])) >= 2
    finally:
        for _ in range(2):  # the read-only bind (if a step failed) and the tmpfs
            subprocess.run(["umount", "-l", str(disk)], check=False, capture_output=True)
