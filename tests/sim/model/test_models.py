"""Architecture formulas: parameter counts vs published totals, KV bytes, MoE, config parsing."""

import pytest

from inside_llm.sim.hardware import catalog
from inside_llm.sim.model.models import (
    ModelSpec,
    expected_experts_touched,
    from_hf_config,
    kv_bytes_per_token,
    param_counts,
    prefill_attention_keys,
)

LLAMA_31_70B_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "rope_theta": 500000.0,
}


@pytest.mark.parametrize("mid", [k for k, m in catalog.models().items() if m.published_params_b])
def test_params_match_published_totals(mid):
    m = catalog.model(mid)
    # Llama 4 Scout's published 109B includes its vision encoder, which the text model here leaves out
    rel = 0.015 if mid == "llama-4-scout" else 0.005
    assert param_counts(m).total / 1e9 == pytest.approx(m.published_params_b, rel=rel)


def test_2025_architectures_change_the_kv_cache():
    """MLA caches a 576-value latent per layer; gpt-oss's sliding-window layers do not grow with context."""
    v3, oss = catalog.model("deepseek-v3"), catalog.model("gpt-oss-120b")
    assert kv_bytes_per_token(v3, 2.0) == 61 * (512 + 64) * 2  # 70,272 B vs 4 MB for 128 plain heads
    assert kv_bytes_per_token(oss, 2.0) == 18 * 2 * 8 * 64 * 2  # only the 18 full-attention layers grow
    pc = param_counts(v3)
    assert pc.always_on_mlp_per_layer > 0 and pc.moe_layer_fraction == pytest.approx(58 / 61)


def test_headline_counts():
    assert param_counts(catalog.model("llama-3.1-70b")).total / 1e9 == pytest.approx(70.55, abs=0.01)
    assert param_counts(catalog.model("llama-3.1-8b")).total / 1e9 == pytest.approx(8.03, abs=0.01)
    assert param_counts(catalog.model("llama-3.1-405b")).total / 1e9 == pytest.approx(405.85, abs=0.05)
    assert param_counts(catalog.model("qwen2.5-72b")).total / 1e9 == pytest.approx(72.71, abs=0.01)


def test_mixtral_total_and_active():
    pc = param_counts(catalog.model("mixtral-8x7b"))
    assert pc.total / 1e9 == pytest.approx(46.7, rel=0.005)
    # Mistral's 12.9 B counts the input embedding (a lookup) as active; the model counts what is multiplied
    assert (pc.active + pc.embedding) / 1e9 == pytest.approx(12.9, rel=0.005)
    assert pc.router_per_layer == 4096 * 8


def test_qwen_biases_counted():
    q = catalog.model("qwen2.5-72b")
    unbiased = ModelSpec(**{**q.__dict__, "attention_bias": False})
    assert param_counts(q).total - param_counts(unbiased).total == 80 * (8192 + 2 * 1024)


def test_tied_embeddings_count_once():
    m = catalog.model("llama-3.1-8b")
    tied = ModelSpec(**{**m.__dict__, "tie_word_embeddings": True})
    assert param_counts(m).total - param_counts(tied).total == 128256 * 4096


def test_kv_bytes_per_token_gqa():
    m = catalog.model("llama-3.1-70b")
    assert kv_bytes_per_token(m, 2) == 2 * 80 * 8 * 128 * 2 == 327_680  # 320 KiB per token in BF16
    mha = catalog.model("llama-2-7b")
    assert kv_bytes_per_token(mha, 2) == 2 * 32 * 32 * 128 * 2  # no GQA: 8x more per layer-head


def test_head_dim_not_hidden_over_heads():
    cfg = {
        "hidden_size": 3072,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 256,
        "num_hidden_layers": 28,
        "intermediate_size": 24576,
        "vocab_size": 256000,
    }
    m = from_hf_config(cfg)
    assert m.q_dim == 4096 != m.hidden_size and m.kv_dim == 2048
    assert param_counts(m).attention_per_layer == 3072 * 4096 * 2 + 2 * 3072 * 2048


def test_from_hf_config_matches_catalog():
    m = from_hf_config(LLAMA_31_70B_CONFIG, model_id="x")
    assert param_counts(m).total == param_counts(catalog.model("llama-3.1-70b")).total
    assert m.head_dim == 128 and not m.is_moe


