"""The profile schema: the keys each section accepts, and ``profile_from_dict``, which validates one profile.

Each section is read with ``reader._Reader`` into the types of ``types.py`` (the attribution rules by
``matching.py``); then the combinations no workload can have are refused (a kind's rules, quantization and
precision, architecture and parallelism, context and output). Every problem is reported, each with its field path.
The keys and their values: the table in ``headroom.workload.profiles``' docstring.
"""

from __future__ import annotations

import re

from headroom import units
from headroom.jsontypes import YamlMapping, YamlValue
from headroom.schema import kind as _kind_of
from headroom.workload.profiles.matching import _MATCH_KEYS, _endpoint, _gpus, _match
from headroom.workload.profiles.reader import (
    _BAD,
    MAX_INTEGER,
    Checked,
    Path,
    ProfileErrors,
    _ok,
    _Reader,
    _short,
    _val,
)
from headroom.workload.profiles.types import (
    FLOAT_PRECISIONS,
    KINDS,
    QUANTIZATION_PRECISIONS,
    QUANTIZATIONS,
    Architecture,
    Context,
    Kind,
    Lengths,
    Levels,
    Load,
    Lora,
    Model,
    Optimizer,
    Parallelism,
    Precision,
    Quantization,
    QuantizationSpec,
    Runtime,
    Sharding,
    StateKind,
    Training,
    WorkloadProfile,
)

# ----------------------------------------------------------------------------------------- schema
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

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

# the keys each section accepts, for the config loader and docs (the table in the package docstring)
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


# ------------------------------------------------------------------------------------------ parse
def profile_from_dict(d: YamlMapping, attributable: bool = True) -> WorkloadProfile:
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
    if (_ok(training) and training.batch_size is not None and training.micro_batch is not None
            and training.micro_batch > training.batch_size):
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


# The section readers: ``top`` is the profile mapping as YAML parsed it, its values untyped (YamlMapping) until
# checked; each returns the section's frozen value, its default, or _BAD (an error recorded in ``r``): Checked.
def _model(r: _Reader, top: YamlMapping) -> Checked:
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


def _runtime(r: _Reader, top: YamlMapping) -> Checked:
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


def _size(r: _Reader, m: YamlMapping, key: str, path: Path) -> Checked:
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


def _quantization(r: _Reader, top: YamlMapping) -> Checked:
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


def _architecture(r: _Reader, top: YamlMapping) -> Checked:
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
        absent = "qk_rope_head_dim" if a.qk_rope_head_dim is None else "kv_lora_rank"
        r.error(("architecture", absent), "MLA (latent KV) needs both kv_lora_rank and qk_rope_head_dim")
    if a.q_lora_rank is not None and a.kv_lora_rank is None:
        r.error(("architecture", "q_lora_rank"), "q_lora_rank is an MLA field: give kv_lora_rank and qk_rope_head_dim")
    if a.experts is not None and a.experts_per_token is not None and a.experts_per_token > a.experts:
        r.error(("architecture", "experts_per_token"), f"experts_per_token {a.experts_per_token} exceeds experts "
                                                      f"{a.experts}")  # fmt: skip


def _context(r: _Reader, top: YamlMapping) -> Checked:
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


def _training(r: _Reader, top: YamlMapping) -> Checked:
    v = top.get("training")
    if v is None:
        return None
    p = ("training",)
    m = r.mapping(v, p, _TRAINING_KEYS)
    if m is None:
        return _BAD
    fields: dict[str, Checked] = dict(  # each a checked value, None (not given) or _BAD
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
    defaults: dict[str, Checked] = {"gradient_checkpointing": False, "flash_attention": True, "sharding": Sharding.NONE,
                "offload_optimizer": False, "offload_params": False}  # fmt: skip
    given: dict[str, Checked] = {k: (defaults.get(k) if x is None else x) for k, x in fields.items()}
    return Training(**given)


def _lora(r: _Reader, top: YamlMapping) -> Checked:
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
    modules: Checked = ()
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


def _parallel(r: _Reader, top: YamlMapping) -> Checked:
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


def _group_name(r: _Reader, top: YamlMapping, key: str) -> Checked:
    """``job`` / ``team``: a name with the rules of ``name`` (it becomes a label value across the fleet)."""
    value = r.string(top, key, ())
    if value is not None and value is not _BAD and not _NAME.match(value):
        r.error((key,), f"{value!r} must match [A-Za-z0-9][A-Za-z0-9_.-]* and be at most 64 characters")
        return _BAD
    return value


def _ratio(r: _Reader, value: YamlValue, path: Path) -> Checked:
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


def _slo(r: _Reader, top: YamlMapping) -> tuple[Checked, Checked]:
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


def _lengths(r: _Reader, m: YamlMapping, key: str) -> Checked:
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


def _levels(r: _Reader, m: YamlMapping, key: str, integer: bool, limit: float) -> Checked:
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


def _load(r: _Reader, top: YamlMapping) -> Checked:
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


def _check_kind(r: _Reader, top: YamlMapping, kind: Kind, precision: Checked, quant: Checked, kv_precision: Checked,
                concurrency: Checked, training: Checked, lora: Checked, runtime: Checked, gpus: Checked, parallel: Checked) -> None:  # fmt: skip
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
