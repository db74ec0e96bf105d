"""`headroom estimate`: size a workload from flags or from a profile, against given or found GPUs.

The profile goes through the same validation as config.yaml (``profiles.profile_from_dict``) and the
same memory model as the running agent (``sizing.estimate``); flags only build the profile mapping.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from headroom import units
from headroom.jsontypes import JsonMapping, YamlDict, YamlValue
from headroom.workload.profiles import (
    KINDS,
    OPTIMIZERS,
    PRECISIONS,
    QUANTIZATIONS,
    ProfileErrors,
    profile_from_dict,
)

if TYPE_CHECKING:
    from headroom.config import Config
    from headroom.workload.modelconfig.fields import ModelConfig
    from headroom.workload.profiles.types import WorkloadProfile
    from headroom.workload.sizing.types import Estimate

# flag -> (path in the profile mapping, how to parse the text, help)
_FLAGS: dict[str, tuple[tuple[str, ...], type[str | int | float], str]] = {
    "--name": (("name",), str, "workload name (default: estimate)"),
    "--kind": (("kind",), str, f"one of {', '.join(KINDS)} (default inference)"),
    "--params": (("params",), str, "parameter count: 7B, 7e9, 70000000000"),
    "--precision": (("precision",), str, f"weight precision: {', '.join(PRECISIONS)}"),
    "--quantization": (("quantization",), str, f"one of {', '.join(QUANTIZATIONS)}"),
    "--compute-precision": (("compute_precision",), str, "activation/compute precision"),
    "--kv-cache-precision": (("kv_cache_precision",), str, "KV cache precision (default: compute precision)"),
    "--layers": (("architecture", "layers"), int, "transformer layers"),
    "--heads": (("architecture", "heads"), int, "attention heads"),
    "--kv-heads": (("architecture", "kv_heads"), int, "KV heads (GQA/MQA)"),
    "--head-dim": (("architecture", "head_dim"), int, "dimension per head"),
    "--hidden-size": (("architecture", "hidden_size"), int, "hidden size"),
    "--intermediate-size": (("architecture", "intermediate_size"), int, "MLP intermediate size"),
    "--vocab-size": (("architecture", "vocab_size"), int, "vocabulary size"),
    "--context": (("context", "max"), int, "maximum tokens per sequence (prompt + output)"),
    "--concurrency": (("concurrency",), int, "concurrent sequences (inference)"),
    "--runtime": (("runtime", "name"), str, "serving runtime: vllm, sglang or tgi apply their own start-up accounting"),
    "--runtime-version": (("runtime", "version"), str, "runtime version, e.g. vLLM 0.6.3 / 0.10.1 / 0.19.0, SGLang "
                                                        "0.4.9, TGI 2.4.0 (each runtime's accounting differs by "
                                                        "version; default: the newest documented)"),
    "--gpu-memory-utilization": (("runtime", "gpu_memory_utilization"), float, "vLLM's reservation ratio"),
    "--mem-fraction-static": (("runtime", "mem_fraction_static"), float, "SGLang's weights + KV share of the card"),
    "--kv-cache-memory": (("runtime", "kv_cache_memory_bytes"), str, "vLLM's --kv-cache-memory-bytes (e.g. 4GiB; on "
                                                                     "its CPU build also VLLM_CPU_KVCACHE_SPACE GiB)"),
    "--max-num-batched-tokens": (("runtime", "max_num_batched_tokens"), int, "tokens per forward pass (chunked "
                                                                              "prefill budget; bounds activations)"),
    "--max-num-seqs": (("runtime", "max_num_seqs"), int, "sequences per step (vLLM profiles its sampler with it)"),
    "--block-size": (("runtime", "block_size"), int, "tokens per KV block (vLLM 16)"),
    "--tensor-parallel": (("parallel", "tensor"), int, "tensor parallel degree"),
    "--pipeline-parallel": (("parallel", "pipeline"), int, "pipeline parallel degree"),
    "--data-parallel": (("parallel", "data"), int, "data parallel degree"),
    "--optimizer": (("training", "optimizer"), str, f"one of {', '.join(OPTIMIZERS)}"),
    "--gradient-precision": (("training", "gradient_precision"), str, "fp16 (16 B/param) or fp32 (18 B/param)"),
    "--micro-batch": (("training", "micro_batch"), int, "sequences per GPU per step (training)"),
    "--sharding": (("training", "sharding"), str, "none, zero1, zero2, zero3, fsdp-no-shard, fsdp-shard-grad-op, "
                                                  "fsdp-full-shard (over --data-parallel ranks)"),
    "--lora-rank": (("lora", "rank"), int, "LoRA rank"),
}
_BOOL_FLAGS = {"--gradient-checkpointing": ("training", "gradient_checkpointing"),
               "--offload-optimizer": ("training", "offload_optimizer"),
               "--offload-params": ("training", "offload_params")}  # fmt: skip
_BOOL_HELP = {"--gradient-checkpointing": "recompute activations in the backward pass",
              "--offload-optimizer": "optimizer state, master weights and gradients in host memory (ZeRO-Offload)",
              "--offload-params": "weights in host memory too (zero3 / fsdp-full-shard)"}  # fmt: skip
_LIST_FLAGS = {"--lora-target-modules": ("lora", "target_modules")}


# Any: argparse's private _SubParsersAction (cli.build_parser's subparsers)
def add_parser(sub: Any, add_source_flags: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "estimate",
        help="size a workload: memory per component, fits or not, max concurrency and context",
        description="Estimate the GPU memory a workload needs, from flags or from a profile in the configuration, "
                    "against --gpu-memory or the GPUs NVML finds (--simulate works too).",
    )
    for flag, (path, typ, help_) in _FLAGS.items():
        metavar = {int: "N", float: "RATIO"}.get(typ) or path[-1].upper()
        p.add_argument(flag, dest="est_" + flag[2:].replace("-", "_"), type=str, metavar=metavar, help=help_)
    for flag in _BOOL_FLAGS:
        p.add_argument(flag, dest="est_" + flag[2:].replace("-", "_"), action="store_true", default=None,
                       help=_BOOL_HELP[flag])
    for flag in _LIST_FLAGS:
        p.add_argument(flag, dest="est_" + flag[2:].replace("-", "_"), metavar="MODULES",
                       help="comma-separated, e.g. q_proj,v_proj")
    p.add_argument("--workload", metavar="NAME", help="take the profile NAME from the configuration instead of flags")
    p.add_argument("--model-config", metavar="PATH", help="a Hugging Face config.json (or its directory): architecture, "
                   "precision, quantization and (from safetensors headers) params; flags override")
    p.add_argument("--model", metavar="ORG/NAME", help="like --model-config, from the local Hugging Face cache, else from "
                   "headroom's table of well-known open models (Llama 3.x, Qwen 2.5/3, Mistral, Mixtral, Gemma 2/3, "
                   "DeepSeek, Phi; offline, nothing is downloaded)")
    p.add_argument("--gpu-memory", metavar="SIZE", help="memory per GPU as the framework sees it (torch.cuda.mem_get_info "
                   "total, e.g. 79.19GiB for an H100 80GB; default: the GPUs NVML finds)")
    p.add_argument("--gpu-name", metavar="NAME", help="GPU model as NVML names it, e.g. 'NVIDIA A100-SXM4-80GB' (vLLM's "
                   "defaults depend on it; default: the name NVML reports)")
    p.add_argument("--gpus", metavar="N", type=int, help="GPUs available (default: as many as the layout needs)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    add_source_flags(p)


class EstimateError(Exception):
    """A user error in the estimate's inputs; the message is printed as is."""


