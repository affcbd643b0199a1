"""The real speculative demo on the demo transformers: same output as the target's greedy decoding, honest frames.

Expectations are computed from the installed models (main drafts with draft; until main exists, draft
checks itself), never typed in.
"""

from __future__ import annotations

import numpy as np
import pytest

from inside_llm.sim.decoding import speculative as sp
from inside_llm.sim.decoding import speculative_demo as demo

PROMPTS = [demo.DEFAULT_PROMPT, "KING HENRY:\nWhat say you, lords?\n"]


def test_pair_is_main_and_draft_when_main_is_installed():
    target, draft = demo.demo_pair()
    assert draft.name == "draft"
    from inside_llm.sim.model.transformer import DEMO_DIR

    assert target.name == ("main" if (DEMO_DIR / "main.npz").exists() else "draft")
    assert np.array_equal(target.vocab.cl100k, draft.vocab.cl100k)


def test_cache_adapter_follows_the_protocol():
    target, _ = demo.demo_pair()
    c = demo.DemoCache(target)
    fwd = demo.forward_fn(target)
    logits = fwd([1, 2, 3], c)
    assert logits.shape == (3, target.config.vocab_size) and len(c) == 3
    c.truncate(1)
    assert len(c) == 1


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("gamma", [1, 4, 7])
def test_output_equals_the_targets_own_greedy_output(prompt, gamma, target_greedy):
    r = demo.run_demo(prompt, gamma, 24)
    want = target_greedy(prompt, 24)
    assert [t["id"] for t in r["output_tokens"]] == want
    assert r["greedy_output_ids"] == want and r["matches_greedy"] is True
    assert r["output_text"] == demo.demo_pair()[0].decode(want)


@pytest.mark.parametrize("gamma", [2, 5])
def test_frames_tell_the_whole_story(gamma):
    r = demo.run_demo(demo.DEFAULT_PROMPT, gamma, 30)
    frames, out = r["frames"], [t["id"] for t in r["output_tokens"]]
    assert frames[0]["kind"] == "prefill" and frames[0]["proposed"] == [] and len(frames[0]["emitted"]) == 1
    written, proposed, accepted = [], 0, 0
    for i, f in enumerate(frames):
        assert f["pass"] == i + 1 and f["start"] == len(written)
        ids = [t["id"] for t in f["proposed"]]
        k = f["num_accepted"]
        assert [t["id"] for t in f["accepted"]] == ids[:k], "kept tokens are a prefix of the guesses"
        assert len(ids) <= f["num_drafted"] <= gamma, "a model draft's guesses after a miss are drafted, not judged"
        fix = f["target_token"]
        assert f["replacement"] is None or f["bonus"] is None
        assert (f["replacement"] or f["bonus"] or fix) == fix
        if k < len(ids):  # one replacement per rejection, never equal to the rejected guess
            assert f["kind"] == "replacement" and f["rejected"]["id"] == ids[k] != f["replacement"]["id"]
        elif f["kind"] != "prefill":
            assert f["rejected"] is None and f["kind"] in ("bonus", "plain")
        assert [t["id"] for t in f["emitted"]] == ids[:k] + [fix["id"]]
        assert all(t["text"] == demo.demo_pair()[0].piece(t["id"]).decode("utf-8", "replace") for t in f["emitted"])
        written += [t["id"] for t in f["emitted"]]
        proposed, accepted = proposed + f["num_drafted"], accepted + k
    assert written == out and len(out) == r["num_tokens"] == 30
    assert r["num_target_passes"] == len(frames)
    assert r["num_proposed"] == proposed and r["num_accepted"] == accepted
    assert r["acceptance_rate"] == pytest.approx(accepted / proposed)
    assert r["tokens_per_target_pass"] == pytest.approx(30 / len(frames))


def test_same_arguments_same_result_and_memory_bound_prediction():
    a, b = demo.run_demo(demo.DEFAULT_PROMPT, 4, 16), demo.run_demo(demo.DEFAULT_PROMPT, 4, 16)
    assert a == b
    target, draft = demo.demo_pair()
    c = draft.num_params / target.num_params
    assert a["weights_cost_ratio"] == pytest.approx(c)
    assert a["predicted_speedup_memory_bound"] == pytest.approx(sp.speedup(a["alpha_estimate"], 4, c))
    assert a["same_model"] == (target is draft)
    if target is draft:
        assert a["acceptance_rate"] == 1.0


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="gamma"):
        demo.run_demo("x", 0, 8)
    with pytest.raises(ValueError, match="max_tokens"):
        demo.run_demo("x", 2, demo.MAX_NEW_TOKENS + 1)
    with pytest.raises(ValueError, match="prompt"):
        demo.encode_prompt("")
    with pytest.raises(ValueError, match=f"prompt must be at most {demo.MAX_PROMPT_TOKENS}"):
        demo.encode_prompt(" the" * (demo.MAX_PROMPT_TOKENS + 1))


def test_measurement_reports_times_and_the_prediction_for_what_it_measured():
    m = demo.measure_demo(demo.DEFAULT_PROMPT, 3, 12, rounds=1)
    assert m["matches_greedy"] is True and m["rounds"] == 1
    assert m["greedy_wall_s"] > 0 and m["speculative_wall_s"] > 0 and m["decode_step_s"] > 0
    assert m["measured_speedup"] == pytest.approx(m["greedy_wall_s"] / m["speculative_wall_s"])
    assert m["predicted_speedup"] == pytest.approx(sp.speedup(m["alpha_estimate"], 3, m["measured_cost_ratio"]))
    e = sp.expected_tokens_per_pass(m["alpha_estimate"], 3)
    assert m["predicted_speedup_with_verify_cost"] == pytest.approx(
        e / (3 * m["measured_cost_ratio"] + m["verify_cost_steps"])
    )
    assert set(m["math"]) == {"measured_speedup", "predicted_speedup", "predicted_speedup_with_verify_cost"}


