"""The series docs/metrics.md lists as equal to node_exporter's are equal: a real node_exporter and headroom read
this machine's /proc, and every listed node_exporter value lies between two headroom reads taken before and after
it (counters only grow; sizes do not change)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from headroom.exposition.catalog import NODE_EXPORTER_EQUIVALENTS

from conftest import ROOT, free_port, http_get

NODE_EXPORTER = shutil.which("prometheus-node-exporter") or "/usr/bin/prometheus-node-exporter"
SLACK = 1e-6  # headroom writes PSI totals in whole microseconds, as the kernel counts them


def values(text: str) -> dict[str, float]:
    """'name{k="v",...}' (labels in exposition order) -> value."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in s.labels.items())
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def headroom_now() -> dict[str, float]:
    r = subprocess.run([sys.executable, "-m", "headroom", "snapshot", "--samples", "1", "--collector.disable-defaults",
                        "--collector.cpu", "--collector.memory"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return values(r.stdout)


@pytest.fixture(scope="module")
def node_exporter():
    assert shutil.which(NODE_EXPORTER), "node_exporter missing: `make test` installs Debian's prometheus-node-exporter"
    port = free_port()
    proc = subprocess.Popen([NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                             "--collector.pressure", "--collector.meminfo"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if http_get(url, timeout=1)[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "node_exporter did not start"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def test_documented_equivalents_match_a_real_node_exporter(node_exporter):
    before = headroom_now()
    status, _, body = http_get(node_exporter)
    assert status == 200
    node = values(body.decode())
    after = headroom_now()
    compared = []
    for name, labels, node_name in NODE_EXPORTER_EQUIVALENTS:
        key = f"{name}{{{labels}}}" if labels else name
        if key not in before and node_name not in node:
            continue  # neither reads it on this kernel (e.g. no PSI for memory in a container)
        assert key in before and node_name in node, f"{key} / {node_name}: only one side exports it"
        assert before[key] - SLACK <= node[node_name] <= after[key] + SLACK, (key, before[key], node[node_name],
                                                                               after[key])
        compared.append(key)
    assert "headroom_memory_size_bytes" in compared and any("pressure" in k for k in compared), compared
