"""Run a trace through the serving core: the event loop (arrivals and step ends) that drives a Scheduler
with a clock, and chapter 7's façade, simulate_batching (static vs continuous batching), with its bounds.

A `shared_prefix` share of the requests begins with one system prompt of SYSTEM_PROMPT_TOKENS tokens
(prepended to its prompt; the output is clipped to what max_seq_len leaves): those requests get the
chained hashes of the system prompt's full pages, so the KV manager's prefix cache lets a later one
reuse the pages an earlier one computed (vLLM's automatic prefix caching). The simulation knows no
other token contents, so no other page is looked up, and shared_prefix=0 runs exactly as without a cache.

Time is continuous (seconds). Events sit on a heap keyed (time, priority, seq): request arrivals
(priority 0) and engine-step ends (priority 1), so an arrival at the instant a step ends is queued
before the next step is planned.
"""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np

from inside_llm.sim.serve.clocks import Executor, SimpleStepCost, StepTimeFn, describe_step_time
from inside_llm.sim.serve.kv import BlockPool, KVCacheManager, PageCount, check_pool
from inside_llm.sim.serve.records import BatchingResult, policy_run, trace_requests
from inside_llm.sim.serve.requests import Requests
from inside_llm.sim.serve.scheduler import POLICIES, Scheduler
from inside_llm.sim.serve.workloads import Trace, check_int, check_subset, make_trace

ARRIVAL, STEP_END = 0, 1
MAX_RATE = 32.0  # requests/s (the API reads these bounds from here)
MAX_SEATS = 64
MAX_KV_CAPACITY_TOKENS = 4_194_304
SYSTEM_PROMPT_TOKENS = 256  # the page's choice: one system prompt, 16 pages of 16 tokens


def with_system_prompt(trace: Trace, share: float, prefix_tokens: int) -> tuple[Trace, np.ndarray]:
    """The trace with prefix_tokens more prompt tokens for round(share x N) requests spread evenly (request
    i shares when floor((i + 1) x share) > floor(i x share)), and which requests those are."""
    i = np.arange(trace.num_requests)
    sharing = np.floor((i + 1) * share) > np.floor(i * share)
    prompt = np.where(
        sharing, np.minimum(trace.num_prompt_tokens + prefix_tokens, trace.max_seq_len - 1), trace.num_prompt_tokens
    )
    output = np.minimum(trace.num_output_tokens, trace.max_seq_len - prompt)
    return dataclasses.replace(trace, num_prompt_tokens=prompt, num_output_tokens=output), sharing


def prefix_block_hashes(prefix_tokens: int, block_size: int) -> list[int]:
    """Chained hashes of the system prompt's full pages: page i's hash covers its tokens and page i-1's hash
    (as vLLM's hash_block_tokens), so equal hashes mean equal prefixes. Its tokens are (0, i), one system
    prompt; ints only, so the hashes are the same in every process."""
    out, parent = [], -1
    for page in range(prefix_tokens // block_size):
        parent = hash((parent, 0, page))
        out.append(parent)
    return out


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
    sharing: np.ndarray | None = None,
    prefix_tokens: int = 0,
) -> Scheduler:
    """One policy over one trace on a paged pool of num_blocks blocks, run to the end. sharing: which
    requests begin with the prefix_tokens-token system prompt (their pages may be shared)."""
    requests = Requests.of(trace.arrival_s, trace.num_prompt_tokens, trace.num_output_tokens)
    shared = sharing is not None and bool(sharing.any())
    kv = KVCacheManager((BlockPool if shared else PageCount)(num_blocks), block_size, len(requests))
    if shared:
        hashes = prefix_block_hashes(prefix_tokens, block_size)
        for rid in np.flatnonzero(sharing).tolist():
            kv.set_block_hashes(rid, hashes)
    scheduler = Scheduler(policy, requests, seats, kv, max_num_batched_tokens, fast_forward, record_seat_tokens)
    run(scheduler, Executor(step_time))
    log = scheduler.steps
    log.prefix_query_tokens, log.prefix_hit_tokens = kv.num_query_tokens, kv.num_hit_tokens
    log.num_prefix_evictions = kv.pool.num_evictions
    return scheduler


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
    shared_prefix: float = 0.0,
) -> None:
    """ValueError naming the parameter and its bound (routers map these to 422)."""
    if isinstance(shared_prefix, bool) or not (isinstance(shared_prefix, (int, float)) and 0 <= shared_prefix <= 1):
        raise ValueError(f"shared_prefix must be a share in [0, 1] of the requests, got {shared_prefix!r}")
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
    shared_prefix: float = 0.0,
) -> BatchingResult:
    """Static vs continuous batching on one seeded Poisson trace (rate in requests/s).

    step_time(num_prefill_tokens, num_decode_seqs, decode_context_tokens) -> seconds (or an object
    with .seconds); default SimpleStepCost(). KV: kv_capacity_tokens // block_size blocks.
    shared_prefix: the share of requests that begin with one system prompt of
    min(SYSTEM_PROMPT_TOKENS, max_seq_len // 2) tokens, whose pages the prefix cache shares.
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
        shared_prefix,
    )
    trace, sharing, prefix_tokens = make_trace(workload, num_requests, seed, rate, max_seq_len), None, 0
    if shared_prefix > 0:
        prefix_tokens = min(SYSTEM_PROMPT_TOKENS, max_seq_len // 2)
        trace, sharing = with_system_prompt(trace, shared_prefix, prefix_tokens)
    cost = step_time if step_time is not None else SimpleStepCost()
    num_blocks = kv_capacity_tokens // block_size
    engines = [
        batching_run(
            p,
            trace,
            seats,
            cost,
            num_blocks,
            block_size,
            max_num_batched_tokens,
            sharing=sharing,
            prefix_tokens=prefix_tokens,
        )
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
        shared_prefix=shared_prefix,
    )
    return BatchingResult(
        params=params,
        trace=trace.summary(),
        requests=trace_requests(trace),
        horizon_s=round(horizon, 6),
        step_time=describe_step_time(cost),
        policies=[policy_run(e.steps, horizon, max_frames) for e in engines],
    )
