"""Read a Hugging Face model's ``config.json`` (and its safetensors headers) into profile fields, offline.

One purpose a module, imported one way (fields <- safetensors <- architecture <- reading):

- ``fields.py``: ``ModelConfig``, ``ModelConfigError`` (``NotCached``) and each integer field read within its
  bound (``MAX_LAYERS`` ... ``MAX_TOKENS``);
- ``safetensors.py``: safetensors headers and ``model.safetensors.index.json``, scanned incrementally: the
  parameter count and the bytes as stored;
- ``architecture.py``: the architecture rules (``model_config_from``): dimensions and their aliases, MoE, MLA,
  sliding-window, hybrid and recurrent-state layouts, encoders, precision and quantization;
- ``reading.py``: ``read_model_config`` (a config.json or its directory, through safeio.Tree) and
  ``find_cached_model`` (the local Hugging Face cache).

This module re-exports what the rest of the agent, the tests and the benchmarks import from
``headroom.workload.modelconfig``.

Small API, shared by ``headroom estimate`` and (later) automatic workload profiles:

- ``read_model_config(path)``: ``path`` is a ``config.json`` or the directory holding it. Returns a
  ``ModelConfig`` whose ``fields`` is a profile mapping fragment (``params``, ``precision``,
  ``quantization``, ``architecture``) that ``profiles.profile_from_dict`` validates like any other.
- ``find_cached_model(name)``: ``ORG/NAME`` -> the snapshot directory in the local Hugging Face cache
  (``HF_HUB_CACHE``, ``HF_HOME/hub``, ``~/.cache/huggingface/hub``); nothing is downloaded.

Every problem raises ``ModelConfigError`` naming the config.json field (or cache path) at fault.
The parameter count comes from the safetensors headers when the weight files are present (exact: the
tensor shapes, quantized tensors unpacked), else from ``model.safetensors.index.json``'s total size,
else from the architecture. Which config fields map to which profile key: docs/sizing.md, "Model
configs".
"""

from __future__ import annotations

from headroom.workload.modelconfig.architecture import model_config_from
from headroom.workload.modelconfig.fields import ModelConfig, ModelConfigError, NotCached
from headroom.workload.modelconfig.reading import cache_dirs, find_cached_model, read_model_config
from headroom.workload.modelconfig.safetensors import safetensors_header, safetensors_tensors

__all__ = ["ModelConfig", "ModelConfigError", "NotCached", "cache_dirs", "find_cached_model", "model_config_from",
           "read_model_config", "safetensors_header", "safetensors_tensors"]  # fmt: skip
