"""Run a trace through the serving core: the event loop (arrivals and step ends) that drives a Scheduler
with a clock, and chapter 7's façade, simulate_batching (static vs continuous batching), with its bounds.

Time is continuous (seconds). Events sit on a heap keyed (time, priority, seq): request arrivals
(priority 0) and engine-step ends (priority 1), so an arrival at the instant a step ends is queued
before the next step is planned.
"""

from __future__ import annotations

import heapq

from inside_llm.sim.serve.clocks import Executor, SimpleStepCost, StepTimeFn, describe_step_time
from inside_llm.sim.serve.kv import BlockPool, KVCacheManager, check_pool
from inside_llm.sim.serve.records import BatchingResult, policy_run, trace_requests
from inside_llm.sim.serve.requests import Requests
from inside_llm.sim.serve.scheduler import POLICIES, Scheduler
from inside_llm.sim.workloads import Trace, check_int, check_subset, make_trace

ARRIVAL, STEP_END = 0, 1
MAX_RATE = 32.0  # requests/s (the API reads these bounds from here)
MAX_SEATS = 64
MAX_KV_CAPACITY_TOKENS = 4_194_304


def run(scheduler: Scheduler, executor: Executor) -> Scheduler:
    """Heap of (time, priority, seq, payload); all events at one instant are handled before planning."""
    heap: list[tuple] = [(a, ARRIVAL, i, None) for i, a in enumerate(scheduler.arrival_s.tolist())]
    heapq.heapify(heap)
    seq, busy = len(heap), False
    while heap:
        now, priority, _, plan = heapq.heappop(heap)
        if priority == ARRIVAL:
            scheduler.arrive()
        else:
            scheduler.finish_step(plan, None, now)
            busy = False
        if busy or (heap and heap[0][0] == now):
            continue
        plan = scheduler.schedule(now)
        if plan is not None:
            executor.execute(plan)
            heapq.heappush(heap, (plan.end_s, STEP_END, seq, plan))
            seq, busy = seq + 1, True
    if not scheduler.done:
        raise RuntimeError(f"engine stalled with {scheduler.num_requests - scheduler.num_finished} unfinished requests")
    return scheduler


def batching_run(
    policy: str,
    trace: Trace,
    seats: int,
    step_time: StepTimeFn,
    num_blocks: int,
    block_size: int,
    max_num_batched_tokens: int,
    fast_forward: bool = True,
    record_seat_tokens: bool = False,
) -> Scheduler:
    """One policy over one trace on a paged pool of num_blocks blocks, run to the end."""
    requests = Requests.of(trace.arrival_s, trace.num_prompt_tokens, trace.num_output_tokens)
    kv = KVCacheManager(BlockPool(num_blocks), block_size, len(requests))
    scheduler = Scheduler(policy, requests, seats, kv, max_num_batched_tokens, fast_forward, record_seat_tokens)
    return run(scheduler, Executor(step_time))


def validate_batching(
    rate: float,
    seats: int,
    kv_capacity_tokens: int,
    block_size: int,
    max_frames: int,
    max_num_batched_tokens: int,
    max_seq_len: int,
    step_time,
    policies: tuple[str, ...],
) -> None:
    """ValueError naming the parameter and its bound (routers map these to 422)."""
    if isinstance(rate, bool) or not (isinstance(rate, (int, float)) and 0 < rate <= MAX_RATE):
        raise ValueError(f"rate must be in (0, {MAX_RATE}] requests/s, got {rate!r}")
    check_int("seats", seats, 1, MAX_SEATS)
    check_pool("kv_capacity_tokens", kv_capacity_tokens, block_size, max_seq_len, MAX_KV_CAPACITY_TOKENS)
    check_int("max_frames", max_frames, 1, 2000)
    check_int("max_num_batched_tokens", max_num_batched_tokens, 1, 65_536)
    if step_time is not None and not callable(step_time):
        raise ValueError("step_time must be callable (num_prefill_tokens, num_decode_seqs, decode_context_tokens)")
    check_subset("policies", policies, POLICIES)


def simulate_batching(
    rate: float = 4.0,
    num_requests: int = 200,
    seats: int = 16,
    workload: str = "sharegpt",
    seed: int = 0,
    step_time: StepTimeFn | None = None,
    kv_capacity_tokens: int = 32_768,
    block_size: int = 16,
    max_frames: int = 200,
    max_num_batched_tokens: int = 2048,
    max_seq_len: int = 2048,
    policies: tuple[str, ...] = POLICIES,
) -> BatchingResult:
    """Static vs continuous batching on one seeded Poisson trace (rate in requests/s).

    step_time(num_prefill_tokens, num_decode_seqs, decode_context_tokens) -> seconds (or an object
    with .seconds); default SimpleStepCost(). KV: kv_capacity_tokens // block_size blocks.
    """
    policies = tuple(policies)
    validate_batching(
        rate,
        seats,
        kv_capacity_tokens,
        block_size,
        max_frames,
        max_num_batched_tokens,
        max_seq_len,
        step_time,
        policies,
    )
    trace = make_trace(workload, num_requests, seed, rate, max_seq_len)
    cost = step_time if step_time is not None else SimpleStepCost()
    engines = [
        batching_run(p, trace, seats, cost, kv_capacity_tokens // block_size, block_size, max_num_batched_tokens)
        for p in policies
    ]
    horizon = max(float(e.finish_s.max()) for e in engines)
    params = dict(
        rate=rate,
        num_requests=num_requests,
        seats=seats,
        workload=workload,
        seed=seed,
        kv_capacity_tokens=kv_capacity_tokens,
        block_size=block_size,
        max_frames=max_frames,
        max_num_batched_tokens=max_num_batched_tokens,
        max_seq_len=max_seq_len,
    )
    return BatchingResult(
        params=params,
        trace=trace.summary(),
        requests=trace_requests(trace),
        horizon_s=round(horizon, 6),
        step_time=describe_step_time(cost),
        policies=[policy_run(e.steps, horizon, max_frames) for e in engines],
    )
