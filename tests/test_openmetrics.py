"""Content negotiation: OpenMetrics 1.0 (with `# EOF`) for scrapers that ask for it, text 0.0.4 otherwise.

The OpenMetrics body is checked with prometheus_client's strict OpenMetrics parser and compared sample by
sample with the text body; the real Prometheus scrape that negotiates it is in test_prometheus_integration.py."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from headroom.exposition import openmetrics
from headroom.exposition.catalog import BY_NAME

from conftest import http_get

GOLDEN = Path(__file__).resolve().parent / "golden" / "exposition.prom"
# what Prometheus 2.42 sends (scrape/scrape.go, acceptHeader)
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
# what Prometheus 3 sends with its default scrape protocols, and with protobuf first (native histograms on):
# headroom speaks no protobuf, so OpenMetrics, the next in rank
PROMETHEUS3_ACCEPT = ("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
                      "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;"
                      "q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1")
PROMETHEUS3_PROTO_ACCEPT = ("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;"
                            "q=0.6," + PROMETHEUS3_ACCEPT)
BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"


@pytest.mark.parametrize(("accept", "expected"), [
    (PROMETHEUS_ACCEPT, True),
    (PROMETHEUS3_ACCEPT, True),
    (PROMETHEUS3_PROTO_ACCEPT, True),
    ("application/openmetrics-text", True),
    ("application/openmetrics-text; version=1.0.0; q=0.9, text/plain; q=0.2", True),
    ("text/plain;version=0.0.4;q=0.9,application/openmetrics-text;version=1.0.0;q=0.5", False),
    ("application/openmetrics-text;version=2.0.0", False),  # a version we do not speak
    ("application/openmetrics-text;q=0", False),
    ("application/openmetrics-text;q=oops", False),
    (BROWSER_ACCEPT, False),
    ("*/*", False),
    ("", False),
    (None, False),
])
def test_accept_header_negotiation(accept, expected):
    assert openmetrics.prefers_openmetrics(accept) is expected


def _samples(families) -> set[tuple[str, tuple, float]]:
    return {(s.name, tuple(sorted(s.labels.items())), s.value) for f in families for s in f.samples}


def test_golden_exposition_converts_to_valid_openmetrics_with_the_same_samples():
    text = GOLDEN.read_text()
    om = openmetrics.from_text(text.encode()).decode()
    assert om.endswith("\n# EOF\n") and om.count("# EOF") == 1
    om_families = list(parse_openmetrics(om))  # strict: raises on any violation of OpenMetrics 1.0
    assert _samples(om_families) == _samples(parse_text(text))
    types = {f.name: f.type for f in om_families}
    assert types["headroom_samples"] == "counter", "counter families are named without _total"
    assert types["headroom_gpu_power_watts"] == "gauge"
    units = {f.name: f.unit for f in om_families}
    assert units["headroom_gpu_energy_joules"] == "joules"
    # HELP survives OpenMetrics escaping (it also escapes double quotes, the text format does not)
    assert all(f.documentation == BY_NAME.get(f.name, BY_NAME.get(f.name + "_total")).help for f in om_families)


def test_openmetrics_body_is_converted_once_per_snapshot():
    class Snap:
        def __init__(self, body: bytes) -> None:
            self.exposition = body

    conv = openmetrics.Converter()
    first = Snap(b"# HELP headroom_samples_total Ticks completed since the agent started.\n"
                 b"# TYPE headroom_samples_total counter\nheadroom_samples_total 1\n")
    body = conv.get(first)
    assert conv.get(first) is body, "a second scrape of the same snapshot must reuse the converted bytes"
    second = Snap(first.exposition.replace(b" 1\n", b" 2\n"))
    assert conv.get(second).endswith(b"headroom_samples_total 2\n# EOF\n")


@pytest.fixture(scope="module")
def agent():
    from conftest import Agent

    a = Agent("--simulate", "golden", "--log.level", "warn")
    a.wait_ready()
    yield a
    a.stop()


def test_live_agent_answers_prometheus_with_openmetrics(agent):
    status, headers, body = http_get(agent.url + "/metrics", headers={"Accept": PROMETHEUS_ACCEPT})
    assert status == 200
    assert headers["Content-Type"] == "application/openmetrics-text; version=1.0.0; charset=utf-8"
    assert "Accept" in headers["Vary"]
    text = body.decode()
    assert text.endswith("# EOF\n")
    names = {f.name for f in parse_openmetrics(text)}
    assert {"headroom_samples", "headroom_gpu_utilization_ratio", "headroom_memory_size_bytes"} <= names


def test_live_agent_gzips_openmetrics_and_text_separately(agent):
    _, h1, om = http_get(agent.url + "/metrics", headers={"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"})
    _, h2, text = http_get(agent.url + "/metrics", headers={"Accept-Encoding": "gzip"})
    assert h1["Content-Encoding"] == h2["Content-Encoding"] == "gzip"
    assert gzip.decompress(om).endswith(b"# EOF\n")
    assert b"# EOF" not in gzip.decompress(text)
    assert h2["Content-Type"].startswith("text/plain; version=0.0.4")


@pytest.mark.parametrize("accept", [None, BROWSER_ACCEPT, "*/*"])
def test_live_agent_answers_others_with_text_that_promtool_accepts(agent, accept):
    status, headers, body = http_get(agent.url + "/metrics", headers={"Accept": accept} if accept else {})
    assert status == 200 and headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert b"# EOF" not in body
    assert shutil.which("promtool"), "promtool missing: `make test` installs Debian's prometheus package"
    r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


def test_collect_query_parameter_is_ignored_as_the_readme_says(agent):
    """node_exporter's collect[] filter is not supported (README explains why): the full exposition comes back."""
    status, _, filtered = http_get(agent.url + "/metrics?collect[]=cpu")
    assert status == 200
    assert b"headroom_gpu_utilization_ratio" in filtered and b"headroom_memory_size_bytes" in filtered
