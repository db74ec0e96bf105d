"""Serving and training launchers that describe themselves: recognise a command line and read its flags.

Pure (no /proc, no files): ``parse(argv)`` -> ``Launcher`` (samples.py) or None (launcher_profiles.py's
``auto_profile(launcher, model)`` is the ``WorkloadProfile`` the memory model sizes for such an automatic
workload, ``source="auto"``), and which processes of a training job are its ranks and DataLoader workers
(``dataloader_ranks``). The identity collector reads the command lines and the model's config.json
(sources/identity.py); the serving collector finds a declared profile's /metrics with the same
``parse`` (sources/serving.py), so one matcher serves both.

Recognised (docs/workload-identity.md, "Runtimes that describe themselves"):

- ``vllm serve MODEL`` and ``python -m vllm.entrypoints.openai.api_server --model MODEL``;
- ``python -m sglang.launch_server --model-path MODEL``;
- ``text-generation-launcher --model-id MODEL`` (and TGI's ``text-generation-router``);
- ``tritonserver`` and TensorRT-LLM's ``trtllm-serve MODEL``;
- llama.cpp's ``llama-server -m MODEL``, and Ollama's ``ollama serve`` / ``ollama runner`` (``ollama_llama_server``);
- ``torchrun`` / ``python -m torch.distributed.run`` (``torch.distributed.launch``), ``deepspeed``,
  ``accelerate launch``.

Both ``--flag value`` and ``--flag=value`` are read, and ``--flag_name`` like ``--flag-name`` (vLLM's and
torchrun's parsers accept both). A flag whose value cannot be read is named in ``Launcher.problems`` and
left unset (the runtime's default applies), never guessed. Values not on the command line stay None: the
runtimes' defaults (vLLM's gpu_memory_utilization 0.9, max_num_seqs and max_num_batched_tokens by
version; SGLang's mem_fraction_static by GPU memory; TGI's prefill budget) are the memory model's
(workload/sizing/, workload/serving_memory.py), so there is one place that knows them.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache

from headroom.jsontypes import YamlDict
from headroom.safeio import excerpt
from headroom.samples import Launcher

# runtime -> (module names run with -m, executable base names)
# (the runtime names are workload/runtimes.py's, which says how each reserves GPU memory up front)
_SERVING_MODULES = {"vllm.entrypoints.openai.api_server": "vllm", "sglang.launch_server": "sglang",
                    "tensorrt_llm.commands.serve": "tensorrt-llm"}
_SERVING_EXES = {"text-generation-launcher": "tgi", "text-generation-router": "tgi", "tritonserver": "triton",
                 "trtllm-serve": "tensorrt-llm", "llama-server": "llama.cpp", "ollama_llama_server": "ollama"}
# runtimes started as ``PROGRAM SUBCOMMAND``: (program, subcommands) -> runtime
_SERVING_SUBCOMMANDS = {"vllm": (("serve",), "vllm"), "ollama": (("serve", "runner"), "ollama")}
# runtimes whose first positional argument is the model (``vllm serve MODEL``, ``trtllm-serve MODEL``)
_POSITIONAL_MODEL = {"vllm", "tensorrt-llm"}
_TRAINING_MODULES = {"torch.distributed.run": "torchrun", "torch.distributed.launch": "torchrun"}
_TRAINING_EXES = {"torchrun": "torchrun", "deepspeed": "deepspeed"}
_PYTHON = re.compile(r"^python[0-9.]*$")
_WRAPPERS = {"uv", "run", "env", "exec", "nice", "numactl", "taskset", "chrt", "ionice", "stdbuf", "nohup"}

# Where each serving runtime exposes /metrics: (host flag, metrics port flag, default port).
# vLLM and SGLang serve it on the API port (vLLM's default 8000, SGLang's 30000; SGLang only with
# --enable-metrics); TGI's router on --prometheus-port (9000); Triton on --metrics-port (8002); llama.cpp's
# llama-server on its port (8080, only with --metrics). Ollama has no Prometheus endpoint, and trtllm-serve's
# /metrics answers JSON: neither is scraped.
_METRICS = {
    "vllm": ("--host", "--port", 8000),
    "sglang": ("--host", "--port", 30000),
    "tgi": ("--hostname", "--prometheus-port", 9000),
    "triton": ("--metrics-address", "--metrics-port", 8002),
    "llama.cpp": ("--host", "--port", 8080),
}
# the API port each serves requests on (Triton: HTTP; TGI: the router's --port, default 3000)
_API_PORT = {"vllm": ("--port", 8000), "sglang": ("--port", 30000), "tgi": ("--port", 3000),
             "triton": ("--http-port", 8000), "llama.cpp": ("--port", 8080)}  # fmt: skip

# setting -> (type, flags) per runtime; flags are spelled with dashes (underscores are read as dashes)
_INT, _FLOAT, _STR, _HUMAN = "int", "float", "str", "human"
_FLAGS: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {
    "vllm": {
        "model": (_STR, ("--model",)),
        "max_model_len": (_HUMAN, ("--max-model-len",)),
        "gpu_memory_utilization": (_FLOAT, ("--gpu-memory-utilization",)),
        "tensor_parallel": (_INT, ("--tensor-parallel-size", "-tp")),
        "pipeline_parallel": (_INT, ("--pipeline-parallel-size", "-pp")),
        "data_parallel": (_INT, ("--data-parallel-size", "-dp")),
        "dtype": (_STR, ("--dtype",)),
        "quantization": (_STR, ("--quantization", "-q")),
        "kv_cache_dtype": (_STR, ("--kv-cache-dtype",)),
        "max_num_seqs": (_INT, ("--max-num-seqs",)),
        "max_num_batched_tokens": (_HUMAN, ("--max-num-batched-tokens",)),
    },
    "sglang": {
        "model": (_STR, ("--model-path", "--model")),
        "max_model_len": (_INT, ("--context-length",)),
        "mem_fraction_static": (_FLOAT, ("--mem-fraction-static",)),
        "tensor_parallel": (_INT, ("--tp-size", "--tensor-parallel-size", "--tp")),
        "pipeline_parallel": (_INT, ("--pp-size", "--pipeline-parallel-size")),
        "data_parallel": (_INT, ("--dp-size", "--data-parallel-size")),
        "dtype": (_STR, ("--dtype",)),
        "quantization": (_STR, ("--quantization",)),
        "kv_cache_dtype": (_STR, ("--kv-cache-dtype",)),
        "max_num_seqs": (_INT, ("--max-running-requests",)),
        "max_num_batched_tokens": (_INT, ("--chunked-prefill-size",)),
    },
    "tgi": {
        "model": (_STR, ("--model-id",)),
        "max_model_len": (_INT, ("--max-total-tokens",)),
        "tensor_parallel": (_INT, ("--num-shard",)),
        "dtype": (_STR, ("--dtype",)),
        "quantization": (_STR, ("--quantize",)),
        "kv_cache_dtype": (_STR, ("--kv-cache-dtype",)),
        "max_num_seqs": (_INT, ("--max-concurrent-requests",)),
        "max_num_batched_tokens": (_INT, ("--max-batch-prefill-tokens",)),
    },
    "triton": {},  # its --model-repository holds many models: nothing to size from the command line
    "tensorrt-llm": {  # trtllm-serve MODEL (its flags are spelled with underscores)
        "model": (_STR, ("--model",)),
        "max_model_len": (_INT, ("--max-seq-len",)),
        "tensor_parallel": (_INT, ("--tp-size",)),
        "pipeline_parallel": (_INT, ("--pp-size",)),
        "max_num_seqs": (_INT, ("--max-batch-size",)),
        "max_num_batched_tokens": (_INT, ("--max-num-tokens",)),
        "port": (_INT, ("--port",)),
    },
    "llama.cpp": {
        "model": (_STR, ("--model", "-m")),
        "max_model_len": (_INT, ("--ctx-size", "-c")),
        "max_num_seqs": (_INT, ("--parallel", "-np")),
        "max_num_batched_tokens": (_INT, ("--batch-size", "-b")),
    },
    "ollama": {  # `ollama runner` (and the older ollama_llama_server): the model blob and its context
        "model": (_STR, ("--model",)),
        "max_model_len": (_INT, ("--ctx-size",)),
        "max_num_seqs": (_INT, ("--parallel",)),
        "port": (_INT, ("--port",)),
    },
    "torchrun": {"nproc_per_node": (_STR, ("--nproc-per-node",)), "nnodes": (_STR, ("--nnodes",))},
    "deepspeed": {"nproc_per_node": (_STR, ("--num-gpus",)), "nnodes": (_STR, ("--num-nodes",))},
    "accelerate": {
        "world_size": (_INT, ("--num-processes",)),
        "nnodes": (_STR, ("--num-machines",)),
        "dtype": (_STR, ("--mixed-precision",)),
    },
}
for _runtime, (_host, _port, _) in _METRICS.items():
    _FLAGS[_runtime]["host"] = (_STR, (_host,))
    _FLAGS[_runtime]["port"] = (_INT, (_API_PORT[_runtime][0], *(("-p",) if _runtime == "tgi" else ())))
    if _port != _API_PORT[_runtime][0]:
        _FLAGS[_runtime]["metrics_port"] = (_INT, (_port,))
# a training script's own flags that name its model (Hugging Face Trainer examples and the like)
_SCRIPT_MODEL_FLAGS = ("--model-name-or-path", "--pretrained-model-name-or-path", "--model-name", "--model-id",
                       "--model-path", "--model")
# ... and its sequence length and per-GPU batch (Hugging Face Trainer / TRL names)
_SCRIPT_LENGTH_FLAGS = ("--max-seq-length", "--model-max-length", "--max-length", "--seq-length")
_SCRIPT_BATCH_FLAGS = ("--per-device-train-batch-size", "--micro-batch-size", "--train-micro-batch-size-per-gpu")
# the training launchers' own flags that take a value (the first bare word after them is the script)
_TRAINING_VALUE_FLAGS = {
    "torchrun": {"--nnodes", "--nproc-per-node", "--node-rank", "--master-addr", "--master-port", "--rdzv-backend",
                 "--rdzv-endpoint", "--rdzv-id", "--rdzv-conf", "--max-restarts", "--monitor-interval",
                 "--start-method", "--role", "--log-dir", "--redirects", "-r", "--tee", "-t", "--local-addr",
                 "--local-ranks-filter", "--logs-specs"},
    "deepspeed": {"--num-gpus", "--num-nodes", "--hostfile", "-H", "--include", "-i", "--exclude", "-e",
                  "--master-port", "--master-addr", "--launcher", "--launcher-args", "--node-rank",
                  "--min-elastic-nodes", "--max-elastic-nodes", "--ssh-port", "--venv-script", "--comment"},
    "accelerate": {"--num-processes", "--num-machines", "--mixed-precision", "--config-file", "--machine-rank",
                   "--main-process-ip", "--main-process-port", "--gpu-ids", "--dynamo-backend", "--num-cpu-threads-per-process",
                   "--deepspeed-config-file", "--zero-stage", "--gradient-accumulation-steps", "--rdzv-backend",
                   "--fsdp-sharding-strategy", "--fsdp-config", "-m"},
}  # fmt: skip
_ANY_ADDRESS = {"", "0.0.0.0", "::", "[::]", "*"}
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kmgtKMGT]?)")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
MAX_ARGS = 512  # arguments read per command line (a longer one is read up to here)
# the largest value of each numeric setting read from a command line (another user's: a 400-digit
# --max-model-len must not reach the memory model or the exposition); larger ones are ignored with a problem note
_LIMITS = {"tensor_parallel": 4096, "pipeline_parallel": 4096, "data_parallel": 4096, "max_model_len": 2**31 - 1,
           "max_num_seqs": 2**20, "max_num_batched_tokens": 2**31 - 1, "port": 65535, "metrics_port": 65535,
           "world_size": 2**20}  # fmt: skip
_INTEGER = re.compile(r"-?[0-9]{1,18}")  # an integer flag's value: ASCII digits ("8_000", "+80", "٨٠" are not)
# a host name as RFC 1123 spells one: dot-separated labels of letters, digits and inner hyphens
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
MAX_HOST_NAME = 253  # characters of a host name (RFC 1035), its optional final dot aside


def _flag_name(arg: str) -> str:
    """``--max_model_len`` -> ``--max-model-len`` (the name part only, not ``=value``)."""
    if not arg.startswith("--"):
        return arg
    return "--" + arg[2:].replace("_", "-")


def _human_int(text: str) -> int:
    """vLLM's human-readable integers: ``32768``, ``32k`` (x1000), ``32K`` (x1024), ``25.6k``."""
    m = _HUMAN_INT.fullmatch(text.strip())
    if m is None:
        raise ValueError(text)
    number, suffix = m.groups()
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    if "." in number:
        raise ValueError(text)
    return int(number) * _BINARY.get(suffix, 1)


