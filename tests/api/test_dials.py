"""GET /api/dials: equals the simulation, memory adds up, no-fit verdicts, custom model/GPU, 422s, caching."""

from __future__ import annotations

import re

import pytest
from apikit import assert_same_bytes_and_etag, get_json

from inside_llm.api.dials import DialsParams
from inside_llm.sim.core.result import as_json
from inside_llm.sim.cost import serving
from inside_llm.sim.cost.costmodel import memory_per_gpu
from inside_llm.sim.hardware import catalog
from inside_llm.sim.hardware.hardware import gpu_from_fields
from inside_llm.sim.model.models import ModelSpec

HEADLINES = (
    "ttft_ms",
    "tpot_ms",
    "e2e_latency_ms",
    "tokens_per_s_per_user",
    "tokens_per_s_total",
    "cost_per_million_tokens_usd",
    "max_batch",
    "bound",
    "prefill_bound",
    "mfu",
    "bandwidth_utilization",
    "replicas",
    "memory",
    "math",
)


def _get(client, **q):
    return get_json(client, "/api/dials", **q)


def test_defaults_are_the_guides_server(client):
    d = _get(client)
    assert d["params"] == {
        "model": "llama-3.1-70b",
        "gpu": "h100-sxm",
        "gpus": 8,
        "tp": 8,
        "pp": 1,
        "precision": "bf16",
        "kv_precision": "bf16",
        "batch": 16,
        "prompt_tokens": 1024,
        "output_tokens": 256,
        "price_per_gpu_hour": 3.0,
        "throughput_mode": "static",
        "engine": "auto",
    }
    assert d["model"]["name"] == "Llama 3.1 70B" and d["gpu"]["name"].startswith("NVIDIA H100 SXM")
    assert d["memory"]["fits"] and d["bound"] == "memory"


@pytest.mark.parametrize(
    "q",
    [
        {},
        {
            "model": "mixtral-8x7b",
            "gpu": "h200",
            "gpus": 4,
            "tp": 2,
            "precision": "fp8",
            "kv_precision": "fp8",
            "batch": 64,
            "prompt_tokens": 2048,
            "output_tokens": 512,
            "price_per_gpu_hour": 4.5,
        },
        {"model": "llama-3.1-405b", "gpu": "b200", "gpus": 16, "tp": 8, "pp": 2, "precision": "int4", "batch": 3},
        {"model": "llama-3.1-8b", "gpu": "a100-80gb", "gpus": 8, "tp": 1, "precision": "fp8", "batch": 1},
    ],
)
def test_response_equals_the_simulation(client, q):
    d = _get(client, **q)
    est = serving.estimate(serving.ServingParams(**q)).to_dict()
    for k in HEADLINES:
        assert d[k] == est[k], k
    assert d["params"] == serving.params_dict(serving.ServingParams(**q))


def test_every_headline_carries_its_math(client):
    d = _get(client)
    assert set(d["math"]) == set(serving.estimate().math)  # the simulation's eleven (tests/sim/cost/test_serving.py)
    for k, m in d["math"].items():
        assert m["formula"] and m["inputs"], k
    sources = [i.get("source") for i in d["math"]["ttft_ms"]["inputs"]]
    assert any(s and "whitepaper" in s for s in sources), "GPU figures cite their datasheet"


@pytest.mark.parametrize(
    "q", [{}, {"batch": 512, "prompt_tokens": 8192}, {"model": "llama-3.1-405b", "gpus": 1, "tp": 1}]
)
def test_memory_fields_add_up_to_capacity(client, q):
    mem = _get(client, **q)["memory"]
    parts = mem["weights_gb"] + mem["kv_cache_gb"] + mem["activations_gb"] + mem["reserve_gb"] + mem["spare_gb"]
    assert parts == pytest.approx(mem["capacity_gb"], abs=0.005)
    assert mem["fits"] == (mem["spare_gb"] >= 0)
    assert mem["shortfall_gb"] == pytest.approx(max(0.0, -mem["spare_gb"]), abs=0.001)


def test_405b_on_one_gpu_does_not_fit_and_says_by_how_much(client):
    d = _get(client, model="llama-3.1-405b", gpus=1, tp=1)
    mem = d["memory"]
    assert mem["fits"] is False and mem["shortfall_gb"] > 700  # ~810 GB of BF16 weights vs 80 GB
    assert mem["weights_gb"] > 10 * mem["capacity_gb"]
    assert d["max_batch"] == 0
    # issue 16 item 2: no latency, rate or price is presented for a server that cannot run
    assert d["fits"] is False
    for k in ("ttft_ms", "tpot_ms", "tokens_per_s_total", "tokens_per_s_per_user", "cost_per_million_tokens_usd"):
        assert d[k] is None
        assert d["hypothetical"][k] > 0
    assert "does not fit" in d["hypothetical"]["reason"] and "GB short" in d["hypothetical"]["reason"]


