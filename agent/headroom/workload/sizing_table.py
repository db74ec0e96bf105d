"""The docs/sizing.md table of common model / GPU pairs, computed by the memory model (``make sizing-table``).

``python -m headroom.workload.sizing_table`` prints the table; ``--write FILE`` replaces the block between the
``<!-- sizing-table:begin -->`` and ``<!-- sizing-table:end -->`` markers in FILE, and the evidence table
(``sizing_evidence.render_evidence``) between the ``sizing-evidence`` markers. Tests check that
docs/sizing.md holds exactly what both return.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from headroom.jsontypes import YamlDict
from headroom.workload.modelconfig import read_model_config
from headroom.workload.profiles import profile_from_dict
from headroom.workload.sizing import estimate

GIB = 1024**3
BEGIN, END = "<!-- sizing-table:begin -->", "<!-- sizing-table:end -->"
FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "hf"

# GPU -> memory as the framework sees it (torch.cuda.mem_get_info total), GiB; docs/sizing.md says where from
GPUS = {"RTX 3090 24GB": 23.58, "L4 24GB": 22.05, "H100 80GB": 79.19}
# (model fixture, GPU, tensor parallel, extra profile fields: a profile mapping as YAML gives it)
PAIRS: tuple[tuple[str, str, int, YamlDict], ...] = (
    ("llama-3-8b", "RTX 3090 24GB", 1, {}),
    ("llama-3-8b", "L4 24GB", 1, {}),
    ("llama-3-8b", "H100 80GB", 1, {}),
    ("llama-3-8b", "H100 80GB", 1, {"kv_cache_precision": "fp8"}),
    ("llama-3-8b-gptq", "L4 24GB", 1, {}),
    ("qwen2.5-7b", "H100 80GB", 1, {}),
    ("qwen3-0.6b", "L4 24GB", 1, {}),
    ("mistral-7b-v0.1", "H100 80GB", 1, {}),
    ("gemma-2-9b", "H100 80GB", 1, {"precision": "bf16", "compute_precision": "bf16"}),
    ("gemma-3-27b", "H100 80GB", 1, {}),
    ("llama-3-70b", "H100 80GB", 1, {}),
    ("llama-3-70b", "H100 80GB", 4, {}),
    ("mixtral-8x7b", "H100 80GB", 2, {}),
)  # fmt: skip


def _row(model: str, gpu: str, tensor: int, extra: YamlDict, version: str) -> str:
    fields = read_model_config(FIXTURES / model).fields
    cells = []
    kv_tokens = per_token = None
    for context in (8192, 32768):
        d = {"name": "t", "kind": "inference", "context": context, "runtime": {"name": "vllm", "version": version},
             "parallel": {"tensor": tensor}, **fields, **extra}  # fmt: skip
        e = estimate(profile_from_dict(d, attributable=False), gpu_memory_bytes=int(GPUS[gpu] * GIB), gpus=tensor)
        r = e.runtime_report
        assert r is not None  # runtime vllm on a GPU: its own accounting
        if context == 8192:
            kv_tokens, per_token = r["kv_tokens"], e.kv_bytes_per_token
        cells.append(f"{r['max_concurrency']:.2f}x ({'fits' if r['max_concurrency'] >= 1 else 'does not fit'})")
    weights = e.component("weights") / GIB
    precision = extra.get("precision", fields.get("precision"))
    if "quantization" in fields:
        precision = f"{fields['quantization']['method']} {precision}"
    kv = extra.get("kv_cache_precision", "auto")
    return (f"| {model} | {precision}, KV {kv} | {gpu} x {tensor} | {weights:.2f} | {per_token:,} | {kv_tokens:,} | "
            f"{cells[0]} | {cells[1]} |")  # fmt: skip


def render(version: str = "0.10.1") -> str:
    lines = [f"vLLM {version} accounting, `vllm serve` defaults (gpu_memory_utilization 0.9, block 16), per GPU:", "",
             "| model | weights, KV cache | GPU x TP | weights GiB | KV B/token | GPU KV cache size (tokens) | "
             "max concurrency at 8k | at 32k |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    lines += [_row(*pair, version) for pair in PAIRS]
    return "\n".join(lines) + "\n"


def replace_block(text: str, table: str, begin: str = BEGIN, end: str = END) -> str:
    if begin not in text or end not in text:
        raise ValueError(f"markers {begin} / {end} not found")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{table}{end}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", metavar="FILE", help="replace the marked block in FILE")
    args = ap.parse_args(argv)
    table = render()
    if not args.write:
        sys.stdout.write(table)
        return 0
    from headroom.workload.sizing_evidence import EVIDENCE_BEGIN, EVIDENCE_END, render_evidence

    path = Path(args.write)
    text = replace_block(path.read_text(encoding="utf-8"), table)
    text = replace_block(text, render_evidence(), EVIDENCE_BEGIN, EVIDENCE_END)
    path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
