"""Int8 weight rows and the numba kernels that multiply by them: what the server decodes from.

Format ("q8"): a matrix W [in, out] used as y = x @ W is stored as codes q [out, in] int8 (one row per output
feature, contiguous along the input) and scales s [out] float32: W[k, j] = q[j, k] * s[j]. Each output row is
rounded symmetrically to the nearest of 255 levels (s = max|w| / 127). About 1 byte per weight, against 4 for
float32: a decode step reads 135 MB instead of 538 MB.

Per-32-input block scales (Q8_0's layout, 151 MB a step) were measured first: 7 of 12 test questions kept the
float32 path's greedy answer for 32 tokens against 6 of 12 with per-row scales, but numba/LLVM does not
vectorise the 32-long scaling loops (10x slower conversion), so per-row scales it is: +1.26% perplexity by
chapter 8's harness (docs/benchmarks.md, design-as-built).

Two kernels, both batch-invariant (a row's bits never depend on the other rows) but with other bits than each
other, so the model chooses by what a row is, never by N (sim/model/smollm.ServedSmolLM._block): `x @ W`
(_matmul_rows) for decoding, check passes and prompt pieces of at most 64 tokens; `W.wide(x)` (_matmul) for
longer prompt pieces. Row kernel: each code converted to float32 in a register where it is used, for one input
row, or for two at a time (each conversion serves both): 1.6x less CPU than the tile kernel at one row (18.6 vs
30.1 CPU-ms for all matrix products of a step, same process, alternating, best of 5, load 15), 1.3x at two
(24.1 vs 32.0), 1.1x at eight (67.7 vs 73.6), 0.78x at sixteen (143.5 vs 112.6).

Tile kernel (matmul, wide): output rows are split in tiles of 4 over the threads (numba prange: both cores work on one
step); each tile's 4 weight rows are converted to float32 once (code x scale, in L1) and the N input rows are
then dotted with them two at a time (8 sums in one loop: each weight loaded from L1 serves two rows; a lone or
odd last row is paired with itself). Every output element is computed by the same instructions in the same
order whatever N is, whichever partner it has and whichever thread takes its tile, so a row's result is
bit-identical alone or in any batch: batching cannot change an answer. The float conversion is done once per weight per step, so N rows
share it (and the weight read). Measured and not kept (2-core AVX2 EPYC, one thread, alternating in one run):
converting each code where it is used instead of through the buffer (1.2-1.7x faster while the weights sit in
cache, 1.6x slower streaming the model's 135 MB from memory); int16 activations times int8 codes summed in
int32 (numba's LLVM emits no vpmaddwd for it: 2.3x slower); explicit 8-lane sums in a fixed order, which would
make the bits independent of the compiler (not vectorised: 10x slower). Also measured (issue 25, all matrix products of one
step, 1 thread, best of 4 alternating in one process, load 13; CPU-ms at N = 1 / 2 / 8 / 16 rows): this kernel
26.3 / 29.3 / 72.6 / 82.3; each code converted in a register and multiplied into four input rows' sums (no
buffer) 28.6 / 28.8 / 60.0 / 101.9; one or two input rows per register conversion 20.6 / 22.5 / 54.9 / 125.5
(another run, load 14; one and two rows give the same bits as each other, four give other bits, so kernels can
be chosen by N only within such a family). int16 activations times int8 codes summed in int32 (LLVM 20 emits
vpmaddwd; exact, so any kernels could be mixed) 18.7 at one row but 72.0 at eight.

Compiled with cache=True: the first process compiles (~10 s on 2 cores) and writes the machine code to
NUMBA_CACHE_DIR (modelfile points it at the model cache folder); later processes load it in milliseconds.
"""

from __future__ import annotations

import os

# numba runs prange on OpenMP threads here. While one thread waits for its sibling, libgomp spins by default;
# on a shared 2-core machine the sibling is often descheduled, and spinning made a batch-1 step cost 614
# CPU-ms instead of 44 (bench roof, load 20). Waiting passively costs the same CPU as one thread (measured
# 47-53 vs 45-48 CPU-ms). Must be set before numba first starts its threads; OMP_WAIT_POLICY=active overrides.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402
from numba import get_num_threads, njit, prange  # noqa: E402

