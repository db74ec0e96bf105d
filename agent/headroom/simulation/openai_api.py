"""A deterministic OpenAI-compatible serving runtime for the stand-ins: what ``headroom probe`` drives in the
simulation (docs/probe.md, docs/scenario-format.md ``workloads[].serving.api``).

It answers on the same port as the stand-in's /metrics (simulation/runtime_metrics.py ``serve``), as vLLM,
SGLang and TGI do: ``GET /v1/models``, ``GET /health``, ``POST /tokenize`` (vLLM's), ``POST /v1/completions``
and ``POST /v1/chat/completions``, streaming (SSE ``data:`` lines, ``[DONE]``, the usage chunk on
``stream_options.include_usage``) or not. Its queueing follows a KV cache of ``capacity_tokens``:

- a token is a word: a prompt of N whitespace-separated words (or a list of N token ids) is N tokens; a chat
  request adds ``CHAT_TEMPLATE_TOKENS`` per message (the chat template), so only completions are exact;
- a request reserves ``prompt + max_tokens`` tokens of the cache, rounded up to whole blocks, for its whole
  life (vLLM allocates as it goes, and preempts when it runs out; reserving up front is the deterministic
  version of the same limit); the background ``kv_usage`` of the scenario's signals holds its share too;
- requests that do not fit wait, first come first served, and are counted as ``waiting``;
- once admitted: first token after ``ttft + prompt x prefill_per_token`` seconds, each next one after
  ``itl + running x itl_per_running`` seconds (a batch gets slower as it grows).

So the capacity at an objective follows from the arithmetic, not from timing noise: with a cache of C tokens
and requests of k tokens, floor(C / k) run at once; one more waits a whole request, and its TTFT jumps. What it
serves is fed into the ServingState (running, waiting, KV usage, the counters and histograms), so the agent's
serving analysis sees the probe's load and names ``kv_cache`` when the cache is full and requests wait.

Standard library only (a stand-in process imports it with the agent's sys.path).
"""

from __future__ import annotations

import json
import math
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names only: this module imports the standard library alone
    from http.server import BaseHTTPRequestHandler

    from headroom.jsontypes import JsonDoc
    from headroom.simulation.runtime_metrics import ServingState

# defaults of ``serving.api`` (seconds); a scenario may set each
API_DEFAULTS = {"ttft": 0.02, "prefill_per_token": 0.00002, "itl": 0.01, "itl_per_running": 0.0002}
CHAT_TEMPLATE_TOKENS = 4  # tokens a chat template adds per message (role markers), as real templates do
MAX_QUEUE_SECONDS = 120.0  # a request waiting longer for KV room is answered 503 (vLLM has no such limit)
MAX_BODY = 1 << 20  # bytes of a request body read; larger: 413
MAX_OUTPUT_TOKENS = 1 << 16  # max_tokens above this: 400
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Req:
    reserve: int
    admitted: bool = False
    cancelled: bool = False


