"""Dials estimate (chapter 11): defaults, guide figures, validation, memory verdicts, show-the-math."""

import json

import pytest

from inside_llm.sim.core.errors import SimError
from inside_llm.sim.cost import serving
from inside_llm.sim.cost.costmodel import EngineConfig
from inside_llm.sim.cost.serving import ServingParams, estimate
from inside_llm.sim.hardware import catalog
from inside_llm.sim.hardware.hardware import gpu_from_fields
from inside_llm.sim.model.models import from_hf_config

HEADLINES = [
    "ttft_ms",
    "tpot_ms",
    "tokens_per_s_per_user",
    "tokens_per_s_total",
    "cost_per_million_tokens_usd",
    "weights_gb",
    "kv_cache_gb",
    "spare_gb",
    "max_batch",
    "mfu",
    "bandwidth_utilization",
]


def test_defaults_are_the_guides_server():
    p = ServingParams()
    assert (p.model, p.gpu, p.gpus, p.tp, p.pp, p.precision, p.price_per_gpu_hour) == (
        "llama-3.1-70b",
        "h100-sxm",
        8,
        8,
        1,
        "bf16",
        3.0,
    )
    e = estimate()
    assert e.memory.fits and e.bound == "memory" and e.replicas == 1
    assert e.memory.weights_gb * 8 == pytest.approx(141, abs=1)  # ~140 GB for 70B at FP16
    assert 5 < e.tpot_ms < 30 and e.ttft_ms > e.tpot_ms
    assert 0 < e.mfu < 0.5 and 0 < e.bandwidth_utilization < 1


def test_throughput_and_cost_formulas():
    p = ServingParams(batch=32, prompt_tokens=512, output_tokens=128)
    e = estimate(p)
    assert e.e2e_latency_ms == pytest.approx(e.ttft_ms + 127 * e.tpot_ms)
    assert e.tokens_per_s_total == pytest.approx(32 * 128 / (e.e2e_latency_ms / 1e3))
    assert e.tokens_per_s_per_user == pytest.approx(1000 / e.tpot_ms)
    assert e.cost_per_million_tokens_usd == pytest.approx(8 * 3.0 / 3600 / e.tokens_per_s_total * 1e6)


def test_replicas_multiply_throughput():
    one = estimate(ServingParams(model="llama-3.1-8b", gpus=8, tp=8))
    eight = estimate(ServingParams(model="llama-3.1-8b", gpus=8, tp=1))
    assert eight.replicas == 8 and eight.tokens_per_s_total > one.tokens_per_s_total


def test_bigger_batch_more_throughput_slower_users():
    small, big = estimate(ServingParams(batch=1)), estimate(ServingParams(batch=128))
    assert big.tokens_per_s_total > 20 * small.tokens_per_s_total
    assert big.tokens_per_s_per_user < small.tokens_per_s_per_user
    assert big.cost_per_million_tokens_usd < small.cost_per_million_tokens_usd / 20


def test_does_not_fit_says_by_how_much():
    e = estimate(ServingParams(gpus=1, tp=1))
    assert not e.memory.fits and e.memory.shortfall_gb > 60 and e.max_batch == 0
    big = estimate(ServingParams(batch=4096, prompt_tokens=8192, output_tokens=8192))
    assert not big.memory.fits and big.memory.shortfall_gb == pytest.approx(-big.memory.spare_gb)


def test_pipeline_parallel_estimate():
    e = estimate(ServingParams(tp=4, pp=2, batch=16))
    assert e.memory.fits and e.tpot_ms > estimate(ServingParams(batch=16)).tpot_ms


def test_precisions_speed_up_decode():
    bf16 = estimate(ServingParams(batch=1))
    fp8 = estimate(ServingParams(batch=1, precision="fp8", kv_precision="fp8"))
    int4 = estimate(ServingParams(batch=1, precision="int4"))
    assert int4.tpot_ms < fp8.tpot_ms < bf16.tpot_ms


