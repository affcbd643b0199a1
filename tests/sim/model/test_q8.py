"""The int8 weight format and its numba kernel (sim/model/q8.py) against a numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

from inside_llm.sim.model import q8

# float32 sums of up to 1,536 products, in another order than numpy's float64 reference: 2e-6 of the
# largest output is ~30x the rounding seen (6e-8), and far below one int8 step of the weights (1/254).
RTOL = 2e-6


@pytest.fixture(scope="module")
def mat():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((96, 40)).astype(np.float32)  # [in, out]
    w[:, 3] = 0  # an all-zero output column: scale 0, codes 0
    return w, q8.Q8Matrix.from_float(w)


def test_quantize_rounds_each_row_to_255_levels(mat):
    w, m = mat
    assert m.q.shape == (40, 96) and m.q.dtype == np.int8 and m.s.shape == (40,)
    assert m.nbytes == 40 * 96 + 40 * 4 and m.shape == (96, 40)
    back = np.asarray(m)  # [in, out]
    assert back.shape == w.shape
    assert (np.abs(back - w) <= m.s / 2 + 1e-7).all()  # at most half a step off
    assert np.abs(m.q).max() == 127 and not back[:, 3].any()


@pytest.mark.parametrize("n", [1, 2, 3, 8, 37])
def test_kernel_equals_numpy_reference(mat, n):
    _, m = mat
    x = np.random.default_rng(n).standard_normal((n, 96)).astype(np.float32)
    ref = x.astype(np.float64) @ q8.dequantize(m.q, m.s).astype(np.float64)
    got = x @ m
    assert got.shape == (n, 40) and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=0, atol=RTOL * np.abs(ref).max())


def test_a_row_gives_the_same_bits_alone_or_in_any_batch(mat):
    _, m = mat
    x = np.random.default_rng(1).standard_normal((8, 96)).astype(np.float32)
    batch = x @ m
    for i in range(8):
        np.testing.assert_array_equal((x[i : i + 1] @ m)[0], batch[i])
        np.testing.assert_array_equal(x[i] @ m, batch[i])  # a vector
    np.testing.assert_array_equal((x[2:5] @ m), batch[2:5])


@pytest.mark.parametrize("k_in", [96, 576, 1536])
def test_both_kernels_give_a_row_the_same_bits_in_any_batch_and_agree_with_numpy(k_in):
    """The row kernel (x @ W: one row alone, or two per pass) and the tile kernel (W.wide(x)) at the model's
    input widths: each batch-invariant, each within rounding of the float64 product."""
    rng = np.random.default_rng(k_in)
    m = q8.Q8Matrix.from_float(rng.standard_normal((k_in, 64)).astype(np.float32))
    x = rng.standard_normal((9, k_in)).astype(np.float32)
    ref = x.astype(np.float64) @ q8.dequantize(m.q, m.s).astype(np.float64)
    for product in (lambda a: a @ m, m.wide):
        batch = product(x)
        np.testing.assert_allclose(batch, ref, rtol=0, atol=RTOL * np.abs(ref).max())
        for i in range(9):
            np.testing.assert_array_equal(product(x[i : i + 1])[0], batch[i])
        np.testing.assert_array_equal(product(x[3:5]), batch[3:5])
        np.testing.assert_array_equal(product(x[1:8]), batch[1:8])


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="multiple of 4"):
        q8.Q8Matrix.from_float(np.ones((8, 6), np.float32))
    with pytest.raises(ValueError, match="int8 codes"):
        q8.Q8Matrix(np.ones((4, 8), np.float32), np.ones(4, np.float32))


def test_checksum_sees_zeroed_shuffled_and_truncated_data(tmp_path):
    data = np.random.default_rng(2).standard_normal(100_003).astype(np.float32).tobytes() + b"xyz"
    base = q8.checksum(data)
    assert q8.checksum(data) == base and len(base) == 16
    zeroed = bytearray(data)
    zeroed[4000:8000] = bytes(4000)
    swapped = data[8:16] + data[:8] + data[16:]
    assert len({base, q8.checksum(bytes(zeroed)), q8.checksum(swapped), q8.checksum(data[:-1])}) == 4
    f, g = tmp_path / "panel.bin", tmp_path / "zeroed.bin"
    f.write_bytes(data)
    g.write_bytes(zeroed)
    assert q8.file_checksum(f) == q8.file_checksum(f) != q8.file_checksum(g)


# ---- the rest of a served layer (norms, RoPE, one-query attention) against transformer_ops -----------------


def test_layer_steps_equal_the_numpy_reference_and_each_row_is_its_own():
    from inside_llm.sim.model.transformer_ops import apply_rope, attend, rms_norm, rope_tables

    rng = np.random.default_rng(3)
    H, Hkv, hd, N = 6, 2, 8, 5
    x = rng.standard_normal((N, 24)).astype(np.float32)
    g = rng.standard_normal(24).astype(np.float32)
    got = q8.rms_norm_rows(x, g, 1e-5)
    np.testing.assert_allclose(got, rms_norm(x, g, 1e-5), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(q8.rms_norm_rows(x[2:3], g, 1e-5), got[2:3])  # a row alone: the same bits

    qkv = rng.standard_normal((N, (H + 2 * Hkv) * hd)).astype(np.float32)
    pos = np.arange(7, 7 + N)
    cos, sin = rope_tables(pos, hd, 10000.0)
    q, k, v = (a.transpose(1, 0, 2) for a in q8.split_rope(qkv, cos, sin, H, Hkv, hd))  # [heads, N, hd]
    nq, nkv = H * hd, Hkv * hd
    np.testing.assert_allclose(q, apply_rope(qkv[:, :nq].reshape(N, H, hd).transpose(1, 0, 2), cos, sin), atol=1e-6)
    want_k = apply_rope(qkv[:, nq : nq + nkv].reshape(N, Hkv, hd).transpose(1, 0, 2), cos, sin)
    np.testing.assert_allclose(k, want_k, atol=1e-6)
    np.testing.assert_array_equal(v, qkv[:, nq + nkv :].reshape(N, Hkv, hd).transpose(1, 0, 2))

    keys = rng.standard_normal((Hkv, 12, hd)).astype(np.float32)  # positions 0..11
    values = rng.standard_normal((Hkv, 12, hd)).astype(np.float32)
    table = np.array([2, 0, 1])  # positions 0-3 in page 2, 4-7 in page 0, 8-11 in page 1
    kp, vp = (np.stack([a[:, 4 * table.tolist().index(b) :][:, :4] for b in range(3)]) for a in (keys, values))
    for p, window in ((11, 100), (11, 5), (9, 3)):  # every key seen; a window; a query before the last key
        want, _ = attend(q[:, :1], keys[:, : p + 1], values[:, : p + 1], np.array([p]), np.arange(p + 1), window)
        for k_, v_, t_, page in ((keys[None], values[None], np.zeros(1, np.int64), 12), (kp, vp, table, 4)):
            out = np.empty(nq, np.float32)
            q8.attend_one(np.ascontiguousarray(q[:, 0]), k_, v_, t_, page, p, window, out)
            np.testing.assert_allclose(out, want[0], rtol=1e-5, atol=1e-6)
