"""The runbook the agent serves at ``GET /runbook``: docs/runbook.md as one self-contained HTML page.

The landing page's "What to do" links point here (``runbook#bottleneck-<resource>``, relative), so they work on
an air-gapped host and before the repository is published; alerts keep the GitHub URL (they are read off the
host). The text ships in the wheel as package data ``headroom/docs/runbook.md``, which in the checkout is a
symlink to docs/runbook.md: that file is the one source (setuptools copies the target into the wheel;
systemd/install.sh accepts exactly that symlink).

The renderer is strict and small, for the Markdown subset the runbook uses: ATX headings, paragraphs, ``-``
lists (with indented continuation lines), pipe tables, fenced code blocks, and inline code spans, ``**bold**``
and ``[text](target)`` links. Everything is HTML-escaped (raw HTML in the Markdown shows as text); a link keeps
only an ``http(s)://`` target or a ``#anchor`` (anything else is shown as its text). Every heading gets the
``id`` GitHub gives it (:func:`github_anchor`), so ``/runbook#bottleneck-gpu_power`` lands on
"### Bottleneck: gpu_power", as ``remedies.runbook_anchor`` expects.
"""

from __future__ import annotations

import html
import re
import threading
from importlib import resources

from headroom import __version__

# the package data file (agent/headroom/docs/runbook.md -> ../../../docs/runbook.md in the checkout)
RUNBOOK_RESOURCE = "docs/runbook.md"
# a runbook larger than this is not rendered (the file ships with the agent; this bounds a broken install)
MAX_RUNBOOK_BYTES = 1 << 20

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
_FENCE = re.compile(r"^(```|~~~)")
_ITEM = re.compile(r"^- (.*)$")
_TABLE_RULE = re.compile(r"^\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?$")
# inline: a code span, **bold**, or [text](target); the rest is text
_INLINE = re.compile(r"(`+)(.+?)\1|\*\*(.+?)\*\*|\[([^\]]+)\]\(([^)\s]+)\)")
_SAFE_TARGET = re.compile(r"^(https?://|#)")


def github_anchor(heading: str, seen: dict[str, int] | None = None) -> str:
    """The id GitHub gives a Markdown heading: lower case, punctuation other than '-' and '_' dropped, spaces
    to hyphens ('Bottleneck: gpu_power' -> 'bottleneck-gpu_power'); a repeated one gets '-1', '-2' ..."""
    text = re.sub(r"`|\*\*", "", heading).strip().lower()
    anchor = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
    if seen is not None:
        n = seen.get(anchor, 0)
        seen[anchor] = n + 1
        if n:
            anchor = f"{anchor}-{n}"
    return anchor


def inline(text: str) -> str:
    """One line's (or paragraph's) inline Markdown as escaped HTML."""
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos:m.start()]))
        code, strong, label, target = m.group(2), m.group(3), m.group(4), m.group(5)
        if code is not None:
            out.append(f"<code>{html.escape(code)}</code>")
        elif strong is not None:
            out.append(f"<b>{inline(strong)}</b>")
        elif _SAFE_TARGET.match(target):
            out.append(f'<a href="{html.escape(target)}">{inline(label)}</a>')
        else:
            out.append(html.escape(m.group(0)))
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


def _cells(line: str) -> list[str]:
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    if line.endswith("|"):
        line = line[:-1]
    return [c.strip() for c in line.split("|")]


def render(markdown: str) -> tuple[str, list[str]]:
    """(HTML body, the heading ids in order) of a Markdown text in the subset the module docstring names."""
    lines = markdown.splitlines()
    out: list[str] = []
    ids: list[str] = []
    seen: dict[str, int] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if m := _HEADING.match(line):
            level, text = len(m.group(1)), m.group(2)
            anchor = github_anchor(text, seen)
            ids.append(anchor)
            out.append(f'<h{level} id="{html.escape(anchor)}">{inline(text)}'
                       f' <a class="anchor" href="#{html.escape(anchor)}" aria-label="link to this section">#</a>'
                       f"</h{level}>")
            i += 1
        elif m := _FENCE.match(line):
            fence, body = m.group(1), []
            i += 1
            while i < len(lines) and not lines[i].startswith(fence):
                body.append(lines[i])
                i += 1
            i += 1  # the closing fence (or the end of the text)
            out.append(f"<pre><code>{html.escape(chr(10).join(body))}</code></pre>")
        elif line.startswith("|") and i + 1 < len(lines) and _TABLE_RULE.match(lines[i + 1].strip()):
            head = "".join(f"<th>{inline(c)}</th>" for c in _cells(line))
            i += 2
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in _cells(lines[i])) + "</tr>")
                i += 1
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")
        elif _ITEM.match(line):
            items: list[str] = []
            while i < len(lines):
                if m := _ITEM.match(lines[i]):
                    items.append(m.group(1))
                elif lines[i].startswith("  ") and lines[i].strip():  # an item's continuation line
                    items[-1] += " " + lines[i].strip()
                else:
                    break
                i += 1
            out.append("<ul>" + "".join(f"<li>{inline(t)}</li>" for t in items) + "</ul>")
        else:
            para = [line.strip()]
            i += 1
            while (i < len(lines) and lines[i].strip() and not _HEADING.match(lines[i])
                   and not _FENCE.match(lines[i]) and not _ITEM.match(lines[i]) and not lines[i].startswith("|")):
                para.append(lines[i].strip())
                i += 1
            out.append(f"<p>{inline(' '.join(para))}</p>")
    return "\n".join(out), ids


_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;max-width:60em;color:#1a202c;line-height:1.45}
h1{margin:0 0 .2em}h2{margin-top:1.6em;border-bottom:1px solid #e2e8f0}h3{margin-top:1.3em}
:target{background:#fefcbf}a.anchor{color:#cbd5e0;text-decoration:none;font-weight:400}
table{border-collapse:collapse;margin:.4em 0}td,th{border:1px solid #e2e8f0;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#edf2f7}.muted{color:#718096}
code{background:#edf2f7;padding:0 .2em;overflow-wrap:anywhere}pre{background:#edf2f7;padding:.6em;overflow-x:auto}
pre code{padding:0}
"""

_lock = threading.Lock()
_page: bytes | None = None


def source() -> str:
    """The runbook's Markdown from the installed package; a one-line stand-in when it is missing or too large."""
    try:
        data = resources.files("headroom").joinpath(RUNBOOK_RESOURCE).read_bytes()
    except OSError as exc:
        return f"# Runbook\n\nThe runbook is not installed with this agent ({type(exc).__name__}).\n"
    if len(data) > MAX_RUNBOOK_BYTES:
        return f"# Runbook\n\nThe installed runbook is larger than {MAX_RUNBOOK_BYTES} bytes: not rendered.\n"
    return data.decode("utf-8", "replace")


def page_for(markdown: str) -> bytes:
    body, _ = render(markdown)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>headroom runbook</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<style>{_STYLE}</style></head>
<body><p class="muted">headroom {html.escape(__version__)} &middot; <a href="./">back to the agent's page</a></p>
{body}
</body></html>
""".encode()


def page() -> bytes:
    """The served page, rendered once per process (the runbook is part of the installed agent)."""
    global _page
    with _lock:
        if _page is None:
            _page = page_for(source())
        return _page
