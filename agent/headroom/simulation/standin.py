"""A simulated workload process (``headroom --simulate``): a real, lightweight process whose
/proc/PID/cmdline reads exactly as a scenario declares, e.g. ``vllm serve meta-llama/... --port 8000``.

Started by ``headroom.simulation.Scenario.start_processes`` for a scenario WITHOUT a synthetic host (``real-load``):
with one, stand-ins are simulated processes in the synthetic /proc (``headroom.simulation.host``) and none of this runs. Only the standard library is imported (it
runs as a top-level module with this directory on PYTHONPATH, so the launcher's own argv stays short).

How the command line is made exact without new dependencies: the launcher execs the Python interpreter
with a placeholder argv (``p -m standin <padding>``) padded to exactly the byte length of the declared
argv; this process then reads its argv area (``arg_start``/``arg_end``, fields 48-49 of /proc/self/stat)
and overwrites it through /proc/self/mem with the declared argv. The length is equal, so the kernel
shows the declared argv, NUL-separated, as for any process (no setproctitle-style single string).

The spec comes in the HEADROOM_STANDIN environment variable (JSON): argv, cpu (share of one core
burnt in a 100 ms duty cycle), rss (bytes held resident), children (specs of child processes, started
the same way), parent (the pid that must be alive), and optionally serving (a serving runtime whose
/metrics this process serves, driven by scenario signals: simulation/runtime_metrics.py; only then does
it import more than the standard library). The process dies with its parent
(PR_SET_PDEATHSIG) and stops its children on SIGTERM. When ready it writes one JSON line to stdout:
``{"pid": ..., "children": [...]}`` (the children's own lines included).
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
ENV = "HEADROOM_STANDIN"
LAUNCHER = ("p", "-m", "standin")  # argv of the interpreter before the rewrite (13 bytes with NULs)
MIN_CMDLINE_BYTES = sum(len(a) + 1 for a in LAUNCHER)
PERIOD = 0.1  # seconds of one burn + sleep cycle


def encoded(argv: list[str]) -> bytes:
    """argv as /proc/PID/cmdline holds it: every argument NUL-terminated."""
    return b"".join(a.encode("utf-8", "surrogateescape") + b"\0" for a in argv)


def launcher_argv(argv: list[str]) -> list[str]:
    """The placeholder argv with exactly as many bytes as ``argv``; raises ValueError when it is too short."""
    need = len(encoded(argv))
    if need < MIN_CMDLINE_BYTES:
        raise ValueError(f"a stand-in command line needs at least {MIN_CMDLINE_BYTES - 1} characters")
    if need == MIN_CMDLINE_BYTES:
        return list(LAUNCHER)
    return [*LAUNCHER, "x" * (need - MIN_CMDLINE_BYTES - 1)]


def launch(spec: dict, directory: str) -> subprocess.Popen:
    """Start a stand-in for ``spec`` (argv, cpu, rss, children) as a child of the calling thread.

    ``directory`` is the folder holding this module. The caller reads the ready line from stdout.
    """
    python = spec.get("python") or sys.executable  # a stand-in's own sys.executable is empty (argv[0] "p")
    env = dict(os.environ)
    env.update(spec.get("env") or {})  # the scenario workload's own (its children inherit them)
    env["PYTHONPATH"] = directory
    env[ENV] = json.dumps({**spec, "parent": os.getpid(), "python": python})
    env.pop("PYTHONSTARTUP", None)
    return subprocess.Popen(launcher_argv(spec["argv"]), executable=python, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            close_fds=True)


def read_ready(proc: subprocess.Popen, timeout: float) -> dict:
    """The stand-in's ready line as a dict; raises RuntimeError when it exits or stays silent."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    buf = b""
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
            raise RuntimeError(f"stand-in pid {proc.pid} did not get ready within {timeout:g}s")
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            raise RuntimeError(f"stand-in pid {proc.pid} exited with {proc.wait()}")
        buf += chunk
    proc.stdout.close()
    return json.loads(buf)


def _set_cmdline(argv: list[str]) -> None:
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    start, end = int(fields[45]), int(fields[46])  # fields 48 and 49: arg_start, arg_end
    data = encoded(argv)
    if len(data) != end - start:
        raise SystemExit(f"stand-in: argv area is {end - start} bytes, {len(data)} needed")
    with open("/proc/self/mem", "r+b", buffering=0) as mem:
        mem.seek(start)
        mem.write(data)


def _serving(spec: dict | None):
    """With a ``serving`` spec: serve the runtime's /metrics (simulation/runtime_metrics.py) and return
    the driver the main loop advances; None without one. Imported only then (it needs prometheus-client
    and the scenario's Signal type, both in the agent's environment)."""
    if not spec:
        return None
    # a stand-in's interpreter does not know the agent's environment (its argv[0] is a placeholder)
    sys.path.extend(p for p in spec.get("sys_path", ()) if p not in sys.path)
    from headroom.simulation.runtime_metrics import serve
    from headroom.simulation.signals import Signal

    _, driver = serve(spec, Signal)
    driver.started = time.monotonic()
    return driver


def main() -> None:
    spec = json.loads(os.environ.pop(ENV))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the agent, which stops us
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != spec["parent"]:
        return  # the parent died before prctl took effect
    _set_cmdline(spec["argv"])
    hold = bytearray(int(spec.get("rss", 0)))
    for i in range(0, len(hold), 4096):  # touch every page so it is resident, not just reserved
        hold[i] = 1
    here = os.path.dirname(os.path.abspath(__file__))
    children = [launch({**child, "python": spec["python"]}, here) for child in spec.get("children", [])]
    ready = [read_ready(c, 20.0) for c in children]

    def stop(signum: int, frame: object) -> None:
        for c in children:
            c.terminate()
        for c in children:
            try:
                c.wait(2)
            except subprocess.TimeoutExpired:
                c.kill()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    driver = _serving(spec.get("serving"))
    sys.stdout.write(json.dumps({"pid": os.getpid(), "children": ready}) + "\n")
    sys.stdout.flush()
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    busy = max(0.0, min(1.0, float(spec.get("cpu", 0.0)))) * PERIOD
    while True:
        if busy:
            end = time.monotonic() + busy
            while time.monotonic() < end:
                pass
        time.sleep(PERIOD - busy if busy < PERIOD else 0.001)
        if driver is not None:
            with driver.lock:
                driver.advance(time.monotonic() - driver.started)
        if hold and hold[0] != 1:  # keep a reference; never true
            break


if __name__ == "__main__":
    main()
