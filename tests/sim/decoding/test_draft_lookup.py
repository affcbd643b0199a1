"""Prompt lookup and early exit as drafts: the guesses, the 'no guess' rule, and output equal to greedy."""

from __future__ import annotations

import numpy as np
import pytest

from inside_llm.sim.decoding import speculative as sp
from inside_llm.sim.decoding import speculative_demo as demo
from inside_llm.sim.decoding.draft_lookup import TokenCache, early_exit, lookup, lookup_forward
from inside_llm.sim.model.transformer import load_model


def test_lookup_follows_the_most_recent_longest_match():
    assert lookup([5, 6, 7, 9, 5, 6, 7, 8, 1, 5, 6]) == 7  # "5 6" -> 7 (most recent "5 6" came before 7)
    assert lookup([1, 2, 3, 1, 2, 4, 9, 2]) == 4  # 1-gram "2": most recent earlier 2 was followed by 4
    assert lookup([1, 2, 3, 4]) is None  # nothing repeats
    assert lookup([3, 1, 2, 9, 1, 2], max_ngram=2) == 9


def test_lookup_forward_guesses_one_hot_or_nothing():
    fwd, cache = lookup_forward(10), TokenCache()
    row = fwd([1, 2, 3, 1, 2], cache)
    assert row.shape == (5, 10) and row[-1].argmax() == 3 and np.isfinite(row[-1]).sum() == 1
    assert not np.isfinite(fwd([7], cache)[-1]).any()  # "7" never seen: no guess
    cache.truncate(2)
    assert cache.ids == [1, 2]


def test_lookup_drafted_output_equals_the_targets_greedy_output():
    target = load_model("draft")
    prompt = target.encode("ROMEO:\nI am a man, and I am a man, and I am a man of")
    fwd = demo.forward_fn(target)
    spec = sp.speculative_generate(
        fwd, lookup_forward(target.config.vocab_size), prompt, 20, 4, demo.DemoCache(target), TokenCache()
    )
    greedy = sp.greedy_generate(fwd, prompt, 20, demo.DemoCache(target))["output_ids"]
    assert spec.output_ids == greedy
    assert spec.num_proposed <= 4 * (spec.num_target_passes - 1)  # steps with no match propose fewer
    assert any(f["kind"] == "plain" for f in spec.frames) or spec.num_proposed == 4 * (spec.num_target_passes - 1)


def test_early_exit_draft_is_the_first_layers_with_the_same_head():
    target = load_model("draft")
    ee = early_exit(target, 1)
    assert ee.config.n_layers == 1 and ee.layers[0] is target.layers[0] and ee.norm is target.norm
    ids = target.encode("KING:\nWhat")
    spec = sp.speculative_generate(
        demo.forward_fn(target), demo.forward_fn(ee), ids, 12, 3, demo.DemoCache(target), demo.DemoCache(ee)
    )
    assert spec.output_ids == sp.greedy_generate(demo.forward_fn(target), ids, 12, demo.DemoCache(target))["output_ids"]


def test_stored_draft_comparison_says_why_prompt_lookup():
    from inside_llm import modelfile

    dc = demo.stored_drafts()
    assert dc["file_sha256"] == modelfile.SHA256 and dc["command"].startswith("python scripts/measure_real_model.py")
    lookup_row, *exits = dc["drafts"]
    assert lookup_row["draft"] == "prompt lookup" and lookup_row["cost_ratio"] == 0 and len(exits) >= 2
    for r in dc["drafts"]:
        assert all(x["matches_greedy"] for x in r["runs"])  # every draft keeps the target's answer
    for i in range(2):  # on both examples lookup beats every early exit
        assert lookup_row["runs"][i]["gpu_time_speedup"] > max(r["runs"][i]["gpu_time_speedup"] for r in exits)
    model = modelfile.served_smollm()
    if model is not None:  # c of an early exit is its weight share, recomputed
        s = demo.early_exit_setup(demo.real_setup(model), 6)
        assert s.cost_ratio == pytest.approx(next(r for r in exits if r["draft"].startswith("first 6 "))["cost_ratio"])


def test_compare_drafts_runs_every_candidate_on_both_examples():
    rows = demo.compare_drafts(demo.toy_setup(), gamma=2, max_new_tokens=6, layers=(1,))
    assert [len(r["runs"]) for r in rows] == [2, 2] and rows[1]["draft"].startswith("first 1 of")
    assert 0 < rows[1]["cost_ratio"] < 1 and all(x["matches_greedy"] for r in rows for x in r["runs"])
