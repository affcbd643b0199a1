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
run stops before any finish, block shortage or admissible arrival), which keeps 10,000 requests fast;
a clock with a vectorized `decode_seconds` (stepcost.py) times the whole run in one numpy call.

The engine keeps a typed step log (`StepRecord`, one per planned step or decode run); schedrecords.py
turns it into what a run reports. The parameters' bounds are checked here (`validate_batching`).
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque
from dataclasses import dataclass

import numpy as np

from inside_llm.sim.kvcache import BlockPool, KVCacheManager, num_blocks_for
from inside_llm.sim.schedrecords import BatchingResult, policy_run, trace_requests
from inside_llm.sim.stepcost import SimpleStepCost, StepTimeFn, decode_run_seconds, describe_step_time, seconds
from inside_llm.sim.workloads import Trace, check_int, make_trace

ARRIVAL, STEP_END = 0, 1
POLICIES = ("static", "continuous")
MAX_RATE = 32.0  # requests/s (the API reads these bounds from here)
MAX_SEATS = 64
MAX_KV_CAPACITY_TOKENS = 4_194_304


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
        decode_seqs = context = prefill = 0
        for req, n in sched:  # hot loop: num_tokens spelled out
            out = req.num_output_tokens
            if n == 1 and out and req.num_computed_tokens == req.num_prompt_tokens + out - 1:
                decode_seqs += 1
                context += req.num_computed_tokens + 1  # keys attended, itself included
            else:
                prefill += n
        self.num_prefill_tokens, self.num_decode_seqs, self.decode_context_tokens = prefill, decode_seqs, context
        self.durations: list[float] = []


@dataclass(slots=True)
class StepRecord:
    """The log of one planned step, or of a run of num_steps identical decode steps.

    Seat lists describe the end of the record's first step; in a decode run every occupied seat
    gains one token per step after that. Counters ending in _before count everything before it.
    """

    first_step: int  # index of its first step in Engine.durations
    num_steps: int
    start_s: float
    seat_request_ids: list[int | None]
    seat_num_computed_tokens: list[int] | None  # only when the engine records seat tokens (tests)
    seat_num_output_tokens: list[int] | None
    preempted_waiting_ids: tuple[int, ...]  # the waiting queue's front, in order
    first_new_waiting_id: int  # then never-admitted arrivals, from this id on
    num_prefill_tokens: int
    num_decode_seqs: int
    num_sampled_per_step: int  # requests that sampled a token in each of its steps
    num_kv_blocks_used: int | None  # at the end of its first step (decode run: computed when asked)
    decode_computed_tokens: list[int] | None  # decode run: per scheduled request, tokens before the run
    num_occupied_seats: int
    num_finished_before: int
    num_finished_in: int
    num_tokens_produced_before: int
    num_preemptions_total: int

    def kv_blocks_used(self, j: int, block_size: int) -> int:
        """Blocks in use at the end of its (j+1)-th step (requests hold exactly what they computed)."""
        if self.decode_computed_tokens is None:
            return self.num_kv_blocks_used
        computed = np.array(self.decode_computed_tokens, dtype=np.int64)
        return int(np.sum(num_blocks_for(computed + j + 1, block_size)))


