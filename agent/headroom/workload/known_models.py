"""Well-known open models' config.json values, shipped with headroom: `headroom estimate --model ORG/NAME` sizes
them offline when the local Hugging Face cache does not hold them (the cache is read first).

Each entry is the published config.json of the model (its ``source`` URL), reduced to the fields the memory model
reads (headroom.workload.modelconfig); variants that publish the same architecture (base and instruct, a
distilled model on its teacher's shapes) share one config. The parameter count is computed from the architecture
(no safetensors headers here). tests/test_known_models.py checks every entry that has a config.json fixture in
tests/fixtures/hf (``FIXTURES``) against it field by field, and that every entry reads as a valid model config.
"""

from __future__ import annotations

from collections.abc import Mapping

from headroom.jsontypes import JsonDoc, JsonMapping, JsonValue

_HF = "https://huggingface.co/{}/blob/main/config.json"

_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "tie_word_embeddings": False,
          "torch_dtype": "bfloat16", "vocab_size": 128256}  # fmt: skip
LLAMA_3_8B = {**_LLAMA, "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
              "num_key_value_heads": 8, "num_hidden_layers": 32, "max_position_embeddings": 8192}  # fmt: skip
LLAMA_3_1_8B = {**LLAMA_3_8B, "max_position_embeddings": 131072}
LLAMA_3_70B = {**_LLAMA, "hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
               "num_key_value_heads": 8, "num_hidden_layers": 80, "max_position_embeddings": 8192}  # fmt: skip
LLAMA_3_1_70B = {**LLAMA_3_70B, "max_position_embeddings": 131072}
LLAMA_3_1_405B = {**_LLAMA, "hidden_size": 16384, "intermediate_size": 53248, "num_attention_heads": 128,
                  "num_key_value_heads": 8, "num_hidden_layers": 126, "max_position_embeddings": 131072}  # fmt: skip
LLAMA_3_2_1B = {**_LLAMA, "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
                "num_key_value_heads": 8, "head_dim": 64, "num_hidden_layers": 16, "max_position_embeddings": 131072,
                "tie_word_embeddings": True}  # fmt: skip
LLAMA_3_2_3B = {**_LLAMA, "hidden_size": 3072, "intermediate_size": 8192, "num_attention_heads": 24,
                "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 28, "max_position_embeddings": 131072,
                "tie_word_embeddings": True}  # fmt: skip

_QWEN2 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "torch_dtype": "bfloat16",
          "use_sliding_window": False, "max_position_embeddings": 32768}  # fmt: skip
QWEN2_5_0_5B = {**_QWEN2, "hidden_size": 896, "intermediate_size": 4864, "num_attention_heads": 14,
                "num_key_value_heads": 2, "num_hidden_layers": 24, "vocab_size": 151936, "tie_word_embeddings": True}
QWEN2_5_1_5B = {**_QWEN2, "hidden_size": 1536, "intermediate_size": 8960, "num_attention_heads": 12,
                "num_key_value_heads": 2, "num_hidden_layers": 28, "vocab_size": 151936, "tie_word_embeddings": True}
QWEN2_5_3B = {**_QWEN2, "hidden_size": 2048, "intermediate_size": 11008, "num_attention_heads": 16,
              "num_key_value_heads": 2, "num_hidden_layers": 36, "vocab_size": 151936, "tie_word_embeddings": True}
QWEN2_5_7B = {**_QWEN2, "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
              "num_key_value_heads": 4, "num_hidden_layers": 28, "vocab_size": 152064, "tie_word_embeddings": False}
QWEN2_5_14B = {**_QWEN2, "hidden_size": 5120, "intermediate_size": 13824, "num_attention_heads": 40,
               "num_key_value_heads": 8, "num_hidden_layers": 48, "vocab_size": 152064, "tie_word_embeddings": False}
QWEN2_5_32B = {**_QWEN2, "hidden_size": 5120, "intermediate_size": 27648, "num_attention_heads": 40,
               "num_key_value_heads": 8, "num_hidden_layers": 64, "vocab_size": 152064, "tie_word_embeddings": False}
QWEN2_5_72B = {**_QWEN2, "hidden_size": 8192, "intermediate_size": 29568, "num_attention_heads": 64,
               "num_key_value_heads": 8, "num_hidden_layers": 80, "vocab_size": 152064, "tie_word_embeddings": False}
# the R1 distillations keep their teachers' shapes with a 128k context
R1_DISTILL_QWEN_7B = {**QWEN2_5_7B, "max_position_embeddings": 131072}
R1_DISTILL_QWEN_14B = {**QWEN2_5_14B, "max_position_embeddings": 131072}
R1_DISTILL_QWEN_32B = {**QWEN2_5_32B, "max_position_embeddings": 131072}

_QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "torch_dtype": "bfloat16", "head_dim": 128,
          "vocab_size": 151936, "use_sliding_window": False, "max_position_embeddings": 40960}  # fmt: skip
QWEN3_0_6B = {**_QWEN3, "hidden_size": 1024, "intermediate_size": 3072, "num_attention_heads": 16,
              "num_key_value_heads": 8, "num_hidden_layers": 28, "tie_word_embeddings": True}
QWEN3_1_7B = {**_QWEN3, "hidden_size": 2048, "intermediate_size": 6144, "num_attention_heads": 16,
              "num_key_value_heads": 8, "num_hidden_layers": 28, "tie_word_embeddings": True}
QWEN3_4B = {**_QWEN3, "hidden_size": 2560, "intermediate_size": 9728, "num_attention_heads": 32,
            "num_key_value_heads": 8, "num_hidden_layers": 36, "tie_word_embeddings": True}
QWEN3_8B = {**_QWEN3, "hidden_size": 4096, "intermediate_size": 12288, "num_attention_heads": 32,
            "num_key_value_heads": 8, "num_hidden_layers": 36, "tie_word_embeddings": False}
QWEN3_14B = {**_QWEN3, "hidden_size": 5120, "intermediate_size": 17408, "num_attention_heads": 40,
             "num_key_value_heads": 8, "num_hidden_layers": 40, "tie_word_embeddings": False}
QWEN3_32B = {**_QWEN3, "hidden_size": 5120, "intermediate_size": 25600, "num_attention_heads": 64,
             "num_key_value_heads": 8, "num_hidden_layers": 64, "tie_word_embeddings": False}
_QWEN3_MOE = {**_QWEN3, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_experts": 128,
              "num_experts_per_tok": 8, "tie_word_embeddings": False}  # fmt: skip
QWEN3_30B_A3B = {**_QWEN3_MOE, "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
                 "num_attention_heads": 32, "num_key_value_heads": 4, "num_hidden_layers": 48}
QWEN3_235B_A22B = {**_QWEN3_MOE, "hidden_size": 4096, "intermediate_size": 12288, "moe_intermediate_size": 1536,
                   "num_attention_heads": 64, "num_key_value_heads": 4, "num_hidden_layers": 94}
_FP8_BLOCKS = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
QWEN3_235B_A22B_FP8 = {**QWEN3_235B_A22B, "quantization_config": _FP8_BLOCKS}

_MISTRAL = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
            "num_key_value_heads": 8, "num_hidden_layers": 32}  # fmt: skip
MISTRAL_7B_V0_1 = {**_MISTRAL, "vocab_size": 32000, "sliding_window": 4096, "max_position_embeddings": 32768}
MISTRAL_7B_V0_3 = {**_MISTRAL, "vocab_size": 32768, "sliding_window": None, "max_position_embeddings": 32768}
MIXTRAL_8X7B = {**_MISTRAL, "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": 32000,
                "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": None,
                "max_position_embeddings": 32768}  # fmt: skip
MIXTRAL_8X22B = {**MIXTRAL_8X7B, "hidden_size": 6144, "intermediate_size": 16384, "num_attention_heads": 48,
                 "num_hidden_layers": 56, "vocab_size": 32768, "max_position_embeddings": 65536}

_GEMMA2 = {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "vocab_size": 256000,
           "sliding_window": 4096, "torch_dtype": "bfloat16", "max_position_embeddings": 8192}  # fmt: skip
GEMMA_2_2B = {**_GEMMA2, "hidden_size": 2304, "intermediate_size": 9216, "num_attention_heads": 8,
              "num_key_value_heads": 4, "head_dim": 256, "num_hidden_layers": 26, "torch_dtype": "float32"}
GEMMA_2_9B = {**_GEMMA2, "hidden_size": 3584, "intermediate_size": 14336, "num_attention_heads": 16,
              "num_key_value_heads": 8, "head_dim": 256, "num_hidden_layers": 42, "torch_dtype": "float32"}
GEMMA_2_27B = {**_GEMMA2, "hidden_size": 4608, "intermediate_size": 36864, "num_attention_heads": 32,
               "num_key_value_heads": 16, "head_dim": 128, "num_hidden_layers": 46, "torch_dtype": "float32"}
_GEMMA3_TEXT = {"model_type": "gemma3_text", "head_dim": 256, "sliding_window": 1024, "sliding_window_pattern": 6,
                "vocab_size": 262208, "max_position_embeddings": 131072}  # fmt: skip