def test_gpu_time_counts_a_check_as_one_pass_and_a_draft_pass_as_c():
    r = demo.run_demo(demo.DEFAULT_PROMPT, 4, 24)
    t, c = r["gpu_time"], r["weights_cost_ratio"]
    drafts = sum(f["num_drafted"] for f in r["frames"])
    assert t["plain"] == r["num_tokens"] == 24
    assert t["speculative"] == pytest.approx(len(r["frames"]) + drafts * c)
    assert t["speedup"] == pytest.approx(24 / t["speculative"]) and t["math"]["value"] == pytest.approx(t["speedup"])
    assert [p["tokens"] for p in t["per_pass"]] == [len(f["emitted"]) for f in r["frames"]]


def test_the_default_run_is_a_good_one_and_the_hard_prompt_a_bad_one():
    good, bad = demo.run_demo(demo.DEFAULT_PROMPT, 4, 24), demo.run_demo(demo.HARD_PROMPT, 4, 24)
    assert good["acceptance_rate"] >= 0.5 > 0.3 > bad["acceptance_rate"]
    assert good["gpu_time"]["speedup"] > 1 > bad["gpu_time"]["speedup"]
    assert good["matches_greedy"] and bad["matches_greedy"]


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_replay_equals_the_real_draft_and_check_loop(prompt, gamma):
    """The replayed steps (from one greedy answer) are the steps sim/decoding/speculative.py's real loop takes with the
    draft model: the same kept tokens, the same first misses and fixes, the same target passes."""
    s = demo.toy_setup()
    ids = demo.encode_prompt(prompt, s)
    real = sp.speculative_generate(
        demo.forward_fn(s.target), s.draft, ids, 20, gamma, s.new_target_cache(), s.new_draft_cache()
    )
    r = demo.run_demo(prompt, gamma, 20, s)
    assert [t["id"] for t in r["output_tokens"]] == real.output_ids
    assert r["num_target_passes"] == real.num_target_passes and r["num_accepted"] == real.num_accepted
    assert r["num_proposed"] == real.num_proposed and r["num_rejected"] == real.num_rejected
    for got, want in zip(r["frames"], real.frames, strict=True):
        assert got["kind"] == want["kind"] and got["num_accepted"] == want["num_accepted"]
        assert [t["id"] for t in got["proposed"]] == want["proposed"][: len(got["proposed"])]
        assert got["num_drafted"] == len(want["proposed"])


# ---- the real model (SmolLM2) on its served int8 path -------------------------------------------------------


def test_real_answer_is_the_served_greedy_output_from_the_stored_template_prefix(smollm):
    """The chapter's target is the served form; a new prompt's prefill reads only its own tokens after the chat
    template's stored opening, and its greedy answer is bit for bit the one a whole-prompt prefill gives."""
    setup = demo.real_setup(smollm)
    served = smollm.served_form
    assert setup.target is served and len(setup.prefix) >= 10
    assert served.decode(setup.prefix).startswith("<|im_start|>system")
    ids = tuple(served.chat_ids("Name a planet."))
    assert ids[: len(setup.prefix)] == setup.prefix
    a = demo.answer(served, setup.eos_id, ids, 6, setup.prefix)
    want = []
    for t in served.generate(list(ids), 6):
        want.append(t)
        if t == setup.eos_id:
            break
    assert list(a.ids) == want
    whole = demo.answer(served, setup.eos_id, ids, 6)  # no stored prefix: the whole prompt read here
    assert whole.ids == a.ids and np.array_equal(whole.rows, a.rows)


def test_real_check_pass_gives_each_position_the_bits_of_its_decode_step(smollm):
    """One pass over several new tokens of a served sequence computes each row as a decode step alone would
    (each query attended alone, the int8 kernel's rows independent): the check pass agrees exactly."""
    from inside_llm.sim.model.transformer import KVCache

    served = smollm.served_form
    ids = served.chat_ids("Hi!")
    new = [504, 314, 2114]
    one = KVCache(served.config)
    served.forward(ids, one, last_only=True)
    steps = [served.forward([t], one, last_only=True).logits[-1] for t in new]
    many = KVCache(served.config)
    served.forward(ids, many, last_only=True)
    logits, rows = served.forward_rows(new, many)
    assert rows.shape == (served.config.n_layers, len(new), served.config.dim)
    for got, want in zip(logits, steps, strict=True):
        np.testing.assert_array_equal(got, want)


def test_real_self_draft_guesses_come_from_one_head_pass_and_are_kept(smollm):
    setup = demo.real_setup(smollm)
    served = smollm.served_form
    ids = tuple(served.chat_ids("Count to five."))
    a = demo.answer(served, setup.eos_id, ids, 5, setup.prefix)
    drafts = demo.self_drafts(setup)
    got = [d.guesses(a) for d in drafts]
    assert sorted(a.guesses) == [d.draft_info["layers"] for d in drafts]
    for d, g in zip(drafts, got, strict=True):
        k = d.draft_info["layers"]
        assert g == [int(i) for i in np.argmax(served.head(a.rows[k - 1]), axis=-1)]
        assert 0 < d.cost_ratio < 1 and d.draft_info["weights"] == "q8"
