"""The landing page in a real headless browser (Debian chromium over the DevTools protocol, tests/cdp.py):
what only a browser shows. The page refreshes itself and shows a changed verdict with nobody reloading
it; its charts are drawn (non-empty lines where the data puts them, inside their cells); it lays out at
a phone's width and a desktop's without horizontal scrolling; and it logs no console error. A plain
HTTP GET (tests/test_e2e.py) cannot see any of these. Screenshots go to artifacts/landing-*.png.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from cdp import Browser

from conftest import ROOT, http_get

CAPPED_SECONDS = 20  # the power cap holds for this long after the agent starts, then lifts for good
KV_USAGE, WAITING = 0.55, 3  # the serving stand-in's KV cache usage and queue: constant, so its mean is its value
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
    sm_active: {{sine: {{min: 0.82, max: 0.95, period: 15s}}}}
    power: 699
    temperature: {{sine: {{min: 60, max: 75, period: 30s}}}}
    sm_clock: 1400MHz
    clock_events: {{sw_power_cap: {{steps: [[0s, true], [{CAPPED_SECONDS}s, false]]}}}}
workloads:  # the serving runtime's stand-in: its /metrics feeds the KV cache and queue charts
  - name: chat
    cmdline: vllm serve meta-llama/Llama-3.1-8B-Instruct --port 8000
    serving: {{runtime: vllm, kv_blocks: 1000, block_size: 16, kv_usage: {KV_USAGE}, running: 2, waiting: {WAITING}}}
profiles:
  - name: chat
    kind: inference
    params: 8B
    precision: bf16
    architecture: {{layers: 32, heads: 32, kv_heads: 8, head_dim: 128}}
    context: {{max: 8192}}
    concurrency: 8
    gpus: [0]
"""
CONFIG = """\
agent:
  sample_interval: 250ms
analysis:
  short_window: 3s
  hold: 500ms
  thresholds: {vram_high: 0.96, kv_usage_low: 0.7}  # not the defaults: the page draws the configured ones
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
        # what the card said then: the tests run in random order, and the cap may have lifted before this one runs
        browser.first_evidence = browser.js("document.querySelector('#workload-chat .evidence').textContent")
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
    assert "power cap active" in browser.first_evidence
    # the cap lifts at 20 s: the agent's verdict moves to gpu_compute, and the page follows on its own
    shown = browser.wait(lambda: (v := browser.js(PILL)) not in (None, "gpu_power") and v, "a changed verdict",
                         timeout=CAPPED_SECONDS + 30)
    assert shown == "gpu_compute" == primary(agent)
    assert browser.opened == 1, "the test opened the page once; the browser did the rest"
    assert browser.loads >= 2, f"the page loaded {browser.loads} time(s): it did not refresh itself"
    assert "busy" in browser.js("document.querySelector('#workload-chat .evidence').textContent")


CHARTS = """(async () => {
  const status = await (await fetch('/api/v1/status')).json();
  const charts = [...document.querySelectorAll('svg.chart')].map(svg => {
    const d = svg.dataset, line = svg.querySelector('polyline'), dot = svg.querySelector('circle');
    const s = svg.getBoundingClientRect(), fig = svg.closest('figure').getBoundingClientRect();
    return {label: svg.getAttribute('aria-label'), card: svg.closest('.card').id,
            title: svg.querySelector('title')?.textContent, desc: svg.querySelector('desc')?.textContent,
            x0: +d.x0, x1: +d.x1, y0: +d.y0, y1: +d.y1, top: +d.top, seconds: +d.seconds,
            points: line ? [...line.points].map(p => [p.x, p.y]) : [],
            stroke: line && getComputedStyle(line).stroke,
            dot: dot && [dot.cx.baseVal.value, dot.cy.baseVal.value],
            marks: Object.fromEntries([...svg.querySelectorAll('line.mark')].map(
              m => [m.dataset.threshold, {value: +m.dataset.value, y: m.y1.baseVal.value}])),
            axis: [...svg.querySelectorAll('.axis text')].map(t => t.textContent),
            box: {left: s.left, right: s.right, width: s.width, height: s.height},
            figure: {left: fig.left, right: fig.right, top: fig.top, bottom: fig.bottom}};
  });
  return {timestamp: document.body.dataset.timestamp, status, charts};
})()"""
SPANS = [60, 120, 300]  # seconds: the time axes a chart may have (exposition/charts.py CHART_SPANS)
GPU_CHARTS = ["utilization", "SM activity", "memory used", "power", "temperature"]
SERVING_CHARTS = ["KV cache used", "requests waiting"]


@pytest.fixture(scope="module")
def tab(page, tmp_path_factory):
    """A second browser on the same agent, free to reload the page (the first one must see only its own
    refreshes): (agent, browser)."""
    agent = page[0]
    browser = Browser(tmp_path_factory.mktemp("charts") / "profile")
    try:
        browser.viewport(*WIDE)
        yield agent, browser
        assert browser.errors == []
    finally:
        browser.close()


def charts_of_one_snapshot(agent, browser) -> tuple[dict, dict[str, dict]]:
    """The status and the page's charts, both of the same snapshot (the page carries its timestamp): the page
    is loaded until the status the browser fetches right after the load is still the page's."""
    deadline = time.monotonic() + 90  # a loaded machine may take many tries to fit both in one 250 ms tick
    while time.monotonic() < deadline:
        browser.open(agent.url + "/")
        got = browser.wait(lambda: browser.js(CHARTS), "the charts")
        if got["status"].get("timestamp") == float(got["timestamp"] or "nan"):
            return got["status"], {c["label"].split(",")[0]: c for c in got["charts"]}
    raise AssertionError("the page and the status never showed the same snapshot")


