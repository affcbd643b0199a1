"""GET /api/batching (+ /measured): contract fields, continuous beats static, seat spans, bounds, caching."""

from __future__ import annotations

import pytest
from apikit import assert_refused, assert_same_bytes_and_etag

from inside_llm.api.batching import MAX_RATE, MAX_REQUESTS, MAX_SEATS

METRICS = (
    "throughput_tokens_per_s",
    "ttft_ms_p50",
    "ttft_ms_p99",
    "latency_ms_p50",
    "latency_ms_p99",
    "seat_utilization",
)


def by_name(d):
    return {p["name"]: p for p in d["policies"]}


def rows(columns):
    return [dict(zip(columns, values)) for values in zip(*columns.values())]


def test_contract_fields_for_both_policies(client):
    r = client.get("/api/batching", params={"rate": 4, "requests": 200, "seats": 16, "workload": "sharegpt", "seed": 0})
    assert r.status_code == 200
    d = r.json()
    assert [p["name"] for p in d["policies"]] == ["static", "continuous"]
    assert len(d["requests"]["arrival_s"]) == len(d["requests"]["num_prompt_tokens"]) == 200
    for p in d["policies"]:
        for key in METRICS:
            assert isinstance(p[key], float) and p[key] > 0, key
        assert p["ttft_ms_p50"] <= p["ttft_ms_p99"] and p["latency_ms_p50"] <= p["latency_ms_p99"]
        assert 0 < p["seat_utilization"] <= 1
        assert {"throughput_tokens_per_s", "seat_utilization", "ttft_ms_p50", "latency_ms_p50"} <= set(p["math"])
        frames = p["frames"]
        assert 0 < len(frames["time_s"]) <= 150
        assert {len(column) for column in frames.values()} == {len(frames["time_s"])}, "columns, one entry per frame"
        assert len(p["requests"]["finish_s"]) == 200


def test_default_load_queues_under_both_policies_and_continuous_seats_from_the_queue(client):
    """Chapter 7's default: someone is seen waiting under both policies, and under continuous batching a
    waiting chat takes a seat freed mid-batch (while other seats keep decoding)."""
    d = client.get("/api/batching").json()
    pols = by_name(d)
    for p in pols.values():
        assert max(p["frames"]["num_waiting"]) >= 3, p["name"]
    c = pols["continuous"]
    assert sum(w > 0 for w in c["frames"]["num_waiting"]) > len(c["frames"]["num_waiting"]) / 4
    spans = rows(c["seat_spans"])
    slipped = [
        s
        for s in spans
        if s["start_s"] - d["requests"]["arrival_s"][s["request_id"]] > 0.5
        and any(o["start_s"] < s["start_s"] < o["end_s"] for o in spans if o["seat"] != s["seat"])
    ]
    assert len(slipped) >= 10


@pytest.mark.parametrize(
    "params", [{}, {"seed": 1}, {"seed": 2}, {"rate": 8, "seats": 32}, {"workload": "alpaca", "rate": 16, "seats": 32}]
)
def test_continuous_beats_static(client, params):
    pols = by_name(client.get("/api/batching", params=params).json())
    s, c = pols["static"], pols["continuous"]
    assert c["throughput_tokens_per_s"] > 1.2 * s["throughput_tokens_per_s"]
    assert c["ttft_ms_p50"] < s["ttft_ms_p50"] / 10 and c["latency_ms_p50"] < s["latency_ms_p50"]
    assert c["seat_utilization"] > s["seat_utilization"]


def test_engine_is_the_cost_model_and_says_so(client):
    e = client.get("/api/batching").json()["engine"]
    assert e["model_id"] == "llama-3.1-8b" and e["gpu_id"] == "h100-sxm" and e["tp"] == 1
    assert 5 < e["decode_step_ms_batch_1"] < 15, "8B BF16 decode on one H100: ~16 GB of weights at ~2.5 TB/s"
    assert e["decode_step_ms_batch_1"] < e["decode_step_ms_all_seats"] < 2 * e["decode_step_ms_batch_1"]
    assert 100_000 < e["kv_capacity_tokens"] < 600_000
    assert e["math"]["kv_capacity_tokens"]["inputs"]


def test_seat_spans_fill_lanes_without_overlap(client):
    d = client.get("/api/batching", params={"rate": 4, "seats": 16}).json()
    for p in d["policies"]:
        spans = rows(p["seat_spans"])
        assert sorted(s["request_id"] for s in spans) == list(range(200))  # nobody preempted at this load
        for seat in range(16):
            mine = sorted((s for s in spans if s["seat"] == seat), key=lambda s: s["start_s"])
            assert all(a["end_s"] <= b["start_s"] + 1e-9 for a, b in zip(mine, mine[1:]))
        assert all(s["start_s"] < s["first_token_s"] <= s["end_s"] <= d["horizon_s"] for s in spans)
    static = sorted(rows(by_name(d)["static"]["seat_spans"]), key=lambda s: s["start_s"])
    starts = sorted({s["start_s"] for s in static})
    assert len(starts) < len(static) / 3, "static seats a whole batch at one instant"


