"""The probe's HTTP client: one streamed request to an OpenAI-compatible API, timed token by token.

aiohttp (not httpx): vLLM's own ``vllm bench serve`` drives servers with it, so the two measure the same way
(the issue asks for agreement within 10 %), and it streams with less CPU per request than httpx (no per-chunk
decoding layers; tested here by bench/probe.py: the client's CPU per request is in every step).

Works with vLLM, SGLang, TGI's Messages API, Triton's OpenAI frontend and llama.cpp's server: ``POST
/v1/completions`` or ``/v1/chat/completions`` with ``stream: true`` and ``stream_options.include_usage``; the
stream is SSE ``data:`` lines ending in ``data: [DONE]``. Time to first token is to the first chunk that carries
a token; the inter-token latencies are the gaps between chunks that carry a token, its text empty or not (as
``vllm bench serve``; ``_carries_token``); output tokens are the usage chunk's ``completion_tokens`` (else the
chunks counted).

Every failure is a class (``errors`` of a step) and one line of detail, never an exception out of ``send``:
``connect`` (refused, unreachable, DNS), ``timeout`` (no answer or no next chunk in time), ``http_NNN``,
``bad_response`` (HTML, not SSE, not JSON, a line over ``MAX_LINE`` bytes), ``broken_stream`` (the stream ended
or was cut before ``[DONE]``), ``ignores_max_tokens`` (more text than max_tokens allows: the request is cut).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from headroom.jsontypes import JsonDoc, JsonValue

MAX_LINE = 1 << 20  # bytes of one SSE line (a chunk of a few tokens is ~300 bytes)
MAX_ERROR_BODY = 2048  # bytes of an error answer read for its message
DISCOVER_TIMEOUT = 10.0  # seconds for /v1/models and /tokenize
MAX_TOKENS_SLACK = 8  # text chunks beyond max_tokens before a server is judged to ignore it (a chunk may be empty)
IGNORE_EOS_OWNERS = ("vllm", "sglang")  # runtimes that honour ignore_eos (output of exactly max_tokens)
# a fixed vocabulary: prompts are random words from it (tokenized once when the runtime offers /tokenize)
WORDS = tuple(f"{a}{b}" for a in ("ka", "lo", "mi", "ne", "su", "ta", "vi", "ro") for b in
              ("n", "ra", "to", "me", "li", "s", "do", "ga"))  # fmt: skip


class ProbeError(Exception):
    """The endpoint cannot be probed (refused, not an OpenAI-compatible API ...): the message is one line."""


@dataclass
class Target:
    url: str  # the API base, ending in /v1
    model: str
    api: str = "completions"  # or "chat"
    owned_by: str = ""
    max_model_len: int | None = None

    @property
    def root(self) -> str:
        """scheme://host:port (vLLM's /tokenize and /metrics live there)."""
        p = urlsplit(self.url)
        return urlunsplit((p.scheme, p.netloc, "", "", ""))


def api_base(url: str) -> str:
    """The /v1 base of ``url``: http://h:p, http://h:p/v1, http://h:p/metrics (a profile's endpoint) all give
    http://h:p/v1; raises ProbeError for what is not an http(s) URL."""
    p = urlsplit(url.strip())
    if p.scheme not in ("http", "https") or not p.netloc:
        raise ProbeError(f"expected an http:// or https:// URL; got {url!r}")
    path = p.path.rstrip("/")
    for tail in ("/metrics", "/v1/chat/completions", "/v1/completions"):
        if path.endswith(tail):
            path = path[: -len(tail)]
    if not path.endswith("/v1"):
        path += "/v1"
    return urlunsplit((p.scheme, p.netloc, path, "", ""))


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__


async def _json_get(session: aiohttp.ClientSession, url: str) -> JsonValue:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=DISCOVER_TIMEOUT)) as r:
            body = await r.content.read(1 << 20)
            if r.status != 200:
                raise ProbeError(f"{url}: HTTP {r.status} {r.reason or ''}".rstrip())
    except aiohttp.ClientConnectorError as exc:
        raise ProbeError(f"{url}: cannot connect ({_describe(exc.os_error or exc)})") from None
    except TimeoutError:
        raise ProbeError(f"{url}: no answer within {DISCOVER_TIMEOUT:g}s") from None
    except aiohttp.ClientError as exc:
        raise ProbeError(f"{url}: {_describe(exc)}") from None
    try:
        return json.loads(body)
    except ValueError:
        head = body[:60].decode("utf-8", "replace").strip().replace("\n", " ")
        raise ProbeError(f"{url}: the answer is not JSON ({head!r}...): is this an OpenAI-compatible API?") from None