def y_of(c: dict, value: float) -> float:
    """Where a value belongs on a chart: its value axis runs from 0 at data-y0 to data-top at data-y1."""
    return c["y0"] - min(value / c["top"], 1.0) * (c["y0"] - c["y1"])


def test_the_charts_draw_the_data_where_it_belongs(tab):
    """Five charts per GPU (busy, SM activity, memory, power, temperature) and two per serving workload (KV cache,
    requests waiting), each a line over the last minutes (the shortest of 1, 2, 5 that holds the window), newest
    at the right edge: the last point is the snapshot's value within a pixel, and the points lie in the band the
    scenario puts them."""
    agent, browser = tab
    status, charts = charts_of_one_snapshot(agent, browser)
    gpu = status["gpus"][0]
    assert sorted(charts) == sorted([f"GPU 0 {n}" for n in GPU_CHARTS] + [f"chat {n}" for n in SERVING_CHARTS])
    now = {"GPU 0 utilization": gpu["utilization_ratio"], "GPU 0 SM activity": gpu["sm_active_ratio"],
           "GPU 0 memory used": gpu["memory_used_bytes"], "GPU 0 power": gpu["power_watts"],
           "GPU 0 temperature": gpu["temperature_celsius"], "chat KV cache used": KV_USAGE,
           "chat requests waiting": WAITING}
    bands = {"GPU 0 utilization": (0.9, 0.98), "GPU 0 SM activity": (0.82, 0.95),
             "GPU 0 memory used": (60 * 2**30, 60 * 2**30), "GPU 0 power": (699, 699),
             "GPU 0 temperature": (60, 75), "chat KV cache used": (KV_USAGE, KV_USAGE),
             "chat requests waiting": (WAITING, WAITING)}
    assert charts["GPU 0 memory used"]["top"] == gpu["memory_total_bytes"]
    assert charts["GPU 0 utilization"]["top"] == charts["chat KV cache used"]["top"] == 1
    assert charts["GPU 0 power"]["top"] >= gpu["power_limit_watts"]
    serving = status["workloads"][0]["serving"]
    assert serving["usage"] == pytest.approx(KV_USAGE) and serving["waiting"] == pytest.approx(WAITING)
    for label, c in charts.items():
        xs, ys = [p[0] for p in c["points"]], [p[1] for p in c["points"]]
        assert len(xs) >= 4 and c["stroke"] not in (None, "none", ""), (label, c)
        assert xs == sorted(xs), f"{label}: time runs left to right"
        assert xs[-1] == pytest.approx(c["x1"], abs=0.1), f"{label}: the newest sample is at the right edge"
        # the time axis: the shortest of 1, 2, 5 minutes that holds the window (the agent's age, here)
        covered = (c["x1"] - min(xs)) / (c["x1"] - c["x0"]) * c["seconds"]
        assert c["seconds"] in SPANS and min(xs) >= c["x0"] - 0.1, label
        assert c["seconds"] == SPANS[0] or covered > SPANS[SPANS.index(c["seconds"]) - 1] - 1, (label, covered)
        assert c["axis"][-2] == f"-{c['seconds'] / 60:g} min" and c["label"].endswith(f"last {c['seconds'] / 60:g} min")
        assert abs(ys[-1] - y_of(c, now[label])) <= 1, f"{label}: last point {ys[-1]}, value {now[label]}"
        assert c["dot"] == pytest.approx(c["points"][-1], abs=0.01)
        low, high = bands[label]  # the last 10 s (the stand-in's first scrape may come before its first value)
        recent = [y for x, y in c["points"] if x >= c["x1"] - 10 / c["seconds"] * (c["x1"] - c["x0"])]
        assert len(recent) >= 4 and all(y_of(c, high) - 0.1 <= y <= y_of(c, low) + 0.1 for y in recent), (label, ys)
        assert c["figure"]["left"] <= c["box"]["left"] and c["box"]["right"] <= c["figure"]["right"] + 0.5, label
        assert c["box"]["width"] >= 150 and c["box"]["height"] >= 50, f"{label} is too small to read: {c['box']}"
    assert len({c["seconds"] for c in charts.values()}) == 1, "one time axis for the whole page"
    gpu_lefts = [charts[f"GPU 0 {n}"]["box"]["left"] for n in GPU_CHARTS]
    assert gpu_lefts == sorted(gpu_lefts) and len(set(gpu_lefts)) == 5, "a GPU's charts side by side at 1400 px"
    shot(browser, "wide")
    browser.js("document.querySelector('#gpu-0').scrollIntoView()")
    shot(browser, "wide-gpu")


