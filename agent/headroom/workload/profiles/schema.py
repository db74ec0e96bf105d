"""Workload profiles: what a workload declares about itself, and how it is recognised on the host.

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

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from headroom import units


# ------------------------------------------------------------------------------------------ enums
class Kind(StrEnum):
    INFERENCE = "inference"
    TRAINING = "training"
    FINETUNE_FULL = "finetune-full"
    FINETUNE_LORA = "finetune-lora"
    FINETUNE_QLORA = "finetune-qlora"
    CPU_INFERENCE = "cpu-inference"
    EMBEDDING = "embedding"  # encoder / embedding serving: a forward pass per request, no KV cache

    @property
    def is_inference(self) -> bool:
        """True for kinds that serve requests (concurrency applies)."""
        return self in (Kind.INFERENCE, Kind.CPU_INFERENCE, Kind.EMBEDDING)

    @property
    def has_kv_cache(self) -> bool:
        """True for kinds that generate token by token and so hold a KV cache."""
        return self in (Kind.INFERENCE, Kind.CPU_INFERENCE)

    @property
    def is_full_training(self) -> bool:
        """True when every parameter is trained (gradients and optimizer state for all of them)."""
        return self in (Kind.TRAINING, Kind.FINETUNE_FULL)

    @property
    def is_adapter(self) -> bool:
        """True for LoRA and QLoRA: frozen base, trained adapters."""
        return self in (Kind.FINETUNE_LORA, Kind.FINETUNE_QLORA)


class StateKind(StrEnum):
    """The recurrent state of a hybrid model's non-attention layers (vLLM's MambaStateShapeCalculator)."""

    MAMBA1 = "mamba1"  # Jamba: conv (inner, kernel - 1), SSM (inner, state_size)
    MAMBA2 = "mamba2"  # NemotronH, Granite 4.0-H, Falcon-H1, Bamba: conv (inner + 2 x groups x state, kernel - 1)
    GATED_DELTA_NET = "gated-delta-net"  # Qwen3-Next, Qwen3.5: conv (2 x k_heads x k_dim + v_heads x v_dim, ...)


class Precision(StrEnum):
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"

    @property
    def bits(self) -> int:
        """Bits per element: 32, 16, 16, 8, 8, 4."""
        return _BITS[self]


_BITS = {Precision.FP32: 32, Precision.FP16: 16, Precision.BF16: 16, Precision.FP8: 8, Precision.INT8: 8,
         Precision.INT4: 4}  # fmt: skip
FLOAT_PRECISIONS = (Precision.FP32, Precision.FP16, Precision.BF16)  # allowed for compute and gradients


class Quantization(StrEnum):
    NONE = "none"
    GPTQ = "gptq"
    AWQ = "awq"
    NF4 = "nf4"  # bitsandbytes 4-bit NormalFloat (QLoRA)


# the weight precisions each quantization method can produce; the first is the default
QUANTIZATION_PRECISIONS = {
    Quantization.GPTQ: (Precision.INT4, Precision.INT8),
    Quantization.AWQ: (Precision.INT4,),
    Quantization.NF4: (Precision.INT4,),
}


class Optimizer(StrEnum):
    ADAMW = "adamw"
    ADAM = "adam"
    ADAMW_8BIT = "adamw-8bit"
    ADAM_8BIT = "adam-8bit"
    SGD = "sgd"  # with momentum

    @property
    def state_bytes_per_param(self) -> int:
        """Optimizer state per trained parameter: Adam(W) 8 (two FP32 moments), 8-bit Adam 2, SGD momentum 4."""
        return {"adamw": 8, "adam": 8, "adamw-8bit": 2, "adam-8bit": 2, "sgd": 4}[self.value]


KINDS = tuple(k.value for k in Kind)
PRECISIONS = tuple(p.value for p in Precision)
QUANTIZATIONS = tuple(q.value for q in Quantization)
OPTIMIZERS = tuple(o.value for o in Optimizer)

# LoRA target modules whose shapes the memory model knows (Llama/Mistral/Qwen naming; fused variants)
LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "qkv_proj",
                "gate_up_proj")  # fmt: skip
LORA_ALL_LINEAR = "all-linear"


# ------------------------------------------------------------------------------------------ types
@dataclass(frozen=True)
class Model:
    name: str | None = None
    version: str | None = None


@dataclass(frozen=True)
class Runtime:
    name: str | None = None  # lower-cased: vllm, tgi, sglang, transformers, llama.cpp ...
    version: str | None = None
    gpu_memory_utilization: float | None = None  # vLLM only; ratio 0-1 of the card vLLM reserves
    block_size: int | None = None  # tokens per KV block (vLLM 16, TGI 16 or 1)
    max_num_batched_tokens: int | None = None  # tokens per forward pass (chunked-prefill budget)
    max_num_seqs: int | None = None  # sequences per step (vLLM's sampler profile uses it)
    mem_fraction_static: float | None = None  # SGLang only; weights + KV share of the card
    kv_cache_memory_bytes: int | None = None  # vLLM only (--kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE on CPU)

    @property
    def is_vllm(self) -> bool:
        """True when the runtime is vLLM (whose memory reservation the sizing model applies)."""
        return self.name == "vllm"


@dataclass(frozen=True)
class Architecture:
    layers: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    hidden_size: int | None = None
    intermediate_size: int | None = None
    vocab_size: int | None = None
    tie_embeddings: bool = False
    # KV layouts beyond plain multi-head / grouped-query attention (docs/sizing.md "KV layouts")
    sliding_window: int | None = None  # tokens a sliding-window layer attends to
    sliding_window_layers: int | None = None  # how many layers use it (default: all, when a window is set)
    kv_layers: int | None = None  # layers that hold a KV cache (hybrid models: attention layers only)
    kv_lora_rank: int | None = None  # MLA (DeepSeek V2/V3): latent KV width; K and V share one vector
    qk_rope_head_dim: int | None = None  # MLA: the decoupled RoPE key, cached next to the latent
    q_lora_rank: int | None = None  # MLA: the query's low-rank width (None: queries project from hidden_size)
    experts: int | None = None  # mixture of experts: routed experts per MoE layer (all are loaded)
    experts_per_token: int | None = None
    moe_intermediate_size: int | None = None
    # hybrid models' recurrent state per sequence (docs/sizing.md "KV layouts"); shapes as vLLM's
    # MambaStateShapeCalculator builds them: conv (state_conv_dim [+ 2 x state_groups x state_size], kernel - 1),
    # SSM (state_heads, state_head_dim, state_size)
    state_kind: StateKind | None = None
    state_layers: int | None = None  # layers keeping one (default: layers - kv_layers)
    state_conv_dim: int | None = None
    state_conv_kernel: int | None = None
    state_groups: int | None = None  # Mamba2's B/C groups (replicated up to the tensor degree)
    state_heads: int | None = None
    state_head_dim: int | None = None
    state_size: int | None = None
    state_precision: Precision | None = None  # the SSM state's dtype (default: the KV cache's)

    @property
    def effective_state_layers(self) -> int:
        """Layers with a recurrent state: state_layers, else layers - kv_layers for a hybrid model, else 0."""
        if self.state_kind is None:
            return 0
        if self.state_layers is not None:
            return self.state_layers
        if self.layers is not None and self.kv_layers is not None:
            return self.layers - self.kv_layers
        return 0

    @property
    def effective_kv_heads(self) -> int | None:
        """kv_heads, or heads when kv_heads is not given (multi-head attention, as HF configs default)."""
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def effective_head_dim(self) -> int | None:
        """head_dim, or hidden_size / heads when both are known and head_dim is not given."""
        if self.head_dim is not None:
            return self.head_dim
        if self.hidden_size is not None and self.heads:
            return self.hidden_size // self.heads
        return None

    @property
    def effective_hidden_size(self) -> int | None:
        """hidden_size, or heads x head_dim when those are known."""
        if self.hidden_size is not None:
            return self.hidden_size
        if self.heads is not None and self.head_dim is not None:
            return self.heads * self.head_dim
        return None


@dataclass(frozen=True)
class Context:
    typical: int | None = None  # tokens per sequence, prompt + output
    max: int | None = None


@dataclass(frozen=True)
class Lengths:
    """Tokens per request of a probe's load: every request at ``typical`` (fixed) or drawn around it."""

    typical: int | None = None
    max: int | None = None
    distribution: str = "fixed"  # DISTRIBUTIONS


