"""GET /api/gpu: the package layout and one decode step per GPU, equal to what the simulation computes."""

from __future__ import annotations

import pytest
from apikit import assert_refused, assert_same_bytes_and_etag

from inside_llm.sim.core.result import as_json
from inside_llm.sim.cost import engines, gpu_layout
from inside_llm.sim.cost.costmodel import EngineConfig, memory_per_gpu
from inside_llm.sim.hardware import catalog


def test_defaults_are_70b_on_h100_over_eight_gpus(client):
    r = client.get("/api/gpu")
    assert r.status_code == 200
    d = r.json()
    assert (d["gpu"]["id"], d["model"]["id"], d["precision"], d["tp"], d["batch"]) == (
        "h100-sxm",
        "llama-3.1-70b",
        "bf16",
        8,
        1,
    )
    assert d["layout"] == gpu_layout.layout(catalog.gpu("h100-sxm"))
    assert d["layout"]["sm_count"] == 132 and sum(d["layout"]["sm_groups"]) == 132
    assert d["layout"]["hbm_stacks"] == 5 and d["package"]["hbm_sites"] == 6
    assert d["package"]["hbm_inactive_sites"] == 1 and d["package"]["l2_partitions"] == 2


@pytest.mark.parametrize(
    "query",
    [
        {},
        {"gpu": "b200", "precision": "fp8", "batch": 16, "context": 4096, "tp": 4},
        {"gpu": "mi300x", "model": "mixtral-8x7b", "batch": 64, "tp": 2},
    ],
)
def test_stream_numbers_equal_the_simulation(client, query):
    d = client.get("/api/gpu", params=query).json()
    g = catalog.gpu(d["gpu"]["id"])
    # priced by the vendor's best published engine (sim.cost.engines): vLLM on ROCm for the MI300X
    eff = engines.profile("auto", g).efficiency()
    cfg = EngineConfig(catalog.model(d["model"]["id"]), g, tp=d["tp"], precision=d["precision"], efficiency=eff)
    want = as_json(gpu_layout.decode_stream(cfg, d["batch"], d["context"]))
    s = d["stream"]
    for k, v in want.items():
        assert s[k] == v, k
    slow = gpu_layout.slow_motion(want["step_ms"] / 1e3)
    assert s["slow_motion"] == slow["factor"] and s["screen_step_s"] == pytest.approx(slow["screen_step_s"])
    assert s["tile_bytes"] * s["tiles_per_step"] == pytest.approx(want["bytes_per_step"])
    assert d["memory"] == as_json(memory_per_gpu(cfg, d["batch"], d["context"]))
    assert d["math"]["bytes_per_step"]["value"] == want["bytes_per_step"]
    assert d["math"]["step_ms"]["value"] == want["step_ms"]
    assert "per GPU" in " ".join(d["math"]["bytes_per_step"]["assumptions"])


def test_one_step_of_70b_streams_a_slice_of_the_weights_per_gpu(client):
    d = client.get("/api/gpu").json()
    shard = EngineConfig(catalog.model(), catalog.gpu(), tp=8).shard
    s = d["stream"]
    # every weight of the GPU's shard but the embedding table (one row per token is looked up)
    assert s["weight_bytes_per_step"] == pytest.approx(shard.weight_bytes, rel=0.02)
    assert s["weight_bytes_per_step"] < shard.weight_bytes
    assert s["effective_tb_s"] < s["peak_tb_s"] and s["bound"] == "memory"
    assert 1 <= s["screen_step_s"] <= 10 and s["slow_motion"] > 1  # slowed, and by a stated factor
    assert d["stream"]["kv_tiles"] == round(s["tiles_per_step"] * s["kv_bytes_per_step"] / s["bytes_per_step"])


def test_switching_gpu_changes_the_layout(client):
    seen = {}
    for gid in catalog.gpus():
        d = client.get("/api/gpu", params={"gpu": gid}).json()
        g = catalog.gpu(gid)
        assert d["layout"]["sm_count"] == g.sm_count == sum(d["layout"]["sm_groups"])
        assert d["layout"]["hbm_stacks"] == g.hbm_stacks
        assert d["package"]["hbm_sites"] - d["package"]["hbm_inactive_sites"] == g.hbm_stacks
        seen[gid] = d
    assert seen["h200"]["layout"]["hbm_stacks"] == 6 and seen["h200"]["package"]["hbm_inactive_sites"] == 0
    assert seen["b200"]["layout"]["die_count"] == 2 and seen["b200"]["package"]["hbm_placement"] == "top-bottom"
    assert seen["mi300x"]["layout"]["sm_groups"] == [38] * 8 and seen["mi300x"]["package"]["io_dies"] == 4
    assert seen["l40s"]["package"]["hbm_placement"] == "board"
    assert seen["h200"]["stream"]["step_ms"] < seen["h100-sxm"]["stream"]["step_ms"]  # more bandwidth, same bytes