def test_a_setup_that_fits_has_no_hypothetical_block(client):
    d = _get(client)
    assert d["fits"] is True and d["hypothetical"] is None and d["ttft_ms"] > 0


def test_tensor_parallel_across_nodes_pays_for_the_network(client):
    """Issue 16 item 1: tp=64 spans 8 HGX nodes; its all-reduces cross 400 Gb/s NICs, not NVLink."""
    d64 = _get(client, gpus=64, tp=64)
    assert d64["nodes"]["spans_nodes"] and d64["nodes"]["tensor_nodes"] == 8 and d64["nodes"]["nodes"] == 8
    assert "8 nodes" in d64["nodes"]["text"] and "400 Gb/s" in d64["nodes"]["text"]
    comm = {i["name"]: i["value"] for i in d64["math"]["tpot_ms"]["inputs"]}["comm_ms"]
    assert comm > 2.5  # 160 hierarchical all-reduces over the NICs
    d8 = _get(client)
    assert not d8["nodes"]["spans_nodes"] and d8["nodes"]["nodes"] == 1
    nvl = _get(client, gpu="gb200", gpus=64, tp=64)
    assert not nvl["nodes"]["spans_nodes"] and nvl["nodes"]["gpus_per_node"] == 72


def test_throughput_mode_says_which_batching_is_shown(client):
    """Issue 16 item 7: the continuous-batching estimate is offered and the response names the one shown."""
    st, co = _get(client, batch=64), _get(client, batch=64, throughput_mode="continuous")
    assert st["throughput_mode"] == "static" and co["throughput_mode"] == "continuous"
    assert st["tokens_per_s_total"] == pytest.approx(st["tokens_per_s_static"])
    assert co["tokens_per_s_total"] == pytest.approx(co["tokens_per_s_continuous"])
    assert co["tokens_per_s_continuous"] == pytest.approx(st["tokens_per_s_continuous"])
    # with long prompts static batches idle every seat during each prefill; continuous does not
    lp, lc = (
        _get(client, batch=64, prompt_tokens=8192, output_tokens=128, throughput_mode=m)
        for m in ("static", "continuous")
    )
    assert lc["tokens_per_s_total"] > lp["tokens_per_s_total"]
    assert "continuous" in co["math"]["tokens_per_s_total"]["assumptions"][0]


def test_bigger_batch_more_total_less_per_user_cheaper(client):
    one, many = _get(client, batch=1), _get(client, batch=128)
    assert many["tokens_per_s_total"] > 20 * one["tokens_per_s_total"]
    assert many["tokens_per_s_per_user"] < one["tokens_per_s_per_user"]
    assert many["cost_per_million_tokens_usd"] < one["cost_per_million_tokens_usd"] / 20


def test_tpot_curve_passes_through_the_estimate(client):
    d = _get(client, batch=32, prompt_tokens=2048, output_tokens=512)
    c = d["tpot_curve"]
    xs, ys = c["context_tokens"], c["tpot_ms"]
    assert xs == sorted(xs) and xs[0] == 16 and xs[-1] == 131072 and len(xs) == len(ys) == len(c["fits"])
    assert all(b >= a for a, b in zip(ys, ys[1:])), "decode gets slower as the context grows"
    assert c["mean_context_tokens"] == 2048 + 256
    # the decode step is linear in context: interpolate between neighbours to read tpot at the mean
    i = next(i for i, x in enumerate(xs) if x >= c["mean_context_tokens"])
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    at_mean = y0 + (y1 - y0) * (c["mean_context_tokens"] - x0) / (x1 - x0)
    assert at_mean == pytest.approx(d["tpot_ms"], rel=1e-6)
    assert c["fits"][0] and not c["fits"][-1], "32 chats of 128k tokens do not fit 8 x 80 GB"


def test_custom_model_via_query_equals_the_same_spec(client):
    shape = dict(
        hidden_size=4096,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=128256,
        max_position_embeddings=131072,
    )
    d = _get(client, model="custom", tp=1, gpus=1, **shape)
    spec = ModelSpec(id="custom", name="Custom model", **shape)
    est = serving.estimate(serving.ServingParams(model=spec, tp=1, gpus=1)).to_dict()
    assert d["ttft_ms"] == est["ttft_ms"] and d["memory"] == est["memory"]
    same_as_catalog = serving.estimate(serving.ServingParams(model="llama-3.1-8b", tp=1, gpus=1))
    assert d["tpot_ms"] == pytest.approx(same_as_catalog.tpot_ms)
    assert d["params"]["model"] == "custom" and d["model"]["params_b"] == pytest.approx(8.03, abs=0.01)


