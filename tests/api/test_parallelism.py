"""GET /api/parallelism: the contract's fields equal the simulation, 422s name the field and bound, caching."""

from __future__ import annotations

import pytest
from apikit import assert_refused, assert_same_bytes_and_etag, get_json

from inside_llm.sim.cost.parallelism import ParallelParams, parallelism

CONTRACT = (
    "weights_gb",
    "kv_cache_gb",
    "fits",
    "allreduce_bytes_per_layer",
    "bubble_fraction",
    "ttft_ms",
    "tokens_per_s_per_user",
)


def _get(client, **q):
    return get_json(client, "/api/parallelism", **q)


@pytest.mark.parametrize(
    "q",
    [
        {},
        {"tp": 1, "pp": 8},
        {"tp": 4, "pp": 2, "micro_batches": 4},
        {"tp": 2, "pp": 1, "gpus": 8, "precision": "fp8", "model": "mixtral-8x7b"},
        {"gpus": 1, "tp": 1, "pp": 1},
        {"gpu": "h200", "tp": 2, "pp": 2, "gpus": 4},
    ],
)
def test_numbers_equal_the_simulation(client, q):
    d = _get(client, **q)
    sim = parallelism(ParallelParams(**q))
    for k in CONTRACT:
        assert d[k] == pytest.approx(sim[k]), k
    assert d["prefill"]["tensor"] == pytest.approx(sim["prefill"]["tensor"])
    assert d["decode"]["timeline"]["cells"] == sim["decode"]["timeline"]["cells"]


def test_defaults_split_seventy_b_over_eight_gpus_with_nvlink_facts(client):
    d = _get(client)
    assert (d["model"], d["gpus"], d["tp"], d["pp"], d["precision"]) == ("llama-3.1-70b", 8, 8, 1, "bf16")
    assert d["fits"] and not d["single_gpu"]["fits"] and d["model_weights_gb"] > 80
    assert d["node"]["nvswitch_chips"] == 4 and d["node"]["nvlink_bandwidth_gb_s"] == 900
    assert "nccl-tests" in d["node"]["sources"]["allreduce_bus_bandwidth_gb_s"]
    assert d["allreduce_bytes_per_layer"] > 0 and d["bubble_fraction"] == 0
    assert {"allreduce_ms", "bubble_fraction", "ttft_ms"} <= set(d["math"])


def test_seventy_b_fp16_on_one_gpu_does_not_fit(client):
    d = _get(client, gpus=1, tp=1, pp=1)
    assert d["fits"] is False and d["shortfall_gb"] > 0 and d["weights_gb"] > d["capacity_gb"]


