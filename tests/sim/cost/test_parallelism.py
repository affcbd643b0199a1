"""Chapter 10's simulation: memory per GPU, TP all-reduce volume and time, PP bubbles, timing via the cost model."""

from __future__ import annotations

import pytest

from inside_llm.sim.core.errors import SimError
from inside_llm.sim.cost import serving
from inside_llm.sim.cost.costmodel import EngineConfig, allreduce_s
from inside_llm.sim.cost.parallelism import (
    ParallelParams,
    bubble_fraction,
    gpu_map,
    parallelism,
    stage_layers,
    timeline,
)
from inside_llm.sim.hardware import catalog


def test_seventy_b_at_sixteen_bits_does_not_fit_one_gpu_but_fits_eight():
    one = parallelism(ParallelParams(gpus=1, tp=1, pp=1))
    assert one["model_weights_gb"] == pytest.approx(141, abs=1)  # ~140 GB for 70B at FP16
    assert one["weights_gb"] > one["capacity_gb"] == 80
    assert one["fits"] is False and one["single_gpu"]["fits"] is False and one["shortfall_gb"] > 60
    eight = parallelism()
    assert eight["fits"] is True and eight["weights_gb"] == pytest.approx(one["weights_gb"] / 8, rel=1e-3)
    assert eight["single_gpu"]["fits"] is False


def test_tensor_parallel_allreduce_volume_and_time():
    d = parallelism(ParallelParams(tp=8, pp=1, batch=16, prompt_tokens=1024))
    t = d["prefill"]["tensor"]
    m = catalog.model("llama-3.1-70b")
    message = 16 * 1024 * m.hidden_size * 2  # tokens x hidden x BF16
    assert t["message_bytes"] == message
    assert d["allreduce_bytes_per_layer"] == t["allreduce_bytes_per_layer"] == 2 * message
    assert t["sent_bytes_per_gpu_per_layer"] == pytest.approx(2 * 2 * 7 / 8 * message)
    cfg = EngineConfig(m, catalog.gpu("h100-sxm"), 8, 1, "bf16")
    assert t["allreduce_ms"] == pytest.approx(allreduce_s(cfg, message) * 1e3)
    node = catalog.node("h100-sxm")
    assert t["busbw_gb_s"] == pytest.approx(node.allreduce_bus_bandwidth_gb_s)  # 370, sourced
    assert t["line_rate_gb_s"] == node.nvlink_one_direction_gb_s == node.nvlink_bandwidth_gb_s / 2
    assert t["allreduce_ms_line_rate"] == pytest.approx(2 * 7 / 8 * message / 450e9 * 1e3)
    assert t["allreduce_ms"] > t["allreduce_ms_line_rate"]  # achievable is slower than the line rate
    assert t["allreduce_ms_per_step"] == pytest.approx(2 * 80 * t["allreduce_ms"])
    assert d["prefill"]["comm_ms"] == pytest.approx(t["allreduce_ms_per_step"])


def test_no_allreduce_without_tensor_parallelism():
    d = parallelism(ParallelParams(tp=1, pp=8))
    assert d["allreduce_bytes_per_layer"] == 0 and d["prefill"]["tensor"]["allreduce_ms"] == 0


@pytest.mark.parametrize("pp,m", [(1, 1), (2, 1), (2, 4), (4, 4), (8, 8), (8, 16)])
def test_bubble_formula(pp, m):
    assert bubble_fraction(pp, m) == pytest.approx((pp - 1) / (m + pp - 1))
    tl = timeline(pp, m, "prefill")
    assert tl["slots"] == m + pp - 1 and len(tl["cells"]) == pp * m
    assert 1 - len(tl["cells"]) / (pp * tl["slots"]) == pytest.approx(bubble_fraction(pp, m))


def test_decode_timeline_steady_state_idle():
    tl = timeline(8, 4, "decode")
    assert tl["idle_fraction"] == pytest.approx(0.5)
    assert 1 - len(tl["cells"]) / (8 * tl["slots"]) == pytest.approx(0.5)
    assert timeline(4, 8, "decode")["idle_fraction"] == 0


def test_pipeline_stages_hold_ten_of_eighty_layers():
    d = parallelism(ParallelParams(tp=1, pp=8))
    assert [s["num_layers"] for s in d["stages"]] == [10] * 8
    assert d["stages"][0]["first_layer"] == 1 and d["stages"][-1]["last_layer"] == 80
    assert d["bubble_fraction"] == pytest.approx(7 / 15)
    act = d["prefill"]["pipeline"]["activation_bytes_per_send"]
    assert act == 2 * 1024 * 8192 * 2  # one micro-batch of 2 chats x 1,024 tokens
    assert stage_layers(126, 8)[0] == (1, 16) and stage_layers(126, 8)[-1] == (112, 126)


