"""Quantization: format facts (E4M3 grid, bf16 rounding), group-wise ints, bytes, perplexity table."""

import numpy as np
import pytest

from inside_llm.sim.quant import quantization as q


def _weights(seed=0, shape=(32, 256)):
    return (np.random.default_rng(seed).standard_t(4, size=shape) * 0.02).astype(np.float32)


# ---- bytes -----------------------------------------------------------------------------------------


def test_bits_per_weight_include_scales():
    assert q.bits_per_weight("bf16") == q.bits_per_weight("fp16") == 16
    assert q.bits_per_weight("int4", 128) == 4.125
    assert q.bits_per_weight("int8", 128) == 8.125
    # issue 16 item 6: asymmetric INT4 packs its zero point in 4 bits (GPTQ/AWQ qzeros), not an fp16
    assert q.bits_per_weight("int4", 128, symmetric=False) == 4 + 20 / 128
    assert q.bits_per_weight("int4", 0, row_length=8192) == 4 + 16 / 8192
    assert q.bits_per_weight("fp8", row_length=8192) == 8 + 32 / 8192
    # FP4 with micro-block scales: NVFP4 E4M3 per 16 + FP32 per tensor; MXFP4 E8M0 per 32 (OCP MX v1.0)
    assert q.bits_per_weight("nvfp4", tensor_size=576 * 576) == 4 + 8 / 16 + 32 / (576 * 576)
    assert q.bits_per_weight("mxfp4", tensor_size=576 * 576) == 4 + 8 / 32
    assert q.bytes_per_weight("int4") == pytest.approx(0.515625)
    d = q.bytes_per_weight_math("int4")
    assert d.value == q.bytes_per_weight("int4") and d.sources and "group_size" in d.formula


def test_unknown_precision_rejected():
    with pytest.raises(ValueError):
        q.quantize_dequantize(np.ones((2, 2)), "int5")


# ---- E4M3 ------------------------------------------------------------------------------------------


def test_e4m3_grid_facts():
    g = q.e4m3_grid()
    assert len(g) == 127 and len(np.unique(g)) == 127  # 0..0x7E; 0x7F is NaN
    assert g.max() == 448.0 and np.all(np.diff(g) > 0)
    assert g[1] == 2.0**-9  # smallest subnormal
    assert 2.0**-6 in g and 240.0 in g and 464.0 not in g
    signed = np.unique(np.concatenate([g, -g]))
    assert len(signed) == 253  # +0 and -0 are one value


def test_e4m3_round_trip_is_exact():
    g = q.e4m3_grid()
    both = np.concatenate([g, -g])
    np.testing.assert_array_equal(q.round_e4m3(both), both)


def test_e4m3_rounds_to_nearest_even_and_saturates():
    g = q.e4m3_grid()
    x = np.random.default_rng(1).uniform(0, 460, 5000) * np.random.default_rng(2).choice([1e-3, 1e-1, 1], 5000)
    got = q.round_e4m3(x)
    nearest = np.abs(np.minimum(x, 448)[:, None] - g[None, :]).min(axis=1)
    np.testing.assert_allclose(np.abs(got - np.minimum(x, 448)), nearest, rtol=0, atol=1e-15)
    # ties: midpoints go to the neighbour with an even mantissa code
    assert q.round_e4m3(1.0625) == 1.0 and q.round_e4m3(1.1875) == 1.25
    assert q.round_e4m3(2.0**-10) == 0.0 and q.round_e4m3(3 * 2.0**-10) == 2.0**-8
    assert q.round_e4m3(1e6) == 448.0 and q.round_e4m3(-1e6) == -448.0


def test_e4m3_fields():
    assert q.e4m3_fields(448.0) == (0, 15, 6)
    assert q.e4m3_fields(1.0) == (0, 7, 0)
    assert q.e4m3_fields(-(2.0**-9)) == (1, 0, 1)
    for code in range(0x7F):
        s, e, m = q.e4m3_fields(float(q.e4m3_grid()[code]))
        assert (e << 3 | m) == code


# ---- bf16 / fp16 ----------------------------------------------------------------------------------


def test_bf16_relative_error_and_ties():
    x = np.random.default_rng(3).standard_normal(20000).astype(np.float32) * 10.0 ** np.random.default_rng(4).integers(
        -8, 8, 20000
    )
    r = q.round_bf16(x)
    assert np.all(np.abs(r - x) <= np.abs(x) * 2.0**-8)
    assert np.all(r.view(np.uint32) & 0xFFFF == 0)
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even -> 1; 1 + 3*2^-8 -> 1 + 2^-6
    assert q.round_bf16(np.float32(1 + 2**-8)) == 1.0
    assert q.round_bf16(np.float32(1 + 3 * 2**-8)) == np.float32(1 + 2**-6)


def test_fp16_is_numpy_half():
    w = _weights()
    np.testing.assert_array_equal(q.quantize_dequantize(w, "fp16"), w.astype(np.float16).astype(np.float32))


