"""The last probe on the landing page, in the real headless browser (tests/cdp.py): the answer sentence and the
chart drawn (lines with points where the result puts them, the binding step marked, inside the page's width),
hostile text shown as text, no console error. The result is a hand-written fixture of the result format."""

from __future__ import annotations

import pytest

from cdp import Browser
from headroom.probe import store
from test_probe_store import fixture

from conftest import ROOT

PROBE = """(() => {
  const svg = document.querySelector('#probe svg.probe-chart');
  if (!svg) return null;
  const box = svg.getBoundingClientRect();
  return {answer: document.querySelector('#probe .probe-answer').textContent,
          lines: [...svg.querySelectorAll('polyline')].map(l => ({series: l.dataset.series, n: l.points.length,
                  stroke: getComputedStyle(l).stroke})),
          dots: [...svg.querySelectorAll('circle')].map(c => ({series: c.dataset.series, step: +c.dataset.step,
                 y: c.cy.baseVal.value})),
          bound: [...svg.querySelectorAll('line.bound')].map(l => +l.dataset.step),
          width: box.width, height: box.height, page: document.documentElement.clientWidth,
          scripts: document.querySelectorAll('script').length,
          who: document.querySelector('#probe p.muted').textContent};
})()"""


@pytest.fixture
def shown(tmp_path):
    from conftest import Agent

    r = fixture("kv-bound")
    r["workload"] = "chat<script>document.title='pwned'</script>"
    store.save(r, tmp_path / "state")
    agent = Agent("--config.file", str(ROOT / "config.yaml"), "--simulate", "demo", "--sample.interval", "250ms",
                  "--state.dir", str(tmp_path / "state"))
    browser = Browser(tmp_path / "profile")
    try:
        agent.wait_ready()
        browser.viewport(1400, 1000)
        browser.open(agent.url + "/")
        got = browser.wait(lambda: browser.js(PROBE), "the probe chart")
        yield got, browser
        assert browser.errors == []
    finally:
        browser.close()
        _code, err = agent.stop()
        assert "Traceback" not in err


def test_the_last_probe_shows_its_answer_and_its_chart(shown):
    got, browser = shown
    assert got["answer"].startswith("Capacity at the SLO (TTFT p95 <= 500 ms")
    assert "bound by kv_cache from step 3" in got["answer"]
    series = {line["series"]: line for line in got["lines"]}
    assert sorted(series) == ["ITL p95", "TTFT p50", "TTFT p95", "goodput", "requests/s"]
    for line in series.values():
        assert line["n"] == 4 and line["stroke"] not in ("none", "")
    ttft = sorted((d for d in got["dots"] if d["series"] == "TTFT p95"), key=lambda d: d["step"])
    assert [d["step"] for d in ttft] == [0, 1, 2, 3]
    assert ttft[3]["y"] < ttft[0]["y"]  # the slowest step drawn highest
    assert got["bound"] == [3]
    assert 300 < got["width"] <= got["page"] and got["height"] > 100
    # the hostile workload name is text: no script element, the title untouched
    assert got["scripts"] == 0 and "<script>" in got["who"]
    assert browser.js("document.title") == "headroom"