def test_mixed_tp4_pp2_layout():
    d = parallelism(ParallelParams(tp=4, pp=2, micro_batches=4))
    assert [m["stage"] for m in d["gpu_map"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [m["rank"] for m in d["gpu_map"]] == [0, 1, 2, 3] * 2
    assert d["replicas"] == 1 and d["bubble_fraction"] == pytest.approx(1 / 5)
    assert gpu_map(8, 2, 1)[5] == {"gpu": 5, "replica": 2, "stage": 0, "rank": 1}


@pytest.mark.parametrize("tp,pp", [(8, 1), (4, 2), (2, 4), (1, 8), (2, 2)])
def test_timing_equals_the_dials_with_its_micro_batches(tp, pp):
    """With m = min(pp, batch) micro-batches the chapter's TTFT and tokens/s are the dials' own."""
    m = min(pp, 16)
    d = parallelism(ParallelParams(tp=tp, pp=pp, micro_batches=m))
    sp = serving.ServingParams(tp=tp, pp=pp, batch=16)
    e = serving.estimate(sp)
    cfg, _ = serving.resolve(sp)
    assert d["ttft_ms"] == pytest.approx(serving.pipeline_times(cfg, sp, m).ttft_s * 1e3)
    assert d["ttft_ms"] >= e.ttft_ms * (1 - 1e-9)  # the dials may pick more prefill micro-batches
    assert d["tokens_per_s_per_user"] == pytest.approx(e.tokens_per_s_per_user)
    assert d["weights_gb"] == pytest.approx(e.memory.weights_gb, abs=1e-3)
    assert d["kv_cache_gb"] == pytest.approx(e.memory.kv_cache_gb, abs=1e-3)


def test_more_micro_batches_shrink_the_bubble_and_the_first_token_wait():
    few = parallelism(ParallelParams(tp=1, pp=8, micro_batches=1))
    many = parallelism(ParallelParams(tp=1, pp=8, micro_batches=16))
    assert many["bubble_fraction"] < few["bubble_fraction"]
    assert many["ttft_ms"] < few["ttft_ms"]


def test_micro_batches_are_ignored_without_a_pipeline():
    assert parallelism(ParallelParams(tp=8, pp=1, micro_batches=16)) == parallelism(
        ParallelParams(tp=8, pp=1, micro_batches=1)
    )


@pytest.mark.parametrize(
    "kw,words",
    [
        ({"tp": 4, "pp": 4}, ("tp", "pp", "gpus")),
        ({"tp": 3}, ("tp", "pp", "gpus")),
        ({"gpus": 9}, ("gpus", "8")),
        ({"micro_batches": 17}, ("micro_batches", "16")),
        ({"gpu": "l40s"}, ("gpu", "h100-sxm")),
        ({"model": "gpt-9"}, ("model",)),
        ({"precision": "fp4"}, ("precision",)),
        ({"batch": 0}, ("batch",)),
    ],
)
def test_bad_input_names_the_field(kw, words):
    """The refusal names the parameter (SimError.fields) and says the bound in words."""
    with pytest.raises(SimError) as e:
        parallelism(ParallelParams(**kw))
    field, *bound = words
    assert e.value.field == field and all(w in " ".join(e.value.fields) + " " + e.value.message for w in bound)


def test_deterministic_and_json_ready():
    import json

    a, b = parallelism(ParallelParams(tp=2, pp=4)), parallelism(ParallelParams(tp=2, pp=4))
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert {"ttft_ms", "bubble_fraction", "allreduce_bytes_per_layer", "weights_gb"} <= set(a["math"])


def test_only_the_first_and_last_stage_hold_embedding_and_head():
    """Eight pipeline stages of Llama 3.1 70B: the middle six hold ten layers, the ends also a 2.1 GB table."""
    d = parallelism(ParallelParams(tp=1, pp=8, gpus=8, precision="bf16"))
    w = [s["weights_gb"] for s in d["stages"]]
    table = 128256 * 8192 * 2 / 1e9
    assert w[1] == w[6] and all(x == w[1] for x in w[1:7])
    assert w[0] == pytest.approx(w[1] + table, abs=0.01) and w[7] == pytest.approx(w[1] + table, abs=0.01)
    assert d["weights_gb"] == pytest.approx(max(w), abs=0.001)


def test_decode_overhead_and_deepseeks_kv_say_what_they_are():
    d = parallelism(ParallelParams())
    assert d["decode"]["overhead_note"].startswith("80 layers x 25 µs + 1 ms per step")
    assert "prefill setup" in d["prefill"]["overhead_note"]
    ds = parallelism(ParallelParams(model="deepseek-v3", precision="fp8", gpu="h200", tp=8))
    assert "kv_lora_rank 512" in ds["math"]["kv_cache_gb"]["formula"]