def _find(argv: Sequence[str]) -> tuple[str, int] | None:
    """(runtime, index where its own arguments start) of a launcher command line, or None. The launcher
    may follow an interpreter and its options (``python3 -u -m ...``, ``python -c CODE vllm serve``) or a
    wrapper (``uv run``, ``env``)."""
    i = 0
    while i < min(len(argv), 8):
        name = argv[i].rsplit("/", 1)[-1]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if name in _SERVING_SUBCOMMANDS and nxt in _SERVING_SUBCOMMANDS[name][0]:
            return _SERVING_SUBCOMMANDS[name][1], i + 2
        if name == "accelerate" and nxt == "launch":
            return "accelerate", i + 2
        if name in _SERVING_EXES:
            return _SERVING_EXES[name], i + 1
        if name in _TRAINING_EXES:
            return _TRAINING_EXES[name], i + 1
        if name == "-m" and nxt is not None:
            found = _SERVING_MODULES.get(nxt) or _TRAINING_MODULES.get(nxt)
            if found:
                return found, i + 2
            if nxt == "accelerate.commands.launch":
                return "accelerate", i + 2
            return None  # another module
        if name == "-c":
            i += 2  # the code string; its argv follows
            continue
        if not (_PYTHON.match(name) or name in _WRAPPERS or name.startswith("-")):
            return None  # a script or program that is not a launcher
        i += 1
    return None


