"""The dials inverted: each answer meets its limits and one step further breaks the binding constraint."""

from __future__ import annotations

from dataclasses import replace

from inside_llm.sim import serving, solve
from inside_llm.sim.costmodel import memory_per_gpu

P = serving.ServingParams()


def test_largest_batch_meets_the_limits_and_the_next_does_not():
    s = solve.largest_batch(P, max_ttft_ms=2000, min_tokens_per_s_per_user=20)
    assert s.feasible and s.binding == "ttft"
    assert serving.estimate(s.params).ttft_ms <= 2000
    assert serving.estimate(replace(P, batch=s.value + 1)).ttft_ms > 2000
    free = solve.largest_batch(P)
    assert free.binding == "memory" and not serving.estimate(replace(P, batch=free.value + 1)).fits


def test_infeasible_asks_say_which_constraint_binds():
    s = solve.largest_batch(P, max_ttft_ms=1)
    assert not s.feasible and s.binding == "ttft" and "time-to-first-token" in s.text
    s = solve.largest_batch(P, min_tokens_per_s_per_user=10_000)
    assert not s.feasible and s.binding == "tokens_per_s_per_user"
    s = solve.largest_batch(replace(P, gpus=1, tp=1))
    assert not s.feasible and s.binding == "memory"


def test_longest_context_fits_and_one_more_token_does_not():
    q = replace(P, batch=64)
    s = solve.longest_context(q)
    cfg, _ = serving.resolve(q)
    assert memory_per_gpu(cfg, 64, s.value + q.output_tokens).fits
    assert not memory_per_gpu(cfg, 64, s.value + 1 + q.output_tokens).fits


def test_fewest_gpus_serves_every_user():
    s = solve.fewest_gpus(P, 500, max_ttft_ms=5000)
    assert s.feasible
    replicas = s.params.gpus // s.params.tp
    assert replicas * s.params.batch >= 500 and serving.estimate(s.params).ttft_ms <= 5000
    assert not solve.fewest_gpus(P, 500, max_ttft_ms=1).feasible