@dataclass(frozen=True)
class Levels:
    """A load level at normal times and at the expected peak (concurrent requests, or requests/s)."""

    normal: float | None = None
    peak: float | None = None


@dataclass(frozen=True)
class Load:
    """What ``headroom probe`` drives against the workload's endpoint (``load:``; docs/probe.md)."""

    input_tokens: Lengths = field(default_factory=Lengths)
    output_tokens: Lengths = field(default_factory=Lengths)
    concurrency: Levels = field(default_factory=Levels)
    rate: Levels = field(default_factory=Levels)


@dataclass(frozen=True)
class QuantizationSpec:
    method: Quantization = Quantization.NONE
    group_size: int | None = None  # GPTQ/AWQ: parameters per scale+zero group (default 128 in sizing)
    double_quant: bool | None = None  # NF4: quantize the quantization constants too (QLoRA)


@dataclass(frozen=True)
class Parallelism:
    tensor: int = 1
    pipeline: int = 1
    data: int = 1

    @property
    def gpus(self) -> int:
        """GPUs the layout needs: tensor x pipeline x data."""
        return self.tensor * self.pipeline * self.data


@dataclass(frozen=True)
class Training:
    optimizer: Optimizer | None = None
    gradient_precision: Precision | None = None
    master_weights: bool | None = None  # FP32 copy of 16-bit trained weights; default: yes when 16-bit
    gradient_checkpointing: bool = False
    flash_attention: bool = True  # attention scores are never materialised (no s^2 activation term)
    batch_size: int | None = None  # global batch (sequences per optimizer step)
    micro_batch: int | None = None  # sequences per GPU per forward/backward pass
    sharding: Sharding = field(default_factory=lambda: Sharding())  # ZeRO / FSDP over the data-parallel ranks
    offload_optimizer: bool = False  # optimizer state and FP32 master weights kept in host memory
    offload_params: bool = False  # ZeRO-3 / FSDP full shard only: the 16-bit weights kept in host memory too


class Sharding(StrEnum):
    """What is sharded over the data-parallel ranks (ZeRO stage; FSDP strategies map onto them)."""

    NONE = "none"  # DDP, FSDP NO_SHARD
    ZERO1 = "zero1"  # optimizer state (and master weights)
    ZERO2 = "zero2"  # + gradients; FSDP SHARD_GRAD_OP
    ZERO3 = "zero3"  # + parameters; FSDP FULL_SHARD
    FSDP_FULL_SHARD = "fsdp-full-shard"
    FSDP_SHARD_GRAD_OP = "fsdp-shard-grad-op"
    FSDP_NO_SHARD = "fsdp-no-shard"

    @property
    def stage(self) -> int:
        """The ZeRO stage it amounts to: 0-3."""
        return {"none": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp-full-shard": 3, "fsdp-shard-grad-op": 2,
                "fsdp-no-shard": 0}[self.value]  # fmt: skip


@dataclass(frozen=True)
class Lora:
    rank: int | None = None
    alpha: float | None = None
    target_modules: tuple[str, ...] = ()
    precision: Precision = Precision.FP32  # adapter weights (PEFT keeps them in FP32 by default)
    params: int | None = None  # adapter parameter count, when the module shapes are not known


@dataclass(frozen=True)
class ProcessMatch:
    cmdline: str | None = None  # RE2 regular expression searched in the first CMDLINE_MATCH_BYTES of argv
    exe: str | None = None  # executable base name (comm / basename of /proc/PID/exe)
    systemd_unit: str | None = None
    cgroup: str | None = None  # glob over cgroup v2 paths
    pid_file: str | None = None
    container_id: str | None = None
    user: str | None = None  # the process's real user (a name); restricts the other rules
    uid: int | None = None  # the process's real uid; restricts the other rules

    @property
    def empty(self) -> bool:
        """True when no rule is set."""
        return not any(
            (self.cmdline, self.exe, self.systemd_unit, self.cgroup, self.pid_file, self.container_id, self.user)
        ) and self.uid is None


