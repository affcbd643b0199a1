"""GET /api/batching (+ /measured): contract fields, continuous beats static, seat spans, bounds, caching."""

from __future__ import annotations

import pytest

from inside_llm.api.batching import MAX_RATE, MAX_REQUESTS, MAX_SEATS, WAITING_SHOWN

METRICS = ("throughput_tokens_per_s", "ttft_ms_p50", "ttft_ms_p99", "latency_ms_p50", "latency_ms_p99",
           "seat_utilization")


def by_name(d):
    return {p["name"]: p for p in d["policies"]}


def test_contract_fields_for_both_policies(client):
    r = client.get("/api/batching", params={"rate": 4, "requests": 200, "seats": 16, "workload": "sharegpt", "seed": 0})
    assert r.status_code == 200
    d = r.json()
    assert [p["name"] for p in d["policies"]] == ["static", "continuous"]
    for p in d["policies"]:
        for key in METRICS:
            assert isinstance(p[key], float) and p[key] > 0, key
        assert p["ttft_ms_p50"] <= p["ttft_ms_p99"] and p["latency_ms_p50"] <= p["latency_ms_p99"]
        assert 0 < p["seat_utilization"] <= 1
        assert {"throughput_tokens_per_s", "seat_utilization", "ttft_ms_p50", "latency_ms_p50"} <= set(p["math"])
        assert 0 < len(p["frames"]) <= 150
        f = p["frames"][0]
        assert len(f["seat_request_ids"]) == len(f["seat_num_output_tokens"]) == 16
        assert len(f["waiting_request_ids"]) <= WAITING_SHOWN <= 64


@pytest.mark.parametrize("params", [{}, {"seed": 1}, {"seed": 2}, {"rate": 8, "seats": 32},
                                    {"workload": "alpaca", "rate": 16, "seats": 32}])
def test_continuous_beats_static(client, params):
    pols = by_name(client.get("/api/batching", params=params).json())
    s, c = pols["static"], pols["continuous"]
    assert c["throughput_tokens_per_s"] > 1.2 * s["throughput_tokens_per_s"]
    assert c["ttft_ms_p50"] < s["ttft_ms_p50"] / 10 and c["latency_ms_p50"] < s["latency_ms_p50"]
    assert c["seat_utilization"] > s["seat_utilization"]


def test_default_rate_keeps_the_engine_ahead_of_arrivals_with_continuous_batching(client):
    """The default load is one the cost-modelled GPU can serve: first tokens within a step or two."""
    d = client.get("/api/batching").json()
    c = by_name(d)["continuous"]
    assert c["ttft_ms_p99"] < 10 * d["engine"]["prefill_step_ms_2048_tokens"]
    assert max(f["num_waiting"] for f in c["frames"]) <= 2


def test_engine_is_the_cost_model_and_says_so(client):
    e = client.get("/api/batching").json()["engine"]
    assert e["model_id"] == "llama-3.1-8b" and e["gpu_id"] == "h100-sxm" and e["tp"] == 1
    assert 5 < e["decode_step_ms_batch_1"] < 15, "8B BF16 decode on one H100: ~16 GB of weights at ~2.5 TB/s"
    assert e["decode_step_ms_batch_1"] < e["decode_step_ms_all_seats"] < 2 * e["decode_step_ms_batch_1"]
    assert 100_000 < e["kv_capacity_tokens"] < 600_000
    assert e["math"]["kv_capacity_tokens"]["inputs"]


def test_seat_spans_fill_lanes_without_overlap(client):
    d = client.get("/api/batching").json()
    for p in d["policies"]:
        spans = p["seat_spans"]
        assert sorted(s["request_id"] for s in spans) == list(range(200))  # nobody preempted at this load
        for seat in range(16):
            mine = sorted((s for s in spans if s["seat"] == seat), key=lambda s: s["start_s"])
            assert all(a["end_s"] <= b["start_s"] + 1e-9 for a, b in zip(mine, mine[1:]))
        assert all(s["start_s"] < s["first_token_s"] <= s["end_s"] <= d["horizon_s"] for s in spans)
    static = sorted(by_name(d)["static"]["seat_spans"], key=lambda s: s["start_s"])
    starts = sorted({s["start_s"] for s in static})
    assert len(starts) < len(static) / 3, "static seats a whole batch at one instant"


def test_same_url_same_bytes_and_etag(client):
    a = client.get("/api/batching")
    b = client.get("/api/batching?rate=4&requests=200&seats=16&workload=sharegpt&seed=0")
    assert a.content == b.content and a.headers["etag"] == b.headers["etag"]
    assert len(a.content) < 200_000, len(a.content)
    assert client.get("/api/batching", headers={"if-none-match": a.headers["etag"]}).status_code == 304


@pytest.mark.parametrize("name,value,bound", [("requests", MAX_REQUESTS + 1, f"{MAX_REQUESTS}"),
                                              ("seats", MAX_SEATS + 1, f"{MAX_SEATS}"), ("seats", 0, "1"),
                                              ("rate", MAX_RATE + 1, f"{MAX_RATE:g}"), ("rate", 0, "0")])
def test_out_of_bounds_gets_422_naming_field_and_bound(client, name, value, bound):
    r = client.get("/api/batching", params={name: value})
    assert r.status_code == 422
    err = r.json()["detail"][0]
    assert err["loc"][-1] == name and bound in err["msg"]


def test_bad_workload_and_unknown_names_get_422(client):
    r = client.get("/api/batching", params={"workload": "lmsys"})
    assert r.status_code == 422
    err = r.json()["detail"][0]
    assert err["loc"][-1] == "workload" and "sharegpt" in err["msg"]
    assert client.get("/api/batching", params={"step_time": 1}).status_code == 422


def test_measured_on_this_cpu_once(client):
    r = client.get("/api/batching/measured")
    assert r.status_code == 200
    d = r.json()
    assert d["measured_on"] == "this server's CPU" and d["cpu"]["logical_cores"] >= 1
    if not d["available"]:
        pytest.skip(d["reason"])  # the demo weights are not installed in this checkout
    assert [b["batch_size"] for b in d["batches"]] == [1, 8, 32]
    assert all(b["tokens_per_s"] > 0 and b["ms_per_step"] > 0 for b in d["batches"])
    assert d["model"]["num_params"] > 0
    assert client.get("/api/batching/measured").content == r.content, "measured once per process, then cached"