def _options(args: Sequence[str], value_flags: set[str], stop_at_positional: bool
             ) -> tuple[dict[str, str], list[str]]:
    """Flag -> value (last one wins) and the positional words, up to the first positional when
    ``stop_at_positional`` (a training launcher's script: what follows is the script's)."""
    values: dict[str, str] = {}
    positional: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            positional.extend(args[i + 1:])
            break
        if a.startswith("-") and len(a) > 1 and not _is_number(a):
            name, eq, value = a.partition("=")
            name = _flag_name(name)
            if eq:
                values[name] = value
            elif name in value_flags and i + 1 < len(args):
                values[name] = args[i + 1]
                i += 1
            else:
                values.setdefault(name, "")
        else:
            positional.append(a)
            if stop_at_positional:
                break
        i += 1
    return values, positional


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def parse(argv: Sequence[str]) -> Launcher | None:
    """The launcher a command line starts, with the flags it was given; None when it is not one."""
    argv = list(argv[:MAX_ARGS])
    found = _find(argv)
    if found is None:
        return None
    runtime, start = found
    table = _FLAGS[runtime]
    flag_of = {flag: (key, typ) for key, (typ, flags) in table.items() for flag in flags}
    training = runtime in _TRAINING_VALUE_FLAGS
    value_flags = _TRAINING_VALUE_FLAGS[runtime] if training else set(flag_of)
    values, positional = _options(argv[start:], value_flags, stop_at_positional=training)
    settings: YamlDict = {}
    problems: list[str] = []
    for flag, value in values.items():
        if flag not in flag_of:
            continue
        key, typ = flag_of[flag]
        if key in settings:
            continue  # an alias already gave it (flags are read in the order the table lists them)
        try:
            settings[key] = _convert(typ, value)
        except (ValueError, OverflowError):
            problems.append(f"{flag} {excerpt(value)}: not a valid {'number' if typ == _FLOAT else 'integer'}; "
                            "ignored")  # fmt: skip
    for key, limit in _LIMITS.items():
        v = settings.get(key)
        if v is not None and not 1 <= v <= limit:
            problems.append(f"{_flags_for(runtime, key)} {v}: out of range (1 to {limit}); ignored")
            del settings[key]
    for key in ("gpu_memory_utilization", "mem_fraction_static"):
        v = settings.get(key)
        if v is not None and not 0 < v <= 1:
            problems.append(f"{_flags_for(runtime, key)} {v}: must be in (0, 1]; ignored")
            del settings[key]
    model = str(settings.pop("model", "") or "")
    script = ""
    if runtime in _POSITIONAL_MODEL and not model and start < len(argv) and not argv[start].startswith("-"):
        model = argv[start]  # `vllm serve MODEL [options]`, `trtllm-serve MODEL [options]`
    if training:
        script = positional[0] if positional else ""
        if not script and "-m" in values:
            script = values.get("-m", "")
        rest = argv[start:]
        after = rest[rest.index(script) + 1:] if script and script in rest else []
        script_values, _ = _options(after, {*_SCRIPT_MODEL_FLAGS, *_SCRIPT_LENGTH_FLAGS, *_SCRIPT_BATCH_FLAGS},
                                    stop_at_positional=False)
        model = next((script_values[f] for f in _SCRIPT_MODEL_FLAGS if script_values.get(f)), "")
        for key, flags in (("max_model_len", _SCRIPT_LENGTH_FLAGS), ("micro_batch", _SCRIPT_BATCH_FLAGS)):
            given = next((f for f in flags if script_values.get(f)), None)
            if given is not None:
                text = script_values[given]
                if text.isdigit() and len(text) <= 9 and 0 < int(text) <= 10**8:
                    settings[key] = int(text)
                else:
                    problems.append(f"{given} {excerpt(text)}: not a positive integer up to 10^8; ignored")
        settings["gradient_checkpointing"] = _switch(after, "--gradient-checkpointing")
        settings["sharding"], settings["sharding_unknown"] = _sharding(runtime, values, after)
        settings["nproc_per_node"], settings["nnodes"], settings["world_size"] = _world(runtime, settings, problems)
    host = str(settings.pop("host", "") or "")
    metrics_url = ""
    if runtime in _METRICS:
        host_flag, port_flag, default_port = _METRICS[runtime]
        same = port_flag == _API_PORT[runtime][0]
        metrics_port = settings.get("port") if same else settings.pop("metrics_port", None)
        reach = url_host(host)
        if reach is None:
            problems.append(f"{host_flag} {excerpt(host)}: not an IP address or host name; no metrics endpoint")
            host = ""
        # an unreadable port flag is named in problems above: never replaced by the default (a wrong endpoint)
        elif not any(p.startswith(f"{port_flag} ") for p in problems):
            metrics_url = f"http://{reach}:{metrics_port or default_port}/metrics"
        settings.setdefault("port", _API_PORT[runtime][1])
    elif runtime == "ollama" and not model:  # `ollama serve`: its /api/ps where OLLAMA_HOST says (the identity
        metrics_url = ollama_status_url(None)[0]  # collector reads it from the process's environment)
    return Launcher(runtime=runtime, role="training" if training else "serving", model=model, script=script,
                    host=host, metrics_url=metrics_url, problems=tuple(problems), **settings)