def _model_fields(args: argparse.Namespace) -> tuple[YamlDict, list[str]]:
    """The profile fields --model-config / --model read (empty without them), and notes on where from."""
    from headroom.workload import modelconfig

    path: str | None = getattr(args, "model_config", None)  # argparse's Namespace: attributes untyped
    name: str | None = getattr(args, "model", None)
    if not path and not name:
        return {}, []
    if path and name:
        raise EstimateError("--model and --model-config: give one of them")
    try:
        if name:
            mc = _named_model(name)
        else:
            assert path is not None  # one of the two is given
            mc = modelconfig.read_model_config(path)
    except modelconfig.ModelConfigError as exc:
        where = "" if exc.field.startswith(("--", "/")) else f"{path or name}: "
        raise EstimateError(f"{where}{exc}") from None
    fields = dict(mc.fields)
    notes_extra = []
    runtime = (getattr(args, "est_runtime", None) or "").lower()
    if runtime in ("vllm", "sglang", "tgi") and fields.get("precision") == "fp32":
        fields["precision"] = fields["compute_precision"] = "bf16"  # dtype "auto" serves FP32 checkpoints in 16 bits
        fields.pop("weight_bytes", None)
        notes_extra.append(f"{runtime} serves an FP32 checkpoint in 16 bits (dtype auto): bf16 assumed")
    if name:
        fields["model"] = {"name": name}
    if mc.encoder_only:
        fields["kind"] = "embedding"
    if mc.max_context and getattr(args, "est_context", None) is None:
        fields["context"] = {"max": mc.max_context}  # vLLM's default max_model_len
        notes_extra.append(f"--context not given: {mc.max_context} tokens (max_position_embeddings, vLLM's default "
                           "max_model_len)")  # fmt: skip
    notes = [f"model config {mc.source}: {mc.model_type or 'unknown type'}, layout {mc.layout}, params from "
             f"{mc.params_from}", *mc.notes, *notes_extra]  # fmt: skip
    return fields, notes