def test_pipeline_bubble_follows_the_formula(client):
    for pp, m in [(2, 1), (2, 8), (8, 8), (8, 16)]:
        d = _get(client, tp=8 // pp, pp=pp, micro_batches=m)
        assert d["bubble_fraction"] == pytest.approx((pp - 1) / (m + pp - 1))


@pytest.mark.parametrize("q", [{"tp": 4, "pp": 4}, {"tp": 8, "pp": 2}, {"gpus": 2, "tp": 4}])
def test_tp_times_pp_must_divide_gpus(client, q):
    r = client.get("/api/parallelism", params=q)
    assert r.status_code == 422
    msg = r.json()["detail"][0]["msg"]
    assert "tensor parallel" in msg and "Pipeline stages" in msg and "GPU count" in msg and "divide" in msg
    assert r.json()["detail"][0]["ctx"]["fields"] == ["tp", "pp", "gpus"]


@pytest.mark.parametrize(
    "field,value,bound",
    [
        ("gpus", 9, "8"),
        ("tp", 16, "8"),
        ("pp", 0, "1"),
        ("micro_batches", 65, "64"),
        ("batch", 257, "256"),
        ("prompt_tokens", 40000, "32,768"),
        ("output_tokens", 0, "1"),
    ],
)
def test_out_of_bounds_names_field_and_bound(client, field, value, bound):
    assert_refused(client, "/api/parallelism", {field: value}, field, bound)


def test_micro_batches_above_batch_and_unknown_names_are_refused(client):
    r = client.get("/api/parallelism", params={"batch": 4, "micro_batches": 8, "pp": 2, "tp": 4})
    err = r.json()["detail"][0]
    assert r.status_code == 422 and err["field"] == "micro_batches" and "Micro-batches" in err["msg"]
    assert client.get("/api/parallelism", params={"gpu": "l40s"}).status_code == 422
    assert client.get("/api/parallelism", params={"bogus": 1}).status_code == 422


def test_deterministic(client):
    """The same bytes and ETag twice (its speed is measured by bench/bench_endpoints.py, not here)."""
    assert_same_bytes_and_etag(client, "/api/parallelism?tp=2&pp=4")
    q = {"tp": 1, "pp": 2, "gpus": 2, "model": "qwen2.5-72b"}
    assert client.get("/api/parallelism", params=q).status_code == 200


def test_layer_weights_as_tensor_parallelism_cuts_them(client):
    ly = client.get("/api/parallelism").json()["layer"]
    # Llama 3.1 70B: Q and O are 8,192 x 8,192, K and V 8,192 x 1,024; the MLP is 3 x 8,192 x 28,672.
    assert ly["attention_params"] == 2 * 8192 * 8192 + 2 * 8192 * 1024
    assert ly["mlp_params"] == 3 * 8192 * 28672
    assert (
        ly["layer_bytes"] == ly["attention_bytes"] + ly["mlp_bytes"] == 2 * (ly["attention_params"] + ly["mlp_params"])
    )
    assert ly["slice_bytes"] == ly["layer_bytes"] / 8
    moe = client.get("/api/parallelism", params={"model": "mixtral-8x7b", "tp": 4, "pp": 2}).json()["layer"]
    assert moe["num_experts"] == 8 and moe["slice_bytes"] == moe["layer_bytes"] / 4


def test_the_split_says_it_stays_in_one_nvlink_domain(client):
    """Issue 16 item 1: chapter 10 says whether a setup spans nodes (one 8-GPU server never does)."""
    d = client.get("/api/parallelism", params={"tp": 4, "pp": 2}).json()["nodes"]
    assert d["nodes"] == 1 and d["spans_nodes"] is False and d["gpus_per_node"] == 8
    assert "one 8-GPU NVLink domain" in d["text"]


@pytest.mark.parametrize(
    ("query", "says"),
    [
        (
            {"tp": 1, "pp": 8},
            "Split into 8 pipeline stages, each GPU of a middle stage holds 17.1 GB of weights, "
            "the first and last stage 19.2 GB (the first also holds the embedding, the last the LM head); "
            "each stage runs 10 of its 80 layers.",
        ),
        (
            {"tp": 8, "pp": 1},
            "Split 8 ways by tensor, each GPU holds 17.6 GB of weights; a pipeline over all "
            "8 GPUs would give each 10 of its 80 layers.",
        ),
        ({"tp": 1, "pp": 1, "gpus": 1}, "Kept whole on one GPU, the GPU holds 141.1 GB of weights;"),
    ],
)
def test_the_fact_gives_each_stage_its_own_weights_and_no_fixed_phrases(client, query, says):
    """Issue 28 red pen: every pipeline stage showed 19.2 GB, 'Split 1 ways', and 'a pipeline over the whole server
    gives each GPU 10 of its 80 layers' whatever was chosen."""
    text = client.get("/api/facts/parallelism", params=query).json()["text"]
    stages = client.get("/api/parallelism", params=query).json()["stages"]
    assert says in text and "1 ways" not in text
    if query["pp"] == 8:
        assert [round(s["weights_gb"], 1) for s in stages] == [19.2] + [17.1] * 6 + [19.2]
