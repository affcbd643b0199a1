"""Paging vs contiguous reservation on one request trace: a step-by-step KV-memory simulation.

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
"""

from __future__ import annotations

import heapq
from collections import deque

from inside_llm.sim.derivation import derive
from inside_llm.sim.kvcache import BlockPool, ContiguousAllocator, KVCacheManager
from inside_llm.sim.workloads import PAPER, Trace

POLICIES = ("paged", "contiguous", "pow2", "oracle")
GROW, ADMIT, FINISH = 0, 1, 2  # event priorities within one step: grow, then admit, measure, finish
RESERVATION = {
    "paged": "pages of block_size slots, allocated as tokens arrive",
    "contiguous": "max_seq_len slots per request, reserved at admission",
    "pow2": "next power of two of the final length (capped at max_seq_len), reserved at admission",
    "oracle": "exactly the final length, reserved at admission",
}



def reservation_slots(policy: str, final_len: int, max_seq_len: int) -> int:
    """Slots a reservation policy sets aside for a request whose final length is final_len tokens."""
    if policy == "contiguous":
        return max_seq_len
    if policy == "pow2":
        return min(1 << (final_len - 1).bit_length(), max_seq_len)
    return final_len  # oracle


class KVRun:
    """One policy over one trace. After run(): the integrals (token-steps), counts and frames."""

    def __init__(self, policy: str, trace: Trace, capacity: int, block_size: int,
                 max_frames: int = 0, frame_every: int | None = None):
        """max_frames=0: no frames. frame_every=None: adaptive power-of-two stride (up to 2*max_frames
        frames are kept; the stride doubles and every other frame is dropped when that overflows)."""
        self.policy, self.capacity, self.block_size = policy, capacity, block_size
        self.prompt = trace.num_prompt_tokens.tolist()
        self.final = (trace.num_prompt_tokens + trace.num_output_tokens).tolist()
        n = len(self.prompt)
        if policy == "paged":
            self.kv = KVCacheManager(BlockPool(capacity // block_size), block_size)
            self.reserve = None
        else:
            self.alloc = ContiguousAllocator(capacity)
            self.reserve = [reservation_slots(policy, L, trace.max_seq_len) for L in self.final]
        self.anchor_step, self.anchor_tokens = [0] * n, [0] * n  # tokens(i, s) = anchor_tokens + s - anchor_step
        self.progress, self.epoch, self.slots = [0] * n, [0] * n, [0] * n
        self.running: list[int] = []  # admission order; the newest is preempted first
        self.waiting = deque(range(n))
        self.heap: list[tuple] = []
        self.seq = 0
        self.admit_steps: set[int] = set()
        self.preempted_at = -1
        self.ref_step, self.tok_ref, self.num_slots, self.num_useful = 0, 0, 0, 0  # sums over residents
        self.ext = 0
        self.last = -1
        self.ints = dict(used=0, allocated=0, reserved=0, internal=0, external=0, resident=0)
        self.num_steps = self.num_finished = self.num_preemptions = self.max_resident = 0
        self.adaptive = frame_every is None
        self.stride = frame_every or 1
        self.frame_cap = 2 * max_frames if self.adaptive else max_frames
        self.next_frame: int | None = 0 if max_frames else None
        self.frames: list[dict] = []

    # -- events -------------------------------------------------------------------------------
    def push(self, step: int, priority: int, request_id: int = -1) -> None:
        """Heap key (step, priority, seq): ties keep insertion order. Carries the request's epoch."""
        ep = self.epoch[request_id] if request_id >= 0 else 0
        heapq.heappush(self.heap, (step, priority, self.seq, request_id, ep))
        self.seq += 1

    def schedule_admit(self, step: int) -> None:
        if self.waiting and step not in self.admit_steps:
            self.admit_steps.add(step)
            self.push(step, ADMIT)

    def run(self) -> KVRun:
        self.schedule_admit(0)
        heap = self.heap
        while heap:
            s = heap[0][0]
            self.advance_to(s)
            while heap and heap[0][0] == s and heap[0][1] < FINISH:
                self.handle(heapq.heappop(heap))
            self.ext = self.external_slots()
            self.measure(s, s, 1)
            while heap and heap[0][0] == s:
                self.handle(heapq.heappop(heap))
            self.last = s
        return self

    def handle(self, event: tuple) -> None:
        s, priority, _, i, ep = event
        if priority == ADMIT:
            self.admit(s)
        elif ep == self.epoch[i]:  # events of a preempted residency are stale
            (self.grow if priority == GROW else self.finish)(s, i)

    # -- state changes ------------------------------------------------------------------------
    def tokens(self, i: int, s: int) -> int:
        return self.anchor_tokens[i] + s - self.anchor_step[i]

    def reanchor(self, s: int) -> None:
        """Move the running token sum to step s (it grows by one per resident per step)."""
        self.tok_ref += len(self.running) * (s - self.ref_step)
        self.ref_step = s

    def try_allocate(self, i: int, num_tokens: int) -> int | None:
        """Slots held by request i after growing to num_tokens, or None if memory is short."""
        if self.reserve is None:
            got = self.kv.allocate(i, num_tokens)
            return None if got is None else self.kv.num_slots(i)
        if self.slots[i]:
            return self.slots[i]
        return None if self.alloc.allocate(i, self.reserve[i]) is None else self.reserve[i]

    def set_slots(self, i: int, slots: int, sign: int = 1) -> None:
        self.num_slots += sign * slots
        self.num_useful += sign * min(slots, self.final[i])

    def admit(self, s: int) -> None:
        self.admit_steps.discard(s)
        if self.preempted_at == s:  # like vLLM: no admissions in a step that preempted
            return self.schedule_admit(s + 1)
        while self.waiting:
            i = self.waiting[0]
            t = max(self.prompt[i], self.progress[i]) + 1
            slots = self.try_allocate(i, t)
            if slots is None:
                break  # the head does not fit; nobody behind it is admitted (no skipping)
            self.waiting.popleft()
            self.reanchor(s)
            self.anchor_step[i], self.anchor_tokens[i], self.slots[i] = s, t, slots
            self.running.append(i)
            self.tok_ref += t
            self.set_slots(i, slots)
            self.push(s + self.final[i] - t, FINISH, i)
            self.push_grow(i, s)
        self.max_resident = max(self.max_resident, len(self.running))

    def push_grow(self, i: int, s: int) -> None:
        """Paged only: the step at which request i's tokens first overflow its pages."""
        if self.reserve is None and self.slots[i] < self.final[i]:
            self.push(s + self.slots[i] + 1 - self.tokens(i, s), GROW, i)

    def grow(self, s: int, i: int) -> None:
        need = self.tokens(i, s)
        while (slots := self.try_allocate(i, need)) is None:
            victim = self.running[-1]
            self.preempt(victim, s)
            if victim == i:
                return
        self.num_slots += slots - self.slots[i]
        self.num_useful += min(slots, self.final[i]) - min(self.slots[i], self.final[i])
        self.slots[i] = slots
        self.push_grow(i, s)

    def release(self, i: int, s: int, num_tokens: int) -> None:
        self.reanchor(s)
        self.running.remove(i)
        self.tok_ref -= num_tokens
        self.set_slots(i, self.slots[i], -1)
        self.slots[i] = 0
        self.kv.free(i) if self.reserve is None else self.alloc.free(i)
        self.epoch[i] += 1

    def preempt(self, i: int, s: int) -> None:
        """Recompute-style: i keeps its progress (tokens before this step) and rejoins the queue's front."""
        num_tokens = self.tokens(i, s)
        self.release(i, s, num_tokens)
        self.progress[i] = num_tokens - 1
        self.waiting.appendleft(i)
        self.num_preemptions += 1
        self.preempted_at = s
        self.schedule_admit(s + 1)

    def finish(self, s: int, i: int) -> None:
        self.release(i, s, self.final[i])
        self.num_finished += 1
        self.schedule_admit(s + 1)

    # -- measurement --------------------------------------------------------------------------
    def external_slots(self) -> int:
        if self.reserve is None:
            return self.capacity - self.kv.pool.num_blocks * self.block_size
        return self.alloc.unusable_slots(self.reserve[self.waiting[0]]) if self.waiting else 0

    def advance_to(self, s: int) -> None:
        """Account for the quiet steps last+1 .. s-1, where only token counts change."""
        if s - self.last > 1:
            self.measure(self.last + 1, s - 1, s - self.last - 1)

    def measure(self, first: int, last_step: int, d: int) -> None:
        """Add steps first..last_step (d of them, same residents) to the integrals; emit frames."""
        r = len(self.running)
        if r == 0:
            return
        while self.next_frame is not None and self.next_frame <= last_step:
            if self.next_frame >= first:
                self.record(self.next_frame, first)
            else:
                self.next_frame += self.stride
        u0 = self.tok_ref + r * (first - self.ref_step)
        used = u0 * d + r * d * (d - 1) // 2
        for key, value in (("used", used), ("allocated", self.num_slots * d),
                           ("reserved", self.num_useful * d - used),
                           ("internal", (self.num_slots - self.num_useful) * d),
                           ("external", self.ext * d), ("resident", r * d)):
            self.ints[key] += value
        self.num_steps += d

    def record(self, f: int, first: int) -> None:
        """Keep the frame at step f; thin the kept frames if the adaptive stride overflows."""
        self.frames.append(self.frame(f, first))
        if len(self.frames) < self.frame_cap:
            self.next_frame = f + self.stride
        elif self.adaptive:
            self.stride *= 2
            self.frames = [fr for fr in self.frames if fr["step"] % self.stride == 0]
            self.next_frame = (f // self.stride + 1) * self.stride
        else:
            self.next_frame = None

    def frame(self, f: int, first: int) -> dict:
        """What the stage draws at step f: the slot breakdown, the waste meter, every resident."""
        r = len(self.running)
        used = self.tok_ref + r * (f - self.ref_step)
        d = f - first + 1
        u0 = self.tok_ref + r * (first - self.ref_step)
        used_to_date = self.ints["used"] + u0 * d + r * d * (d - 1) // 2
        alloc_to_date = self.ints["allocated"] + self.num_slots * d
        return {
            "step": f, "num_resident_requests": r, "num_waiting_requests": len(self.waiting),
            "num_finished_requests": self.num_finished, "num_preemptions_total": self.num_preemptions,
            "used_slots": used,
            "reserved_slots": self.num_useful - used,
            "internal_fragmentation_slots": self.num_slots - self.num_useful,
            "external_fragmentation_slots": self.ext, "free_slots": self.capacity - self.num_slots,
            "waste_fraction": round(1 - used / self.num_slots, 4),
            "waste_fraction_to_date": round(1 - used_to_date / alloc_to_date, 4),
            "residents": [self.resident(i, f) for i in self.running],
        }

    def resident(self, i: int, f: int) -> dict:
        out = {"request_id": i, "num_tokens": self.tokens(i, f), "num_final_tokens": self.final[i]}
        if self.reserve is None:
            out["block_table"] = self.kv.block_table(i)
        else:
            out["start_slot"], out["num_slots"] = self.alloc.regions[i]
        return out


def summarize(run: KVRun) -> dict:
    """Run-level metrics (every step counted) and the sampled frames for one policy."""
    ints, steps, cap = run.ints, run.num_steps, run.capacity
    share = {k: ints[k] / (cap * steps) for k in ("used", "reserved", "internal", "external")}
    share["free"] = 1 - (ints["allocated"] / (cap * steps))
    waste = 1 - ints["used"] / ints["allocated"]
    out = {
        "name": run.policy, "layout": "paged" if run.reserve is None else "contiguous",
        "reservation": RESERVATION[run.policy], "capacity_slots": cap,
        "waste_fraction": round(waste, 6), "max_concurrent_requests": run.max_resident,
        "mean_concurrent_requests": round(ints["resident"] / steps, 3), "num_steps": steps,
        "num_preemptions": run.num_preemptions, "num_finished_requests": run.num_finished,
        "breakdown": {"used": share["used"], "reserved": share["reserved"],
                      "internal_fragmentation": share["internal"],
                      "external_fragmentation": share["external"], "free": share["free"]},
        "frames": run.frames,
    }
    if run.reserve is None:
        out["block_size"], out["num_blocks"] = run.block_size, run.kv.pool.num_blocks
    out["math"] = {"waste_fraction": derive(
        out["waste_fraction"], "fraction of allocated KV memory",
        "1 - sum over steps of used slots / sum over steps of allocated slots",
        {"used_token_steps": (ints["used"], "token-steps"), "allocated_slot_steps": (ints["allocated"], "slot-steps"),
         "num_steps": (steps, "steps"), "capacity": (cap, "token slots")},
        ["one token per resident request per step", "all requests queued at step 0, admitted FCFS",
         f"reservation: {RESERVATION[run.policy]}"], [PAPER]).to_dict(),
        "max_concurrent_requests": derive(
            run.max_resident, "requests", "max over steps of requests holding KV memory",
            {"capacity": (cap, "token slots")}, [f"reservation: {RESERVATION[run.policy]}"]).to_dict()}
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in out.items()}