def _switch(args: Sequence[str], flag: str) -> bool:
    """A boolean flag as Hugging Face's argument parser reads it: present (``--flag``, ``--flag true``)
    or explicitly off (``--flag false``, ``--flag=0``)."""
    on = False
    for i, a in enumerate(args):
        name, eq, value = a.partition("=")
        if _flag_name(name) != flag:
            continue
        if not eq and i + 1 < len(args) and args[i + 1].lower() in ("true", "false", "1", "0", "yes", "no"):
            value = args[i + 1]
        on = value.lower() not in ("false", "0", "no")
    return on


_FSDP = {"full_shard": "fsdp-full-shard", "1": "fsdp-full-shard", "shard_grad_op": "fsdp-shard-grad-op",
         "2": "fsdp-shard-grad-op", "no_shard": "fsdp-no-shard", "3": "fsdp-no-shard",
         "hybrid_shard": "fsdp-full-shard", "4": "fsdp-full-shard"}  # fmt: skip


def _sharding(runtime: str, own: Mapping[str, str], script: Sequence[str]) -> tuple[str, str]:
    """(profile sharding, "") when the command line says how parameters, gradients and optimizer state are
    sharded; ("", where it is set) when a config file says it (not read: nothing is guessed); ("", "") for
    a plain launch (DDP)."""
    if runtime == "deepspeed":
        return "", "the DeepSpeed config (ZeRO stage)"
    if runtime == "accelerate":
        if "--use-deepspeed" in own:
            stage = own.get("--zero-stage", "")
            return (f"zero{stage}", "") if stage in ("1", "2", "3") else ("", "accelerate's DeepSpeed config")
        if "--use-fsdp" in own:
            strategy = own.get("--fsdp-sharding-strategy", "").lower()
            return (_FSDP[strategy], "") if strategy in _FSDP else ("", "accelerate's FSDP config")
        if "--config-file" in own:
            return "", "accelerate's --config_file"
    names = {_flag_name(a.partition("=")[0]) for a in script}
    if "--deepspeed" in names:
        return "", "the script's --deepspeed config"
    if "--fsdp" in names or "--fsdp-config" in names:
        return "", "the script's --fsdp settings"
    return "", ""


