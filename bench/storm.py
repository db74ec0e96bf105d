"""Tick lateness on a saturated host: the real agent under a CPU storm, with and without the unit's CPU priority.

    .venv/bin/python -m bench.storm                 # about 90 s on 2 cores
    .venv/bin/python -m bench.storm --json out.json

Every phase starts a fresh `headroom run --simulate demo` (``--interval``, default 0.25 s: four slots a second, so a
short run holds enough ticks), lets it tick for ``--seconds`` once it listens, then reads the agent's own figures from
``/api/v1/status`` ("agent": how late each tick started after its slot, median, p95 and max over the run, and the
slots it skipped; sampler.py). The storm is one busy loop per CPU plus ``--extra``, at nice 0, started before the
agent, so every core is busy for the whole phase.

  quiet    no storm: the baseline of the same run
  storm    the storm; the agent at default priority beside it (nice 0, the same cgroup)
  nice     the storm; the agent at nice -5, as ``Nice=-5`` in systemd/headroom.service starts it
  weight   the storm in a cgroup of the default weight (a workload's service or scope: CPUWeight=100), the agent in a
           sibling at ``CPUWeight=1000`` as the unit gives it (cgroup v2 cpu.weight 1000; on v1, cpu.shares 10240,
           systemd's mapping weight * 1024 / 100); skipped, with the reason, without a writable cgroup cpu controller
           or without root
  both     nice -5 and the weight together: what the unit applies

The table gives lateness median, p95 and max in milliseconds, the skipped slots, the tick duration's median, and
the ratios of the median and p95 against quiet. Exit status: 0 measured; 2 the agent did not start or answer.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script (bench/storm.py): the bench package is beside it
    sys.path.insert(0, str(ROOT))

UNIT = ROOT / "systemd" / "headroom.service"
CGROUP_ROOT = Path("/sys/fs/cgroup")
DEFAULT_WEIGHT = 100  # systemd's CPUWeight= default


def unit_priority(unit: Path = UNIT) -> tuple[int, int]:
    """(Nice=, CPUWeight=) of the systemd unit: what the bench applies is what the unit asks for."""
    nice, weight = 0, DEFAULT_WEIGHT
    for line in unit.read_text().splitlines():
        key, _, value = line.strip().partition("=")
        if key == "Nice":
            nice = int(value)
        elif key == "CPUWeight":
            weight = int(value)
    return nice, weight


def shares_of_weight(weight: int) -> int:
    """cgroup v1 cpu.shares for a systemd CPUWeight= (systemd: weight * 1024 / 100, within 2..262144)."""
    return min(262144, max(2, weight * 1024 // DEFAULT_WEIGHT))


class Cgroups:
    """Two sibling cgroups with the cpu controller, one for the storm (default weight) and one for the agent."""

    def __init__(self, agent_weight: int) -> None:
        self.v2 = (CGROUP_ROOT / "cgroup.controllers").exists()
        base = CGROUP_ROOT if self.v2 else CGROUP_ROOT / "cpu"
        tag = f"headroom-storm-{os.getpid()}"
        self.storm, self.agent = base / f"{tag}-workload", base / f"{tag}-agent"
        if self.v2 and "cpu" not in (CGROUP_ROOT / "cgroup.subtree_control").read_text().split():
            raise OSError("the cgroup v2 root does not enable the cpu controller for its children")
        for path, weight in ((self.storm, DEFAULT_WEIGHT), (self.agent, agent_weight)):
            path.mkdir()
            if self.v2:
                (path / "cpu.weight").write_text(str(weight))
            else:
                (path / "cpu.shares").write_text(str(shares_of_weight(weight)))

    @staticmethod
    def mover(path: Path) -> Callable[[], None]:
        """A preexec_fn that moves the child into ``path`` before it runs anything."""
        procs = str(path / "cgroup.procs")

        def move() -> None:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        return move

    def remove(self) -> None:
        for path in (self.agent, self.storm):
            try:
                path.rmdir()
            except OSError:
                pass


class Storm:
    """One busy loop per CPU plus ``extra``, at nice 0 (in ``cgroup`` when given)."""

    def __init__(self, extra: int, cgroup: Path | None = None) -> None:
        n = (os.cpu_count() or 1) + extra
        pre = Cgroups.mover(cgroup) if cgroup is not None else None
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pre) for _ in range(n)]
        time.sleep(0.5)  # every loop spinning before the agent starts

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()


def agent_port(proc: subprocess.Popen, log: Path, timeout: float) -> int:
    """The port of the agent's own listener, from its "listening" log line: `--simulate demo` also starts serving
    stand-ins in the agent's process, so the lowest listening port need not be the agent's."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the agent exited with {proc.returncode} before listening")
        for line in log.read_text(errors="replace").splitlines():
            if '"event": "listening"' in line:
                return int(json.loads(line)["address"].rsplit(":", 1)[1])
        time.sleep(0.1)
    raise RuntimeError(f"the agent did not start listening within {timeout:g} s")