TILE = 4  # output rows per tile (the kernel's 4 dot products share each load of x)
PIECES_PER_THREAD = 4  # parts of one product per thread: a thread that was descheduled holds back less
_KW = {"cache": True, "fastmath": True, "boundscheck": False, "nogil": True}


def quantize(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """W [in, out] float -> (codes [out, in] int8, scales [out] float32), symmetric, one scale per output row."""
    w = np.asarray(w, np.float32)
    rows = np.ascontiguousarray(w.T)  # [out, in]
    s = (np.abs(rows).max(-1) / 127).astype(np.float32)  # [out]
    safe = np.where(s > 0, s, 1).astype(np.float32)
    q = np.clip(np.rint(rows / safe[:, None]), -127, 127).astype(np.int8)
    return q, s


def dequantize(q: np.ndarray, s: np.ndarray) -> np.ndarray:
    """(codes [out, in], scales [out]) -> W [in, out] float32 (the numpy reference)."""
    return np.ascontiguousarray((q.astype(np.float32) * s[:, None]).T)


@njit(**_KW)
def _tiles(x, q, s, out, t0, t1, buf):
    """Output columns 4*t0 .. 4*t1 of out [N, M] = x [N, K] @ W (codes q [M, K] int8, scales s [M])."""
    n_rows, k_in = x.shape
    b0 = buf[0]
    b1 = buf[1]
    b2 = buf[2]
    b3 = buf[3]
    for t in range(t0, t1):
        j = t * 4
        for r in range(4):
            qr = q[j + r]
            br = buf[r]
            for k in range(k_in):
                br[k] = np.float32(qr[k])
        for n in range(0, n_rows, 2):  # two input rows per pass over the tile: each weight loaded serves both
            m = min(n + 1, n_rows - 1)  # an odd last row is its own partner
            xr = x[n]
            xm = x[m]
            a0 = np.float32(0.0)
            a1 = np.float32(0.0)
            a2 = np.float32(0.0)
            a3 = np.float32(0.0)
            c0 = np.float32(0.0)
            c1 = np.float32(0.0)
            c2 = np.float32(0.0)
            c3 = np.float32(0.0)
            for k in range(k_in):
                xv = xr[k]
                yv = xm[k]
                w0 = b0[k]
                w1 = b1[k]
                w2 = b2[k]
                w3 = b3[k]
                a0 += xv * w0
                a1 += xv * w1
                a2 += xv * w2
                a3 += xv * w3
                c0 += yv * w0
                c1 += yv * w1
                c2 += yv * w2
                c3 += yv * w3
            out[n, j] = a0 * s[j]
            out[n, j + 1] = a1 * s[j + 1]
            out[n, j + 2] = a2 * s[j + 2]
            out[n, j + 3] = a3 * s[j + 3]
            out[m, j] = c0 * s[j]
            out[m, j + 1] = c1 * s[j + 1]
            out[m, j + 2] = c2 * s[j + 2]
            out[m, j + 3] = c3 * s[j + 3]


@njit(**_KW)
def _row_dots(x, q, s, out, j0, j1):
    """Output columns j0 .. j1 of out [N, M] = x [N, K] @ W, each code converted to float32 in a register where it
    is used: one input row at a time (N = 1) or two per pass (each conversion serves both; a lone last row pairs
    with itself). One row, and each of a pair, is summed in the same order (measured: the same bits)."""
    n_rows, k_in = x.shape
    if n_rows == 1:
        xr = x[0]
        for j in range(j0, j1):
            qr = q[j]
            a = np.float32(0.0)
            for k in range(k_in):
                a += xr[k] * np.float32(qr[k])
            out[0, j] = a * s[j]
        return
    for j in range(j0, j1):
        qr = q[j]
        for n in range(0, n_rows, 2):
            m = min(n + 1, n_rows - 1)
            xr = x[n]
            xm = x[m]
            a = np.float32(0.0)
            c = np.float32(0.0)
            for k in range(k_in):
                w = np.float32(qr[k])
                a += xr[k] * w
                c += xm[k] * w
            out[m, j] = c * s[j]
            out[n, j] = a * s[j]


@njit(parallel=True, **_KW)
def _matmul_rows(x, q, s, out, pieces):
    """out = x @ W by _row_dots over `pieces` parts of the output columns, run on the threads."""
    m = q.shape[0]
    for p in prange(pieces):
        _row_dots(x, q, s, out, p * m // pieces, (p + 1) * m // pieces)


@njit(parallel=True, **_KW)
def _matmul(x, q, s, out, pieces):
    """out = x @ W over `pieces` parts of the output columns, run on the threads (M % 4 == 0)."""
    ntiles = q.shape[0] // 4
    for p in prange(pieces):
        buf = np.empty((4, x.shape[1]), np.float32)
        _tiles(x, q, s, out, p * ntiles // pieces, (p + 1) * ntiles // pieces, buf)


# ---- the rest of a served layer, compiled too (sim/model/smollm.ServedSmolLM) ------------------------------
# Between its 4 matrix products a layer made ~20 numpy calls on tiny arrays (norms, RoPE, attention over a few
# dozen keys): at batch 1 that Python and numpy overhead was a third of a step's CPU time. Each function
# below does one of those steps in one call; every row's result depends on that row alone (the same loop
# for each row), so batching still changes no answer.


@njit(**_KW)
def rms_norm_rows(x, w, eps):
    """x [N, D] scaled to unit root-mean-square, times w [D] (transformer_ops.rms_norm; float64 sum)."""
    n_rows, d = x.shape
    out = np.empty((n_rows, d), np.float32)
    for n in range(n_rows):
        ss = 0.0
        for i in range(d):
            ss += np.float64(x[n, i]) * np.float64(x[n, i])
        r = np.float32(1.0 / np.sqrt(ss / d + eps))
        for i in range(d):
            out[n, i] = x[n, i] * r * w[i]
    return out


@njit(**_KW)
def split_rope(qkv, cos, sin, n_heads, n_kv, hd):
    """qkv [N, (H + 2 Hkv) hd] -> q [N, H, hd], k, v [N, Hkv, hd] (each token's heads contiguous), q and k
    rotated by RoPE's interleaved pairs at the angles cos, sin [N, hd/2] (transformer_ops.apply_rope)."""
    n_rows = qkv.shape[0]
    q = np.empty((n_rows, n_heads, hd), np.float32)
    k = np.empty((n_rows, n_kv, hd), np.float32)
    v = np.empty((n_rows, n_kv, hd), np.float32)
    half = hd // 2
    for n in range(n_rows):
        for h in range(n_heads + n_kv):
            base = h * hd
            dst = q[n, h] if h < n_heads else k[n, h - n_heads]
            for i in range(half):
                x0 = qkv[n, base + 2 * i]
                x1 = qkv[n, base + 2 * i + 1]
                c = cos[n, i]
                s = sin[n, i]
                dst[2 * i] = x0 * c - x1 * s
                dst[2 * i + 1] = x0 * s + x1 * c
        vbase = (n_heads + n_kv) * hd
        for h in range(n_kv):
            for i in range(hd):
                v[n, h, i] = qkv[n, vbase + h * hd + i]
    return q, k, v


@njit(**_KW)
def attend_one(q, k, v, table, page, p, window, out):
    """One query per head, q [H, hd], at position p, over the keys/values of positions p - window < j <= p
    (transformer_ops.attend), read where they lie: position j is slot j % page of page table[j // page] of
    k, v [pages, Hkv, page, hd] (a KV cache's own buffers, no gathered copy). The heads of one KV group read
    each key once. Writes out [H hd]."""
    n_heads, hd = q.shape
    n_kv = k.shape[1]
    group = n_heads // n_kv
    scale = np.float32(hd**-0.5)
    first = max(0, p - window + 1)
    n_keys = p + 1 - first
    w = np.empty((group, n_keys), np.float32)
    acc = np.empty(hd, np.float32)
    for kh in range(n_kv):
        for j in range(n_keys):
            pos = first + j
            kj = k[table[pos // page], kh, pos % page]
            for g in range(group):
                qh = q[kh * group + g]
                d = np.float32(0.0)
                for i in range(hd):
                    d += qh[i] * kj[i]
                w[g, j] = d * scale
        for g in range(group):
            top = -np.inf
            for j in range(n_keys):
                top = max(top, w[g, j])
            total = np.float32(0.0)
            for j in range(n_keys):
                e = np.float32(np.exp(w[g, j] - top))
                w[g, j] = e
                total += e
            acc[:] = 0.0
            for j in range(n_keys):
                pos = first + j
                wj = w[g, j] / total
                vj = v[table[pos // page], kh, pos % page]
                for i in range(hd):
                    acc[i] += wj * vj[i]
            h = kh * group + g
            for i in range(hd):
                out[h * hd + i] = acc[i]


@njit(parallel=True, **_KW)
def _checksum(words, chunk):
    """Per-chunk Fletcher-style sums of uint64 words (order-sensitive), folded in order: one uint64."""
    n = words.size
    nchunks = (n + chunk - 1) // chunk
    part = np.empty(nchunks, np.uint64)
    for c in prange(nchunks):
        a = np.uint64(0)
        b = np.uint64(0)
        for i in range(c * chunk, min(n, (c + 1) * chunk)):
            a += words[i]
            b += a
        part[c] = b ^ (a * np.uint64(0x9E3779B97F4A7C15))
    h = np.uint64(1469598103934665603)
    for c in range(nchunks):
        h = (h ^ part[c]) * np.uint64(1099511628211)
    return h


def checksum(data) -> str:
    """A fast 64-bit checksum of a buffer (bytes, bytearray, memoryview or array), hex: catches zeroed,
    truncated or shuffled data (not an adversary: the GGUF itself is checked by sha256)."""
    raw = np.frombuffer(memoryview(data).cast("B"), np.uint8)
    head, tail = raw[: raw.size - raw.size % 8], raw[raw.size - raw.size % 8 :]
    h = int(_checksum(head.view(np.uint64), 1 << 17))
    for i, byte in enumerate(tail.tolist()):  # the last < 8 bytes
        h = ((h ^ (byte << (8 * i))) * 1099511628211) % (1 << 64)
    return f"{h:016x}"


FILE_PIECE = 32 << 20  # bytes read at a time by file_checksum (part of its definition: keep it fixed)


def file_checksum(path) -> str:
    """A checksum of a file's bytes: read in pieces of FILE_PIECE bytes (not memory-mapped, so it adds nothing
    to the RSS), each piece's checksum() folded in order."""
    buf = bytearray(FILE_PIECE)
    view = memoryview(buf)
    h = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h = ((h ^ int(checksum(view[:n]), 16)) * 1099511628211) % (1 << 64)
    return f"{h:016x}"


class Q8Matrix:
    """W [in, out] in the q8 format: `x @ W` runs the kernel; .shape, .nbytes (what one product reads)."""

    __array_ufunc__ = None  # so that `x @ m` calls __rmatmul__

    def __init__(self, q: np.ndarray, s: np.ndarray):
        if q.dtype != np.int8 or s.dtype != np.float32 or q.ndim != 2 or s.shape != (q.shape[0],):
            raise ValueError("q8 needs int8 codes [out, in] and float32 scales [out]")
        if q.shape[0] % TILE:
            raise ValueError(f"output width {q.shape[0]} is not a multiple of {TILE}")
        self.q, self.s = q, s
        self.shape = (q.shape[1], q.shape[0])
        self.ndim, self.size, self.dtype = 2, q.size, np.dtype(np.float32)
        self.nbytes = q.nbytes + s.nbytes

    @classmethod
    def from_float(cls, w: np.ndarray) -> Q8Matrix:
        return cls(*quantize(w))

    def __rmatmul__(self, x: np.ndarray) -> np.ndarray:
        """x @ W by the row kernel (decoding, checks, short prompt pieces: the bits of a row never depend on N)."""
        return self._product(x, _matmul_rows)

    def wide(self, x: np.ndarray) -> np.ndarray:
        """x @ W by the tile kernel (long prompt pieces: faster from about 16 rows; other bits than `@`, the same
        bits for a row whatever N)."""
        return self._product(x, _matmul)

    def _product(self, x: np.ndarray, kernel) -> np.ndarray:
        x = np.asarray(x, np.float32)
        rows = np.ascontiguousarray(x.reshape(-1, self.shape[0]))
        out = np.empty((rows.shape[0], self.shape[1]), np.float32)
        if rows.shape[0]:
            kernel(rows, self.q, self.s, out, min(self.shape[1] // TILE, PIECES_PER_THREAD * get_num_threads()))
        return out.reshape(*x.shape[:-1], self.shape[1])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        w = dequantize(self.q, self.s)
        return w if dtype is None else w.astype(dtype)
