"""A one-node Slurm cluster on localhost, started by the test (tests/test_real_slurm.py).

Debian's slurm-wlm 22.05 and munge, as a site runs them, in a temp dir: a fresh munge key and `munged` on its own
socket; `slurm.conf` with `ProctrackType=proctrack/cgroup`, `TaskPlugin=task/cgroup`, `CgroupPlugin=cgroup/v1`
(slurmd refuses cgroup v2 mode on a hybrid host: v1 controllers plus a v2 hierarchy at /sys/fs/cgroup/unified),
`SlurmctldHost=localhost`, `NodeName=localhost` with the CPUs and RealMemory `slurmd -C` finds here, two GPUs as
GRES (`Gres=gpu:2` on character devices made in the temp dir, so `--gres=gpu:1` sets SLURM_JOB_GPUS for the
Prolog as on a GPU node), free ports, state, spool and logs in the temp dir; slurmctld and slurmd run as root in
the foreground (`-D`) as child processes. A real Prolog and Epilog write and remove dcgm-exporter's job mapping
files (a file per GPU index listing the job IDs on it), which the agent reads with --hpc-job-mapping-dir.

`slurm_cluster(dir)` starts it, waits for the node to be idle (`sinfo`) and, at the end, cancels what is left,
stops the daemons and removes the job cgroups they made (`/sys/fs/cgroup/<controller>/slurm_localhost`).
It skips (fails under HEADROOM_REQUIRE_REAL=1) when this machine cannot run it, saying why; a daemon that
refuses to start fails the test with its log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from conftest import free_port
from real_components import (
    CGROUP_ROOT,
    cgroup_v1_pids,
    remove_cgroup_tree,
    require_cgroup_v1,
    require_commands,
    require_root,
    unavailable,
)

NODE = "localhost"
GPUS = 2  # GRES gpus the node declares (character devices in the temp dir, /dev/null's numbers)
START_SECONDS = 60  # the node must be idle within this (about 3 s here)
STOP_SECONDS = 15
# the v1 controllers the job's cgroups live in: proctrack/cgroup uses freezer, task/cgroup cpuset and memory,
# jobacct_gather/cgroup cpuacct and memory
CONTROLLERS = ("freezer", "memory", "cpuset", "cpuacct")
COMMANDS = ("munged", "munge", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "sinfo", "scancel", "scontrol",
            "flock")

# dcgm-exporter's job mapping: the Prolog adds the job to the file of each GPU it was given, the Epilog takes it
# out (and removes a file left empty); a lock keeps two jobs starting at once from losing a line
PROLOG = """\
#!/bin/sh
# Prolog: the job's GPUs (SLURM_JOB_GPUS, e.g. "0,1") get its ID in the job mapping directory
dir={mapping}
for gpu in $(echo "${{SLURM_JOB_GPUS:-}}" | tr ',' ' '); do
  ( flock 9; echo "$SLURM_JOB_ID" >> "$dir/$gpu" ) 9>"$dir/.lock"
done
echo "prolog $SLURM_JOB_ID gpus=${{SLURM_JOB_GPUS:-}}" >> {log}
exit 0
"""
EPILOG = """\
#!/bin/sh
# Epilog: the job's ID leaves its GPUs' files; an empty file is removed
dir={mapping}
for gpu in $(echo "${{SLURM_JOB_GPUS:-}}" | tr ',' ' '); do
  (
    flock 9
    f="$dir/$gpu"
    if [ -f "$f" ]; then
      grep -vx "$SLURM_JOB_ID" "$f" > "$f.new" || true
      if [ -s "$f.new" ]; then mv "$f.new" "$f"; else rm -f "$f" "$f.new"; fi
    fi
  ) 9>"$dir/.lock"
