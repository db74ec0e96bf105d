"""The landing page in a real headless browser (Debian chromium over the DevTools protocol, tests/cdp.py):
what only a browser shows. The page refreshes itself and shows a changed verdict with nobody reloading
it; its charts are drawn (non-empty lines where the data puts them, inside their cells); it lays out at
a phone's width and a desktop's without horizontal scrolling; and it logs no console error. A plain
HTTP GET (tests/test_e2e.py) cannot see any of these. Screenshots go to artifacts/landing-*.png.
"""

from __future__ import annotations

import json
import time

import pytest

from cdp import Browser

from conftest import ROOT, http_get

CAPPED_SECONDS = 20  # the power cap holds for this long after the agent starts, then lifts for good
SCENARIO = f"""\
description: a GPU held down by its power cap for {CAPPED_SECONDS} s, then running free
gpus:
  - name: NVIDIA H100 80GB HBM3
    memory_total: 80GiB
    power_limit: 700
    sm_clock_max: 1980MHz
    memory_clock_max: 2619MHz
    memory_used: 60GiB
    utilization: {{sine: {{min: 0.9, max: 0.98, period: 20s}}}}
    power: 699
    sm_clock: 1400MHz
    clock_events: {{sw_power_cap: {{steps: [[0s, true], [{CAPPED_SECONDS}s, false]]}}}}
"""
CONFIG = """\
agent:
  sample_interval: 250ms
analysis:
  short_window: 3s
  hold: 500ms
workloads:
  - name: chat
    kind: inference
    params: 8B
    precision: bf16
    architecture: {layers: 32, heads: 32, kv_heads: 8, head_dim: 128}
    context: {max: 8192}
    concurrency: 8
    gpus: [0]
"""
PILL = "document.querySelector('#workload-chat [data-bottleneck]')?.dataset.bottleneck"
NARROW, WIDE = (375, 800), (1400, 1000)


def primary(agent) -> str | None:
    doc = json.loads(http_get(agent.url + "/api/v1/status")[2])
    return doc["workloads"][0]["primary_bottleneck"] if doc["workloads"] else None


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The agent (a real `headroom run` process) and one browser tab that opened its landing page once,
    while the workload's verdict was gpu_power."""
    from conftest import Agent

    tmp = tmp_path_factory.mktemp("landing")
    (tmp / "s.yaml").write_text(SCENARIO)
    (tmp / "c.yaml").write_text(CONFIG)
    browser = Browser(tmp / "profile")  # started first: the scenario's clock starts with the agent
    agent = Agent("--config.file", str(tmp / "c.yaml"), "--simulate", str(tmp / "s.yaml"))
    try:
        agent.wait_ready()
        deadline = time.monotonic() + CAPPED_SECONDS
        while primary(agent) != "gpu_power" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert primary(agent) == "gpu_power", "the capped phase never showed"
        browser.viewport(*WIDE)
        browser.open(agent.url + "/")
        first = browser.js(PILL)
        yield agent, browser, first
    finally:
        browser.close()
        agent.stop()