def _flags_for(runtime: str, key: str) -> str:
    return _FLAGS[runtime][key][1][0] if key in _FLAGS[runtime] else key


OLLAMA_DEFAULT_PORT = 11434


def ollama_status_url(host_var: str | None) -> tuple[str, str | None]:
    """(URL of ``ollama serve``'s /api/ps, why none) for its OLLAMA_HOST (None or "": unset). Ollama's own rule
    (envconfig/config.go getOllamaHost, commit 000ce02): quotes and spaces trimmed; ``scheme://`` optional (http; an
    http:// or https:// value defaults to port 80 or 443); trailing slashes dropped; host:port, else a bare host or IP
    on the default port, else 127.0.0.1:11434; a port that is not 0-65535 is the default. A wildcard bind address is
    reached on 127.0.0.1; a host that is not an IP literal or a host name builds no URL (url_host)."""
    value = (host_var or "").strip().strip("\"'").strip()
    scheme, sep, hostport = value.partition("://")
    port = str(OLLAMA_DEFAULT_PORT)
    if not sep:
        scheme, hostport = "http", value
    elif scheme in ("http", "https"):
        port = "80" if scheme == "http" else "443"
    else:
        return "", f"OLLAMA_HOST {excerpt(value)}: not an http(s) address; no status endpoint"
    hostport = hostport.rstrip("/")
    host, given = _split_host_port(hostport)
    if given is None:  # not host:port: a bare host or IP literal on the default port (none: 127.0.0.1)
        host = hostport.strip("[]") if hostport else "127.0.0.1"
    elif given.isascii() and given.isdigit() and int(given) <= 65535:
        port = str(int(given))
    reach = url_host(host)
    if reach is None:
        return "", f"OLLAMA_HOST {excerpt(value)}: not an IP address or host name; no status endpoint"
    return f"{scheme}://{reach}:{port}/api/ps", None


