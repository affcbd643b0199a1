"""The real model's stored perplexities (demo/smollm2_quality.json) are real: a subset is recomputed here
when the model file is present; without it the same code runs on the toy model and the file is checked
for consistency and provenance."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest

from inside_llm import modelfile
from inside_llm.sim.model.transformer import DEMO_DIR, load_model
from inside_llm.sim.quant import real_quality as rq
from inside_llm.sim.quant.demo_quality import heldout_text

STORED = json.loads((DEMO_DIR / "smollm2_quality.json").read_text())


def test_stored_numbers_are_consistent_and_say_where_they_come_from():
    assert STORED["file_sha256"] == modelfile.SHA256 and STORED["file"] == modelfile.FILE_NAME
    assert STORED["text_sha256"] == hashlib.sha256(heldout_text().encode()).hexdigest()
    assert "Q4_1" in STORED["recipe"] and "no FP16" in STORED["variants"][0]["method"]
    assert [v["variant"] for v in STORED["variants"]] == list(rq.VARIANTS)
    base = STORED["variants"][0]
    for v in STORED["variants"]:
        nll = np.array(v["window_nll"])
        assert len(nll) == STORED["windows"] and v["tokens"] == STORED["windows"] * STORED["window_tokens"]
        assert v["perplexity"] == pytest.approx(math.exp(nll.mean()), rel=1e-5)
        assert v["relative_change"] == pytest.approx(v["perplexity"] / base["perplexity"] - 1)
    ppl = {v["variant"]: v["perplexity"] for v in STORED["variants"]}
    assert ppl["file_q4_1"] < ppl["int8"] < ppl["int4"] < ppl["int3"] < ppl["int2"]  # fewer bits, worse
    bits = {v["variant"]: v["bits_per_weight"] for v in STORED["variants"]}
    assert bits["file_q4_1"] == 5.0 and bits["int4"] == pytest.approx(4 + 16 * 5 / 576, rel=0.02)


def test_a_subset_recomputes_to_the_stored_numbers():
    model = modelfile.served_smollm()
    if model is None:  # no file: the same measurement code on the toy model, one short window
        toy = load_model("draft")
        ids = rq.text_ids(toy)
        a = rq.measure(toy, "file_q4_1", ids, num_windows=1, window=32)
        b = rq.measure(toy, "int2", ids, num_windows=1, window=32)
        assert a["window_nll"][0] == pytest.approx(toy.nll(ids[:33]), abs=1e-5) and b["perplexity"] > a["perplexity"]
        return
    ids = rq.text_ids(model)
    assert len(ids) == STORED["text_tokens"]
    for variant in ("file_q4_1", "int4"):  # the baseline and one quantized variant, first window
        got = rq.window_nll(rq.quantized(model, variant), ids, 1, STORED["window_tokens"])[0]
        want = next(v for v in STORED["variants"] if v["variant"] == variant)["window_nll"][0]
        assert got == pytest.approx(want, abs=2e-4), variant


def test_the_served_int8_form_is_stored_paired_with_the_baseline_and_recomputes():
    """demo/smollm2_quality.json's `served` (chapter 8's "this server, now"): the int8 form the engine decodes
    from, on the same windows as the baseline; its first window recomputes to the stored NLL."""
    sv, base = STORED["served"], STORED["variants"][0]
    nll = np.array(sv["window_nll"])
    assert len(nll) == STORED["windows"] and sv["format"] == "int8" and "--served" in sv["command"]
    assert sv["perplexity"] == pytest.approx(math.exp(nll.mean()), rel=1e-5)
    assert sv["baseline_perplexity"] == pytest.approx(base["perplexity"], rel=1e-5)  # from the stored rounded NLLs
    assert sv["relative_change"] == pytest.approx(sv["perplexity"] / base["perplexity"] - 1, abs=1e-5)
    assert sv["delta_nll"] == pytest.approx((nll - np.array(base["window_nll"])).mean(), abs=1e-5)
    assert 8 < sv["bits_per_weight"] < 8.2  # one float32 scale per row of 576 or more int8 codes
    assert 0 < sv["relative_change"] < 0.05  # int8 barely moves it (int4 re-rounded costs +68%)
    model = modelfile.served_smollm()
    if model is not None:
        assert model.served_form.bytes_per_token == sv["bytes_per_token"]
        got = rq.window_nll(model.served_form, rq.text_ids(model), 1, STORED["window_tokens"])[0]
        assert got == pytest.approx(sv["window_nll"][0], abs=2e-4)
