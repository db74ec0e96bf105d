"""probe/chart.py: the probe's SVG chart from a result (hand-written results in the contract's format), checked as
XML: every point where its value puts it, the SLO and the binding step marked, hostile text escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from headroom.probe import chart, store
from test_probe_store import fixture

NS = "{http://www.w3.org/2000/svg}"


def _svg(result: dict) -> ET.Element:
    return ET.fromstring(chart.document(store.validate(result)))


def test_every_step_is_a_point_of_each_series_at_its_value():
    r = store.validate(fixture("kv-bound"))
    root = _svg(fixture("kv-bound"))
    assert root.get("data-steps") == "4" and root.get("data-bound-by") == "kv_cache"
    lat_top = float(root.get("data-lat-top"))
    points = root.findall(f"{NS}circle")
    assert len(points) == 4 * 5  # TTFT p50, TTFT p95, ITL p95, requests/s, goodput
    ttft95 = sorted((p for p in points if p.get("data-series") == "TTFT p95"), key=lambda p: int(p.get("data-step")))
    assert [float(p.get("data-value")) for p in ttft95] == [s["ttft"]["p95"] for s in r["steps"]]
    ys = [float(p.get("cy")) for p in ttft95]
    assert ys == sorted(ys, reverse=True)  # latency grows with load: higher on the chart step by step
    bottom = chart.TOP + chart.PANEL
    for p, s in zip(ttft95, r["steps"], strict=True):
        assert float(p.get("cy")) == round(bottom - min(s["ttft"]["p95"] / lat_top, 1) * chart.PANEL, 1)
    xs = [float(p.get("cx")) for p in ttft95]
    assert xs == sorted(xs) and chart.LEFT < xs[0] < xs[-1] < chart.WIDTH - chart.RIGHT
    assert [t.text for t in root.iter(f"{NS}text") if t.get("class") == "level"] == ["1", "2", "4", "8"]


def test_the_slo_and_the_binding_step_are_marked():
    root = _svg(fixture("kv-bound"))
    marks = {m.get("data-threshold"): float(m.get("data-value")) for m in root.iter(f"{NS}line")
             if m.get("class") == "mark"}
    assert marks == {"ttft_p95": 0.5, "itl_p95": 0.05}
    bound = [m for m in root.iter(f"{NS}line") if m.get("class") == "bound"]
    assert len(bound) == 1 and bound[0].get("data-step") == "3"
    assert any(t.text == "bound by kv_cache" for t in root.iter(f"{NS}text"))
    desc = root.find(f"{NS}desc").text
    assert "bound by kv_cache from step 3" in desc and "SLO broken" in desc


def test_a_saturated_client_is_marked_too():
    root = _svg(fixture("client-saturated"))
    client = [m for m in root.iter(f"{NS}line") if m.get("class") == "client"]
    assert client and client[0].get("data-step") == "1"
    assert "client saturated from step 1" in root.find(f"{NS}desc").text


def test_hostile_strings_are_text_never_markup():
    r = fixture("kv-bound")
    r["workload"] = '</title><script>alert(1)</script><a href="x">'
    r["url"] = '"><foreignObject>'
    svg = chart.document(store.validate(r))
    root = ET.fromstring(svg)  # still well-formed XML
    assert not [e for e in root.iter() if e.tag in (f"{NS}script", f"{NS}a", f"{NS}foreignObject")]
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    html = chart.figure(store.validate(r), "answer with <b>markup</b> & more")
    assert "<b>markup</b>" not in html and "&lt;b&gt;markup&lt;/b&gt; &amp; more" in html


def test_no_step_is_a_note_not_an_empty_chart():
    r = fixture("kv-bound")
    r["steps"] = []
    assert "no step completed" in chart.chart(store.validate(r))