def _split_host_port(hostport: str) -> tuple[str, str | None]:
    """(host, port) as Go's net.SplitHostPort splits ``host:port`` and ``[v6]:port``; port None where it fails
    (no port, or more than one colon outside brackets)."""
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0 or not hostport[end + 1:].startswith(":"):
            return "", None
        return hostport[1:end], hostport[end + 2:]
    if hostport.count(":") != 1:
        return "", None
    host, _, port = hostport.partition(":")
    return host, port


def url_host(host: str) -> str | None:
    """The host part of an http URL that reaches a runtime bound to ``host`` (a flag's value): 127.0.0.1 for a
    wildcard or no address, an IPv6 literal in brackets, an IPv4 literal or an RFC 1123 host name as given;
    None for anything else (a path, ``user@host``, spaces, ``#``, an IPv6 zone index), which must never become
    part of a URL the agent requests."""
    if host in _ANY_ADDRESS:
        return "127.0.0.1"
    literal = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = ipaddress.ip_address(literal)
    except ValueError:
        address = None
    if address is not None:
        if address.version == 4:
            return address.compressed
        return None if address.scope_id else f"[{address.compressed}]"  # a zone index needs a %25 in a URL
    name = host[:-1] if host.endswith(".") else host
    if 0 < len(name) <= MAX_HOST_NAME and all(_HOST_LABEL.fullmatch(label) for label in name.split(".")):
        return host
    return None


