"""The Scheduler's hooks for a shared server (the live engine's), tested once here on the core: the fair-share
queue (waiting order and seat swap), the per-request token cap, admission between steps, and ending early."""

import numpy as np

from inside_llm.sim.serve.clocks import Executor, UnitClock
from inside_llm.sim.serve.fairshare import FairShare
from inside_llm.sim.serve.kv import BlockPool, KVCacheManager
from inside_llm.sim.serve.requests import Requests
from inside_llm.sim.serve.scheduler import Scheduler


def shared(clients, prompt=4, out=10, seats=2, blocks=64, budget=2048, cap=0):
    """A scheduler over len(clients) requests whose client is clients[rid], with the fair-share queue."""
    n = len(clients)
    req = Requests.of(np.zeros(n), [prompt] * n, [out] * n)
    queue = FairShare(lambda rid: clients[rid])
    kv = KVCacheManager(BlockPool(blocks), 4, n)
    s = Scheduler(
        "continuous", req, seats, kv, budget, fast_forward=False, queue=queue, long_prefill_token_threshold=cap
    )
    return s, queue


def step(s, now=0.0):
    plan = s.schedule(now)
    Executor(UnitClock()).execute(plan)
    s.finish_step(plan, None, plan.end_s)
    return plan


def test_the_waiting_order_is_fewest_running_then_queue_order():
    s, queue = shared(["a", "a", "b", "a", "b"], seats=3)
    for rid in range(3):
        s.arrive(rid)
    step(s)
    assert s.running == [0, 2, 1], "within one step too: b's chat is seated before a's second"
    s.arrive(3)
    s.arrive(4)
    step(s)  # a runs 2, b 1: a gap of 1, no swap
    assert s.running == [0, 2, 1] and queue.order == [3, 4]
    s.end(2, 1.0)  # b's chat ends early (its stop token)
    step(s)
    assert s.running == [0, 1, 4], "b (none running now) is seated before a's third chat, which arrived first"
    s.end(0, 2.0)
    step(s)
    assert s.running == [1, 4, 3] and not queue.order


def test_the_seat_swap_seats_a_client_two_behind_in_the_same_step_and_ends_every_request():
    s, queue = shared(["a", "a", "b"], seats=2)
    s.arrive(0)
    s.arrive(1)
    step(s)
    s.arrive(2)  # b has 0 running, a has 2: a's newest admitted (1) is swapped out, b seated at once
    plan = step(s)
    assert 2 in plan.ids.tolist() and s.running == [0, 2] and queue.order == [1]
    assert s.requests.preemptions.tolist() == [0, 1, 0]
    while s.num_finished < 3:
        step(s)
    assert s.requests.output.tolist() == [10, 10, 10] and s.kv.pool.num_free_blocks == 64


def test_no_swap_when_the_gap_is_one():
    s, queue = shared(["a", "b", "b"], seats=2)
    for rid in range(3):
        s.arrive(rid)
    step(s)
    step(s)
    assert s.running == [0, 1] and queue.order == [2] and s.num_preemptions == 0


def test_long_prefill_token_threshold_caps_each_request_per_step():
    s, _ = shared(["a", "b"], prompt=10, seats=2, cap=4)
    s.arrive(0)
    s.arrive(1)
    assert [step(s).n.tolist() for _ in range(3)] == [[4, 4], [4, 4], [2, 2]]


def test_admit_waiting_seats_between_steps_and_the_next_step_schedules_it():
    s, queue = shared(["a", "b"], prompt=6, seats=2, cap=4)
    s.arrive(0)
    assert [a[:2] for a in s.admit_waiting(s.budget)] == [(0, 4)] and s.running == [0] and not queue.order
    assert s.kv.num_slots(0) == 4, "pages for its first piece"
    assert step(s).n.tolist() == [4]