async def discover(session: aiohttp.ClientSession, url: str, model: str | None, api: str) -> Target:
    """The target behind ``url``: its served model (``GET /v1/models``; the first unless ``model`` names one)."""
    base = api_base(url)
    doc = await _json_get(session, base + "/models")
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list) or not data or not all(isinstance(m, dict) and isinstance(m.get("id"), str)
                                                          for m in data):
        raise ProbeError(f"{base}/models: no models listed (expected {{\"data\": [{{\"id\": ...}}]}})")
    ids = [m["id"] for m in data]
    chosen = next((m for m in data if m["id"] == model), None) if model else data[0]
    if chosen is None:
        raise ProbeError(f"{base}/models: serves {', '.join(ids[:5])}, not {model!r}")
    length = chosen.get("max_model_len")
    return Target(base, chosen["id"], api, str(chosen.get("owned_by") or ""),
                  length if isinstance(length, int) and not isinstance(length, bool) else None)


REACH_EXACT = 64  # tokens: beyond this, a length is taken as reachable from the words' counts when their gcd divides it


@dataclass
class Prompts:
    """Prompts of a given token length, always text (as users send: the runtime's tokenizer is part of what is
    measured, and ``vllm bench serve`` sends text too, so the two compare like with like). Where the runtime
    tokenizes (vLLM's ``POST /tokenize``), each word of WORDS is tokenized once with its leading space; when those
    counts add up (checked on the whole vocabulary at once) the prompt's words are chosen so their tokens, plus
    the special tokens the runtime adds, are exactly the length asked for; else words, whose true length the usage
    chunk reports."""

    costs: dict[str, int] = field(default_factory=dict)  # " word" -> its tokens (empty: no tokenizer, or not additive)
    specials: int = 0  # tokens the runtime adds to a text prompt (a BOS ...)

    def __post_init__(self) -> None:
        cs = sorted(set(self.costs.values()))
        self._gcd = math.gcd(*cs) if cs else 1
        self._reach = [True] + [False] * REACH_EXACT  # lengths up to REACH_EXACT made of the words' counts
        for i in range(1, REACH_EXACT + 1):
            self._reach[i] = any(c <= i and self._reach[i - c] for c in cs)

    def _reachable(self, n: int) -> bool:
        """Whether ``n`` tokens are a sum of the words' counts (exactly up to REACH_EXACT, by their gcd beyond)."""
        return self._reach[n] if n <= REACH_EXACT else n % self._gcd == 0

    @property
    def exact(self) -> bool:
        return bool(self.costs)

    def make(self, rng: random.Random, tokens: int, api: str) -> str:
        if not self.costs or api != "completions":
            return " ".join(rng.choice(WORDS) for _ in range(tokens))
        words, left = [], tokens - self.specials
        by_cost = sorted(self.costs.items())
        while left > 0:
            fit = [w for w, c in by_cost if c <= left and self._reachable(left - c)]
            if not fit:  # no mix of words makes it exact (the usage chunk says the true length)
                fit = [w for w, c in by_cost if c <= left] or [by_cost[0][0]]
            w = rng.choice(fit)
            words.append(w)
            left -= self.costs[w]
        return "".join(words)