def _gemma3(**text: JsonValue) -> JsonDoc:
    return {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "torch_dtype": "bfloat16",
            "text_config": {**_GEMMA3_TEXT, **text}}  # fmt: skip


GEMMA_3_4B = _gemma3(hidden_size=2560, intermediate_size=10240, num_attention_heads=8, num_key_value_heads=4,
                     num_hidden_layers=34)
GEMMA_3_12B = _gemma3(hidden_size=3840, intermediate_size=15360, num_attention_heads=16, num_key_value_heads=8,
                      num_hidden_layers=48)
GEMMA_3_27B = _gemma3(hidden_size=5376, intermediate_size=21504, num_attention_heads=32, num_key_value_heads=16,
                      head_dim=128, num_hidden_layers=62)

_DEEPSEEK_MLA = {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
                 "tie_word_embeddings": False, "torch_dtype": "bfloat16"}  # fmt: skip
DEEPSEEK_V2_LITE = {**_DEEPSEEK_MLA, "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
                    "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
                    "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 27, "vocab_size": 102400,
                    "q_lora_rank": None, "n_routed_experts": 64, "num_experts_per_tok": 6, "n_shared_experts": 2,
                    "first_k_dense_replace": 1, "max_position_embeddings": 163840}  # fmt: skip
DEEPSEEK_V3 = {**_DEEPSEEK_MLA, "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
               "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
               "num_attention_heads": 128, "num_key_value_heads": 128, "num_hidden_layers": 61, "vocab_size": 129280,
               "q_lora_rank": 1536, "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1,
               "first_k_dense_replace": 3, "max_position_embeddings": 163840,
               "quantization_config": _FP8_BLOCKS}  # fmt: skip

_PHI3 = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "tie_word_embeddings": False,
         "torch_dtype": "bfloat16"}  # fmt: skip
PHI_3_MINI_4K = {**_PHI3, "hidden_size": 3072, "intermediate_size": 8192, "num_attention_heads": 32,
                 "num_key_value_heads": 32, "num_hidden_layers": 32, "vocab_size": 32064, "max_position_embeddings": 4096}
PHI_3_5_MINI = {**PHI_3_MINI_4K, "max_position_embeddings": 131072}
PHI_3_MEDIUM_4K = {**_PHI3, "hidden_size": 5120, "intermediate_size": 17920, "num_attention_heads": 40,
                   "num_key_value_heads": 10, "num_hidden_layers": 40, "vocab_size": 32064,
                   "max_position_embeddings": 4096}  # fmt: skip
PHI_4 = {**_PHI3, "hidden_size": 5120, "intermediate_size": 17920, "num_attention_heads": 40, "num_key_value_heads": 10,
         "num_hidden_layers": 40, "vocab_size": 100352, "max_position_embeddings": 16384}  # fmt: skip

