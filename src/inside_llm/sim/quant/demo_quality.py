"""The demo model's held-out perplexity with its weights really quantized (chapter 8's second needle).

Recipe (what `measure` does, and what demo/quality.json was made with):
  text      the held-out last 10% of Tiny Shakespeare by characters (the trainer's split), encoded
            with the demo vocabulary: demo/heldout_ids.npy, uint16 model ids, shipped in the package
            (the runtime never reads ../shared; `python -m inside_llm.sim.quant.demo_quality --text PATH`
            rebuilds the file from the corpus).
  windows   non-overlapping windows of max_seq_len + 1 ids, each scored by teacher forcing:
            max_seq_len next-token predictions per window, as the trainer's final validation.
  weights   the shipped float16 weights; every projection matrix inside the layers (wq wk wv wo w1 w2
            w3) quantized and dequantized with sim.quant.quantization.quantize_dequantize along the input
            axis (matrices are [in, out]): fp16 = as shipped; bf16 = round to bfloat16; fp8 = E4M3
            with one fp32 scale per output column; int8/int4 = symmetric round-to-nearest with one
            fp16 scale per group of 128 input weights (int4_per_channel: one scale per column;
            int3/int2: the same rounding with 3 and 2 bits, for contrast: no server stores 2-bit codes);
            nvfp4/mxfp4 = FP4 E2M1 with an E4M3 scale per 16 (and an fp32 one per matrix) or an E8M0
            scale per 32, blocks along the input axis (sim.quant.quantization).
            Norm gains and the tied embedding/output head stay float16, as GPTQ and AWQ leave them.
  metric    perplexity = exp(mean NLL over all predicted tokens), nats. Each variant's change is also
            given per window against fp16 on the same window (paired), with its standard error, so a
            difference smaller than the noise is visible as such.

Measuring every variant takes tens of seconds of CPU, so demo/quality.json holds the result together
with the sha256 of the weights it was measured on; `quality()` serves it and recomputes live only if
the weights changed. tests/sim/quant/test_demo_quality.py recomputes a precision and checks it matches.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ..model.demo_vocab import DemoVocab
from ..model.tokenizer import count_words, encode
from ..model.transformer import DEMO_DIR, DemoModel, load_model
from .quantization import bits_per_weight, quantize_dequantize

HELDOUT_FILE = DEMO_DIR / "heldout_ids.npy"
QUALITY_FILE = DEMO_DIR / "quality.json"
VAL_FRACTION = 0.1  # the trainer's split: last 10% of characters
GROUP_SIZE = 128
# name -> (format, group size, description)
VARIANTS: dict[str, tuple[str | None, int, str]] = {
    "fp16": (None, 0, "float16 as shipped (the baseline)"),
    "bf16": ("bf16", 0, "bfloat16: round to nearest even, 7 mantissa bits"),
    "fp8": ("fp8", 0, "FP8 E4M3, one fp32 scale per output column"),
    "int8": ("int8", GROUP_SIZE, "INT8 round-to-nearest, symmetric, fp16 scale per 128 weights"),
    "int4": ("int4", GROUP_SIZE, "INT4 round-to-nearest, symmetric, fp16 scale per 128 weights"),
    "int4_per_channel": ("int4", 0, "INT4 round-to-nearest, symmetric, one fp16 scale per column"),
    "int3": ("int3", GROUP_SIZE, "INT3 round-to-nearest, symmetric, fp16 scale per 128 weights (contrast)"),
    "int2": ("int2", GROUP_SIZE, "INT2 round-to-nearest, symmetric, fp16 scale per 128 weights (contrast)"),
    "nvfp4": ("nvfp4", 16, "NVFP4: FP4 E2M1, an FP8 E4M3 scale per 16 weights and an FP32 scale per matrix"),
    "mxfp4": ("mxfp4", 32, "MXFP4 (OCP MX v1.0): FP4 E2M1, a power-of-two E8M0 scale per 32 weights"),
}


def heldout_ids() -> np.ndarray:
    """The held-out split as model ids [N] (int64), from the file shipped in the package."""
    return np.load(HELDOUT_FILE).astype(np.int64)


@lru_cache(maxsize=1)
def heldout_text() -> str:
    """The held-out split as text: its ids through the vocabulary stored beside the weights (weights not loaded)."""
    with np.load(DEMO_DIR / "main.npz") as z:
        vocab = DemoVocab(z["vocab_cl100k"])
    return vocab.decode(heldout_ids().tolist())


@lru_cache(maxsize=4)
def heldout_ratio(encoding: str) -> dict:
    """Words and characters per token of `encoding` (sim.model.tokenizer) on the held-out Tiny Shakespeare that ships
    with the package (demo/heldout_ids.npy, decoded): about 20,000 words of verse and dialogue, chapter 1's
    larger reference text beside its short passages."""
    text = heldout_text()
    words, tokens = count_words(text), len(encode(text, encoding))
    return {
        "title": "Shakespeare, held out from the demo model's training text",
        "source": "Tiny Shakespeare (public domain), last 10% by characters; shipped as demo/heldout_ids.npy",
        "words": words,
        "tokens": tokens,
        "chars": len(text),
        "words_per_token": round(words / tokens, 3),
        "chars_per_token": round(len(text) / tokens, 3),
    }


def encode_heldout(text: str, model: DemoModel) -> np.ndarray:
    """The trainer's held-out split of the full corpus text, as uint16 model ids."""
    ids = model.encode(text[int(len(text) * (1 - VAL_FRACTION)) :])
    if max(ids) >= 2**16:
        raise ValueError("vocabulary too large for uint16 ids")
    return np.asarray(ids, dtype=np.uint16)