async def _count_tokens(session: aiohttp.ClientSession, target: Target, text: str, special: bool) -> int | None:
    """Tokens of ``text`` by the runtime's tokenizer (vLLM: POST /tokenize; llama.cpp: the same path with
    ``content``), None when it has none."""
    for body in ({"model": target.model, "prompt": text, "add_special_tokens": special},
                 {"content": text, "add_special": special}):
        try:
            async with session.post(target.root + "/tokenize", json=body,
                                    timeout=aiohttp.ClientTimeout(total=DISCOVER_TIMEOUT)) as r:
                if r.status != 200:
                    continue
                doc = json.loads(await r.content.read(1 << 20))
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None
        ids = doc.get("tokens") if isinstance(doc, dict) else None
        if isinstance(ids, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            return len(ids)
    return None


async def prompts_for(session: aiohttp.ClientSession, target: Target) -> Prompts:
    """Each " word" of WORDS tokenized once (concurrently), the whole vocabulary once to check that the counts
    add up, and once with special tokens; no tokenizer, or counts that do not add up: words, lengths measured."""
    pieces = [" " + w for w in WORDS]
    counts = await asyncio.gather(*(_count_tokens(session, target, p, False) for p in pieces),
                                  _count_tokens(session, target, "".join(pieces), False),
                                  _count_tokens(session, target, "".join(pieces), True))
    *each, whole, with_special = counts
    if any(c is None or c < 1 for c in each) or whole != sum(each) or with_special is None:
        return Prompts()
    return Prompts(dict(zip(pieces, each, strict=True)), max(0, with_special - whole))


@dataclass
class Result:
    """One request as the client saw it (monotonic seconds)."""

    started: float
    input_tokens: int  # asked for
    max_tokens: int
    ttft: float | None = None
    itl: list[float] = field(default_factory=list)
    e2e: float | None = None
    prompt_tokens: int | None = None  # the usage chunk's (the true length)
    output_tokens: int = 0
    error: str | None = None  # the class; None: completed
    detail: str = ""
    cancelled: bool = False  # stopped by the probe (Ctrl-C, an abort, the end of the run): not counted


def payload(target: Target, prompt: str, max_tokens: int) -> JsonDoc:
    body: JsonDoc = {"model": target.model, "max_tokens": max_tokens, "stream": True,
                            "stream_options": {"include_usage": True}, "temperature": 0.0}
    if target.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt if isinstance(prompt, str) else " ".join(WORDS)}]
    else:
        body["prompt"] = prompt
    if target.owned_by in IGNORE_EOS_OWNERS:  # generate exactly max_tokens (the load asked for)
        body["ignore_eos"] = True
    return body


def _carries_token(chunk: dict, chat: bool) -> bool | None:
    """Whether an event carries a generated token, its text possibly empty: a byte-level tokenizer's token that
    is part of a character streams as empty text (about 3 in 10 of the tiny test model's tokens on vLLM). Not a
    token: the usage chunk (no choices), chat's opening role-only delta. None: a closing chunk with empty text and
    a finish_reason, which is vLLM's last token when its text is empty but a mere end marker elsewhere (llama.cpp,
    TGI): ``send`` counts it when the usage reports more tokens than chunks."""
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return False
    c = choices[0]
    if chat:
        delta = c.get("delta")
        if not isinstance(delta, dict):
            return False
        text = delta.get("content") or delta.get("reasoning_content")
        if text:
            return isinstance(text, str)
        if "content" not in delta or "role" in delta:
            return False
        return True if c.get("finish_reason") is None else None
    text = c.get("text")
    if not isinstance(text, str):
        return False
    return True if text or c.get("finish_reason") is None else None