def test_catalog_entries_give_their_fields_to_start_a_custom_one(client):
    d = _get(client, model="mixtral-8x7b", gpu="a100-80gb", prompt_tokens=512, output_tokens=128)
    custom = _get(
        client, **{**d["model"]["dials_params"], **d["gpu"]["dials_params"], "prompt_tokens": 512, "output_tokens": 128}
    )
    assert custom["tpot_ms"] == pytest.approx(d["tpot_ms"]) and custom["memory"] == d["memory"]
    assert d["gpu"]["dials_params"]["fp8_dense_tflops"] == 0, "A100: no FP8 tensor cores"


def test_custom_fields_default_to_the_70b_and_are_ignored_for_catalog_models(client):
    assert _get(client, model="custom")["tpot_ms"] == pytest.approx(_get(client)["tpot_ms"])
    assert _get(client, hidden_size=1024)["ttft_ms"] == _get(client)["ttft_ms"]


def test_custom_gpu_via_query(client):
    fields = dict(
        bf16_dense_tflops=165.2,
        fp8_dense_tflops=330.3,
        int8_dense_tops=660.6,
        hbm_capacity_gb=24,
        hbm_bandwidth_tb_s=1.008,
        interconnect_bandwidth_gb_s=64,
    )
    d = _get(client, gpu="custom", model="llama-3.1-8b", gpus=2, tp=2, **fields)
    g = gpu_from_fields({**fields, "name": "Custom GPU"}, gpu_id="custom")
    est = serving.estimate(serving.ServingParams(model="llama-3.1-8b", gpu=g, gpus=2, tp=2)).to_dict()
    assert d["tpot_ms"] == est["tpot_ms"] and d["memory"] == est["memory"]
    assert d["gpu"]["name"] == "Custom GPU" and d["gpu"]["hbm_capacity_gb"] == 24.0
    assert d["gpu"]["dials_params"] == {"gpu": "custom", **{k: float(v) for k, v in fields.items()}}
    src = {i["name"]: i.get("source") for i in d["math"]["tpot_ms"]["inputs"]}
    assert src["custom.hbm_bandwidth_tb_s"] == "user input"


def test_custom_gpu_without_fp8_falls_back_to_bf16_math(client):
    base = dict(gpu="custom", precision="fp8", batch=256, prompt_tokens=4096)
    with_fp8, without = _get(client, **base), _get(client, **base, fp8_dense_tflops=0)
    assert without["ttft_ms"] > with_fp8["ttft_ms"] * 1.2  # GEMMs at 989 x 0.62 instead of 1979 x 0.45


def _detail(client, **q):
    r = client.get("/api/dials", params=q)
    assert r.status_code == 422, r.text
    return r.json()["detail"]


def test_tp_times_pp_not_dividing_gpus_names_all_three(client):
    err = _detail(client, gpus=8, tp=4, pp=4)[0]
    assert err["loc"] == ["query", "tp"] and err["ctx"]["fields"] == ["tp", "pp", "gpus"]
    assert err["msg"] == "Pipeline stages × tensor parallel must divide the GPU count (8); 4 × 4 does not."


def test_context_over_the_models_window_names_the_lengths(client):
    err = _detail(client, model="llama-2-7b", prompt_tokens=4000, output_tokens=256)[0]
    assert {"prompt_tokens", "output_tokens"} <= set(err["ctx"]["fields"]) and "4,096" in err["msg"]


def test_tp_must_split_the_heads(client):
    err = _detail(client, model="llama-3.1-70b", gpus=3, tp=3)[0]
    assert err["loc"] == ["query", "tp"] and "num_attention_heads" in err["msg"]


