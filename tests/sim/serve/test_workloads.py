"""Request traces: seeded, bounded, and calibrated to the PagedAttention paper's dataset means."""

import numpy as np
import pytest

from inside_llm.sim.serve.workloads import calibrated_mu, describe_workload, make_trace


@pytest.mark.parametrize("workload, prompt_mean, output_mean", [("sharegpt", 161, 338), ("alpaca", 19, 58)])
def test_means_match_the_paper_within_5_percent(workload, prompt_mean, output_mean):
    t = make_trace(workload, 10_000, seed=0)
    assert t.num_prompt_tokens.mean() == pytest.approx(prompt_mean, rel=0.05)
    assert t.num_output_tokens.mean() == pytest.approx(output_mean, rel=0.05)


def test_sharegpt_is_heavy_tailed_and_clipped_to_max_seq_len():
    t = make_trace("sharegpt", 10_000, seed=1, max_seq_len=2048)
    total = t.num_prompt_tokens + t.num_output_tokens
    assert total.max() <= 2048 and t.num_prompt_tokens.min() >= 1 and t.num_output_tokens.min() >= 1
    assert np.percentile(t.num_output_tokens, 99) > 4 * np.median(t.num_output_tokens)


def test_fixed_workload():
    t = make_trace("fixed", 5, seed=0)
    assert set(t.num_prompt_tokens) == {161} and set(t.num_output_tokens) == {338}
    assert describe_workload("fixed")["kind"] == "fixed"


def test_poisson_arrivals_at_rate_and_lengths_independent_of_rate():
    a, b = make_trace("sharegpt", 5000, seed=3, rate=4.0), make_trace("sharegpt", 5000, seed=3, rate=1.0)
    gaps = np.diff(a.arrival_s)
    assert (gaps >= 0).all() and 1 / gaps.mean() == pytest.approx(4.0, rel=0.05)
    assert np.std(gaps) == pytest.approx(np.mean(gaps), rel=0.1)  # exponential gaps: std == mean
    assert (a.num_output_tokens == b.num_output_tokens).all()
    assert (make_trace("sharegpt", 10, seed=3).arrival_s == 0).all()


def test_seeded():
    a, b, c = (make_trace("alpaca", 100, seed=s, rate=2.0) for s in (7, 7, 8))
    assert (a.arrival_s == b.arrival_s).all() and (a.num_output_tokens == b.num_output_tokens).all()
    assert (a.num_output_tokens != c.num_output_tokens).any()


def test_calibrated_mu_hits_the_clipped_mean():
    mu = calibrated_mu(338.0, 1.0, 1887.0)
    x = np.minimum(np.random.default_rng(0).lognormal(mu, 1.0, 400_000), 1887.0)
    assert x.mean() == pytest.approx(338.0, rel=0.01)


@pytest.mark.parametrize(
    "kw, name",
    [
        ({"num_requests": 0}, "num_requests"),
        ({"num_requests": 10_001}, "num_requests"),
        ({"rate": 0.0}, "rate"),
        ({"rate": float("inf")}, "rate"),
        ({"workload": "x"}, "workload"),
        ({"max_seq_len": 4}, "max_seq_len"),
    ],
)
def test_bounds(kw, name):
    with pytest.raises(ValueError, match=name):
        make_trace(**kw)