@dataclass(frozen=True)
class WorkloadProfile:
    name: str
    kind: Kind
    model: Model = field(default_factory=Model)
    runtime: Runtime = field(default_factory=Runtime)
    params: int | None = None
    precision: Precision | None = None
    quantization: QuantizationSpec = field(default_factory=QuantizationSpec)
    compute_precision: Precision | None = None
    kv_cache_precision: Precision | None = None
    architecture: Architecture = field(default_factory=Architecture)
    context: Context = field(default_factory=Context)
    output_tokens: int | None = None
    concurrency: int | None = None
    training: Training | None = None
    lora: Lora | None = None
    dataloader_workers: int | None = None
    parallel: Parallelism = field(default_factory=Parallelism)
    gpus: tuple[int | str, ...] = ()
    match: ProcessMatch = field(default_factory=ProcessMatch)
    endpoint: str | None = None
    cost_per_gpu_hour: float | None = None
    weight_bytes: int | None = None  # the checkpoint's tensor bytes as loaded (safetensors headers); wins over params
    job: str | None = None  # a (training) job spanning hosts: every host's profile names the same job
    team: str | None = None  # who runs and pays for it: fleet idle cost is summed per team
    slo: tuple[tuple[str, float], ...] = ()  # (objective, seconds), e.g. ("ttft_p95", 0.5)
    error_budget: float | None = None  # slo.error_rate: the share of failed requests a probe step may have
    load: Load | None = None  # what `headroom probe` drives (docs/probe.md)

    @property
    def effective_quantization(self) -> QuantizationSpec:
        """The declared quantization, or NF4 with double quantization for a finetune-qlora profile that
        declares none (the QLoRA paper's setup)."""
        q = self.quantization
        if self.kind == Kind.FINETUNE_QLORA and q.method == Quantization.NONE:
            return QuantizationSpec(method=Quantization.NF4, double_quant=True)
        return q

    @property
    def weight_precision(self) -> Precision | None:
        """The declared precision, or the default of the (effective) quantization method (int4)."""
        if self.precision is not None:
            return self.precision
        method = self.effective_quantization.method
        return QUANTIZATION_PRECISIONS[method][0] if method in QUANTIZATION_PRECISIONS else None

    @property
    def effective_compute_precision(self) -> Precision:
        """compute_precision, else the weight precision when it is a float format, else bf16."""
        if self.compute_precision is not None:
            return self.compute_precision
        p = self.weight_precision
        return p if p in FLOAT_PRECISIONS else Precision.BF16

    @property
    def effective_kv_cache_precision(self) -> Precision:
        """kv_cache_precision, else the compute precision (vLLM's kv_cache_dtype "auto")."""
        return self.kv_cache_precision or self.effective_compute_precision


# ----------------------------------------------------------------------------------------- errors
Path = tuple[str | int, ...]


def format_path(path: Path) -> str:
    """("gpus", 1, "x") -> "gpus[1].x"."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


class ProfileError(ValueError):
    """One problem in a profile: ``path`` (relative to the profile mapping) and a human ``message``."""

    def __init__(self, path: Path, message: str):
        super().__init__(f"{format_path(path) or '<profile>'}: {message}")
        self.path = tuple(path)
        self.message = message


class ProfileErrors(ValueError):
    """Every problem found in one profile, in document order as far as possible."""

    def __init__(self, errors: Sequence[ProfileError]):
        super().__init__("\n".join(str(e) for e in errors))
        self.errors = list(errors)


# ---------------------------------------------------------------------------------------- reading
_BAD = object()  # a value that failed validation; its error is already recorded
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_GPU_UUID = re.compile(r"^(GPU|MIG)-[0-9A-Za-z-]+$")
_CONTAINER_ID = re.compile(r"^[0-9a-f]{12,64}$")

_TOP_KEYS = ("name", "kind", "model", "runtime", "params", "precision", "quantization", "compute_precision",
             "kv_cache_precision", "architecture", "context", "output_tokens", "concurrency", "training", "lora",
             "dataloader_workers", "parallel", "gpus", "match", "endpoint", "cost_per_gpu_hour",
             "weight_bytes", "job", "team", "slo", "load")  # fmt: skip
_ARCH_KEYS = ("layers", "heads", "kv_heads", "head_dim", "hidden_size", "intermediate_size", "vocab_size",
              "tie_embeddings", "sliding_window", "sliding_window_layers", "kv_layers", "kv_lora_rank",
              "qk_rope_head_dim", "q_lora_rank", "experts", "experts_per_token", "moe_intermediate_size",
              "state_kind", "state_layers", "state_conv_dim", "state_conv_kernel", "state_groups", "state_heads",
              "state_head_dim", "state_size", "state_precision")  # fmt: skip
_ARCH_NON_INT = ("tie_embeddings", "state_kind", "state_precision")
_STATE_SHAPE = ("state_conv_dim", "state_conv_kernel", "state_heads", "state_head_dim", "state_size")
_TRAINING_KEYS = ("optimizer", "gradient_precision", "master_weights", "gradient_checkpointing",
                  "flash_attention", "batch_size", "micro_batch", "sharding", "offload_optimizer",
                  "offload_params")  # fmt: skip
_LORA_KEYS = ("rank", "alpha", "target_modules", "precision", "params")
_MATCH_KEYS = ("cmdline", "exe", "systemd_unit", "cgroup", "pid_file", "container_id", "user", "uid")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\$?$")  # what useradd accepts (NAME_REGEX, relaxed)
_RUNTIME_KEYS = ("name", "version", "gpu_memory_utilization", "block_size", "max_num_batched_tokens", "max_num_seqs",
                 "mem_fraction_static", "kv_cache_memory_bytes")  # fmt: skip
# latency objectives a profile may set: the serving analysis's percentiles (analysis/serving.py)
SLO_OBJECTIVES = tuple(f"{m}_p{q}" for m in ("ttft", "itl") for q in (50, 95, 99))
SLO_KEYS = (*SLO_OBJECTIVES, "error_rate")  # error_rate: the probe's error budget (a ratio), not a latency
_LOAD_KEYS = ("input_tokens", "output_tokens", "concurrency", "rate")
_LENGTH_KEYS = ("typical", "max", "distribution")
_LEVEL_KEYS = ("normal", "peak")
DISTRIBUTIONS = ("fixed", "exponential")  # how `headroom probe` draws each request's length (docs/probe.md)
MAX_LOAD_TOKENS = 1 << 20  # tokens per request a probe may ask for (far above any context window in use)
MAX_LOAD_CONCURRENCY = 4096  # concurrent requests a profile may declare (probe.MAX_CONCURRENCY bounds a run)
MAX_LOAD_RATE = 10_000.0  # requests/s a profile may declare (probe.MAX_RATE bounds a run)

# the keys each section accepts, for the config loader and docs (the tables in the module docstring)
PROFILE_KEYS = {
    "": _TOP_KEYS,
    "model": ("name", "version"),
    "runtime": _RUNTIME_KEYS,
    "quantization": ("method", "group_size", "double_quant"),
    "architecture": _ARCH_KEYS,
    "context": ("typical", "max"),
    "training": _TRAINING_KEYS,
    "lora": _LORA_KEYS,
    "parallel": ("tensor", "pipeline", "data"),
    "match": _MATCH_KEYS,
    "slo": SLO_KEYS,
    "load": _LOAD_KEYS,
}


# Every integer of a profile (declared, or made from another user's command line and config.json) is at most 2^53:
# exact as a float, so every figure the memory model derives stays a finite float that Prometheus can parse.
MAX_INTEGER = 2**53


def _short(v: Any) -> str:
    """A value as an error message quotes it: a 400-digit number is not repeated."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10**15:
        return f"a {len(str(abs(v)))}-digit number"
    text = repr(v)
    return text if len(text) <= 40 else f"{text[:40]}... ({len(text)} characters)"