# ---- integers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("symmetric, levels", [(True, 15), (False, 16)])
def test_int4_has_at_most_16_levels_per_group(symmetric, levels):
    w = _weights()
    wq = q.quantize_dequantize(w, "int4", group_size=64, symmetric=symmetric)
    for grp in wq.reshape(w.shape[0], -1, 64).reshape(-1, 64):
        assert len(np.unique(grp)) <= levels
    codes, scales, zeros = q.int_quantize(w, 4, 64, symmetric)
    assert codes.min() >= (-7 if symmetric else 0) and codes.max() <= (7 if symmetric else 15)
    assert scales.shape == (32, 4, 1)


def test_int_groups_follow_axis():
    w = _weights()
    a = q.quantize_dequantize(w, "int4", 64, axis=-1)
    b = q.quantize_dequantize(w.T.copy(), "int4", 64, axis=0).T
    np.testing.assert_array_equal(a, b)


def test_symmetric_int_error_bounded_by_half_step():
    w = _weights()
    wq = q.quantize_dequantize(w, "int8", 128)
    step = np.abs(w).reshape(32, 2, 128).max(-1, keepdims=True) / 127
    assert np.all(np.abs(wq - w).reshape(32, 2, 128) <= step * 0.5 * 1.01 + 1e-9)


def test_errors_shrink_with_more_bits():
    w = _weights()
    err = {p: q.weight_error(w, q.quantize_dequantize(w, p))["rms"] for p in q.PRECISIONS}
    assert err["int4"] > err["fp8"] > err["int8"] > err["bf16"] > err["fp16"] > 0
    assert err["int4"] / err["int8"] > 8  # 4 fewer bits: ~16x the step


def test_quantize_weights_selects_projection_matrices():
    w = {
        "layers.0.attn.wq": _weights(1, (16, 128)),
        "layers.0.attn_norm": np.ones(16, np.float32),
        "tok_embeddings": _weights(2, (16, 128)),
        "layers.0.mlp.w_down": _weights(3, (16, 128)),
    }
    out = q.quantize_weights(w, "int4")
    assert out["tok_embeddings"] is w["tok_embeddings"] and out["layers.0.attn_norm"] is w["layers.0.attn_norm"]
    for k in ("layers.0.attn.wq", "layers.0.mlp.w_down"):
        assert not np.array_equal(out[k], w[k]) and out[k].shape == w[k].shape


# ---- perplexity --------------------------------------------------------------------------------------


def test_perplexity_helpers():
    assert q.perplexity(np.full(10, np.log(7.0))) == pytest.approx(7.0)
    logits = np.zeros((3, 5))  # uniform over 5 tokens
    assert q.perplexity(q.nll_from_logits(logits, np.array([0, 3, 4]))) == pytest.approx(5.0)
    assert q.perplexity_math(np.full(4, 1.0)).value == pytest.approx(np.e)
    with pytest.raises(ValueError):
        q.perplexity(np.array([]))


# ---- the tile ----------------------------------------------------------------------------------------


def test_weight_tile_bits_decode_to_the_values():
    w = (np.random.default_rng(0).standard_t(4, size=(256, 12)) * 0.02).astype(np.float32)
    t = q.weight_tile(w, tile=8, group_size=128)
    assert t["shape"] == [8, 8] and t["matrix_shape"] == [256, 12]
    assert [r["precision"] for r in t["precisions"]] == list(q.TILE_FORMATS)
    by = {r["precision"]: r for r in t["precisions"]}
    for r in by.values():
        assert np.array(r["values"]).shape == (8, 8)
        assert all(len(b) == r["code_bits"] for row in r["bits"] for b in row)
    assert by["fp16"]["code_bits"] == 16 and by["fp8"]["code_bits"] == 8 and by["int4"]["code_bits"] == 4
    # fp16 bits are the half-precision pattern of the value
    v = np.array([[int(b, 2) for b in row] for row in by["fp16"]["bits"]], np.uint16).view(np.float16)
    assert np.array_equal(v.astype(np.float32), np.array(by["fp16"]["values"], np.float32))
    # int4: two's-complement code x the column's first-group scale is the value
    codes = np.array([[int(b, 2) - 16 * (b[0] == "1") for b in row] for row in by["int4"]["bits"]])
    assert np.allclose(codes * np.array(by["int4"]["scales"]), by["int4"]["values"], atol=1e-7)
    # fp8: the column's largest weight lands on E4M3's max (1111 110 = 448)
    col = int(np.argmax(np.abs(w[:8, 0]))) if np.abs(w[:8, 0]).max() == np.abs(w[:, 0]).max() else None
    if col is not None:
        assert by["fp8"]["bits"][col][0][1:] == "1111110"
    assert (
        by["int4"]["bits_per_weight"] == 4.125
        and by["int4"]["error"]["relative_rms"] > by["int8"]["error"]["relative_rms"]
    )


