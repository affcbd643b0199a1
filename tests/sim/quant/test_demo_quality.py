"""The demo model's perplexity at each precision: shipped held-out split, the precomputed file, a live recompute."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from inside_llm.sim.model.transformer import load_model, model_card
from inside_llm.sim.quant import demo_quality as dq
from inside_llm.sim.quant.quantization import nll_from_logits, perplexity

MODEL = "main"


def test_heldout_split_is_shipped_and_is_the_trainers_last_ten_percent():
    ids = np.load(dq.HELDOUT_FILE)
    assert ids.dtype == np.uint16
    data = model_card()["data"]
    assert len(ids) == data["val_tokens"]  # same encoding as training's validation
    text = load_model(MODEL).decode(ids.astype(np.int64).tolist())
    assert len(text) == data["val_chars"]  # the last 10% of characters, decoded back
    assert dq.heldout_ids().max() < load_model(MODEL).config.vocab_size


def test_quality_file_matches_the_shipped_weights_and_split():
    data = json.loads(dq.QUALITY_FILE.read_text())
    assert data["model"] == MODEL
    assert data["weights_sha256"] == dq.weights_sha256(MODEL), "rerun: python -m inside_llm.sim.quant.demo_quality"
    assert data["heldout_sha256"] == hashlib.sha256(dq.HELDOUT_FILE.read_bytes()).hexdigest()
    assert [v["variant"] for v in data["variants"]] == list(dq.VARIANTS)
    assert dq.quality(MODEL) == data  # served as is, nothing recomputed


def test_recomputing_int4_matches_the_precomputed_perplexity():
    """One precision measured again from scratch over the whole held-out split.

    Run in a child process with single-threaded BLAS: the model's many small matmuls are ~20x slower when
    OpenBLAS threads contend with other work on a small machine.
    """
    stored = {v["variant"]: v for v in dq.quality(MODEL)["variants"]}["int4"]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    code = f"import json; from inside_llm.sim.quant import demo_quality as dq; print(json.dumps(dq.measure('int4', {MODEL!r})))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600, check=True)
    fresh = json.loads(out.stdout)
    assert fresh["tokens"] == stored["tokens"] > 30_000
    assert fresh["perplexity"] == pytest.approx(stored["perplexity"], rel=1e-5)
    assert fresh["window_nll"] == pytest.approx(stored["window_nll"], abs=1e-5)


@pytest.mark.parametrize("variant", list(dq.VARIANTS))
def test_every_variant_spot_checks_on_its_first_windows(variant):
    stored = {v["variant"]: v for v in dq.quality(MODEL)["variants"]}[variant]
    fresh = dq.measure(variant, MODEL, num_windows=2)
    assert fresh["window_nll"] == pytest.approx(stored["window_nll"][:2], abs=1e-5)
    assert stored["perplexity"] == pytest.approx(math.exp(np.mean(stored["window_nll"])), rel=1e-5)


def test_fp16_baseline_equals_the_model_cards_validation_perplexity():
    fp16 = {v["variant"]: v for v in dq.quality(MODEL)["variants"]}["fp16"]
    card = model_card()["models"][MODEL]["val"]
    assert fp16["tokens"] == card["tokens"]
    assert fp16["perplexity"] == pytest.approx(card["perplexity_per_token"], rel=2e-3)


def test_eight_four_and_three_bits_barely_move_the_tiny_model_two_bits_break_it():
    q = {v["variant"]: v for v in dq.quality(MODEL)["variants"]}
    base = q["fp16"]["perplexity"]
    assert abs(q["bf16"]["perplexity"] / base - 1) < 0.001
    for v in ("fp8", "int8", "int4", "int4_per_channel", "int3"):
        assert abs(q[v]["perplexity"] / base - 1) < 0.01, v  # within 1%: "moves a little"
    assert q["int2"]["perplexity"] > base * 1.1  # 2 bits: the model breaks
    for v in q.values():  # paired changes, with their noise
        d = np.array(v["window_nll"]) - np.array(q["fp16"]["window_nll"])
        assert v["delta_nll"] == pytest.approx(d.mean(), abs=1e-6)
        assert v["delta_nll_se"] >= 0 and (v["variant"] == "fp16" or v["delta_nll_se"] > 0)
    assert q["int4"]["bits_per_weight"] == 4.125 and q["int2"]["bits_per_weight"] == 2.125


def test_low_bit_rounding_has_the_levels_of_its_bits():
    w = np.random.default_rng(0).standard_normal((256, 16)).astype(np.float32)
    from inside_llm.sim.quant.quantization import quantize_dequantize

    assert len(np.unique(quantize_dequantize(w, "int2", 128, axis=0)[:128, 3])) <= 3  # codes -1, 0, 1
    assert len(np.unique(quantize_dequantize(w, "int3", 128, axis=0)[:128, 3])) <= 7  # codes -3..3


def test_window_nll_is_teacher_forced_next_token_loss():
    model = load_model(MODEL)
    ids = dq.heldout_ids()
    T = model.config.max_seq_len
    logits = model.forward(ids[:T]).logits
    expected = nll_from_logits(logits, ids[1 : T + 1]).mean()
    assert dq.window_nll(model, ids, 1)[0] == pytest.approx(expected, rel=1e-4)
    assert perplexity(np.array([expected])) == pytest.approx(math.exp(expected))


def test_quantized_model_really_rounds_the_layer_matrices_only():
    base = load_model(MODEL)
    q = dq.quantized_model(base, "int4")
    w, wq = base.layers[0].w1, q.layers[0].w1  # [in, out]
    assert not np.array_equal(w, wq)
    group = wq[: dq.GROUP_SIZE, 0]  # one group: 15 symmetric levels at most
    assert len(np.unique(group)) <= 15
    assert np.array_equal(q.tok_emb, base.tok_emb) and np.array_equal(q.layers[0].attn_norm, base.layers[0].attn_norm)
    assert dq.quantized_model(base, "fp16") is base
    with pytest.raises(ValueError, match="variant"):
        dq.quantized_model(base, "int1")