def _convert(typ: str, value: str) -> int | float | str:
    if typ != _STR and len(value) > 32:  # no number is longer; int() of 5 000 digits is slow before it refuses
        raise ValueError(value)
    if typ == _INT:
        if not _INTEGER.fullmatch(value.strip()):
            raise ValueError(value)
        return int(value.strip())
    if typ == _HUMAN:
        return _human_int(value)
    if typ == _FLOAT:
        v = float(value)
        if v != v:  # NaN
            raise ValueError(value)
        return v
    return value.strip()


def _world(runtime: str, s: YamlDict, problems: list[str]) -> tuple[int | None, int | None, int | None]:
    """(processes per node, nodes, world size) of a training launcher; None where the command line does not
    say (torchrun ``--nproc-per-node gpu``/``auto``, deepspeed without ``--num_gpus``: all GPUs; an elastic
    ``--nnodes MIN:MAX``)."""
    def count(key: str, default: int | None) -> int | None:
        raw = s.get(key)
        if raw is None or raw == "":
            return default
        if isinstance(raw, int):
            return raw if raw >= 1 else None
        text = str(raw)
        if text.isdigit() and int(text) >= 1:
            return int(text)
        if text in ("gpu", "auto", "cpu", "xpu") or re.fullmatch(r"\d+:\d+", text) or text == "-1":
            return None
        problems.append(f"{_flags_for(runtime, key)} {text!r}: not a count; ignored")
        return None

    nodes = count("nnodes", 1)
    if runtime == "accelerate":
        world = s.get("world_size")
        per_node = world // nodes if world and nodes and world % nodes == 0 else None
        return per_node, nodes, world
    per_node = count("nproc_per_node", 1 if runtime == "torchrun" else None)
    return per_node, nodes, per_node * nodes if per_node and nodes else None


def metrics_endpoint(argv: Sequence[str]) -> tuple[str, str] | None:
    """(runtime, /metrics URL) of a serving runtime's command line; None when it is not one or its port
    flag is unreadable (a wildcard bind address is reached on 127.0.0.1)."""
    launcher = parse(argv)
    if launcher is None or not launcher.metrics_url:  # parse() builds none from an unreadable host or port
        return None
    return launcher.runtime, launcher.metrics_url


__all__ = ["MAX_ARGS", "metrics_endpoint", "parse", "url_host"]


# ------------------------------------------------------------------------------ ranks and DataLoader workers
# What PyTorch (2.5 and later; 2.13 observed) names the main thread of each DataLoader worker process, at the
# start of its worker loop, under every start method: /proc/PID/comm of the worker reads it (the thread
# group leader's name). Its pin-memory thread is "pt_data_pin", a thread of the rank, not a process.
DATALOADER_WORKER_COMM = "pt_data_worker"
# the per-node launcher the ``deepspeed`` command starts (``python -u -m deepspeed.launcher.launch ...``),
# whose children are the ranks
_RANK_PARENT_MODULES = frozenset({"deepspeed.launcher.launch"})
RANK_PARENTS_KEPT = 256  # command lines whose launcher verdict (starts_ranks) is memoised
_SPAWN_MAIN = "from multiprocessing.spawn import spawn_main"
_FORKSERVER_MAIN = "from multiprocessing.forkserver import main"


def starts_ranks(argv: Sequence[str]) -> bool:
    """True when a command line is a training launcher whose children are the ranks: ``torchrun`` (``python -m
    torch.distributed.run`` / ``.launch``), ``accelerate launch``, ``deepspeed`` and the per-node
    ``python -m deepspeed.launcher.launch`` it starts."""
    return _starts_ranks(tuple(argv[:MAX_ARGS]))


@lru_cache(maxsize=RANK_PARENTS_KEPT)
def _starts_ranks(argv: tuple[str, ...]) -> bool:  # asked every tick for the same few parents: memoised
    found = _find(argv)
    if found is not None:
        return found[0] in _TRAINING_VALUE_FLAGS
    for i, a in enumerate(argv[:8]):
        if a == "-m":
            return i + 1 < len(argv) and argv[i + 1] in _RANK_PARENT_MODULES
    return False