def test_waiting_queue_is_preempted_requests_then_arrivals_in_order(client):
    d = client.get("/api/batching", params={"rate": 32, "seats": 64, "requests": 400}).json()
    for p in d["policies"]:
        f = p["frames"]
        for n, front, first_new in zip(f["num_waiting"], f["waiting_preempted_ids"], f["waiting_first_new_id"]):
            assert len(front) <= n and 0 <= first_new <= 400
            assert first_new + n - len(front) <= 400


def test_same_url_same_bytes_and_etag(client):
    a = assert_same_bytes_and_etag(
        client, "/api/batching", "/api/batching?rate=3&requests=200&seats=8&workload=sharegpt&seed=0"
    )
    assert len(a.content) < 80_000, len(a.content)


@pytest.mark.parametrize(
    "name,value,bound",
    [
        ("requests", MAX_REQUESTS + 1, f"{MAX_REQUESTS:,}"),
        ("seats", MAX_SEATS + 1, f"{MAX_SEATS}"),
        ("seats", 0, "1"),
        ("rate", MAX_RATE + 1, f"{MAX_RATE:g}"),
        ("rate", 0, "0"),
        ("shared_prefix", 1.5, "1"),
        ("shared_prefix", -0.1, "0"),
        ("max_num_batched_tokens", 255, "256"),
        ("max_num_batched_tokens", 8193, "8,192"),
    ],
)
def test_out_of_bounds_gets_422_naming_field_and_bound(client, name, value, bound):
    assert_refused(client, "/api/batching", {name: value}, name, bound)


def test_shared_prefix_not_a_number_gets_422_in_words(client):
    assert_refused(client, "/api/batching", {"shared_prefix": "half"}, "shared_prefix", "number")


def test_a_shared_system_prompt_is_served_from_the_prefix_cache(client):
    """Half the chats begin with one system prompt: all but the first admission find its pages cached."""
    d = client.get("/api/batching", params={"shared_prefix": 0.5, "requests": 40}).json()
    assert d["params"]["shared_prefix"] == 0.5
    for p in d["policies"]:
        pc = p["prefix_cache"]
        assert pc["query_tokens"] >= 20 * 256 and 0.9 < pc["hit_rate"] < 1
    none = client.get("/api/batching", params={"requests": 40}).json()
    assert all(
        p["prefix_cache"] == {"query_tokens": 0, "hit_tokens": 0, "hit_rate": 0.0, "num_evictions": 0}
        for p in none["policies"]
    )


def test_a_smaller_token_budget_delays_first_tokens_and_speeds_the_others(client):
    """vLLM's max_num_batched_tokens: fewer tokens per step cut prompts into more pieces (later first tokens)
    and keep each step shorter for the chats decoding beside them (faster tokens after the first), at p99."""
    q = {"rate": 8, "seats": 32}
    small = client.get("/api/batching", params={**q, "max_num_batched_tokens": 256}).json()
    big = client.get("/api/batching", params={**q, "max_num_batched_tokens": 2048}).json()
    assert small["engine"]["max_num_batched_tokens"] == 256 and big["engine"]["max_num_batched_tokens"] == 2048
    s, b = small["policies"][1], big["policies"][1]
    assert s["ttft_ms_p99"] > b["ttft_ms_p99"] and s["tpot_ms_p99"] < b["tpot_ms_p99"]
    assert small["policies"][0]["ttft_ms_p50"] == big["policies"][0]["ttft_ms_p50"]  # static prefills whole prompts


def test_bad_workload_and_unknown_names_get_422(client):
    assert_refused(client, "/api/batching", {"workload": "lmsys"}, "workload", "sharegpt")
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


def test_json_goes_out_gzipped_with_its_own_etag_and_under_40_kb(client):
    """Chapter 6 and 7 at their defaults are at most 40 KB on the wire; the gzipped body is another
    representation with another ETag, and If-None-Match with either tag revalidates."""
    for url in ("/api/batching", "/api/kv-cache"):
        gz = client.get(url, headers={"accept-encoding": "gzip"})
        plain = client.get(url, headers={"accept-encoding": "identity"})
        assert gz.headers["content-encoding"] == "gzip" and "content-encoding" not in plain.headers
        assert int(gz.headers["content-length"]) <= 40_000, (url, gz.headers["content-length"])
        assert gz.content == plain.content  # the client decodes the same bytes
        assert gz.headers["etag"] == plain.headers["etag"][:-1] + '-gzip"'
        assert "Accept-Encoding" in gz.headers["vary"]
        for tag in (gz.headers["etag"], plain.headers["etag"]):
            assert client.get(url, headers={"if-none-match": tag}).status_code == 304