def status(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/status", timeout=10) as r:
        return json.load(r)


def run_agent(interval: float, seconds: float, nice: int = 0, cgroup: Path | None = None, timeout: float = 60.0) -> dict:
    """Start the agent (at ``nice``, in ``cgroup``), let it tick for ``seconds`` once it listens (its sampler starts
    just before its listeners), return its status' agent section. Raises RuntimeError when it does not start within
    ``timeout`` seconds or does not answer."""
    move = Cgroups.mover(cgroup) if cgroup is not None else None

    def pre() -> None:
        if move is not None:
            move()
        if nice:
            os.nice(nice)

    with tempfile.TemporaryDirectory(prefix="headroom-storm-") as tmp:
        cmd = [sys.executable, "-m", "headroom", "run", "--simulate", "demo", "--sample.interval", f"{interval}s",
               "--web.listen-address", "127.0.0.1:0", "--state.dir", str(Path(tmp, "state")), "--log.format", "json"]
        log = Path(tmp, "agent.log")
        with open(log, "wb") as log_file:
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log_file, preexec_fn=pre)
        try:
            port = agent_port(proc, log, timeout)
            time.sleep(seconds)
            try:
                agent = status(port).get("agent")
            except OSError as exc:
                raise RuntimeError(f"the agent's /api/v1/status did not answer: {exc}") from None
            if not agent:
                raise RuntimeError("the agent's /api/v1/status has no agent section")
            return {**agent, "seconds": seconds, "slots": round(seconds / interval)}
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def row(name: str, agent: dict | None, quiet: dict | None, why: str = "") -> str:
    if agent is None:
        return f"{name:<7} skipped: {why}"
    late, dur = agent["tick_lateness_seconds"], agent["tick_duration_seconds"]
    if late["max"] is None:
        return f"{name:<7} no scheduled tick in {agent['seconds']:g} s ({agent['ticks_in_window']} ticks in all)"

    def ratio(key: str) -> str:
        if quiet is None or not quiet["tick_lateness_seconds"][key]:
            return "-"
        return f"{late[key] / quiet['tick_lateness_seconds'][key]:.1f}x"

    # the window holds the scheduled ticks and the daemon's first, unscheduled one
    return (f"{name:<7} {agent['ticks_in_window'] - 1:>5}/{agent['slots']:<5} {late['median'] * 1e3:>9.2f} "
            f"{late['p95'] * 1e3:>8.2f} {late['max'] * 1e3:>8.2f} {agent['missed_ticks_total']:>6} {dur['median'] * 1e3:>10.2f} "
            f"{ratio('median'):>8} {ratio('p95'):>7}")


HEADER = (f"{'phase':<7} {'ticks/slots':>11} {'late p50':>9} {'late p95':>8} {'late max':>8} {'missed':>6} "
          f"{'tick p50':>10} {'p50/quiet':>8} {'p95/quiet':>7}   (milliseconds)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.storm", description=__doc__.split("\n\n")[0])
    p.add_argument("--interval", type=float, default=0.25, help="the agent's sampling interval, seconds")
    p.add_argument("--seconds", type=float, default=12.0, help="seconds each phase's agent ticks")
    p.add_argument("--extra", type=int, default=2, help="busy loops beyond one per CPU")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    nice, weight = unit_priority()
    print(f"storm: {os.cpu_count()} CPUs, {(os.cpu_count() or 1) + args.extra} busy loops at nice 0; agent every "
          f"{args.interval:g}s, {args.seconds:g} s a phase; the unit asks Nice={nice} CPUWeight={weight}", flush=True)
    results: dict[str, dict | None] = {}
    reasons: dict[str, str] = {}
    try:
        results["quiet"] = run_agent(args.interval, args.seconds)
        storm = Storm(args.extra)
        try:
            results["storm"] = run_agent(args.interval, args.seconds)
            if nice < 0 and os.geteuid() != 0:
                reasons["nice"] = "a negative nice level needs root (systemd applies it before dropping privileges)"
            else:
                results["nice"] = run_agent(args.interval, args.seconds, nice=nice)
        finally:
            storm.stop()
        try:
            groups = Cgroups(weight)
        except OSError as exc:
            reasons["weight"] = reasons["both"] = f"no writable cgroup cpu controller ({exc})"
        else:
            try:
                storm = Storm(args.extra, groups.storm)
                try:
                    results["weight"] = run_agent(args.interval, args.seconds, cgroup=groups.agent)
                    if "nice" in results:
                        results["both"] = run_agent(args.interval, args.seconds, nice=nice, cgroup=groups.agent)
                    else:
                        reasons["both"] = reasons["nice"]
                finally:
                    storm.stop()
            finally:
                groups.remove()
    except RuntimeError as exc:
        print(f"storm: {exc}", file=sys.stderr)
        return 2
    print(HEADER)
    for name in ("quiet", "storm", "nice", "weight", "both"):
        print(row(name, results.get(name), results.get("quiet"), reasons.get(name, "")))
    if args.json is not None:
        args.json.write_text(json.dumps({"cpus": os.cpu_count(), "busy_loops": (os.cpu_count() or 1) + args.extra,
                                         "interval_seconds": args.interval, "seconds": args.seconds, "nice": nice,
                                         "cpu_weight": weight, "phases": results, "skipped": reasons}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