def quantized_model(model: DemoModel, variant: str) -> DemoModel:
    """A copy of `model` whose layer matrices are quantized and dequantized per VARIANTS[variant]."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}; got {variant!r}")
    precision, group, _ = VARIANTS[variant]
    if precision is None:
        return model
    return model.map_weights(lambda _f, w: quantize_dequantize(w, precision, group, axis=0), f"{model.name}-{variant}")


def window_nll(model: DemoModel, ids: np.ndarray, num_windows: int | None = None) -> np.ndarray:
    """Mean NLL (nats/token) of each non-overlapping window of max_seq_len predictions [W]."""
    T = model.config.max_seq_len
    n = (len(ids) - 1) // T if num_windows is None else min(num_windows, (len(ids) - 1) // T)
    return np.array([model.nll(ids[w * T : (w + 1) * T + 1]) for w in range(n)])


def _bits(variant: str, model: DemoModel) -> float:
    """Stored bits per quantized weight, scales included, averaged over every layer matrix [in, out]."""
    precision, group, _ = VARIANTS[variant]
    shapes = [getattr(w, f).shape for w in model.layers for f in ("wq", "wk", "wv", "wo", "w1", "w2", "w3")]
    bits = sum(i * o * bits_per_weight(precision or "fp16", group, row_length=i, tensor_size=i * o) for i, o in shapes)
    return bits / sum(i * o for i, o in shapes)


def measure(variant: str, model_name: str = "main", num_windows: int | None = None) -> dict[str, Any]:
    """Perplexity of the demo model with `variant` weights on the held-out split (see module docstring)."""
    base = load_model(model_name)
    nll = window_nll(quantized_model(base, variant), heldout_ids(), num_windows)
    T = base.config.max_seq_len
    return {
        "variant": variant,
        "perplexity": float(math.exp(nll.mean())),
        "mean_nll": float(nll.mean()),
        "tokens": int(len(nll) * T),
        "windows": int(len(nll)),
        "bits_per_weight": _bits(variant, base),
        "method": VARIANTS[variant][2],
        "window_nll": [round(float(x), 6) for x in nll],
    }


def weights_sha256(model_name: str = "main") -> str:
    return hashlib.sha256((DEMO_DIR / f"{model_name}.npz").read_bytes()).hexdigest()


def build(model_name: str = "main") -> dict[str, Any]:
    """Measure every variant over the whole held-out split: the content of demo/quality.json."""
    model = load_model(model_name)
    return {
        "model": model_name,
        "weights_sha256": weights_sha256(model_name),
        "heldout_sha256": hashlib.sha256(HELDOUT_FILE.read_bytes()).hexdigest(),
        "window_tokens": model.config.max_seq_len,
        "group_size": GROUP_SIZE,
        "recipe": __doc__.split("Recipe")[1].split("Measuring")[0].strip(),
        "variants": paired([measure(v, model_name) for v in VARIANTS]),
    }


def paired(variants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add each variant's mean NLL change vs fp16 on the same windows, and its standard error (nats)."""
    base = np.array(variants[0]["window_nll"])
    out = []
    for v in variants:
        d = np.array(v["window_nll"]) - base
        se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else 0.0
        out.append({**v, "delta_nll": float(d.mean()), "delta_nll_se": se})
    return out


@lru_cache(maxsize=4)
def quality(model_name: str = "main") -> dict[str, Any]:
    """demo/quality.json when it was measured on the weights now shipped; otherwise measured live."""
    try:
        data = json.loads(QUALITY_FILE.read_text())
        if data["model"] == model_name and data["weights_sha256"] == weights_sha256(model_name):
            return data
    except (OSError, ValueError, KeyError):
        pass
    return build(model_name)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Rebuild demo/heldout_ids.npy (from the corpus) and demo/quality.json.")
    ap.add_argument(
        "--text", type=Path, help="the full Tiny Shakespeare text (e.g. ../shared/data/tinyshakespeare.txt)"
    )
    ap.add_argument("--model", default="main")
    args = ap.parse_args(argv)
    if args.text:
        np.save(HELDOUT_FILE, encode_heldout(args.text.read_text(encoding="utf-8"), load_model(args.model)))
    data = build(args.model)
    QUALITY_FILE.write_text(json.dumps(data, indent=1) + "\n")
    for v in data["variants"]:
        print(f"{v['variant']:>17}  {v['bits_per_weight']:6.3f} bits  perplexity {v['perplexity']:.3f}")


if __name__ == "__main__":
    main()
