"""Memory model: how many bytes a declared workload needs per GPU, and how much load fits.

This package re-exports what the rest of the agent, the tests and the benchmarks import from
``headroom.workload.sizing``; the model is in ``plan.py``.
"""

from __future__ import annotations

from headroom.workload.sizing.plan import (
    DEFAULTS,
    Component,
    Estimate,
    OverheadConstants,
    SizingError,
    architecture_params,
    dense_bytes,
    estimate,
    fit_lines,
    format_table,
    gpu_shortfall,
    inference_activation_bytes,
    kv_bytes_per_token,
    kv_cache_bytes,
    lora_adapter_params,
    training_activation_bytes,
    training_state_bytes_per_param,
    weight_bytes,
    with_load,
)

__all__ = [
    "DEFAULTS",
    "Component",
    "Estimate",
    "OverheadConstants",
    "SizingError",
    "architecture_params",
    "dense_bytes",
    "estimate",
    "fit_lines",
    "format_table",
    "gpu_shortfall",
    "inference_activation_bytes",
    "kv_bytes_per_token",
    "kv_cache_bytes",
    "lora_adapter_params",
    "training_activation_bytes",
    "training_state_bytes_per_param",
    "weight_bytes",
    "with_load",
]
