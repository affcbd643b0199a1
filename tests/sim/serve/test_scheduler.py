"""Batching: static vs continuous on one trace, with the engine's invariants checked step by step."""

from functools import cache
from types import SimpleNamespace
from typing import get_type_hints

import numpy as np
import pytest

from inside_llm.sim.serve.clocks import SimpleStepCost
from inside_llm.sim.serve.records import RunMetrics, frames, step_starts
from inside_llm.sim.serve.simulate import batching_run, simulate_batching
from inside_llm.sim.serve.workloads import make_trace


@cache
def batching(**kw):
    return simulate_batching(**kw)


def by_name(result):
    return {p.name: p for p in result.policies}


@cache
def engine(
    policy,
    num_blocks=2048,
    seats=4,
    num_requests=40,
    rate=3.0,
    budget=2048,
    fast_forward=True,
    workload="alpaca",
    seed=0,
):
    trace = make_trace(workload, num_requests, seed, rate)
    return batching_run(
        policy, trace, seats, SimpleStepCost(), num_blocks, 16, budget, fast_forward, record_seat_tokens=True
    )


def all_frames(e):
    """Every step as a row: the frame columns, plus each seat's request and tokens from the step log."""
    cols = vars(frames(e.steps, np.arange(len(e.steps.durations)), step_starts(e.steps)))
    rows = [dict(zip(cols, values)) for values in zip(*cols.values())]
    for rec in e.steps.records:
        for j in range(rec.num_steps):
            ids = rec.seat_request_ids
            rows[rec.first_step + j].update(
                seat_request_ids=ids,
                seat_num_computed_tokens=[
                    n + j if r is not None else 0 for r, n in zip(ids, rec.seat_num_computed_tokens)
                ],
                seat_num_output_tokens=[n + j if r is not None else 0 for r, n in zip(ids, rec.seat_num_output_tokens)],
            )
    return rows


# -- the chapter's claim ----------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_continuous_beats_static_on_throughput_and_latency(seed):
    pols = by_name(batching(seed=seed))
    s, c = pols["static"], pols["continuous"]
    assert c.throughput_tokens_per_s > 1.5 * s.throughput_tokens_per_s
    assert c.latency_ms_p50 < s.latency_ms_p50 / 5
    assert c.ttft_ms_p50 < s.ttft_ms_p50
    assert c.seat_utilization > s.seat_utilization


def test_response_shape():
    result = batching()
    assert [p.name for p in result.policies] == ["static", "continuous"]
    assert len(result.requests.arrival_s) == len(result.requests.num_output_tokens) == 200
    for p in result.policies:
        for key, kind in get_type_hints(RunMetrics).items():  # every rate, percentile and fraction
            if kind is float:
                assert isinstance(getattr(p, key), float) and getattr(p, key) > 0, key
        assert 0 < p.seat_utilization <= 1 and p.ttft_ms_p50 <= p.ttft_ms_p99
        assert len(p.requests.finish_s) == 200 and 0 < len(p.frames.time_s) <= 200
        assert all(len(column) == len(p.frames.time_s) for column in vars(p.frames).values())
        assert {"throughput_tokens_per_s", "seat_utilization"} <= set(p.math)
        assert p.frames.time_s == sorted(p.frames.time_s)
        assert max(p.seat_spans.end_s) == pytest.approx(p.makespan_s + min(result.requests.arrival_s), abs=1e-5)


def test_deterministic_per_seed():
    assert simulate_batching(num_requests=30, seed=4) == simulate_batching(num_requests=30, seed=4)
    a, b = simulate_batching(num_requests=30, seed=4), simulate_batching(num_requests=30, seed=5)
    assert a.policies[1].requests != b.policies[1].requests


# -- conservation and bookkeeping -------------------------------------------------------------
@pytest.mark.parametrize("policy", ["static", "continuous"])
def test_every_request_finishes_with_exactly_its_tokens(policy):
    e = engine(policy)
    assert all(r.num_output_tokens == r.max_tokens for r in e.reqs)
    assert all(r.arrival_s < r.first_token_s <= r.finish_s for r in e.reqs)
    assert e.num_produced == sum(r.max_tokens for r in e.reqs)
    fr = all_frames(e)
    assert fr[-1]["num_tokens_produced_total"] == e.num_produced
    assert sum(f["num_tokens_produced"] for f in fr) == e.num_produced
    assert fr[-1]["num_finished"] == len(e.reqs) and e.kv.pool.num_free_blocks == e.kv.pool.num_blocks


@pytest.mark.parametrize("policy", ["static", "continuous"])
def test_fast_forward_equals_stepping_one_by_one(policy):
    fast, slow = engine(policy, num_blocks=200), engine(policy, num_blocks=200, fast_forward=False)
    assert len(fast.steps.records) < len(slow.steps.records)
    assert list(fast.steps.durations) == list(slow.steps.durations)
    key = lambda e: [(r.first_token_s, r.finish_s, r.num_preemptions) for r in e.reqs]  # noqa: E731
    assert key(fast) == key(slow)
    assert all_frames(fast) == all_frames(slow)


