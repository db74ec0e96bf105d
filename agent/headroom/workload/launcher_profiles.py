"""The profile of an automatic workload started by a recognised launcher (launchers.py's ``parse``):
``auto_profile(launcher, model, name)`` -> the ``WorkloadProfile`` the memory model sizes (``source="auto"``),
or why it cannot be sized, and ``display_name(launcher)``, the workload's name.

Pure: the launcher's flags (dtype, quantization, KV cache dtype, parallel layout, context) and the model's
config.json as the identity collector read it; the runtimes' defaults stay the memory model's.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING

from headroom.jsontypes import YamlDict, YamlMapping
from headroom.samples import Launcher, ModelInfo

if TYPE_CHECKING:
    from headroom.workload.profiles.types import WorkloadProfile

_DTYPES = {"float16": "fp16", "half": "fp16", "fp16": "fp16", "bfloat16": "bf16", "bf16": "bf16",
           "float32": "fp32", "float": "fp32", "fp32": "fp32"}  # fmt: skip
_KV_DTYPES = {"fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "fp8-e4m3": "fp8", "fp8-e5m2": "fp8",
              "fp8_inc": "fp8", "float16": "fp16", "fp16": "fp16", "bfloat16": "bf16", "bf16": "bf16"}  # fmt: skip
# --quantization values -> (profile quantization method or None, weight precision)
_QUANT = {"awq": ("awq", "int4"), "awq_marlin": ("awq", "int4"), "gptq": ("gptq", None),
          "gptq_marlin": ("gptq", None), "bitsandbytes": ("nf4", "int4"), "bitsandbytes-nf4": ("nf4", "int4"),
          "fp8": (None, "fp8"), "fbgemm_fp8": (None, "fp8"), "eetq": (None, "int8"), "bitsandbytes-fp4": None}  # fmt: skip
_SIZED_RUNTIMES = {"vllm", "sglang", "tgi"}


def display_name(launcher: Launcher) -> str:
    """The automatic workload's name: ``<runtime>/<model's last part>:<port>`` for a server,
    ``<launcher>/<script>`` for a training launcher."""
    if launcher.role == "serving":
        base = launcher.model.rstrip("/").rsplit("/", 1)[-1] or "server"
        return f"{launcher.runtime}/{base}:{launcher.port}" if launcher.port else f"{launcher.runtime}/{base}"
    script = launcher.script.rstrip("/").rsplit("/", 1)[-1] or "job"
    return f"{launcher.runtime}/{script}"


@lru_cache(maxsize=256)
def auto_profile(launcher: Launcher, model: ModelInfo | None, name: str) -> tuple[WorkloadProfile, str | None]:
    """(WorkloadProfile, why it has no expected memory or None) of an automatic workload started by
    ``launcher``; ``model`` is its config.json as read (None: not looked up). The profile always exists
    (kind, runtime, parallel layout: what the bottleneck verdicts need); it is sized only when the model's
    architecture is known, else the reason says why and nothing is guessed."""
    from headroom.workload.profiles import ProfileErrors, profile_from_dict

    notes: list[str] = list(launcher.problems)
    fields: YamlDict = {}
    reason: str | None = None
    if model is not None and model.fields_json:
        try:
            fields = json.loads(model.fields_json)
        except ValueError:  # written by the collector; unreadable only in a damaged recording
            fields, reason = {}, "model config: unreadable fields in the recording"
    d = _base_profile(launcher, model, fields, notes)
    try:
        profile = profile_from_dict(d, attributable=False)
    except ProfileErrors as exc:
        # the command line (or config.json) makes a profile the memory model refuses: keep the layout-free
        # one (verdicts still work) and say why there is no expectation
        reason = "; ".join(f"{'.'.join(str(x) for x in e.path)}: {e.message}" for e in exc.errors)
        profile = profile_from_dict({"name": "auto", "kind": d["kind"], **({"runtime": {"name": d["runtime"]["name"]}}
                                     if d.get("runtime") else {})}, attributable=False)  # fmt: skip
    profile = replace(profile, name=name)
    if reason is None:
        reason = _unsized_reason(launcher, model, fields)
    if reason is not None and notes:
        reason = f"{reason} (command line: {'; '.join(notes)})"
    return profile, reason


def _unsized_reason(launcher: Launcher, model: ModelInfo | None, fields: YamlMapping) -> str | None:
    if launcher.role == "training":
        if not fields:
            return _model_reason(launcher, model)
        if launcher.sharding_unknown:
            return (f"{launcher.runtime}: sharding is set in {launcher.sharding_unknown}, which is not read; "
                    "nothing expected rather than a guess")
        return None
    if launcher.runtime not in _SIZED_RUNTIMES:
        return f"{launcher.runtime}: the memory model does not size this runtime's models"
    if not fields:
        return _model_reason(launcher, model)
    return None


def _model_reason(launcher: Launcher, model: ModelInfo | None) -> str:
    if not launcher.model:
        return f"{launcher.runtime}: no model on the command line"
    if model is None or not model.error:
        return f"model {launcher.model}: config.json not read"
    return f"model {launcher.model}: {model.error}"


def _base_profile(launcher: Launcher, model: ModelInfo | None, fields: YamlMapping,
                  notes: list[str]) -> YamlDict:
    """The profile mapping: config.json's fields, then what the command line says."""
    d: YamlDict = {k: v for k, v in fields.items() if k not in ("kind", "context", "model", "name")}
    d["name"] = "auto"
    serving = launcher.role == "serving"
    d["kind"] = ("embedding" if model is not None and model.encoder_only else "inference") if serving else "training"
    if launcher.model:
        d["model"] = {"name": launcher.model}
    if serving:
        runtime: YamlDict = {"name": launcher.runtime}
        if launcher.runtime == "vllm" and launcher.gpu_memory_utilization is not None:
            runtime["gpu_memory_utilization"] = launcher.gpu_memory_utilization
        if launcher.runtime == "sglang" and launcher.mem_fraction_static is not None:
            runtime["mem_fraction_static"] = launcher.mem_fraction_static
        for key in ("max_num_seqs", "max_num_batched_tokens"):
            if getattr(launcher, key) is not None:
                runtime[key] = getattr(launcher, key)
        d["runtime"] = runtime
        context = launcher.max_model_len or (model.max_context if model is not None else None)
        if context:
            d["context"] = {"max": context}
        parallel = {k: v for k, v in (("tensor", launcher.tensor_parallel), ("pipeline", launcher.pipeline_parallel),
                                      ("data", launcher.data_parallel)) if v}  # fmt: skip
    else:
        d["runtime"] = {"name": launcher.runtime}
        parallel = {"data": launcher.world_size} if launcher.world_size else {}
        if launcher.max_model_len:
            d["context"] = {"max": launcher.max_model_len}
        training: dict[str, object] = {k: v for k, v in (("micro_batch", launcher.micro_batch),
                                      ("gradient_checkpointing", launcher.gradient_checkpointing or None)) if v}
        if launcher.sharding:
            training["sharding"] = launcher.sharding
        if training:
            d["training"] = training
    if parallel:
        d["parallel"] = parallel
    _precision(launcher, d, notes, serving)
    return d


