"""Workload profile types: the enums and the frozen dataclasses a validated profile is made of.

``WorkloadProfile`` and its parts (``Model``, ``Runtime``, ``Architecture``, ``Context``, ``Training``, ``Lora``,
``ProcessMatch``, ``Load`` ...), the enums of the values a key may take (``Kind``, ``Precision``, ``Quantization``,
``Optimizer``, ``Sharding``, ``StateKind``) and the derived defaults (``effective_*``). No validation here
(``schema.py`` builds them from YAML), nothing reads the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


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
    sharding: Sharding = field(default_factory=lambda: Sharding.NONE)  # ZeRO / FSDP over the data-parallel ranks
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
