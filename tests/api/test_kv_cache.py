"""GET /api/kv-cache: contract fields, the guide's waste claim through the API, compact frames, bounds, caching."""

from __future__ import annotations

import math

import pytest

from inside_llm.api.kv_cache import CAPACITY_TOKENS, MAX_FRAMES, MAX_REQUESTS, MAX_SEQ_LEN
from inside_llm.sim.kvcache import frame_cells, simulate_kv


def by_name(d):
    return {p["name"]: p for p in d["policies"]}


def test_contract_fields_for_every_policy(client):
    r = client.get("/api/kv-cache", params={"block_size": 16, "workload": "sharegpt", "requests": 300, "seed": 0})
    assert r.status_code == 200
    pols = by_name(r.json())
    assert {"paged", "contiguous"} <= set(pols)
    for p in pols.values():
        assert 0 <= p["waste_fraction"] <= 1 and p["max_concurrent_requests"] >= 1
        assert isinstance(p["frames"], list) and p["math"]["waste_fraction"]["formula"]
    for name in ("paged", "contiguous"):
        assert pols[name]["drawn"] and 2 <= len(pols[name]["frames"]) <= MAX_FRAMES
        f = pols[name]["frames"][1]
        assert {"step", "waste_fraction", "used_slots", "reserved_slots", "internal_fragmentation_slots",
                "free_slots", "residents"} <= set(f)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_guide_claim_without_paging_60_to_80_percent_with_pages_about_4(client, seed):
    pols = by_name(client.get("/api/kv-cache", params={"seed": seed}).json())
    assert 0.60 <= pols["contiguous"]["waste_fraction"] <= 0.80
    assert pols["paged"]["waste_fraction"] <= 0.04
    assert pols["paged"]["max_concurrent_requests"] > 2 * pols["contiguous"]["max_concurrent_requests"]
    assert pols["paged"]["num_steps"] < pols["contiguous"]["num_steps"], "paging finishes the same trace sooner"


def test_frames_share_one_clock(client):
    d = client.get("/api/kv-cache").json()
    for p in d["policies"]:
        assert all(f["step"] % d["frame_every"] == 0 for f in p["frames"])
        assert [f["step"] for f in p["frames"]] == sorted({f["step"] for f in p["frames"]})


def decode(policy: dict) -> list[list[dict]]:
    """Expand compact frames back into the simulation's residents."""
    out = []
    for f in policy["frames"]:
        res = []
        for a, n in f["residents"]:
            al = policy["allocations"][a]
            r = {"request_id": al["request_id"], "num_tokens": n, "num_final_tokens": al["num_final_tokens"]}
            if policy["layout"] == "paged":
                r["block_table"] = al["block_table"][:math.ceil(n / policy["block_size"])]
            else:
                r["start_slot"], r["num_slots"] = al["start_slot"], al["num_slots"]
            res.append(r)
        out.append(res)
    return out


@pytest.mark.parametrize("params", [{}, {"block_size": 8, "compare": "oracle"},
                                    {"workload": "alpaca", "block_size": 64, "compare": "pow2"},
                                    {"workload": "fixed", "requests": 60, "seed": 3}])
def test_compact_frames_are_lossless(client, params):
    """Every frame decodes to exactly the simulation's residents, and so to frame_cells' grid."""
    d = client.get("/api/kv-cache", params=params).json()
    q = d["params"]
    sim = by_name(simulate_kv(block_size=q["block_size"], workload=q["workload"], num_requests=q["requests"],
                              seed=q["seed"], capacity_tokens=CAPACITY_TOKENS, max_seq_len=MAX_SEQ_LEN,
                              max_frames=MAX_FRAMES))
    for name in ("paged", q["compare"]):
        pol = by_name(d)[name]
        assert [f["step"] for f in pol["frames"]] == [f["step"] for f in sim[name]["frames"]]
        for got, want in zip(decode(pol), sim[name]["frames"]):
            assert got == want["residents"]
            cells = frame_cells(sim[name], {**want, "residents": got}, q["block_size"])
            assert sum(cells["num_filled"]) == want["used_slots"]


def test_undrawn_policies_keep_metrics_but_no_frames(client):
    pols = by_name(client.get("/api/kv-cache", params={"compare": "pow2"}).json())
    assert pols["pow2"]["drawn"] and pols["pow2"]["frames"]
    assert not pols["contiguous"]["drawn"] and pols["contiguous"]["frames"] == []
    assert pols["contiguous"]["waste_fraction"] > pols["pow2"]["waste_fraction"] > pols["paged"]["waste_fraction"]


def test_default_response_is_lean_and_deterministic(client):
    a = client.get("/api/kv-cache")
    assert len(a.content) < 200_000, len(a.content)
    b = client.get("/api/kv-cache?block_size=16&workload=sharegpt&requests=300&seed=0")
    assert a.content == b.content and a.headers["etag"] == b.headers["etag"]
    assert client.get("/api/kv-cache", headers={"if-none-match": a.headers["etag"]}).status_code == 304


def test_block_size_changes_paged_waste_only(client):
    small = by_name(client.get("/api/kv-cache", params={"block_size": 8}).json())
    big = by_name(client.get("/api/kv-cache", params={"block_size": 128}).json())
    assert small["paged"]["waste_fraction"] < big["paged"]["waste_fraction"]
    assert small["contiguous"]["waste_fraction"] == big["contiguous"]["waste_fraction"]


@pytest.mark.parametrize("name,value,bound", [("requests", MAX_REQUESTS + 1, str(MAX_REQUESTS)),
                                              ("requests", 0, "1"), ("block_size", 4, "8"),
                                              ("block_size", 256, "128"), ("seed", -1, "0")])
def test_out_of_bounds_gets_422_naming_field_and_bound(client, name, value, bound):
    r = client.get("/api/kv-cache", params={name: value})
    assert r.status_code == 422
    err = r.json()["detail"][0]
    assert err["loc"][-1] == name and bound in err["msg"]


def test_bad_workload_and_unknown_names_get_422(client):
    r = client.get("/api/kv-cache", params={"workload": "lmsys"})
    assert r.status_code == 422
    err = r.json()["detail"][0]
    assert err["loc"][-1] == "workload" and "sharegpt" in err["msg"] and "alpaca" in err["msg"]
    assert client.get("/api/kv-cache", params={"compare": "paged"}).status_code == 422
    assert client.get("/api/kv-cache", params={"capacity": 1}).status_code == 422