def _precision(launcher: Launcher, d: YamlDict, notes: list[str], serving: bool) -> None:
    """dtype, quantization and KV cache dtype flags over the checkpoint's own (config.json's)."""
    quantized = "quantization" in d or d.get("precision") in ("int4", "int8", "fp8")
    dtype = (launcher.dtype or "auto").lower()
    if dtype in _DTYPES:
        if quantized:
            d["compute_precision"] = _DTYPES[dtype]  # the activations' dtype; weights stay quantized
        else:
            d["precision"] = d["compute_precision"] = _DTYPES[dtype]
            d.pop("weight_bytes", None)  # the checkpoint's stored bytes no longer describe the weights
    elif dtype not in ("auto", "no", ""):
        notes.append(f"dtype {launcher.dtype!r} not modelled; the checkpoint's is assumed")
    elif serving and d.get("precision") == "fp32":
        d["precision"] = d["compute_precision"] = "bf16"  # dtype auto serves an FP32 checkpoint in 16 bits
        d.pop("weight_bytes", None)
    q = launcher.quantization.lower()
    if q and q not in ("none", "no"):
        spec = _QUANT.get(q)
        if spec is None:
            notes.append(f"quantization {launcher.quantization!r} not modelled; the checkpoint's is assumed")
        else:
            method, precision = spec
            if method is not None:
                d["quantization"] = {**(d.get("quantization") or {}), "method": method} \
                    if (d.get("quantization") or {}).get("method") == method else {"method": method}
            else:
                d.pop("quantization", None)
            if precision is not None:
                d["precision"] = precision
            elif d.get("precision") not in ("int4", "int8"):
                d["precision"] = "int4"
            d.pop("weight_bytes", None)
    kv = launcher.kv_cache_dtype.lower()
    if kv and kv != "auto":
        if kv in _KV_DTYPES:
            d["kv_cache_precision"] = _KV_DTYPES[kv]
        else:
            notes.append(f"kv cache dtype {launcher.kv_cache_dtype!r} not modelled; the compute dtype is assumed")