@pytest.mark.parametrize(
    "q, field",
    [
        ({"model": "custom", "num_key_value_heads": 3}, "num_key_value_heads"),
        ({"model": "custom", "num_experts_per_tok": 4}, "num_experts_per_tok"),
        ({"model": "custom", "hidden_size": 0}, "hidden_size"),
        ({"gpu": "custom", "hbm_capacity_gb": 0}, "hbm_capacity_gb"),
        ({"gpu": "custom", "hbm_bandwidth_tb_s": -1}, "hbm_bandwidth_tb_s"),
        ({"gpu": "custom", "interconnect_bandwidth_gb_s": 0}, "interconnect_bandwidth_gb_s"),
        ({"batch": 5000}, "batch"),
        ({"prompt_tokens": 0}, "prompt_tokens"),
        ({"price_per_gpu_hour": -1}, "price_per_gpu_hour"),
        ({"model": "llama-3.1-8b", "gpus": 64, "tp": 1, "pp": 64}, "pp"),
        ({"precision": "fp4"}, "precision"),
        ({"kv_precision": "fp16"}, "kv_precision"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_bad_input_gets_422_naming_the_field(client, q, field):
    err = _detail(client, **q)[0]
    assert err["loc"][-1] == field


def test_unknown_ids_list_the_catalog(client):
    msg = _detail(client, model="gpt-5")[0]["msg"]
    assert all(m in msg for m in ("llama-3.1-70b", "mixtral-8x7b", "custom"))
    msg = _detail(client, gpu="tpu-v5")[0]["msg"]
    assert all(g in msg for g in ("h100-sxm", "mi300x", "l40s", "custom"))


def test_every_catalog_id_is_accepted(client):
    for m in catalog.models():
        if not m.startswith("demo"):  # the tiny demo models have 4 heads and 256 tokens of context
            _get(client, model=m, prompt_tokens=512, output_tokens=128)
    for g in catalog.gpus():
        _get(client, gpu=g)


def test_memory_matches_the_cost_model(client):
    d = _get(client, batch=100, prompt_tokens=4096, output_tokens=1024)
    cfg, _ = serving.resolve(serving.ServingParams(batch=100, prompt_tokens=4096, output_tokens=1024))
    assert d["memory"] == as_json(memory_per_gpu(cfg, 100, 5120))


def test_same_url_same_bytes_and_etag(client):
    assert_same_bytes_and_etag(client, "/api/dials?batch=64&gpu=h200")


def test_openapi_documents_every_field_with_bounds(client):
    op = client.get("/openapi.json").json()["paths"]["/api/dials"]["get"]
    params = {p["name"]: p for p in op["parameters"]}
    assert set(params) == set(DialsParams.model_fields)
    for name, param in params.items():
        assert param.get("description"), name
    for name in ("batch", "prompt_tokens", "hidden_size", "hbm_bandwidth_tb_s"):
        assert "maximum" in params[name]["schema"], name


def test_fact_reads_as_english():
    """One chat, a rate of one token/s and an hours-long first token read as such (not '1 tokens/s', '18,194,462 ms')."""
    from inside_llm.api.dials import DialsParams, facts

    f = facts(DialsParams())
    assert f["ttft"].endswith(" ms") and f["per_user_rate"].endswith("tokens/s")
    assert facts(DialsParams(batch=1))["batch_chats"] == "1 chat"
    assert facts(DialsParams(batch=1024))["batch_chats"] == "1,024 chats"


def test_engine_dial_selects_a_profile_and_refuses_unmeasured_ones(client):
    """auto = the best published engine per vendor; vLLM on NVIDIA costs more per step; TensorRT-LLM has no
    published rows on AMD: a 422 in words."""
    base, vllm = _get(client), _get(client, engine="vllm")
    assert vllm["tpot_ms"] > base["tpot_ms"]
    assert any("engine profile vllm-cuda" in a for a in vllm["math"]["tpot_ms"]["assumptions"])
    r = client.get("/api/dials", params={"engine": "tensorrt-llm", "gpu": "mi300x"})
    assert r.status_code == 422 and "engine" in r.text and "TensorRT-LLM on AMD" in r.text
    assert any(
        "engine profile sglang-cuda" in a for a in _get(client, engine="sglang")["math"]["tpot_ms"]["assumptions"]
    )
    assert base["engine_profile"] == "TensorRT-LLM on CUDA (NVIDIA)"
    amd = _get(client, gpu="mi300x")
    assert amd["engine_profile"] == "vLLM on ROCm (AMD)"
    assert any("vLLM on ROCm (AMD)" in a for a in amd["math"]["tpot_ms"]["assumptions"])


def test_a_long_first_token_reads_in_minutes_and_the_overhead_names_its_source():
    """Issue 28 red pen: '18,194,462 ms' reads as minutes or hours; the 3 ms per step says where it comes from."""
    from inside_llm.api.dials import DialsParams, facts

    f = facts(DialsParams(batch=1024, prompt_tokens=8192))
    assert re.fullmatch(r"\d+\.\d min", f["ttft"]) and re.fullmatch(r"\d+\.\d tokens/s", f["per_user_rate"])
    notes = " ".join(serving.estimate(serving.ServingParams()).math["tpot_ms"].assumptions)
    assert "80 layers x 25 µs + 1 ms per step" in notes and "NIM 1.8" in notes
