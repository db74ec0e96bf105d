"""Workload profiles: what a workload declares about itself, and how it is recognised on the host.

One purpose a module:

- ``types.py``: the enums and frozen dataclasses of a validated profile (``WorkloadProfile`` and its parts);
- ``reader.py``: the checked reading of a YAML mapping (``_Reader``) and the errors (``ProfileError``,
  ``ProfileErrors``, ``format_path``);
- ``matching.py``: how a profile is recognised on the host: ``match`` rules (``compile_cmdline_pattern``: RE2),
  ``gpus``, ``endpoint``;
- ``schema.py``: the keys each section accepts (``PROFILE_KEYS``) and ``profile_from_dict``, which validates one
  profile and refuses impossible combinations.

This module re-exports what the rest of the agent, the tests and the benchmarks import from
``headroom.workload.profiles``.

``profile_from_dict(d)`` turns one YAML mapping (already loaded) into a frozen ``WorkloadProfile``, or
raises ``ProfileErrors`` carrying every problem found, each a ``ProfileError`` with a field path relative
to the profile (``("architecture", "kv_heads")``, ``("gpus", 1)``) so the config loader can point at the
file, line and column. Nothing here reads files or touches the host.

YAML keys (snake_case; unknown keys are errors; everything but ``name``, ``kind`` and one way of
attribution is optional; the memory model in ``headroom.workload.sizing`` says which inputs each estimate needs):

| key                                | type / values                                     | notes                                   |
|------------------------------------|---------------------------------------------------|-----------------------------------------|
| name                               | string [A-Za-z0-9][A-Za-z0-9_.-]*, <= 64 chars    | required; the ``workload`` label        |
| kind                               | inference, training, finetune-full,               | required                                |
|                                    | finetune-lora, finetune-qlora, cpu-inference,     |                                         |
|                                    | embedding                                         | embedding: no KV cache                  |
| model                              | {name, version} or a string (the name)            | versions are strings: quote "1.10"      |
| runtime                            | {name, version, gpu_memory_utilization,           | gpu_memory_utilization: vllm only;      |
|                                    | block_size, max_num_batched_tokens, max_num_seqs, | mem_fraction_static: sglang only        |
|                                    | mem_fraction_static, kv_cache_memory_bytes} or a  | kv_cache_memory_bytes: vllm only        |
|                                    | string                                            |                                         |
| params                             | 7B, 7e9, 70000000000                              | parameter count                         |
| precision                          | fp32, fp16, bf16, fp8, int8, int4                 | how the weights are stored              |
| quantization                       | none, gptq, awq, nf4, or {method, group_size,     | group_size: gptq/awq (128);             |
|                                    | double_quant}                                     | double_quant: nf4 (default true)        |
| compute_precision                  | fp32, fp16, bf16                                  | activations; default: precision if      |
|                                    |                                                   | 16/32-bit, else bf16                    |
| kv_cache_precision                 | fp32, fp16, bf16, fp8, int8, int4                 | inference only; default compute_prec.   |
| architecture                       | {layers, heads, kv_heads, head_dim, hidden_size,  | kv_heads defaults to heads (as in HF    |
|                                    | intermediate_size, vocab_size, tie_embeddings,    | configs); head_dim to hidden/heads;     |
|                                    | sliding_window, sliding_window_layers, kv_layers, | the rest describe sliding-window, MLA,  |
|                                    | kv_lora_rank, qk_rope_head_dim, q_lora_rank,      | hybrid and MoE models (docs/sizing.md)  |
|                                    | experts_per_token, moe_intermediate_size,         |                                         |
|                                    | state_kind, state_layers, state_conv_dim,         |                                         |
|                                    | state_conv_kernel, state_groups, state_heads,     |                                         |
|                                    | state_head_dim, state_size, state_precision}      |                                         |
| context                            | {typical, max} or an int (= max)                  | tokens per sequence, prompt + output    |
| output_tokens                      | int                                               | expected output length; < context.max   |
| concurrency                        | int >= 1                                          | inference: concurrent sequences per     |
|                                    |                                                   | replica                                 |
| training                           | {optimizer, gradient_precision, master_weights,   | training and fine-tuning kinds only;    |
|                                    | gradient_checkpointing, flash_attention,          | sharding: none, zero1-3, fsdp-*;        |
|                                    | batch_size, micro_batch, sharding,                | offload_params needs stage 3            |
|                                    | offload_optimizer, offload_params}                |                                         |
| lora                               | {rank, alpha, target_modules, precision, params}  | finetune-lora / finetune-qlora only     |
| dataloader_workers                 | int >= 0                                          |                                         |
| parallel                           | {tensor, pipeline, data}                          | ints >= 1, default 1                    |
| gpus                               | [0, "GPU-...", "MIG-..."]                         | indices or UUIDs                        |
| match                              | {cmdline, exe, systemd_unit, cgroup, pid_file,    | cmdline is a regular expression,        |
|                                    | container_id}                                     | cgroup a glob, pid_file absolute        |
| endpoint                           | http(s) URL of the serving /metrics               | default: detected from the command line |
| slo                                | {ttft_p95: 500ms, itl_p99: 50ms, ...,             | ttft_pNN, itl_pNN (NN: 50, 95, 99);     |
|                                    | error_rate: 1%}                                   | latency objectives need endpoint or     |
|                                    |                                                   | match.cmdline; error_rate (a ratio or   |
|                                    |                                                   | N%) is the probe's error budget         |
| load                               | {input_tokens, output_tokens, concurrency, rate}  | the load ``headroom probe`` drives      |
|                                    | input/output_tokens: {typical, max, distribution} | (docs/probe.md): tokens per request     |
|                                    | or an int (= typical); distribution: fixed,       | (fixed: every request at typical;       |
|                                    | exponential; concurrency: {normal, peak} or int;  | exponential: mean typical, capped at    |
|                                    | rate: {normal, peak} or a number (requests/s)     | max); inference kinds only              |
| cost_per_gpu_hour                  | number >= 0                                       | in the operator's currency              |
| weight_bytes                       | int                                               | weights as stored (safetensors headers) |
| job                                | name, like ``name``                               | a job spanning hosts (the same on each) |
| team                               | name, like ``name``                               | who runs it (fleet cost rules)          |

Attribution rule: a profile needs at least one ``match`` rule, an explicit ``gpus`` list or an ``endpoint``; without
any no process, no GPU and no runtime could ever be attributed to it, so it is rejected. A profile with only an
``endpoint`` is its serving runtime's view: no process or GPU is attributed to it (docs/analysis.md).
"""

from __future__ import annotations

from headroom.workload.profiles.matching import compile_cmdline_pattern
from headroom.workload.profiles.reader import ProfileError, ProfileErrors, format_path
from headroom.workload.profiles.schema import PROFILE_KEYS, SLO_KEYS, profile_from_dict
from headroom.workload.profiles.types import (
    KINDS,
    LORA_ALL_LINEAR,
    OPTIMIZERS,
    PRECISIONS,
    QUANTIZATIONS,
    Architecture,
    Kind,
    Optimizer,
    Precision,
    Quantization,
    QuantizationSpec,
    Sharding,
    StateKind,
    Training,
    WorkloadProfile,
)

__all__ = ["KINDS", "LORA_ALL_LINEAR", "OPTIMIZERS", "PRECISIONS", "PROFILE_KEYS", "QUANTIZATIONS", "SLO_KEYS",
           "Architecture", "Kind", "Optimizer", "Precision", "ProfileError", "ProfileErrors", "Quantization",
           "QuantizationSpec", "Sharding", "StateKind", "Training", "WorkloadProfile", "compile_cmdline_pattern",
           "format_path", "profile_from_dict"]  # fmt: skip
