"""Speculative decoding: Leviathan et al.'s formulas, and the real loop on toy numpy models."""

import numpy as np
import pytest

from inside_llm.sim.decoding import speculative as sp

# ---- toy models: trigram logit tables with a cache that supports truncate ---------------------------


class ListCache:
    """Holds the token ids fed so far; truncate(n) keeps the first n (the rollback the loop needs)."""

    def __init__(self):
        self.tokens: list[int] = []

    def __len__(self):
        return len(self.tokens)

    def truncate(self, n: int):
        assert 0 <= n <= len(self.tokens)
        del self.tokens[n:]


class Trigram:
    """logits of the next token depend on the previous two tokens: (cached previous, current).

    Reading the previous token from the cache means a cache that was not rolled back gives wrong logits.
    """

    def __init__(self, table: np.ndarray):
        self.table = table  # [V + 1, V, V]; row V stands for "no previous token"
        self.calls = 0

    def __call__(self, ids, cache):
        self.calls += 1
        full = cache.tokens + list(ids)
        start, v = len(cache.tokens), self.table.shape[1]
        prev = [full[t - 1] if t > 0 else v for t in range(start, len(full))]
        cache.tokens.extend(int(i) for i in ids)
        return self.table[prev, full[start:]]


def trigram(seed: int, vocab: int = 12, sharp: float = 3.0) -> Trigram:
    return Trigram(np.random.default_rng(seed).standard_normal((vocab + 1, vocab, vocab)) * sharp)


def noisy_copy(model: Trigram, seed: int, noise: float) -> Trigram:
    """A draft that mostly agrees with the target: the same table plus noise."""
    return Trigram(model.table + noise * np.random.default_rng(seed).standard_normal(model.table.shape))


def contrary(model: Trigram) -> Trigram:
    """A draft whose argmax is never the target's: the target's argmax gets the lowest logit."""
    t = model.table.copy()
    best = t.argmax(-1)[..., None]
    np.put_along_axis(t, best, t.min() - 10.0, axis=-1)
    return Trigram(t)


PROMPT = [3, 1, 4, 1, 5]


def reference(target: Trigram, n: int) -> list[int]:
    return sp.greedy_generate(target, PROMPT, n, ListCache())["output_ids"]


# ---- analytic ---------------------------------------------------------------------------------------


