"""Config fuzzing: whatever bytes arrive, the loader answers with positioned issues, never a traceback.

Inputs: the repository's config.yaml and valid workload profiles with values, keys and types mutated;
random YAML documents; text-level edits of config.yaml; wrong types; huge numbers; deep nesting;
non-UTF-8 bytes. Property: ``check_config_text`` returns a Config or raises ConfigError, and every issue
reads FILE:LINE:COLUMN: path: message with the position inside the text. A few cases also go through
`headroom check-config` as a subprocess: exit 2, the issue on stderr, no traceback.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headroom.config import Config, ConfigError, check_config_text

from conftest import ROOT

NAME = "fuzz.yaml"
ISSUE = re.compile(r"(?P<file>fuzz\.yaml):(?P<line>\d+):(?P<column>\d+): (?P<path>[^\n]+?): (?P<message>[^\n]+)")
# examples per property: 300 in the default run (~20 s in all); HEADROOM_FUZZ_EXAMPLES=5000 for a long hunt
EXAMPLES = int(os.environ.get("HEADROOM_FUZZ_EXAMPLES", "300"))
YAML_LINE_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

BASE = yaml.safe_load((ROOT / "config.yaml").read_text())
WORKLOADS = yaml.safe_load("""\
- name: chat
  kind: inference
  params: 8B
  precision: bf16
  architecture: {layers: 32, heads: 32, kv_heads: 8, head_dim: 128, hidden_size: 4096}
  context: {max: 8192}
  concurrency: 16
  gpus: [0, 1]
  match: {cmdline: "vllm serve", systemd_unit: vllm}
- name: tune
  kind: finetune-lora
  model: {name: meta-llama/Llama-3.1-8B, version: "2024-07"}
  params: 8B
  precision: bf16
  context: 2048
  training: {optimizer: adamw-8bit, micro_batch: 4, batch_size: 64, gradient_checkpointing: true}
  lora: {rank: 16, alpha: 32, target_modules: all-linear}
  dataloader_workers: 8
  gpus: [0]
  match: {cgroup: "/system.slice/tune-*.service"}
""")
VALID = {**BASE, "workloads": WORKLOADS}


def check(text: str | bytes) -> Config | None:
    """Load ``text``; returns the Config, or None after checking every issue is well positioned."""
    try:
        return check_config_text(text, NAME)
    except ConfigError as exc:
        assert exc.issues, "ConfigError without issues"
        decoded = text if isinstance(text, str) else text.decode("utf-8", "replace")
        lines = len(YAML_LINE_BREAK.split(decoded))  # YAML also breaks lines at CR, NEL, LS and PS
        for issue in exc.issues:
            rendered = str(issue)
            m = ISSUE.fullmatch(rendered)
            assert m, f"badly formatted issue: {rendered!r}"
            assert 1 <= int(m["line"]) <= lines, f"line outside the text: {rendered!r}"
            assert int(m["column"]) >= 1
        assert str(exc) == "\n".join(str(i) for i in exc.issues)
        return None


def test_the_starting_points_are_valid():
    """The mutations start from configurations that load (else every mutation tests the same error)."""
    config = check(yaml.safe_dump(VALID, sort_keys=False))
    assert config is not None and [w.name for w in config.workloads] == ["chat", "tune"]


# ------------------------------------------------------------------------------------- strategies
scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(), st.integers(min_value=10**18, max_value=10**400), st.integers(max_value=-(10**18)),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e308, -1e308, 5e-324, -0.0]),
    st.text(max_size=30),
    st.sampled_from(["1s", "500ms", "-1s", "1e999s", "10m", "0", "80GiB", "1e400B", "8B", "fp8", "auto",
                     "nan", ".inf", "0x10", "1_000", "~", "yes", "NO", "[", "{", "*a", "&a", "!!python/none",
                     "\x00", "\ud800", "GPU-1", "/dev/shm", "^(", "(?P<x", "a" * 5000]),
)  # fmt: skip
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=12), inner, max_size=4)),
                      max_leaves=12)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (tuple of keys and indexes) into ``node``, the root included."""
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, prefix + (i,))
    return out


