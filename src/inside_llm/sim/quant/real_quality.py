"""The real model's held-out perplexity with its weights quantized further (chapter 8, measured offline).

The model is a parameter (any DemoModel: SmolLM2-135M-Instruct on the server, or the toy in tests).

Recipe (what `build` does, and what demo/smollm2_quality.json was made with):
  baseline  the file's own weights. SmolLM2's GGUF holds Q4_1 weights (4-bit codes, one scale and one
            minimum per 32 weights), not the original FP16: dequantized to float32, they ARE the model
            we serve, so they are the baseline. There is no FP16 SmolLM2 on this server to compare with.
  variants  every projection matrix inside the layers (wq wk wv wo w1 w2 w3) re-quantized from those
            float32 values with sim.quant.quantization along the input axis: INT8 with one fp16 scale per
            output column ("per-channel"); INT4, INT3, INT2 with one fp16 scale per 128 input weights
            (576 = 4 x 128 + 64: the last group of a 576-wide row holds 64). Symmetric round-to-nearest.
            The tied embedding/output head and the norm gains stay as the file has them.
  text      the held-out last 10% of Tiny Shakespeare that ships with the package (demo/heldout_ids.npy,
            decoded: sim.quant.demo_quality.heldout_text), encoded with the model's own tokenizer. It is held
            out from the toy model's training; SmolLM2 was trained on a web-scale corpus that may well
            contain Shakespeare, so its absolute perplexity is not a held-out figure for it, the changes are.
  windows   the first `num_windows` non-overlapping windows of `window` + 1 tokens, each scored by
            teacher forcing from its own start (no context carried over).
  metric    perplexity = exp(mean NLL), nats; each variant's change is paired with the baseline window by
            window, with its standard error.
"""

from __future__ import annotations

import hashlib
import json
import math
from functools import cache
from typing import Any

import numpy as np

from ..model.transformer import DEMO_DIR, DemoModel
from .demo_quality import heldout_text
from .demo_quality import paired as demo_paired
from .quantization import SCALE_BITS, quantize_dequantize

WINDOW = 256
NUM_WINDOWS = 8
GROUP_SIZE = 128
FIELDS = ("wq", "wk", "wv", "wo", "w1", "w2", "w3")
# name -> (format or None for the baseline, group size (0 = one scale per output column), description)
VARIANTS: dict[str, tuple[str | None, int, str]] = {
    "file_q4_1": (None, 0, "the file's Q4_1 weights, dequantized to float32 (the baseline; the file holds no FP16)"),
    "int8": ("int8", 0, "INT8, symmetric, one fp16 scale per output column (per-channel)"),
    "int4": ("int4", GROUP_SIZE, "INT4, symmetric, fp16 scale per 128 input weights"),
    "int3": ("int3", GROUP_SIZE, "INT3, symmetric, fp16 scale per 128 input weights"),
    "int2": ("int2", GROUP_SIZE, "INT2, symmetric, fp16 scale per 128 input weights"),
}
CODE_BITS = {"int8": 8, "int4": 4, "int3": 3, "int2": 2}
Q4_1_BITS = 4 + 2 * 16 / 32  # 4-bit code + fp16 scale + fp16 minimum per 32 weights (ggml block_q4_1)


def text_ids(model: DemoModel) -> np.ndarray:
    """The shipped held-out text in the model's own tokens [N]."""
    return np.asarray(model.vocab.encode(heldout_text()), dtype=np.int64)


def quantized(model: DemoModel, variant: str) -> DemoModel:
    """The model with its layer matrices as `variant` stores them (float32 [in, out] arrays either way)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}; got {variant!r}")
    fmt, group, _ = VARIANTS[variant]
    if fmt is None:
        return model.map_weights(lambda _f, w: np.asarray(w, np.float32), f"{model.name}-{variant}")
    return model.map_weights(
        lambda _f, w: quantize_dequantize(np.asarray(w, np.float32), fmt, group, axis=0), f"{model.name}-{variant}"
    )


def bits_per_weight(model: DemoModel, variant: str) -> float:
    """Stored bits per layer weight, scales included (the last, shorter group still stores a scale)."""
    fmt, group, _ = VARIANTS[variant]
    if fmt is None:
        return Q4_1_BITS
    total = bits = 0
    for layer in model.layers:
        for f in FIELDS:
            n_in, n_out = getattr(layer, f).shape
            groups = 1 if group == 0 else math.ceil(n_in / group)
            bits += n_out * (n_in * CODE_BITS[fmt] + groups * SCALE_BITS)
            total += n_in * n_out
    return bits / total


def window_nll(model: DemoModel, ids: np.ndarray, num_windows: int, window: int = WINDOW, first: int = 0) -> np.ndarray:
    """Mean NLL (nats/token) of windows first..first+num_windows-1, each window + 1 tokens [W]."""
    if (first + num_windows) * window + 1 > len(ids):
        raise ValueError(f"the text holds {len(ids)} tokens: too few for {first + num_windows} windows of {window}")
    return np.array([model.nll(ids[w * window : (w + 1) * window + 1]) for w in range(first, first + num_windows)])


def measure(
    model: DemoModel, variant: str, ids: np.ndarray, num_windows: int = NUM_WINDOWS, window: int = WINDOW
) -> dict[str, Any]:
    nll = window_nll(quantized(model, variant), ids, num_windows, window)
    return {
        "variant": variant,
        "method": VARIANTS[variant][2],
        "bits_per_weight": bits_per_weight(model, variant),
        "perplexity": float(math.exp(nll.mean())),
        "mean_nll": float(nll.mean()),
        "tokens": int(num_windows * window),
        "window_nll": [round(float(x), 6) for x in nll],
    }


def paired(variants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """demo_quality.paired (mean NLL change vs the first, the baseline, and its standard error), plus each
    variant's relative perplexity change."""
    base = variants[0]["perplexity"]
    return [{**v, "relative_change": v["perplexity"] / base - 1} for v in demo_paired(variants)]


def build(
    model: DemoModel, provenance: dict[str, Any], num_windows: int = NUM_WINDOWS, window: int = WINDOW, log=print
) -> dict[str, Any]:
    """Measure every variant: the content of demo/<model>_quality.json (provenance: file name, sha256, command)."""
    ids = text_ids(model)
    variants = []
    for v in VARIANTS:
        variants.append(measure(model, v, ids, num_windows, window))
        log(f"{v:>10}  {variants[-1]['bits_per_weight']:6.3f} bits  perplexity {variants[-1]['perplexity']:.3f}")
    return {
        "model": model.name,
        **provenance,
        "num_params": model.num_params,
        "text": "Tiny Shakespeare, held-out last 10% (demo/heldout_ids.npy, decoded)",
        "text_sha256": hashlib.sha256(heldout_text().encode()).hexdigest(),
        "text_tokens": int(len(ids)),
        "window_tokens": window,
        "windows": num_windows,
        "group_size": GROUP_SIZE,
        "recipe": __doc__.split("Recipe")[1].strip(),
        "variants": paired(variants),
    }


@cache
def stored(model_name: str = "smollm2") -> dict[str, Any] | None:
    """The stored measurement (demo/<model>_quality.json), or None if none ships."""
    path = DEMO_DIR / f"{model_name}_quality.json"
    return json.loads(path.read_text()) if path.exists() else None
