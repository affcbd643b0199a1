"""Cost model: step timing behaves like a roofline, sharding rules, memory per GPU, largest batch."""

import pytest

from inside_llm.sim.cost.costmodel import EngineConfig, max_batch, memory_per_gpu, overhead_text, step_time
from inside_llm.sim.hardware import catalog
from inside_llm.sim.hardware.hardware import kv_bytes_per_value, math_rate, weight_bytes_per_param
from inside_llm.sim.model.models import from_hf_config, param_counts


def cfg(model="llama-3.1-70b", gpu="h100-sxm", **kw):
    return EngineConfig(catalog.model(model), catalog.gpu(gpu), **kw)


def test_precision_bytes():
    assert weight_bytes_per_param("bf16") == 2 and weight_bytes_per_param("fp8") == 1
    assert weight_bytes_per_param("int4") == pytest.approx(4.125 / 8)  # group-128 FP16 scales
    assert kv_bytes_per_value("fp8") == 1 and kv_bytes_per_value("int4") == pytest.approx(4.125 / 8)
    with pytest.raises(ValueError, match="kv_precision"):
        kv_bytes_per_value("fp16x")
    with pytest.raises(ValueError, match="precision"):
        weight_bytes_per_param("fp4")


def test_math_rate_fallbacks():
    assert math_rate(catalog.gpu("h100-sxm"), "fp8").math == "fp8"
    a100 = math_rate(catalog.gpu("a100-80gb"), "fp8")
    assert a100.math == "bf16" and "no FP8" in a100.note
    assert math_rate(catalog.gpu("h100-sxm"), "int4").math == "bf16"  # W4A16


def test_decode_batch1_is_memory_bound_and_prefill_compute_bound():
    c = cfg(tp=8)
    dec = step_time(c, num_decode_seqs=1, decode_context_tokens_total=1024)
    pre = step_time(c, num_prefill_tokens=8192)
    assert dec.bound == "memory" and dec.memory_s > 10 * dec.compute_s
    assert pre.bound == "compute" and pre.compute_s > pre.memory_s


def test_decode_step_reads_the_weights():
    c = cfg(tp=8)
    dec = step_time(c, num_decode_seqs=1, decode_context_tokens_total=1)
    assert dec.hbm_bytes / 1e9 == pytest.approx(2 * (70.55 - 1.05), rel=0.01)  # all but the embedding table
    assert dec.flops / 1e9 == pytest.approx(2 * (70.55 - 1.05), rel=0.01)  # 2 FLOPs per weight


def test_batching_amortises_weights():
    c = cfg(tp=8)
    t1 = step_time(c, num_decode_seqs=1, decode_context_tokens_total=512).seconds
    t64 = step_time(c, num_decode_seqs=64, decode_context_tokens_total=64 * 512).seconds
    assert t64 < 2 * t1  # 64x the tokens for well under 2x the time


def test_attention_cost_grows_with_context():
    c = cfg(tp=8)
    short = step_time(c, num_decode_seqs=32, decode_context_tokens_total=32 * 1000)
    long = step_time(c, num_decode_seqs=32, decode_context_tokens_total=32 * 100_000)
    assert long.attention_s > 50 * short.attention_s and long.seconds > short.seconds
    p1 = step_time(c, num_prefill_tokens=4096)
    p2 = step_time(c, num_prefill_tokens=32768)
    assert p2.flops > 8 * p1.flops  # quadratic attention term on top of linear GEMMs


def test_moe_bytes_grow_with_batch_flops_use_active():
    c = cfg("mixtral-8x7b", tp=2)
    b1 = step_time(c, num_decode_seqs=1, decode_context_tokens_total=1)
    b64 = step_time(c, num_decode_seqs=64, decode_context_tokens_total=64)
    assert b64.hbm_bytes / b1.hbm_bytes > 2.5  # 2 of 8 experts -> nearly all 8
    assert b1.flops / 1e9 == pytest.approx(2 * (12.88 - 0.13), rel=0.02)


def test_tensor_parallel_adds_allreduce_time():
    assert step_time(cfg(tp=1), num_decode_seqs=1).comm_s == 0
    assert step_time(cfg(tp=8), num_decode_seqs=1).comm_s > 0


