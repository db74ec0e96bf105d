"""Helpers for the real-component tests (tests/test_real_*.py): the agent as a user runs it, its output in a file,
and readers of its /api/v1/status and /metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from conftest import ROOT, Agent, free_port, http_get
from real_vllm import log_tail

# systemd/headroom.service runs the agent at Nice=-5 (with CPUWeight=1000) so that a host whose cores the workload
# saturates still gets its samples and answers; the real tests drive exactly that (a CPU vLLM and its clients on 2
# cores), so the agent runs at the unit's nice value where the tests may set it (root): at 0, a fresh-clone run saw
# /api/v1/status take over 5 s while vLLM was driven past its KV cache
UNIT_NICE = int(next(line.split("=", 1)[1] for line in (ROOT / "systemd" / "headroom.service").read_text().splitlines()
                     if line.startswith("Nice=")))


def _as_the_unit() -> None:
    if os.geteuid() == 0:
        os.nice(UNIT_NICE)


class LoggedAgent(Agent):
    """conftest's Agent, its output in a file (a long run would fill a pipe nobody reads)."""

    def __init__(self, log: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        cmd = [sys.executable, "-m", "headroom", "run", "--web.listen-address", f"127.0.0.1:{self.port}",
               "--log.format", "json", *args]
        with log.open("ab") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_as_the_unit)

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode, log_tail(self.log)


def status(agent) -> dict:
    return json.loads(http_get(agent.url + "/api/v1/status")[2])


def metrics(agent) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value of the agent's /metrics."""
    out = {}
    for fam in text_string_to_metric_families(http_get(agent.url + "/metrics")[2].decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def series(m: dict, name: str, **labels: str) -> dict[tuple, float]:
    return {k: v for k, v in m.items() if k[0] == name and all((n, v2) in k[1] for n, v2 in labels.items())}


def one(m: dict, name: str, **labels: str) -> float | None:
    found = series(m, name, **labels)
    assert len(found) <= 1, found
    return next(iter(found.values()), None)
