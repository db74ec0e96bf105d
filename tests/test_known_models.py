"""The shipped table of well-known models (headroom.workload.known_models) holds their published config.json values:
every entry with a fixture in tests/fixtures/hf reads exactly as that fixture does, and every entry reads as a valid
model config the memory model sizes."""

from __future__ import annotations

import pytest

from headroom.workload import known_models, modelconfig
from headroom.workload.profiles import profile_from_dict
from headroom.workload.sizing import estimate

from conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "hf"
FAMILIES = ("meta-llama/Llama-3.", "meta-llama/Meta-Llama-3-", "Qwen/Qwen2.5-", "Qwen/Qwen3-", "mistralai/Mistral-",
            "mistralai/Mixtral-", "google/gemma-2-", "google/gemma-3-", "deepseek-ai/DeepSeek-", "microsoft/Phi-")


@pytest.mark.parametrize(("name", "fixture"), sorted(known_models.FIXTURES.items()))
def test_an_entry_reads_as_its_config_json_fixture(name, fixture):
    table = modelconfig.model_config_from(known_models.MODELS[name], "table")
    real = modelconfig.read_model_config(FIXTURES / fixture / "config.json")
    assert table.fields == real.fields
    assert (table.model_type, table.layout, table.encoder_only) == (real.model_type, real.layout, real.encoder_only)
    if real.max_context is not None:  # the fixtures keep only some of the fields
        assert table.max_context == real.max_context


@pytest.mark.parametrize("name", sorted(known_models.MODELS))
def test_every_entry_is_a_model_the_memory_model_sizes(name):
    mc = modelconfig.model_config_from(known_models.MODELS[name], "table")
    assert mc.max_context and not mc.encoder_only
    d = {**mc.fields, "name": "x", "kind": "inference", "context": {"max": 4096}, "model": {"name": name}}
    e = estimate(profile_from_dict(d, attributable=False), gpu_memory_bytes=2**40)
    assert e.component("weights") > 10**8 and e.kv_bytes_per_token


def test_the_families_the_issue_names_are_there():
    for family in FAMILIES:
        assert any(n.startswith(family) for n in known_models.MODELS), family
    assert known_models.source("Qwen/Qwen3-8B") == "https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json"
    assert known_models.lookup("META-LLAMA/llama-3.1-70b-instruct")[0] == "meta-llama/Llama-3.1-70B-Instruct"
    assert known_models.lookup("nobody/nothing") is None