class _Reader:
    def __init__(self) -> None:
        self.errors: list[ProfileError] = []

    def error(self, path: Path, message: str) -> object:
        self.errors.append(ProfileError(path, message))
        return _BAD

    def mapping(self, value: Any, path: Path, allowed: Sequence[str]) -> Mapping[str, Any] | None:
        """The mapping with unknown keys reported, or None (error recorded) when it is not a mapping."""
        if not isinstance(value, Mapping):
            self.error(path, f"expected a mapping with keys {', '.join(allowed)}; got {_kind_of(value)}")
            return None
        for key in value:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; allowed: {', '.join(allowed)}"
                self.error(path + (str(key),), f"unknown key {key!r}{hint}")
        return value

    # each converter returns the converted value, None when absent, or _BAD after recording an error
    def string(self, m: Mapping, key: str, path: Path) -> Any:
        if key not in m or m[key] is None:
            return None
        v = m[key]
        if isinstance(v, bool) or isinstance(v, int | float):
            return self.error(path + (key,), f'expected a string; got {v!r} (quote it: {key}: "{v}")')
        if not isinstance(v, str) or not v.strip():
            return self.error(path + (key,), f"expected a non-empty string; got {_kind_of(v)}")
        return v.strip()

    def integer(self, m: Mapping, key: str, path: Path, minimum: int) -> Any:
        if key not in m or m[key] is None:
            return None
        v = m[key]
        if isinstance(v, bool) or not isinstance(v, int):
            return self.error(path + (key,), f"expected an integer >= {minimum}; got {_short(v)}")
        if v < minimum:
            return self.error(path + (key,), f"must be >= {minimum}; got {_short(v)}")
        if v > MAX_INTEGER:
            return self.error(path + (key,), f"must be <= 2^53 ({MAX_INTEGER}); got {_short(v)}")
        return v

    def number(self, m: Mapping, key: str, path: Path, minimum: float, maximum: float | None = None,
               exclusive_minimum: bool = False) -> Any:  # fmt: skip
        if key not in m or m[key] is None:
            return None
        v = m[key]
        if isinstance(v, bool) or not isinstance(v, int | float) or v != v:
            return self.error(path + (key,), f"expected a number; got {v!r}")
        if abs(v) > 1e300:  # also keeps huge integers away from float() and :g (OverflowError)
            return self.error(path + (key,), "expected a finite number of a sensible size")
        if v < minimum or (exclusive_minimum and v == minimum):
            return self.error(
                path + (key,), f"must be {'>' if exclusive_minimum else '>='} {minimum:g}; got {v:g}"
            )
        if maximum is not None and v > maximum:
            return self.error(path + (key,), f"must be <= {maximum:g}; got {v:g}")
        return float(v)

    def boolean(self, m: Mapping, key: str, path: Path) -> Any:
        if key not in m or m[key] is None:
            return None
        v = m[key]
        if not isinstance(v, bool):
            return self.error(path + (key,), f"expected true or false; got {v!r}")
        return v

    def count(self, m: Mapping, key: str, path: Path) -> Any:
        if key not in m or m[key] is None:
            return None
        try:
            n = units.parse_count(m[key], what=key)
        except ValueError as exc:
            return self.error(path + (key,), str(exc))
        if n == 0:
            return self.error(path + (key,), "must be > 0")
        if n > MAX_INTEGER:
            return self.error(path + (key,), f"must be <= 2^53 ({MAX_INTEGER}); got {_short(n)}")
        return n

    def choice(
        self, m: Mapping, key: str, path: Path, enum: type[StrEnum], allowed: Sequence[Any] | None = None
    ) -> Any:
        if key not in m or m[key] is None:
            return None
        v = m[key]
        options = [e.value for e in (allowed if allowed is not None else list(enum))]
        if not isinstance(v, str) or v.strip().lower() not in options:
            return self.error(path + (key,), f"expected one of {', '.join(options)}; got {v!r}")
        return enum(v.strip().lower())