class Engine:
    """One batching policy over one trace. run() fills requests' timings, the step log and the counters."""

    def __init__(self, policy: str, trace: Trace, seats: int, step_time: StepTimeFn, num_blocks: int,
                 block_size: int, max_num_batched_tokens: int, fast_forward: bool = True,
                 record_seat_tokens: bool = False):
        """fast_forward=False steps every decode step one by one (the reference the tests compare to);
        record_seat_tokens=True also logs every seat's tokens per record (tests check them; reports do not)."""
        self.policy, self.seats, self.step_time, self.fast_forward = policy, seats, step_time, fast_forward
        self.record_seat_tokens = record_seat_tokens
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
        self.seat_ids: list[int | None] | None = None  # request id per seat, shared by records until a seat changes
        self.durations = array("d")  # seconds, one per engine step
        self.log: list[StepRecord] = []  # one per planned step or decode run
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
        self.seat_ids = None  # the seat list changed: log_step makes a new one
        self.running.append(req)

    def leave(self, req: Request) -> None:
        self.running.remove(req)
        self.kv.free(req.request_id)
        self.seat_req[req.seat] = None
        self.seat_ids = None
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
        sched, i, tables, bs, running = [], 0, self.kv.req_to_blocks, self.block_size, self.running
        while i < len(running):
            req = running[i]
            n = req.num_prompt_tokens + req.num_output_tokens - req.num_computed_tokens
            if n > budget:
                n = budget
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
        reqs, computed_list, left = [], [], 1 << 62  # one pass (hot): requests, their tokens, fewest left
        for r, _ in step.sched:
            reqs.append(r)
            computed_list.append(r.num_computed_tokens)
            if r.max_tokens - r.num_output_tokens < left:
                left = r.max_tokens - r.num_output_tokens
        pool = self.kv.pool
        if pool.num_free_blocks >= len(computed_list) * (left // self.block_size + 1):
            k_max = left  # each request needs at most left // block_size + 1 new pages: they are free
        else:
            k_max = self.max_blocks_k(np.array(computed_list, dtype=np.int64), left)
        n, ctx = len(reqs), sum(computed_list)
        open_seat = self.policy == "continuous" and n < self.seats and self.budget > n and self.head() is None
        more = open_seat and self.num_arrived < len(self.reqs)
        stop_at = float(self.arrival_s[self.num_arrived]) if more else math.inf
        step.durations, step.end_s = decode_run_seconds(self.step_time, n, ctx, k_max, now, stop_at)
        k, tables, bs = len(step.durations), self.kv.req_to_blocks, self.block_size
        step.k = k
        for r in reqs:  # only requests that cross into a new page need the pool (as in schedule_running)
            if r.num_computed_tokens + k > len(tables[r.request_id]) * bs:
                self.kv.allocate(r.request_id, r.num_computed_tokens + k)

    def max_blocks_k(self, computed: np.ndarray, k_max: int) -> int:
        """Largest k <= k_max such that k more tokens per request fit in the free blocks (k=1 always does)."""
        num_blocks, bs = self.kv.pool.num_blocks, self.block_size  # running requests hold every used block
        if int(np.sum(num_blocks_for(computed + k_max, bs))) <= num_blocks:
            return k_max  # the usual case: memory is not the limit
        lo, hi = 1, k_max
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if int(np.sum(num_blocks_for(computed + mid, bs))) <= num_blocks:
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
            if k == 1 and req.num_computed_tokens < req.num_prompt_tokens + req.num_output_tokens:
                continue  # a prefill chunk that did not reach the end of the prompt
            req.num_output_tokens += k
            produced += 1
            if req.num_output_tokens == 1:
                req.first_token_s = now
            if req.num_output_tokens == req.max_tokens:
                req.finish_s = now
                done.append(req)
        self.log_step(step, produced, len(done))
        for req in done:
            self.leave(req)
        self.num_finished += len(done)

    def seat_request_ids(self) -> list[int | None]:
        if self.seat_ids is None:
            self.seat_ids = [r.request_id if r else None for r in self.seat_req]
        return self.seat_ids

    def log_step(self, step: Step, produced: int, num_done: int) -> None:
        """Append the StepRecord of a finished step (or decode run), before its finished requests leave."""
        k, seats = step.k, self.seat_req
        decode_computed, num_blocks = None, self.kv.pool.num_used_blocks
        if k > 1:  # blocks per step are computed from these only for the frames that show them
            decode_computed, num_blocks = [r.num_computed_tokens - k for r, _ in step.sched], None
        self.log.append(StepRecord(
            first_step=len(self.durations), num_steps=k, start_s=step.start_s,
            seat_request_ids=self.seat_request_ids(),
            seat_num_computed_tokens=[r.num_computed_tokens - k + 1 if r else 0 for r in seats]
            if self.record_seat_tokens else None,
            seat_num_output_tokens=[r.num_output_tokens - k + 1 if r else 0 for r in seats]
            if self.record_seat_tokens else None,
            preempted_waiting_ids=tuple(r.request_id for r in self.front) if self.front else (),
            first_new_waiting_id=self.admit_ptr,
            num_prefill_tokens=step.num_prefill_tokens, num_decode_seqs=step.num_decode_seqs,
            num_sampled_per_step=produced, num_kv_blocks_used=num_blocks, decode_computed_tokens=decode_computed,
            num_occupied_seats=len(self.running), num_finished_before=self.num_finished, num_finished_in=num_done,
            num_tokens_produced_before=self.num_produced, num_preemptions_total=self.num_preemptions))
        self.durations.extend(step.durations)
        self.num_produced += produced * k
        self.busy_seat_s += len(self.running) * sum(step.durations)


def validate_batching(rate: float, seats: int, kv_capacity_tokens: int, block_size: int, max_frames: int,
                      max_num_batched_tokens: int, max_seq_len: int, step_time, policies: tuple[str, ...]) -> None:
    """ValueError naming the parameter and its bound (routers map these to 422)."""
    if isinstance(rate, bool) or not (isinstance(rate, (int, float)) and 0 < rate <= MAX_RATE):
        raise ValueError(f"rate must be in (0, {MAX_RATE}] requests/s, got {rate!r}")
    check_int("seats", seats, 1, MAX_SEATS)
    check_int("block_size", block_size, 1, 256)
    check_int("max_seq_len", max_seq_len, 16, 32_768)
    check_int("kv_capacity_tokens", kv_capacity_tokens, max_seq_len, MAX_KV_CAPACITY_TOKENS)
    if (kv_capacity_tokens // block_size) * block_size < max_seq_len:
        raise ValueError(f"kv_capacity_tokens must hold max_seq_len={max_seq_len} tokens in whole blocks "
                         f"of {block_size}, got {kv_capacity_tokens}")
    check_int("max_frames", max_frames, 1, 2000)
    check_int("max_num_batched_tokens", max_num_batched_tokens, 1, 65_536)
    if step_time is not None and not callable(step_time):
        raise ValueError("step_time must be callable (num_prefill_tokens, num_decode_seqs, decode_context_tokens)")
    if not policies or any(p not in POLICIES for p in policies):
        raise ValueError(f"policies must be a non-empty subset of {POLICIES}, got {policies!r}")


def simulate_batching(rate: float = 4.0, num_requests: int = 200, seats: int = 16, workload: str = "sharegpt",
                      seed: int = 0, step_time: StepTimeFn | None = None, kv_capacity_tokens: int = 32_768,
                      block_size: int = 16, max_frames: int = 200, max_num_batched_tokens: int = 2048,
                      max_seq_len: int = 2048, policies: tuple[str, ...] = POLICIES) -> BatchingResult:
    """Static vs continuous batching on one seeded Poisson trace (rate in requests/s).

    step_time(num_prefill_tokens, num_decode_seqs, decode_context_tokens) -> seconds (or an object
    with .seconds); default SimpleStepCost(). KV: kv_capacity_tokens // block_size blocks.
    """
    policies = tuple(policies)
    validate_batching(rate, seats, kv_capacity_tokens, block_size, max_frames, max_num_batched_tokens,
                      max_seq_len, step_time, policies)
    trace = make_trace(workload, num_requests, seed, rate, max_seq_len)
    cost = step_time if step_time is not None else SimpleStepCost()
    engines = [Engine(p, trace, seats, cost, kv_capacity_tokens // block_size, block_size,
                      max_num_batched_tokens).run() for p in policies]
    horizon = max(max(r.finish_s for r in e.reqs) for e in engines)
    params = dict(rate=rate, num_requests=num_requests, seats=seats, workload=workload, seed=seed,
                  kv_capacity_tokens=kv_capacity_tokens, block_size=block_size, max_frames=max_frames,
                  max_num_batched_tokens=max_num_batched_tokens, max_seq_len=max_seq_len)
    return BatchingResult(params=params, trace=trace.summary(), requests=trace_requests(trace),
                          horizon_s=round(horizon, 6), step_time=describe_step_time(cost),
                          policies=[policy_run(e, horizon, max_frames) for e in engines])