@pytest.mark.parametrize("policy", ["static", "continuous"])
def test_seats_hold_one_request_each_and_requests_keep_their_seat(policy):
    e = engine(policy)
    seat_of = {}
    for f in all_frames(e):
        ids = [r for r in f["seat_request_ids"] if r is not None]
        assert len(ids) == len(set(ids)) == f["num_occupied_seats"]
        for seat, rid in enumerate(f["seat_request_ids"]):
            if rid is not None:
                assert seat_of.setdefault(rid, seat) == seat  # no preemption here, so never reseated
    assert e.num_preemptions == 0


def test_static_never_admits_while_its_batch_is_running():
    e = engine("static", num_requests=60, rate=8.0)
    fr = all_frames(e)
    batches = 0
    for prev, cur in zip(fr, fr[1:]):
        before = {r for r in prev["seat_request_ids"] if r is not None}
        joined = {r for r in cur["seat_request_ids"] if r is not None} - before
        if joined:
            batches += 1
            end = prev["time_s"] + prev["duration_s"]
            assert all(e.reqs[r].finish_s == pytest.approx(end, abs=1e-5) for r in before)  # the old batch is done
            assert cur["num_prefill_tokens"] == sum(e.reqs[r].num_prompt_tokens for r in joined)
    assert batches >= 5


def test_continuous_fills_free_seats_at_the_next_step():
    """With memory and token budget to spare, whoever waits at the end of a step is seated in the next."""
    e = engine("continuous", num_requests=60, rate=8.0)
    fr = all_frames(e)
    filled = 0
    for before, prev, cur in zip(fr, fr[1:], fr[2:]):
        if cur["time_s"] > prev["time_s"] + prev["duration_s"] + 1e-5:
            continue  # the engine idled; cur was started by a later arrival
        staying = prev["num_occupied_seats"] - (prev["num_finished"] - before["num_finished"])
        assert cur["num_occupied_seats"] == min(e.seats, staying + prev["num_waiting"])
        filled += prev["num_waiting"] > 0 and staying < e.seats
    assert filled > 0


def test_chunked_prefill_respects_the_token_budget():
    e = engine("continuous", budget=64, workload="sharegpt", num_requests=20)
    fr = all_frames(e)
    assert all(f["num_prefill_tokens"] + f["num_decode_tokens"] <= 64 for f in fr)
    assert any(f["num_prefill_tokens"] and f["num_decode_tokens"] for f in fr)  # chunks ride with decodes


# -- KV memory and preemption -----------------------------------------------------------------
@pytest.mark.parametrize("policy", ["static", "continuous"])
def test_small_kv_forces_preemption_and_everyone_finishes(policy):
    e = engine(policy, num_blocks=128, seats=16, workload="sharegpt", num_requests=40, rate=20.0)
    assert e.num_preemptions > 0 and e.num_preemptions == sum(r.num_preemptions for r in e.reqs)
    assert all(r.num_output_tokens == r.max_tokens for r in e.reqs)
    fr = all_frames(e)
    assert max(f["num_kv_blocks_used"] for f in fr) <= 128
    assert max(f["num_kv_blocks_used"] for f in fr) > 100  # memory really was the limit
    assert fr[-1]["num_preemptions_total"] == e.num_preemptions