# ---- published perplexities -----------------------------------------------------------------------


def test_published_entries_have_sources_and_fields():
    rows = q.published_perplexities()
    assert len(rows) >= 8
    for r in rows:
        assert r["source"] and r["url"].startswith("https://") and r["precision"] in (*q.PRECISIONS, "fp4")
        assert isinstance(r["estimate"], bool) and r["perplexity"] > 1
        assert r["context_tokens"] > 0 or r.get("context_note")
    assert {r["precision"] for r in q.published_perplexities("LLaMA-65B")} >= {"fp16", "fp8", "int8", "int4"}
    assert [r for r in rows if r["precision"] == "fp8"] and all(r["estimate"] for r in rows if r["precision"] == "fp8")


def test_published_fp16_beats_quantized_within_each_table():
    rows = q.published_perplexities()
    keys = {(r["model"], r["source_key"]) for r in rows}
    for model, key in keys:
        table = [r for r in rows if r["model"] == model and r["source_key"] == key]
        base = [r["perplexity"] for r in table if r["precision"] == "fp16"]
        base = base or [r["baseline"] for r in table if "baseline" in r]
        assert len(base) == 1, (model, key)
        for r in table:
            if r["precision"] != "fp16":
                assert r["perplexity"] > base[0], r
    ll = {(r["source_key"], r["method"]): r["perplexity"] for r in q.published_perplexities("LLaMA-65B")}
    assert ll[("gptq-readme", "none (16-bit baseline)")] == 3.53


def test_a_ragged_last_group_is_quantized_on_its_own():
    """576 input rows in groups of 128: four full groups and one of 64, each with its own scale."""
    w = np.random.default_rng(1).standard_normal((576, 6)).astype(np.float32)
    w[520, 2] = 9.0  # an outlier in the short last group only
    codes, scale, _ = q.int_quantize(w, 4, 128, axis=0)
    assert codes.shape == w.shape and scale.shape == (6, 5, 1)
    assert scale[2, 4, 0] == pytest.approx(9.0 / 7, rel=1e-3) and scale[2, 3, 0] < 1.0
    wq = q.quantize_dequantize(w, "int4", 128, axis=0)
    assert wq.shape == w.shape and wq[520, 2] == pytest.approx(9.0, rel=1e-3)
    full = q.quantize_dequantize(w[:512], "int4", 128, axis=0)
    assert np.array_equal(wq[:512], full)  # the full groups are unchanged by the ragged one
    assert np.abs(wq[512:] - w[512:]).max() <= scale[:, 4, 0].max() / 2 + 1e-6


# ---- FP4 (E2M1) with block scales --------------------------------------------------------------------


def test_e2m1_rounds_to_nearest_even_and_saturates():
    x = np.array([0.24, 0.25, 0.26, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.3, -100.0])
    assert q.round_e2m1(x).tolist() == [0, 0, 0.5, 1, 1, 2, 2, 4, 4, 6, -0.5, -6]
    assert sorted({abs(v) for v in q.round_e2m1(np.linspace(-9, 9, 2001))}) == list(q.E2M1_GRID)
    assert [q.e2m1_bits(v) for v in (0.5, 1.5, 3.0, -6.0)] == ["0001", "0011", "0101", "1111"]


def test_nvfp4_has_an_e4m3_scale_per_16_times_one_fp32_per_tensor():
    w = _weights(3, (64, 48))
    codes, scale = q.fp4_quantize(w, "nvfp4", axis=0)
    s_tensor = np.float32(np.abs(w).max() / (6 * 448))
    assert scale.shape == (48, 4, 1)  # 64 input rows = 4 blocks of 16 per output column
    block = scale / float(s_tensor)
    assert np.allclose(q.round_e4m3(block), block, rtol=1e-9) and block.max() <= 448
    assert set(np.abs(codes).ravel()) <= set(q.E2M1_GRID)
    wq = q.quantize_dequantize(w, "nvfp4", axis=0)
    assert np.allclose(wq, (codes.T.reshape(48, 4, 16) * scale).reshape(48, 64).T, atol=1e-7)
    # finer blocks than INT4's 128: a smaller error
    assert (
        q.weight_error(w, wq)["relative_rms"]
        < q.weight_error(w, q.quantize_dequantize(w, "int4", axis=0))["relative_rms"]
    )


def test_mxfp4_scale_is_a_power_of_two_per_32_from_the_block_max():
    w = _weights(4, (96, 8))
    codes, scale = q.fp4_quantize(w, "mxfp4", axis=0)
    assert scale.shape == (8, 3, 1)
    amax = np.abs(w.T.reshape(8, 3, 32)).max(axis=-1, keepdims=True)
    assert np.array_equal(scale, 2.0 ** (np.floor(np.log2(amax)) - 2))  # OCP MX v1.0: 2^(floor(log2 amax) - emax)
    assert np.abs(codes).max() <= 6 and set(np.abs(codes).ravel()) <= set(q.E2M1_GRID)
