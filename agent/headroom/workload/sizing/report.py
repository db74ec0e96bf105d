"""The estimate as people read it: the verdict lines and the per-GPU table ``headroom estimate`` prints.

``fit_lines`` (the decisive problem first: too few GPUs, then memory against the budget), ``gpu_shortfall``,
``layout_text`` and ``format_table``. Text only: every figure comes from the ``Estimate``.
"""

from __future__ import annotations

from headroom.units import GIB, format_bytes
from headroom.workload.profiles import Kind
from headroom.workload.sizing.types import Estimate


# --------------------------------------------------------------------------------------- printing
def layout_text(parallel: tuple[int, int, int]) -> str:
    """'tensor parallel 4', 'tensor parallel 2 x pipeline parallel 2', 'data parallel 8'; '' for one GPU."""
    return " x ".join(f"{what} parallel {n}" for what, n in zip(("tensor", "pipeline", "data"), parallel, strict=True)
                      if n > 1)  # fmt: skip


def gpu_shortfall(e: Estimate) -> str | None:
    """'tensor parallel 4 needs 4 GPUs, 2 given' when fewer GPUs are available than the layout needs, else None."""
    if e.gpus_available is None or e.gpus_available >= e.gpus_needed:
        return None
    layout = layout_text(e.parallel) or "the layout"
    return f"{layout} needs {e.gpus_needed} GPUs, {e.gpus_available} given"


def fit_lines(e: Estimate) -> list[str]:
    """The verdict, the decisive problem first: too few GPUs for the layout, then memory per GPU against the budget
    (vLLM's reservation, else the GPU's memory)."""
    short = gpu_shortfall(e)
    memory = None
    if e.margin_bytes is not None and e.budget_bytes is not None:
        need, have = format_bytes(e.needed_bytes), format_bytes(e.budget_bytes)
        budget = (f"vLLM's {have} reservation" if e.vllm_reservation_bytes is not None
                  else f"the {have} host RAM budget" if e.gpus_needed == 0 else f"the GPU's {have}")  # fmt: skip
        per = "" if e.gpus_needed == 0 else " per GPU"
        if e.margin_bytes >= 0:
            memory = f"needs {need}{per} of {budget}: {format_bytes(e.margin_bytes)} to spare"
        else:
            memory = f"needs {need}{per}, {format_bytes(-e.margin_bytes)} more than {budget}"
    if short is not None:
        return [f"does not fit: {short}"] + ([f"memory: {memory}"] if memory else [])
    if e.fits is None:
        return ["fits: unknown (GPU memory not given)"]
    if e.fits:
        return [f"fits: {memory}" if memory else "fits"]
    return [f"does not fit: {memory}" if memory else "does not fit"]


def format_table(e: Estimate) -> str:
    """A readable per-GPU breakdown: component, bytes, GiB (2 decimals), share %, then verdict lines."""
    rows = [("component", "bytes", "GiB", "share", "")]
    for x in e.components:
        share = f"{100 * x.bytes / e.needed_bytes:.1f}%" if e.needed_bytes else "-"
        rows.append((x.name, f"{x.bytes:,}".replace(",", " "), f"{x.bytes / GIB:.2f}", share, x.note))
    rows.append(
        (
            "total per GPU",
            f"{e.needed_bytes:,}".replace(",", " "),
            f"{e.needed_bytes / GIB:.2f}",
            "100.0%",
            "",
        )
    )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for i, r in enumerate(rows):
        cells = [r[0].ljust(widths[0])] + [r[k].rjust(widths[k]) for k in (1, 2, 3)]
        lines.append(("  ".join(cells) + ("  " + r[4] if r[4] else "")).rstrip())
        if i == 0 or i == len(rows) - 2:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    where = f"{e.gpus_needed} GPU(s)" if e.gpus_needed else "host RAM"
    lines.append(
        f"workload {e.profile} ({e.kind}): {e.concurrency} {e.concurrency_label} x {e.context} tokens, {where}"
    )
    if e.vllm_reservation_bytes is not None:
        assert e.gpu_memory_bytes is not None  # the reservation is a share of the GPU's memory
        lines.append(f"vLLM reserves {format_bytes(e.vllm_reservation_bytes)} of {format_bytes(e.gpu_memory_bytes)} "
                     f"per GPU (gpu_memory_utilization); that is the expected GPU memory use")  # fmt: skip
    lines.extend(fit_lines(e))
    if e.max_concurrency_at_max_context is not None:
        lines.append(
            f"largest {e.concurrency_label} at {e.context} tokens: {e.max_concurrency_at_max_context}"
        )
        lines.append(
            f"largest context at {e.concurrency} {e.concurrency_label}: {e.max_context_at_concurrency} tokens"
        )
    rr = e.runtime_report
    if rr is not None:
        device = "CPU" if e.kind == Kind.CPU_INFERENCE.value else "GPU"  # vLLM names the pool (kv_cache_utils.py:2311)
        if device == "CPU":
            lines.append(f"{rr['runtime']}: KV {format_bytes(rr['kv_available_bytes'])} (--kv-cache-memory-bytes)")
        else:
            lines.append(f"{rr['runtime']}: budget {format_bytes(rr['budget_bytes'])} - weights "
                         f"{format_bytes(rr['weights_bytes'])} - activation peak {format_bytes(rr['activation_bytes'])}"
                         f" - non-torch {format_bytes(rr['non_torch_bytes'])} = KV "
                         f"{format_bytes(rr['kv_available_bytes'])}")  # fmt: skip
        lines.append(f"{device} KV cache size: {rr['kv_tokens']:,} tokens ({rr['blocks']} blocks of {rr['block_size']})")
        lines.append(f"Maximum concurrency for {rr['max_model_len']:,} tokens per request: {rr['max_concurrency']:.2f}x")
    elif e.kv_capacity_tokens is not None:
        lines.append(
            f"KV cache capacity: {e.kv_capacity_tokens} tokens ({e.kv_bytes_per_token} B/token per GPU)"
        )
    lines.extend(f"note: {n}" for n in e.notes)
    return "\n".join(lines)
