"""Rootful Podman for the real-component tests (tests/test_real_podman.py).

Debian's podman 4.3 with runc (`--runtime runc`: Debian's crun refuses this host's hybrid cgroups), its default
rootful storage (/var/lib/containers/storage, where the agent reads container names from, as on a user's
host) and the cgroupfs manager (no systemd here: containers get `/libpod_parent/libpod-<id>` in every
hierarchy, v1 and the unified v2). The image is made at test time with `podman import` from Debian's
busybox-static (a tarball of /bin/busybox and its applet symlinks), nothing pulled. Containers run with
explicit `--ulimit` values: runc's default rlimits (nofile and nproc raised to podman's defaults) are refused
on this machine ("error setting rlimit type 7: operation not permitted"), values at or below the caller's
own are accepted.

`podman_image(dir)` imports the image and removes it at the end; `container(image, name, command)` runs one
and removes it (`rm -f -t 0`) at the end. Both skip (fail under HEADROOM_REQUIRE_REAL=1) when this machine
cannot run them, saying why.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from real_components import CGROUP_ROOT, require_commands, require_root, unavailable

BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "sleep", "yes", "cat", "true")
PODMAN = ("podman", "--runtime", "runc")
# runc sets these for the container's processes; podman's defaults (nofile 1048576, nproc 4194304) are refused here
ULIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096")
START_SECONDS = 60


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    res = subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: exit {res.returncode}: {res.stderr.strip()[-2000:]}")
    return res


def check_available() -> None:
    require_root("rootful Podman")
    require_commands("Podman", "podman", "runc", "conmon")
    if not BUSYBOX.is_file():
        unavailable(f"Podman's test image is made from {BUSYBOX} (Debian busybox-static), absent here")
    ldd = subprocess.run(["ldd", str(BUSYBOX)], capture_output=True, text=True)
    if "not a dynamic executable" not in ldd.stdout + ldd.stderr and "statically linked" not in ldd.stdout:
        unavailable(f"{BUSYBOX} is not static (install busybox-static): {ldd.stdout.strip()[:200]}")
    info = podman("info", "--format", "{{.Host.CgroupsVersion}} {{.Host.CgroupManager}}", check=False, timeout=60)
    if info.returncode != 0:
        unavailable(f"podman info fails here: {info.stderr.strip()[-300:]}")


@contextlib.contextmanager
def podman_image(workdir: Path) -> Iterator[str]:
    """A busybox image imported from a tarball made here; its reference."""
    check_available()
    tarball = workdir / "busybox.tar"
    with tarfile.open(tarball, "w") as tar:
        tar.add(BUSYBOX, arcname="bin/busybox")
        for applet in APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
    ref = f"localhost/headroom-test-busybox:{os.getpid()}"
    podman("import", "--quiet", str(tarball), ref)
    try:
        yield ref
    finally:
        podman("rmi", "--force", ref, check=False)


@dataclass(frozen=True)
class Container:
    name: str
    id: str
    pid: int  # its first process (PID 1 inside), as the host sees it
    cgroup: str  # its cgroup path, as in /proc/PID/cgroup (the same in every hierarchy with cgroupfs)

    def pids(self) -> set[int]:
        """Its processes as the kernel lists them: the cgroup.procs of its cgroup (v2 where it is there, else the
        v1 pids or memory hierarchy's)."""
        for top in (CGROUP_ROOT / "unified", CGROUP_ROOT, CGROUP_ROOT / "pids", CGROUP_ROOT / "memory"):
            procs = top / self.cgroup.lstrip("/") / "cgroup.procs"
            if procs.is_file():
                return {int(p) for p in procs.read_text().split()}
        return set()

    def cgroup_file(self, hierarchy: str, name: str) -> Path:
        return CGROUP_ROOT / hierarchy / self.cgroup.lstrip("/") / name


@contextlib.contextmanager
def container(image: str, name: str, command: str) -> Iterator[Container]:
    """``command`` (a busybox sh command line) running in a detached container named ``name``."""
    podman("rm", "--force", "--time", "0", name, check=False)
    run = podman("run", "--detach", "--name", name, "--network", "none", *ULIMITS, image, "/bin/sh", "-c", command,
                 check=False)
    try:
        if run.returncode != 0:
            raise AssertionError(f"podman run failed (exit {run.returncode}): {run.stderr.strip()[-2000:]}")
        cid = run.stdout.strip().splitlines()[-1]
        deadline = time.monotonic() + START_SECONDS
        while True:
            state = json.loads(podman("inspect", "--format", "{{json .State}}", name).stdout)
            if state.get("Running") and state.get("Pid"):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"container {name} not running after {START_SECONDS} s: {state}")
            time.sleep(0.2)
        pid = int(state["Pid"])
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        path = next((ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")), "") or \
            next(ln.split(":", 2)[2] for ln in lines if ":memory:" in ln)
        yield Container(name, cid, pid, path)
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)