def _copy(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _copy(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_copy(v) for v in node]
    return node


@st.composite
def mutated(draw) -> Any:
    """The valid document with 1-4 edits: a value replaced (any type), a key dropped, renamed or added."""
    doc = _copy(VALID)
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        parent, key = None, None
        node = doc
        for part in path:
            parent, key, node = node, part, node[part]
        action = draw(st.sampled_from(["replace", "drop", "rename", "add"]))
        if action == "replace" or parent is None:
            new = draw(values)
            if parent is None:
                doc = new
                continue
            parent[key] = new
        elif action == "drop":
            del parent[key]
        elif action == "rename" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=12))] = parent.pop(key)
        elif isinstance(node, dict):
            node[draw(st.text(max_size=12))] = draw(values)
        elif isinstance(node, list):
            node.append(draw(values))
    return doc


def dump(doc: Any) -> str:
    """YAML for ``doc``; values PyYAML cannot represent (huge ints are fine, lone surrogates are not)
    are written as their repr."""
    try:
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    except (yaml.YAMLError, UnicodeEncodeError):
        return yaml.safe_dump(repr(doc))


# ----------------------------------------------------------------------------------------- properties
@FUZZ
@given(mutated())
def test_mutated_valid_configs_load_or_fail_with_positions(doc):
    check(dump(doc))


@FUZZ
@given(values)
def test_random_yaml_documents(doc):
    check(dump(doc))


@FUZZ
@given(st.data())
def test_text_edits_of_the_example_config(data):
    text = (ROOT / "config.yaml").read_text() + yaml.safe_dump({"workloads": WORKLOADS}, sort_keys=False)
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(text)))
        cut = data.draw(st.integers(0, 20))
        insert = data.draw(st.one_of(st.text(max_size=8), st.sampled_from(
            [":", "- ", "  ", "\t", "\n", "{", "}", "[", "]", "&x ", "*x", "!!binary ", "? ", "|", ">", "#", "'", '"',
             "%YAML 1.1\n", "---\n", "...\n", "<<: *x\n", "\ufeff", "\r"])))
        text = text[:at] + insert + text[at + cut:]
    check(text)


@FUZZ
@given(st.binary(max_size=400))
def test_arbitrary_bytes(raw):
    check(raw)


# Bytes that are never valid UTF-8, generated rather than filtered out of random bytes: ASCII, then a
# byte no UTF-8 text can hold at that place (a lone continuation byte, C0/C1, F5-FF), then anything.
NON_UTF8 = st.builds(
    lambda ascii_prefix, core, rest: bytes(c & 0x7F for c in ascii_prefix) + bytes([core]) + rest,
    st.binary(max_size=3),
    st.integers(0x80, 0xBF) | st.sampled_from([0xC0, 0xC1, *range(0xF5, 0x100)]),
    st.binary(max_size=4),
)


@FUZZ
@given(NON_UTF8, st.integers(0, 400))
def test_non_utf8_bytes_inside_a_valid_config(bad, at):
    assert not _utf8(bad)  # the generator's promise, checked
    raw = (ROOT / "config.yaml").read_bytes()
    at = min(at, len(raw))
    check(raw[:at] + bad + raw[at:])


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