def test_kv_blocks_in_frames_match_the_requests_tokens():
    e = engine("continuous", num_blocks=256, seats=8, workload="sharegpt", num_requests=20, rate=10.0)
    for f in all_frames(e):
        need = sum(-(-n // 16) for n in f["seat_num_computed_tokens"])
        assert need <= f["num_kv_blocks_used"] <= 256


# -- the clock --------------------------------------------------------------------------------
def test_step_time_is_pluggable():
    calls = []

    def flat(p, d, c):
        calls.append((p, d, c))
        return 0.01

    result = simulate_batching(num_requests=10, step_time=flat, policies=("continuous",))
    pol = result.policies[0]
    assert all(d == 0.01 for d in pol.frames.duration_s) and calls
    assert all(p >= 0 and d >= 0 and c >= d for p, d, c in calls)
    obj = simulate_batching(
        num_requests=10, step_time=lambda p, d, c: SimpleNamespace(seconds=0.01), policies=("continuous",)
    )
    assert obj.policies[0].requests == pol.requests
    with pytest.raises(ValueError, match="step_time"):
        simulate_batching(num_requests=5, step_time=lambda p, d, c: 0.0)


def test_simple_step_cost_is_memory_bound_for_decode_and_compute_bound_for_prefill():
    cost = SimpleStepCost()
    assert 0.005 < cost(0, 1, 100) < 0.01  # ~13.5 GB of weights at ~2.5 TB/s
    assert cost(0, 32, 32 * 500) < 2 * cost(0, 1, 500)  # batching decode is nearly free
    assert cost(4096, 0, 0) > 5 * cost(0, 1, 500)  # a long prefill is math-bound


@pytest.mark.parametrize(
    "kw, name",
    [
        ({"rate": 0}, "rate"),
        ({"rate": -1.0}, "rate"),
        ({"num_requests": 10_001}, "num_requests"),
        ({"seats": 0}, "seats"),
        ({"seats": 257}, "seats"),
        ({"block_size": 0}, "block_size"),
        ({"kv_capacity_tokens": 100}, "kv_capacity_tokens"),
        ({"max_frames": 0}, "max_frames"),
        ({"max_num_batched_tokens": 0}, "max_num_batched_tokens"),
        ({"workload": "x"}, "workload"),
        ({"step_time": 3}, "step_time"),
        ({"policies": ("fifo",)}, "policies"),
    ],
)
def test_bounds_name_the_parameter(kw, name):
    with pytest.raises(ValueError, match=name):
        simulate_batching(**kw)


@pytest.mark.parametrize("policy", ["static", "continuous"])
def test_seat_spans_are_exact_stays(policy):
    """Every request sits once (no preemption here) from the start of its first step to its finish;
    spans in one seat never overlap; and they agree with every step's seat list."""
    from inside_llm.sim.serve.records import seat_spans

    e = engine(policy)
    cols = vars(seat_spans(e.steps, step_starts(e.steps)))
    spans = [dict(zip(cols, values)) for values in zip(*cols.values())]
    assert sorted(s["request_id"] for s in spans) == list(range(len(e.reqs)))
    for s in spans:
        r = e.reqs[s["request_id"]]
        assert s["end_s"] == pytest.approx(r.finish_s, abs=1e-6)
        assert r.arrival_s - 1e-6 <= s["start_s"] < r.first_token_s <= s["end_s"]
    for seat in range(e.seats):
        mine = [s for s in spans if s["seat"] == seat]
        assert all(a["end_s"] <= b["start_s"] + 1e-9 for a, b in zip(mine, mine[1:]))
    for f in all_frames(e):
        t = f["time_s"] + f["duration_s"] / 2
        for seat, rid in enumerate(f["seat_request_ids"]):
            inside = [s["request_id"] for s in spans if s["seat"] == seat and s["start_s"] <= t < s["end_s"]]
            assert inside == ([] if rid is None else [rid])


def test_preempted_requests_get_one_span_per_stay():
    from inside_llm.sim.serve.records import seat_spans

    e = engine("continuous", num_blocks=128, seats=16, workload="sharegpt", num_requests=40, rate=20.0)
    assert e.num_preemptions > 0
    spans = seat_spans(e.steps, step_starts(e.steps))
    assert len(spans.request_id) == len(e.reqs) + sum(r.num_preemptions for r in e.reqs)


@pytest.mark.parametrize("model_id, gpu_id, tp", [("llama-3.1-8b", "h100-sxm", 1), ("llama-3.1-70b", "h100-sxm", 4)])
def test_cost_model_clock_times_decode_runs_as_step_time_does(model_id, gpu_id, tp):
    """The vectorized decode clock (one numpy call per run) agrees with the cost model step by step."""
    from inside_llm.sim.cost import costmodel
    from inside_llm.sim.hardware import catalog
    from inside_llm.sim.serve.clocks import CostModelClock

    clock = CostModelClock(costmodel.EngineConfig(catalog.model(model_id), catalog.gpu(gpu_id), tp=tp))
    for n in (1, 7, 64):
        contexts = np.array([n, 500 * n, 2048 * n, 100_003])
        scalar = [clock(0, n, int(c)).seconds for c in contexts]
        assert clock.decode_seconds(n, contexts).tolist() == pytest.approx(scalar, rel=1e-12)


def test_a_vectorized_clock_gives_the_same_run_as_a_scalar_one():
    cost = SimpleStepCost()
    trace = make_trace("sharegpt", 60, 3, 6.0)
    fast = batching_run("continuous", trace, 8, cost, 400, 16, 2048)
    slow = batching_run("continuous", trace, 8, lambda p, d, c: cost(p, d, c), 400, 16, 2048)
    assert list(fast.steps.durations) == list(slow.steps.durations)
    assert [(r.first_token_s, r.finish_s) for r in fast.reqs] == [(r.first_token_s, r.finish_s) for r in slow.reqs]


@pytest.mark.parametrize("policy", ["static", "continuous"])
def test_fast_forward_from_a_step_that_preempted_equals_stepping_one_by_one(policy):
    """A step that preempted starts a decode run when the head of the queue cannot fit (decode steps only take
    memory): on a pool short enough to preempt often, the same steps, times and frames as stepping."""
    kw = dict(num_blocks=16, seats=8, num_requests=30, rate=6.0)
    fast, slow = engine(policy, **kw), engine(policy, fast_forward=False, **kw)
    assert fast.num_preemptions == slow.num_preemptions > 5
    preempting_runs = [
        r
        for prev, r in zip(fast.steps.records, fast.steps.records[1:])
        if r.num_steps > 1 and r.num_preemptions_total > prev.num_preemptions_total
    ]
    assert preempting_runs
    assert list(fast.steps.durations) == list(slow.steps.durations)
    key = lambda e: [(r.first_token_s, r.finish_s, r.num_preemptions) for r in e.reqs]  # noqa: E731
    assert key(fast) == key(slow)
    assert all_frames(fast) == all_frames(slow)