@pytest.mark.parametrize(
    "kw,field",
    [
        ({"tp": 3}, "tp"),
        ({"gpus": 0}, "gpus"),
        ({"batch": 0}, "batch"),
        ({"batch": 5000}, "batch"),
        ({"prompt_tokens": 0}, "prompt_tokens"),
        ({"output_tokens": 0}, "output_tokens"),
        ({"prompt_tokens": 130000, "output_tokens": 2000}, "prompt_tokens"),
        ({"price_per_gpu_hour": -1}, "price_per_gpu_hour"),
        ({"precision": "fp4"}, "precision"),
        ({"kv_precision": "fp16"}, "kv_precision"),
        ({"model": "nope"}, "model"),
        ({"gpu": "nope"}, "gpu"),
    ],
)
def test_bad_inputs_name_the_field(kw, field):
    with pytest.raises(SimError) as refused:
        estimate(ServingParams(**kw))
    assert refused.value.field == field and refused.value.message.endswith(".")


def test_custom_model_and_gpu():
    m = from_hf_config(
        {
            "hidden_size": 4096,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "intermediate_size": 14336,
            "vocab_size": 128256,
            "max_position_embeddings": 8192,
        },
        model_id="my-8b",
    )
    g = gpu_from_fields(
        {
            "bf16_dense_tflops": 500,
            "hbm_capacity_gb": 96,
            "hbm_bandwidth_tb_s": 4.0,
            "interconnect_bandwidth_gb_s": 900,
        },
        gpu_id="my-gpu",
    )
    e = estimate(ServingParams(model=m, gpu=g, gpus=1, tp=1))
    assert e.memory.fits and e.math["spare_gb"].inputs[0].source == "user input"
    assert serving.params_dict(ServingParams(model=m, gpu=g))["model"] == "my-8b"
    with pytest.raises(ValueError, match="hbm_bandwidth_tb_s"):
        gpu_from_fields({"bf16_dense_tflops": 500, "hbm_capacity_gb": 96, "interconnect_bandwidth_gb_s": 1})
    with pytest.raises(ValueError, match="no field warp_speed"):
        gpu_from_fields({"warp_speed": 9})


def test_every_headline_has_its_math():
    d = estimate().to_dict()
    json.dumps(d)
    for key in HEADLINES:
        m = d["math"][key]
        assert m["formula"] and m["unit"] and m["inputs"], key
    srcs = [i.get("source", "") for i in d["math"]["tpot_ms"]["inputs"]]
    assert any("3.35TB/s" in s for s in srcs)
    assert any("$3 per GPU-hour" in a for a in d["math"]["cost_per_million_tokens_usd"]["assumptions"])


def test_guide_hardware_figures_come_from_the_catalog():
    g = catalog.gpu("h100-sxm")
    assert (g.hbm_capacity_gb, g.hbm_bandwidth_tb_s, g.interconnect_bandwidth_gb_s) == (80, 3.35, 900)
    assert estimate().memory.capacity_gb == 80


@pytest.mark.parametrize(
    "model,gpus,tp,pp,prec,P,O",
    [
        ("llama-3.1-70b", 8, 1, 8, "fp8", 8000, 128),
        ("llama-3.1-70b", 8, 2, 4, "fp8", 8000, 128),
        ("llama-3.1-405b", 16, 8, 2, "fp8", 2048, 256),
    ],
)
def test_pipeline_throughput_never_falls_as_the_batch_grows(model, gpus, tp, pp, prec, P, O):
    """Issue 16 item 4: uneven micro-batches, no padding to ceil(batch / pp)."""
    prev = 0.0
    for batch in range(1, 33):
        e = serving.estimate(
            serving.ServingParams(
                model=model,
                gpus=gpus,
                tp=tp,
                pp=pp,
                precision=prec,
                kv_precision="fp8",
                batch=batch,
                prompt_tokens=P,
                output_tokens=O,
            )
        )
        assert e.tokens_per_s_static >= prev * (1 - 1e-9), f"batch {batch}: {e.tokens_per_s_static} < {prev}"
        prev = e.tokens_per_s_static