def _named_model(name: str) -> ModelConfig:
    """--model ORG/NAME: the local Hugging Face cache first (the checkpoint's own config.json and safetensors), else
    headroom's table of well-known models (headroom.workload.known_models: published config.json values)."""
    from headroom.workload import known_models, modelconfig

    try:
        return modelconfig.read_model_config(modelconfig.find_cached_model(name))
    except modelconfig.NotCached as exc:
        found = known_models.lookup(name)
        if found is None:
            hint = known_models.closest(name)
            raise EstimateError(f"--model {name}: not in the local Hugging Face cache and not among the "
                                f"{len(known_models.MODELS)} well-known models headroom ships"
                                + (f" (did you mean {' or '.join(hint)}?)" if hint else "")
                                + "; use --model-config PATH to a config.json, or the architecture flags; nothing is "
                                "downloaded") from exc  # fmt: skip
        known, config = found
        return modelconfig.model_config_from(config, f"headroom's table of well-known models ({known}, from "
                                                     f"{known_models.source(known)}; not in the local cache)")


def _merge(base: YamlDict, over: YamlDict) -> YamlDict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _flag_profile(args: argparse.Namespace) -> YamlDict:
    d: YamlDict = {"name": "estimate", "kind": "inference"}
    for flag, (path, typ, _) in {**_FLAGS, **{f: (p, str, "") for f, p in _LIST_FLAGS.items()},
                                 **{f: (p, bool, "") for f, p in _BOOL_FLAGS.items()}}.items():
        raw = getattr(args, "est_" + flag[2:].replace("-", "_"), None)
        if raw is None:
            continue
        value: YamlValue = raw
        if flag in _LIST_FLAGS:
            value = [x.strip() for x in raw.split(",") if x.strip()]
        elif typ is int:
            try:
                value = units.parse_count(raw, flag)
            except ValueError as exc:
                raise EstimateError(str(exc)) from None
        elif typ is float:
            try:
                value = float(raw)
            except ValueError:
                raise EstimateError(f"{flag}: expected a number, got {raw!r}") from None
        target = d
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = value
    if "context" in d:
        d["context"] = {"max": d["context"]["max"]}
    return d


def _flag_for(path: tuple[str | int, ...]) -> str:
    for flag, (p, _, _) in _FLAGS.items():
        if tuple(p) == tuple(path):
            return flag
    every = {**{f: p for f, (p, _, _) in _FLAGS.items()}, **_BOOL_FLAGS, **_LIST_FLAGS}
    for flag, p in every.items():  # a section-level error (e.g. "lora") names the flag that set it
        if tuple(p[: len(path)]) == tuple(path) or tuple(p) == tuple(path[: len(p)]):
            return flag
    return ".".join(str(x) for x in path)