def test_the_charts_draw_the_thresholds_the_analysis_judges_by(tab):
    """Each chart draws its thresholds as lines at their values: the configured analysis.thresholds (vram_high
    and kv_usage_low are not the defaults here), the enforced power limit, the GPU's temperature limits. Each
    chart says what it is in words (title, desc) and labels its axes with units."""
    from headroom.analysis.bottleneck import DEFAULT_THRESHOLDS

    agent, browser = tab
    status, charts = charts_of_one_snapshot(agent, browser)
    gpu = status["gpus"][0]
    t = {**DEFAULT_THRESHOLDS, "vram_high": 0.96, "kv_usage_low": 0.7}
    total = gpu["memory_total_bytes"]
    expected = {
        "GPU 0 utilization": {"compute_busy_low": t["compute_busy_low"], "busy_low": t["busy_low"]},
        "GPU 0 SM activity": {"sm_active_high": t["sm_active_high"], "sm_active_low": t["sm_active_low"]},
        "GPU 0 memory used": {"vram_high": t["vram_high"] * total, "vram_low": t["vram_low"] * total},
        "GPU 0 power": {"power_limit": gpu["power_limit_watts"]},
        "GPU 0 temperature": {"thermal_limit": gpu["thermal_limit_celsius"],
                              "slowdown": gpu["temperature_thresholds_celsius"]["slowdown"]},
        "chat KV cache used": {"kv_usage_high": t["kv_usage_high"], "kv_usage_low": t["kv_usage_low"]},
        "chat requests waiting": {"serving_waiting_high": t["serving_waiting_high"]},
    }
    assert gpu["thermal_limit_celsius"] == gpu["temperature_thresholds_celsius"]["max_operating"]
    units = {"GPU 0 utilization": "%", "GPU 0 SM activity": "%", "GPU 0 memory used": "GiB", "GPU 0 power": "W",
             "GPU 0 temperature": "°C", "chat KV cache used": "%", "chat requests waiting": ""}
    for label, c in charts.items():
        marks = {k: m["value"] for k, m in c["marks"].items()}
        assert marks == pytest.approx(expected[label]), label
        for key, m in c["marks"].items():
            assert m["y"] == pytest.approx(y_of(c, m["value"]), abs=0.1), (label, key)
        assert c["title"] == c["label"]
        assert "now " in c["desc"] and "thresholds:" in c["desc"], c["desc"]
        assert c["axis"][-1] == "now" and all(units[label] in a for a in c["axis"][:2]), c["axis"]


