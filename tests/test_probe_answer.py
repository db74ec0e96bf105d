"""probe/answer.py: the capacity sentence from a result (hand-written results in the contract's format)."""

from __future__ import annotations

import copy

from headroom.probe import store
from headroom.probe.answer import capacity_answer
from test_probe_store import fixture


def test_a_kv_bound_ramp_names_the_capacity_the_resource_the_step_and_the_estimate():
    text = capacity_answer(store.validate(fixture("kv-bound")))
    assert text.startswith("Capacity at the SLO (TTFT p95 <= 500 ms, ITL p95 <= 50 ms, errors <= 1 %): "
                           "4 concurrent sequences / 3.9 requests/s at 256 input / 127 output tokens (exact), "
                           "bound by kv_cache from step 3 (level 8: KV cache 97 % used, 9 requests waiting).")
    # the estimate beside the measurement: the memory model's KV capacity, the runtime's, what each holds at
    # these lengths (384 tokens a sequence), the predicted headroom, and what was measured
    assert "KV capacity 12 000 tokens (estimate), 31 sequences at these lengths" in text
    assert "the runtime reported 8 192 tokens, 21 sequences at these lengths" in text
    assert "predicted headroom 5 865 more sequences" in text and "measured 4 concurrent sequences" in text


def test_a_saturated_client_is_said_instead_of_blaming_the_server():
    text = capacity_answer(store.validate(fixture("client-saturated")))
    assert "at least 2 concurrent sequences" in text
    assert "the load generator itself saturated" in text and "400.0 ms per request" in text
    assert "not the server" in text and "bound by cpu" not in text and "bound by client" not in text


def test_a_client_that_saturated_beside_a_server_bound_is_noted():
    r = fixture("kv-bound")
    r["steps"][3]["client_saturated"] = True
    text = capacity_answer(store.validate(r))
    assert "bound by kv_cache" in text and "Note: the client saturated at step 3" in text


def test_when_the_slo_held_everywhere_the_capacity_is_at_least_the_top_level():
    r = fixture("kv-bound")
    r["steps"][3].update(slo_ok=True, slo_broken=[])
    r.update(stopped="max", capacity={"concurrency": 8, "requests_per_second": 4.1, "bound_by": "none",
                                      "from_step": None, "evidence": ""})
    text = capacity_answer(store.validate(r))
    assert "at least 8 concurrent sequences / 4.1 requests/s" in text and "beyond it" in text


def test_the_first_step_breaking_the_slo_gives_no_capacity_and_says_why():
    r = fixture("kv-bound")
    for s in r["steps"]:
        s.update(slo_ok=False, slo_broken=["ttft_p95"])
    r["capacity"] = {"concurrency": None, "requests_per_second": None, "bound_by": "kv_cache", "from_step": 0,
                     "evidence": "KV cache full"}
    text = capacity_answer(store.validate(r))
    assert "none; the first step (level 1) already broke it (ttft_p95)" in text and "bound by kv_cache" in text
    assert "measured: no level met the SLO" in text


def test_an_interrupted_probe_is_a_partial_result_and_an_empty_one_says_so():
    r = fixture("kv-bound")
    r.update(stopped="interrupted", partial=True, message="interrupted (Ctrl-C) in step 3")
    assert capacity_answer(store.validate(r)).startswith("Partial result (interrupted (Ctrl-C) in step 3). Capacity")
    empty = copy.deepcopy(r)
    empty["steps"] = []
    assert "No step completed" in capacity_answer(store.validate(empty))


def test_an_open_loop_rate_probe_speaks_in_requests_per_second():
    r = fixture("kv-bound")
    r["schedule"] = "rate"
    r["capacity"]["concurrency"] = None
    text = capacity_answer(store.validate(r))
    assert ": 3.9 requests/s at 256 input" in text and "measured 3.9 requests/s" in text


def test_the_memory_models_kv_stands_beside_the_runtimes():
    r = fixture("kv-bound")
    r["estimate"] = {"kv_capacity_tokens": 8192, "kv_capacity_estimate_tokens": 230_000, "headroom_sequences": 2,
                     "basis": "runtime"}
    text = capacity_answer(store.validate(r))
    assert "KV capacity 8 192 tokens (runtime), 21 sequences at these lengths" in text
    assert "the memory model's estimate 230 000 tokens, 598 sequences at these lengths" in text
