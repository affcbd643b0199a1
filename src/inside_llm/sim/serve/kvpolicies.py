"""Paging vs contiguous reservation on one request trace: the step-by-step KV-memory simulation.

This module owns the simulation (`simulate_kv`), its policies, its bounds and its typed results; the
KV managers it runs on (KVCacheManager over a BlockPool, ReservedManager over a ContiguousAllocator: one
interface) are the serving core's, serve/kv.py.

Model (one engine step == one token per resident request, the unit of time here):
- All requests queue at step 0 (a saturated server, as in the paper's throughput runs) and are
  admitted first come, first served; if the head of the queue does not fit, nobody behind it is
  admitted (no skipping). Admission is retried the step after memory is freed.
- A request admitted at step s holds prompt + 1 tokens at s (prefill writes the prompt and the
  first output token appears) and one more token every step until it holds prompt + output =
  its final length L; it is freed at the end of that step. We count a token's KV from the step
  that produces it (vLLM writes it one step later: one slot per request, ignored).
- Policies: `paged` allocates `block_size`-token pages on demand from a BlockPool; when a growing
  request finds no free page, the newest resident request is preempted (recompute: its pages are
  freed and it rejoins the queue's front keeping its progress), as vLLM does. `contiguous` reserves
  max_seq_len slots per request up front (Orca / FasterTransformer); `pow2` reserves the next power
  of two of L and `oracle` exactly L (the paper's Orca(Pow2) and Orca(Oracle) baselines).
Slot accounting per resident request with n tokens, A allocated slots, final length L:
  used = n; reserved = min(A, L) - n (slots it will fill later); internal fragmentation = A - min(A, L)
  (slots it will never fill). External fragmentation: free slots in holes too small for the request
  at the head of the queue (plus, when paged, capacity left over after whole pages).
waste_fraction = 1 - sum_steps(used) / sum_steps(allocated): the time-averaged share of allocated
KV memory not holding real tokens. Every metric covers every step; only frames are sampled.

Who is in memory is reported once per *residency* (one stay of a request, from admission to its finish
or preemption), not per frame: a resident's tokens at step s are first_num_tokens + s - first_step, and a
paged resident holds the first ceil(tokens / block_size) pages of its residency's block table. So the
stage can draw any step, not only the sampled frames.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

from inside_llm.sim.core.derivation import derive
from inside_llm.sim.core.result import as_json
from inside_llm.sim.serve.kv import BlockPool, KVCacheManager, ReservedManager, check_pool, num_blocks_for
from inside_llm.sim.serve.workloads import PAPER, Trace, check_int, check_subset, make_trace

POLICIES = ("paged", "contiguous", "pow2", "oracle")
GROW, ADMIT, FINISH = 0, 1, 2  # event priorities within one step: grow, then admit, measure, finish
RESERVATION = {
    "paged": "pages of block_size slots, allocated as tokens arrive",
    "contiguous": "max_seq_len slots per request, reserved at admission",
    "pow2": "next power of two of the final length (capped at max_seq_len), reserved at admission",
    "oracle": "exactly the final length, reserved at admission",
}
MAX_CAPACITY_TOKENS = 2_097_152
MAX_FRAMES = 1000
REFERENCE = {
    "contiguous_waste_range": [0.60, 0.80],
    "paged_waste_max": 0.04,
    "source": PAPER.replace(
        "§6.1, Fig. 11",
        "§1 and Fig. 2 (20.4-38.2% of KV memory holds tokens in existing systems; vLLM wastes under 4%)",
    ),
}
TOTALS = ("used", "allocated", "reserved", "internal_fragmentation", "external_fragmentation", "resident")


# -- typed results: what the router sends ---------------------------------------------------------
@dataclass
class KVFrames:
    """Sampled steps, one entry per frame in every list (slot counts at that step)."""

    step: list[int]
    num_resident_requests: list[int]
    num_waiting_requests: list[int]
    num_finished_requests: list[int]
    num_preemptions_total: list[int]
    used_slots: list[int]  # slots holding a token's keys and values
    reserved_slots: list[int]  # allocated slots their request will fill later
    internal_fragmentation_slots: list[int]  # allocated slots their request will never fill
    external_fragmentation_slots: list[int]  # free slots in holes too small for the next request
    free_slots: list[int]
    waste_fraction: list[float]  # 1 - used / allocated at this step
    waste_fraction_to_date: list[float]  # time-averaged waste from step 0 to this step


@dataclass
class Residencies:
    """Every stay of a request in memory, one entry per stay in every list, in admission order.
    Resident at steps first_step..last_step, holding first_num_tokens + (step - first_step) tokens.
    Paged: block_table lists its pages in order (all it ever held); contiguous: one region. On the wire
    (/api/kv-cache) block_pages replaces block_table: each table as a string of two base-64 digits per page
    id (PAGE_DIGITS, high digit first; ids below 4,096), about half the bytes of decimal JSON."""

    request_id: list[int]
    first_step: list[int]
    last_step: list[int]
    first_num_tokens: list[int]
    block_table: list[list[int]] | None = None
    block_pages: list[str] | None = None
    start_slot: list[int] | None = None
    num_slots: list[int] | None = None


@dataclass
class KVPolicyRun:
    name: str
    layout: str  # "paged" | "contiguous"
    reservation: str
    capacity_slots: int
    waste_fraction: float  # time-averaged share of allocated KV memory not holding tokens
    max_concurrent_requests: int
    mean_concurrent_requests: float
    num_steps: int  # steps until the last request finished
    num_preemptions: int
    num_finished_requests: int
    breakdown: dict[str, float]  # time-averaged shares of capacity
    block_size: int | None = field(default=None, kw_only=True)  # paged only: tokens per page
    num_blocks: int | None = field(default=None, kw_only=True)  # paged only: pages in the pool
    math: dict[str, dict]
    frames: KVFrames
    residencies: Residencies


@dataclass
class KVResult:
    params: dict
    trace: dict
    num_final_tokens: list[int]  # per request: prompt + output, the length it grows to
    frame_every: int  # steps between frames (one clock for every policy)
    reference: dict
    policies: list[KVPolicyRun]


class KVRun:
    """One policy over one trace. After run(): the totals (token-steps), counts, frames and residencies."""

    def __init__(
        self,
        policy: str,
        trace: Trace,
        capacity: int,
        block_size: int,
        max_frames: int = 0,
        frame_every: int | None = None,
    ):
        """max_frames=0: no frames. frame_every=None: adaptive power-of-two stride (up to 2*max_frames
        frames are kept; the stride doubles and every other frame is dropped when that overflows)."""
        self.policy, self.capacity, self.block_size = policy, capacity, block_size
        self.paged = policy == "paged"
        self.num_prompt_tokens = trace.num_prompt_tokens.tolist()
        self.num_final_tokens = (trace.num_prompt_tokens + trace.num_output_tokens).tolist()
        n = len(self.num_prompt_tokens)
        if self.paged:
            self.kv = KVCacheManager(BlockPool(capacity // block_size), block_size)
        else:
            self.kv = ReservedManager(policy, capacity, trace.max_seq_len, self.num_final_tokens)
        # per request: tokens(i, s) = admitted_tokens[i] + s - admitted_step[i] while resident
        self.admitted_step, self.admitted_tokens = [0] * n, [0] * n
        self.tokens_before_preemption = [0] * n  # progress a preempted request recomputes
        self.residency_epoch = [0] * n  # bumped at each release: events of an old stay are stale
        self.slots_held = [0] * n
        self.residency_of = [-1] * n  # index into self.residencies of the stay in progress
        self.running: list[int] = []  # admission order; the newest is preempted first
        self.waiting = deque(range(n))
        self.events: list[tuple] = []  # heap of (step, priority, seq, request_id, epoch)
        self.num_events = 0
        self.admit_steps: set[int] = set()
        self.last_preemption_step = -1
        # sums over residents: tokens (at step tokens_step), slots allocated, slots that will hold a token
        self.tokens_step, self.tokens_sum, self.slots_allocated, self.slots_to_fill = 0, 0, 0, 0
        self.external_slots_now = 0
        self.last_step = -1
        self.totals = dict.fromkeys(TOTALS, 0)
        self.num_steps = self.num_finished = self.num_preemptions = self.max_resident = 0
        self.adaptive_stride = frame_every is None
        self.frame_every = frame_every or 1
        self.max_kept_frames = 2 * max_frames if self.adaptive_stride else max_frames
        self.next_frame_step: int | None = 0 if max_frames else None
        self.frames: list[tuple] = []  # one tuple of KVFrames' fields per frame
        self.residencies: list[list] = []  # [request_id, first_step, last_step, first_tokens, layout]

    # -- events -------------------------------------------------------------------------------
    def push(self, step: int, priority: int, request_id: int = -1) -> None:
        """Heap key (step, priority, seq): ties keep insertion order. Carries the request's epoch."""
        epoch = self.residency_epoch[request_id] if request_id >= 0 else 0
        heapq.heappush(self.events, (step, priority, self.num_events, request_id, epoch))
        self.num_events += 1

    def schedule_admit(self, step: int) -> None:
        if self.waiting and step not in self.admit_steps:
            self.admit_steps.add(step)
            self.push(step, ADMIT)

    def run(self) -> KVRun:
        self.schedule_admit(0)
        events = self.events
        while events:
            s = events[0][0]
            self.account_quiet_steps(s)
            while events and events[0][0] == s and events[0][1] < FINISH:
                self.handle(heapq.heappop(events))
            self.external_slots_now = self.external_slots()
            self.measure(s, s, 1)
            while events and events[0][0] == s:
                self.handle(heapq.heappop(events))
            self.last_step = s
        return self

    def handle(self, event: tuple) -> None:
        s, priority, _, i, epoch = event
        if priority == ADMIT:
            self.admit(s)
        elif epoch == self.residency_epoch[i]:
            (self.grow if priority == GROW else self.finish)(s, i)

    # -- state changes ------------------------------------------------------------------------
    def tokens(self, i: int, s: int) -> int:
        return self.admitted_tokens[i] + s - self.admitted_step[i]

    def move_tokens_sum(self, s: int) -> None:
        """Move the residents' token sum to step s (it grows by one per resident per step)."""
        self.tokens_sum += len(self.running) * (s - self.tokens_step)
        self.tokens_step = s

    def try_allocate(self, i: int, num_tokens: int) -> int | None:
        """Slots held by request i after growing to num_tokens, or None if memory is short."""
        return None if self.kv.allocate(i, num_tokens) is None else self.kv.num_slots(i)

    def add_slots(self, i: int, slots: int, sign: int = 1) -> None:
        self.slots_allocated += sign * slots
        self.slots_to_fill += sign * min(slots, self.num_final_tokens[i])

    def admit(self, s: int) -> None:
        self.admit_steps.discard(s)
        if self.last_preemption_step == s:  # like vLLM: no admissions in a step that preempted
            return self.schedule_admit(s + 1)
        while self.waiting:
            i = self.waiting[0]
            t = max(self.num_prompt_tokens[i], self.tokens_before_preemption[i]) + 1
            slots = self.try_allocate(i, t)
            if slots is None:
                break  # the head does not fit; nobody behind it is admitted (no skipping)
            self.waiting.popleft()
            self.move_tokens_sum(s)
            self.admitted_step[i], self.admitted_tokens[i], self.slots_held[i] = s, t, slots
            self.running.append(i)
            self.tokens_sum += t
            self.add_slots(i, slots)
            self.residency_of[i] = len(self.residencies)
            self.residencies.append([i, s, -1, t, None])
            self.push(s + self.num_final_tokens[i] - t, FINISH, i)
            self.push_grow(i, s)
        self.max_resident = max(self.max_resident, len(self.running))

    def push_grow(self, i: int, s: int) -> None:
        """Paged only: the step at which request i's tokens first overflow its pages."""
        if self.paged and self.slots_held[i] < self.num_final_tokens[i]:
            self.push(s + self.slots_held[i] + 1 - self.tokens(i, s), GROW, i)

    def grow(self, s: int, i: int) -> None:
        """Paged: request i's tokens overflow its pages at step s; take a page (preempting if none is free)."""
        need = self.admitted_tokens[i] + s - self.admitted_step[i]
        while (slots := self.try_allocate(i, need)) is None:
            victim = self.running[-1]
            self.preempt(victim, s)
            if victim == i:
                return
        held, final = self.slots_held[i], self.num_final_tokens[i]
        self.slots_allocated += slots - held
        self.slots_to_fill += (slots if slots < final else final) - (held if held < final else final)
        self.slots_held[i] = slots
        if slots < final:  # push_grow, inlined (hot): the next overflow is one step past the new pages
            self.push(s + slots + 1 - need, GROW, i)

    def release(self, i: int, s: int, num_tokens: int, last_resident_step: int) -> None:
        self.move_tokens_sum(s)
        self.running.remove(i)
        self.tokens_sum -= num_tokens
        self.add_slots(i, self.slots_held[i], -1)
        self.slots_held[i] = 0
        stay = self.residencies[self.residency_of[i]]
        stay[2] = last_resident_step
        stay[4] = self.kv.layout(i)
        self.kv.free(i)
        self.residency_epoch[i] += 1

    def preempt(self, i: int, s: int) -> None:
        """Recompute-style: i keeps its progress (tokens before this step) and rejoins the queue's front.
        It grew at step s, before s was measured, so its stay ended at s - 1."""
        num_tokens = self.tokens(i, s)
        self.release(i, s, num_tokens, s - 1)
        self.tokens_before_preemption[i] = num_tokens - 1
        self.waiting.appendleft(i)
        self.num_preemptions += 1
        self.last_preemption_step = s
        self.schedule_admit(s + 1)

    def finish(self, s: int, i: int) -> None:
        self.release(i, s, self.num_final_tokens[i], s)
        self.num_finished += 1
        self.schedule_admit(s + 1)

    # -- measurement --------------------------------------------------------------------------
    def external_slots(self) -> int:
        extra = self.capacity - self.kv.pool.num_blocks * self.block_size if self.paged else 0
        return extra + self.kv.unusable_slots(self.waiting[0] if self.waiting else None)

    def account_quiet_steps(self, s: int) -> None:
        """Account for the quiet steps last+1 .. s-1, where only token counts change."""
        if s - self.last_step > 1:
            self.measure(self.last_step + 1, s - 1, s - self.last_step - 1)

    def measure(self, first: int, last_step: int, d: int) -> None:
        """Add steps first..last_step (d of them, same residents) to the totals; keep frames."""
        r = len(self.running)
        if r == 0:
            return
        while self.next_frame_step is not None and self.next_frame_step <= last_step:
            if self.next_frame_step >= first:
                self.record(self.next_frame_step, first)
            else:
                self.next_frame_step += self.frame_every
        u0 = self.tokens_sum + r * (first - self.tokens_step)
        used = u0 * d + r * d * (d - 1) // 2
        t = self.totals
        t["used"] += used
        t["allocated"] += self.slots_allocated * d
        t["reserved"] += self.slots_to_fill * d - used
        t["internal_fragmentation"] += (self.slots_allocated - self.slots_to_fill) * d
        t["external_fragmentation"] += self.external_slots_now * d
        t["resident"] += r * d
        self.num_steps += d

    def record(self, f: int, first: int) -> None:
        """Keep the frame at step f; thin the kept frames if the adaptive stride overflows."""
        self.frames.append(self.frame(f, first))
        if len(self.frames) < self.max_kept_frames:
            self.next_frame_step = f + self.frame_every
        elif self.adaptive_stride:
            self.frame_every *= 2
            self.frames = [fr for fr in self.frames if fr[0] % self.frame_every == 0]
            self.next_frame_step = (f // self.frame_every + 1) * self.frame_every
        else:
            self.next_frame_step = None

    def frame(self, f: int, first: int) -> tuple:
        """The slot breakdown and the waste meter at step f (KVFrames' fields, in order)."""
        r = len(self.running)
        used = self.tokens_sum + r * (f - self.tokens_step)
        d = f - first + 1
        u0 = self.tokens_sum + r * (first - self.tokens_step)
        used_to_date = self.totals["used"] + u0 * d + r * d * (d - 1) // 2
        allocated_to_date = self.totals["allocated"] + self.slots_allocated * d
        return (
            f,
            r,
            len(self.waiting),
            self.num_finished,
            self.num_preemptions,
            used,
            self.slots_to_fill - used,
            self.slots_allocated - self.slots_to_fill,
            self.external_slots_now,
            self.capacity - self.slots_allocated,
            round(1 - used / self.slots_allocated, 4),
            round(1 - used_to_date / allocated_to_date, 4),
        )


def residencies_of(run: KVRun) -> Residencies:
    stays = run.residencies
    out = Residencies(
        request_id=[s[0] for s in stays],
        first_step=[s[1] for s in stays],
        last_step=[s[2] for s in stays],
        first_num_tokens=[s[3] for s in stays],
    )
    if run.paged:
        out.block_table = [s[4] for s in stays]
    else:
        out.start_slot, out.num_slots = [s[4][0] for s in stays], [s[4][1] for s in stays]
    return out


def summarize(run: KVRun) -> KVPolicyRun:
    """Run-level metrics (every step counted), the sampled frames and every residency of one policy."""
    totals, steps, cap = run.totals, run.num_steps, run.capacity
    share = {
        k: totals[k] / (cap * steps) for k in ("used", "reserved", "internal_fragmentation", "external_fragmentation")
    }
    share["free"] = 1 - (totals["allocated"] / (cap * steps))
    waste = round(1 - totals["used"] / totals["allocated"], 6)
    math_ = as_json(
        {
            "waste_fraction": derive(
                waste,
                "fraction of allocated KV memory",
                "1 - sum over steps of used slots / sum over steps of allocated slots",
                {
                    "used_token_steps": (totals["used"], "token-steps"),
                    "allocated_slot_steps": (totals["allocated"], "slot-steps"),
                    "num_steps": (steps, "steps"),
                    "capacity": (cap, "token slots"),
                },
                [
                    "one token per resident request per step",
                    "all requests queued at step 0, admitted FCFS",
                    f"reservation: {RESERVATION[run.policy]}",
                ],
                [PAPER],
            ),
            "max_concurrent_requests": derive(
                run.max_resident,
                "requests",
                "max over steps of requests holding KV memory",
                {"capacity": (cap, "token slots")},
                [f"reservation: {RESERVATION[run.policy]}"],
            ),
        }
    )
    return KVPolicyRun(
        name=run.policy,
        layout="paged" if run.paged else "contiguous",
        reservation=RESERVATION[run.policy],
        capacity_slots=cap,
        waste_fraction=waste,
        max_concurrent_requests=run.max_resident,
        mean_concurrent_requests=round(totals["resident"] / steps, 3),
        num_steps=steps,
        num_preemptions=run.num_preemptions,
        num_finished_requests=run.num_finished,
        breakdown=share,
        block_size=run.block_size if run.paged else None,
        num_blocks=run.kv.pool.num_blocks if run.paged else None,
        math=math_,
        frames=KVFrames(*(list(column) for column in zip(*run.frames)))
        if run.frames
        else KVFrames(*([] for _ in range(12))),
        residencies=residencies_of(run),
    )


def residents_at(policy: KVPolicyRun, num_final_tokens: list[int], step: int) -> list[dict]:
    """Who holds memory at `step`, in admission order: request_id, num_tokens, num_final_tokens, and
    block_table (the pages in use, paged) or start_slot and num_slots (a region)."""
    st = policy.residencies
    out = []
    for k, rid in enumerate(st.request_id):
        if st.first_step[k] <= step <= st.last_step[k]:
            n = st.first_num_tokens[k] + step - st.first_step[k]
            r = {"request_id": rid, "num_tokens": n, "num_final_tokens": num_final_tokens[rid]}
            if st.block_table is not None:
                r["block_table"] = st.block_table[k][: num_blocks_for(n, policy.block_size)]
            else:
                r["start_slot"], r["num_slots"] = st.start_slot[k], st.num_slots[k]
            out.append(r)
    return out


def frame_cells(policy: KVPolicyRun, residents: list[dict], cell_slots: int = 16) -> dict:
    """Expand the residents of one step into the grid the stage draws: per cell, its owner and fill.

    Paged policies: one cell per physical page (cell_slots is the block size). Contiguous policies:
    the slot range cut into cells of cell_slots slots; a cell shared by two regions shows the first
    owner and counts both regions' tokens. Invariant: sum(num_filled) == the residents' tokens.
    Returns {"cell_slots", "owner": [request_id | None per cell], "num_filled": [slots with tokens]}.
    """
    paged = policy.layout == "paged"
    size = policy.block_size if paged else cell_slots
    num_cells = policy.num_blocks if paged else num_blocks_for(policy.capacity_slots, size)
    owner, filled = [None] * num_cells, [0] * num_cells
    for r in residents:
        if paged:  # token t of the request lives in page block_table[t // size]
            spans = [(b, i * size, (i + 1) * size) for i, b in enumerate(r["block_table"])]
        else:  # token t lives in slot start_slot + t
            start = r["start_slot"]
            spans = [
                (c, c * size - start, (c + 1) * size - start)
                for c in range(start // size, (start + r["num_slots"] - 1) // size + 1)
            ]
        for cell, lo, hi in spans:  # tokens [lo, hi) of this request map into the cell
            owner[cell] = r["request_id"] if owner[cell] is None else owner[cell]
            filled[cell] += max(0, min(hi, r["num_tokens"]) - max(lo, 0))
    return {"cell_slots": size, "owner": owner, "num_filled": filled}


def validate_kv(
    block_size: int,
    num_requests: int,
    capacity_tokens: int,
    max_seq_len: int,
    max_frames: int,
    frame_every: int | None,
    policies: tuple[str, ...],
) -> None:
    """ValueError naming the parameter and its bound (a router maps these to 422)."""
    check_int("num_requests", num_requests, 1, 10_000)
    check_pool("capacity_tokens", capacity_tokens, block_size, max_seq_len, MAX_CAPACITY_TOKENS)
    check_int("max_frames", max_frames, 1, MAX_FRAMES)
    if frame_every is not None:
        check_int("frame_every", frame_every, 1, 10_000_000)
    check_subset("policies", policies, POLICIES)


def common_frame_every(runs: list[KVRun], max_frames: int) -> int:
    """One clock for all policies: the smallest power-of-two stride (a multiple of every run's own
    adaptive stride) with at most max_frames frames over the longest run."""
    horizon = max(r.last_step for r in runs)
    stride = max([r.frame_every for r in runs] + [1 << max(0, math.ceil(math.log2((horizon + 1) / max_frames)))])
    while horizon // stride + 1 > max_frames:
        stride *= 2
    return stride


def simulate_kv(
    block_size: int = 16,
    workload: str = "sharegpt",
    num_requests: int = 300,
    seed: int = 0,
    capacity_tokens: int = 16_384,
    max_seq_len: int = 2048,
    max_frames: int = 120,
    frame_every: int | None = None,
    policies: tuple[str, ...] | None = None,
) -> KVResult:
    """Run each policy over the same seeded trace (all requests queued at step 0).

    Frames are taken at steps 0, frame_every, 2*frame_every, ... (at most max_frames per policy) on
    one clock for every policy; frame_every=None picks the smallest power-of-two stride whose frames
    span the longest run.
    """
    policies = tuple(policies or POLICIES)
    validate_kv(block_size, num_requests, capacity_tokens, max_seq_len, max_frames, frame_every, policies)
    trace = make_trace(workload, num_requests, seed, None, max_seq_len)
    runs = [KVRun(p, trace, capacity_tokens, block_size, max_frames, frame_every).run() for p in policies]
    if frame_every is None:
        frame_every = common_frame_every(runs, max_frames)
        for r in runs:
            r.frames = [f for f in r.frames if f[0] % frame_every == 0]
    params = dict(
        block_size=block_size,
        workload=workload,
        num_requests=num_requests,
        seed=seed,
        capacity_tokens=capacity_tokens,
        max_seq_len=max_seq_len,
        max_frames=max_frames,
    )
    return KVResult(
        params=params,
        trace=trace.summary(),
        num_final_tokens=runs[0].num_final_tokens,
        frame_every=frame_every,
        reference=REFERENCE,
        policies=[summarize(r) for r in runs],
    )
