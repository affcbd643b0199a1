"""GET /api/quantization: sizes and speeds equal the cost model, published rows carry sources, the demo's
perplexities equal the measurement, the tile's bits decode to its values, 422s, caching and speed."""

from __future__ import annotations

import numpy as np
import pytest
from apikit import get_json, refusal

from inside_llm.sim.cost import serving
from inside_llm.sim.cost.costmodel import GB, EngineConfig, memory_per_gpu
from inside_llm.sim.hardware import catalog
from inside_llm.sim.quant import demo_quality


def _get(client, **q):
    return get_json(client, "/api/quantization", **q)


def test_contract_fields(client):
    d = _get(client)
    for k in ("weights_gb", "gpus_needed", "tokens_per_s_per_user", "cost_per_million_tokens_usd", "published", "demo"):
        assert k in d
    assert all({"precision", "method", "perplexity", "source", "estimate"} <= set(r) for r in d["published"])
    assert all({"precision", "perplexity"} <= set(r) for r in d["demo"])


@pytest.mark.parametrize("precision", ["bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4"])
def test_sizes_gpus_and_speed_equal_the_cost_model(client, precision):
    d = _get(client, precision=precision)
    m, g = catalog.model("llama-3.1-70b"), catalog.gpu("h100-sxm")
    assert d["weights_gb"] == pytest.approx(EngineConfig(m, g, 1, 1, precision).shard.weight_bytes / GB)
    n = d["gpus_needed"]
    assert memory_per_gpu(EngineConfig(m, g, n, 1, precision), 16, 1280).fits
    if n > 1:
        assert not memory_per_gpu(EngineConfig(m, g, n // 2, 1, precision), 16, 1280).fits
    est = serving.estimate(serving.ServingParams(gpus=n, tp=n, precision=precision, batch=16))
    assert d["tokens_per_s_per_user"] == pytest.approx(est.tokens_per_s_per_user)
    assert d["cost_per_million_tokens_usd"] == pytest.approx(est.cost_per_million_tokens_usd)


def test_model_shrinks_to_about_a_half_and_a_quarter(client):
    rows = {r["precision"]: r for r in _get(client)["rows"]}
    assert rows["bf16"]["weights_gb"] == pytest.approx(141, abs=1)
    assert rows["fp8"]["weights_gb"] / rows["bf16"]["weights_gb"] == pytest.approx(0.5, abs=0.03)
    assert 0.25 < rows["int4"]["weights_gb"] / rows["bf16"]["weights_gb"] < 0.3  # scales and 16-bit embeddings
    assert rows["int4"]["bits_per_weight"] == 4.125
    assert rows["bf16"]["gpus_needed"] > rows["fp8"]["gpus_needed"] > rows["int4"]["gpus_needed"] == 1


def test_published_rows_say_what_the_tables_say_with_sources(client):
    pub = _get(client)["published"]
    mine = [r for r in pub if r["model"] == "LLaMA-65B" and r["context_tokens"] == 2048]
    ppl = {(r["precision"], r["method"].split(" ")[0], r["group_size"]): r["perplexity"] for r in mine}
    assert ppl[("fp16", "none", 0)] == 3.53
    assert ppl[("int4", "GPTQ", 0)] == 3.84 and ppl[("int4", "RTN", 0)] == 3.92
    assert {ppl[("int4", k, 128)] for k in ("RTN", "GPTQ", "AWQ")} == {3.67, 3.66, 3.62}
    assert 3.85 not in {r["perplexity"] for r in pub}
    assert all(r["source"] and r["url"].startswith("https://") for r in pub)
    fp8 = [r for r in pub if r["precision"] == "fp8"]
    assert fp8 and all(r["estimate"] for r in fp8) and all(not r["estimate"] for r in pub if r["precision"] != "fp8")
    for r in pub:
        if r["precision"] != "fp16":
            assert r["relative_change"] == pytest.approx(r["perplexity"] / r["baseline"] - 1)


def test_needles_follow_the_precision(client):
    n = _get(client, precision="int4")["needles"]
    assert n["published"]["method"].startswith("RTN") and n["published"]["group_size"] == 128
    assert len(n["published"]["others"]) >= 3 and n["demo"]["precision"] == "int4"
    assert _get(client, precision="fp8")["needles"]["published"]["estimate"] is True
    assert _get(client, precision="bf16")["needles"]["published"]["relative_change"] == 0
    # SmolLM2 served here: its measured row where one exists (INT8, INT4), against its file's Q4_1 baseline
    real = _get(client, precision="int4")["real"]
    if real is not None:
        base = real["rows"][0]["perplexity"]
        for precision in ("int8", "int4"):
            served = _get(client, precision=precision)["needles"]["served"]
            row = next(r for r in real["rows"] if r["variant"] == precision)
            assert served["perplexity"] == row["perplexity"] and served["baseline"] == base
        assert _get(client, precision="bf16")["needles"]["served"] is None
        assert _get(client, precision="fp8")["needles"]["served"] is None


def test_reads_faster_at_equal_gpu_count(client):
    d = _get(client, precision="int4")
    rows = {r["precision"]: r for r in d["rows"]}
    same = d["same_gpus"]
    assert same == max(r["gpus_needed"] for r in d["rows"]) == rows["bf16"]["gpus_needed"] == 4
    for p, r in rows.items():  # every format on the same 4 GPUs, as the cost model says
        est = serving.estimate(serving.ServingParams(gpus=same, tp=same, precision=p, batch=16))
        assert r["tokens_per_s_per_user_same_gpus"] == pytest.approx(est.tokens_per_s_per_user)
        assert r["speedup_same_gpus"] == pytest.approx(
            est.tokens_per_s_per_user / rows["bf16"]["tokens_per_s_per_user_same_gpus"]
        )
    # fewer bytes per step: faster on equal GPUs, while on its fewest GPUs INT4 is not faster than BF16
    assert rows["int4"]["speedup_same_gpus"] > rows["fp8"]["speedup_same_gpus"] > 1.3
    assert rows["int4"]["tokens_per_s_per_user"] < rows["bf16"]["tokens_per_s_per_user"]
    assert d["speedup_same_gpus"] == rows["int4"]["speedup_same_gpus"]
    assert d["math"]["tokens_per_s_per_user_same_gpus"]["value"] == pytest.approx(d["tokens_per_s_per_user_same_gpus"])


@pytest.mark.parametrize(
    "precision,baseline,differs",
    [("bf16", 3.53, False), ("fp8", 3.53, False), ("int8", 6.17, True), ("int4", 3.53, False)],
)
def test_each_needle_says_whose_baseline_it_uses(client, precision, baseline, differs):
    n = _get(client, precision=precision)["needles"]["published"]
    assert n["baseline"] == baseline and n["reference_baseline"] == 3.53
    note = n["baseline_note"]
    assert note.startswith(f"Baseline {baseline:.2f}:")
    assert ("Not the 3.53" in note) == differs
    if differs:
        assert "SmoothQuant" in note and "own FP16" in note
    if precision == "fp8":
        assert "SmoothQuant" in note and "estimate" not in note.lower() or n["estimate"]


def test_no_developer_notes_leak_into_the_response(client):
    for precision in ("bf16", "fp8", "int8", "int4"):
        body = client.get("/api/quantization", params={"precision": precision}).text
        assert "quantization.toml" not in body and "see comment" not in body


def test_demo_perplexities_are_the_measurement(client):
    d = _get(client)
    q = {v["variant"]: v["perplexity"] for v in demo_quality.quality("main")["variants"]}
    assert {r["precision"]: r["perplexity"] for r in d["demo"]} == {
        p: q[p] for p in ("fp16", "bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4")
    }
    assert d["demo_extra"][0]["perplexity"] == q["int4_per_channel"]
    assert d["demo_info"]["tokens"] > 30_000


def _decode(fmt: str, bits: str, scale: float | None) -> float:
    if fmt in ("bf16", "fp16"):
        u = int(bits, 2)
        return (
            float(np.array([u << 16], np.uint32).view(np.float32)[0])
            if fmt == "bf16"
            else float(np.array([u], np.uint16).view(np.float16)[0])
        )
    if fmt == "fp8":
        s, e, m = int(bits[0]), int(bits[1:5], 2), int(bits[5:], 2)
        v = (m / 8) * 2.0**-6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        return (-v if s else v) * scale
    if fmt in ("nvfp4", "mxfp4"):  # E2M1: bias 1, subnormal 0.5 at exponent 0
        s, e, m = int(bits[0]), int(bits[1:3], 2), int(bits[3])
        v = m * 0.5 if e == 0 else (1 + m / 2) * 2.0 ** (e - 1)
        return (-v if s else v) * scale
    code = int(bits, 2) - (2 ** len(bits) if bits[0] == "1" else 0)
    return code * scale


def test_tile_bits_decode_to_the_stored_values(client):
    tile = _get(client)["tile"]
    widths = {p["precision"]: p["code_bits"] for p in tile["precisions"]}
    assert widths == {"fp16": 16, "bf16": 16, "fp8": 8, "int8": 8, "int4": 4, "nvfp4": 4, "mxfp4": 4}
    for p in tile["precisions"]:
        for r in range(8):
            for c in range(8):
                bits = p["bits"][r][c]
                assert len(bits) == p["code_bits"]
                scale = p["scales"][c] if p["scales"] else None
                assert _decode(p["precision"], bits, scale) == pytest.approx(p["values"][r][c], rel=1e-3, abs=1e-7)


def test_the_tile_is_the_served_models_first_query_matrix(client):
    from inside_llm.api.demo_model import served_model

    tile, served = _get(client)["tile"], served_model("smollm2")
    wq = np.asarray(served.model.layers[0].wq, np.float32)  # [dim_in, q_out]
    assert tile["model"] == served.served and tile["matrix_shape"] == list(wq.shape)
    assert np.array_equal(np.asarray(tile["original"], np.float32), wq[:8, :8])
    if served.served == "smollm2":  # 576 numbers per token in, 9 heads x 64 out; the file's Q4_1, said so
        assert tile["matrix_shape"] == [576, 576] and "Q4_1" in tile["stored_as"]
        assert tile["model_name"] == "SmolLM2-135M-Instruct"


@pytest.mark.parametrize(
    "q,field,words",
    [
        ({"precision": "int3"}, "precision", ("int4", "fp8")),
        ({"batch": 0}, "batch", ("1",)),
        ({"batch": 257}, "batch", ("256",)),
        ({"model": "gpt-9"}, "model", ("llama-3.1-70b",)),
        ({"gpu": "tpu"}, "gpu", ("h100-sxm",)),
    ],
)
def test_bad_input_gets_422_naming_field_and_bound(client, q, field, words):
    err = refusal(client, "/api/quantization", **q)
    assert err["loc"][-1] == field and all(w in err["msg"] for w in words)
    assert client.get("/api/quantization", params={"bogus": 1}).status_code == 422


def test_deterministic(client):
    """The same bytes and ETag twice (its speed is measured by bench/bench_endpoints.py, not here)."""
    a = client.get("/api/quantization")
    b = client.get("/api/quantization")
    assert a.content == b.content and a.headers["etag"] == b.headers["etag"]
    big = {"model": "llama-3.1-405b", "gpu": "h200", "precision": "fp8"}
    assert client.get("/api/quantization", params=big).status_code == 200


def test_published_table_has_sourced_fp4_rows_against_their_own_baseline(client):
    """Issue 16: chapter 8's table gains FP4 rows, each compared with the 16-bit row of its own setting."""
    rows = [r for r in _get(client)["published"] if r["precision"] == "fp4"]
    assert len(rows) >= 2 and all(r["source"] and r["url"].startswith("https://") and not r["estimate"] for r in rows)
    e2m1 = next(r for r in rows if "E2M1" in r["method"])
    assert e2m1["baseline"] == 12.212 and e2m1["relative_change"] == pytest.approx(15.01 / 12.212 - 1)


def test_the_real_model_rows_are_the_stored_measurement(client):
    from inside_llm.sim.quant import real_quality

    r = _get(client)["real"]
    q = real_quality.stored()
    assert r["file_sha256"] == q["file_sha256"] and r["command"].startswith("python scripts/measure_real_model.py")
    assert [x["variant"] for x in r["rows"]] == ["file_q4_1", "int8", "int4", "int3", "int2"]
    assert [x["perplexity"] for x in r["rows"]] == [v["perplexity"] for v in q["variants"]]
    assert "no FP16" in r["rows"][0]["method"] and r["rows"][0]["relative_change"] == 0


def test_fp4_rows_count_their_scales_and_rest_the_published_needle(client):
    """Issue 28 red pen: NVFP4 (E2M1 + an E4M3 scale per 16 + an FP32 per tensor) and MXFP4 (E2M1 + an E8M0 scale per
    32, OCP MX v1.0) in chapter 8, bits computed from the block layout; no published LLaMA-65B row, so no needle."""
    rows = {r["precision"]: r for r in _get(client)["rows"]}
    assert rows["nvfp4"]["bits_per_weight"] == 4 + 8 / 16 and rows["mxfp4"]["bits_per_weight"] == 4 + 8 / 32
    assert (
        rows["int4"]["weights_gb"]
        < rows["mxfp4"]["weights_gb"]
        < rows["nvfp4"]["weights_gb"]
        < rows["fp8"]["weights_gb"]
    )
    tile = {p["precision"]: p for p in _get(client)["tile"]["precisions"]}
    n = 576 * 576 if _get(client)["tile"]["matrix_shape"] == [576, 576] else 256 * 256
    assert tile["nvfp4"]["bits_per_weight"] == pytest.approx(4.5 + 32 / n) and tile["mxfp4"]["bits_per_weight"] == 4.25
    for fmt in ("nvfp4", "mxfp4"):
        d = _get(client, precision=fmt)
        assert d["needles"]["published"] is None and d["needles"]["served"] is None
        assert d["needles"]["demo"]["precision"] == fmt and d["needles"]["demo"]["bits_per_weight"] > 4.25 - 1e-9
        assert "E2M1" in " ".join(d["math"]["weights_gb"]["assumptions"])