def test_expected_tokens_formula_and_limits():
    assert sp.expected_tokens_per_pass(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    assert sp.expected_tokens_per_pass(1.0, 4) == 5
    assert sp.expected_tokens_per_pass(0.999999, 4) == pytest.approx(5, rel=1e-5)
    assert sp.expected_tokens_per_pass(0.0, 7) == 1
    assert sp.expected_tokens_per_pass(0.5, 0) == 1


@pytest.mark.parametrize("alpha, gamma", [(0.7, 3), (0.75, 4), (0.8, 4), (0.8, 5), (0.75, 5)])
def test_typical_settings_give_two_to_three_x(alpha, gamma):
    s = sp.analytic(alpha, gamma, 0.05).speedup
    assert 2.0 <= s <= 3.0, s


def test_limits_of_speedup():
    a = sp.analytic(0.0, 4, 0.05)
    assert a.expected_tokens_per_pass == 1 and a.speedup < 1
    assert sp.speedup(1.0, 4, 0.0) == 5
    assert sp.speedup(0.8, 4, 0.05) == pytest.approx(sp.expected_tokens_per_pass(0.8, 4) / 1.2)


def test_analytic_curve_optimum_and_math():
    a = sp.analytic(0.8, 4, 0.05)
    assert [p["gamma"] for p in a.curve] == list(range(1, 11))
    best = max(range(1, sp.MAX_GAMMA + 1), key=lambda g: sp.speedup(0.8, g, 0.05))
    assert a.optimal_gamma == best and a.optimal_speedup >= max(p["speedup"] for p in a.curve) - 1e-12
    assert sp.optimal_gamma(0.9, 0.0) == sp.MAX_GAMMA  # free drafts: draft as far as allowed
    for key in ("expected_tokens_per_pass", "speedup", "optimal_gamma"):
        m = a.math[key]
        assert m.value == getattr(a, key) and m.formula and any("2211.17192" in s for s in m.sources)
    with pytest.raises(ValueError):
        sp.analytic(1.2, 4, 0.05)


def test_alpha_inverts_expected_tokens():
    for alpha in (0.0, 0.3, 0.8, 0.99):
        e = sp.expected_tokens_per_pass(alpha, 5)
        assert sp.alpha_from_tokens_per_pass(e, 5) == pytest.approx(alpha, abs=1e-9)


# ---- greedy speculative decoding equals the target's own greedy output -----------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("gamma", [0, 1, 3, 5, 8])
def test_greedy_output_matches_target(seed, gamma):
    target = trigram(seed)
    draft = noisy_copy(target, seed + 100, noise=1.5)
    res = sp.speculative_generate(target, draft, PROMPT, 40, gamma, ListCache(), ListCache())
    assert res.output_ids == reference(target, 40)
    emitted = sum(len(f["emitted"]) for f in res.frames)
    assert emitted == 40 and res.num_target_passes == len(res.frames)
    assert res.num_proposed == sum(len(f["proposed"]) for f in res.frames) == res.num_draft_passes
    assert res.num_accepted == sum(f["num_accepted"] for f in res.frames)
    for f in res.frames[1:]:
        assert len(f["emitted"]) == f["num_accepted"] + 1 and len(f["proposed"]) <= gamma
        assert f["proposed"][: f["num_accepted"]] == f["accepted"]
        if f["kind"] == "replacement":
            assert f["rejected"] == f["proposed"][f["num_accepted"]] != f["replacement"]
    if gamma:
        assert 0 < res.acceptance_rate < 1


def test_identical_draft_accepts_everything():
    target = trigram(5)
    res = sp.speculative_generate(target, Trigram(target.table), PROMPT, 41, 4, ListCache(), ListCache())
    assert res.output_ids == reference(target, 41)
    assert res.acceptance_rate == 1.0 and res.alpha_estimate == 1.0 and res.num_rejected == 0
    assert res.num_target_passes == 1 + 40 // 5  # prefill + 8 steps of 5 tokens
    assert all(f["kind"] == "bonus" for f in res.frames[1:])


def test_contrary_draft_rejects_everything_and_still_matches():
    target = trigram(6)
    res = sp.speculative_generate(target, contrary(target), PROMPT, 30, 3, ListCache(), ListCache())
    assert res.output_ids == reference(target, 30)
    assert res.num_accepted == 0 and res.acceptance_rate == 0.0
    assert res.num_target_passes == 30  # one token per target pass, like greedy
    kinds = [f["kind"] for f in res.frames[1:]]
    assert set(kinds[:-1]) == {"replacement"} and kinds[-1] == "plain"  # last token: nothing to draft


def test_caches_are_rolled_back():
    target = trigram(7)
    tc, dc = ListCache(), ListCache()
    res = sp.speculative_generate(target, noisy_copy(target, 8, 2.0), PROMPT, 25, 4, tc, dc)
    seq = PROMPT + res.output_ids
    assert tc.tokens == seq[: len(tc)] and dc.tokens == seq[: len(dc)]
    assert len(tc) == len(seq) - 1  # all but the last emitted token


def test_eos_stops_generation():
    target = trigram(9)
    ref = reference(target, 30)
    eos = ref[10]
    res = sp.speculative_generate(
        target, noisy_copy(target, 3, 1.0), PROMPT, 30, 4, ListCache(), ListCache(), eos_id=eos
    )
    assert res.output_ids == ref[: ref.index(eos) + 1]


def test_compare_with_greedy_reports_measurements():
    target = trigram(10)
    out = sp.compare_with_greedy(target, noisy_copy(target, 11, 1.0), ListCache, ListCache, PROMPT, 30, 4)
    assert out["matches_greedy"] is True
    assert 0 <= out["acceptance_rate"] <= 1 and out["measured_speedup"] > 0 and out["measured_cost_ratio"] > 0
    assert out["predicted_speedup"] == pytest.approx(sp.speedup(out["alpha_estimate"], 4, out["measured_cost_ratio"]))
    assert out["speculative"]["frames"][0]["kind"] == "prefill"


# ---- sampling mode keeps the target's distribution -------------------------------------------------


class Bigram:
    def __init__(self, table):
        self.table = table

    def __call__(self, ids, cache):
        cache.tokens.extend(int(i) for i in ids)
        return self.table[list(ids)]


def _chi2(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = counts.sum(axis=1, keepdims=True) * probs
    return float(((counts - expected) ** 2 / expected).sum())


def test_sampling_mode_matches_target_distribution():
    v = 5
    rng = np.random.default_rng(0)
    p_tab, q_tab = rng.standard_normal((v, v)) * 1.5, rng.standard_normal((v, v)) * 1.5
    res = sp.speculative_sample(
        Bigram(p_tab), Bigram(q_tab), [0], 8000, 3, ListCache(), ListCache(), np.random.default_rng(1)
    )
    seq = [0] + res.output_ids
    counts = np.zeros((v, v))
    np.add.at(counts, (seq[:-1], seq[1:]), 1)
    softmax = lambda t: np.exp(t) / np.exp(t).sum(axis=1, keepdims=True)  # noqa: E731
    # 20 degrees of freedom: the 99.9% point of chi-square is 45.3
    assert _chi2(counts, softmax(p_tab)) < 45.3
    assert _chi2(counts, softmax(q_tab)) > 200  # the test can tell target from draft
    assert 0.2 < res.acceptance_rate < 0.95 and len(res.output_ids) == 8000


def test_sampling_rejects_bad_temperature():
    t = trigram(0)
    with pytest.raises(ValueError):
        sp.speculative_sample(t, t, PROMPT, 5, 2, ListCache(), ListCache(), np.random.default_rng(0), 0.0)
