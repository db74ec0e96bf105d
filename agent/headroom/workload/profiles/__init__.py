"""Workload profiles: what a workload declares about itself, and how it is recognised on the host.

This package re-exports what the rest of the agent, the tests and the benchmarks import from
``headroom.workload.profiles``; the profile schema and its validation are in ``schema.py``.
"""

from __future__ import annotations

from headroom.workload.profiles.schema import (
    KINDS,
    LORA_ALL_LINEAR,
    OPTIMIZERS,
    PRECISIONS,
    PROFILE_KEYS,
    QUANTIZATIONS,
    SLO_KEYS,
    Architecture,
    Kind,
    Optimizer,
    Precision,
    ProfileError,
    ProfileErrors,
    Quantization,
    QuantizationSpec,
    Sharding,
    StateKind,
    Training,
    WorkloadProfile,
    compile_cmdline_pattern,
    format_path,
    profile_from_dict,
)

__all__ = ["KINDS", "LORA_ALL_LINEAR", "OPTIMIZERS", "PRECISIONS", "PROFILE_KEYS", "QUANTIZATIONS", "SLO_KEYS",
           "Architecture", "Kind", "Optimizer", "Precision", "ProfileError", "ProfileErrors", "Quantization",
           "QuantizationSpec", "Sharding", "StateKind", "Training", "WorkloadProfile", "compile_cmdline_pattern",
           "format_path", "profile_from_dict"]  # fmt: skip