done
echo "epilog $SLURM_JOB_ID gpus=${{SLURM_JOB_GPUS:-}}" >> {log}
exit 0
"""


@dataclass
class SlurmCluster:
    dir: Path
    conf: Path
    mapping_dir: Path
    log_dir: Path
    env: dict[str, str]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def run(self, *cmd: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        res = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and res.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)}: exit {res.returncode}: {res.stderr.strip()}\n{self.logs()}")
        return res

    def sbatch(self, script: Path, *args: str) -> int:
        out = self.run("sbatch", "--parsable", "-o", str(self.log_dir / "job-%j.out"), *args, str(script)).stdout
        return int(out.strip().split(";")[0])

    def state(self, job: int) -> str:
        """The job's state in the queue (RUNNING, PENDING, COMPLETING ...), '' once it left the queue."""
        return self.run("squeue", "-h", "-j", str(job), "-o", "%T", check=False).stdout.strip()

    def wait_state(self, job: int, states: tuple[str, ...], timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.state(job)
            if last in states:
                return last
            time.sleep(0.2)
        raise AssertionError(f"job {job} is {last or 'gone'}, not {' or '.join(states)} after {timeout} s\n"
                             f"{self.logs()}")

    def job_cgroup(self, job: int, uid: int = 0) -> str:
        """The job's cgroup v1 path (relative to a controller's hierarchy), as slurmd lays it out."""
        return f"/slurm_{NODE}/uid_{uid}/job_{job}"

    def job_pids(self, job: int, uid: int = 0) -> set[int]:
        """The job's processes as the kernel lists them: its freezer cgroup (proctrack/cgroup's) and below."""
        return cgroup_v1_pids("freezer", self.job_cgroup(job, uid))

    def logs(self, lines: int = 30) -> str:
        parts = []
        for f in sorted(self.log_dir.glob("*.log")):
            text = f.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {f.name}\n" + "\n".join(text))
        return "\n".join(parts)


def _node_line() -> str:
    """This machine as slurmd sees it ("CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1
    RealMemory=24105"), so the node is not drained for claiming more than it has."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30).stdout
    line = next((ln for ln in out.splitlines() if ln.startswith("NodeName=")), "")
    fields = [f for f in line.split() if not f.startswith("NodeName=")]
    if not any(f.startswith("CPUs=") for f in fields):
        unavailable(f"slurmd -C does not describe this machine: {out.strip()[:200]!r}")
    return " ".join(fields)


def _wait(predicate, timeout: float, procs: dict[str, subprocess.Popen], what: str, cluster: SlurmCluster) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, p in procs.items():
            if p.poll() is not None:
                raise AssertionError(f"{name} exited {p.returncode} while waiting for {what}\n{cluster.logs(60)}")
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"no {what} after {timeout} s\n{cluster.logs(60)}")


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def check_available() -> None:
    require_root("Slurm (slurmd runs jobs as their users and makes cgroups)")
    require_commands("Slurm", *COMMANDS)
    require_cgroup_v1("Slurm's proctrack/cgroup and task/cgroup (cgroup/v1 plugin)", *CONTROLLERS)
    busy = [c for c in CONTROLLERS if cgroup_v1_pids(c, f"/slurm_{NODE}")]
    if busy:
        unavailable(f"another Slurm runs jobs on this machine (processes in /sys/fs/cgroup/{busy[0]}/slurm_{NODE})")
    for c in CONTROLLERS:  # what an earlier run left, empty
        remove_cgroup_tree(CGROUP_ROOT / c / f"slurm_{NODE}")


@contextlib.contextmanager
def slurm_cluster(base: Path) -> Iterator[SlurmCluster]:
    check_available()
    base.mkdir(parents=True, exist_ok=True)
    d = base
    keydir, sockdir, logs, mapping = d / "munge-key", d / "munge", d / "log", d / "job-mapping"
    for p in (keydir, sockdir, logs, mapping, d / "spool/ctld", d / "spool/d", d / "run", d / "dev"):
        p.mkdir(parents=True, exist_ok=True)
    keydir.chmod(0o700)
    sockdir.chmod(0o755)
    key = keydir / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    devices = []
    for i in range(GPUS):  # GRES needs character devices: /dev/null's numbers, named as NVIDIA's
        dev = d / "dev" / f"nvidia{i}"
        if not dev.exists():
            try:
                os.mknod(dev, 0o600 | 0o020000, os.makedev(1, 3))
            except OSError as exc:
                unavailable(f"Slurm's GRES needs character devices and mknod failed here: {exc.strerror}")
        devices.append(dev)
    (d / "prolog.sh").write_text(PROLOG.format(mapping=mapping, log=logs / "prolog-epilog.log"))
    (d / "epilog.sh").write_text(EPILOG.format(mapping=mapping, log=logs / "prolog-epilog.log"))
    for s in ("prolog.sh", "epilog.sh"):
        (d / s).chmod(0o755)
    sock = sockdir / "munge.sock"
    conf = d / "slurm.conf"
    conf.write_text(f"""\
ClusterName=headroom
SlurmctldHost={NODE}
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
StateSaveLocation={d}/spool/ctld
SlurmdSpoolDir={d}/spool/d
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd.pid
SlurmctldLogFile={logs}/slurmctld.log
SlurmdLogFile={logs}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=verbose
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherType=jobacct_gather/cgroup
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
ReturnToService=2
MpiDefault=none
GresTypes=gpu
Prolog={d}/prolog.sh
Epilog={d}/epilog.sh
KillWait=2
NodeName={NODE} NodeAddr=127.0.0.1 {_node_line()} Gres=gpu:{GPUS} State=UNKNOWN
PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
    (d / "cgroup.conf").write_text("""\
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=yes
ConstrainRAMSpace=yes
""")
    (d / "gres.conf").write_text(f"NodeName={NODE} Name=gpu File={d}/dev/nvidia[0-{GPUS - 1}]\n")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    for var in [v for v in env if v.startswith("SLURM_") and v != "SLURM_CONF"]:
        del env[var]  # a test run inside a Slurm job must not hand its job's variables to sbatch
    cluster = SlurmCluster(d, conf, mapping, logs, env)
    procs = cluster.procs
    try:
        procs["munged"] = subprocess.Popen(
            ["munged", "-F", "-f", f"--key-file={key}", f"--socket={sock}", f"--log-file={logs}/munged.log",
             f"--pid-file={d}/run/munged.pid", f"--seed-file={d}/run/munged.seed"],
            stdout=open(logs / "munged.out.log", "wb"), stderr=subprocess.STDOUT)
        _wait(lambda: subprocess.run(["munge", "-n", "-S", str(sock)], capture_output=True).returncode == 0, 20,
              procs, "munge credential", cluster)
        procs["slurmctld"] = subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(conf)], env=env,
                                              stdout=open(logs / "slurmctld.out.log", "wb"), stderr=subprocess.STDOUT)
        _wait(lambda: cluster.run("scontrol", "ping", check=False).stdout.find("UP") >= 0, START_SECONDS, procs,
              "slurmctld answering", cluster)
        procs["slurmd"] = subprocess.Popen(["slurmd", "-D", "-N", NODE, "-f", str(conf)], env=env,
                                           stdout=open(logs / "slurmd.out.log", "wb"), stderr=subprocess.STDOUT)
        _wait(lambda: cluster.run("sinfo", "-h", "-n", NODE, "-o", "%t", check=False).stdout.strip() == "idle",
              START_SECONDS, procs, f"node {NODE} idle in sinfo", cluster)
        yield cluster
    finally:
        try:
            if "slurmctld" in procs and procs["slurmctld"].poll() is None:
                cluster.run("scancel", "--user", str(os.geteuid()), check=False)
                deadline = time.monotonic() + STOP_SECONDS
                while time.monotonic() < deadline and cluster.run("squeue", "-h", check=False).stdout.strip():
                    time.sleep(0.2)
        finally:
            for name in ("slurmd", "slurmctld", "munged"):
                if name in procs:
                    _stop(procs[name])
            for c in CONTROLLERS:
                remove_cgroup_tree(CGROUP_ROOT / c / f"slurm_{NODE}")