LAYOUT = """(() => {
  const doc = document.documentElement;
  const over = [...document.querySelectorAll('.card, table, svg, h1, h2, h3, p')]
    .filter(e => e.getBoundingClientRect().right > innerWidth + 0.5)
    .map(e => e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className.baseVal ?? e.className);
  const cards = [...document.querySelectorAll('.card')].map(c => c.getBoundingClientRect());
  const charts = [...document.querySelectorAll('svg.chart')].map(c => c.getBoundingClientRect())
    .map(r => ({left: r.left, right: r.right, width: r.width, height: r.height}));
  return {inner: innerWidth, scroll: doc.scrollWidth, over: over.slice(0, 8), charts,
          cards: cards.map(r => ({left: r.left, right: r.right, width: r.width})),
          fontSize: parseFloat(getComputedStyle(document.body).fontSize)};
})()"""


@pytest.mark.parametrize("size", [NARROW, WIDE], ids=["narrow (375 px, a phone)", "wide (1400 px)"])
def test_the_layout_fits_the_viewport(page, size):
    """No horizontal scrolling, nothing sticking out on the right, every card within the page, every chart
    (five of the GPU, two of the serving workload) large enough to read."""
    _, browser, _ = page
    browser.viewport(*size)
    layout = browser.wait(lambda: browser.js(LAYOUT), "layout")
    assert layout["scroll"] <= layout["inner"] == size[0], f"horizontal scrolling at {size[0]} px: {layout}"
    assert not layout["over"], f"sticking out at {size[0]} px: {layout['over']}"
    assert layout["cards"] and all(0 <= c["left"] and c["right"] <= size[0] for c in layout["cards"])
    assert len(layout["charts"]) == 7, layout["charts"]
    assert all(0 <= c["left"] and c["right"] <= size[0] and c["width"] >= 150 and c["height"] >= 50
               for c in layout["charts"]), layout["charts"]
    if size == WIDE:  # the text column keeps a readable width rather than spanning the screen
        assert all(c["width"] <= 80 * layout["fontSize"] for c in layout["cards"])
    shot(browser, f"{size[0]}px")


def test_no_console_errors(page):
    """Nothing the page did (its loads, its refreshes, its favicon request) logged an error."""
    _, browser, _ = page
    browser.wait(lambda: browser.loads >= 1, "a load")
    time.sleep(0.5)
    assert browser.errors == []


PENDING_HOLD_SECONDS = 10  # long enough to see the pending verdict, short enough to see it confirmed in the cap
VERDICT = """(() => {
  const card = document.querySelector('#workload-chat');
  const pill = card.querySelector('[data-bottleneck]');
  const link = card.querySelector('.remedy a.runbook');
  return {primary: pill.dataset.bottleneck, pending: pill.dataset.pending || null, text: card.textContent,
          remedy: card.querySelector('.remedy')?.textContent || null, runbook: link && link.getAttribute('href')};
})()"""