@dataclass
class LoadModel:
    """The KV cache and the queue. Thread-safe; every handler thread calls ``admit`` and ``release``."""

    capacity_tokens: int
    block_size: int
    ttft: float = API_DEFAULTS["ttft"]
    prefill_per_token: float = API_DEFAULTS["prefill_per_token"]
    itl: float = API_DEFAULTS["itl"]
    itl_per_running: float = API_DEFAULTS["itl_per_running"]
    background_usage: float = 0.0  # the scenario's kv_usage signal: what other (simulated) users hold
    reserved: int = 0
    running: int = 0
    queue: deque = field(default_factory=deque)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def tokens_for(self, prompt: int, max_tokens: int) -> int:
        need = prompt + max_tokens
        return math.ceil(need / self.block_size) * self.block_size

    def _free(self) -> int:
        return int(self.capacity_tokens * (1.0 - min(1.0, self.background_usage))) - self.reserved

    def _admit_head(self) -> None:
        while self.queue and self.queue[0].reserve <= self._free():
            r = self.queue.popleft()
            r.admitted = True
            self.reserved += r.reserve
            self.running += 1
        self.cond.notify_all()

    def admit(self, reserve: int, timeout: float = MAX_QUEUE_SECONDS) -> _Req:
        """Wait until ``reserve`` tokens are free (FIFO); raises ApiError when it can never fit or waited too long."""
        if reserve > self.capacity_tokens:
            raise ApiError(400, f"This model's maximum context length is {self.capacity_tokens} tokens; the request "
                                f"needs {reserve} (prompt + max_tokens)")
        r = _Req(reserve)
        deadline = time.monotonic() + timeout
        with self.cond:
            self.queue.append(r)
            self._admit_head()
            while not r.admitted:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.queue.remove(r)
                    self._admit_head()
                    raise ApiError(503, f"waited {timeout:g}s for KV cache room")
                self.cond.wait(min(left, 0.5))
                self._admit_head()  # the background share may have shrunk
        return r

    def release(self, r: _Req) -> None:
        with self.cond:
            if r.admitted and not r.cancelled:
                r.cancelled = True
                self.reserved -= r.reserve
                self.running -= 1
                self._admit_head()

    def token_gap(self) -> float:
        return self.itl + self.running * self.itl_per_running

    def first_token(self, prompt: int) -> float:
        return self.ttft + prompt * self.prefill_per_token

    @property
    def waiting(self) -> int:
        return len(self.queue)

    @property
    def usage(self) -> float:
        """The probe's share of the cache (ratio), beside the background's."""
        return self.reserved / self.capacity_tokens if self.capacity_tokens else 0.0


def _token_ids(text: str) -> list[int]:
    """A word per token, each word's id stable (crc32 within a 32 000-token vocabulary)."""
    return [zlib.crc32(w.encode("utf-8", "surrogateescape")) % 32000 for w in text.split()]


def _prompt_tokens(body: JsonDoc, chat: bool) -> int:
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "messages: expected a non-empty list")
        n = 0
        for m in messages:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list):  # content parts
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            if not isinstance(content, str):
                raise ApiError(400, "messages[].content: expected a string")
            n += len(content.split()) + CHAT_TEMPLATE_TOKENS
        return n
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise ApiError(400, "prompt: expected a string or a list of token ids")
    return len(prompt.split())


