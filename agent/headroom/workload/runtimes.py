"""What each serving runtime is, as the rest of the agent meets it: its names, its /metrics and its memory.

One description per runtime (``DESCRIPTIONS``): how people call it, the names a profile's ``runtime.name`` may
use, the metric name prefixes of its /metrics exposition (the serving collector's detection, sources/serving.py)
and whether and how it reserves GPU memory up front (``Reservation``). A runtime that reserves makes a full card
its normal state: the GPU memory rule (analysis/bottleneck.py) asks :func:`reservation` about the runtime found
running on the GPU (its launcher's command line, the format of its serving metrics, or the declared profile's
``runtime``: analysis/pipeline.py), never a list of names of its own.

Pure: no I/O. The reservation figures are each runtime's own (its source or documentation, named in ``source``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Reservation:
    """How a runtime takes GPU memory up front, in words for the evidence."""

    setting: str  # what sizes it: the flag, environment variable or parameter
    default: str  # its default, as the runtime states it
    how: str  # what is taken, and when
    source: str  # where the runtime says so
    by: str = ""  # the part of the runtime that reserves, when not all of it (Triton: its TensorRT-LLM backend)


@dataclass(frozen=True)
class RuntimeDescription:
    name: str  # canonical: the launcher's ``Launcher.runtime`` and the serving collector's ``ServingEndpoint.runtime``
    label: str  # how people call it
    aliases: tuple[str, ...] = ()  # further spellings of a profile's runtime.name
    metrics: tuple[str, ...] = ()  # metric name prefixes that identify its /metrics exposition; () when it has none
    metrics_as: str | None = None  # the runtime its exposition is detected as, when another's (TensorRT-LLM: Triton)
    # (prefix as served, prefix as the runtime names it) of its families re-exported under another name: vLLM under
    # Ray Serve LLM (its RayPrometheusStatLogger, vllm/v1/metrics/ray_wrappers.py: ":" -> "_", and Ray's metrics
    # agent prefixes "ray_") serves vllm:num_requests_running as ray_vllm_num_requests_running
    renamed: tuple[tuple[str, str], ...] = ()
    # the JSON status endpoint read instead of a /metrics exposition, for a runtime that has none (Ollama's /api/ps:
    # its resident models and their VRAM); read for an endpoint whose profile declares the runtime
    status: str = ""
    reservation: Reservation | None = None  # None: it takes memory as it goes (a full card is not its normal state)
    # reserves only when its exposition carries a KV cache (Triton: only its TensorRT-LLM backend reserves one)
    reserves_with_kv_metrics: bool = False


_TRTLLM = Reservation(
    "kv_cache_free_gpu_mem_fraction", "0.9",
    "that share of the memory left free after the weights goes to the paged KV cache at start (Triton's "
    "tensorrtllm backend parameter; trtllm-serve --kv_cache_free_gpu_memory_fraction)",
    "https://github.com/NVIDIA/TensorRT-LLM/issues/2034", by="TensorRT-LLM")

DESCRIPTIONS: dict[str, RuntimeDescription] = {d.name: d for d in (
    RuntimeDescription("vllm", "vLLM", metrics=("vllm:", "ray_vllm_"), renamed=(("ray_vllm_", "vllm:"),),
                       reservation=Reservation(
        "--gpu-memory-utilization", "0.9",
        "that share of the card at start: weights, activations and a KV cache pool sized to fill the rest",
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory.html")),
    # under Ray Serve LLM: its Ray metric backend (python/sglang/srt/observability/ray_wrappers.py, sglang 0.5.15,
    # sgl-project/sglang#26252) names families as vLLM's does: sglang:num_running_reqs is ray_sglang_num_running_reqs
    RuntimeDescription("sglang", "SGLang", metrics=("sglang:", "ray_sglang_"), renamed=(("ray_sglang_", "sglang:"),),
                       reservation=Reservation(
        "--mem-fraction-static", "by GPU memory and tensor x pipeline size (serving_memory.sglang_mem_fraction)",
        "that share of the card for the weights and a static KV cache pool at start",
        "https://github.com/sgl-project/sglang/pull/9083")),
    RuntimeDescription("tgi", "TGI", aliases=("text-generation-inference",), metrics=("tgi_",), reservation=Reservation(
        "--cuda-memory-fraction", "1.0",
        "(CUDA_MEMORY_FRACTION) its warm-up gives most of what that share of the card leaves after the weights to KV cache blocks "
        "(max_batch_total_tokens; the share by version: serving_memory.TGI_RULES) and keeps them", "https://github.com/huggingface/text-generation-inference/pull/659")),
    RuntimeDescription("triton", "Triton", aliases=("tritonserver",), metrics=("nv_inference_", "nv_trt_llm_"),
                       reservation=_TRTLLM, reserves_with_kv_metrics=True),
    RuntimeDescription("tensorrt-llm", "TensorRT-LLM", aliases=("trtllm", "trtllm-serve", "tensorrt_llm"),
                       metrics_as="triton", reservation=_TRTLLM),
    RuntimeDescription("llama.cpp", "llama.cpp", aliases=("llamacpp", "llama-cpp", "llama-server"),
                       metrics=("llamacpp:",), reservation=Reservation(
        "-ngl and -c", "every layer offloaded, the model's context",
        "the offloaded weights stay resident and the KV cache for the whole context is allocated at load",
        "https://github.com/ggml-org/llama.cpp/tree/master/tools/server")),
    RuntimeDescription("ollama", "Ollama", status="/api/ps", reservation=Reservation(
        "OLLAMA_KEEP_ALIVE", "5 minutes",
        "a loaded model (its num_ctx x OLLAMA_NUM_PARALLEL context) stays resident (its weights and the KV cache for its context, allocated at load) until "
        "keep_alive expires", "https://github.com/ollama/ollama/blob/main/docs/faq.md")),
)}  # fmt: skip

# every spelling of a runtime's name -> its canonical name
ALIASES: dict[str, str] = {a: d.name for d in DESCRIPTIONS.values() for a in (d.name, *d.aliases)}


def canonical(name: str | None) -> str | None:
    """The canonical name of a runtime as a profile, a launcher or an exposition spells it; None when unknown."""
    return ALIASES.get((name or "").strip().lower()) if name else None


def label(name: str | None, reservation: Reservation | None = None) -> str:
    """How people call a runtime (its name as given when it is not described), with the part of it that holds
    ``reservation`` when that is not all of it ("Triton (TensorRT-LLM)")."""
    d = DESCRIPTIONS.get(canonical(name) or "")
    text = d.label if d is not None else (name or "")
    return f"{text} ({reservation.by})" if reservation is not None and reservation.by not in ("", text) else text


def reservation(name: str | None, endpoint: object = None) -> Reservation | None:
    """How the runtime ``name`` reserves GPU memory up front, or None when it does not (or is not known).
    ``endpoint``: its newest serving scrape (samples.ServingEndpoint) when it has one: a runtime that reserves only
    for a KV cache (Triton's TensorRT-LLM backend) reserves when its metrics carry one."""
    d = DESCRIPTIONS.get(canonical(name) or "")
    if d is None or d.reservation is None:
        return None
    if d.reserves_with_kv_metrics and not _has_kv(endpoint):
        return None
    return d.reservation


def _has_kv(endpoint: object) -> bool:
    """True when a scrape (samples.ServingEndpoint) or its window (analysis ServingSignals) reports a KV cache."""
    names = ("kv_cache_usage_ratio", "kv_cache_capacity_tokens", "usage", "capacity_tokens")
    return endpoint is not None and any(getattr(endpoint, n, None) is not None for n in names)


def running(profile: object, endpoint: object = None, auto: bool = False) -> tuple[str, str] | None:
    """(canonical runtime, how it was found) of what runs a workload: the format of its serving metrics when its
    newest scrape was read, else its profile's ``runtime``: a declared one, or (``auto``) an automatic workload's,
    which its launcher's command line gives (workload/launchers.py). None when neither names a described runtime."""
    served = canonical(getattr(endpoint, "runtime", None)) if getattr(endpoint, "up", False) else None
    if served is not None:
        return served, "its serving metrics"
    rt = getattr(profile, "runtime", None)
    declared = canonical(getattr(rt, "name", None))
    if declared is not None:
        return declared, "its launcher's command line" if auto else "its profile"
    return None


def metric_prefixes() -> Mapping[str, tuple[str, tuple[str, ...]]]:
    """runtime -> (label, metric name prefixes) of every runtime with an exposition of its own (sources/serving.py)."""
    return {d.name: (d.label, d.metrics) for d in DESCRIPTIONS.values() if d.metrics}


def renamed_prefixes() -> dict[str, str]:
    """Prefix as served -> prefix as the runtime names it, of every runtime's re-exported families (sources/serving.py
    reads ray_vllm_num_requests_running as vllm:num_requests_running)."""
    return {served: own for d in DESCRIPTIONS.values() for served, own in d.renamed}


def metrics_aliases() -> dict[str, str]:
    """Every spelling of a runtime's name -> the runtime its exposition is detected as (sources/serving.py)."""
    out: dict[str, str] = {}
    for d in DESCRIPTIONS.values():
        target = d.metrics_as or (d.name if d.metrics or d.status else None)
        if target is not None:
            out.update(dict.fromkeys((d.name, *d.aliases), target))
    return out


__all__ = ["ALIASES", "DESCRIPTIONS", "Reservation", "RuntimeDescription", "canonical", "label", "metric_prefixes",
           "metrics_aliases", "renamed_prefixes", "reservation", "running"]