# Hugging Face name -> its config.json values (the source is that repository's config.json)
MODELS: Mapping[str, JsonMapping] = {
    "meta-llama/Meta-Llama-3-8B": LLAMA_3_8B,
    "meta-llama/Meta-Llama-3-8B-Instruct": LLAMA_3_8B,
    "meta-llama/Meta-Llama-3-70B": LLAMA_3_70B,
    "meta-llama/Meta-Llama-3-70B-Instruct": LLAMA_3_70B,
    "meta-llama/Llama-3.1-8B": LLAMA_3_1_8B,
    "meta-llama/Llama-3.1-8B-Instruct": LLAMA_3_1_8B,
    "meta-llama/Llama-3.1-70B": LLAMA_3_1_70B,
    "meta-llama/Llama-3.1-70B-Instruct": LLAMA_3_1_70B,
    "meta-llama/Llama-3.1-405B": LLAMA_3_1_405B,
    "meta-llama/Llama-3.1-405B-Instruct": LLAMA_3_1_405B,
    "meta-llama/Llama-3.2-1B": LLAMA_3_2_1B,
    "meta-llama/Llama-3.2-1B-Instruct": LLAMA_3_2_1B,
    "meta-llama/Llama-3.2-3B": LLAMA_3_2_3B,
    "meta-llama/Llama-3.2-3B-Instruct": LLAMA_3_2_3B,
    "meta-llama/Llama-3.3-70B-Instruct": LLAMA_3_1_70B,
    "Qwen/Qwen2.5-0.5B-Instruct": QWEN2_5_0_5B,
    "Qwen/Qwen2.5-1.5B-Instruct": QWEN2_5_1_5B,
    "Qwen/Qwen2.5-3B-Instruct": QWEN2_5_3B,
    "Qwen/Qwen2.5-7B-Instruct": QWEN2_5_7B,
    "Qwen/Qwen2.5-14B-Instruct": QWEN2_5_14B,
    "Qwen/Qwen2.5-32B-Instruct": QWEN2_5_32B,
    "Qwen/Qwen2.5-72B-Instruct": QWEN2_5_72B,
    "Qwen/Qwen3-0.6B": QWEN3_0_6B,
    "Qwen/Qwen3-1.7B": QWEN3_1_7B,
    "Qwen/Qwen3-4B": QWEN3_4B,
    "Qwen/Qwen3-8B": QWEN3_8B,
    "Qwen/Qwen3-14B": QWEN3_14B,
    "Qwen/Qwen3-32B": QWEN3_32B,
    "Qwen/Qwen3-30B-A3B": QWEN3_30B_A3B,
    "Qwen/Qwen3-235B-A22B": QWEN3_235B_A22B,
    "Qwen/Qwen3-235B-A22B-FP8": QWEN3_235B_A22B_FP8,
    "mistralai/Mistral-7B-v0.1": MISTRAL_7B_V0_1,
    "mistralai/Mistral-7B-Instruct-v0.3": MISTRAL_7B_V0_3,
    "mistralai/Mixtral-8x7B-v0.1": MIXTRAL_8X7B,
    "mistralai/Mixtral-8x7B-Instruct-v0.1": MIXTRAL_8X7B,
    "mistralai/Mixtral-8x22B-Instruct-v0.1": MIXTRAL_8X22B,
    "google/gemma-2-2b-it": GEMMA_2_2B,
    "google/gemma-2-9b-it": GEMMA_2_9B,
    "google/gemma-2-27b-it": GEMMA_2_27B,
    "google/gemma-3-4b-it": GEMMA_3_4B,
    "google/gemma-3-12b-it": GEMMA_3_12B,
    "google/gemma-3-27b-it": GEMMA_3_27B,
    "deepseek-ai/DeepSeek-V2-Lite-Chat": DEEPSEEK_V2_LITE,
    "deepseek-ai/DeepSeek-V3": DEEPSEEK_V3,
    "deepseek-ai/DeepSeek-R1": DEEPSEEK_V3,
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": LLAMA_3_1_8B,
    "deepseek-ai/DeepSeek-R1-Distill-Llama-70B": LLAMA_3_1_70B,
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": R1_DISTILL_QWEN_7B,
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B": R1_DISTILL_QWEN_14B,
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B": R1_DISTILL_QWEN_32B,
    "microsoft/Phi-3-mini-4k-instruct": PHI_3_MINI_4K,
    "microsoft/Phi-3.5-mini-instruct": PHI_3_5_MINI,
    "microsoft/Phi-3-medium-4k-instruct": PHI_3_MEDIUM_4K,
    "microsoft/phi-4": PHI_4,
}

# the entries tests/test_known_models.py checks against a config.json fixture (tests/fixtures/hf/<fixture>)
FIXTURES: Mapping[str, str] = {
    "meta-llama/Meta-Llama-3-8B-Instruct": "llama-3-8b",
    "meta-llama/Meta-Llama-3-70B-Instruct": "llama-3-70b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b",
    "Qwen/Qwen3-0.6B": "qwen3-0.6b",
    "Qwen/Qwen3-14B": "qwen3-14b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b-fp8",
    "mistralai/Mistral-7B-v0.1": "mistral-7b-v0.1",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
    "google/gemma-2-9b-it": "gemma-2-9b",
    "google/gemma-2-27b-it": "gemma-2-27b",
    "google/gemma-3-27b-it": "gemma-3-27b",
    "deepseek-ai/DeepSeek-V2-Lite-Chat": "deepseek-v2-lite",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B": "deepseek-r1-distill-qwen-14b",
}


def source(name: str) -> str:
    """The URL of the config.json an entry's values come from."""
    return _HF.format(name)


def lookup(name: str) -> tuple[str, JsonMapping] | None:
    """(the table's spelling of ``name``, its config.json values), matching case-insensitively; None if absent."""
    folded = name.strip().casefold()
    for known, config in MODELS.items():
        if known.casefold() == folded:
            return known, config
    return None


def closest(name: str, n: int = 3) -> list[str]:
    """The table's names most like ``name`` (for a "did you mean")."""
    import difflib

    by_fold = {k.casefold(): k for k in MODELS}
    return [by_fold[m] for m in difflib.get_close_matches(name.strip().casefold(), list(by_fold), n=n, cutoff=0.6)]


__all__ = ["FIXTURES", "MODELS", "closest", "lookup", "source"]
