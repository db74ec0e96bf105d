"""The last probe result exported by a running agent (`headroom run --simulate demo --state.dir DIR`, a real
process): headroom_workload_capacity_* gauges, re-read when the file changes, the measured basis of
headroom_workload_headroom_sequences, and a bad file that costs nothing but the gauges."""

from __future__ import annotations

import json
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from headroom.probe import store
from test_probe_store import fixture

from conftest import ROOT, http_get


def _series(agent) -> dict[tuple[str, tuple], float]:
    _, _, body = http_get(agent.url + "/metrics")
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _find(series, name, **labels):
    return {k: v for k, v in series.items() if k[0] == name and all((lk, lv) in k[1] for lk, lv in labels.items())}


def _wait_for(agent, predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        s = _series(agent)
        if predicate(s) or time.monotonic() > deadline:
            return s
        time.sleep(0.2)


@pytest.fixture
def state(tmp_path):
    return tmp_path / "state"


@pytest.fixture
def agent(state):
    from conftest import Agent

    a = Agent("--config.file", str(ROOT / "config.yaml"), "--simulate", "demo", "--sample.interval", "200ms",
              "--state.dir", str(state))
    a.wait_ready()
    yield a
    code, err = a.stop()
    assert code == 0, err
    assert "Traceback" not in err


def _result(concurrency=4, age=60.0, **extra):
    r = fixture("kv-bound")
    r["capacity"]["concurrency"] = concurrency
    r["finished_at"] = time.time() - age
    r.update(extra)
    return r


def test_no_result_no_capacity_gauges(agent):
    s = _series(agent)
    assert not _find(s, "headroom_workload_capacity_concurrency")
    assert not _find(s, "headroom_workload_headroom_sequences", basis="measured")
    assert s[("headroom_collector_success", (("collector", "probe"),))] == 1


def test_a_saved_result_shows_as_gauges_with_its_load_shape(agent, state):
    r = _result()
    store.save(r, state)
    s = _wait_for(agent, lambda s: _find(s, "headroom_workload_capacity_concurrency"))
    labels = (("bound_by", "kv_cache"), ("input_tokens", "256"), ("output_tokens", "128"), ("workload", "chat"))
    assert s[("headroom_workload_capacity_concurrency", labels)] == 4
    assert s[("headroom_workload_capacity_requests_per_second", labels)] == 3.9
    assert s[("headroom_workload_capacity_measured_timestamp_seconds", (("workload", "chat"),))] == \
        pytest.approx(r["finished_at"], abs=0.01)
    assert s[("headroom_workload_capacity_partial", (("workload", "chat"),))] == 0
    # more sequences, measured: the probe's 4 minus what the demo's runtime runs now, beside the runtime's basis
    measured = _find(s, "headroom_workload_headroom_sequences", workload="chat", basis="measured")
    assert measured and next(iter(measured.values())) <= 4
    assert _find(s, "headroom_workload_headroom_sequences", workload="chat", basis="runtime")


def test_a_new_result_is_read_at_the_next_tick_and_an_old_one_is_not_measured_headroom(agent, state):
    store.save(_result(concurrency=6, age=8 * 24 * 3600.0), state)
    s = _wait_for(agent, lambda s: 6 in _find(s, "headroom_workload_capacity_concurrency").values())
    assert 6 in _find(s, "headroom_workload_capacity_concurrency").values()
    assert not _find(s, "headroom_workload_headroom_sequences", basis="measured")  # older than a week


def test_a_corrupt_or_hostile_file_drops_the_gauges_and_nothing_else(agent, state):
    store.save(_result(), state)
    _wait_for(agent, lambda s: _find(s, "headroom_workload_capacity_concurrency"))
    hostile = _result()
    hostile["capacity"]["bound_by"] = 'x"} 1\nheadroom_evil 1'
    (state / store.FILENAME).write_text(json.dumps(hostile))
    s = _wait_for(agent, lambda s: not _find(s, "headroom_workload_capacity_concurrency"))
    assert not _find(s, "headroom_workload_capacity_concurrency") and not _find(s, "headroom_evil")
    assert s[("headroom_collector_success", (("collector", "probe"),))] == 1
    assert _find(s, "headroom_workload_headroom_sequences", basis="runtime")  # the rest of the tick went on
    _, _, body = http_get(agent.url + "/api/v1/status")
    assert json.loads(body)["healthy"] is True


def test_a_recording_keeps_the_probe_sample_and_replays_it():
    """--record writes the probe collector's sample like any other; replay decodes it (record.SOURCE_TYPES)."""
    from headroom.record import decode_sample, encode_sample
    from headroom.samples import ProbeSample, Sample, SourceResult

    p = ProbeSample(path="/var/lib/headroom/probe-last.json", found=True, workload="chat", schedule="concurrency",
                    measured_at=1764612400.2, concurrency=4.0, requests_per_second=3.9, bound_by="kv_cache",
                    from_step=3, input_tokens=256.0, output_tokens=128.0)
    line = json.loads(encode_sample(Sample(1.0, 2.0, {"probe": SourceResult("probe", True, 0.001, p, None)})))
    assert decode_sample(line).data("probe") == p


def test_the_measured_basis_needs_a_recent_complete_probe_of_that_workload():
    from dataclasses import replace

    from headroom.analysis.headroom import PROBE_RECENT_SECONDS, WorkloadHeadroom, measured_headroom
    from headroom.analysis.serving import ServingSignals
    from headroom.samples import ProbeSample

    now = 1_800_000_000.0
    p = ProbeSample(path="x", found=True, workload="chat", measured_at=now - 60, concurrency=8.0)
    srv = ServingSignals("chat", "http://x/metrics", True, running=3.0)
    assert measured_headroom(WorkloadHeadroom(), p, "chat", srv, now).measured_sequences == 5
    assert measured_headroom(WorkloadHeadroom(), p, "chat", None, now).measured_sequences == 8
    for other in (replace(p, workload="rag"), replace(p, partial=True), replace(p, concurrency=None),
                  replace(p, measured_at=now - PROBE_RECENT_SECONDS - 1), replace(p, measured_at=now + 60),
                  replace(p, found=False)):
        assert measured_headroom(WorkloadHeadroom(), other, "chat", srv, now).measured_sequences is None
