"""The int8 weight format and its numba kernel (sim/q8.py) against a numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

from inside_llm.sim import q8

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
