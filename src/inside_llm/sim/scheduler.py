"""A serving engine as a discrete-event simulation: static vs continuous batching, in tokens.

Time is continuous (seconds). Events sit on a heap keyed (time, priority, seq): request arrivals
(priority 0) and engine-step ends (priority 1), so an arrival at the instant a step ends is queued
before the next step is planned. Each step the scheduler picks, per request, how many tokens to
compute (vLLM v1's model: no prefill/decode phases, only num_computed_tokens catching up with
num_tokens = prompt + output so far); the step lasts step_time(num_prefill_tokens, num_decode_seqs,
decode_context_tokens) seconds; at its end every request whose computed tokens caught up samples one
output token. The first token therefore arrives at the end of the step that finishes its prefill.

KV memory is paged: a request holds ceil(tokens / block_size) pages of a pool of num_blocks. Only
the counts matter here (which physical page holds which token is chapter 6's subject, kvcache.py), so
the pool is counted (`KVPages`). Before computing, a request's pages must cover num_computed_tokens +
new tokens; when they cannot, the newest running request is preempted (recompute-style, as vLLM: its
pages are freed, num_computed_tokens = 0, it goes to the front of the waiting queue keeping its output,
and later re-prefills prompt + output) and the allocation is retried. No new request is admitted in a
step that preempted.

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
a clock with a vectorized `decode_seconds` (stepcost.py) times the whole run in one numpy call. The
requests' counters are numpy columns indexed by request id, so a step schedules, grows the pages of
and advances its whole batch in a few array operations; only a step that runs short of pages (and
must preempt) goes request by request, since the order decides who is preempted.

The engine keeps a typed step log (`StepRecord`, one per planned step or decode run); schedrecords.py
turns it into what a run reports. The parameters' bounds are checked here (`validate_batching`).
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from inside_llm.sim.kvcache import check_pool, num_blocks_for
from inside_llm.sim.schedrecords import BatchingResult, policy_run, trace_requests
from inside_llm.sim.stepcost import SimpleStepCost, StepTimeFn, decode_run_seconds, describe_step_time, seconds
from inside_llm.sim.workloads import Trace, check_int, check_subset, make_trace

ARRIVAL, STEP_END = 0, 1
POLICIES = ("static", "continuous")
MAX_RATE = 32.0  # requests/s (the API reads these bounds from here)
MAX_SEATS = 64
MAX_KV_CAPACITY_TOKENS = 4_194_304


class Request:
    """One request's outcome, read from the engine's columns after run() (Engine.reqs)."""

    __slots__ = (
        "request_id",
        "arrival_s",
        "num_prompt_tokens",
        "max_tokens",
        "num_output_tokens",
        "num_computed_tokens",
        "num_preemptions",
        "first_token_s",
        "finish_s",
    )

    def __init__(self, *values):
        for name, value in zip(self.__slots__, values, strict=True):
            setattr(self, name, value)


class PageCount:
    """The KV pool as the scheduler needs it: how many pages are free, not which (the counts of
    kvcache.BlockPool; which physical page holds which token is chapter 6's subject)."""

    __slots__ = ("num_blocks", "num_free_blocks")

    def __init__(self, num_blocks: int):
        self.num_blocks = self.num_free_blocks = num_blocks

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks


class KVPages:
    """Pages held per request (`held[request_id]`) from one PageCount `pool`; as in kvcache.KVCacheManager,
    a request's pages cover exactly the tokens it was given room for, in pages of block_size."""

    __slots__ = ("pool", "block_size", "held")

    def __init__(self, num_blocks: int, block_size: int, num_requests: int):
        self.pool, self.block_size = PageCount(num_blocks), block_size
        self.held = np.zeros(num_requests, dtype=np.int64)

    def grow(self, rid: int, num_tokens: int) -> bool:
        """Make rid's pages cover num_tokens tokens; False, taking nothing, if too few pages are free."""
        need = -(-num_tokens // self.block_size) - int(self.held[rid])
        if need > 0:
            if need > self.pool.num_free_blocks:
                return False
            self.pool.num_free_blocks -= need
            self.held[rid] += need
        return True

    def grow_all(self, ids: np.ndarray, num_tokens: np.ndarray) -> bool:
        """grow() for each request of ids at once, if the free pages cover all of them; else take nothing."""
        extra = np.maximum(-(-num_tokens // self.block_size) - self.held[ids], 0)
        need = int(extra.sum())
        if need > self.pool.num_free_blocks:
            return False
        if need:
            self.pool.num_free_blocks -= need
            self.held[ids] += extra
        return True

    def free(self, rid: int) -> None:
        self.pool.num_free_blocks += int(self.held[rid])
        self.held[rid] = 0


class Step:
    """One planned engine step, or k identical pure-decode steps (k > 1), as columns over the scheduled
    requests (running ones in admission order, then those admitted): ids, n (new tokens each), and each
    one's computed and output tokens, remaining (prompt + output - computed) and left (max - output) before it."""

    __slots__ = (
        "ids",
        "n",
        "computed",
        "output",
        "remaining",
        "left",
        "k",
        "start_s",
        "end_s",
        "durations",
        "num_prefill_tokens",
        "num_decode_seqs",
        "decode_context_tokens",
    )

    def __init__(
        self,
        ids,
        n,
        computed,
        output,
        remaining,
        left,
        start_s: float,
        num_prefill_tokens: int,
        num_decode_seqs: int,
        decode_context_tokens: int,
    ):
        self.ids, self.n, self.computed, self.output, self.remaining, self.left = (
            ids,
            n,
            computed,
            output,
            remaining,
            left,
        )
        self.k, self.start_s, self.end_s, self.durations = 1, start_s, start_s, []
        self.num_prefill_tokens, self.num_decode_seqs = num_prefill_tokens, num_decode_seqs
        self.decode_context_tokens = decode_context_tokens


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
    decode_computed_tokens: np.ndarray | None  # decode run: per scheduled request, tokens before the run
    num_occupied_seats: int
    num_finished_before: int
    num_finished_in: int
    num_tokens_produced_before: int
    num_preemptions_total: int

    def kv_blocks_used(self, j: int, block_size: int) -> int:
        """Blocks in use at the end of its (j+1)-th step (requests hold exactly what they computed)."""
        if self.decode_computed_tokens is None:
            return self.num_kv_blocks_used
        return int(np.sum(num_blocks_for(self.decode_computed_tokens + j + 1, block_size)))


class Engine:
    """One batching policy over one trace. run() fills the per-request columns, the step log and the counters.

    Requests are columns indexed by request id (numpy: prompt, max_tokens, computed, output, preemptions,
    first_token_s, finish_s), so a step reads and updates its batch in a few array operations rather
    than request by request. Engine.reqs gives them back as one object per request.
    """

    def __init__(
        self,
        policy: str,
        trace: Trace,
        seats: int,
        step_time: StepTimeFn,
        num_blocks: int,
        block_size: int,
        max_num_batched_tokens: int,
        fast_forward: bool = True,
        record_seat_tokens: bool = False,
    ):
        """fast_forward=False steps every decode step one by one (the reference the tests compare to);
        record_seat_tokens=True also logs every seat's tokens per record (tests check them; reports do not)."""
        self.policy, self.seats, self.step_time, self.fast_forward = policy, seats, step_time, fast_forward
        self.record_seat_tokens = record_seat_tokens
        self.block_size, self.budget = block_size, max_num_batched_tokens
        self.arrival_s = trace.arrival_s
        self.num_requests = num = len(trace.arrival_s)
        self.prompt = np.array(trace.num_prompt_tokens, dtype=np.int64)
        self.max_tokens = np.array(trace.num_output_tokens, dtype=np.int64)
        self.computed = np.zeros(num, dtype=np.int64)  # tokens whose keys and values are in the KV cache
        self.output = np.zeros(num, dtype=np.int64)  # tokens sampled so far
        self.preemptions = np.zeros(num, dtype=np.int64)
        self.first_token_s = np.full(num, math.nan)
        self.finish_s = np.full(num, math.nan)
        self.kv = KVPages(num_blocks, block_size, num)
        self.front: deque[int] = deque()  # preempted request ids, at the waiting queue's front
        self.admit_ptr = self.num_arrived = 0  # never-admitted arrivals: ids admit_ptr .. num_arrived - 1
        self.running: list[int] = []  # request ids in admission order: the last is preempted first
        self.running_ids: np.ndarray | None = None  # the same as an array, made again after a change
        self.free_seats = list(range(seats))  # a heap: the lowest free seat is taken first
        self.seat_req: list[int | None] = [None] * seats  # request id per seat
        self.seat_of: dict[int, int] = {}  # seat per running request
        self.seat_ids: list[int | None] | None = None  # copy of seat_req, shared by records until a seat changes
        self.durations = array("d")  # seconds, one per engine step
        self.log: list[StepRecord] = []  # one per planned step or decode run
        self.num_preemptions = self.num_finished = self.num_produced = 0
        self.busy_seat_s = 0.0  # sum over steps of duration * occupied seats
        self.preempted = False

    @cached_property
    def reqs(self) -> list[Request]:
        """One Request per request id (after run())."""
        cols = (
            range(self.num_requests),
            self.arrival_s.tolist(),
            self.prompt.tolist(),
            self.max_tokens.tolist(),
            self.output.tolist(),
            self.computed.tolist(),
            self.preemptions.tolist(),
            self.first_token_s.tolist(),
            self.finish_s.tolist(),
        )
        return [Request(*values) for values in zip(*cols)]

    # -- waiting queue and seats ---------------------------------------------------------------
    def head(self) -> int | None:
        if self.front:
            return self.front[0]
        return self.admit_ptr if self.admit_ptr < self.num_arrived else None

    def pop_head(self) -> None:
        if self.front:
            self.front.popleft()
        else:
            self.admit_ptr += 1

    def admit(self, rid: int) -> None:
        seat = self.seat_of[rid] = heapq.heappop(self.free_seats)
        self.seat_req[seat] = rid
        self.running.append(rid)
        self.seat_ids = self.running_ids = None  # log_step and run_ids make new ones

    def leave(self, rid: int) -> None:
        self.running.remove(rid)
        self.kv.free(rid)
        seat = self.seat_of.pop(rid)
        self.seat_req[seat] = None
        heapq.heappush(self.free_seats, seat)
        self.seat_ids = self.running_ids = None

    def preempt(self, rid: int) -> None:
        """Recompute preemption: drop its KV, keep its output, requeue it at the front."""
        self.leave(rid)
        self.computed[rid] = 0
        self.preemptions[rid] += 1
        self.num_preemptions += 1
        self.front.appendleft(rid)
        self.preempted = True

    def run_ids(self) -> np.ndarray:
        if self.running_ids is None:
            self.running_ids = np.array(self.running, dtype=np.int64)
        return self.running_ids

    # -- planning ------------------------------------------------------------------------------
    def grow(self, rid: int, num_tokens: int) -> bool:
        """Make rid's pages cover num_tokens, preempting the newest running requests if needed;
        False if rid itself had to be preempted."""
        while not self.kv.grow(rid, num_tokens):
            victim = self.running[-1]
            self.preempt(victim)
            if victim == rid:
                return False
        return True

    def schedule_running(self, budget: int) -> tuple[np.ndarray, ...]:
        """Running requests first, in admission order, each as many tokens as the budget allows.
        Returns (ids, n, computed, output, remaining, budget left). When the free pages cover every
        request's growth this is a few array operations; else one by one, preempting (schedule_one_by_one)."""
        ids = self.run_ids()
        computed, output = self.computed[ids], self.output[ids]
        remaining = self.prompt[ids] + output - computed
        n, total = remaining, int(remaining.sum())
        if total > budget:  # the budget runs out part way: earlier requests first
            n = np.minimum(remaining, budget - (np.cumsum(remaining) - remaining))
        if not self.kv.grow_all(ids, computed + n):
            return self.schedule_one_by_one(budget)
        if total <= budget:
            return ids, n, computed, output, remaining, budget - total
        keep = n > 0
        return ids[keep], n[keep], computed[keep], output[keep], remaining[keep], 0

    def schedule_one_by_one(self, budget: int) -> tuple[np.ndarray, ...]:
        """schedule_running when memory runs short: whoever cannot grow preempts the newest running request."""
        sched, ns, i, running = [], [], 0, self.running
        while i < len(running):
            rid = running[i]
            n = min(int(self.prompt[rid] + self.output[rid] - self.computed[rid]), budget)
            if n > 0:
                if not self.grow(rid, int(self.computed[rid]) + n):
                    break  # rid was the newest; everyone before it is scheduled
                sched.append(rid)
                ns.append(n)
                budget -= n
            i += 1
        ids = np.array(sched, dtype=np.int64)
        computed, output = self.computed[ids], self.output[ids]
        return ids, np.array(ns, dtype=np.int64), computed, output, self.prompt[ids] + output - computed, budget

    def schedule_static(self) -> tuple[np.ndarray, ...]:
        if not self.running:  # form a batch; it prefills whole prompts in its first step
            while len(self.running) < self.seats and (rid := self.head()) is not None:
                if not self.kv.grow(rid, int(self.prompt[rid] + self.output[rid])):
                    break
                self.pop_head()
                self.admit(rid)
        return self.schedule_running(1 << 62)[:5]

    def schedule_continuous(self) -> tuple[np.ndarray, ...]:
        ids, n, computed, output, remaining, budget = self.schedule_running(self.budget)
        admitted = []  # (id, new tokens, output tokens, prompt + output): a waiting request has computed nothing
        while not self.preempted and budget > 0 and len(self.running) < self.seats:
            rid = self.head()
            if rid is None:
                break
            out = int(self.output[rid])
            tokens = int(self.prompt[rid]) + out
            new = min(tokens, budget)
            if not self.kv.grow(rid, new):
                break
            self.pop_head()
            self.admit(rid)
            admitted.append((rid, new, out, tokens))
            budget -= new
        if admitted:
            a_ids, a_new, a_out, a_tokens = (np.array(c, dtype=np.int64) for c in zip(*admitted))
            ids, n = np.concatenate((ids, a_ids)), np.concatenate((n, a_new))
            computed = np.concatenate((computed, np.zeros(len(a_ids), dtype=np.int64)))
            output, remaining = np.concatenate((output, a_out)), np.concatenate((remaining, a_tokens))
        return ids, n, computed, output, remaining

    def plan(self, now: float) -> Step | None:
        self.preempted = False
        ids, n, computed, output, remaining = (
            self.schedule_static() if self.policy == "static" else self.schedule_continuous()
        )
        if not len(ids):
            return None
        # a decode computes its one newest token: all but one of prompt + output are in the cache
        decode = (remaining == 1) & (output > 0)
        num_decode = int(np.count_nonzero(decode))
        if num_decode == len(ids):
            context = int(computed.sum()) + num_decode  # keys attended, each its own included
        else:
            context = int(computed[decode].sum()) + num_decode
        step = Step(
            ids,
            n,
            computed,
            output,
            remaining,
            self.max_tokens[ids] - output,
            now,
            int(n.sum()) - num_decode,
            num_decode,
            context,
        )
        if self.fast_forward and num_decode == len(ids) == len(self.running) and not self.preempted:
            self.extend(step, now)
        else:
            step.durations.append(seconds(self.step_time, step.num_prefill_tokens, num_decode, context))
            step.end_s = now + step.durations[0]
        return step

    def extend(self, step: Step, now: float) -> None:
        """Run pure-decode steps in one go until a finish, a block shortage or an admissible arrival."""
        computed, n, left = step.computed, len(step.ids), int(step.left.min())
        if self.kv.pool.num_free_blocks >= n * (left // self.block_size + 1):
            k_max = left  # each request needs at most left // block_size + 1 new pages: they are free
        else:
            k_max = self.max_blocks_k(computed, left)
        open_seat = self.policy == "continuous" and n < self.seats and self.budget > n and self.head() is None
        more = open_seat and self.num_arrived < self.num_requests
        stop_at = float(self.arrival_s[self.num_arrived]) if more else math.inf
        step.durations, step.end_s = decode_run_seconds(self.step_time, n, int(computed.sum()), k_max, now, stop_at)
        step.k = len(step.durations)
        self.kv.grow_all(step.ids, computed + step.k)  # fits: k <= k_max

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
        if self.num_finished != self.num_requests:
            raise RuntimeError(f"engine stalled with {self.num_requests - self.num_finished} unfinished requests")
        return self

    def end_step(self, step: Step, now: float) -> None:
        """Apply the step's tokens: requests whose KV caught up sample one token (k in a decode run)."""
        k, ids = step.k, step.ids
        if k == 1:
            self.computed[ids] = step.computed + step.n
            sampled = step.n >= step.remaining  # else a prefill chunk that did not reach the end of the prompt
            if not sampled.all():
                ids, output, left = ids[sampled], step.output[sampled] + 1, step.left[sampled]
            else:
                output, left = step.output + 1, step.left
            self.output[ids] = output
            self.first_token_s[ids[output == 1]] = now
            done = ids[left == 1]
        else:
            self.computed[ids] = step.computed + k
            self.output[ids] = step.output + k
            done = ids[step.left == k]
        self.finish_s[done] = now
        self.log_step(step, len(ids), len(done))
        for rid in done.tolist():
            self.leave(rid)
        self.num_finished += len(done)

    def seat_request_ids(self) -> list[int | None]:
        if self.seat_ids is None:
            self.seat_ids = self.seat_req.copy()
        return self.seat_ids

    def log_step(self, step: Step, produced: int, num_done: int) -> None:
        """Append the StepRecord of a finished step (or decode run), before its finished requests leave."""
        k, seats = step.k, self.seat_req
        decode_computed, num_blocks = None, self.kv.pool.num_used_blocks
        if k > 1:  # blocks per step are computed from these only for the frames that show them
            decode_computed, num_blocks = step.computed, None
        seat_computed = seat_output = None
        if self.record_seat_tokens:
            computed, output = self.computed.tolist(), self.output.tolist()
            seat_computed = [computed[r] - k + 1 if r is not None else 0 for r in seats]
            seat_output = [output[r] - k + 1 if r is not None else 0 for r in seats]
        self.log.append(
            StepRecord(
                first_step=len(self.durations),
                num_steps=k,
                start_s=step.start_s,
                seat_request_ids=self.seat_request_ids(),
                seat_num_computed_tokens=seat_computed,
                seat_num_output_tokens=seat_output,
                preempted_waiting_ids=tuple(self.front),
                first_new_waiting_id=self.admit_ptr,
                num_prefill_tokens=step.num_prefill_tokens,
                num_decode_seqs=step.num_decode_seqs,
                num_sampled_per_step=produced,
                num_kv_blocks_used=num_blocks,
                decode_computed_tokens=decode_computed,
                num_occupied_seats=len(self.running),
                num_finished_before=self.num_finished,
                num_finished_in=num_done,
                num_tokens_produced_before=self.num_produced,
                num_preemptions_total=self.num_preemptions,
            )
        )
        self.durations.extend(step.durations)
        self.num_produced += produced * k
        self.busy_seat_s += len(self.running) * sum(step.durations)


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
        Engine(p, trace, seats, cost, kv_capacity_tokens // block_size, block_size, max_num_batched_tokens).run()
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
        policies=[policy_run(e, horizon, max_frames) for e in engines],
    )
