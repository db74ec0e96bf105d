"""The metric catalogue: conventions, generated docs, and the writer refusing uncatalogued names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from headroom.exposition import catalog
from headroom.exposition.render import UnknownMetric, Writer

ROOT = Path(__file__).resolve().parent.parent
UNIT_SUFFIXES = {
    "bytes": "_bytes", "seconds": "_seconds", "ratio": "_ratio", "watts": "_watts", "celsius": "_celsius",
    "hertz": "_hertz", "joules": "_joules",
}


def test_docs_metrics_md_is_generated_from_the_catalogue():
    on_disk = (ROOT / "docs" / "metrics.md").read_text()
    assert on_disk == catalog.markdown(), "docs/metrics.md is stale: run `make docs`"


@pytest.mark.parametrize("m", catalog.CATALOG, ids=lambda m: m.name)
def test_names_follow_prometheus_conventions(m):
    assert re.fullmatch(r"headroom_[a-z0-9_]+", m.name), "one prefix, snake_case, no colons"
    assert m.type in (catalog.GAUGE, catalog.COUNTER)
    if m.type == catalog.COUNTER:
        assert m.name.endswith("_total")
    else:
        # `_total` marks a counter wherever it sits: a gauge named `..._total_bytes` reads as one in PromQL
        assert "_total" not in m.name, f"gauge {m.name} must not contain _total (CHANGELOG.md lists renames)"
    if m.unit:
        suffix = UNIT_SUFFIXES[m.unit]
        assert suffix in m.name, f"{m.name} must carry its unit {suffix}"
    if m.name.endswith("_info"):
        assert m.labels, "info metrics carry identity labels"
    assert m.help and (m.help[0].isupper() or m.help[0].isdigit()) and m.help.endswith((".", ")"))
    forbidden = {"pid", "cmdline", "command", "user", "username"}
    assert not forbidden & set(m.labels), "no pids, command lines or users as labels"


def test_writer_refuses_uncatalogued_names_and_wrong_labels():
    w = Writer()
    with pytest.raises(UnknownMetric):
        w.add("headroom_made_up_metric", 1)
    with pytest.raises(ValueError, match=r"headroom_gpu_up takes labels \('gpu', 'uuid'\), got 1 values"):
        w.add("headroom_gpu_up", 1, "0")  # needs gpu and uuid


def test_writer_omits_unknown_values_and_escapes_labels():
    w = Writer()
    w.add("headroom_gpu_power_watts", None, "0", "GPU-a")
    w.add("headroom_shm_used_bytes", 5, 'we"ird\\path\n')
    w.add("headroom_samples_total", 3)
    text = w.render().decode()
    assert "headroom_gpu_power_watts" not in text
    assert 'headroom_shm_used_bytes{mountpoint="we\\"ird\\\\path\\n"} 5' in text
    assert "# TYPE headroom_samples_total counter\nheadroom_samples_total 3" in text
    # families in catalogue order
    assert text.index("headroom_samples_total") < text.index("headroom_shm_used_bytes")


def test_writer_series_cache_keeps_checks_and_identity_labels():
    """A series rendered once is cached (render._SERIES_HEAD): the cache must not let a later wrong call
    through, nor keep a GPU's identity labels once they change, nor mix up values."""
    from headroom.exposition import render

    render.clear_caches()
    for tick, pod in enumerate(("a", "b", "")):
        w = Writer()
        if pod:
            w.gpu_extra["GPU-x"] = f',namespace="ns",pod="{pod}"'
        w.add("headroom_gpu_power_watts", 100.5 + tick, "0", "GPU-x")
        w.add("headroom_gpu_power_watts", 7, "1", "GPU-y")  # no identity labels for this GPU
        w.add("headroom_samples_total", tick)
        with pytest.raises(ValueError, match="headroom_gpu_power_watts takes labels"):
            w.add("headroom_gpu_power_watts", 1, "0")  # the cached series does not excuse a missing label
        with pytest.raises(UnknownMetric):
            w.add("headroom_made_up_metric", 1)
        lines = w.render().decode().splitlines()
        extra = f',namespace="ns",pod="{pod}"' if pod else ""
        assert f'headroom_gpu_power_watts{{gpu="0",uuid="GPU-x"{extra}}} {100.5 + tick}' in lines
        assert 'headroom_gpu_power_watts{gpu="1",uuid="GPU-y"} 7' in lines
        assert f"headroom_samples_total {tick}" in lines
    w = Writer()
    w.add("headroom_shm_used_bytes", 1, ["unhashable"])  # rendered from its str(), never cached
    assert 'headroom_shm_used_bytes{mountpoint="[\'unhashable\']"} 1' in w.render().decode()