def test_more_chats_and_longer_context_read_more_kv(client):
    one = client.get("/api/gpu").json()["stream"]
    busy = client.get("/api/gpu", params={"batch": 64, "context": 4096}).json()["stream"]
    assert busy["kv_bytes_per_step"] == 64 * 4 * one["kv_bytes_per_step"]
    assert busy["weight_bytes_per_step"] == one["weight_bytes_per_step"] and busy["kv_tiles"] > 0


def test_a_model_too_big_for_the_gpu_says_so(client):
    m = client.get("/api/gpu", params={"model": "llama-3.1-405b", "gpu": "l40s"}).json()["memory"]
    assert not m["fits"] and m["shortfall_gb"] > 0


@pytest.mark.parametrize(
    "query,field,needle",
    [
        ({"gpu": "h100"}, "gpu", "h100-sxm"),
        ({"model": "gpt-5"}, "model", "llama-3.1-70b"),
        ({"precision": "fp4"}, "precision", "int4"),
        ({"batch": 0}, "batch", "1"),
        ({"batch": 1025}, "batch", "1,024"),
        ({"context": 200_000}, "context", "131,072"),
        ({"model": "llama-2-7b", "context": 5000}, "context", "4,096"),
        ({"tp": 3}, "tp", "1, 2, 4 or 8"),
        ({"tp": 16}, "tp", "8"),
        ({"bogus": 1}, "bogus", "not a setting"),
    ],
)
def test_bad_input_gets_422_naming_the_field(client, query, field, needle):
    assert_refused(client, "/api/gpu", query, field, needle)


def test_parameters_have_bounds_and_units_in_openapi(client):
    params = {p["name"]: p for p in client.get("/openapi.json").json()["paths"]["/api/gpu"]["get"]["parameters"]}
    assert set(params) == {"gpu", "model", "precision", "batch", "context", "tp"}
    for name in ("batch", "context", "tp"):
        assert params[name]["schema"]["maximum"] and "(" in params[name]["description"]
    assert "h100-sxm" in params["gpu"]["schema"]["enum"] and "llama-3.1-70b" in params["model"]["schema"]["enum"]


def test_deterministic_and_cacheable(client):
    assert_same_bytes_and_etag(client, "/api/gpu?gpu=h200")


def test_fact_figures_come_from_the_endpoint(client):
    from inside_llm.api.gpu import facts

    f, d = facts(), client.get("/api/gpu").json()
    assert f["sm_count"] == "132" == str(d["layout"]["sm_count"])
    assert f["step_ms"] == f"{d['stream']['step_ms']:.1f}" and f["tp"] == "8"


def test_step_time_parts_add_up_to_the_step(client):
    """The stage's "why 1.51 of 3.35 TB/s" bar: the parts of one step sum to step_ms; one GPU has no all-reduce."""
    for params in ({}, {"tp": 1, "model": "llama-3.1-8b"}, {"batch": 512, "context": 4096}):
        s = client.get("/api/gpu", params=params).json()["stream"]
        assert s["ideal_ms"] == pytest.approx(s["bytes_per_step"] / (s["peak_tb_s"] * 1e12) * 1e3)
        assert s["ideal_ms"] <= s["memory_ms"] <= s["kernel_ms"]
        assert s["kernel_ms"] + s["comm_ms"] + s["overhead_ms"] == pytest.approx(s["step_ms"])
        assert (s["comm_ms"] == 0) == (params.get("tp") == 1)


def test_mi300x_fact_uses_amds_words():
    """AMD's data sheet: 304 compute units, 4 Matrix Cores each (not "SMs with tensor cores")."""
    from inside_llm.api.gpu import GpuParams, facts

    f = facts(GpuParams(gpu="mi300x"))
    assert (f["sm_units"], f["matrix_units"]) == ("compute units (CUs)", "Matrix Cores")
    assert (facts()["sm_units"], facts()["matrix_units"]) == ("SMs", "tensor cores")


def test_one_gpu_reads_as_one_and_the_overhead_names_its_source(client):
    """Issue 28 red pen: 'split over 1 GPUs'; the 3 ms of launches had no source on the page."""
    one = client.get("/api/facts/gpu", params={"tp": 1}).json()["text"]
    assert "on one GPU reads" in one and "1 GPUs" not in one
    assert "split over 8 GPUs reads" in client.get("/api/facts/gpu").json()["text"]
    s = client.get("/api/gpu").json()["stream"]
    assert s["overhead_ms"] == pytest.approx(80 * 0.025 + 1)
    assert s["overhead_note"].startswith("80 layers x 25 µs + 1 ms per step") and "NIM 1.8" in s["overhead_note"]
    amd = client.get("/api/gpu", params={"gpu": "mi300x"}).json()["stream"]["overhead_note"]
    assert amd.startswith("80 layers x 25 µs + 1.25 ms per step") and "vllm-rocm engine profile" in amd
