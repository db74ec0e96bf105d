"""The weights' own account, read from their files' headers: safetensors headers and ``model.safetensors.index.json``.

Both are scanned incrementally (``_Scan``: one member at a time, never one json.loads of the whole), size-capped
(``MODEL_INDEX_BYTES``, ``SAFETENSORS_HEADER_BYTES``, and per tensor) and read through safeio.Tree like every model
file; ``_safetensors_params`` counts the parameters (quantized tensors unpacked) and the bytes as stored.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterator

from headroom.jsontypes import JsonDoc, JsonValue, YamlDict
from headroom.safeio import Tree, Within, show
from headroom.workload.modelconfig.fields import ModelConfigError, _refused

# model.safetensors.index.json: about 95 bytes a weight_map entry (measured on public index files: WizardLM-2-8x22B's,
# 56 layers x 8 experts, is 162 187 bytes; Falcon-180B's 52 265); DeepSeek-V3's 91 k entries make ~9 MB, Kimi-K2's
# ~138 k (384 experts x 60 layers x 3 projections x weight and scale) ~13 MB; Llama-3.1-405B's 1 138 ~0.1 MB.
# Scanned incrementally (only the shard names are kept): memory is the bytes read
MODEL_INDEX_BYTES = 32 * 1024 * 1024
# a safetensors header: ~120 bytes a tensor; a 5 GB shard of DeepSeek-V3 holds ~560 tensors (~70 KB), and all 91 k of
# its tensors in one file would make ~11 MB. The format's own limit is 100 MB (safetensors MAX_HEADER_SIZE), which a
# 95 MB hostile header used to reach: 944 MiB and the interpreter held 9.5 s. Scanned incrementally, tensor by
# tensor, never whole: memory is the bytes read, and the scan lets other threads run
SAFETENSORS_HEADER_BYTES = 16 * 1024 * 1024
TENSOR_ENTRY_BYTES = 4096  # one tensor's {dtype, shape, data_offsets} (real ones: ~60 bytes)
TENSOR_DIMS = 8  # dimensions of one tensor (real checkpoints: at most 5, a 3-D convolution's)
TENSOR_ELEMENTS = 1 << 50  # elements of one tensor (the largest real ones, embeddings, are ~2**32)
INDEX_METADATA_BYTES = 64 * 1024  # the index's "metadata" object (real ones: {"total_size": N}, ~30 bytes)
MODEL_SHARDS = 2048  # distinct files in a weight_map (DeepSeek-V3: 163, Llama-3.1-405B: 191)
_ST_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4, "I16": 2,
             "I8": 1, "U8": 1, "BOOL": 1}  # fmt: skip
_QUANT_AUX = (".qzeros", ".scales", ".g_idx", ".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map",
              ".quant_state", "weight_scale", "input_scale", "weight_scale_inv", "weight_zero_point",
              ".SCB", "weight_format")  # fmt: skip


# ---------------------------------------------------------------------------------- safetensors
_QUANT_AUX_RE = re.compile("|".join(map(re.escape, _QUANT_AUX)))
_WS = re.compile(rb"[ \t\n\r]*")
_QSTR = rb'"(?:[^"\\\x00-\x1f]++|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*+"'
_STR = re.compile(_QSTR)  # a JSON string, possessive: linear however long
# one weight_map entry, "tensor": "file" and the , or } after it: the file name (quoted) and which
_PAIR = re.compile(rb"[ \t\n\r]*" + _QSTR + rb"[ \t\n\r]*:[ \t\n\r]*(" + _QSTR + rb")[ \t\n\r]*([,}])")
_SCALAR = re.compile(rb"-?[0-9][0-9.eE+-]*|true|false|null")
_BRACKET_OR_STR = re.compile(rb'[\[\]{}"]')
# one tensor as the safetensors library writes it (serde_json, compact, in this key order): the fast path
_ENTRY = re.compile(rb'\{"dtype":"([A-Z0-9_]{1,16})","shape":\[((?:[0-9]{1,19}(?:,[0-9]{1,19}){0,7})?)\],'
                    rb'"data_offsets":\[[0-9]{1,20},[0-9]{1,20}\]\}')
JSON_DEPTH = 64  # nesting skipped in an index or header (real ones: 3)


class _Scan:
    """An incremental reader of a JSON object in bytes: members one at a time, each value skipped or parsed on
    its own, so a hostile file costs the bytes read and a loop that lets other threads run, never one
    json.loads of everything holding the interpreter for seconds."""

    def __init__(self, buf: bytes, what: str):
        self.buf, self.pos, self.what = buf, 0, what

    def fail(self, why: str) -> ModelConfigError:
        return ModelConfigError(self.what, f"not valid JSON: {why}")

    def ws(self) -> None:
        self.pos = _WS.match(self.buf, self.pos).end()  # type: ignore[union-attr]

    def take(self, ch: bytes) -> bool:
        self.ws()
        if self.buf.startswith(ch, self.pos):
            self.pos += 1
            return True
        return False

    def string(self) -> str:
        self.ws()
        m = _STR.match(self.buf, self.pos)
        if m is None:
            raise self.fail("expected a string")
        self.pos = m.end()
        raw = self.buf[m.start() + 1: m.end() - 1]
        try:
            return raw.decode("utf-8") if b"\\" not in raw else str(json.loads(m.group(0)))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise self.fail("a string that is not UTF-8") from None

    def skip(self, limit: int | None = None) -> None:
        """Past one value, any kind, without building it (nesting bounded by JSON_DEPTH, length by ``limit``)."""
        self.ws()
        start = self.pos
        if self.buf.startswith(b'"', self.pos):
            self.string()
            return
        if not self.buf.startswith((b"{", b"["), self.pos):
            m = _SCALAR.match(self.buf, self.pos)
            if m is None:
                raise self.fail("expected a value")
            self.pos = m.end()
            return
        depth = 0
        while True:
            m = _BRACKET_OR_STR.search(self.buf, self.pos)
            if m is None:
                raise self.fail("truncated")
            ch = m.group(0)
            if limit is not None and m.start() - start > limit:
                raise self.fail(f"a value longer than the {limit} bytes allowed")
            if ch == b'"':
                self.pos = m.start()
                self.string()
                continue
            self.pos = m.end()
            depth += 1 if ch in (b"{", b"[") else -1
            if depth > JSON_DEPTH:
                raise self.fail(f"nested deeper than {JSON_DEPTH}")
            if depth == 0:
                return

    def value(self, limit: int) -> JsonValue:
        """The next value, parsed alone; at most ``limit`` bytes of it."""
        self.ws()
        start = self.pos
        self.skip(limit)
        if self.pos - start > limit:
            raise self.fail(f"a value longer than the {limit} bytes allowed")
        try:
            return json.loads(self.buf[start: self.pos])
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            raise self.fail("a malformed value") from None

    def members(self) -> Iterator[str]:
        """The keys of the object at the current position; the caller reads (or skips) each value."""
        if not self.take(b"{"):
            raise self.fail("expected a JSON object")
        if self.take(b"}"):
            return
        while True:
            key = self.string()
            if not self.take(b":"):
                raise self.fail("expected ':'")
            yield key
            if self.take(b","):
                continue
            if self.take(b"}"):
                return
            raise self.fail("expected ',' or '}'")

    def end(self) -> None:
        self.ws()
        if self.pos != len(self.buf):
            raise self.fail("data after the object")


def _read_header(tree: Tree, path: tuple[str, ...], within: Within) -> bytes:
    """The JSON header bytes of one .safetensors file (at most SAFETENSORS_HEADER_BYTES; its length is not echoed)."""
    shown = show(path)
    try:
        f = tree.open(path, within)
    except OSError as exc:
        raise _refused(exc, shown) from None
    try:
        raw = f.pread(8)
        if len(raw) != 8:
            raise ModelConfigError(shown, "truncated safetensors file (no header length)")
        (size,) = struct.unpack("<Q", raw)
        if size > SAFETENSORS_HEADER_BYTES:
            raise ModelConfigError(shown, f"safetensors header larger than the {SAFETENSORS_HEADER_BYTES >> 20} MiB "
                                          "allowed: not read")  # fmt: skip
        if size > f.stat.st_size - 8:
            raise ModelConfigError(shown, "truncated safetensors file (its header runs past the end)")
        header = f.pread(size, 8)
        if len(header) != size:
            raise ModelConfigError(shown, "truncated safetensors file (shorter than when opened)")
        return header
    except OSError as exc:
        raise _refused(exc, shown) from None
    finally:
        os.close(f.fd)


def safetensors_tensors(header: bytes, what: str) -> Iterator[tuple[str, str, tuple[int, ...]]]:
    """(name, dtype, shape) of each tensor in a safetensors header, read incrementally (``_Scan``)."""
    scan = _Scan(header, what)
    for name in scan.members():
        if name == "__metadata__":
            scan.skip()
            continue
        scan.ws()
        m = _ENTRY.match(header, scan.pos)
        if m is not None:
            scan.pos = m.end()
            dtype = m.group(1).decode()
            shape = tuple(int(d) for d in m.group(2).split(b",")) if m.group(2) else ()
        else:
            info = scan.value(TENSOR_ENTRY_BYTES)
            if not isinstance(info, dict):
                raise ModelConfigError(what, "a tensor entry that is not a JSON object")
            dtype, dims = str(info.get("dtype")), info.get("shape", [])
            if not isinstance(dims, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                     for d in dims):  # fmt: skip
                raise ModelConfigError(what, "a tensor shape that is not a list of sizes")
            shape = tuple(dims)
        if len(shape) > TENSOR_DIMS:
            raise ModelConfigError(what, f"a tensor with more than {TENSOR_DIMS} dimensions")
        n = 1
        for d in shape:
            n *= min(d, TENSOR_ELEMENTS + 1)
            if n > TENSOR_ELEMENTS:
                raise ModelConfigError(what, "a tensor larger than any checkpoint holds (over 2**50 elements)")
        yield name, dtype, shape
    scan.end()


def safetensors_header(path: str | os.PathLike[str], tree: Tree | None = None) -> JsonDoc:
    """The tensors of one .safetensors file: {name: {dtype, shape}} (``__metadata__`` left out)."""
    if tree is None:
        with Tree("/") as own:
            return safetensors_header(os.path.abspath(path), own)
    shown = os.fspath(path)
    try:
        fd, canonical, _ = tree.walk(shown)
        os.close(fd)
    except OSError as exc:
        raise _refused(exc, shown) from None
    header = _read_header(tree, canonical, None)
    return {name: {"dtype": dtype, "shape": list(shape)} for name, dtype, shape in
            safetensors_tensors(header, show(canonical))}


def _tensor_params(name: str, dtype: str, shape: tuple[int, ...], bits: int | None) -> int:
    """Logical parameters in one tensor: packed quantized weights unpacked, quantization constants skipped."""
    if _QUANT_AUX_RE.search(name):
        return 0
    n = 1
    for d in shape:
        n *= d
    if name.endswith(".qweight") and dtype == "I32" and bits:
        return n * (32 // bits)
    if dtype == "U8" and bits == 4:  # bitsandbytes 4-bit: two weights per byte
        return n * 2
    return n


def _tensor_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * _ST_BYTES.get(dtype, 0)


def _read_index(tree: Tree, path: tuple[str, ...], within: Within) -> tuple[list[str], JsonValue]:
    """(the shard file names of model.safetensors.index.json's weight_map, metadata.total_size or None), scanned
    incrementally: a weight_map of 100 k entries keeps only its few distinct file names."""
    shown = show(path)
    try:
        raw = tree.read(path, MODEL_INDEX_BYTES, within)
    except OSError as exc:
        raise _refused(exc, shown) from None
    scan = _Scan(raw, shown)
    shards: set[str] = set()
    total = None
    found = False
    for key in scan.members():
        if key == "weight_map":
            found = True
            if not scan.take(b"{"):
                raise ModelConfigError("weight_map", f"{shown} has no weight_map object")
            seen: set[bytes] = set()  # the file names as quoted in the file: compared as bytes, decoded once
            closed = scan.take(b"}")
            while not closed:
                m = _PAIR.match(raw, scan.pos)
                if m is None:
                    raise scan.fail('a weight_map entry that is not "tensor": "file"')
                scan.pos = m.end()
                if m.group(1) not in seen:
                    seen.add(m.group(1))
                    if len(seen) > MODEL_SHARDS:
                        raise ModelConfigError("weight_map", f"{shown} names more than {MODEL_SHARDS} files")
                closed = m.group(2) == b"}"
            for quoted in seen:
                name = _Scan(quoted, shown).string()
                if "/" in name or name in ("", ".", "..") or "\0" in name or len(name) > 255:
                    raise ModelConfigError("weight_map", f"{shown} names a file outside the model directory: "
                                                         "not read")  # fmt: skip
                shards.add(name)
        elif key == "metadata":
            meta = scan.value(INDEX_METADATA_BYTES)
            if isinstance(meta, dict):
                total = meta.get("total_size")
        else:
            scan.skip()
    scan.end()
    if not found:
        raise ModelConfigError("weight_map", f"{shown} has no weight_map object")
    return sorted(shards), total


def _safetensors_params(tree: Tree, directory: tuple[str, ...], fields: YamlDict,
                        within: Within) -> tuple[int | None, str]:
    """(parameters, where from); with the weight files present also sets fields["weight_bytes"]."""
    precision = str(fields.get("precision", ""))
    bits = 4 if precision == "int4" else 8 if precision == "int8" else None
    index_path = (*directory, "model.safetensors.index.json")
    files: list[tuple[str, ...]] = []
    total_size = None

    def exists(path: tuple[str, ...]) -> bool:
        try:
            return tree.kind(path, within) != ""
        except OSError as exc:  # refused: a symlink out of the directory, a directory the user cannot search
            raise _refused(exc, show(path)) from None

    has_index = exists(index_path)
    if has_index:
        names, total_size = _read_index(tree, index_path, within)
        files = [(*directory, name) for name in names]
    elif exists((*directory, "model.safetensors")):
        files = [(*directory, "model.safetensors")]
    present = bool(files) and all(exists(f) for f in files)
    if present:
        total = stored = 0
        for f in files:
            for name, dtype, shape in safetensors_tensors(_read_header(tree, f, within), show(f)):
                total += _tensor_params(name, dtype, shape, bits)
                stored += _tensor_bytes(dtype, shape)
        if stored and precision != "fp32":  # runtimes serve FP32 checkpoints in 16 bits: not as stored
            fields["weight_bytes"] = stored
        return total, "safetensors headers"
    if (has_index and "quantization" not in fields and precision in ("bf16", "fp16", "fp32", "fp8")
            and isinstance(total_size, int) and not isinstance(total_size, bool) and 0 < total_size < 1 << 60):
        per = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}[precision]
        return total_size // per, "safetensors index"
    return None, "architecture"