def test_pipeline_stages_hold_the_embedding_first_and_the_lm_head_last():
    m = catalog.model("llama-3.1-70b")
    cfg = EngineConfig(m, catalog.gpu("h100-sxm"), tp=1, pp=2)
    first, last = cfg.shard.stage_weight_bytes
    vocab_table = m.vocab_size * m.hidden_size * 2.0
    # 40 layers each; the first adds the embedding, the last the lm_head (+ the final norm)
    assert last - first == pytest.approx(m.hidden_size * 2.0, rel=1e-6)
    one = EngineConfig(m, catalog.gpu("h100-sxm"), tp=1, pp=1).shard.weight_bytes
    assert first + last == pytest.approx(one + 0.0, rel=1e-9)
    assert first > one / 2 - vocab_table  # not 1/pp of each table


def test_weight_assumption_follows_the_precision():
    """Issue 16 item 6: the weight note names the chosen format; FP8 on A100 says it falls back."""
    for prec, needle in [("int4", "128 weights"), ("fp8", "per-tensor"), ("bf16", "BF16"), ("nvfp4", "16")]:
        e = serving.estimate(serving.ServingParams(gpu="b200", precision=prec))
        assert needle in " ".join(e.math["weights_gb"].assumptions)
    a100 = serving.estimate(serving.ServingParams(gpu="a100-80gb", precision="fp8"))
    assert "no FP8 tensor cores" in " ".join(a100.math["ttft_ms"].assumptions)


def test_tensor_parallel_beyond_a_node_is_slower_than_at_nvlink_speed():
    """Issue 16 item 1: the same tp=64 on one imaginary 64-GPU NVLink domain vs eight 8-GPU HGX nodes."""
    import dataclasses

    from inside_llm.sim.cost.costmodel import allreduce_s, step_time

    h100 = catalog.gpu("h100-sxm")
    flat = dataclasses.replace(h100, node_gpus=64)
    m = catalog.model("llama-3.1-70b")
    nodes, one = EngineConfig(m, h100, tp=64), EngineConfig(m, flat, tp=64)
    assert allreduce_s(nodes, 8192 * 2 * 16) > 2 * allreduce_s(one, 8192 * 2 * 16)
    assert (
        step_time(nodes, num_decode_seqs=16, decode_context_tokens_total=16 * 1152).seconds
        > 1.2 * step_time(one, num_decode_seqs=16, decode_context_tokens_total=16 * 1152).seconds
    )
    # a pipeline hand-off between nodes goes over the NIC: tp=8 x pp=2 crosses once, tp=4 x pp=2 never
    assert serving.cross_node_sends(EngineConfig(m, h100, tp=8, pp=2)) == 1
    assert serving.cross_node_sends(EngineConfig(m, h100, tp=4, pp=2)) == 0


def test_engine_profile_prices_the_figures_and_is_named_in_the_math():
    """auto on NVIDIA is TensorRT-LLM (the base fit: unchanged figures); MI300X gets vLLM on ROCm."""
    base = serving.estimate(serving.ServingParams())
    assert serving.estimate(serving.ServingParams(engine="tensorrt-llm")).tpot_ms == base.tpot_ms
    vllm = serving.estimate(serving.ServingParams(engine="vllm"))
    assert vllm.tpot_ms > base.tpot_ms  # vLLM's per-step overhead (VLLM-BK rows)
    assumptions = " ".join(base.math["tpot_ms"].assumptions)
    assert "engine profile tensorrt-llm: TensorRT-LLM on CUDA (NVIDIA)" in assumptions
    amd = serving.estimate(serving.ServingParams(gpu="mi300x"))
    assert "engine profile vllm-rocm: vLLM on ROCm (AMD)" in " ".join(amd.math["tpot_ms"].assumptions)


@pytest.mark.parametrize("gpu,engine,words", [("mi300x", "tensorrt-llm", "TensorRT-LLM on AMD")])
def test_an_engine_without_published_rows_is_refused_in_words(gpu, engine, words):
    with pytest.raises(SimError) as e:
        serving.estimate(serving.ServingParams(gpu=gpu, engine=engine))
    assert e.value.field == "engine" and words in str(e.value)


def test_fine_grained_moe_term_is_named_for_gpt_oss():
    est = serving.estimate(serving.ServingParams(model="gpt-oss-120b", precision="mxfp4", tp=1, gpus=1))
    text = " ".join(est.math["tpot_ms"].assumptions)
    assert "fine-grained MoE (128 experts 2,880 wide)" in text
