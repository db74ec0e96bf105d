"""JSON status endpoints, for runtimes without /metrics: ``STATUS_READERS`` (runtime -> reader; Ollama's
GET /api/ps: the models it holds loaded and their bytes in GPU memory), each answer bounded (MAX_RESIDENT_MODELS,
MAX_MODEL_NAME) and any other answer a one-line ``ScrapeError``."""

from __future__ import annotations

from collections.abc import Callable

from headroom.jsontypes import JsonValue
from headroom.samples import ServingFields
from headroom.sources.serving.errors import Oversized, ScrapeError
from headroom.workload import runtimes as runtime_descriptions

MAX_MODEL_NAME = 128  # characters of a resident model's name kept (a name is whoever pulled the model's to choose)
MAX_RESIDENT_MODELS = 256  # entries of a status answer's model list read (Ollama loads a few; OLLAMA_MAX_LOADED_MODELS)


def _json(body: bytes, runtime: str) -> JsonValue:
    """A status endpoint's JSON answer, or a one-line ScrapeError naming what is wrong with it."""
    import json

    label = runtime_descriptions.label(runtime)
    try:
        return json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ScrapeError(f"body is not UTF-8 text (byte 0x{body[exc.start]:02x} at offset {exc.start})") from None
    except ValueError as exc:
        raise ScrapeError(f"not the JSON {label}'s status endpoint answers: {str(exc).splitlines()[0][:120]}") from None


def _ollama_ps(doc: JsonValue) -> ServingFields:
    """Ollama's GET /api/ps (api/types.go ProcessResponse): ``{"models": [{"name", "size", "size_vram",
    "expires_at", ...}]}``, the models it holds loaded, each with its bytes in all and in GPU memory (size_vram is
    left out when 0: all on the CPU, ollama#4840). No request counts: Ollama exports none."""
    models = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(models, list):
        raise ScrapeError("not an Ollama /api/ps answer: no \"models\" list; is the endpoint http://HOST:11434/api/ps?")
    if len(models) > MAX_RESIDENT_MODELS:
        raise Oversized(f"oversized: {len(models)} resident models, more than the {MAX_RESIDENT_MODELS} read "
                        "(serving.MAX_RESIDENT_MODELS); not read", 0)
    names, total, vram = [], 0.0, 0.0
    for i, m in enumerate(models):
        size: JsonValue  # from the runtime's /api/ps, checked below
        in_vram: JsonValue
        size, in_vram = (m.get("size"), m.get("size_vram", 0)) if isinstance(m, dict) else (None, None)
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < 2**63 for v in (size, in_vram)):
            raise ScrapeError(f"not an Ollama /api/ps answer: models[{i}] has no byte counts size and size_vram")
        name = str(m.get("name") or m.get("model") or "?")
        names.append(name if len(name) <= MAX_MODEL_NAME else name[:MAX_MODEL_NAME - 3] + "...")
        total += size
        vram += in_vram
    return dict(resident_models=tuple(names), resident_bytes=total, resident_vram_bytes=vram)


# runtime -> the reader of its JSON status endpoint (RuntimeDescription.status), for runtimes without /metrics
STATUS_READERS: dict[str, Callable[[JsonValue], ServingFields]] = {"ollama": _ollama_ps}
