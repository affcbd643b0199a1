"""GET /api/kv-cache: contract fields, the guide's waste claim through the API, compact frames, bounds, caching."""

from __future__ import annotations

import pytest
from apikit import assert_refused, assert_same_bytes_and_etag, forget_measurements, refusal

from inside_llm.api.kv_cache import CAPACITY_TOKENS, MAX_FRAMES, MAX_REQUESTS, MAX_SEQ_LEN, PAGE_DIGITS
from inside_llm.sim.serve.kvpolicies import simulate_kv


def by_name(d):
    return {p["name"]: p for p in d["policies"]}


def rows(columns):
    return [dict(zip(columns, values)) for values in zip(*columns.values())]


def pages_of(text):
    """A block table from its page string: two base-64 digits per page id, as the scene decodes it."""
    digit = {c: i for i, c in enumerate(PAGE_DIGITS.decode())}
    return [digit[text[j]] * 64 + digit[text[j + 1]] for j in range(0, len(text), 2)]


def residents(d, policy, step):
    """What the stage computes: who holds memory at `step`, from the policy's residencies."""
    st, out = policy["residencies"], []
    for k, rid in enumerate(st["request_id"]):
        if st["first_step"][k] <= step <= st["last_step"][k]:
            n = st["first_num_tokens"][k] + step - st["first_step"][k]
            r = {"request_id": rid, "num_tokens": n, "num_final_tokens": d["num_final_tokens"][rid]}
            if policy["layout"] == "paged":
                r["block_table"] = pages_of(st["block_pages"][k])[: -(-n // policy["block_size"])]
            else:
                r["start_slot"], r["num_slots"] = st["start_slot"][k], st["num_slots"][k]
            out.append(r)
    return out


def test_contract_fields_for_every_policy(client):
    r = client.get("/api/kv-cache", params={"block_size": 16, "workload": "sharegpt", "requests": 300, "seed": 0})
    assert r.status_code == 200
    d = r.json()
    pols = by_name(d)
    assert {"paged", "contiguous"} <= set(pols) and d["drawn"] == ["paged", "contiguous"]
    assert len(d["num_final_tokens"]) == 300
    for p in pols.values():
        assert 0 <= p["waste_fraction"] <= 1 and p["max_concurrent_requests"] >= 1
        assert p["math"]["waste_fraction"]["formula"]
    for name in ("paged", "contiguous"):
        frames = pols[name]["frames"]
        assert 2 <= len(frames["step"]) <= MAX_FRAMES
        assert {len(column) for column in frames.values()} == {len(frames["step"])}, "columns, one entry per frame"
        assert {"waste_fraction", "used_slots", "reserved_slots", "internal_fragmentation_slots", "free_slots"} <= set(
            frames
        )
        assert len(pols[name]["residencies"]["request_id"]) >= 300


def test_bytes_per_token_come_from_the_model_shape(client):
    k = client.get("/api/kv-cache").json()["kv_per_token"]
    assert k["model_id"] == "llama-3.1-70b" and k["bytes"] == 2 * 80 * 8 * 128 * 2 == 327_680  # 320 KiB
    assert k["math"]["value"] == k["bytes"] and len(k["math"]["inputs"]) == 4
    small = client.get("/api/kv-cache", params={"model": "llama-3.1-8b"}).json()["kv_per_token"]
    assert small["bytes"] == 2 * 32 * 8 * 128 * 2
    assert client.get("/api/kv-cache", params={"model": "gpt-9"}).status_code == 422


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_guide_claim_without_paging_60_to_80_percent_with_pages_about_4(client, seed):
    pols = by_name(client.get("/api/kv-cache", params={"seed": seed}).json())
    assert 0.60 <= pols["contiguous"]["waste_fraction"] <= 0.80
    assert pols["paged"]["waste_fraction"] <= 0.04
    assert pols["paged"]["max_concurrent_requests"] > 2 * pols["contiguous"]["max_concurrent_requests"]
    assert pols["paged"]["num_steps"] < pols["contiguous"]["num_steps"], "paging finishes the same trace sooner"


def test_frames_share_one_clock(client):
    d = client.get("/api/kv-cache").json()
    for name in d["drawn"]:
        steps = by_name(d)[name]["frames"]["step"]
        assert all(s % d["frame_every"] == 0 for s in steps) and steps == sorted(set(steps))


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"block_size": 8, "compare": "oracle"},
        {"workload": "alpaca", "block_size": 64, "compare": "pow2"},
        {"workload": "fixed", "requests": 60, "seed": 3},
    ],
)
def test_residencies_rebuild_every_frame(client, params):
    """At every frame (and between frames) the residencies give a consistent picture: tokens add up to the
    frame's used slots, no page or slot has two owners, and they agree with the simulation run directly."""
    d = client.get("/api/kv-cache", params=params).json()
    q = d["params"]
    sim = simulate_kv(
        block_size=q["block_size"],
        workload=q["workload"],
        num_requests=q["requests"],
        seed=q["seed"],
        capacity_tokens=CAPACITY_TOKENS,
        max_seq_len=MAX_SEQ_LEN,
        max_frames=MAX_FRAMES,
    )
    for name in d["drawn"]:
        pol = by_name(d)[name]
        want = next(p for p in sim.policies if p.name == name)
        assert pol["frames"]["step"] == want.frames.step[: len(pol["frames"]["step"])]
        if pol["layout"] == "paged":  # the page strings carry the simulation's block tables exactly
            assert [pages_of(t) for t in pol["residencies"]["block_pages"]] == want.residencies.block_table
            assert "block_table" not in pol["residencies"]
        for f in rows(pol["frames"]):
            res = residents(d, pol, f["step"])
            assert sum(r["num_tokens"] for r in res) == f["used_slots"] and len(res) == f["num_resident_requests"]
            owned = [
                x
                for r in res
                for x in (
                    r["block_table"] if "block_table" in r else range(r["start_slot"], r["start_slot"] + r["num_slots"])
                )
            ]
            assert len(owned) == len(set(owned))
            between = residents(d, pol, f["step"] + d["frame_every"] // 2)
            assert all(1 <= r["num_tokens"] <= r["num_final_tokens"] for r in between)


def test_undrawn_policies_keep_metrics_but_no_frames(client):
    d = client.get("/api/kv-cache", params={"compare": "pow2"}).json()
    pols = by_name(d)
    assert d["drawn"] == ["paged", "pow2"] and pols["pow2"]["frames"]["step"]
    assert pols["contiguous"]["frames"]["step"] == [] and pols["contiguous"]["residencies"]["request_id"] == []
    assert pols["contiguous"]["waste_fraction"] > pols["pow2"]["waste_fraction"] > pols["paged"]["waste_fraction"]


def test_default_response_is_lean_and_deterministic(client):
    a = assert_same_bytes_and_etag(
        client, "/api/kv-cache", "/api/kv-cache?block_size=16&workload=sharegpt&requests=300&seed=0&model=llama-3.1-70b"
    )
    assert len(a.content) < 120_000, len(a.content)


def test_block_size_changes_paged_waste_only(client):
    small = by_name(client.get("/api/kv-cache", params={"block_size": 8}).json())
    big = by_name(client.get("/api/kv-cache", params={"block_size": 128}).json())
    assert small["paged"]["waste_fraction"] < big["paged"]["waste_fraction"]
    assert small["contiguous"]["waste_fraction"] == big["contiguous"]["waste_fraction"]


@pytest.mark.parametrize(
    "name,value,bound",
    [
        ("requests", MAX_REQUESTS + 1, f"{MAX_REQUESTS:,}"),
        ("requests", 0, "1"),
        ("block_size", 4, "8"),
        ("block_size", 256, "128"),
        ("seed", -1, "0"),
    ],
)
def test_out_of_bounds_gets_422_naming_field_and_bound(client, name, value, bound):
    assert_refused(client, "/api/kv-cache", {name: value}, name, bound)


def test_bad_workload_and_unknown_names_get_422(client):
    err = refusal(client, "/api/kv-cache", workload="lmsys")
    assert err["loc"][-1] == "workload" and "sharegpt" in err["msg"] and "alpaca" in err["msg"]
    assert client.get("/api/kv-cache", params={"compare": "paged"}).status_code == 422
    assert client.get("/api/kv-cache", params={"capacity": 1}).status_code == 422


def test_latent_attention_caches_a_small_latent_per_token(client):
    """DeepSeek-V3's MLA: 61 layers x (512 + 64) values x 2 bytes = 70,272 B, ~5x less than Llama 3.1 70B."""
    d = client.get("/api/kv-cache", params={"model": "deepseek-v3"}).json()["kv_per_token"]
    assert d["bytes"] == 61 * 576 * 2 and "latent" in d["math"]["formula"]
    oss = client.get("/api/kv-cache", params={"model": "gpt-oss-120b"}).json()["kv_per_token"]
    assert oss["bytes"] == 18 * 2 * 8 * 64 * 2 and any("sliding-window" in a for a in oss["math"]["assumptions"])


# ---- GET /api/kv-cache/measured: the served model's own cache, weighed and timed --------------------


@pytest.fixture
def fresh_measurements(monkeypatch):
    """Nothing measured yet in this process (each test measures for itself)."""
    from inside_llm.api import kv_cache

    forget_measurements(monkeypatch, kv_cache, kv_cache._measure_kv, kv_cache._kv_unavailable)


def test_measured_kv_bytes_per_token_beside_llama_70b(client):
    from inside_llm.api.measured import served

    r = client.get("/api/kv-cache/measured")
    assert r.status_code == 200
    d = r.json()
    s = served()
    c = s.model.config
    stored, bf16, large = d["served_as_stored"], d["served_bf16"], d["large_model"]
    assert stored["bytes_per_token"] == 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4
    assert bf16["bytes_per_token"] * 2 == stored["bytes_per_token"] and bf16["precision"] == "bf16"
    assert (large["model"], large["bytes_per_token"], large["layers"], large["key_value_heads"]) == (
        "Llama 3.1 70B",
        327_680,
        80,
        8,
    )
    assert d["large_over_served"] == pytest.approx(327_680 / bf16["bytes_per_token"], rel=2e-3)
    assert d["measured_bytes_per_token"] == stored["bytes_per_token"] and d["matches_formula"] is True
    assert d["measured_cache_bytes"] == d["measured_cache_tokens"] * stored["bytes_per_token"]
    if s.served == "smollm2":
        assert stored["bytes_per_token"] == 46_080 and stored["model"] == "SmolLM2-135M-Instruct"
    t = d["decode"]
    assert t["same_tokens"] is True and t["recompute_milliseconds_per_token"] > t["cached_milliseconds_per_token"] > 0
    assert t["speedup"] == pytest.approx(
        t["recompute_milliseconds_per_token"] / t["cached_milliseconds_per_token"], rel=2e-3
    )
    layer = client.get("/api/layer/measured").json()  # chapter 3 shows the same measurement
    assert (layer["cached_ms_per_token"], layer["recompute_ms_per_token"]) == (
        t["cached_milliseconds_per_token"],
        t["recompute_milliseconds_per_token"],
    )
    assert client.get("/api/kv-cache/measured").content == r.content, "measured once per process, then cached"
    props = client.get("/openapi.json").json()["components"]["schemas"]["KVCacheMeasuredResponse"]["properties"]
    assert {"served_as_stored", "large_model", "measured_bytes_per_token", "decode"} <= set(props)


def test_measured_kv_unavailable_says_why(client, fresh_measurements, monkeypatch):
    from inside_llm.sim.measure import demo_timing

    def broken(*a, **k):
        raise RuntimeError("no")

    monkeypatch.setattr(demo_timing, "time_kv_cache", broken)
    d = client.get("/api/kv-cache/measured").json()
    assert d["available"] is False and d["reason"] == "the measurement failed (RuntimeError)"
    assert d["served_as_stored"] is None and d["decode"] is None


def test_measured_kv_weighs_the_toy_without_smollm2(client, no_model, fresh_measurements):
    from inside_llm.api.demo_model import demo_model

    d = client.get("/api/kv-cache/measured").json()
    c = demo_model().config
    assert d["available"] and d["model"]["served"] == "toy" and "not on this server" in d["model"]["note"]
    assert d["served_as_stored"]["model"] == "our toy model"
    assert d["served_as_stored"]["bytes_per_token"] == 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4
    assert d["matches_formula"] is True and d["large_model"]["bytes_per_token"] == 327_680