async def send(session: aiohttp.ClientSession, target: Target, prompt: str, input_tokens: int, max_tokens: int,
               timeout: float) -> Result:
    """One streamed request; never raises but CancelledError (the probe stopping it)."""
    r = Result(time.monotonic(), input_tokens, max_tokens)
    path = "/chat/completions" if target.api == "chat" else "/completions"
    chat = target.api == "chat"
    chunks = 0
    last = r.started
    closing: float | None = None  # when a closing chunk with empty text came
    done = False
    try:
        async with asyncio.timeout(timeout):
            async with session.post(target.url + path, json=payload(target, prompt, max_tokens)) as resp:
                if resp.status != 200:
                    body = await resp.content.read(MAX_ERROR_BODY)
                    r.error, r.detail = f"http_{resp.status}", _error_message(body, resp.status)
                    return r
                ctype = resp.headers.get("Content-Type", "")
                if "text/event-stream" not in ctype:
                    head = (await resp.content.read(80)).decode("utf-8", "replace").strip().replace("\n", " ")
                    r.error, r.detail = "bad_response", (f"answered {ctype or 'no Content-Type'}, not an event stream "
                                                         f"({head[:60]!r})")
                    return r
                while True:
                    line = await resp.content.readline()
                    arrived = time.monotonic()  # before any parsing: the event's time is when its bytes came
                    if not line:
                        break
                    if len(line) > MAX_LINE:
                        r.error, r.detail = "bad_response", f"an event line over {MAX_LINE} bytes"
                        return r
                    if not line.endswith(b"\n"):  # the connection closed inside a line
                        r.error, r.detail = "broken_stream", f"the stream was cut inside an event after {chunks} chunks"
                        return r
                    line = line.strip()
                    if not line or line.startswith(b":"):
                        continue
                    if not line.startswith(b"data:"):
                        continue  # event:, id:, retry: fields
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        done = True
                        break
                    try:
                        chunk = json.loads(data)
                    except ValueError:
                        r.error, r.detail = "bad_response", f"an event that is not JSON: {data[:60]!r}"
                        return r
                    if not isinstance(chunk, dict):
                        r.error, r.detail = "bad_response", "an event that is not a JSON object"
                        return r
                    if isinstance(chunk.get("error"), dict | str):
                        err = chunk["error"]
                        r.error = "stream_error"
                        r.detail = str(err.get("message") if isinstance(err, dict) else err)[:200]
                        return r
                    usage = chunk.get("usage")
                    if isinstance(usage, dict):
                        if isinstance(usage.get("prompt_tokens"), int):
                            r.prompt_tokens = usage["prompt_tokens"]
                        if isinstance(usage.get("completion_tokens"), int):
                            r.output_tokens = usage["completion_tokens"]
                    token = _carries_token(chunk, chat)
                    if token is None:  # a closing chunk with empty text: a token only if the usage says so
                        closing = arrived
                    elif token:
                        if r.ttft is None:
                            r.ttft = arrived - r.started
                        else:
                            r.itl.append(arrived - last)
                        last = arrived
                        chunks += 1
                        if chunks > max_tokens + MAX_TOKENS_SLACK:
                            r.error = "ignores_max_tokens"
                            r.detail = f"streamed more than {max_tokens} tokens for max_tokens {max_tokens}: cut"
                            return r
    except TimeoutError:
        r.error, r.detail = "timeout", f"no complete answer within {timeout:g}s"
        return r
    except aiohttp.ClientConnectorError as exc:
        r.error, r.detail = "connect", _describe(exc.os_error or exc)
        return r
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, ConnectionError) as exc:
        r.error, r.detail = "broken_stream", _describe(exc)
        return r
    except ValueError as exc:  # aiohttp: a line over its buffer ("Chunk too big")
        r.error, r.detail = "bad_response", _describe(exc)
        return r
    except aiohttp.ClientError as exc:
        r.error, r.detail = "connect" if r.ttft is None else "broken_stream", _describe(exc)
        return r
    if not done:
        r.error, r.detail = "broken_stream", f"the stream ended after {chunks} chunks without [DONE]"
        return r
    if r.ttft is None:
        r.error, r.detail = "bad_response", "the stream carried no text"
        return r
    if closing is not None and r.output_tokens > chunks:  # vLLM: the last token's text was empty
        r.itl.append(closing - last)
        chunks += 1
    if not r.output_tokens:
        r.output_tokens = chunks
    if r.output_tokens > max_tokens:
        r.error, r.detail = "ignores_max_tokens", f"{r.output_tokens} tokens for max_tokens {max_tokens}"
        return r
    r.e2e = time.monotonic() - r.started
    return r


def _error_message(body: bytes, status: int) -> str:
    try:
        doc = json.loads(body)
        msg = doc.get("message") or (doc.get("error") or {}).get("message") if isinstance(doc, dict) else None
        if isinstance(doc, dict) and isinstance(doc.get("error"), str):
            msg = doc["error"]
    except (ValueError, AttributeError):
        msg = None
    if not msg:
        msg = body[:100].decode("utf-8", "replace").strip().replace("\n", " ")
    return f"HTTP {status}: {str(msg)[:200]}"


def new_session(limit: int) -> aiohttp.ClientSession:
    """One session for a whole probe: ``limit`` connections (the concurrency asked for), no proxy from the env."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit, limit_per_host=limit,
                                                                enable_cleanup_closed=True),
                                 timeout=aiohttp.ClientTimeout(total=None, sock_connect=10.0),
                                 read_bufsize=MAX_LINE, trust_env=False)