def _kind_of(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if value is None:
        return "nothing"
    return repr(value)


def _ok(*values: Any) -> bool:
    """True when every value is present and valid (neither None nor _BAD)."""
    return all(v is not None and v is not _BAD for v in values)


def _val(v: Any, default: Any = None) -> Any:
    return default if v is None or v is _BAD else v


# ------------------------------------------------------------------------------------------ parse
def profile_from_dict(d: Mapping[str, Any], attributable: bool = True) -> WorkloadProfile:
    """Return the WorkloadProfile described by ``d`` (one item of ``workloads:``).

    ``attributable`` False skips the "needs a match rule or gpus" check (``headroom estimate`` sizes a
    profile given on the command line that is never attributed to processes).

    Raises ProfileErrors listing every bad value, unknown key and impossible combination; field paths
    are relative to ``d``.
    """
    r = _Reader()
    top = r.mapping(d, (), _TOP_KEYS)
    if top is None:
        raise ProfileErrors(r.errors)

    name = r.string(top, "name", ())
    if name is None:
        r.error(("name",), "required: a short name for the workload (used as the workload label)")
    elif name is not _BAD and not _NAME.match(name):
        r.error(("name",), f"{name!r} must match [A-Za-z0-9][A-Za-z0-9_.-]* and be at most 64 characters")
        name = _BAD
    kind = r.choice(top, "kind", (), Kind)
    if "kind" not in top or top["kind"] is None:
        r.error(("kind",), f"required: one of {', '.join(KINDS)}")

    model = _model(r, top)
    runtime = _runtime(r, top)
    params = r.count(top, "params", ())
    precision = r.choice(top, "precision", (), Precision)
    quant = _quantization(r, top)
    compute = r.choice(top, "compute_precision", (), Precision, FLOAT_PRECISIONS)
    kv_precision = r.choice(top, "kv_cache_precision", (), Precision)
    arch = _architecture(r, top)
    context = _context(r, top)
    output_tokens = r.integer(top, "output_tokens", (), 1)
    concurrency = r.integer(top, "concurrency", (), 1)
    training = _training(r, top)
    lora = _lora(r, top)
    workers = r.integer(top, "dataloader_workers", (), 0)
    parallel = _parallel(r, top)
    gpus = _gpus(r, top)
    match = _match(r, top)
    endpoint = _endpoint(r, top)
    cost = r.number(top, "cost_per_gpu_hour", (), 0.0)
    weight_total = r.integer(top, "weight_bytes", (), 1)
    job, team = _group_name(r, top, "job"), _group_name(r, top, "team")
    slo, error_budget = _slo(r, top)
    load = _load(r, top)
    if _ok(load) and load is not None and _ok(kind) and not kind.has_kv_cache:
        r.error(("load",), f"load describes requests to a serving runtime that generates tokens; kind is {kind.value}")
    if _ok(slo) and slo and top.get("endpoint") is None and not (_ok(match) and match.cmdline):
        r.error(("slo",), "latency objectives are read from the serving runtime: set endpoint (its /metrics URL), "
                          "or a match.cmdline rule that finds the runtime's process (its --host/--port)")

    # --------------------------------------------------------------------- impossible combinations
    if _ok(kind):
        _check_kind(r, top, kind, precision, quant, kv_precision, concurrency, training, lora, runtime, gpus,
                    parallel)  # fmt: skip
    if _ok(quant) and _ok(precision) and quant.method in QUANTIZATION_PRECISIONS:
        allowed = QUANTIZATION_PRECISIONS[quant.method]
        if precision not in allowed:
            r.error(("precision",), f"{quant.method.value} stores weights as {', '.join(p.value for p in allowed)}; "
                                    f"got {precision.value}")  # fmt: skip
    if _ok(arch):
        _check_architecture(r, arch)
        if _ok(parallel):
            if arch.heads is not None and arch.heads % parallel.tensor:
                r.error(("parallel", "tensor"), f"tensor parallel degree {parallel.tensor} must divide the "
                                                f"{arch.heads} attention heads")  # fmt: skip
            if arch.layers is not None and parallel.pipeline > arch.layers:
                r.error(
                    ("parallel", "pipeline"),
                    f"pipeline degree {parallel.pipeline} exceeds the {arch.layers} layers",
                )
    if _ok(context):
        if context.typical is not None and context.max is not None and context.typical > context.max:
            r.error(("context", "typical"), f"typical context {context.typical} exceeds max {context.max}")
        if _ok(output_tokens) and context.max is not None and output_tokens >= context.max:
            r.error(("output_tokens",), f"output_tokens {output_tokens} must be below context.max {context.max} "
                                        "(context counts prompt and output tokens)")  # fmt: skip
    if _ok(training) and training.batch_size is not None and training.micro_batch is not None:
        if training.micro_batch > training.batch_size:
            r.error(("training", "micro_batch"), f"micro_batch {training.micro_batch} exceeds batch_size "
                                                 f"{training.batch_size}")  # fmt: skip
    if _ok(training) and training.master_weights:
        trained = (
            (_val(lora).precision if _ok(lora) else Precision.FP32)
            if _ok(kind) and kind.is_adapter
            else precision
        )
        if trained == Precision.FP32:
            r.error(("training", "master_weights"), "master weights are an FP32 copy of 16-bit trained weights; "
                                                    "the trained weights are already fp32")  # fmt: skip
    if _ok(gpus) and _ok(parallel) and gpus and len(gpus) < parallel.gpus:
        r.error(("gpus",), f"lists {len(gpus)} GPU(s) but parallel tensor {parallel.tensor} x pipeline "
                           f"{parallel.pipeline} x data {parallel.data} needs {parallel.gpus}")  # fmt: skip
    # a profile with only an endpoint: is its runtime's view (docs/analysis.md, "Serving runtimes"): no process and
    # no GPU are attributed to it, its runtime's /metrics are what it is judged from
    if (attributable and _ok(match) and match.empty and not _val(gpus) and not _val(endpoint)
            and not {"gpus", "match", "endpoint"} & _error_roots(r)):
        r.error(("match",), "a profile needs at least one match rule (cmdline, exe, systemd_unit, cgroup, pid_file, "
                            "container_id), an explicit gpus list or a serving endpoint; otherwise nothing can be "
                            "attributed to it")  # fmt: skip

    if r.errors:
        raise ProfileErrors(r.errors)
    return WorkloadProfile(
        name=name, kind=kind, model=model, runtime=runtime, params=params, precision=precision,
        quantization=quant, compute_precision=compute, kv_cache_precision=kv_precision, architecture=arch,
        context=context, output_tokens=output_tokens, concurrency=concurrency, training=training, lora=lora,
        dataloader_workers=workers, parallel=parallel, gpus=gpus, match=match, endpoint=endpoint,
        cost_per_gpu_hour=cost, weight_bytes=weight_total, job=job, team=team, slo=slo,
        error_budget=error_budget, load=load,
    )  # fmt: skip


def _error_roots(r: _Reader) -> set[str | int]:
    """First path elements that already carry an error (to avoid piling a second error on them)."""
    return {e.path[0] for e in r.errors if e.path}


def _model(r: _Reader, top: Mapping) -> Any:
    v = top.get("model")
    if v is None:
        return Model()
    if isinstance(v, str) and v.strip():
        return Model(name=v.strip())
    m = r.mapping(v, ("model",), ("name", "version"))
    if m is None:
        return _BAD
    name, version = r.string(m, "name", ("model",)), r.string(m, "version", ("model",))
    return _BAD if _BAD in (name, version) else Model(name, version)


def _runtime(r: _Reader, top: Mapping) -> Any:
    v = top.get("runtime")
    if v is None:
        return Runtime()
    if isinstance(v, str) and v.strip():
        return Runtime(name=v.strip().lower())
    p = ("runtime",)
    m = r.mapping(v, p, _RUNTIME_KEYS)
    if m is None:
        return _BAD
    name = r.string(m, "name", p)
    rt = Runtime(
        name=_val(name).lower() if _ok(name) else None,
        version=_val(r.string(m, "version", p)),
        gpu_memory_utilization=_val(
            r.number(m, "gpu_memory_utilization", p, 0.0, 1.0, exclusive_minimum=True)
        ),
        block_size=_val(r.integer(m, "block_size", p, 1)),
        max_num_batched_tokens=_val(r.integer(m, "max_num_batched_tokens", p, 1)),
        max_num_seqs=_val(r.integer(m, "max_num_seqs", p, 1)),
        mem_fraction_static=_val(r.number(m, "mem_fraction_static", p, 0.0, 1.0, exclusive_minimum=True)),
        kv_cache_memory_bytes=_val(_size(r, m, "kv_cache_memory_bytes", p)),
    )
    for key, owner, label in (("gpu_memory_utilization", "vllm", "a vLLM"), ("mem_fraction_static", "sglang", "an SGLang"),
                              ("kv_cache_memory_bytes", "vllm", "a vLLM")):  # fmt: skip
        if m.get(key) is not None and rt.name != owner:
            r.error(p + (key,), f"{key} is {label} setting; runtime.name is {rt.name or 'not set'}")
    return rt


def _size(r: _Reader, m: Mapping, key: str, path: Path) -> Any:
    """A size in bytes: an integer or a string with a unit (64MiB, 4GiB)."""
    if m.get(key) is None:
        return None
    try:
        n = units.parse_bytes(m[key], what=key)
    except ValueError as exc:
        return r.error(path + (key,), str(exc))
    if n < 1 or n > MAX_INTEGER:
        return r.error(path + (key,), f"must be between 1 byte and 2^53; got {_short(m[key])}")
    return n


def _quantization(r: _Reader, top: Mapping) -> Any:
    v = top.get("quantization")
    if v is None:
        return QuantizationSpec()
    p = ("quantization",)
    if isinstance(v, str):
        method = r.choice(top, "quantization", (), Quantization)
        return QuantizationSpec(method=method) if _ok(method) else _BAD
    m = r.mapping(v, p, ("method", "group_size", "double_quant"))
    if m is None:
        return _BAD
    method = r.choice(m, "method", p, Quantization)
    if "method" not in m:
        r.error(p + ("method",), f"required: one of {', '.join(QUANTIZATIONS)}")
    group = r.integer(m, "group_size", p, 1)
    double = r.boolean(m, "double_quant", p)
    if _ok(method):
        if group is not None and method not in (Quantization.GPTQ, Quantization.AWQ):
            r.error(p + ("group_size",), f"group_size applies to gptq and awq; method is {method.value}")
        if double is not None and method != Quantization.NF4:
            r.error(p + ("double_quant",), f"double_quant applies to nf4; method is {method.value}")
    if not _ok(method):
        return _BAD
    return QuantizationSpec(method=method, group_size=_val(group), double_quant=_val(double))


def _architecture(r: _Reader, top: Mapping) -> Any:
    v = top.get("architecture")
    if v is None:
        return Architecture()
    p = ("architecture",)
    m = r.mapping(v, p, _ARCH_KEYS)
    if m is None:
        return _BAD
    values = {k: r.integer(m, k, p, 1) for k in _ARCH_KEYS if k not in _ARCH_NON_INT}
    tie = r.boolean(m, "tie_embeddings", p)
    values["state_kind"] = r.choice(m, "state_kind", p, StateKind)
    values["state_precision"] = r.choice(m, "state_precision", p, Precision)
    if any(x is _BAD for x in values.values()) or tie is _BAD:
        return _BAD
    return Architecture(**values, tie_embeddings=bool(tie))


def _check_architecture(r: _Reader, a: Architecture) -> None:
    if a.heads is not None and a.kv_heads is not None:
        if a.kv_heads > a.heads:
            r.error(("architecture", "kv_heads"), f"kv_heads {a.kv_heads} exceeds heads {a.heads}")
        elif a.heads % a.kv_heads:
            r.error(("architecture", "kv_heads"), f"heads {a.heads} must be a multiple of kv_heads {a.kv_heads} "
                                                  "(grouped-query attention)")  # fmt: skip
    # heads x head_dim may differ from hidden_size (Gemma 7B: 16 x 256 vs 3072; Qwen3): both are kept as given
    if a.state_kind is not None:
        missing = [k for k in _STATE_SHAPE if getattr(a, k) is None]
        if missing:
            r.error(("architecture", missing[0]), f"a {a.state_kind.value} recurrent state needs "
                                                  f"{', '.join(missing)}")  # fmt: skip
        if a.state_layers is None and a.kv_layers is None:
            r.error(("architecture", "state_layers"), "a recurrent state needs state_layers (or kv_layers: the "
                                                      "other layers keep the state)")  # fmt: skip
    else:
        given = [k for k in (*_STATE_SHAPE, "state_layers", "state_groups", "state_precision")
                 if getattr(a, k) is not None]  # fmt: skip
        if given:
            r.error(("architecture", "state_kind"), f"{given[0]} is a recurrent-state field: give state_kind "
                                                    "(mamba1, mamba2, gated-delta-net)")  # fmt: skip
    for key in ("sliding_window_layers", "kv_layers", "state_layers"):
        if getattr(a, key) is not None and a.layers is not None and getattr(a, key) > a.layers:
            r.error(("architecture", key), f"{key} {getattr(a, key)} exceeds layers {a.layers}")
    if a.sliding_window_layers is not None and a.sliding_window is None:
        r.error(("architecture", "sliding_window"), "sliding_window_layers is set but the window size is not")
    if (a.kv_lora_rank is None) != (a.qk_rope_head_dim is None):
        missing = "qk_rope_head_dim" if a.qk_rope_head_dim is None else "kv_lora_rank"
        r.error(("architecture", missing), "MLA (latent KV) needs both kv_lora_rank and qk_rope_head_dim")
    if a.q_lora_rank is not None and a.kv_lora_rank is None:
        r.error(("architecture", "q_lora_rank"), "q_lora_rank is an MLA field: give kv_lora_rank and qk_rope_head_dim")
    if a.experts is not None and a.experts_per_token is not None and a.experts_per_token > a.experts:
        r.error(("architecture", "experts_per_token"), f"experts_per_token {a.experts_per_token} exceeds experts "
                                                      f"{a.experts}")  # fmt: skip


def _context(r: _Reader, top: Mapping) -> Any:
    v = top.get("context")
    if v is None:
        return Context()
    p = ("context",)
    if isinstance(v, int) and not isinstance(v, bool):
        return Context(max=v) if v >= 1 else r.error(p, f"must be >= 1 token; got {v}")
    if isinstance(v, str):
        return r.error(
            p, f"expected a number of tokens such as 8192 (suffixes like 8k are ambiguous); got {v!r}"
        )
    m = r.mapping(v, p, ("typical", "max"))
    if m is None:
        return _BAD
    typical, mx = r.integer(m, "typical", p, 1), r.integer(m, "max", p, 1)
    return Context(typical=_val(typical), max=_val(mx)) if _BAD not in (typical, mx) else _BAD


def _training(r: _Reader, top: Mapping) -> Any:
    v = top.get("training")
    if v is None:
        return None
    p = ("training",)
    m = r.mapping(v, p, _TRAINING_KEYS)
    if m is None:
        return _BAD
    fields = dict(
        optimizer=r.choice(m, "optimizer", p, Optimizer),
        gradient_precision=r.choice(m, "gradient_precision", p, Precision, FLOAT_PRECISIONS),
        master_weights=r.boolean(m, "master_weights", p),
        gradient_checkpointing=r.boolean(m, "gradient_checkpointing", p),
        flash_attention=r.boolean(m, "flash_attention", p),
        batch_size=r.integer(m, "batch_size", p, 1),
        micro_batch=r.integer(m, "micro_batch", p, 1),
        sharding=r.choice(m, "sharding", p, Sharding),
        offload_optimizer=r.boolean(m, "offload_optimizer", p),
        offload_params=r.boolean(m, "offload_params", p),
    )
    if fields["offload_params"] and fields["sharding"] not in (None, _BAD) and fields["sharding"].stage != 3:
        fields["offload_params"] = r.error(p + ("offload_params",), "parameter offload needs sharded parameters "
                                                                   "(sharding zero3 or fsdp-full-shard)")  # fmt: skip
    elif fields["offload_params"] and fields["sharding"] is None:
        fields["offload_params"] = r.error(p + ("offload_params",), "parameter offload needs sharding zero3 or "
                                                                   "fsdp-full-shard")  # fmt: skip
    if any(x is _BAD for x in fields.values()):
        return _BAD
    defaults = {"gradient_checkpointing": False, "flash_attention": True, "sharding": Sharding.NONE,
                "offload_optimizer": False, "offload_params": False}  # fmt: skip
    return Training(**{k: (defaults.get(k) if x is None else x) for k, x in fields.items()})


def _lora(r: _Reader, top: Mapping) -> Any:
    v = top.get("lora")
    if v is None:
        return None
    p = ("lora",)
    m = r.mapping(v, p, _LORA_KEYS)
    if m is None:
        return _BAD
    rank = r.integer(m, "rank", p, 1)
    alpha = r.number(m, "alpha", p, 0.0, exclusive_minimum=True)
    precision = r.choice(m, "precision", p, Precision, FLOAT_PRECISIONS)
    params = r.count(m, "params", p)
    modules: Any = ()
    raw = m.get("target_modules")
    if isinstance(raw, str):
        raw = [raw]
    if raw is not None:
        if not isinstance(raw, list) or not raw:
            modules = r.error(
                p + ("target_modules",), "expected a non-empty list of module names, or all-linear"
            )
        else:
            seen: list[str] = []
            for i, item in enumerate(raw):
                if not isinstance(item, str) or not item.strip():
                    r.error(p + ("target_modules", i), f"expected a module name; got {_kind_of(item)}")
                elif item in seen:
                    r.error(p + ("target_modules", i), f"{item!r} is listed twice")
                else:
                    seen.append(item.strip())
            modules = tuple(seen) if len(seen) == len(raw) else _BAD
    if _BAD in (rank, alpha, precision, params, modules):
        return _BAD
    return Lora(
        rank=rank, alpha=alpha, target_modules=modules, precision=precision or Precision.FP32, params=params
    )


def _parallel(r: _Reader, top: Mapping) -> Any:
    v = top.get("parallel")
    if v is None:
        return Parallelism()
    p = ("parallel",)
    m = r.mapping(v, p, ("tensor", "pipeline", "data"))
    if m is None:
        return _BAD
    degrees = {k: r.integer(m, k, p, 1) for k in ("tensor", "pipeline", "data")}
    if _BAD in degrees.values():
        return _BAD
    return Parallelism(**{k: x or 1 for k, x in degrees.items()})


def _gpus(r: _Reader, top: Mapping) -> Any:
    v = top.get("gpus")
    if v is None:
        return ()
    if not isinstance(v, list):
        return r.error(("gpus",), f"expected a list of GPU indices or UUIDs; got {_kind_of(v)}")
    out: list[int | str] = []
    bad = False
    for i, item in enumerate(v):
        path = ("gpus", i)
        if isinstance(item, bool) or not isinstance(item, int | str):
            r.error(path, f"expected a GPU index (0, 1 ...) or a UUID (GPU-..., MIG-...); got {item!r}")
        elif isinstance(item, int) and item < 0:
            r.error(path, f"GPU index must be >= 0; got {item}")
        elif isinstance(item, str) and not _GPU_UUID.match(item.strip()):
            r.error(path, f"{item!r} is not a GPU UUID (GPU-... or MIG-...); write indices as numbers")
        elif (item.strip() if isinstance(item, str) else item) in out:
            r.error(path, f"{item!r} is listed twice")
        else:
            out.append(item.strip() if isinstance(item, str) else item)
            continue
        bad = True
    return _BAD if bad else tuple(out)


def compile_cmdline_pattern(pattern: str) -> Any:
    """Compile a ``match.cmdline`` pattern with RE2 (linear time in the text, whatever the pattern:
    a command line from any local user must never stall the agent); ValueError says why it cannot.

    RE2 has Python's syntax minus backreferences (``\\1``), lookaround (``(?=``, ``(?<!``) and
    possessive or atomic groups: patterns that need backtracking are refused."""
    import re2

    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression: {exc}") from None
    except RecursionError:
        raise ValueError("invalid regular expression: nested too deeply") from None
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(f"RE2 cannot compile this pattern ({reason}): cmdline patterns must run in linear "
                         "time, so backreferences, lookaround and possessive groups are not supported") from None


def _excerpt(value: str, limit: int = 40) -> str:
    """A short quoted excerpt of a user value for error messages (never a whole file's content)."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + f"... ({len(value)} characters)"


def _match(r: _Reader, top: Mapping) -> Any:
    v = top.get("match")
    if v is None:
        return ProcessMatch()
    p = ("match",)
    m = r.mapping(v, p, _MATCH_KEYS)
    if m is None:
        return _BAD
    values = {k: r.string(m, k, p) for k in _MATCH_KEYS if k != "uid"}
    values["uid"] = r.integer(m, "uid", p, 0)
    if _ok(values["uid"]) and values["uid"] is not None and values["uid"] > 2**32 - 2:
        values["uid"] = r.error(p + ("uid",), f"must be <= {2**32 - 2}; got {values['uid']}")
    if _ok(values["user"]) and values["user"] is not None and not _USER.match(values["user"]):
        values["user"] = r.error(p + ("user",), f"not a user name: {_excerpt(values['user'])}")
    if _ok(values["cmdline"]):
        try:
            compile_cmdline_pattern(values["cmdline"])
        except ValueError as exc:
            values["cmdline"] = r.error(p + ("cmdline",), str(exc))
    if _ok(values["exe"]) and "/" in values["exe"]:
        values["exe"] = r.error(
            p + ("exe",), f"exe is the executable's base name, not a path; got {values['exe']!r}"
        )
    if _ok(values["pid_file"]) and not values["pid_file"].startswith("/"):
        values["pid_file"] = r.error(
            p + ("pid_file",), f"must be an absolute path; got {values['pid_file']!r}"
        )
    if _ok(values["container_id"]) and not _CONTAINER_ID.match(values["container_id"]):
        values["container_id"] = r.error(p + ("container_id",), "expected 12 to 64 lower-case hex digits; got "
                                                                f"{values['container_id']!r}")  # fmt: skip
    if _BAD in values.values():
        return _BAD
    return ProcessMatch(**values)


def _group_name(r: _Reader, top: Mapping, key: str) -> Any:
    """``job`` / ``team``: a name with the rules of ``name`` (it becomes a label value across the fleet)."""
    value = r.string(top, key, ())
    if value is not None and value is not _BAD and not _NAME.match(value):
        r.error((key,), f"{value!r} must match [A-Za-z0-9][A-Za-z0-9_.-]* and be at most 64 characters")
        return _BAD
    return value


def _ratio(r: _Reader, value: Any, path: Path) -> Any:
    """A ratio 0-1 given as a number (0.01) or a percentage ("1%")."""
    v = value
    if isinstance(v, str) and v.strip().endswith("%"):
        try:
            v = float(v.strip()[:-1]) / 100.0
        except ValueError:
            return r.error(path, f"expected a ratio such as 0.01 or 1%; got {_short(value)}")
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v or not 0 <= v <= 1:
        return r.error(path, f"expected a ratio between 0 and 1 (0.01) or a percentage (1%); got {_short(value)}")
    return float(v)


def _slo(r: _Reader, top: Mapping) -> tuple[Any, Any]:
    """(latency objectives, error budget): the latency objectives as (objective, seconds) pairs."""
    v = top.get("slo")
    if v is None:
        return (), None
    m = r.mapping(v, ("slo",), SLO_KEYS)
    if m is None:
        return _BAD, None
    budget = None if m.get("error_rate") is None else _ratio(r, m["error_rate"], ("slo", "error_rate"))
    out = []
    for key in SLO_OBJECTIVES:
        if m.get(key) is None:
            continue
        try:
            seconds = units.parse_duration(m[key])
        except ValueError as exc:
            r.error(("slo", key), f"{exc} (e.g. 500ms)")
            continue
        if seconds <= 0:
            r.error(("slo", key), "must be more than 0")
            continue
        out.append((key, seconds))
    return tuple(out), _val(budget)


def _lengths(r: _Reader, m: Mapping, key: str) -> Any:
    v = m.get(key)
    p = ("load", key)
    if v is None:
        return Lengths()
    if isinstance(v, int) and not isinstance(v, bool):
        v = {"typical": v}
    lm = r.mapping(v, p, _LENGTH_KEYS)
    if lm is None:
        return _BAD
    typical, mx = r.integer(lm, "typical", p, 1), r.integer(lm, "max", p, 1)
    for k, n in (("typical", typical), ("max", mx)):
        if _ok(n) and n > MAX_LOAD_TOKENS:
            r.error(p + (k,), f"must be <= {MAX_LOAD_TOKENS} tokens; got {n}")
            return _BAD
    dist = lm.get("distribution", "fixed")
    if dist not in DISTRIBUTIONS:
        return r.error(p + ("distribution",), f"expected one of {', '.join(DISTRIBUTIONS)}; got {_short(dist)}")
    if _BAD in (typical, mx):
        return _BAD
    if typical is not None and mx is not None and typical > mx:
        return r.error(p + ("typical",), f"typical {typical} exceeds max {mx}")
    if typical is None and mx is None:
        return r.error(p, "set typical (and optionally max) tokens per request")
    return Lengths(typical=typical if typical is not None else mx, max=mx, distribution=dist)


def _levels(r: _Reader, m: Mapping, key: str, integer: bool, limit: float) -> Any:
    v = m.get(key)
    p = ("load", key)
    if v is None:
        return Levels()
    if isinstance(v, int | float) and not isinstance(v, bool):
        v = {"normal": v}
    lm = r.mapping(v, p, _LEVEL_KEYS)
    if lm is None:
        return _BAD
    out = {}
    for k in _LEVEL_KEYS:
        n = r.integer(lm, k, p, 1) if integer else r.number(lm, k, p, 0.0, limit, exclusive_minimum=True)
        if _ok(n) and n > limit:
            n = r.error(p + (k,), f"must be <= {limit:g}; got {n:g}")
        out[k] = n
    if _BAD in out.values():
        return _BAD
    normal, peak = out["normal"], out["peak"]
    if normal is not None and peak is not None and peak < normal:
        return r.error(p + ("peak",), f"peak {peak:g} is below normal {normal:g}")
    return Levels(normal=normal if normal is not None else peak, peak=peak if peak is not None else normal)


def _load(r: _Reader, top: Mapping) -> Any:
    v = top.get("load")
    if v is None:
        return None
    m = r.mapping(v, ("load",), _LOAD_KEYS)
    if m is None:
        return _BAD
    parts = {"input_tokens": _lengths(r, m, "input_tokens"), "output_tokens": _lengths(r, m, "output_tokens"),
             "concurrency": _levels(r, m, "concurrency", True, MAX_LOAD_CONCURRENCY),
             "rate": _levels(r, m, "rate", False, MAX_LOAD_RATE)}
    return _BAD if _BAD in parts.values() else Load(**parts)


def _endpoint(r: _Reader, top: Mapping) -> Any:
    url = r.string(top, "endpoint", ())
    if not _ok(url):
        return url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return r.error(("endpoint",), f"expected an http:// or https:// URL; got {url!r}")
    return url


def _check_kind(r: _Reader, top: Mapping, kind: Kind, precision: Any, quant: Any, kv_precision: Any,
                concurrency: Any, training: Any, lora: Any, runtime: Any, gpus: Any, parallel: Any) -> None:  # fmt: skip
    """Record the combinations the kind rules out."""
    if lora is not None and not kind.is_adapter:
        r.error(("lora",), f"lora applies to finetune-lora and finetune-qlora; kind is {kind.value}")
    if training is not None and kind.is_inference:
        r.error(("training",), f"training settings do not apply to kind {kind.value}")
    if concurrency is not None and not kind.is_inference:
        r.error(
            ("concurrency",), f"concurrency applies to inference; for {kind.value} set training.micro_batch"
        )
    if kv_precision is not None and not kind.has_kv_cache:
        r.error(("kv_cache_precision",), f"a KV cache is held by inference; kind is {kind.value}")
    method = quant.method if _ok(quant) else None
    if kind.is_full_training:
        if method not in (None, Quantization.NONE):
            r.error(("quantization",), f"{kind.value} trains every weight; quantized ({method.value}) weights "
                                       "cannot be trained directly (use finetune-qlora)")  # fmt: skip
        if _ok(precision) and precision not in FLOAT_PRECISIONS:
            r.error(("precision",), f"{kind.value} needs fp32, fp16 or bf16 weights; got {precision.value}")
    if kind == Kind.FINETUNE_LORA and method not in (None, Quantization.NONE):
        r.error(("quantization",), f"a {method.value}-quantized base is QLoRA: use kind finetune-qlora")
    if kind == Kind.FINETUNE_QLORA:
        if method == Quantization.NONE and "quantization" in top:
            r.error(("quantization",), "finetune-qlora needs a 4-bit quantized base (nf4, gptq or awq)")
        elif _ok(precision) and precision != Precision.INT4:
            r.error(("precision",), f"finetune-qlora keeps the base in 4 bits (int4); got {precision.value}")
    if kind == Kind.CPU_INFERENCE:
        if _ok(gpus) and gpus:
            r.error(("gpus",), "cpu-inference uses no GPU; remove gpus or use kind inference")
        if _ok(parallel):
            for key in ("tensor", "pipeline"):
                if getattr(parallel, key) > 1:
                    r.error(
                        ("parallel", key), f"cpu-inference does not split the model over GPUs ({key} > 1)"
                    )
        if _ok(runtime) and runtime.gpu_memory_utilization is not None:
            r.error(("runtime", "gpu_memory_utilization"), "cpu-inference reserves no GPU memory")
