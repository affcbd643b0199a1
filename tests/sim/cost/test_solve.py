"""The dials inverted: each answer meets its limits and one step further breaks the binding constraint."""

from __future__ import annotations

from dataclasses import replace

from inside_llm.sim.cost import serving, solve
from inside_llm.sim.cost.costmodel import memory_per_gpu

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


def test_fewest_gpus_on_a_menu_takes_the_smallest_size_that_holds_the_replicas():
    free = solve.fewest_gpus(P, 3000)
    assert free.value == 24 and free.text.startswith("24 GPUs: 3 replicas of tp 8")  # any whole number of replicas
    menu = solve.fewest_gpus(P, 3000, counts=(1, 2, 4, 8, 16, 32, 64, 72, 128))
    assert menu.value == 32 and menu.params.gpus // menu.params.tp * menu.params.batch >= 3000
    assert not solve.fewest_gpus(P, 3000, counts=(1, 2, 4, 8, 16)).feasible  # 24 needed, the menu ends at 16
    one = solve.fewest_gpus(replace(P, model="llama-3.1-8b"), 100)
    assert one.text.startswith("1 GPU: 1 replica of tp 1, 100 users each")


def test_longest_context_within_a_prompt_range_says_the_range_binds():
    s = solve.longest_context(P, max_prompt_tokens=65536)
    assert s.value == 65536 and s.binding == "prompt_limit" and "range asked for ends there" in s.text
    assert solve.longest_context(P).value > 65536  # the default setup's memory holds a longer prompt
