"""What the memory model takes and gives: its constants, its error, and the estimate it returns.

``OverheadConstants`` (per-GPU constants the model cannot derive; ``DEFAULTS``, configurable), ``SizingError``
(the inputs a component lacks), ``Component`` (one part of the memory per GPU) and ``Estimate`` (the result of
``estimate``: the components, the verdict and the capacity). No arithmetic here.
"""

from __future__ import annotations

from dataclasses import dataclass

from headroom.jsontypes import JsonDoc

MIB = 1024**2


class SizingError(ValueError):
    """The profile lacks inputs a component needs; ``missing`` lists the profile keys, ``message`` says why."""

    def __init__(self, message: str, missing: tuple[str, ...] = ()):
        super().__init__(message)
        self.missing = missing


@dataclass(frozen=True)
class OverheadConstants:
    """Per-GPU constants the model cannot derive (documented in docs/sizing.md; configurable)."""

    cuda_context_bytes: int = 512 * MIB  # per process per GPU; domain.md: 0.3-0.7 GiB
    runtime_overhead_bytes: int = 512 * MIB  # allocator slack, cuBLAS workspaces, NCCL buffers
    cpu_runtime_overhead_bytes: int = 512 * MIB  # host runtime for cpu-inference
    vllm_gpu_memory_utilization: float = 0.9  # vLLM's default
    vllm_block_size: int = 16  # vLLM's default KV block, tokens
    # runtime accounting (docs/sizing.md "Runtime accounting": the evidence for each value)
    vllm_cuda_context_bytes: int = 330 * MIB  # non-torch memory present before the worker's first snapshot
    vllm_non_torch_bytes: int = 32 * MIB  # non-torch growth during load and profile at TP 1 (cuBLAS workspace)
    nccl_bytes: int = 512 * MIB  # NCCL and custom all-reduce buffers per GPU at tensor parallel > 1
    cuda_graph_bytes: int = 512 * MIB  # graph pools captured after the KV cache is sized (outside the budget)
    # the profile run's sampler over max_num_seqs x vocabulary logits, bytes live per logit: sorted top-k/top-p
    # (vLLM 0.5-0.16) and in-place Triton top-k/top-p (0.17+); docs/sizing.md "Runtime accounting"
    sampler_bytes_per_logit: int = 39
    sampler_triton_bytes_per_logit: int = 15
    vllm_recent_non_torch_bytes: int = 256 * MIB  # non-torch growth at TP 1 measured with vLLM 0.18-0.19
    vllm_recent_comm_bytes: int = 1894 * MIB  # its growth at tensor parallel > 1 (0.19: 2.07-2.13 GiB in all)
    tgi_logit_bytes: int = 2  # the warm-up prefill's 16-bit logits over every prefill token (prefill_logprobs)
    gptq_awq_group_size: int = 128
    nf4_block_size: int = 64  # weights per absmax constant (bitsandbytes)
    nf4_double_quant_block_size: int = 256  # first-level constants per second-level FP32 constant
    logits_bytes: int = 4  # logits are upcast to FP32 for softmax / loss


DEFAULTS = OverheadConstants()


@dataclass(frozen=True)
class Component:
    name: str  # weights, kv_cache, gradients, optimizer_state, master_weights, adapter, activations ...
    bytes: int  # per GPU (the largest share when split unevenly)
    note: str = ""


@dataclass(frozen=True)
class Estimate:
    profile: str
    kind: str
    components: tuple[Component, ...]
    needed_bytes: int  # per GPU: the sum of components
    gpus_needed: int  # tensor x pipeline x data
    gpus_available: int | None
    gpu_memory_bytes: int | None  # per GPU as given (host RAM for cpu-inference)
    budget_bytes: int | None  # what the load must fit in: the vLLM reservation, else gpu_memory_bytes
    vllm_reservation_bytes: int | None  # gpu_memory_utilization x gpu_memory_bytes, vLLM only
    expected_usage_bytes: int  # per GPU as NVML would show: the vLLM reservation, else needed_bytes
    fits: bool | None  # None when the memory is not known
    margin_bytes: int | None  # budget - needed: positive = spare, negative = missing
    concurrency: int  # sequences (inference) or micro-batch (training) the estimate assumes
    context: int  # tokens per sequence the estimate assumes
    concurrency_label: str  # "concurrent sequences" or "micro-batch"
    max_concurrency_at_max_context: int | None
    max_context_at_concurrency: int | None
    kv_bytes_per_token: int | None  # per GPU, for one token of one sequence
    kv_capacity_tokens: int | None  # tokens the KV budget holds (vLLM's "GPU KV cache size")
    notes: tuple[str, ...] = ()
    max_concurrency: float | None = None  # the runtime's "Maximum concurrency for N tokens per request" (x)
    runtime_report: JsonDoc | None = None  # serving_memory.RuntimeReport.to_dict(): the runtime's own figures
    parallel: tuple[int, int, int] = (1, 1, 1)  # tensor, pipeline, data: the layout gpus_needed comes from

    @property
    def total_bytes(self) -> int:
        """Across all the workload's GPUs: needed per GPU x GPUs (an upper bound where shares are uneven)."""
        return self.needed_bytes * max(self.gpus_needed, 1)

    def component(self, name: str) -> int:
        """Bytes per GPU of the named component, 0 when the estimate has none by that name."""
        return next((c.bytes for c in self.components if c.name == name), 0)

    def to_dict(self) -> JsonDoc:
        """A JSON-ready dict; bytes are ints."""
        out: JsonDoc = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "components"}
        out["components"] = [{"name": c.name, "bytes": c.bytes, "note": c.note} for c in self.components]
        out["notes"] = list(self.notes)
        out["total_bytes"] = self.total_bytes
        return out