# click the workload card's runbook link as a reader would; the link's resolved URL
CLICK_RUNBOOK = """(() => {
  const link = document.querySelector('#workload-chat .remedy a.runbook');
  link.click();
  return link.href;
})()"""
# once the runbook has loaded: the element the URL's fragment names, where it is, and its section's text
RUNBOOK_TARGET = """(() => {
  if (location.pathname !== '/runbook' || document.readyState !== 'complete' || !location.hash) return null;
  const el = document.getElementById(decodeURIComponent(location.hash.slice(1)));
  if (!el) return {missing: location.hash};
  let section = '', next = el.nextElementSibling;
  while (next && !/^H[1-3]$/.test(next.tagName)) { section += next.textContent; next = next.nextElementSibling; }
  return {tag: el.tagName, heading: el.textContent, top: el.getBoundingClientRect().top, inner: innerHeight,
          scroll: document.documentElement.scrollWidth, width: innerWidth, section};
})()"""


def test_a_newcomer_sees_the_pending_verdict_then_the_confirmed_one_with_what_to_do(tmp_path):
    """The first minute on the page (issue 29): while the power cap waits out the hold, the workload card says
    "pending: gpu_power (score 1.00), confirmed in N s if it holds", not a green "none"; once confirmed it shows
    gpu_power with what to do (nvidia-smi, the limit against its maximum) and a runbook link that works: a click
    lands on that resource's section of docs/runbook.md served by the agent itself (/runbook), in view."""
    from test_rules import runbook_anchors

    from conftest import Agent

    (tmp_path / "s.yaml").write_text(SCENARIO)
    (tmp_path / "c.yaml").write_text(CONFIG.replace("hold: 500ms", f"hold: {PENDING_HOLD_SECONDS}s"))
    browser = Browser(tmp_path / "profile")
    agent = Agent("--config.file", str(tmp_path / "c.yaml"), "--simulate", str(tmp_path / "s.yaml"))
    try:
        agent.wait_ready()
        browser.viewport(*NARROW)
        browser.open(agent.url + "/")
        pending = browser.wait(lambda: (v := browser.js(VERDICT)) and v["pending"] and v, "a pending verdict",
                               timeout=PENDING_HOLD_SECONDS)
        assert pending["primary"] == "none" and pending["pending"] == "gpu_power"
        assert re.search(r"pending: gpu_power \(score 1\.00\), confirmed in \d+ s if it holds", pending["text"])
        assert "Nothing limits this workload now" not in pending["text"]
        shot(browser, "pending")
        confirmed = browser.wait(lambda: (v := browser.js(VERDICT)) and v["primary"] == "gpu_power" and v,
                                 "the confirmed verdict", timeout=PENDING_HOLD_SECONDS + 10)
        assert confirmed["pending"] is None and "pending:" not in confirmed["text"]
        assert "What to do:" in confirmed["remedy"] and "700 W limit" in confirmed["remedy"]
        assert "nvidia-smi" in confirmed["remedy"]
        # the agent's own runbook, linked relative to the page (air-gapped hosts, a proxy's path prefix)
        assert confirmed["runbook"] == "runbook#bottleneck-gpu_power"
        assert confirmed["runbook"].removeprefix("runbook#") in runbook_anchors()
        layout = browser.js(LAYOUT)
        assert layout["scroll"] <= layout["inner"] and not layout["over"], layout  # the remedy wraps at 375 px
        shot(browser, "confirmed")
        clicked = browser.js(CLICK_RUNBOOK)
        assert clicked == agent.url + "/runbook#bottleneck-gpu_power", clicked
        target = browser.wait(lambda: browser.js(RUNBOOK_TARGET), "the runbook's section after the click")
        assert target["heading"].startswith("Bottleneck: gpu_power") and target["tag"] == "H3", target
        assert 0 <= target["top"] < target["inner"], target  # scrolled to it, in view at 375 px
        assert target["scroll"] <= target["width"], target  # the runbook lays out at a phone's width too
        assert "Max Power Limit" in target["section"], target
        shot(browser, "runbook")
        assert browser.errors == []
    finally:
        browser.close()
        agent.stop()


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