def test_from_hf_config_qwen_and_moe():
    qwen = from_hf_config({**LLAMA_31_70B_CONFIG, "architectures": ["Qwen2ForCausalLM"]})
    assert qwen.attention_bias
    moe = from_hf_config({**LLAMA_31_70B_CONFIG, "num_local_experts": 8, "num_experts_per_tok": 2})
    assert moe.is_moe and moe.num_experts_per_tok == 2


@pytest.mark.parametrize(
    "missing", ["hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"]
)
def test_from_hf_config_names_missing_field(missing):
    cfg = {k: v for k, v in LLAMA_31_70B_CONFIG.items() if k != missing}
    with pytest.raises(ValueError, match=missing):
        from_hf_config(cfg)


def test_from_hf_config_rejects_bad_values():
    with pytest.raises(ValueError, match="num_key_value_heads"):
        from_hf_config({**LLAMA_31_70B_CONFIG, "num_key_value_heads": 7})
    with pytest.raises(ValueError, match="hidden_size"):
        from_hf_config({**LLAMA_31_70B_CONFIG, "hidden_size": -1})
    with pytest.raises(ValueError, match="JSON object"):
        from_hf_config([1, 2])


def test_expected_experts_touched():
    m = catalog.model("mixtral-8x7b")
    assert expected_experts_touched(m, 1) == pytest.approx(2.0)
    assert expected_experts_touched(m, 8) == pytest.approx(8 * (1 - 0.75**8))
    assert expected_experts_touched(m, 1000) == pytest.approx(8.0)
    assert expected_experts_touched(catalog.model("llama-3.1-8b"), 100) == 1.0


def test_prefill_attention_keys_causal():
    assert prefill_attention_keys([4]) == 10
    assert prefill_attention_keys([2, 3]) == 3 + 6


def test_hf_configs_of_2025_models_keep_the_features_that_change_the_cost():
    """A pasted DeepSeek-V3 or gpt-oss config.json gives the catalog's parameter count and KV size."""
    v3 = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "hidden_size": 7168,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "intermediate_size": 18432,
        "vocab_size": 129280,
        "max_position_embeddings": 163840,
        "n_routed_experts": 256,
        "num_experts_per_tok": 8,
        "n_shared_experts": 1,
        "moe_intermediate_size": 2048,
        "first_k_dense_replace": 3,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
    }
    m = from_hf_config(v3)
    assert param_counts(m).total == param_counts(catalog.model("deepseek-v3")).total
    assert kv_bytes_per_token(m, 2.0) == 61 * 576 * 2
    oss = {
        "hidden_size": 2880,
        "num_hidden_layers": 36,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 2880,
        "vocab_size": 201088,
        "num_local_experts": 128,
        "num_experts_per_tok": 4,
        "sliding_window": 128,
        "attention_bias": True,
        "layer_types": ["sliding_attention", "full_attention"] * 18,
    }
    assert kv_bytes_per_token(from_hf_config(oss), 2.0) == kv_bytes_per_token(catalog.model("gpt-oss-120b"), 2.0)


def test_gpt_oss_active_params_leave_out_the_embedding():
    """OpenAI's model card: 5.13 B active per token; the input embedding is a lookup, not a multiply."""
    m = catalog.model("gpt-oss-120b")
    pc = param_counts(m)
    assert pc.active / 1e9 == pytest.approx(5.13, abs=0.005)
    assert (pc.active + pc.embedding) / 1e9 == pytest.approx(5.71, abs=0.01)  # what counting it gave


def test_published_active_counts_follow_each_publishers_convention():
    for m in catalog.models().values():
        if m.published_active_params_b:
            pc = param_counts(m)
            got = pc.active + (pc.embedding if m.published_active_includes_embedding else 0)
            assert got / 1e9 == pytest.approx(m.published_active_params_b, rel=0.025), m.id


def test_kv_formula_names_latent_attention():
    """DeepSeek's KV derivation shows MLA's latent + rotary key, not grouped-query K and V heads."""
    from inside_llm.sim.model.models import kv_formula

    text, notes = kv_formula(catalog.model("deepseek-v3"))
    assert "kv_lora_rank 512" in text and "rotary key 64" in text and "kv_heads" not in text
    assert "latent" in notes[0]
    assert "kv_heads/tp" in kv_formula(catalog.model("llama-3.1-70b"))[0]
