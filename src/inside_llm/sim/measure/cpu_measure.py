"""This server's CPU as a roofline, and the served model measured on it (chapters 2, 3, 5 and 6).

Chapter 5 draws a GPU's two roofs; here are this CPU's own, measured:
- the memory roof: bytes per second a numpy copy moves through a working set several times the
  last-level cache (bytes read + bytes written; one thread, as numpy copies);
- the compute roof: float32 GEMM FLOP/s with the BLAS threads the model runs with (the server pins
  BLAS to one thread per worker: sim/model/smollm.pin_blas_threads).

Then the model's traffic, computed from its own arrays, not typed: the weight bytes one decode step reads
(every layer's matrices and the tied unembedding), the FLOPs of a token, and the keys and values a token
adds to the cache. Its prefill and decode are timed on the same CPU, which places two points under the
roofs and predicts decode time from bandwidth alone (weight bytes / bandwidth) beside the measured time.

Wall clock from time.perf_counter (demo_timing times the model). Every figure is the best of a few rounds: a neighbour on a shared CPU
only ever slows a round down. numpy, the standard library and threadpoolctl (to read the BLAS threads).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from inside_llm.sim.measure.demo_timing import best_seconds
from inside_llm.sim.model.transformer import DemoModel, KVCache, Layer

MIB = 1 << 20
COPY_CACHE_MULTIPLE = 2  # the copy's working set (source + destination): this many last-level caches
COPY_MIN_BYTES, COPY_MAX_BYTES = 128 * MIB, 512 * MIB  # per buffer (allocating more costs seconds of page faults)
GEMM_SIZE = 1024  # n of the n x n x n float32 GEMM (2 n^3 FLOPs)


# ---- the machine's two roofs ------------------------------------------------------------------


def last_level_cache_bytes(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int | None:
    """Size of the CPU's last-level cache as Linux reports it (largest level's size), or None if unknown."""
    best = (0, 0)
    for d in root.glob("index*"):
        try:
            level, size = int((d / "level").read_text()), (d / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        n = int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
        best = max(best, (level, n))
    return best[1] or None


def blas_threads() -> int:
    """Threads BLAS runs with in this process now (the model's matmuls use the same)."""
    from threadpoolctl import threadpool_info

    return max((i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"), default=1)


def memory_bandwidth(buffer_bytes: int | None = None, rounds: int = 4) -> dict:
    """Bytes per second of np.copyto between two buffers of buffer_bytes each (bytes read + bytes written).

    The default buffer makes the working set COPY_CACHE_MULTIPLE x the last-level cache (clamped to
    COPY_MIN_BYTES..COPY_MAX_BYTES per buffer), so each round streams from main memory.
    """
    llc = last_level_cache_bytes()
    if buffer_bytes is None:
        want = (llc or COPY_MIN_BYTES) * COPY_CACHE_MULTIPLE // 2
        buffer_bytes = min(COPY_MAX_BYTES, max(COPY_MIN_BYTES, want))
    src = np.ones(buffer_bytes // 4, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # first touch: page faults are not memory bandwidth
    s = best_seconds(lambda: np.copyto(dst, src), rounds)
    moved = src.nbytes + dst.nbytes
    return {
        "bytes_per_s": moved / s,
        "buffer_bytes": src.nbytes,
        "bytes_moved": moved,
        "seconds": s,
        "last_level_cache_bytes": llc,
        "rounds": rounds,
    }


def matmul_throughput(n: int = GEMM_SIZE, rounds: int = 4) -> dict:
    """FLOP/s of a float32 [n, n] @ [n, n] GEMM (2 n^3 FLOPs) with BLAS's current threads."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b  # warm up (BLAS buffers)
    s = best_seconds(lambda: a @ b, rounds)
    flops = 2 * n**3
    return {"flops_per_s": flops / s, "size": n, "flops": flops, "seconds": s, "rounds": rounds}


def machine_roofs(rounds: int = 4) -> dict:
    """This CPU's memory roof, compute roof and ridge point (FLOP per byte where they meet)."""
    mem, gemm = memory_bandwidth(rounds=rounds), matmul_throughput(rounds=rounds)
    return {
        "memory": mem,
        "compute": gemm,
        "ridge_flops_per_byte": gemm["flops_per_s"] / mem["bytes_per_s"],
        "blas_threads": blas_threads(),
    }


# ---- the model's traffic, from its own arrays ------------------------------------------------


def _nbytes(w) -> int:
    return int(w.size) * np.dtype(w.dtype).itemsize


def matrices(model: DemoModel) -> list:
    """Every weight matrix a decode step reads: each layer's seven, then the tied unembedding."""
    ws = [getattr(layer, f) for layer in model.layers for f in Layer.__dataclass_fields__]
    return [w for w in ws if w.ndim == 2] + [model.unembed]


def weight_bytes_per_token(model: DemoModel) -> int:
    """Bytes of weights one decode step reads: the sum of matrices(model) as stored (norms and the
    one embedding row a token looks up are left out: under 0.1% of it)."""
    return sum(_nbytes(w) for w in matrices(model))


def matrix_params(model: DemoModel) -> int:
    return sum(int(w.size) for w in matrices(model))


def kv_values_per_token(model: DemoModel) -> int:
    """Numbers one token adds to the KV cache: 2 (K and V) x layers x KV heads x head size."""
    c = model.config
    return 2 * c.n_layers * c.n_kv_heads * c.head_dim


def cache_bytes_held(model: DemoModel, ids: list[int]) -> int:
    """Measured: the bytes the model's KV cache holds after reading ids (its buffers' filled positions)."""
    cache = KVCache(model.config, capacity=len(ids))
    model.forward(ids, cache, last_only=True)
    return sum(a[:, : cache.num_tokens].nbytes for a in cache.k + cache.v)


def step_traffic(
    model: DemoModel, new_tokens: int, keys_attended: int, cached_before: int, weight_bytes: int | None = None
) -> dict:
    """FLOPs and bytes of one forward pass over `new_tokens` tokens.

    FLOPs: 2 per weight per token (multiply and add) + attention's 4 x heads x head size per (query, key)
    pair (scores and the weighted sum), keys_attended pairs in all. Bytes: the weights once (weight_bytes:
    as another form stores them, e.g. the served int8 one; else the model's float32 arrays), the cache's
    cached_before tokens read, the new tokens' keys and values written (activations are left out).
    """
    c, kv_bytes = model.config, kv_values_per_token(model) * 4  # float32 cache
    flops = 2 * matrix_params(model) * new_tokens + 4 * c.n_layers * c.n_heads * c.head_dim * keys_attended
    weights = weight_bytes_per_token(model) if weight_bytes is None else weight_bytes
    moved = weights + kv_bytes * (cached_before + new_tokens)
    return {"flops": flops, "bytes": moved, "arithmetic_intensity": flops / moved}


# ---- the model's points under this CPU's roofs ------------------------------------------------


def measured_points(model: DemoModel, timing: dict, weight_bytes: int | None = None) -> dict:
    """Prefill and decode (demo_timing.time_prefill_decode's figures) as points: FLOPs and bytes per token,
    arithmetic intensity, attained FLOP/s. weight_bytes: what one pass reads of weights when `timing` is of
    another form of the model (the served int8 one); the FLOPs are the same products' either way."""
    T, n = timing["prompt_tokens"], timing["decode_tokens"]
    pre = step_traffic(model, T, T * (T + 1) // 2, 0, weight_bytes)
    # decode steps at positions T .. T+n-1 attend T+1 .. T+n keys and read T .. T+n-1 cached ones: the mean step
    mid = T + (n - 1) / 2
    dec = step_traffic(model, 1, mid + 1, mid, weight_bytes)

    def point(t: dict, tokens: int, ms: float) -> dict:
        return {
            "seconds_per_token": ms / 1e3,
            "tokens_per_s": 1e3 / ms,
            "flops_per_token": t["flops"] / tokens,
            "bytes_per_token": t["bytes"] / tokens,
            "arithmetic_intensity": t["arithmetic_intensity"],
            "flops_per_s": t["flops"] / tokens / (ms / 1e3),
        }

    return {
        "prefill": point(pre, T, timing["prefill_ms_per_token"]),
        "decode": point(dec, 1, timing["decode_ms_per_token"]),
    }


def decode_prediction(model: DemoModel, bandwidth_bytes_per_s: float, decode_ms_per_token: float) -> dict:
    """Decode time predicted from bandwidth alone (weight bytes per token / bytes per second) vs measured."""
    w = weight_bytes_per_token(model)
    predicted_ms = 1e3 * w / bandwidth_bytes_per_s
    return {
        "weight_bytes_per_token": w,
        "predicted_ms_per_token": predicted_ms,
        "measured_ms_per_token": decode_ms_per_token,
        "measured_over_predicted": decode_ms_per_token / predicted_ms,
    }