def test_sharding_validation():
    with pytest.raises(ValueError, match=r"must divide .* 64 query heads"):
        cfg(tp=3)
    with pytest.raises(ValueError, match=r"Pipeline stages \(pp\) must be between"):
        cfg(pp=81)
    c = cfg(tp=16)  # 8 KV heads, 16 GPUs: each GPU keeps a copy of one KV head
    assert c.shard.kv_heads_per_gpu == 1
    odd = from_hf_config(
        {
            "hidden_size": 6144,
            "num_attention_heads": 48,
            "num_key_value_heads": 12,
            "num_hidden_layers": 4,
            "intermediate_size": 16384,
            "vocab_size": 1000,
        }
    )
    with pytest.raises(ValueError, match="12 key/value heads"):
        EngineConfig(odd, catalog.gpu(), tp=8)


def test_70b_fp16_needs_about_140_gb():
    m = memory_per_gpu(cfg(tp=1), 0, 0)
    assert m.weights_gb == pytest.approx(141, abs=1) and not m.fits and m.shortfall_gb > 60
    eight = memory_per_gpu(cfg(tp=8), 16, 2048)
    assert eight.weights_gb == pytest.approx(141 / 8, abs=0.2) and eight.fits


def test_memory_parts_add_up():
    m = memory_per_gpu(cfg(tp=8), 32, 4096)
    total = m.weights_gb + m.kv_cache_gb + m.activations_gb + m.reserve_gb + m.spare_gb
    assert total == pytest.approx(m.capacity_gb)
    assert m.kv_cache_gb == pytest.approx(32 * 4096 * 2 * 80 * 1 * 128 * 2 / 1e9)


def test_quantized_weights_shrink():
    bf16 = memory_per_gpu(cfg(tp=8), 0, 0).weights_gb
    fp8 = memory_per_gpu(cfg(tp=8, precision="fp8"), 0, 0).weights_gb
    int4 = memory_per_gpu(cfg(tp=8, precision="int4"), 0, 0).weights_gb
    assert 0.5 < fp8 / bf16 < 0.53 and 0.27 < int4 / bf16 < 0.3  # embedding + lm_head stay 16-bit


def test_max_batch_is_the_edge():
    c = cfg(tp=8)
    b = max_batch(c, 4096)
    assert memory_per_gpu(c, b, 4096).fits and not memory_per_gpu(c, b + 1, 4096).fits
    assert max_batch(cfg(tp=1), 128) == 0


def test_config_is_hashable_for_callers_that_cache():
    a, b = cfg(tp=8), cfg(tp=8)
    assert a == b and hash(a) == hash(b) and len({a, b, cfg(tp=4)}) == 2


def test_format_bits_follow_their_scale_layouts():
    """Issue 16 item 6: INT8 W8A8 is per-channel (8.0 bits, not 8.125); NVFP4 4.5 bits; MXFP4 4.25."""
    assert weight_bytes_per_param("int8") * 8 == 8.0
    assert weight_bytes_per_param("int4") * 8 == 4.125
    assert weight_bytes_per_param("nvfp4") * 8 == 4.5 and weight_bytes_per_param("mxfp4") * 8 == 4.25
    from inside_llm.sim.hardware import catalog

    assert math_rate(catalog.gpu("b200"), "nvfp4").math == "fp4"
    assert math_rate(catalog.gpu("h100-sxm"), "mxfp4").math == "bf16"  # weight-only before Blackwell


def test_gpt_oss_weighs_its_published_checkpoint():
    """OpenAI's model card: 60.8 GiB = 65.2 GB, MoE weights in MXFP4 and attention, router, embedding and
    lm_head in BF16 (MXFP4 everywhere would give 63.75 GB)."""
    cfg = EngineConfig(catalog.model("gpt-oss-120b"), catalog.gpu("h100-sxm"), precision="mxfp4")
    # 60.8 GiB = 65.28 GB; the ~80 MB of expert biases and attention sinks the model leaves out explain the rest
    assert cfg.shard.weight_bytes / 1e9 == pytest.approx(65.2, abs=0.1)
    assert cfg.shard.dense_wbytes == 2.0 and cfg.shard.wbytes == pytest.approx(4.25 / 8)
    # a decode step reads the 16-bit attention at 2 bytes a weight
    st = step_time(cfg, num_decode_seqs=1, decode_context_tokens_total=1024)
    pc = param_counts(cfg.model)
    assert st.hbm_bytes > pc.layers * pc.attention_per_layer * 2.0


def test_the_overhead_says_where_it_comes_from():
    cfg = EngineConfig(catalog.model("llama-3.1-70b"), catalog.gpu("h100-sxm"), tp=8)
    text = overhead_text(cfg)
    assert text.startswith("80 layers x 25 µs + 1 ms per step")
    st = step_time(cfg, num_decode_seqs=1, decode_context_tokens_total=1024)
    assert st.overhead_s == pytest.approx(80 * 25e-6 + 1e-3)
