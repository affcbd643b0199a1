"""transformer_ops.penalize: a chat UI's repetition penalty and no-repeat n-gram, applied to a copy of the logits."""

from __future__ import annotations

import numpy as np

from inside_llm.sim.model.transformer_ops import penalize


def test_penalty_divides_positive_and_multiplies_negative_logits_of_recent_ids_only():
    logits = np.array([2.0, -2.0, 3.0, 1.0], np.float32)
    z = penalize(logits, [0, 1, 0], penalty=2.0, last_n=64)
    np.testing.assert_allclose(z, [1.0, -4.0, 3.0, 1.0])
    np.testing.assert_array_equal(logits, [2.0, -2.0, 3.0, 1.0]), "the input is untouched"
    np.testing.assert_allclose(penalize(logits, [0, 1, 2], 2.0, last_n=1), [2.0, -2.0, 1.5, 1.0])


def test_no_repeat_ngram_bans_exactly_the_ids_that_would_complete_a_seen_ngram():
    logits = np.zeros(6)
    z = penalize(logits, [1, 2, 3, 1, 2], no_repeat_ngram=3)  # "1 2" was followed by 3
    assert np.isneginf(z[3]) and np.isfinite(np.delete(z, 3)).all()
    assert np.isfinite(penalize(logits, [1, 2, 3, 1, 2], no_repeat_ngram=0)).all()
    assert np.isfinite(penalize(logits, [1, 2], no_repeat_ngram=3)).all(), "shorter than n: nothing to ban"
