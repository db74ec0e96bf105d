"""Memory model: how many bytes a declared workload needs per GPU, and how much load fits.

One purpose a module, imported one way (types <- formulas <- runtime <- plan; report reads only types):

- ``types.py``: ``OverheadConstants`` (``DEFAULTS``), ``SizingError``, ``Component`` and ``Estimate``;
- ``formulas.py``: the building blocks, whatever the runtime: weights, KV cache per token, training state,
  LoRA adapters, activations, ZeRO / FSDP sharding, the parameters an architecture implies;
- ``runtime.py``: the model by serving runtime (vLLM, SGLang, TGI): KV layouts, non-torch memory, forward-pass
  tokens, and the runtime's own start-up report;
- ``plan.py``: ``estimate`` (a profile's plan, the budget, the largest concurrency and context that fit) and
  ``with_load``;
- ``report.py``: the verdict lines and the table ``headroom estimate`` prints (``fit_lines``, ``format_table``).

This module re-exports what the rest of the agent, the tests and the benchmarks import from
``headroom.workload.sizing``.

Pure functions over ``headroom.workload.profiles.WorkloadProfile``; bytes are ints; nothing reads the host.
Every constant and approximation is documented in docs/sizing.md, with its source. In short:

- weights      params x bits / 8; GPTQ/AWQ add an FP16 scale and a packed zero per group of 128;
               NF4 adds an FP32 absmax per 64 weights, or with double quantization an 8-bit one plus
               an FP32 constant per 256 blocks (~0.127 bit/param); embeddings stay unquantized.
- kv_cache     2 x layers x kv_heads x head_dim x bytes x tokens x sequences (vLLM: whole 16-token
               blocks); per GPU: kv_heads / tensor (at least 1), layers / pipeline.
- training     per trained parameter: weights + gradients + optimizer moments + FP32 master copy;
               16 B/param for FP16/BF16 + AdamW with 16-bit gradients, 18 B/param with FP32 gradients.
- adapter      LoRA/QLoRA: rank x (d_in + d_out) per adapted matrix per layer, with its own
               gradients, optimizer state and master copy.
- activations  training: Korthikanti et al. 2022 per layer s*b*h*(10 + 24/t + 5*a*s/(h*t)) bytes
               (no s^2 term with FlashAttention), or 2*s*b*h per layer plus one full layer with
               gradient checkpointing, plus FP32 logits; inference: one decoder layer's live set over
               the batched-token budget (chunked prefill), not concurrency x context.
- overhead     CUDA context and runtime overhead per GPU (OverheadConstants, configurable).
- runtimes     vLLM (per version), SGLang, TGI: their own start-up accounting (serving_memory): budget,
               weights, profile-run activation peak, non-torch memory, KV blocks, KV tokens and the
               fractional maximum concurrency they print.
- sharding     ZeRO 1-3 / FSDP over the data-parallel ranks, optimizer and parameter offload.

``estimate(profile, gpu_memory_bytes, gpus)`` returns an ``Estimate``: per-GPU components, whether it
fits, the margin, the largest concurrency at max context and the largest context at the declared
concurrency. Missing inputs raise ``SizingError`` naming all of them.
"""

from __future__ import annotations

from headroom.workload.sizing.formulas import (
    architecture_params,
    dense_bytes,
    inference_activation_bytes,
    kv_bytes_per_token,
    kv_cache_bytes,
    lora_adapter_params,
    training_activation_bytes,
    training_state_bytes_per_param,
    weight_bytes,
)
from headroom.workload.sizing.plan import estimate, with_load
from headroom.workload.sizing.report import fit_lines, format_table, gpu_shortfall
from headroom.workload.sizing.types import DEFAULTS, Component, Estimate, OverheadConstants, SizingError

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
