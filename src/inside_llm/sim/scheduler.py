"""A serving engine as a discrete-event simulation: static vs continuous batching, in tokens.

Time is continuous (seconds). Events sit on a heap keyed (time, priority, seq): request arrivals
(priority 0) and engine-step ends (priority 1), so an arrival at the instant a step ends is queued
before the next step is planned. Each step the scheduler picks, per request, how many tokens to
compute (vLLM v1's model: no prefill/decode phases, only num_computed_tokens catching up with
num_tokens = prompt + output so far); the step lasts step_time(num_prefill_tokens, num_decode_seqs,
decode_context_tokens) seconds; at its end every request whose computed tokens caught up samples one
output token. The first token therefore arrives at the end of the step that finishes its prefill.

KV memory is a paged BlockPool. Before computing, a request's block table must cover
num_computed_tokens + new tokens; when it cannot, the newest running request is preempted
(recompute-style, as vLLM: its blocks are freed, num_computed_tokens = 0, it goes to the front of
the waiting queue keeping its output, and later re-prefills prompt + output) and the allocation is
retried. No new request is admitted in a step that preempted.

Policies (same trace, same KV pool, same step_time):
- `static`: when the engine is empty, up to `seats` waiting requests (FCFS, those that fit in KV)
  form a batch and prefill together in one step; then the batch decodes until its longest answer
  is done. Seats emptied by finished requests stay empty: nobody joins a running batch. Generous to
  static: finished rows cost nothing (real static engines keep decoding padding).
- `continuous` (Orca's iteration-level scheduling with vLLM's chunked prefill): each step running
  requests are scheduled first (in admission order), then waiting requests take free seats; a step
  computes at most `max_num_batched_tokens` tokens, so long prompts are split into chunks that ride
  along with the decodes.
Identical pure-decode steps are advanced in one go (same result as stepping them one by one: the
run stops before any finish, block shortage or admissible arrival), which keeps 10,000 requests fast.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque

import numpy as np

from inside_llm.sim.kvcache import BlockPool, KVCacheManager
from inside_llm.sim.schedrecords import (
    POLICIES,
    frames,
    log_segment,
    metrics_math,
    request_records,
    run_metrics,
    sample_steps,
    seat_spans,
    step_starts,
    validate_batching,
)
from inside_llm.sim.stepcost import SimpleStepCost, StepTimeFn, describe_step_time, seconds
from inside_llm.sim.workloads import Trace, make_trace

ARRIVAL, STEP_END = 0, 1


class Request:
    """One request's progress. num_tokens = prompt + output so far; KV holds num_computed_tokens."""

    __slots__ = ("request_id", "arrival_s", "num_prompt_tokens", "max_tokens", "num_output_tokens",
                 "num_computed_tokens", "seat", "num_preemptions", "first_token_s", "finish_s")

    def __init__(self, request_id: int, arrival_s: float, num_prompt_tokens: int, max_tokens: int):
        self.request_id, self.arrival_s = request_id, arrival_s
        self.num_prompt_tokens, self.max_tokens = num_prompt_tokens, max_tokens
        self.num_output_tokens = self.num_computed_tokens = self.num_preemptions = 0
        self.seat = -1
        self.first_token_s = self.finish_s = math.nan

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens


class Step:
    """One planned engine step, or k identical pure-decode steps (k > 1). sched: [(request, new tokens)]."""

    __slots__ = ("sched", "k", "start_s", "end_s", "durations", "num_prefill_tokens", "num_decode_seqs",
                 "decode_context_tokens")

    def __init__(self, sched: list[tuple[Request, int]], start_s: float):
        self.sched, self.k, self.start_s, self.end_s = sched, 1, start_s, start_s
        self.num_prefill_tokens = self.num_decode_seqs = self.decode_context_tokens = 0
        for req, n in sched:
            if n == 1 and req.num_output_tokens and req.num_computed_tokens == req.num_tokens - 1:
                self.num_decode_seqs += 1
                self.decode_context_tokens += req.num_computed_tokens + 1  # keys attended, itself included
            else:
                self.num_prefill_tokens += n
        self.durations: list[float] = []


