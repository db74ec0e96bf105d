"""Serving runtimes' own KV-cache accounting, step by step as each version's source does it
(docs/sizing.md, "Runtime accounting"), and against figures the runtimes printed in public issues."""

from __future__ import annotations

import pytest

from headroom.workload.profiles import profile_from_dict
from headroom.workload.serving_memory import kv_layout, vllm_kv, vllm_rules
from headroom.workload.sizing import DEFAULTS, SizingError, estimate, format_table, inference_activation_bytes

GIB = 2**30
MIB = 2**20
LLAMA31_8B = {"layers": 32, "heads": 32, "kv_heads": 8, "head_dim": 128, "hidden_size": 4096,
              "intermediate_size": 14336, "vocab_size": 128256}  # fmt: skip


def serve(version, context, arch=LLAMA31_8B, **runtime):
    return profile_from_dict({"name": "s", "kind": "inference", "params": 8_030_261_248, "precision": "bf16",
                              "architecture": arch, "context": context,
                              "runtime": {"name": "vllm", "version": version, **runtime}}, attributable=False)  # fmt: skip


# version, max_model_len, GPU memory -> (batched tokens, sequences sampled, CUDA context counted)
@pytest.mark.parametrize(
    ("version", "context", "memory", "tokens", "seqs", "context_counted"),
    [
        ("0.6.3", 8192, 80 * GIB, 8192, 256, False),     # V0: max(max_model_len, 2048); init free after the context
        ("0.6.3", 40000, 80 * GIB, 512, 256, False),     # V0: chunked prefill above 32768 -> 512
        ("0.6.4", 4096, 24 * GIB, 4096, 256, True),      # memory_profiling counts the context as non-torch
        ("0.7.3", 1024, 24 * GIB, 2048, 256, False),     # non-torch growth since the baseline snapshot
        ("0.8.5", 8192, 80 * GIB, 8192, 1024, True),     # V1: >= 70 GiB serve defaults; total - torch allocated
        ("0.8.5", 8192, 24 * GIB, 2048, 256, True),      # V1: < 70 GiB
        ("0.9.2", 8192, 80 * GIB, 8192, 1024, False),    # V1: non-torch increase since the init snapshot
        ("0.10.1", 8192, 80 * GIB, 8192, 1024, False),
        ("0.10.1", 8200, 80 * GIB, 8192, 1024, False),   # concurrency = blocks / cdiv(8200, 16), not tokens / 8200
    ],
)  # fmt: skip
def test_vllm_accounting_per_version(version, context, memory, tokens, seqs, context_counted):
    e = estimate(serve(version, context), gpu_memory_bytes=memory)
    r = e.runtime_report
    budget = int(memory * 0.9)
    weights = 8_030_261_248 * 2
    forward = inference_activation_bytes(tokens, 0, 4096, 14336)
    sampler = seqs * 128256 * DEFAULTS.sampler_bytes_per_logit
    non_torch = DEFAULTS.vllm_non_torch_bytes + (DEFAULTS.vllm_cuda_context_bytes if context_counted else 0)
    available = budget - weights - max(forward, sampler) - non_torch
    page = 16 * 2 * 8 * 128 * 2  # block x K,V x KV heads x head_dim x bf16, one layer
    blocks = max(available, 0) // page // 32
    assert (r["budget_bytes"], r["activation_bytes"], r["non_torch_bytes"]) == (budget, max(forward, sampler), non_torch)
    assert (r["blocks"], r["kv_tokens"]) == (blocks, blocks * 16)
    v1_blocks = version.startswith(("0.9", "0.10"))  # 0.9+: blocks / blocks per request
    printed = blocks / -(-context // 16) if v1_blocks else blocks * 16 / context
    assert r["max_concurrency"] == pytest.approx(printed)


def test_vllm_0_10_hybrid_allocator_groups_sliding_and_full_layers():
    """Gemma 2 9B: 21 full + 21 sliding layers -> 2 groups of 21; tokens = blocks // 2 x 16; a request needs
    cdiv(8192, 16) blocks in the full group plus cdiv(min(4095 + 8192, 8192), 16) + 1 in the sliding one."""
    layout = kv_layout(42, 8, 256, 16, sliding_window=4096, sliding_layers=21)
    rules, _ = vllm_rules("0.10.1")
    page = 16 * 2 * 8 * 256 * 2
    blocks, tokens, conc = vllm_kv(rules, layout, 20 * GIB, 16, 8192, 8192)
    assert blocks == 20 * GIB // page // 21 and tokens == blocks // 2 * 16
    assert conc == pytest.approx(blocks / (512 + 513))
    old, _ = vllm_rules("0.8.5")  # before: every layer allocated as full attention
    assert vllm_kv(old, kv_layout(42, 8, 256, 16), 20 * GIB, 16, 8192, 8192)[1] == 20 * GIB // page // 42 * 16


def test_tensor_parallel_splits_kv_heads_and_adds_nccl_buffers():
    p = profile_from_dict({"name": "s", "kind": "inference", "params": "70B", "precision": "bf16", "context": 8192,
                           "architecture": {**LLAMA31_8B, "layers": 80, "heads": 64, "hidden_size": 8192,
                                            "intermediate_size": 28672},
                           "parallel": {"tensor": 4}, "runtime": {"name": "vllm", "version": "0.8.5"}},
                          attributable=False)  # fmt: skip
    e = estimate(p, gpu_memory_bytes=80 * GIB)
    assert e.kv_bytes_per_token == 80 * 2 * 2 * 128 * 2
    assert e.runtime_report["non_torch_bytes"] == DEFAULTS.vllm_non_torch_bytes + DEFAULTS.vllm_cuda_context_bytes + \
        DEFAULTS.nccl_bytes


@pytest.mark.parametrize(("context", "printed_blocks", "printed_conc"), [(20000, 1952, 1.56), (29000, 1478, 0.82)])
def test_within_10_percent_of_what_vllm_printed(context, printed_blocks, printed_conc):
    """vllm-project/vllm#10517: V0 0.6.4, RTX 3090 (total_gpu_memory=23.58GiB), Llama-3.1-8B-Instruct BF16."""
    e = estimate(serve("0.6.4", context), gpu_memory_bytes=int(23.58 * GIB))
    r = e.runtime_report
    assert abs(r["blocks"] - printed_blocks) / printed_blocks < 0.10
    assert abs(r["max_concurrency"] - printed_conc) / printed_conc < 0.10


def test_kv_tokens_from_available_memory_match_vllm_v1_for_an_fp8_moe_at_tp4():
    """vllm-project/vllm#21348: Qwen3-235B-A22B-FP8, TP 4, H100: 'Available KV cache memory: 8.11 GiB',
    'GPU KV cache size: 178,880 tokens' (94 layers, 4 KV heads of 128 -> 1 per GPU, BF16 cache)."""
    rules, _ = vllm_rules("0.9.2")
    _, tokens, _ = vllm_kv(rules, kv_layout(94, 4, 128, 16, tensor=4), int(8.11 * GIB), 16, 40960, 8192)
    assert abs(tokens - 178_880) / 178_880 < 0.02


def test_sglang_counts_weights_and_kv_inside_mem_fraction_static():
    p = profile_from_dict({"name": "s", "kind": "inference", "params": 8_030_261_248, "precision": "bf16",
                           "architecture": LLAMA31_8B, "context": 8192,
                           "runtime": {"name": "sglang", "version": "0.4.6"}}, attributable=False)  # fmt: skip
    r = estimate(p, gpu_memory_bytes=80 * GIB).runtime_report
    non_torch = DEFAULTS.vllm_non_torch_bytes + DEFAULTS.vllm_cuda_context_bytes
    available = int((80 * GIB - non_torch) * 0.88) - 8_030_261_248 * 2  # SGLang 0.4.6 model_runner.py:816-819
    assert r["kv_tokens"] == available // (32 * 2 * 8 * 128 * 2) and r["activation_bytes"] == 0


def test_unknown_runtime_version_is_an_error_naming_the_field():
    with pytest.raises(SizingError) as exc:
        estimate(serve("latest", 8192), gpu_memory_bytes=80 * GIB)
    assert "runtime.version" in str(exc.value) and exc.value.missing == ("runtime.version",)


def test_docs_sizing_table_is_the_generated_one():
    """docs/sizing.md's model/GPU table is what `make sizing-table` writes (regenerate after a model change)."""
    from headroom.workload.sizing_table import BEGIN, END, render

    from conftest import ROOT

    text = (ROOT / "docs" / "sizing.md").read_text(encoding="utf-8")
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert block == "\n" + render()


@pytest.mark.parametrize(("parallel", "memory_gib", "fraction"),
                         [(1, 80, 0.88), (2, 80, 0.87), (4, 40, 0.85), (8, 80, 0.81), (16, 80, 0.79), (8, 94, 0.88)])
def test_sglang_default_mem_fraction_static(parallel, memory_gib, fraction):
    from headroom.workload.serving_memory import sglang_mem_fraction

    assert sglang_mem_fraction(parallel, memory_gib * GIB, "0.4.6") == fraction


@pytest.mark.parametrize(("parallel", "memory_mib", "fraction"),
                         [(1, 81559, round((81559 - 10 * 1024) / 81559, 3)), (4, 81559, round((81559 - 11.5 * 1024) / 81559, 3)),
                          (1, 24564, round((24564 - 2.9 * 1024) / 24564, 3)), (8, 143771, round((143771 - 16 * 1024) / 143771, 3))])
def test_sglang_from_0_4_8_reserves_memory_per_gpu(parallel, memory_mib, fraction):
    """0.4.9 server_args.py:280-319: (memory - reserved) / memory, reserved by memory class and tp x pp."""
    from headroom.workload.serving_memory import sglang_chunked_prefill, sglang_mem_fraction

    assert sglang_mem_fraction(parallel, memory_mib * MIB, "0.4.9") == fraction
    assert sglang_mem_fraction(parallel, memory_mib * MIB) == fraction  # no version: the newest rule
    assert sglang_mem_fraction(parallel, memory_mib * MIB, "0.4.7") != fraction
    assert sglang_chunked_prefill(memory_mib * MIB, "0.4.9") == (2048 if memory_mib < 35 * 1024 else 8192)


def test_sglang_default_on_a_large_gpu_leaves_18_gib():
    from headroom.workload.serving_memory import sglang_mem_fraction

    frac = sglang_mem_fraction(1, 140 * GIB, "0.4.6")  # min(0.88 + 48 GiB x 0.12 / 140 GiB, (140 - 18) / 140)
    assert frac == pytest.approx(min(0.88 + 48 * 0.12 / 140, 122 / 140))


@pytest.mark.parametrize(("version", "wiggle", "block", "logit_bytes", "prefill", "of_total"),
                         [("1.0.0", 1.0, 16, 4, 4096, False), ("2.0.4", 0.95, 16, 4, 4145, False),
                          ("2.2.0", 0.95, 16, 4, 4145, False), ("2.3.1", 0.95, 1, 4, 4145, False),
                          ("2.4.0", 0.90, 1, 2, 4145, False), ("3.0.0", 0.95, 1, 2, 4096, True),
                          ("3.1.0", 0.93, 1, 2, 4096, True), ("3.3.5", 0.90, 1, 2, 4096, True)])  # fmt: skip
def test_tgi_gives_free_memory_after_the_warmup_prefill_to_blocks(version, wiggle, block, logit_bytes, prefill,
                                                                   of_total):  # fmt: skip
    """TGI's warmup (flash_causal_lm.py): a prefill of max_batch_prefill_tokens (the launcher's default: 4096 in
    1.x, max_input_tokens + 50 = 4145 in 2.x, the 4096 fallback in 3.x) that returns logprobs of every prompt
    token, then, before 3.0, free memory x TGI_WIGGLE_ROOM // block bytes + the warm-up's own blocks; from 3.0
    (free - (1 - TGI_WIGGLE_ROOM) x total) // block bytes + those blocks (v3.0.0 flash_causal_lm.py:1584)."""
    p = profile_from_dict({"name": "s", "kind": "inference", "params": 8_030_261_248, "precision": "bf16",
                           "architecture": LLAMA31_8B, "context": 8192,
                           "runtime": {"name": "tgi", "version": version}}, attributable=False)  # fmt: skip
    r = estimate(p, gpu_memory_bytes=80 * GIB).runtime_report
    forward = inference_activation_bytes(prefill, 0, 4096, 14336)
    # 16-bit logits of the prompt tokens and, before 2.4, torch.log_softmax(out, -1)'s copy (v2.2.0
    # flash_causal_lm.py:1504; in place from v2.4.0 :2046)
    logits = prefill * 128256 * logit_bytes
    non_torch = DEFAULTS.vllm_non_torch_bytes + DEFAULTS.vllm_cuda_context_bytes
    block_bytes = 32 * block * 2 * 8 * 128 * 2
    held = -(-prefill // block)
    free = 80 * GIB - 8_030_261_248 * 2 - max(forward, logits) - non_torch - held * block_bytes
    kv = free - (1 - wiggle) * 80 * GIB if of_total else free * wiggle
    assert r["activation_bytes"] == max(forward, logits)
    assert r["blocks"] == int(kv // block_bytes) + held and r["kv_tokens"] == r["blocks"] * block


@pytest.mark.parametrize(("fixture", "version", "context"), [("gemma-3-27b", "0.10.1", 32768), ("gemma-2-9b", "0.10.1", 8192),
                                                            ("mistral-7b-v0.1", "0.10.1", 16384), ("llama-3-8b", "0.10.1", 8200),
                                                            ("llama-3-8b", "0.8.5", 8192), ("qwen2.5-7b", "0.6.3", 4096),
                                                            ("gemma-2-9b", "0.32.0", 8192),
                                                            ("nemotron-nano-9b-v2", "0.32.0", 32768),
                                                            ("qwen3-next-80b-a3b", "0.32.0", 32768),
                                                            ("jamba-v0.1", "0.32.0", 16384)])  # fmt: skip
def test_fits_agrees_with_the_concurrency_vllm_reports(fixture, version, context):
    """The declared load is sized the way vLLM sets KV blocks aside per request (sliding-window blocks,
    hybrid groups), so the largest concurrency that fits is the whole part of what vLLM prints."""
    from headroom.workload.modelconfig import read_model_config

    from conftest import ROOT

    fields = read_model_config(ROOT / "tests" / "fixtures" / "hf" / fixture).fields
    fields |= {"precision": "bf16", "compute_precision": "bf16"}
    big = fixture in ("qwen3-next-80b-a3b", "jamba-v0.1")  # 80B / 52B: tensor parallel 4 on H100s
    p = profile_from_dict({"name": "s", "kind": "inference", "context": context, **fields,
                           "parallel": {"tensor": 4 if big else 1}, **({"params": "80B"} if big else {}),
                           "runtime": {"name": "vllm", "version": version}}, attributable=False)  # fmt: skip
    e = estimate(p, gpu_memory_bytes=int(79.19 * GIB))
    assert e.max_concurrency > 1
    assert e.max_concurrency_at_max_context == int(e.max_concurrency)


def test_a100s_keep_the_small_serve_defaults_from_0_9():
    """vllm 0.10.1 engine/arg_utils.py:1638: `device_memory >= 70 GiB and "a100" not in device_name`."""
    a100 = estimate(serve("0.10.1", 8192), gpu_memory_bytes=int(79.15 * GIB), gpu_name="NVIDIA A100-SXM4-80GB")
    h100 = estimate(serve("0.10.1", 8192), gpu_memory_bytes=int(79.15 * GIB), gpu_name="NVIDIA H100 80GB HBM3")
    old = estimate(serve("0.8.5", 8192), gpu_memory_bytes=int(79.15 * GIB), gpu_name="NVIDIA A100-SXM4-80GB")
    per_logit = DEFAULTS.sampler_bytes_per_logit
    assert a100.runtime_report["activation_bytes"] == max(inference_activation_bytes(2048, 0, 4096, 14336),
                                                          256 * 128256 * per_logit)  # fmt: skip
    assert h100.runtime_report["activation_bytes"] == old.runtime_report["activation_bytes"] == max(
        inference_activation_bytes(8192, 0, 4096, 14336), 1024 * 128256 * per_logit)


def test_a_newer_vllm_than_the_ones_read_is_sized_with_a_note():
    e = estimate(serve("0.33.0", 8192), gpu_memory_bytes=80 * GIB)
    assert any("newer than the versions read (up to 0.32)" in n for n in e.notes)
    e = estimate(serve("0.21.0", 8192), gpu_memory_bytes=80 * GIB)  # released between two versions read
    assert any("0.21.0 was not read (between 0.19 and 0.32): 0.17-0.19 (V1) accounting assumed" in n for n in e.notes)


def test_vllm_0_7_aligns_mla_entries_and_keeps_the_absorbed_matrices():
    """0.7.3 worker/cache_engine.py:84-95 (entries rounded up to 256 bytes) and attention/backends/mla/utils.py
    (W_Q x W_UK, W_UV x W_O, W_QR kept in 16 bits); 0.8's V1 does neither."""
    arch = {"layers": 27, "heads": 16, "kv_heads": 16, "hidden_size": 2048, "intermediate_size": 10944,
            "vocab_size": 102400, "kv_lora_rank": 512, "qk_rope_head_dim": 64}  # fmt: skip

    def weights_and_kv(version):
        p = profile_from_dict({"name": "s", "kind": "inference", "params": "15.7B", "precision": "bf16",
                               "architecture": arch, "context": 4096,
                               "runtime": {"name": "vllm", "version": version}}, attributable=False)  # fmt: skip
        e = estimate(p, gpu_memory_bytes=80 * GIB)
        return e.component("weights"), e.kv_bytes_per_token

    absorbed = 27 * (2048 * 16 * 512 + 16 * 512 * 2048 + 2048 * 16 * 64) * 2
    w07, kv07 = weights_and_kv("0.7.3")
    w08, kv08 = weights_and_kv("0.8.5")
    assert w07 - w08 == absorbed
    assert (kv07, kv08) == (27 * 1280, 27 * 576 * 2)


def test_tgi_warmup_logits_at_tensor_parallel_add_the_local_shard():
    """TensorParallelHead.forward: each rank computes its vocabulary shard, then all-gathers the whole logits into
    a transposed view (`world_out.T`), so the "in place" log-softmax of 2.4 still holds three copies: the view,
    PyTorch's contiguous copy of its input (SoftMax.cu host_softmax) and the contiguous temporary it writes for a
    non-contiguous `out=` (SoftMax.cpp log_softmax_out); the shard stays in the caching allocator."""
    p = profile_from_dict({"name": "s", "kind": "inference", "params": "70B", "precision": "bf16", "context": 8192,
                           "architecture": {**LLAMA31_8B, "layers": 80, "heads": 64, "hidden_size": 8192,
                                            "intermediate_size": 28672},
                           "parallel": {"tensor": 2}, "runtime": {"name": "tgi", "version": "2.4.0",
                                                                  "max_num_batched_tokens": 10049}},
                          attributable=False)  # fmt: skip
    r = estimate(p, gpu_memory_bytes=80 * GIB, gpus=2).runtime_report
    logits = 10049 * 128256 * 2
    assert r["activation_bytes"] == 3 * logits + logits // 2


NEMOTRON_STATE = 12288 // 1 * 3 * 2 + 128 * 80 * 128 * 4  # conv (10240 + 2 x 8 x 128, 3) bf16 + SSM fp32


def test_vllm_0_32_pages_a_mamba2_hybrid_with_its_attention_layers():
    """NVIDIA Nemotron Nano 9B v2 (4 attention + 27 Mamba2 layers of 56) as vLLM 0.32 pages it: the attention block
    is the smallest multiple of 16 whose page (4 096 B per token) holds a 5 316 608-byte Mamba state: 16 x
    cdiv(5316608, 16 x 4096) = 1312 tokens (platforms/interface.py:1079-1095); layers grouped by 4 (1 attention
    group, 27 Mamba layers padded to 7 groups: kv_cache_utils.py:1466-1500); blocks = memory // (4 x page); a
    request at 32 768 tokens takes cdiv(32768, 1312) = 25 attention blocks and 3 per Mamba group (align mode,
    Mamba2's prefill checkpoint); the printed tokens are int(concurrency x max_model_len) (kv_cache_utils.py:2300)."""
    from headroom.workload.modelconfig import read_model_config
    from headroom.workload.serving_memory import StateGroup, vllm_state_block_size

    from conftest import ROOT

    fields = read_model_config(ROOT / "tests" / "fixtures" / "hf" / "nemotron-nano-9b-v2").fields
    p = profile_from_dict({"name": "n", "kind": "inference", "context": 32768, "params": "8.9B", **fields,
                           "runtime": {"name": "vllm", "version": "0.32.0"}}, attributable=False)  # fmt: skip
    e = estimate(p, gpu_memory_bytes=int(79.19 * GIB))
    r = e.runtime_report
    assert r["block_size"] == 1312
    page = 1312 * 2 * 8 * 128 * 2
    assert r["blocks"] == r["kv_available_bytes"] // (4 * page)
    assert r["max_concurrency"] == pytest.approx(r["blocks"] / (25 + 7 * 3))
    assert r["kv_tokens"] == int(r["blocks"] / 46 * 32768)
    layout = kv_layout(56, 8, 128, 16, kv_layers=4)
    hybrid = type(layout)(layout.groups, "", StateGroup(27, NEMOTRON_STATE, 3))
    assert vllm_state_block_size(hybrid, 16) == 1312
    assert vllm_kv(vllm_rules("0.32.0")[0], hybrid, 10 * GIB, 1312, 32768, 8192)[0] == 10 * GIB // (4 * page)


def test_vllm_0_32_prints_sliding_window_capacity_from_the_concurrency():
    """Gemma 2 9B: 0.19 printed blocks // groups x 16; 0.32 prints int(max concurrency x max_model_len)
    (v1/core/kv_cache_utils.py:2300-2309), larger when sliding-window layers hold only their window."""
    layout = kv_layout(42, 8, 256, 16, sliding_window=4096, sliding_layers=21)
    old = vllm_kv(vllm_rules("0.19.0")[0], layout, 20 * GIB, 16, 8192, 8192)
    new = vllm_kv(vllm_rules("0.32.0")[0], layout, 20 * GIB, 16, 8192, 8192)
    assert old[0] == new[0] and old[2] == new[2]
    assert old[1] == old[0] // 2 * 16 and new[1] == int(new[0] / (512 + 513) * 8192)


def test_hybrid_models_are_refused_with_the_missing_piece_named():
    from headroom.workload.modelconfig import read_model_config

    from conftest import ROOT

    fields = read_model_config(ROOT / "tests" / "fixtures" / "hf" / "qwen3-next-80b-a3b").fields
    base = {"name": "q", "kind": "inference", "context": 32768, "params": "80B", **fields,
            "parallel": {"tensor": 4}}  # fmt: skip
    with pytest.raises(SizingError, match=r"vLLM 0.17-0.19 \(V1\): hybrid layout \(attention \+ gated-delta-net"
                                          r" layers\): this version's state pages were not read") as exc:
        estimate(profile_from_dict(base | {"runtime": {"name": "vllm", "version": "0.19.0"}}, attributable=False),
                 gpu_memory_bytes=80 * GIB)  # fmt: skip
    assert exc.value.missing == ("runtime.version",)
    with pytest.raises(SizingError, match=r"hybrid layout .attention . recurrent layers. is not modelled") as exc:
        estimate(profile_from_dict(base | {"runtime": "sglang"}, attributable=False), gpu_memory_bytes=80 * GIB)
    shapeless = base | {"architecture": {k: v for k, v in fields["architecture"].items() if not k.startswith("state")},
                        "runtime": {"name": "vllm", "version": "0.32.0"}}  # fmt: skip
    with pytest.raises(SizingError, match=r"without the state's shape: give architecture\.state_kind") as exc:
        estimate(profile_from_dict(shapeless, attributable=False), gpu_memory_bytes=80 * GIB)
    assert exc.value.missing == ("architecture.state_kind",)
    odd = base | {"parallel": {"tensor": 3}, "architecture": fields["architecture"] | {"heads": 15, "kv_heads": 3}}
    with pytest.raises(SizingError, match=r"parallel\.tensor: 3 does not divide the recurrent state's state_conv_dim"):
        estimate(profile_from_dict(odd, attributable=False), gpu_memory_bytes=80 * GIB)


def test_online_fp8_keeps_embeddings_lm_head_and_norms_in_16_bits():
    """vLLM --quantization fp8 on a BF16 checkpoint (0.32 quantization/fp8.py:177-208): LinearBase layers in FP8;
    the embedding, the LM head and the 65 RMSNorm weights of Llama 3.1 8B stay BF16."""
    p = profile_from_dict({"name": "s", "kind": "inference", "params": 8_030_261_248, "precision": "fp8",
                           "compute_precision": "bf16", "architecture": LLAMA31_8B, "context": 8192},
                          attributable=False)  # fmt: skip
    sixteen = 2 * 128256 * 4096 + 65 * 4096
    assert estimate(p, gpu_memory_bytes=80 * GIB).component("weights") == (8_030_261_248 - sixteen) + 2 * sixteen


TINY = {"layers": 2, "heads": 2, "kv_heads": 1, "head_dim": 64, "hidden_size": 128, "intermediate_size": 256,
        "vocab_size": 512}  # fmt: skip


def cpu_serve(context, **runtime):
    return profile_from_dict({"name": "c", "kind": "cpu-inference", "params": 426_624, "precision": "bf16",
                              "architecture": TINY, "context": context,
                              "runtime": {"name": "vllm", "version": "0.32.0", **runtime}}, attributable=False)  # fmt: skip


def test_vllm_cpu_build_cuts_its_kv_cache_memory_into_128_token_blocks():
    """vLLM 0.32 on CPU, 48 MiB (--kv-cache-memory-bytes): pages of 128 tokens x 256 B x 2 layers -> 768 blocks;
    at max_model_len 500 a request takes cdiv(500, 128) = 4, so 192.00x and int(192 x 500) = 96 000 tokens: what
    the real CPU build printed for this model (tests/test_real_vllm_sizing.py)."""
    e = estimate(cpu_serve(500, kv_cache_memory_bytes="48MiB"), gpu_memory_bytes=16 * GIB)
    r = e.runtime_report
    assert (r["block_size"], r["blocks"], r["kv_tokens"]) == (128, 768, 96_000)
    assert r["max_concurrency"] == pytest.approx(192.0) and e.kv_capacity_tokens == 96_000
    assert "CPU KV cache size: 96,000 tokens (768 blocks of 128)" in format_table(e)
    without = estimate(cpu_serve(500), gpu_memory_bytes=16 * GIB)
    assert without.runtime_report is None
    assert any("give runtime.kv_cache_memory_bytes" in n for n in without.notes)


def test_kv_cache_memory_bytes_replaces_the_profiled_budget_on_a_gpu_and_is_a_vllm_setting():
    e = estimate(serve("0.32.0", 8192, kv_cache_memory_bytes=4 * GIB), gpu_memory_bytes=80 * GIB)
    page = 16 * 2 * 8 * 128 * 2
    assert e.runtime_report["blocks"] == 4 * GIB // page // 32
    from headroom.workload.profiles import ProfileErrors

    with pytest.raises(ProfileErrors, match="kv_cache_memory_bytes is a vLLM setting"):
        profile_from_dict({"name": "s", "kind": "inference", "runtime": {"name": "tgi", "kv_cache_memory_bytes": "4GiB"},
                           "gpus": [0]})  # fmt: skip
    with pytest.raises(ProfileErrors, match="kv_cache_memory_bytes"):
        profile_from_dict({"name": "s", "kind": "inference", "runtime": {"name": "vllm", "kv_cache_memory_bytes": "lots"},
                           "gpus": [0]})  # fmt: skip