class Api:
    """The HTTP side: handlers call ``get``/``post`` with the request's handler (BaseHTTPRequestHandler)."""

    def __init__(self, model: LoadModel, state: ServingState, lock: threading.Lock) -> None:
        self.model = model
        self.state = state  # runtime_metrics.ServingState: fed with what is served
        self.lock = lock  # the state's lock (the driver advances under it)
        self.created = int(time.time())

    # --------------------------------------------------------------------------- what /metrics adds
    def overlay(self) -> dict[str, float]:
        """The probe load's share of the gauges (added to the scenario signals' at render time)."""
        with self.model.cond:
            return {"running": self.model.running, "waiting": self.model.waiting, "kv_usage": self.model.usage}

    # ----------------------------------------------------------------------------------------- HTTP
    def get(self, h: BaseHTTPRequestHandler, path: str) -> bool:
        if path == "/v1/models":
            self._json(h, 200, {"object": "list", "data": [{"id": self.state.model, "object": "model",
                                                             "created": self.created, "owned_by": "vllm",
                                                             "max_model_len": self.model.capacity_tokens}]})
            return True
        if path in ("/health", "/v1/health"):
            h.send_response(200)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return True
        return False

    def post(self, h: BaseHTTPRequestHandler, path: str) -> bool:
        if path not in ("/tokenize", "/v1/completions", "/v1/chat/completions"):
            return False
        try:
            length = int(h.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                raise ApiError(413, f"request body over {MAX_BODY} bytes")
            try:
                body = json.loads(h.rfile.read(length) or b"null")
            except ValueError:
                raise ApiError(400, "the body is not JSON") from None
            if not isinstance(body, dict):
                raise ApiError(400, "expected a JSON object")
            if path == "/tokenize":
                text = body.get("prompt")
                if not isinstance(text, str):
                    raise ApiError(400, "prompt: expected a string")
                ids = _token_ids(text)
                self._json(h, 200, {"tokens": ids, "count": len(ids), "max_model_len": self.model.capacity_tokens})
                return True
            self._generate(h, body, chat=path.endswith("chat/completions"))
        except ApiError as exc:
            self._json(h, exc.status, {"object": "error", "message": str(exc), "type": "BadRequestError",
                                       "code": exc.status})
        except (ConnectionError, TimeoutError):
            pass  # the client went away
        return True

    def _json(self, h: BaseHTTPRequestHandler, status: int, doc: JsonDoc) -> None:
        data = json.dumps(doc).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _generate(self, h: BaseHTTPRequestHandler, body: JsonDoc, chat: bool) -> None:
        prompt = _prompt_tokens(body, chat)
        max_tokens = body.get("max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens")
        if max_tokens is None:
            max_tokens = DEFAULT_MAX_TOKENS
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_OUTPUT_TOKENS:
            raise ApiError(400, f"max_tokens: expected an integer between 1 and {MAX_OUTPUT_TOKENS}")
        stream = bool(body.get("stream"))
        usage_chunk = bool((body.get("stream_options") or {}).get("include_usage")) if stream else False
        m = self.model
        started = time.monotonic()
        req = m.admit(m.tokens_for(prompt, max_tokens))
        rid = f"cmpl-{id(req):x}"
        kind = "chat.completion" if chat else "text_completion"
        try:
            if stream:
                h.send_response(200)
                h.send_header("Content-Type", "text/event-stream")
                h.send_header("Cache-Control", "no-cache")
                h.end_headers()
            time.sleep(m.first_token(prompt))
            first = time.monotonic()
            pieces = []
            for i in range(max_tokens):
                if i:
                    time.sleep(m.token_gap())
                word = " tok"
                pieces.append(word)
                if stream:
                    choice = ({"index": 0, "delta": ({"role": "assistant", "content": word} if i == 0
                                                     else {"content": word}), "finish_reason": None}
                              if chat else {"index": 0, "text": word, "finish_reason": None})
                    last = i == max_tokens - 1
                    if last:
                        choice["finish_reason"] = "length"
                    h.wfile.write(b"data: " + json.dumps({"id": rid, "object": f"{kind}.chunk" if chat else kind,
                                                          "model": self.state.model, "choices": [choice]}).encode()
                                  + b"\n\n")
                    h.wfile.flush()
            done = time.monotonic()
            usage = {"prompt_tokens": prompt, "completion_tokens": max_tokens, "total_tokens": prompt + max_tokens}
            if stream:
                if usage_chunk:
                    h.wfile.write(b"data: " + json.dumps({"id": rid, "object": kind, "model": self.state.model,
                                                          "choices": [], "usage": usage}).encode() + b"\n\n")
                h.wfile.write(b"data: [DONE]\n\n")
                h.wfile.flush()
            else:
                text = "".join(pieces)
                choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                          if chat else {"index": 0, "text": text, "finish_reason": "length"})
                self._json(h, 200, {"id": rid, "object": kind, "model": self.state.model, "choices": [choice],
                                    "usage": usage})
        finally:
            m.release(req)
        with self.lock:  # what the runtime's own /metrics counts
            s = self.state
            s.requests += 1
            s.prompt_tokens += prompt
            s.generation_tokens += max_tokens
            s.observe("ttft", first - started)
            if max_tokens > 1:
                s.observe("itl", (done - first) / (max_tokens - 1), max_tokens - 1)
            s.observe("e2e", done - started)