def build_profile(args: argparse.Namespace, config: Config) -> WorkloadProfile:
    if args.workload:
        if getattr(args, "model_config", None) or getattr(args, "model", None):
            raise EstimateError("--workload takes the whole profile from the configuration; --model-config and "
                                "--model build one from flags instead: give one or the other")  # fmt: skip
        profile = config.workload(args.workload)
        if profile is None:
            names = ", ".join(w.name for w in config.workloads) or "none"
            raise EstimateError(f"no workload named {args.workload!r} in {config.source or 'the configuration'} "
                                f"(declared: {names})")
        return profile
    fields, _ = _model_fields(args)
    flags = _flag_profile(args)
    if fields.get("kind") == "embedding" and getattr(args, "est_kind", None) not in (None, "embedding"):
        raise EstimateError(f"--kind {args.est_kind}: the model config is an encoder-only model (no KV cache); "
                            "use --kind embedding")  # fmt: skip
    if "quantization" in fields and getattr(args, "est_precision", None) and not getattr(args, "est_quantization", None):
        fields.pop("quantization")  # an explicit --precision replaces the checkpoint's quantized storage
    if getattr(args, "est_precision", None) or getattr(args, "est_quantization", None) or getattr(args, "est_params", None):
        fields.pop("weight_bytes", None)  # the checkpoint's stored bytes no longer describe the weights
    d = _merge(fields, flags) if fields else flags
    if fields.get("kind") and not getattr(args, "est_kind", None):
        d["kind"] = fields["kind"]
    try:
        return profile_from_dict(d, attributable=False)
    except ProfileErrors as exc:
        raise EstimateError("\n".join(f"{_flag_for(e.path)}: {e.message}" for e in exc.errors)) from None


def run(args: argparse.Namespace, config: Config,
        find_gpus: Callable[[], tuple[int | None, int | None, str, str]]) -> tuple[int, str]:
    """(exit code, text to print). ``find_gpus``: (memory per GPU, GPU count, where from, GPU name), asked
    only when --gpu-memory is not given (the CLI passes one NVML read: ``daemon.found_gpus``)."""
    from headroom.workload import sizing

    profile = build_profile(args, config)
    where = "given"
    gpu_name = getattr(args, "gpu_name", None) or ""
    gpus = args.gpus
    if args.gpus is not None and args.gpus < 1:
        raise EstimateError("--gpus must be at least 1")
    if args.gpu_memory:
        try:
            memory = units.parse_bytes(args.gpu_memory, "--gpu-memory")
        except ValueError as exc:
            raise EstimateError(str(exc)) from None
        if memory <= 0:
            raise EstimateError("--gpu-memory must be positive")
        where = f"--gpu-memory {args.gpu_memory}"
    elif profile.kind.value == "cpu-inference":
        memory, where = None, "host RAM not given (use --gpu-memory for the RAM budget)"
    else:
        memory, found, where, name = find_gpus()
        gpu_name = gpu_name or name
        gpus = gpus if gpus is not None else found
    try:
        est = sizing.estimate(profile, gpu_memory_bytes=memory, gpus=gpus, overhead=config.sizing or sizing.DEFAULTS,
                              gpu_name=gpu_name)
    except sizing.SizingError as exc:
        message = str(exc)
        if not args.workload:  # name the flags to add, not the profile keys
            for flag, (path, _, _) in sorted(_FLAGS.items(), key=lambda kv: -len(".".join(kv[1][0]))):
                message = message.replace(".".join(path), flag)
        raise EstimateError(message) from None
    if not args.workload:
        _, model_notes = _model_fields(args)
        if model_notes:
            from dataclasses import replace

            est = replace(est, notes=(*model_notes, *est.notes))
    code = exit_code(est)
    if args.format == "json":
        doc: JsonMapping = {"workload": profile.name, "memory_source": where, **est.to_dict(),
                                  "verdict": sizing.fit_lines(est), "exit_code": code}  # fmt: skip
        return code, json.dumps(doc, indent=1) + "\n"
    head = (f"workload {profile.name} ({profile.kind.value}); GPU memory: {where}\n"
            f"{sizing.fit_lines(est)[0]}\n\n")  # the verdict first, its decisive problem first; the table says why
    return code, head + sizing.format_table(est) + "\n"


EXIT_FITS, EXIT_DOES_NOT_FIT, EXIT_BAD_INPUT, EXIT_UNKNOWN = 0, 1, 2, 3  # README.md and docs/sizing.md


def exit_code(est: Estimate) -> int:
    """0 fits, 1 does not fit (too few GPUs or too little memory), 3 unknown (no GPU memory given or found);
    bad input exits 2 before an estimate exists."""
    from headroom.workload import sizing

    if sizing.gpu_shortfall(est) is not None:
        return EXIT_DOES_NOT_FIT
    return EXIT_UNKNOWN if est.fits is None else EXIT_FITS if est.fits else EXIT_DOES_NOT_FIT
