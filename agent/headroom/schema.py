"""The configuration schema's shared pieces: every YAML file headroom reads is walked with these.

The agent config (``config.py``), the web config (``exposition/webconfig.py``), workload profiles
(``workload/profiles/``) and simulation scenarios (``simulation/scenario/parse.py``) each check their own keys;
what they share lives here, so they read a document and word a problem one way:

- reading: ``compose_file``/``compose_text`` (YAML into nodes that carry positions; UTF-8, syntax and
  character errors placed at FILE:LINE:COLUMN) with ``bounded_expansion`` (alias bombs and recursive
  aliases refused before any walk expands them); ``construct`` (a scalar node's value, ``BadScalar`` when YAML
  cannot make one), ``to_python``, ``node_at`` (the node at a field path);
- reporting: ``ConfigIssue`` (``FILE:LINE:COLUMN: field.path: message``), ``ConfigError`` (every issue, one
  a line), ``format_path``, ``position``;
- wording: ``kind``/``node_kind`` (what a value is, for "expected X, got Y"), ``closest`` and
  ``unknown_key`` (an unknown key with "did you mean" or the keys allowed);
- ``parse_listen_address`` (``web.listen_address`` and ``--web.listen-address``: checked by the config, used
  by the daemon to bind).

It imports nothing of headroom but ``safeio``, so every validator can use it without an import circle.
"""

from __future__ import annotations

import difflib
import socket
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from headroom.safeio import EXCERPT_CHARS, excerpt, read_config_bytes, shorten_quoted

if TYPE_CHECKING:
    from headroom.jsontypes import YamlValue  # for type checking only: schema.py imports nothing but safeio


# ------------------------------------------------------------------------------------------ errors
@dataclass(frozen=True)
class ConfigIssue:
    file: str
    line: int  # 1-based
    column: int  # 1-based
    path: str  # field path, e.g. collectors.shm.mountpoints[0]
    message: str

    def __str__(self) -> str:
        where = self.path or "(document)"
        message = " ".join(part.strip() for part in self.message.splitlines())  # one issue, one line
        # a file that turned out to be a secret (a symlinked drop-in) must not be printed back: quote excerpts
        return f"{self.file}:{self.line}:{self.column}: {shorten_quoted(where)}: {shorten_quoted(message)}"


class ConfigError(Exception):
    """One or more problems in configuration files; ``str()`` is one issue per line."""

    def __init__(self, issues: Sequence[ConfigIssue]) -> None:
        self.issues = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


def format_path(parts: Sequence[str | int]) -> str:
    """("gpus", 1, "x") -> "gpus[1].x"; a key that would garble the path is written in brackets."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif not p or not p.isprintable() or any(c in p for c in ".[]: ") or len(p) > EXCERPT_CHARS:
            out += f"[{excerpt(p)}]"  # a key that would garble the path (empty, newline, dots, ": ") or is long
        else:
            out += ("." if out else "") + p
    return out


def position(node: yaml.Node | None) -> tuple[int, int]:
    """A node's 1-based (line, column); (1, 1) without a node."""
    if node is None:
        return 1, 1
    return node.start_mark.line + 1, node.start_mark.column + 1


def where(file: str, node: yaml.Node | None) -> str:
    """``FILE:LINE:COLUMN`` of a node (``FILE:1:1`` without one)."""
    line, column = position(node)
    return f"{file}:{line}:{column}"



# ------------------------------------------------------------------------------------------ reading
_LOADER = yaml.SafeLoader("")


class BadScalar(Exception):
    """A scalar YAML cannot turn into a value (a bad timestamp, an integer of over 4300 digits)."""

    def __init__(self, node: yaml.Node, message: str) -> None:
        super().__init__(message)
        self.node = node


