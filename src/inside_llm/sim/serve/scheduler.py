"""The serving core's scheduler, in vLLM v1's shape: `schedule(now) -> StepPlan`, an executor (a clock,
clocks.py) runs the plan, `finish_step(plan, sampled, now) -> StepRecord` applies what came back.

Each step the scheduler picks, per request, how many tokens to compute (vLLM v1's model: no
prefill/decode phases, only num_computed_tokens catching up with num_tokens = prompt + output so far);
at the step's end every request whose computed tokens caught up samples one output token, so the first
token arrives at the end of the step that finishes its prefill.

KV memory: one KV manager (kv.py; the paged KVCacheManager here). Before computing, a request's memory
must cover num_computed_tokens + new tokens.

THE admission order and preemption rule (the only ones in the core; tests/sim/serve/test_scheduler.py
test_one_admission_order_and_preemption_rule checks them):
- Order within a step: running requests first, in admission order, then waiting requests first come,
  first served, with preempted requests at the queue's front (most recently preempted first). If the
  head of the queue does not fit in memory, nobody behind it is admitted (no skipping).
- Preemption: when a running request cannot grow, the newest admitted running request is preempted
  (recompute-style, as vLLM: its memory is freed, num_computed_tokens = 0, it goes to the front of the
  waiting queue keeping its output, and later re-prefills prompt + output), and the allocation is
  retried; if the newest is the asker itself, it stops there. No request is admitted in a step that
  preempted.

Policies (same trace, same KV pool, same clock):
- `static`: when the engine is empty, up to `seats` waiting requests (FCFS, those that fit in KV)
  form a batch and prefill together in one step; then the batch decodes until its longest answer
  is done. Seats emptied by finished requests stay empty: nobody joins a running batch. Generous to
  static: finished rows cost nothing (real static engines keep decoding padding).
- `continuous` (Orca's iteration-level scheduling with vLLM's chunked prefill): each step running
  requests are scheduled first, then waiting requests take free seats; a step computes at most
  `max_num_batched_tokens` tokens, so long prompts are split into chunks that ride along with the decodes.
Identical pure-decode steps are planned as one decode run (StepPlan.decode_run: up to k_max steps,
stopping after the step that ends at or after stop_at_s, the next arrival that could be admitted); the
clock picks how many it ran (same result as stepping one by one: the run stops before any finish, block
shortage or admissible arrival), which keeps 10,000 requests fast. The requests are numpy columns
(requests.py), so a step schedules, grows the pages of and advances its whole batch in a few array
operations; only a step that runs short of pages (and must preempt) goes request by request, since the
order decides who is preempted.

The scheduler writes a typed step log (steplog.py), which records.py turns into what a run reports.

Hooks for a server shared by clients (the live engine, inside_llm/live; the simulations pass none and run
exactly as above):
- `queue`: the waiting queue as an object (fairshare.py's FairShare) instead of "preempted ones, then
  arrivals by id": request ids may arrive in any order (the live engine reuses a fixed set of ids), and the
  head is the queue's choice (the fair share: the waiting request whose client has the fewest running,
  then queue order, preempted ones at the front as above). The queue may also name a running request to
  swap out when every seat is taken (`seat_swap`, checked first in each step): it is preempted as above
  (recompute, to the front of the queue) but the step may still admit, since the swap exists to seat
  another; the other rules stand (no skipping a head that does not fit; a memory preemption still blocks
  admission in its step).
- `long_prefill_token_threshold` (vLLM's name; 0 = none): at most that many tokens per request per step,
  so one long prompt shares the step's budget with the others.
- `admit_waiting(budget)`: the admission half of a continuous step on its own, for a server that seats a
  request the moment it arrives (between steps); its next step schedules it as a running request.
- `end(request_id, now)`: a request ends before its max_tokens (its stop token, or its client left),
  running or waiting.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np

from inside_llm.sim.serve.kv import KVCacheManager, num_blocks_for
from inside_llm.sim.serve.requests import Request, Requests
from inside_llm.sim.serve.steplog import StepLog, StepRecord

POLICIES = ("static", "continuous")


class StepPlan:
    """One planned engine step, or a decode run of k identical pure-decode steps, as columns over the scheduled
    requests (running ones in admission order, then those admitted): ids, n (new tokens each), and each
    one's computed and output tokens, remaining (prompt + output - computed) and left (max - output) before it.
    The executor fills durations, end_s and k (k > 1 only in a decode run: at most k_max steps)."""

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
        "decode_run",
        "k_max",
        "stop_at_s",
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
        self.decode_run, self.k_max, self.stop_at_s = False, 1, math.inf


class Scheduler:
    """One batching policy over a set of requests and one KV manager. The caller tells it of arrivals
    (arrive(): requests arrive in id order), asks for a plan each step (schedule), has a clock execute it
    and hands it back (finish_step). The step log is `steps`; the requests' columns `requests`."""

    def __init__(
        self,
        policy: str,
        requests: Requests,
        seats: int,
        kv: KVCacheManager,
        max_num_batched_tokens: int,
        fast_forward: bool = True,
        record_seat_tokens: bool = False,
        *,
        queue=None,
        long_prefill_token_threshold: int = 0,
    ):
        """fast_forward=False steps every decode step one by one (the reference the tests compare to);
        record_seat_tokens=True also logs every seat's tokens per record (tests check them; reports do not);
        queue, long_prefill_token_threshold: the hooks above (None, 0: the core's own queue, no cap)."""
        self.queue, self.capped = queue, long_prefill_token_threshold > 0
        self.chunk = long_prefill_token_threshold or (1 << 62)
        self.policy, self.seats, self.fast_forward = policy, seats, fast_forward
        self.record_seat_tokens = record_seat_tokens
        self.kv, self.block_size, self.budget = kv, kv.block_size, max_num_batched_tokens
        self.requests = r = requests
        self.num_requests = len(r)
        self.arrival_s, self.prompt, self.max_tokens = r.arrival_s, r.prompt, r.max_tokens
        self.computed, self.output, self.preemptions = r.computed, r.output, r.preemptions
        self.first_token_s, self.finish_s = r.first_token_s, r.finish_s
        self.steps = StepLog(policy, seats, kv.block_size, kv.pool.num_blocks, r)
        self.front: deque[int] = deque()  # preempted request ids, at the waiting queue's front
        self.admit_ptr = self.num_arrived = 0  # never-admitted arrivals: ids admit_ptr .. num_arrived - 1
        self.running: list[int] = []  # request ids in admission order: the last is preempted first
        self.running_ids: np.ndarray | None = None  # the same as an array, made again after a change
        self.free_seats = list(range(seats))  # a heap: the lowest free seat is taken first
        self.seat_req: list[int | None] = [None] * seats  # request id per seat
        self.seat_of: dict[int, int] = {}  # seat per running request
        self.seat_ids: list[int | None] | None = None  # copy of seat_req, shared by records until a seat changes
        self.num_preemptions = self.num_finished = self.num_produced = 0
        self.preempted = False

    def arrive(self, request_id: int | None = None) -> None:
        """The next request (by id) has arrived and joins the waiting queue (with a queue hook: request_id)."""
        if self.queue is not None:
            self.queue.arrive(request_id)
            return
        self.num_arrived += 1

    @property
    def done(self) -> bool:
        return self.num_finished == self.num_requests

    @property
    def reqs(self) -> list[Request]:
        """One Request per request id."""
        return self.requests.rows()

    # -- waiting queue and seats ---------------------------------------------------------------
    def head(self) -> int | None:
        if self.queue is not None:
            return self.queue.head(self.running)
        if self.front:
            return self.front[0]
        return self.admit_ptr if self.admit_ptr < self.num_arrived else None

    def pop_head(self) -> None:
        if self.queue is not None:
            self.queue.pop_head()
        elif self.front:
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
        self.steps.num_preemptions += 1
        if self.queue is not None:
            self.queue.push_front(rid)
        else:
            self.front.appendleft(rid)
        self.preempted = True

    def end(self, rid: int, now: float) -> None:
        """rid ends before its max_tokens (stop token, or its client left): it leaves its seat or the queue."""
        if rid in self.seat_of:
            self.leave(rid)
        elif self.queue is not None:
            self.queue.withdraw(rid)
        self.finish_s[rid] = now
        self.num_finished += 1

    def rebalance(self) -> None:
        """The queue hook's seat swap: with every seat taken, the running request it names is preempted so that
        its head can take the seat, when the free pages and the swapped request's cover the head's first piece."""
        if self.queue is None or len(self.running) < self.seats or (rid := self.head()) is None:
            return
        victim = self.queue.seat_swap(self.running, rid)
        if victim is None:
            return
        tokens = int(self.prompt[rid] + self.output[rid]) - self.kv.cached_prefix_tokens(rid)
        first = min(tokens, self.budget, self.chunk)
        held = len(self.kv.block_table(victim))
        if num_blocks_for(first, self.block_size) > self.kv.pool.num_free_blocks + held:
            return
        self.preempt(victim)
        self.preempted = False  # a swap, not a memory shortage: the head is seated in this step

    def run_ids(self) -> np.ndarray:
        if self.running_ids is None:
            self.running_ids = np.array(self.running, dtype=np.int64)
        return self.running_ids

    # -- planning ------------------------------------------------------------------------------
    def grow(self, rid: int, num_tokens: int) -> bool:
        """Make rid's pages cover num_tokens, preempting the newest running requests if needed;
        False if rid itself had to be preempted."""
        while self.kv.allocate(rid, num_tokens) is None:
            victim = self.running[-1]
            self.preempt(victim)
            if victim == rid:
                return False
        return True

    def schedule_running(self, budget: int) -> tuple[np.ndarray, ...]:
        """Running requests first, in admission order, each as many tokens as the budget allows.
        Returns (ids, n, computed, output, remaining, budget left). When the free pages cover every
        request's growth this is a few array operations; else in order, preempting (grow_in_order)."""
        ids = self.run_ids()
        computed, output = self.computed[ids], self.output[ids]
        remaining = self.prompt[ids] + output - computed
        want = np.minimum(remaining, self.chunk) if self.capped else remaining  # long_prefill_token_threshold
        n, total = want, int(want.sum())
        if total > budget:  # the budget runs out part way: earlier requests first
            n = np.minimum(want, budget - (np.cumsum(want) - want))
        tokens = computed + n
        if not self.kv.allocate_all(ids, tokens):
            m = self.grow_in_order(ids, n, tokens)  # the first m still run: the others were preempted
            if m < len(ids):
                ids, n, computed, output, remaining, want = (c[:m] for c in (ids, n, computed, output, remaining, want))
            total = int(want.sum())
        if total <= budget:
            return ids, n, computed, output, remaining, budget - total
        keep = n > 0
        return ids[keep], n[keep], computed[keep], output[keep], remaining[keep], budget - int(n[keep].sum())

    def grow_in_order(self, ids: np.ndarray, n: np.ndarray, tokens: np.ndarray) -> int:
        """allocate_all when memory runs short: in admission order, whoever cannot grow preempts the newest
        running request (possibly itself). Only requests that need a new page can run short, so only they
        are visited one by one (all scheduled ones when pages carry prefix hashes: they are cached in this
        order); a victim is always the newest, so those still running are a prefix of ids. Returns its length."""
        kv, running = self.kv, self.running
        visit = n > 0
        if not kv.block_hashes:
            visit &= kv.blocks_needed(ids, tokens) > 0
        for i in np.flatnonzero(visit).tolist():
            if i >= len(running) or not self.grow(running[i], int(tokens[i])):
                break  # preempted: it was the newest, and everyone before it is scheduled
        m = len(running)
        rest = ~visit[:m] & (n[:m] > 0)
        kv.hold(ids[:m][rest], tokens[:m][rest])  # their pages cover them already
        return m

    def schedule_static(self) -> tuple[np.ndarray, ...]:
        if not self.running:  # form a batch; it prefills whole prompts in its first step
            while len(self.running) < self.seats and (rid := self.head()) is not None:
                tokens = int(self.prompt[rid] + self.output[rid])
                if rid in self.kv.block_hashes:  # prefix caching: its cached leading pages count as computed
                    if (hit := self.kv.allocate_cached(rid, tokens)) is None:
                        break
                    self.computed[rid] = hit
                elif self.kv.allocate(rid, tokens) is None:
                    break
                self.pop_head()
                self.admit(rid)
        return self.schedule_running(1 << 62)[:5]

    def schedule_continuous(self) -> tuple[np.ndarray, ...]:
        ids, n, computed, output, remaining, budget = self.schedule_running(self.budget)
        admitted = [] if self.preempted else self.admit_waiting(budget)
        if admitted:  # the running ones' columns, then the admitted ones', in one concatenation
            cols = np.concatenate((np.array((ids, n, computed, output, remaining)), np.array(admitted).T), axis=1)
            return tuple(cols)
        return ids, n, computed, output, remaining

    def admit_waiting(self, budget: int) -> list[tuple[int, int, int, int, int]]:
        """Waiting requests take free seats in the queue's order while the budget lasts and memory holds their
        first piece (no skipping). Per admitted request: (id, new tokens, tokens found computed, output tokens,
        tokens left to compute)."""
        admitted = []
        while budget > 0 and len(self.running) < self.seats:
            rid = self.head()
            if rid is None:
                break
            out = int(self.output[rid])
            tokens = int(self.prompt[rid]) + out
            if rid in self.kv.block_hashes:  # prefix caching: its cached leading pages count as computed
                hit = self.kv.cached_prefix_tokens(rid)
                new = min(tokens - hit, budget, self.chunk)
                if self.kv.allocate_cached(rid, hit + new) is None:
                    break
                self.computed[rid] = hit
            else:  # a waiting request has computed nothing
                hit, new = 0, min(tokens, budget, self.chunk)
                if self.kv.allocate(rid, new) is None:
                    break
            self.pop_head()
            self.admit(rid)
            admitted.append((rid, new, hit, out, tokens - hit))
            budget -= new
        return admitted

    def schedule(self, now: float) -> StepPlan | None:
        """This step's plan (None if nothing can run). The executor fills its durations before finish_step."""
        self.preempted = False
        if self.queue is not None:
            self.rebalance()
        ids, n, computed, output, remaining = (
            self.schedule_static() if self.policy == "static" else self.schedule_continuous()
        )
        if not len(ids):
            return None
        # a decode computes its one newest token: all but one of prompt + output are in the cache
        decode = (remaining == 1) & (output > 0)
        num_decode = int(np.count_nonzero(decode))
        if num_decode == len(ids):
            context = int(np.add.reduce(computed)) + num_decode  # keys attended, each its own included
        else:
            context = int(np.add.reduce(computed[decode])) + num_decode
        step = StepPlan(
            ids,
            n,
            computed,
            output,
            remaining,
            self.max_tokens[ids] - output,
            now,
            int(np.add.reduce(n)) - num_decode,
            num_decode,
            context,
        )
        if self.fast_forward and num_decode == len(ids) == len(self.running):
            if not self.preempted or not self.could_admit():
                self.plan_decode_run(step)
        return step

    def could_admit(self) -> bool:
        """Might the head of the waiting queue be admitted next step? False: it waits at least until a request
        leaves, since decode steps only take memory; so a step that preempted may start a decode run too."""
        rid = self.head()
        if rid is None or self.policy == "static" or len(self.running) >= self.seats:
            return False
        if rid in self.kv.block_hashes:
            return True  # its cached pages might make it fit: do not look ahead
        return self.kv.fits(rid, min(int(self.prompt[rid] + self.output[rid]), self.budget))

    def plan_decode_run(self, step: StepPlan) -> None:
        """Pure-decode steps in one go until a finish, a block shortage or an admissible arrival: k_max
        steps at most, the last one the first to end at or after stop_at_s."""
        n, left = len(step.ids), int(np.minimum.reduce(step.left))
        k_max = self.kv.max_decode_steps(step.ids, step.computed, left)
        open_seat = self.policy == "continuous" and n < self.seats and self.budget > n and self.head() is None
        more = open_seat and self.num_arrived < self.num_requests
        step.decode_run, step.k_max = True, k_max
        step.stop_at_s = float(self.arrival_s[self.num_arrived]) if more else math.inf

    def finish_step(self, step: StepPlan, sampled, now: float) -> StepRecord:
        """Apply the executed step: requests whose KV caught up sample one token (k in a decode run).
        sampled: the executor's token ids, or None (a simulation: only the counts matter)."""
        k, ids = step.k, step.ids
        if step.decode_run:
            self.kv.allocate_all(ids, step.computed + k)  # fits: k <= k_max
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
        record = self.log_step(step, len(ids), len(done))
        for rid in done.tolist():
            self.leave(rid)
        self.num_finished += len(done)
        return record

    def seat_request_ids(self) -> list[int | None]:
        if self.seat_ids is None:
            self.seat_ids = self.seat_req.copy()
        return self.seat_ids

    def log_step(self, step: StepPlan, produced: int, num_done: int) -> StepRecord:
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
        log = self.steps
        record = StepRecord(
            first_step=len(log.durations),
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
        log.records.append(record)
        log.durations.extend(step.durations)
        self.num_produced += produced * k
        log.busy_seat_s += len(self.running) * sum(step.durations)
        return record
