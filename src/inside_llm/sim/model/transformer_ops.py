"""The stateless math of the demo transformer (numpy, float32): norms, rotary positions, attention.

Shapes: N rows (tokens), T queries, S keys, H query heads, Hkv KV heads, hd head_dim, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x [..., dim] scaled to unit root-mean-square, times weight [dim]."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def silu(x: np.ndarray) -> np.ndarray:
    return x * (0.5 * (1.0 + np.tanh(0.5 * x)))  # x * sigmoid(x), no overflow for large |x|


def rope_tables(pos: np.ndarray, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [N, hd/2] float32 of the angles pos [N] * theta^(-2i/hd), radians (made in float64)."""
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)  # [hd/2]
    angles = np.outer(pos, inv_freq)  # [N, hd/2]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate the interleaved pairs (x[2i], x[2i+1]) of x [..., N, hd] by the angles of cos/sin [N, hd/2]."""
    x0, x1 = x[..., 0::2], x[..., 1::2]  # [..., N, hd/2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def attend(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, qpos: np.ndarray, kpos: np.ndarray, window: int
) -> tuple[np.ndarray, np.ndarray]:
    """Grouped-query attention: q [H, T, hd], k/v [Hkv, S, hd], positions qpos [T], kpos [S].

    Returns (out [T, H*hd], weights [H, T, S]); key j is visible to query i iff
    qpos[i] - window < kpos[j] <= qpos[i].
    """
    H, T, hd = q.shape
    Hkv, S, _ = k.shape
    qg = q.reshape(Hkv, H // Hkv, T, hd)  # [Hkv, group, T, hd]
    scores = qg @ k[:, None].swapaxes(-1, -2) * float(hd) ** -0.5  # [Hkv, group, T, S]
    lag = qpos[:, None] - kpos[None, :]  # [T, S] tokens between query and key
    scores = np.where((lag >= 0) & (lag < window), scores, -np.inf)
    w = np.exp(scores - scores.max(axis=-1, keepdims=True))
    w /= w.sum(axis=-1, keepdims=True)  # [Hkv, group, T, S]
    out = w @ v[:, None]  # [Hkv, group, T, hd]
    return out.reshape(H, T, hd).transpose(1, 0, 2).reshape(T, H * hd), w.reshape(H, T, S)


def sample(
    logits: np.ndarray, temperature: float, top_k: int | None, rng: np.random.Generator, top_p: float = 1.0
) -> int:
    """Next id from logits [V]: argmax when temperature == 0, else softmax(logits / T) over the top k, then over
    the smallest set of likeliest ids whose probabilities sum to at least top_p (nucleus sampling)."""
    if temperature <= 0:
        return int(np.argmax(logits))
    z = logits.astype(np.float64) / temperature
    if top_k is not None and top_k < len(z):
        z[z < np.partition(z, -top_k)[-top_k]] = -np.inf
    p = np.exp(z - z.max())
    p /= p.sum()
    if top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        keep = order[: int(np.searchsorted(np.cumsum(p[order]), top_p)) + 1]
        q = np.zeros_like(p)
        q[keep] = p[keep]
        p = q / q.sum()
    return int(rng.choice(len(p), p=p))


def penalize(logits: np.ndarray, context: Sequence[int], penalty: float = 1.0, last_n: int = 64,
             no_repeat_ngram: int = 0) -> np.ndarray:
    """Logits [V] with a chat UI's repetition settings applied (a copy; the input is untouched).

    penalty: CTRL's repetition penalty (Keskar et al. 2019, as llama.cpp's repeat_penalty): every id among the
    last `last_n` of `context` has a positive logit divided by `penalty`, a negative one multiplied by it.
    no_repeat_ngram: n > 1 bans any id that would complete an n-gram already in `context` (Hugging Face's
    no_repeat_ngram_size). 1.0 and 0 leave the logits as they are.
    """
    z = np.array(logits, dtype=np.float64)
    if penalty != 1.0 and last_n > 0 and len(context):
        seen = np.unique(np.asarray(context[-last_n:], dtype=np.int64))
        z[seen] = np.where(z[seen] > 0, z[seen] / penalty, z[seen] * penalty)
    n = no_repeat_ngram
    if n > 1 and len(context) >= n:
        ctx = list(context)
        tail = ctx[len(ctx) - n + 1:]
        banned = [ctx[i + n - 1] for i in range(len(ctx) - n + 1) if ctx[i:i + n - 1] == tail]
        z[banned] = -np.inf
    return z


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log p [..., V] (float64) from logits [..., V], computed stably."""
    z = logits.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