def construct(node: yaml.ScalarNode) -> YamlValue:
    """The Python value of a scalar node; raises BadScalar."""
    try:
        return _LOADER.construct_object(node, deep=True)
    except yaml.MarkedYAMLError as exc:  # e.g. a timestamp that does not parse
        raise BadScalar(node, f"invalid value: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise BadScalar(node, f"invalid value: {exc}") from None
    except ValueError as exc:  # an int over sys.get_int_max_str_digits() digits, a date like 2024-13-01
        if node.tag == "tag:yaml.org,2002:int":
            raise BadScalar(node, f"invalid value: a number of {len(node.value)} digits is too large") from None
        raise BadScalar(node, f"invalid value {node.value[:40]!r}: {exc}") from None


def compose_file(path: Path) -> yaml.Node | None:
    """Parse a YAML file into a node tree; raise ConfigError with the position of a syntax error."""
    name = str(path)
    try:
        raw = read_config_bytes(path)  # regular files only, at most MAX_CONFIG_BYTES, never blocks on open
    except FileNotFoundError:
        raise ConfigError([ConfigIssue(name, 1, 1, "", "file not found")]) from None
    except OSError as exc:
        raise ConfigError([ConfigIssue(name, 1, 1, "", f"cannot read: {exc.strerror or exc}")]) from None
    return compose_text(raw, name)


def compose_text(raw: bytes | str, name: str) -> yaml.Node | None:
    """Parse YAML text (bytes must be UTF-8) into a node tree, aliases bounded (``bounded_expansion``); raise
    ConfigError with the position of a syntax error. None for an empty document."""
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
            raise ConfigError([ConfigIssue(name, line, col, "", "file is not valid UTF-8")]) from None
    else:
        text = raw
    try:
        return bounded_expansion(yaml.compose(text, Loader=yaml.SafeLoader), name)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        msg = f"YAML syntax error: {exc.problem or exc}" + (f" ({exc.context})" if exc.context else "")
        raise ConfigError([ConfigIssue(name, line, col, "", msg)]) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, most C0 controls)
        at = max(0, exc.position)
        line, col = text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)
        what = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
        raise ConfigError([ConfigIssue(name, line, col, "", f"YAML error: character {what} is not allowed: {exc.reason}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([ConfigIssue(name, 1, 1, "", f"YAML error: {exc}")]) from None
    except RecursionError:
        raise ConfigError([ConfigIssue(name, 1, 1, "", "YAML nesting is too deep")]) from None


MAX_CONFIG_NODES = 100_000  # YAML nodes in a document once its aliases are expanded
MAX_ALIAS_USES = 10_000  # alias references in a document


def bounded_expansion(root: yaml.Node | None, name: str) -> yaml.Node | None:
    """``root``, unless its aliases expand it past MAX_CONFIG_NODES nodes, or it uses more than
    MAX_ALIAS_USES aliases, or an alias refers to a node that contains it: then a ConfigError at the
    anchor that blows up. PyYAML composes an alias as a second reference to the same node, so a
    billion-laughs document is small here; it is every later walk (validation, conversion) that would
    expand it. One pass over the distinct nodes, sizes memoised."""
    if root is None:
        return None
    size: dict[int, int] = {}
    uses: dict[int, int] = {}
    nodes: dict[int, yaml.Node] = {}
    alias_uses = 0
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    open_: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_.discard(key)
            total = 1
            for child in children(node):
                total = min(total + size[id(child)], MAX_CONFIG_NODES + 1)
            size[key] = total
            continue
        if key in size or key in open_:
            if key in open_:
                raise ConfigError([ConfigIssue(name, node.start_mark.line + 1, node.start_mark.column + 1, "",
                                               "an alias refers to a node that contains it (recursive YAML)")])
            alias_uses += 1
            uses[key] = uses.get(key, 0) + 1
            if alias_uses > MAX_ALIAS_USES:
                raise ConfigError([ConfigIssue(name, node.start_mark.line + 1, node.start_mark.column + 1, "",
                                               f"more than {MAX_ALIAS_USES} alias references")])
            continue
        open_.add(key)
        nodes[key] = node
        stack.append((node, True))
        for child in reversed(children(node)):
            if id(child) in open_:
                raise ConfigError([ConfigIssue(name, child.start_mark.line + 1, child.start_mark.column + 1, "",
                                               "an alias refers to a node that contains it (recursive YAML)")])
            stack.append((child, False))
    if size[id(root)] > MAX_CONFIG_NODES:
        culprit = max((nodes[k] for k in uses), key=lambda n: size[id(n)], default=root)
        mark = culprit.start_mark
        raise ConfigError([ConfigIssue(name, mark.line + 1, mark.column + 1, "",
                                       f"aliases expand the document past {MAX_CONFIG_NODES} nodes "
                                       "(an alias bomb?); the anchor here is the largest one reused")])
    return root


def children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def node_at(node: yaml.Node, rel: Sequence[str | int]) -> yaml.Node:
    """The node at ``rel`` below ``node``; for a missing key, the nearest existing ancestor."""
    for part in rel:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            nxt = next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == part), None)
            if nxt is None:
                key = next((k for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == part), None)
                return key or node
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
        else:
            return node
    return node


def to_python(node: yaml.Node) -> YamlValue:
    if isinstance(node, yaml.MappingNode):
        return {(k.value if isinstance(k, yaml.ScalarNode) else str(k)): to_python(v) for k, v in node.value}
    if isinstance(node, yaml.SequenceNode):
        return [to_python(v) for v in node.value]
    return construct(node)


# ------------------------------------------------------------------------------------------ wording
def kind(value: YamlValue) -> str:
    """What a Python value read from YAML is, for "expected X, got Y"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return type(value).__name__


_TAG_KINDS = {"null": "null", "bool": "a boolean", "int": "a number", "float": "a number", "str": "a string"}


def node_kind(node: yaml.Node) -> str:
    """What a YAML node holds, in ``kind``'s words, without constructing it."""
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    tag: str = str(node.tag).rsplit(":", 1)[-1]
    return _TAG_KINDS.get(tag, tag)


SUGGEST_CUTOFF = 0.75  # difflib's similarity above which an unknown name is taken for a typo


def closest(name: str, choices: Collection[str]) -> str | None:
    """The choice ``name`` is most likely a typo of, or None."""
    match = difflib.get_close_matches(name, [str(c) for c in choices], n=1, cutoff=SUGGEST_CUTOFF)
    return match[0] if match else None


MAX_LISTED_KEYS = 20  # an unknown key's message lists the keys allowed up to this many


def unknown_key(key: str, allowed: Collection[str]) -> str:
    """The message for an unknown key: "unknown key (did you mean 'x'?)", else the keys allowed (their number
    when there are over MAX_LISTED_KEYS, e.g. analysis.thresholds). ``allowed`` in a stable order (a set is
    sorted)."""
    hint = closest(key, allowed)
    if hint:
        return f"unknown key (did you mean {hint!r}?)"
    names = sorted(allowed) if isinstance(allowed, (set, frozenset)) else [str(n) for n in allowed]
    if not names:
        return "unknown key (no keys are allowed here)"
    if len(names) > MAX_LISTED_KEYS:
        return f"unknown key (not one of the {len(names)} keys allowed here)"
    return f"unknown key (expected one of: {', '.join(names)})"


# ------------------------------------------------------------------------------------------ listen addresses
def parse_listen_address(value: str) -> tuple[str, int, int]:
    """'host:port', ':port' or '[v6]:port' -> (host, port, address family); ValueError when invalid."""
    host, sep, port_text = value.rpartition(":")
    if not sep:
        raise ValueError(f"listen address {value!r} must be HOST:PORT (e.g. :9843 or 127.0.0.1:9843)")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"listen address {value!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"listen address {value!r}: port must be 0-65535")
    family = socket.AF_INET
    if host.startswith("[") and host.endswith("]"):
        host, family = host[1:-1], socket.AF_INET6
    elif ":" in host:
        raise ValueError(f"listen address {value!r}: write IPv6 addresses in brackets, e.g. [::1]:9843")
    if host == "":
        host = "0.0.0.0"
    return host, port, family