def shot(browser: Browser, name: str) -> None:
    artifacts = ROOT / "artifacts"
    artifacts.mkdir(exist_ok=True)
    path = artifacts / f"landing-{name}.png"
    browser.screenshot(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_the_page_refreshes_itself_and_shows_the_changed_verdict(page):
    agent, browser, first = page
    assert first == "gpu_power"
    assert "power cap active" in browser.js("document.querySelector('#workload-chat .evidence').textContent")
    # the cap lifts at 20 s: the agent's verdict moves to gpu_compute, and the page follows on its own
    shown = browser.wait(lambda: (v := browser.js(PILL)) not in (None, "gpu_power") and v, "a changed verdict",
                         timeout=CAPPED_SECONDS + 30)
    assert shown == "gpu_compute" == primary(agent)
    assert browser.opened == 1, "the test opened the page once; the browser did the rest"
    assert browser.loads >= 2, f"the page loaded {browser.loads} time(s): it did not refresh itself"
    assert "busy" in browser.js("document.querySelector('#workload-chat .evidence').textContent")


CHARTS = """(() => {
  const card = document.querySelector('#gpu-0');
  return [...card.querySelectorAll('svg.spark')].map(svg => {
    const line = svg.querySelector('polyline'), dot = svg.querySelector('circle');
    const pts = line ? [...line.points].map(p => [p.x, p.y]) : [];
    const box = line ? line.getBoundingClientRect() : null, s = svg.getBoundingClientRect();
    const cell = svg.closest('td').getBoundingClientRect();
    return {label: svg.getAttribute('aria-label'), width: svg.width.baseVal.value,
            height: svg.height.baseVal.value, points: pts,
            line: box && {w: box.width, h: box.height, stroke: getComputedStyle(line).stroke},
            dot: dot && {cx: dot.cx.baseVal.value, cy: dot.cy.baseVal.value},
            svg: {left: s.left, right: s.right, top: s.top, bottom: s.bottom},
            cell: {left: cell.left, right: cell.right, top: cell.top, bottom: cell.bottom}};
  });
})()"""


def test_the_charts_draw_the_data_where_it_belongs(page):
    """Three charts (busy, memory, power) in their own cells, left to right; each a line with points
    across the chart's width at the height the data puts them: utilization 0.90-0.98 and power 699 of
    700 W near the top, memory 60 of 80 GiB at three quarters."""
    _, browser, _ = page
    browser.viewport(*WIDE)
    charts = browser.wait(lambda: (c := browser.js(CHARTS)) and all(len(x["points"]) >= 4 for x in c) and c,
                          "charts with points")
    assert [c["label"].split(",")[0] for c in charts] == ["GPU 0 utilization", "GPU 0 memory used", "GPU 0 power"]
    bands = {"GPU 0 utilization": (0.9, 0.98), "GPU 0 memory used": (0.75, 0.75), "GPU 0 power": (699 / 700, 1.0)}
    for c in charts:
        w, h = c["width"], c["height"]
        low, high = bands[c["label"].split(",")[0]]
        xs, ys = [p[0] for p in c["points"]], [p[1] for p in c["points"]]
        assert min(xs) == pytest.approx(1, abs=0.1) and max(xs) == pytest.approx(w - 1, abs=0.1), c["label"]
        assert xs == sorted(xs), "time runs left to right"
        top_y, bottom_y = h - 1 - high * (h - 2), h - 1 - low * (h - 2)
        assert all(top_y - 0.1 <= y <= bottom_y + 0.1 for y in ys), (c["label"], ys)
        assert c["line"]["w"] > w * 0.9 and c["line"]["stroke"] not in ("none", ""), c
        assert c["dot"]["cx"] == pytest.approx(w - 1) and top_y - 0.1 <= c["dot"]["cy"] <= bottom_y + 0.1
        svg, cell = c["svg"], c["cell"]
        assert cell["left"] <= svg["left"] and svg["right"] <= cell["right"], f"{c['label']} spills out of its cell"
        assert cell["top"] <= svg["top"] and svg["bottom"] <= cell["bottom"]
    lefts = [c["svg"]["left"] for c in charts]
    assert lefts == sorted(lefts) and len(set(lefts)) == 3, "busy, memory, power side by side"
    shot(browser, "wide")


LAYOUT = """(() => {
  const doc = document.documentElement;
  const over = [...document.querySelectorAll('.card, table, svg, h1, h2, h3, p')]
    .filter(e => e.getBoundingClientRect().right > innerWidth + 0.5)
    .map(e => e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className.baseVal ?? e.className);
  const cards = [...document.querySelectorAll('.card')].map(c => c.getBoundingClientRect());
  return {inner: innerWidth, scroll: doc.scrollWidth, over: over.slice(0, 8),
          cards: cards.map(r => ({left: r.left, right: r.right, width: r.width})),
          fontSize: parseFloat(getComputedStyle(document.body).fontSize)};
})()"""


@pytest.mark.parametrize("size", [NARROW, WIDE], ids=["narrow (375 px, a phone)", "wide (1400 px)"])
def test_the_layout_fits_the_viewport(page, size):
    """No horizontal scrolling, nothing sticking out on the right, every card within the page."""
    _, browser, _ = page
    browser.viewport(*size)
    layout = browser.wait(lambda: browser.js(LAYOUT), "layout")
    assert layout["scroll"] <= layout["inner"] == size[0], f"horizontal scrolling at {size[0]} px: {layout}"
    assert not layout["over"], f"sticking out at {size[0]} px: {layout['over']}"
    assert layout["cards"] and all(0 <= c["left"] and c["right"] <= size[0] for c in layout["cards"])
    if size == WIDE:  # the text column keeps a readable width rather than spanning the screen
        assert all(c["width"] <= 80 * layout["fontSize"] for c in layout["cards"])
    shot(browser, f"{size[0]}px")


def test_no_console_errors(page):
    """Nothing the page did (its loads, its refreshes, its favicon request) logged an error."""
    _, browser, _ = page
    browser.wait(lambda: browser.loads >= 1, "a load")
    time.sleep(0.5)
    assert browser.errors == []


def test_the_page_spells_degrees_once_and_sizes_by_their_size(page):
    """Issue 29: the headroom table said '52 C' where the evidence says '°C'; the health line is the status's."""
    import re

    agent, browser, _ = page
    text = browser.js("document.body.innerText")
    assert re.search(r"thermal margin\s+\d+ °C", text), text[:3000]
    assert not re.search(r"\d C\b", text), re.findall(r".{20}\d C\b", text)
    assert re.search(r"\b60\.0 GiB / 80\.0 GiB\b", text)  # format_size: three significant digits
    doc = json.loads(http_get(agent.url + "/api/v1/status")[2])
    assert f"health: {doc['health']}" in text
