"""The agent serves its own runbook (issue 29, "a working runbook link"): ``GET /runbook`` is docs/runbook.md as
HTML, every heading with the id GitHub gives it, so the page's "What to do" links (``runbook#bottleneck-<r>``)
land on their section on an air-gapped host; the text ships in the package (tests/test_first_run.py checks the
wheel) from the one source, docs/runbook.md."""

from __future__ import annotations

import http.client
import re
import threading
from html.parser import HTMLParser
from types import SimpleNamespace

import pytest

from headroom.analysis import remedies
from headroom.analysis.bottleneck import NONE, RESOURCES
from headroom.exposition import runbook
from headroom.exposition.server import HeadroomHTTPServer
from test_rules import RUNBOOK, runbook_anchors

from conftest import ROOT

# the tags the renderer may emit; anything else in its output came from the Markdown unescaped
ALLOWED_TAGS = {"h1", "h2", "h3", "h4", "h5", "h6", "p", "ul", "li", "code", "pre", "b", "a", "table", "thead",
                "tbody", "tr", "th", "td"}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def tags(fragment: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(fragment)
    parser.close()
    return parser.tags


def test_the_whole_runbook_renders_every_heading_with_its_github_anchor():
    body, ids = runbook.render(RUNBOOK.read_text())
    found = tags(body)
    assert {t for t, _ in found} <= ALLOWED_TAGS, {t for t, _ in found} - ALLOWED_TAGS
    heading_ids = [a["id"] for t, a in found if t in {"h1", "h2", "h3", "h4", "h5", "h6"}]
    headings = [line for line in RUNBOOK.read_text().splitlines() if line.startswith("#")]
    assert len(heading_ids) == len(headings) == len(ids) and heading_ids == ids
    assert set(ids) == runbook_anchors() and len(set(ids)) == len(ids)  # GitHub's anchors, none repeated
    assert "<table>" in body and body.count("<tr>") >= 10  # the XID table
    assert "<code>nvidia-smi -r -i $GPU</code>" in body and "<b>Do:</b>" in body
    assert 'href="#bottlenecks-what-to-do"' in body  # the intro's link to a section of the page itself
    # nothing the renderer does not know is left as raw Markdown (a new construct in the runbook fails here,
    # not silently on the page): outside code, no emphasis, link or fence markers survive
    prose = re.sub(r"<[^>]+>", "", re.sub(r"<code>.*?</code>", "", body, flags=re.S))
    assert not re.search(r"\*\*|\]\(|```|^\s*(\d+\.|[*+>]) ", prose, re.M), \
        re.search(r".{0,40}(\*\*|\]\(|```).{0,40}", prose)
    assert not [line for line in RUNBOOK.read_text().splitlines() if re.match(r"\s*(\d+\.|[*+>]) |    \S", line)]


def test_every_bottleneck_a_remedy_links_has_its_section_on_the_served_page():
    _, ids = runbook.render(runbook.source())
    for r in (r for r in RESOURCES if r != NONE):
        path = remedies.runbook_path(r)
        page, _, anchor = path.partition("#")
        assert page == remedies.RUNBOOK_PATH == "/runbook"
        assert anchor == runbook.github_anchor(f"Bottleneck: {r}") and anchor in ids, f"no section for {r}"


def test_markdown_cannot_put_html_or_script_links_on_the_page():
    hostile = ("# Title <script>alert(1)</script>\n\n<img src=x onerror=alert(1)> and **<b>bold</b>**\n\n"
               "- [click](javascript:alert(1)) and [ok](https://example.com/a?b=1&c=\"2\")\n"
               "  `<script>` in code\n\n| a | <i>b</i> |\n|---|---|\n| `x` | </td><script> |\n\n"
               "```\n<script>fenced</script>\n```\n")
    body, ids = runbook.render(hostile)
    found = tags(body)
    assert {t for t, _ in found} <= ALLOWED_TAGS, found
    assert "<script" not in body and "<img" not in body and "<i>" not in body
    assert "&lt;script&gt;" in body and "&lt;img src=x onerror=alert(1)&gt;" in body
    hrefs = [a.get("href") for t, a in found if t == "a"]
    assert "javascript:alert(1)" not in hrefs and 'https://example.com/a?b=1&c="2"' in hrefs
    assert "[click](javascript:alert(1))" in body  # shown as text
    assert ids == ["title-scriptalert1script"]


def test_a_repeated_heading_gets_githubs_numbered_anchor():
    _, ids = runbook.render("## Check\n\ntext\n\n## Check\n\n### `Bottleneck: x_y`\n")
    assert ids == ["check", "check-1", "bottleneck-x_y"]


def test_the_agent_serves_the_package_copy_which_is_docs_runbook_md():
    """One source: the package data file is a symlink to docs/runbook.md (setuptools copies its target into the
    wheel), so what /runbook serves is what GitHub shows."""
    packaged = ROOT / "agent" / "headroom" / "docs" / "runbook.md"
    assert packaged.is_symlink() and packaged.resolve() == RUNBOOK.resolve()
    assert not RUNBOOK.is_symlink()  # GitHub renders a regular file (the alerts link to it there)
    assert runbook.source() == RUNBOOK.read_text()


def test_a_missing_runbook_is_one_line_on_the_page_not_a_traceback(monkeypatch):
    monkeypatch.setattr(runbook, "RUNBOOK_RESOURCE", "docs/no-such-runbook.md")
    body, ids = runbook.render(runbook.source())
    assert ids == ["runbook"] and "The runbook is not installed with this agent (FileNotFoundError)." in body


@pytest.fixture
def server():
    state = SimpleNamespace(snapshot=None, failing={}, healthy=lambda: (True, "ok"))
    srv = HeadroomHTTPServer(("127.0.0.1", 0), state)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _request(srv, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=10)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def test_get_runbook_is_the_rendered_page_head_has_its_headers_and_other_paths_404(server):
    status, headers, body = _request(server, "GET", "/runbook")
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    assert body == runbook.page() and int(headers["content-length"]) == len(body)
    assert b'<h3 id="bottleneck-gpu_power">' in body and b"<script" not in body
    assert b"http://" not in body.split(b"<body>", 1)[0] and b"https://" not in body.split(b"<body>", 1)[0]
    status, head_headers, head_body = _request(server, "HEAD", "/runbook")
    assert status == 200 and head_body == b"" and head_headers["content-length"] == headers["content-length"]
    assert _request(server, "GET", "/runbook?x=1")[0] == 200  # a query is ignored, as on every route
    for path in ("/runbook/", "/runbook/x", "/runbook.md", "/docs/runbook.md"):
        assert _request(server, "GET", path)[0] == 404, path
    assert _request(server, "POST", "/runbook")[0] == 405