def _runs(argv: Sequence[str], code: str) -> bool:
    """True when ``argv`` is ``python [options] -c CODE...`` whose code starts with ``code``."""
    for i, a in enumerate(argv[:6]):
        if a == "-c":
            return i + 1 < len(argv) and argv[i + 1].startswith(code)
    return False


def _python(argv: Sequence[str]) -> bool:
    """True when a command line runs a Python interpreter (``/usr/bin/python3 -u train.py``; a script started by its
    shebang or a console script reads so too)."""
    return bool(argv) and _PYTHON.match(argv[0].rsplit("/", 1)[-1]) is not None


def dataloader_ranks(members: Mapping[int, tuple[int, str]], argv_of: Callable[[int], Sequence[str]]) -> dict[int, tuple[int, ...]]:
    """The ranks of a workload and the DataLoader worker processes of each: rank pid -> its workers' pids (sorted).

    ``members``: pid -> (ppid, comm) of every live process of the workload; ``argv_of(pid)``: the command line of
    any pid (a member or its parent), () when unreadable. Pure: what it reads comes through ``argv_of``, asked only
    where comm and parentage do not decide (docs/workload-identity.md, "Ranks and DataLoader workers").

    - A rank is a member whose parent (a member or not) is a training launcher (``starts_ranks``) and that is no
      launcher itself; where no member has one, the workload's main processes (the members whose parent is not a member) are its ranks, unless
      they are launchers themselves.
    - A worker is a member below a rank (not a rank itself) that either carries PyTorch's worker name
      (comm ``pt_data_worker``: fork, spawn and forkserver alike, once its worker loop started), or is a
      multiprocessing child of the rank not (yet) named so: a spawned one (``-c "from multiprocessing.spawn
      import spawn_main..."``, importing torch for seconds before its loop names it), a child of the rank's
      forkserver (``-c "from multiprocessing.forkserver import main..."``), or a fork of the rank that did not
      exec (the rank's own comm and Python command line: PyTorch before 2.5 never names its workers). Multiprocessing's
      resource tracker, the forkserver itself, and anything that exec'd another program (a decoder) are not.
    Each worker counts for its nearest rank above it."""
    parents = {ppid for ppid, _ in members.values()}
    launchers = {p for p in parents if p > 0 and starts_ranks(argv_of(p))}  # a few distinct parents: memoised
    # a launcher's child that launches in turn (deepspeed -> deepspeed.launcher.launch) is no rank: its children are
    ranks = {pid for pid, (ppid, _) in members.items()
             if ppid in launchers and pid not in launchers and not starts_ranks(argv_of(pid))}
    if not ranks:
        ranks = {pid for pid, (ppid, _) in members.items() if ppid not in members and not starts_ranks(argv_of(pid))}
    workers: dict[int, list[int]] = {r: [] for r in ranks}
    argv: dict[int, Sequence[str]] = {}

    def argv_cached(pid: int) -> Sequence[str]:
        if pid not in argv:
            argv[pid] = tuple(argv_of(pid))
        return argv[pid]

    for pid, (ppid, comm) in members.items():
        if pid in ranks:
            continue
        rank: int | None
        if ppid in ranks:
            rank = ppid
        else:  # the nearest rank above it (a tree is at most a few levels deep)
            rank, up, seen = None, ppid, 0
            while up in members and seen < len(members):
                if up in ranks:
                    rank = up
                    break
                up, seen = members[up][0], seen + 1
            if rank is None:
                continue
        if comm == DATALOADER_WORKER_COMM:
            workers[rank].append(pid)
            continue
        if ppid == rank:
            own = argv_cached(pid)
            if _runs(own, _SPAWN_MAIN) or (comm == members[rank][1] and _python(own) and own == argv_cached(rank)):
                workers[rank].append(pid)
        elif (members[ppid][0] == rank and comm == members[ppid][1] and _runs(argv_cached(ppid), _FORKSERVER_MAIN)
              and argv_cached(pid) == argv_cached(ppid)):
            workers[rank].append(pid)  # forked by the rank's forkserver, not (yet) named
    return {r: tuple(sorted(ws)) for r, ws in workers.items()}