DEEP = 50_000
SITUATIONS = {
    "deeply nested flow lists": "agent: " + "[" * DEEP + "]" * DEEP,
    "deeply nested flow mappings": "agent: " + "{a: " * DEEP + "1" + "}" * DEEP,
    "deeply nested block mappings": "".join(" " * i + f"k{i}:\n" for i in range(3000)) + " " * 3000 + "v: 1\n",
    "deeply nested anchors and aliases (billion laughs)": "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)),
    "huge integer interval": "agent:\n  sample_interval: " + "9" * 5000 + "\n",
    "huge float window": "agent:\n  window: 1e400\n",
    "nan interval": "agent:\n  sample_interval: .nan\n",
    "negative infinity window": "agent:\n  window: -.inf\n",
    "huge params": "workloads:\n  - {name: a, kind: inference, precision: bf16, params: " + "9" * 400 + "}\n",
    "huge GPU index": "workloads:\n  - {name: a, kind: inference, params: 8B, precision: bf16, gpus: [" + "9" * 30
                      + "]}\n",
    "huge context": "workloads:\n  - {name: a, kind: inference, params: 8B, precision: bf16, context: {max: 1e300}}\n",
    "mountpoints a mapping": "collectors:\n  shm:\n    mountpoints: {a: b}\n",
    "disk regex invalid": "collectors:\n  disk:\n    device_include: '(['\n",
    "collector a list": "collectors: [nvml, cpu]\n",
    "document a scalar": "42\n",
    "document a list": "- 1\n- 2\n",
    "binary tag": "agent: !!binary aGVsbG8=\n",
    "python tag": "agent: !!python/object:os.system ls\n",
    "set tag": "agent: !!set {a, b}\n",
    "timestamp": "agent:\n  sample_interval: 2001-12-14t21:59:43.10-05:00\n",
    "merge key": "base: &b {sample_interval: 1s}\nagent:\n  <<: *b\n",
    "two documents": "agent: {}\n---\nagent: {}\n",
    "duplicate keys": "agent:\n  window: 1m\n  window: 2m\n",
    "non-string keys": "agent:\n  1: 2\n  [a]: 3\n  null: 4\n",
    "byte order mark": "\ufeffagent:\n  window: 1m\n",
    "NUL byte": "agent:\n  window: 1m\x00\n",
    "lone surrogate escape": 'agent:\n  window: "\\ud800"\n',
    "tabs for indentation": "agent:\n\twindow: 1m\n",
    "workload name an integer": "workloads:\n  - {name: 7, kind: inference, params: 8B, precision: bf16}\n",
    "workloads a mapping": "workloads: {name: a}\n",
    "workloads_dir a list": "workloads_dir: [a, b]\n",
}


@pytest.mark.parametrize("text", list(SITUATIONS.values()), ids=list(SITUATIONS))
def test_hostile_documents(text):
    check(text)


@pytest.mark.parametrize("data", [b"\xff\xfe\x00agent: 1", b"agent:\n  window: \xc3\x28\n", "agent: \ud800".encode(
    "utf-8", "surrogatepass")], ids=["UTF-16 BOM", "truncated sequence", "encoded surrogate"])
def test_non_utf8_files_are_refused_at_the_first_bad_byte(data):
    with pytest.raises(ConfigError) as exc:
        check_config_text(data, NAME)
    (issue,) = exc.value.issues
    assert issue.message == "file is not valid UTF-8"
    assert (issue.line, issue.column) == _position_of_first_bad_byte(data)


def _position_of_first_bad_byte(data: bytes) -> tuple[int, int]:
    for i in range(len(data) + 1):
        if not _utf8(data[:i]) and _utf8(data[: i - 1] if i else b""):
            start = i - 1
            break
    else:  # pragma: no cover - every case above is invalid
        raise AssertionError("valid UTF-8")
    # the first byte that cannot start or continue a valid sequence: back up to the sequence start
    while start > 0 and 0x80 <= data[start] < 0xC0 and not _utf8(data[:start]):
        start -= 1
    line = data[:start].count(b"\n") + 1
    return line, start - (data.rfind(b"\n", 0, start) + 1) + 1


# ------------------------------------------------------------------------------------- subprocess
CLI_CASES = {
    "non-UTF-8 bytes": b"agent:\n  window: 10m\xff\n",
    "deep nesting": ("agent: " + "[" * DEEP + "]" * DEEP).encode(),
    "wrong types": b"agent:\n  sample_interval: [1, 2]\ncollectors:\n  shm: yes\n",
    "huge numbers": ("agent:\n  window: " + "9" * 5000 + "\n").encode(),
}


@pytest.mark.parametrize("data", list(CLI_CASES.values()), ids=list(CLI_CASES))
def test_check_config_exits_2_with_positions_and_no_traceback(tmp_path, data):
    path = tmp_path / "config.yaml"
    path.write_bytes(data)
    r = subprocess.run([sys.executable, "-m", "headroom", "check-config", "--config.file", str(path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert re.search(re.escape(str(path)) + r":\d+:\d+: [^\n]+: [^\n]+", r.stderr), r.stderr[-2000:]


def test_finite_numbers_only():
    """NaN and infinities are refused as durations instead of running a loop at NaN-second ticks."""
    for text in ("agent:\n  sample_interval: .nan\n", "agent:\n  window: .inf\n"):
        assert check(text) is None, text
    assert math.isfinite(check("agent:\n  window: 1h\n").agent["window"])
