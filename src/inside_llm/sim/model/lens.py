"""What chapters 2 and 3 read out of a forward pass: which floors to draw, the logit lens, layer change.

Works on any model with the demo transformer's interface (config, head(x) -> logits): the toy model in
sim/model/transformer.py or a real one. Numpy only; no web code.
"""

from __future__ import annotations

import numpy as np

MAX_DRAWN_FLOORS = 7  # the embedding, layer 1, then evenly spaced up to the last layer


def drawn_floors(n_layers: int, max_drawn: int = MAX_DRAWN_FLOORS) -> list[int]:
    """Floors to draw (0 = the embedding rows, l = after layer l): every floor when they fit, else the
    embedding, layer 1 and max_drawn - 2 layers evenly spaced up to the last one (always included)."""
    if n_layers + 1 <= max_drawn:
        return list(range(n_layers + 1))
    k = max_drawn - 2
    return sorted({0, 1, *(round(n_layers * j / k) for j in range(1, k + 1))})


def logit_lens(model, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k next tokens [N, k] and their probabilities [N, k], likeliest first, if the model stopped at
    residual rows x [N, dim]: its final RMSNorm and output head applied there (nostalgebraist's logit lens)."""
    if len(x) == 0:
        return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
    z = np.asarray(model.head(x), np.float32)                       # [N, V] logits (a fresh array: ours to change)
    rows = np.arange(len(z))
    top = np.zeros((len(z), k), np.int64)
    vals = np.zeros((len(z), k), np.float32)
    for j in range(k):                                              # k argmax passes: cheaper than sorting V
        top[:, j] = np.argmax(z, axis=-1)
        vals[:, j] = z[rows, top[:, j]]
        z[rows, top[:, j]] = -np.inf
    z[rows[:, None], top] = vals                                    # put them back for the normaliser
    zmax = vals[:, :1]                                              # [N, 1] the largest logit
    np.subtract(z, zmax, out=z)
    np.exp(z, out=z)
    total = z.sum(axis=-1, keepdims=True)                           # [N, 1] sum of exp(z - max)
    return top, np.exp(vals - zmax) / total


def layer_change(resid_in: np.ndarray, resid_out: np.ndarray) -> np.ndarray:
    """[T] ||out - in|| / ||in|| per token: the size of a layer's update relative to what came in."""
    return np.linalg.norm(resid_out - resid_in, axis=-1) / np.linalg.norm(resid_in, axis=-1)


def colour_scale(x: np.ndarray, quantile: float = 0.98) -> float:
    """A floor's colour scale for residual rows x [T, dim]: the `quantile` of |value| within each token's
    vector, then the median over tokens. One token far larger than the rest (real models park attention on
    the first token, whose numbers grow hundreds of times larger) saturates instead of washing out the
    others. 0 when there is nothing."""
    if x.size == 0:
        return 0.0
    return float(np.median(np.quantile(np.abs(x), quantile, axis=-1)))
