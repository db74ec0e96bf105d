"""Read a Hugging Face model's ``config.json`` (and its safetensors headers) into profile fields, offline.

This package re-exports what the rest of the agent, the tests and the benchmarks import from
``headroom.workload.modelconfig``; the reading is in ``architecture.py``.
"""

from __future__ import annotations

from headroom.workload.modelconfig.architecture import (
    ModelConfig,
    ModelConfigError,
    NotCached,
    cache_dirs,
    find_cached_model,
    model_config_from,
    read_model_config,
    safetensors_header,
    safetensors_tensors,
)

__all__ = ["ModelConfig", "ModelConfigError", "NotCached", "cache_dirs", "find_cached_model", "model_config_from",
           "read_model_config", "safetensors_header", "safetensors_tensors"]  # fmt: skip
