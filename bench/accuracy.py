"""Accuracy of the bottleneck analysis on every built-in scenario, with the DEFAULT analysis settings.

    python -m bench.accuracy            # about 6 minutes; prints the markdown table for docs/analysis.md

Each scenario runs as `headroom run --simulate <scenario>` with no configuration file (built-in
defaults: 1 s samples, 15 s short window, 20 s hold). Time to detection is from the agent's first
sample to the first time the scenario's workload shows the expected primary bottleneck.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from headroom.analysis.bottleneck import RESOURCES
from headroom.simulation import load_scenario

# kv_cache is demonstrated by the serving scenarios (a stand-in vLLM serving /metrics), not a bottleneck-* file
SERVING_SCENARIOS = [("serving-kv-bound", "kv_cache"), ("serving-queue-compute-bound", "gpu_compute"),
                     ("serving-idle", "none")]
SCENARIOS = ([(f"bottleneck-{r}", r) for r in RESOURCES if r != "kv_cache"] + [("healthy", "none")]
             + SERVING_SCENARIOS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(url: str) -> dict:
    with urllib.request.urlopen(url + "/api/v1/status", timeout=5) as r:
        return json.loads(r.read())


def run(scenario: str, expected: str, timeout: float = 90.0, watch_none: float = 60.0) -> tuple[str, float | None]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as d:
        empty = os.path.join(d, "empty.yaml")
        open(empty, "w").close()
        proc = subprocess.Popen([sys.executable, "-m", "headroom", "run", "--config.file", empty, "--simulate",
                                 scenario, "--web.listen-address", f"127.0.0.1:{port}", "--log.level", "error"])
        try:
            workload = load_scenario(scenario).profiles[0]["name"]
            start = None
            detected, primary = None, "?"
            deadline = time.monotonic() + timeout + 20
            while time.monotonic() < deadline:
                try:
                    doc = status(url)
                except OSError:
                    time.sleep(0.2)
                    continue
                start = start or time.monotonic()
                w = next((w for w in doc["workloads"] if w["name"] == workload), None)
                if w is not None:
                    primary = w["primary_bottleneck"]
                    if primary == expected and detected is None and expected != "none":
                        detected = time.monotonic() - start
                        break
                elapsed = time.monotonic() - start
                if expected == "none" and elapsed >= watch_none:
                    break
                if elapsed >= timeout:
                    break
                time.sleep(0.5)
            return primary, detected
        finally:
            proc.terminate()
            proc.wait(15)


def main() -> int:
    rows = ["| scenario | expected | classified | time to detection |", "|---|---|---|---|"]
    ok = True
    for scenario, expected in SCENARIOS:
        primary, detected = run(scenario, expected)
        ok &= primary == expected
        t = ("stayed none for 60 s" if expected == "none" and primary == "none"
             else "-" if detected is None else f"{detected:.0f} s")
        rows.append(f"| {scenario} | {expected} | {primary} | {t} |")
        print(rows[-1], file=sys.stderr, flush=True)
    print("\n".join(rows))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
