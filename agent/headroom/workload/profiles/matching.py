"""How a profile is recognised on the host: its ``match`` rules, its ``gpus`` list and its serving ``endpoint``.

``compile_cmdline_pattern`` compiles a ``match.cmdline`` pattern with RE2 (the process scan uses it too); the
readers here check each attribution rule of a profile (``schema.py`` calls them).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from headroom.jsontypes import YamlMapping
from headroom.schema import kind as _kind_of
from headroom.workload.profiles.reader import _BAD, Checked, _ok, _Reader
from headroom.workload.profiles.types import ProcessMatch

_GPU_UUID = re.compile(r"^(GPU|MIG)-[0-9A-Za-z-]+$")
_CONTAINER_ID = re.compile(r"^[0-9a-f]{12,64}$")
_MATCH_KEYS = ("cmdline", "exe", "systemd_unit", "cgroup", "pid_file", "container_id", "user", "uid")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\$?$")  # what useradd accepts (NAME_REGEX, relaxed)


# ``top``: the profile mapping as YAML parsed it, untyped (YamlMapping) until checked; each returns the checked
# value or _BAD (reader.Checked)
def _gpus(r: _Reader, top: YamlMapping) -> Checked:
    v = top.get("gpus")
    if v is None:
        return ()
    if not isinstance(v, list):
        return r.error(("gpus",), f"expected a list of GPU indices or UUIDs; got {_kind_of(v)}")
    out: list[int | str] = []
    bad = False
    for i, item in enumerate(v):
        path = ("gpus", i)
        if isinstance(item, bool) or not isinstance(item, int | str):
            r.error(path, f"expected a GPU index (0, 1 ...) or a UUID (GPU-..., MIG-...); got {item!r}")
        elif isinstance(item, int) and item < 0:
            r.error(path, f"GPU index must be >= 0; got {item}")
        elif isinstance(item, str) and not _GPU_UUID.match(item.strip()):
            r.error(path, f"{item!r} is not a GPU UUID (GPU-... or MIG-...); write indices as numbers")
        elif (item.strip() if isinstance(item, str) else item) in out:
            r.error(path, f"{item!r} is listed twice")
        else:
            out.append(item.strip() if isinstance(item, str) else item)
            continue
        bad = True
    return _BAD if bad else tuple(out)


def compile_cmdline_pattern(pattern: str) -> Any:  # Any: an re2 pattern (google-re2 ships no types)
    """Compile a ``match.cmdline`` pattern with RE2 (linear time in the text, whatever the pattern:
    a command line from any local user must never stall the agent); ValueError says why it cannot.

    RE2 has Python's syntax minus backreferences (``\\1``), lookaround (``(?=``, ``(?<!``) and
    possessive or atomic groups: patterns that need backtracking are refused."""
    import re2

    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression: {exc}") from None
    except RecursionError:
        raise ValueError("invalid regular expression: nested too deeply") from None
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(f"RE2 cannot compile this pattern ({reason}): cmdline patterns must run in linear "
                         "time, so backreferences, lookaround and possessive groups are not supported") from None


def _excerpt(value: str, limit: int = 40) -> str:
    """A short quoted excerpt of a user value for error messages (never a whole file's content)."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + f"... ({len(value)} characters)"


def _match(r: _Reader, top: YamlMapping) -> Checked:
    v = top.get("match")
    if v is None:
        return ProcessMatch()
    p = ("match",)
    m = r.mapping(v, p, _MATCH_KEYS)
    if m is None:
        return _BAD
    values = {k: r.string(m, k, p) for k in _MATCH_KEYS if k != "uid"}
    values["uid"] = r.integer(m, "uid", p, 0)
    if _ok(values["uid"]) and values["uid"] is not None and values["uid"] > 2**32 - 2:
        values["uid"] = r.error(p + ("uid",), f"must be <= {2**32 - 2}; got {values['uid']}")
    if _ok(values["user"]) and values["user"] is not None and not _USER.match(values["user"]):
        values["user"] = r.error(p + ("user",), f"not a user name: {_excerpt(values['user'])}")
    if _ok(values["cmdline"]):
        try:
            compile_cmdline_pattern(values["cmdline"])
        except ValueError as exc:
            values["cmdline"] = r.error(p + ("cmdline",), str(exc))
    if _ok(values["exe"]) and "/" in values["exe"]:
        values["exe"] = r.error(
            p + ("exe",), f"exe is the executable's base name, not a path; got {values['exe']!r}"
        )
    if _ok(values["pid_file"]) and not values["pid_file"].startswith("/"):
        values["pid_file"] = r.error(
            p + ("pid_file",), f"must be an absolute path; got {values['pid_file']!r}"
        )
    if _ok(values["container_id"]) and not _CONTAINER_ID.match(values["container_id"]):
        values["container_id"] = r.error(p + ("container_id",), "expected 12 to 64 lower-case hex digits; got "
                                                                f"{values['container_id']!r}")  # fmt: skip
    if _BAD in values.values():
        return _BAD
    return ProcessMatch(**values)


def _endpoint(r: _Reader, top: YamlMapping) -> Checked:
    url = r.string(top, "endpoint", ())
    if not _ok(url):
        return url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return r.error(("endpoint",), f"expected an http:// or https:// URL; got {url!r}")
    return url