class Engine:
    """One batching policy over one trace. run() fills requests' timings, the log and the counters."""

    def __init__(self, policy: str, trace: Trace, seats: int, step_time: StepTimeFn, num_blocks: int,
                 block_size: int, max_num_batched_tokens: int, fast_forward: bool = True):
        """fast_forward=False steps every decode step one by one (the reference the tests compare to)."""
        self.policy, self.seats, self.step_time, self.fast_forward = policy, seats, step_time, fast_forward
        self.block_size, self.budget = block_size, max_num_batched_tokens
        self.kv = KVCacheManager(BlockPool(num_blocks), block_size)
        self.arrival_s = trace.arrival_s
        self.reqs = [Request(i, a, p, o) for i, (a, p, o) in enumerate(zip(
            trace.arrival_s.tolist(), trace.num_prompt_tokens.tolist(), trace.num_output_tokens.tolist()))]
        self.front: deque[Request] = deque()  # preempted requests, at the waiting queue's front
        self.admit_ptr = self.num_arrived = 0  # never-admitted arrivals: reqs[admit_ptr:num_arrived]
        self.running: list[Request] = []  # admission order: the last is preempted first
        self.free_seats = list(range(seats))  # a heap: the lowest free seat is taken first
        self.seat_req: list[Request | None] = [None] * seats
        self.durations = array("d")  # seconds, one per engine step
        self.segments: list = []  # schedrecords.Segment, one per planned step or decode run
        self.num_preemptions = self.num_finished = self.num_produced = 0
        self.busy_seat_s = 0.0  # sum over steps of duration * occupied seats
        self.preempted = False

    # -- waiting queue and seats ---------------------------------------------------------------
    def head(self) -> Request | None:
        if self.front:
            return self.front[0]
        return self.reqs[self.admit_ptr] if self.admit_ptr < self.num_arrived else None

    def pop_head(self) -> None:
        if self.front:
            self.front.popleft()
        else:
            self.admit_ptr += 1

    def admit(self, req: Request) -> None:
        req.seat = heapq.heappop(self.free_seats)
        self.seat_req[req.seat] = req
        self.running.append(req)

    def leave(self, req: Request) -> None:
        self.running.remove(req)
        self.kv.free(req.request_id)
        self.seat_req[req.seat] = None
        heapq.heappush(self.free_seats, req.seat)
        req.seat = -1

    def preempt(self, req: Request) -> None:
        """Recompute preemption: drop its KV, keep its output, requeue it at the front."""
        self.leave(req)
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.front.appendleft(req)
        self.preempted = True

    # -- planning ------------------------------------------------------------------------------
    def grow(self, req: Request, num_tokens: int) -> bool:
        """Make req's blocks cover num_tokens, preempting the newest running requests if needed;
        False if req itself had to be preempted."""
        while self.kv.allocate(req.request_id, num_tokens) is None:
            victim = self.running[-1]
            self.preempt(victim)
            if victim is req:
                return False
        return True

    def schedule_running(self, budget: int) -> tuple[list[tuple[Request, int]], int]:
        """Running requests first, in admission order, each as many tokens as the budget allows.
        (Hot path: allocate is only called when a request needs a new page, so Block.num_tokens
        in this pool is refreshed per page, not per token.)"""
        sched, i, tables, bs = [], 0, self.kv.req_to_blocks, self.block_size
        while i < len(self.running):
            req = self.running[i]
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            if n > 0:
                need = req.num_computed_tokens + n
                if need > len(tables[req.request_id]) * bs and not self.grow(req, need):
                    break  # req was the newest; everyone before it is scheduled
                sched.append((req, n))
                budget -= n
            i += 1
        return sched, budget

    def schedule_static(self) -> list[tuple[Request, int]]:
        if not self.running:  # form a batch; it prefills whole prompts in its first step
            while len(self.running) < self.seats and (req := self.head()) is not None:
                if self.kv.allocate(req.request_id, req.num_tokens) is None:
                    break
                self.pop_head()
                self.admit(req)
        return self.schedule_running(1 << 62)[0]

    def schedule_continuous(self) -> list[tuple[Request, int]]:
        sched, budget = self.schedule_running(self.budget)
        while not self.preempted and budget > 0 and len(self.running) < self.seats:
            req = self.head()
            if req is None:
                break
            n = min(req.num_tokens, budget)  # a waiting request has computed nothing
            if self.kv.allocate(req.request_id, n) is None:
                break
            self.pop_head()
            self.admit(req)
            sched.append((req, n))
            budget -= n
        return sched

    def plan(self, now: float) -> Step | None:
        self.preempted = False
        sched = self.schedule_static() if self.policy == "static" else self.schedule_continuous()
        if not sched:
            return None
        step = Step(sched, now)
        if (self.fast_forward and step.num_prefill_tokens == 0 and step.num_decode_seqs == len(self.running)
                and not self.preempted):
            self.extend(step, now)
        else:
            step.durations.append(seconds(self.step_time, step.num_prefill_tokens, step.num_decode_seqs,
                                          step.decode_context_tokens))
            step.end_s = now + step.durations[0]
        return step

    def extend(self, step: Step, now: float) -> None:
        """Run pure-decode steps in one go until a finish, a block shortage or an admissible arrival."""
        reqs = [r for r, _ in step.sched]
        computed = np.array([r.num_computed_tokens for r in reqs], dtype=np.int64)
        k_max = self.max_blocks_k(computed, min(r.max_tokens - r.num_output_tokens for r in reqs))
        n, ctx = len(reqs), int(computed.sum())
        open_seat = self.policy == "continuous" and n < self.seats and self.budget > n and self.head() is None
        more = open_seat and self.num_arrived < len(self.reqs)
        stop_at = float(self.arrival_s[self.num_arrived]) if more else math.inf
        t = now
        for j in range(1, k_max + 1):
            d = seconds(self.step_time, 0, n, ctx + j * n)
            step.durations.append(d)
            t += d  # the same float sums as stepping one by one
            if t >= stop_at:
                break
        step.k, step.end_s = len(step.durations), t
        for r in reqs:
            self.kv.allocate(r.request_id, r.num_computed_tokens + step.k)

    def max_blocks_k(self, computed: np.ndarray, k_max: int) -> int:
        """Largest k <= k_max such that k more tokens per request fit in the free blocks (k=1 always does)."""
        num_blocks, bs = self.kv.pool.num_blocks, self.block_size  # running requests hold every used block
        lo, hi = 1, k_max
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if int(np.sum(-(-(computed + mid) // bs))) <= num_blocks:
                lo = mid
            else:
                hi = mid - 1
        return lo

    # -- the event loop --------------------------------------------------------------------------
    def run(self) -> Engine:
        """Heap of (time, priority, seq, payload); all events at one instant are handled before planning."""
        heap: list[tuple] = [(a, ARRIVAL, i, None) for i, a in enumerate(self.arrival_s.tolist())]
        heapq.heapify(heap)
        seq, busy = len(heap), False
        while heap:
            now, priority, _, step = heapq.heappop(heap)
            if priority == ARRIVAL:
                self.num_arrived += 1
            else:
                self.end_step(step, now)
                busy = False
            if busy or (heap and heap[0][0] == now):
                continue
            step = self.plan(now)
            if step is not None:
                heapq.heappush(heap, (step.end_s, STEP_END, seq, step))
                seq, busy = seq + 1, True
        if self.num_finished != len(self.reqs):
            raise RuntimeError(f"engine stalled with {len(self.reqs) - self.num_finished} unfinished requests")
        return self

    def end_step(self, step: Step, now: float) -> None:
        """Apply the step's tokens: requests whose KV caught up sample one token (k in a decode run)."""
        k, done, produced = step.k, [], 0
        for req, n in step.sched:
            req.num_computed_tokens += n if k == 1 else k
            if k == 1 and req.num_computed_tokens < req.num_tokens:
                continue  # a prefill chunk that did not reach the end of the prompt
            req.num_output_tokens += k
            produced += 1
            if req.num_output_tokens == 1:
                req.first_token_s = now
            if req.num_output_tokens == req.max_tokens:
                req.finish_s = now
                done.append(req)
        log_segment(self, step, produced, len(done))
        for req in done:
            self.leave(req)
        self.num_finished += len(done)


def simulate_batching(rate: float = 4.0, num_requests: int = 200, seats: int = 16, workload: str = "sharegpt",
                      seed: int = 0, step_time: StepTimeFn | None = None, kv_capacity_tokens: int = 32_768,
                      block_size: int = 16, max_frames: int = 200, max_num_batched_tokens: int = 2048,
                      max_seq_len: int = 2048, policies: tuple[str, ...] = POLICIES) -> dict:
    """Static vs continuous batching on one seeded Poisson trace (rate in requests/s).

    step_time(num_prefill_tokens, num_decode_seqs, decode_context_tokens) -> seconds (or an object
    with .seconds); default SimpleStepCost(). KV: kv_capacity_tokens // block_size blocks.
    Returns {"params", "trace", "step_time", "policies": [{name, <run metrics>, math, frames, requests, seat_spans}]}.
    """
    policies = tuple(policies)
    validate_batching(rate, seats, kv_capacity_tokens, block_size, max_frames, max_num_batched_tokens,
                      max_seq_len, step_time, policies)
    trace = make_trace(workload, num_requests, seed, rate, max_seq_len)
    cost = step_time if step_time is not None else SimpleStepCost()
    engines = [Engine(p, trace, seats, cost, kv_capacity_tokens // block_size, block_size,
                      max_num_batched_tokens).run() for p in policies]
    horizon = max(max(r.finish_s for r in e.reqs) for e in engines)
    out = []
    for e in engines:
        starts = step_starts(e)
        m = run_metrics(e)
        out.append({"name": e.policy, **m, "num_kv_blocks": e.kv.pool.num_blocks, "math": metrics_math(m, e),
                    "frames": frames(e, sample_steps(starts, horizon, max_frames), starts),
                    "requests": request_records(e), "seat_spans": seat_spans(e, starts)})
    params = dict(rate=rate, num_requests=num_requests, seats=seats, workload=workload, seed=seed,
                  kv_capacity_tokens=kv_capacity_tokens, block_size=block_size, max_frames=max_frames,
                  max_num_batched_tokens=max_num_batched_tokens, max_seq_len=max_seq_len)
    return {"params": params, "trace": trace.summary(), "step_time": describe_step_time(cost), "policies": out}
