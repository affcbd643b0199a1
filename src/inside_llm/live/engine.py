"""The tour's own serving engine: one loop thread owns a model and serves every visitor's chat on the serving core.

Chapter 7 teaches continuous batching and chapter 6 PagedAttention; this is both, running on this server, and
its scheduling is theirs: each step of the loop is `sim/serve`'s `Scheduler.schedule(now)` (one admission
order, one preemption rule: the core's, stated in sim/serve/scheduler.py), then ONE forward pass of the numpy
model over the plan (`DemoModel.step` inside `model_work.TURNS.step()`: the live engine's clock), then
`finish_step(plan, sampled, now)`. The keys and values live in the physical pages of `pages.PagedKVStore`, whose
block tables, free queue and prefix cache are the core's `KVCacheManager` and `BlockPool`.

What serving adds to the core, as the core's hooks (sim/serve/scheduler.py, fairshare.py):
- Admission at once: a chat takes an idle seat inside `submit` (the core's `admit_waiting`, between steps),
  not at the next step; when every seat is taken it waits in a bounded queue. Only when every seat AND
  every place in the queue are taken is it refused (`QueueFull`: the API answers 429 with Retry-After);
  so is a client that already has half the queue waiting (`ClientBusy`).
- Fair share (`FairShare`, the scheduler's queue): the waiting chat whose client has the fewest chats
  running takes a freed seat; when every seat is taken and a waiting client has at least 2 fewer running
  than the busiest, that client's newest admitted chat is swapped out (recompute preemption) and the waiting
  one seated in the same step.
- Chunks: a prompt is read `prefill_chunk` tokens per step at most (the core's long_prefill_token_threshold),
  `step_tokens` per step in all (its max_num_batched_tokens), so a new prompt never stalls the decodes.
- A chat that ends by its stop token, or whose client left (dropped at the next step), leaves at once
  (`Scheduler.end`): its seat and pages go to the next.
- Prefix caching: each chat's full prompt pages carry chained hashes of their token ids (pages.prefix_hashes),
  so a chat whose prompt begins like an earlier one's (SmolLM2's chat template: its first 16-token page is
  the same for every visitor) takes those pages (reference counted) and skips their prefill. A page is
  registered only after the step that wrote it; a page whose last user left stays cached in the free queue
  until it is handed out again (LRU eviction).
- `snapshot()` is what /api/engine shows: seats, queue, pages, prefix-cache queries and hits, tokens/s over
  the last seconds, and each chat's progress, never its text (other visitors' questions must not leak).

Batching never changes an answer, nor does preemption or a prefix-cache hit: each chat's tokens depend only on
its own prompt (tests check each against the same prompt run alone, token for token).
"""

from __future__ import annotations

import heapq
import itertools
import math
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from inside_llm.live.pages import PagedKV, PagedKVStore, prefix_hashes
from inside_llm.metrics import EngineStats
from inside_llm.model_work import TURNS
from inside_llm.sim.core.result import about, as_json
from inside_llm.sim.model.transformer import DemoModel, sample
from inside_llm.sim.model.transformer_ops import penalize
from inside_llm.sim.serve.fairshare import FairShare
from inside_llm.sim.serve.requests import Requests
from inside_llm.sim.serve.scheduler import Scheduler


class QueueFull(Exception):
    """The waiting queue holds its limit of requests: come back later."""


class ClientBusy(Exception):
    """This client already has its share of chats running or waiting."""


# ---- requests ------------------------------------------------------------------------------------


@dataclass(eq=False)
class Chat:
    """One chat in the engine. prompt: the ids it reads; out: the ids it has written so far. rid: its request
    id in the scheduler's columns (a slot, reused once the chat ends); seq_id: its number in this engine."""

    seq_id: int
    client: str
    prompt: list[int]
    max_new_tokens: int
    temperature: float
    top_k: int | None
    rng: np.random.Generator
    tokens: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)  # ids for the reader; None = ended
    out: list[int] = field(default_factory=list)
    kv: PagedKV | None = None
    rid: int = -1
    state: str = "waiting"  # waiting, prefill, decode, done
    finish_reason: str = ""  # once done: stop (its stop token), length, cancelled or error
    cancelled: bool = False
    preemptions: int = 0
    prefix_hit_tokens: int = 0  # prompt tokens found in the prefix cache at its (last) admission
    admitted_at: float = 0.0
    label: str = ""  # a second name cancel_client() matches (the demo's chats: "demo")
    # perf_counter times for /metrics and each answer's timings (metrics.EngineStats sets them; 0 = not yet)
    arrived_at: float = field(default_factory=time.perf_counter)
    scheduled_at: float = 0.0
    first_token_at: float = 0.0
    last_token_at: float = 0.0
    finished_at: float = 0.0
    stopped_by_text: bool = False  # its reader met a stop sequence and ended it: counted as stop, not abort
    top_p: float = 1.0  # nucleus sampling (/v1's top_p): sample among the likeliest ids whose p sums to top_p
    repetition_penalty: float = 1.0  # a chat UI's repetition settings (transformer_ops.penalize); 1.0, 0: none
    no_repeat_ngram: int = 0

    @property
    def context(self) -> list[int]:
        """What the model reads: the prompt, then every id it wrote (the newest is fed at the next step)."""
        return self.prompt + self.out


class Stream:
    """What a caller iterates: the sequence's new ids as they come, None while it waits (a point where the
    caller may look at its client and stop), then StopIteration. close() cancels the sequence."""

    def __init__(self, engine: Engine, seq: Chat, poll_s: float):
        self.engine, self.seq, self.poll_s = engine, seq, poll_s

    def __iter__(self) -> Iterator[int | None]:
        return self

    def __next__(self) -> int | None:
        try:
            token = self.seq.tokens.get(timeout=self.poll_s)
        except queue.Empty:
            return None
        if token is None:
            raise StopIteration
        return token

    @property
    def finish_reason(self) -> str:
        return self.seq.finish_reason

    def close(self) -> None:
        self.engine.cancel(self.seq)


# ---- the loop ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineLimits:
    """How much one engine takes on. seats: sequences per step; queue: requests waiting at most when every seat
    is taken (seats + queue chats in all; more get QueueFull); queue_per_client: a client's chats waiting at
    most (None: half the queue), running ones unbounded (a client may use every idle seat; the fair share
    decides who runs when others wait); prefill_chunk: prompt ids one sequence feeds per step (the core's
    long_prefill_token_threshold); step_tokens: ids one step feeds in all (its max_num_batched_tokens);
    prefix_caching: chats share the pages of equal prompt prefixes (vLLM's enable_prefix_caching)."""

    seats: int = 8
    queue: int = 16
    queue_per_client: int | None = None
    num_blocks: int = 256
    block_size: int = 16
    prefill_chunk: int = 32
    step_tokens: int = 96
    rate_window_s: float = 5.0
    prefix_caching: bool = True


class Engine:
    """One model, one loop thread, many chats. submit() hands back a Stream; the loop does the rest: each step
    is the serving core's Scheduler.schedule(now) -> one forward pass -> finish_step (module docstring)."""

    def __init__(self, model: DemoModel, limits: EngineLimits = EngineLimits(), stop_ids: Sequence[int] = ()):
        self.model, self.limits = model, limits
        self.stop_ids = frozenset(stop_ids) | getattr(model, "stop_ids", frozenset())
        slots = limits.seats + limits.queue  # request ids: a chat running or waiting holds one
        self.store = PagedKVStore(model, limits.num_blocks, limits.block_size, slots)
        self.requests = Requests.of(np.zeros(slots), np.zeros(slots, np.int64), np.zeros(slots, np.int64))
        self.chats: dict[int, Chat] = {}  # by request id
        self._free_rids = list(range(slots))  # a heap: the lowest free id is taken first
        self.fair = FairShare(lambda rid: self.chats[rid].client)
        self.scheduler = Scheduler(
            "continuous",
            self.requests,
            limits.seats,
            self.store.manager,
            limits.step_tokens,
            fast_forward=False,  # every step is one real forward pass
            queue=self.fair,
            long_prefill_token_threshold=limits.prefill_chunk,
        )
        self._ids = itertools.count(1)
        self._lock = threading.Condition()
        self._recent: deque[tuple[float, int]] = deque()  # (time, tokens written) per step, for tokens/s
        self.steps = 0
        self.tokens_written = 0
        self.finished = 0
        self.prefix_queries = self.prefix_hits = 0  # tokens looked up in the prefix cache at admissions, found
        self.stats = EngineStats()  # counters and latency histograms for /metrics (metrics.py)
        self.last_error: str | None = None
        self._thread: threading.Thread | None = None
        self._stop = False

    @property
    def limits(self) -> EngineLimits:
        return self._limits

    @limits.setter
    def limits(self, limits: EngineLimits) -> None:
        """New limits (a test's monkeypatch): seats (at most the first limits' seats), the step's budget and the
        prefill chunk reach the scheduler; the pool and the request ids keep their first sizes."""
        self._limits = limits
        sched = getattr(self, "scheduler", None)
        if sched is not None:
            sched.seats, sched.budget, sched.chunk = (
                min(limits.seats, len(sched.seat_req)),
                limits.step_tokens,
                limits.prefill_chunk,
            )

    @property
    def running(self) -> list[Chat]:
        """Chats in a seat, in admission order (the scheduler's)."""
        return [self.chats[r] for r in self.scheduler.running]

    @property
    def waiting(self) -> list[Chat]:
        """Chats in the queue, front first (preempted ones, then arrivals)."""
        return [self.chats[r] for r in self.fair.order]

    @property
    def preempted(self) -> int:
        """Preemptions since the engine started (memory and fair-share swaps)."""
        return self.scheduler.num_preemptions

    # -- the caller's side --
    def submit(
        self,
        prompt: Sequence[int],
        max_new_tokens: int,
        temperature: float = 0.0,
        top_k: int | None = None,
        seed: int = 0,
        client: str = "local",
        poll_s: float = 0.5,
        label: str = "",
        top_p: float = 1.0,
        repetition_penalty: float = 1.0,
        no_repeat_ngram: int = 0,
    ) -> Stream:
        """Seat a chat now if a seat is idle, else queue it; QueueFull at once when every seat and the whole
        queue are taken, ClientBusy when `client` already has its share of the queue waiting. client: whose
        share it counts against; label: a second name cancel_client() also matches (e.g. "demo").
        repetition_penalty (over the last 64 ids) and no_repeat_ngram: transformer_ops.penalize, applied to each
        step's logits before sampling."""
        lim = self.limits
        max_len = lim.num_blocks * lim.block_size
        if not prompt or len(prompt) + max_new_tokens > max_len:
            raise ValueError(f"a chat must hold 1 to {max_len} tokens, prompt and answer together")
        with self._lock:
            for rid in [r for r in self.fair.order if self.chats[r].cancelled]:
                self._finish(self.chats[rid], "cancelled")  # a waiting chat holds no pages: it leaves now
            running, waiting = len(self.scheduler.running), len(self.fair)
            if running + waiting >= lim.seats + lim.queue:
                raise QueueFull(
                    f"all {lim.seats} seats and all {lim.queue} places in the queue are taken "
                    f"({running} chats running, {waiting} waiting)"
                )
            rng = np.random.default_rng(seed)
            seq = Chat(next(self._ids), client, list(prompt), max_new_tokens, temperature, top_k, rng, label=label)
            seq.top_p = top_p
            seq.repetition_penalty, seq.no_repeat_ngram = repetition_penalty, no_repeat_ngram
            self._arrive(seq)
            self._admit_now()  # an idle seat is taken now: a burst never waits for the next step
            cap = self.queue_share()
            mine = sum(self.chats[r].client == client for r in self.fair.order)
            if seq.state == "waiting" and mine > cap:
                self.scheduler.end(seq.rid, time.perf_counter())
                self._release(seq)
                raise ClientBusy(
                    f"every seat is taken and this client already has {mine - 1} chats waiting "
                    f"(at most {cap}, half the queue)"
                )
            self._ensure_thread()
            self._lock.notify()
        return Stream(self, seq, poll_s)

    def _arrive(self, seq: Chat) -> None:
        """Give the chat a request id, its columns and its prefix hashes, and queue it (lock held)."""
        rid = seq.rid = heapq.heappop(self._free_rids)
        r = self.requests
        r.arrival_s[rid], r.prompt[rid], r.max_tokens[rid] = seq.arrived_at, len(seq.prompt), seq.max_new_tokens
        r.computed[rid] = r.output[rid] = r.preemptions[rid] = 0
        r.first_token_s[rid] = r.finish_s[rid] = math.nan
        if self.limits.prefix_caching:
            self.store.manager.set_block_hashes(rid, prefix_hashes(seq.prompt, self.limits.block_size))
        seq.kv = PagedKV(self.store, rid)
        self.chats[rid] = seq
        self.scheduler.arrive(rid)

    def _release(self, seq: Chat) -> None:
        """The chat has left the scheduler: its request id is free again (lock held)."""
        del self.chats[seq.rid]
        self.store.manager.block_hashes.pop(seq.rid, None)
        heapq.heappush(self._free_rids, seq.rid)

    def _admit_now(self) -> None:
        """Waiting chats take idle seats between steps, in the scheduler's order (lock held)."""
        self.scheduler.admit_waiting(self.scheduler.budget)
        self._sync()

    def _sync(self) -> None:
        """Bring each chat's state in line with the scheduler after it admitted or preempted (lock held)."""
        computed, now = self.requests.computed, time.perf_counter()
        for rid in self.scheduler.running:
            seq = self.chats[rid]
            if seq.state == "waiting":  # admitted: its prefix-cache hit is what it found computed
                seq.state, seq.admitted_at = "prefill", now
                seq.prefix_hit_tokens = int(computed[rid])
                self.prefix_queries += len(seq.context)  # vLLM counts a request's tokens as queried
                self.prefix_hits += seq.prefix_hit_tokens
                self.stats.scheduled(seq, now)
        for rid in self.fair.order:
            seq = self.chats[rid]
            if seq.state != "waiting":  # preempted: back in the queue, to recompute from its context
                seq.state = "waiting"
                seq.preemptions = int(self.requests.preemptions[rid])

    def queue_share(self) -> int:
        """A client's chats waiting at most: limits.queue_per_client, else half the queue."""
        share = self.limits.queue_per_client
        return self.limits.queue // 2 if share is None else share

    def _client_chats(self, client: str) -> int:
        return sum(s.client == client and not s.cancelled for s in self.chats.values())

    def client_chats(self, client: str) -> int:
        """Chats of `client` running or waiting now (not those cancelled and about to leave)."""
        with self._lock:
            return self._client_chats(client)

    def cancel_client(self, client: str) -> None:
        """Cancel every chat of `client`, or labelled `client` (running or waiting)."""
        with self._lock:
            for seq in self.chats.values():
                if client in (seq.client, seq.label):
                    seq.cancelled = True
            self._lock.notify()

    def cancel(self, seq: Chat) -> None:
        """The caller left: the loop drops the sequence (and frees its pages) before its next step."""
        with self._lock:
            seq.cancelled = True
            self._lock.notify()

    def generate(self, prompt: Sequence[int], max_new_tokens: int) -> list[int]:
        """Blocking convenience: the ids the engine writes for one prompt, greedily (stop token excluded)."""
        stream = self.submit(prompt, max_new_tokens, client=f"generate-{id(prompt)}")
        return [t for t in stream if t is not None]

    def close(self) -> None:
        with self._lock:
            self._stop = True
            self._lock.notify()
        if self._thread:
            self._thread.join(timeout=5)

    # -- the loop's side --
    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="inside-llm-engine", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._stop and not self.chats:
                    self._lock.wait()
                if self._stop:
                    return
            try:
                self.step()
            except Exception as exc:  # a broken model ends every chat with nothing more, never hangs them
                with self._lock:
                    for seq in list(self.chats.values()):
                        self._finish(seq, "error")
                    self.store.pool.reset_prefix_cache()  # the failed step's pages may be half written
                self.last_error = f"{type(exc).__name__}: {exc}"

    def _finish(self, seq: Chat, reason: str) -> None:
        """The chat ends: out of the scheduler (seat and pages, or its place in the queue), its stream ended
        (lock held). A chat that reached its max_tokens has left the scheduler in finish_step already."""
        rid = seq.rid
        if rid in self.scheduler.seat_of or rid in self.fair:
            self.scheduler.end(rid, time.perf_counter())
        self._release(seq)
        seq.kv = None
        seq.state, seq.finish_reason = "done", reason
        seq.tokens.put(None)
        self.finished += 1
        self.stats.finished(seq, reason, time.perf_counter())

    def step(self) -> int:
        """One pass of the loop: drop the cancelled, the scheduler's plan, one forward pass, finish_step, hand out
        tokens. Returns how many tokens this step wrote."""
        with self._lock:
            for seq in [s for s in self.chats.values() if s.cancelled]:
                self._finish(seq, "cancelled")
            now = time.perf_counter()
            plan = self.scheduler.schedule(now)
            self._sync()
            if plan is None:
                return 0
            batch, chats = [], []
            for rid, n, computed in zip(plan.ids.tolist(), plan.n.tolist(), plan.computed.tolist()):
                seq = self.chats[rid]
                seq.kv.num_tokens = computed  # the position of its first new token
                batch.append((seq.kv, seq.context[computed : computed + n]))
                chats.append(seq)
        runner = getattr(self.model, "served_form", self.model)  # SmolLM2: its int8 form (sim/model/smollm.py)
        with TURNS.step():  # model work outside the engine (model_work.py) runs between steps, never during one
            logits = runner.step(batch)  # [B, V]: the one forward pass
        written, t = 0, time.perf_counter()
        with self._lock:
            manager = self.store.manager
            ends = (plan.computed + plan.n).tolist()
            sampled = (plan.n >= plan.remaining).tolist()  # the chats whose context is all computed now
            tokens: list[int | None] = []
            for seq, row, end, last in zip(chats, logits, ends, sampled, strict=True):
                manager.cache_full_blocks(seq.rid, end)  # its pages written in this pass may now be found
                if not last:
                    tokens.append(None)
                    seq.state = "prefill"  # more of the prompt to read
                    continue
                seq.state = "decode"
                if seq.repetition_penalty != 1.0 or seq.no_repeat_ngram:
                    row = penalize(row, seq.context, seq.repetition_penalty, 64, seq.no_repeat_ngram)
                token = int(sample(row, seq.temperature, seq.top_k, seq.rng, seq.top_p))
                tokens.append(token)
                written += 1
                self.stats.token(seq, t)
            self.scheduler.finish_step(plan, tokens, t)  # those at max_tokens leave their seats here
            for seq, token in zip(chats, tokens, strict=True):
                if token is None:
                    continue
                if token in self.stop_ids:
                    self._finish(seq, "stop")
                    continue
                seq.out.append(token)
                seq.tokens.put(token)
                if len(seq.out) >= seq.max_new_tokens or seq.cancelled:
                    self._finish(seq, "cancelled" if seq.cancelled else "length")
            log = self.scheduler.steps  # the live engine keeps no step log: a server runs for weeks
            log.records.clear()
            del log.durations[:]
            self.steps += 1
            self.tokens_written += written
            now = time.perf_counter()
            self._recent.append((now, written))
            while self._recent and now - self._recent[0][0] > self.limits.rate_window_s:
                self._recent.popleft()
        return written

    # -- what /api/engine shows --
    def snapshot(self) -> dict:
        """Seats, queue, pages and throughput now, and each chat's progress (never its text): an EngineSnapshot,
        as plain data."""
        with self._lock:
            now = time.perf_counter()
            recent = [n for t, n in self._recent if now - t <= self.limits.rate_window_s]
            pool, manager, computed = self.store.pool, self.store.manager, self.requests.computed

            def row(seq: Chat) -> ChatProgress:
                seated = seq.state != "waiting"
                table = manager.block_table(seq.rid) if seated else []
                return ChatProgress(
                    id=seq.seq_id,
                    state=seq.state,
                    prompt_tokens=len(seq.prompt),
                    written_tokens=len(seq.out),
                    max_tokens=seq.max_new_tokens,
                    cached_tokens=int(computed[seq.rid]) if seated else 0,
                    pages=len(table),
                    page_ids=table,
                    preemptions=seq.preemptions,
                    prefix_hit_tokens=seq.prefix_hit_tokens,
                )

            return as_json(
                EngineSnapshot(
                    model=self.model.name,
                    seats=self.limits.seats,
                    seats_in_use=len(self.scheduler.running),
                    queue_limit=self.limits.queue,
                    queued=len(self.fair),
                    queue_per_client=self.queue_share(),
                    worker=os.getpid(),
                    workers=workers(),
                    pages=pool.num_blocks,
                    pages_in_use=pool.num_used_blocks,
                    page_tokens=self.limits.block_size,
                    prefix_caching=self.limits.prefix_caching,
                    bytes_per_token=self.store.bytes_per_token,
                    tokens_per_s=round(sum(recent) / self.limits.rate_window_s, 2),
                    rate_window_s=self.limits.rate_window_s,
                    steps=self.steps,
                    tokens_written=self.tokens_written,
                    finished=self.finished,
                    preempted=self.preempted,
                    prefix_cache_queries=self.prefix_queries,
                    prefix_cache_hits=self.prefix_hits,
                    prefix_cache_hit_rate=round(self.prefix_hits / self.prefix_queries, 4)
                    if self.prefix_queries
                    else 0.0,
                    cached_pages=pool.num_cached_blocks,
                    prefix_cache_evictions=pool.num_evictions,
                    sequences=[row(s) for s in self.running] + [row(s) for s in self.waiting],
                )
            )


@dataclass(frozen=True)
class ChatProgress:
    """One chat's progress in the engine (never its text)."""

    id: int = about("the chat's number in this engine (no unit)")
    state: Literal["waiting", "prefill", "decode", "done"] = about(
        "waiting in the queue, reading its prompt (prefill), writing (decode)"
    )
    prompt_tokens: int = about("tokens of its prompt, the chat template included (tokens)")
    written_tokens: int = about("tokens written so far (tokens)")
    max_tokens: int = about("most tokens it may write (tokens)")
    cached_tokens: int = about("tokens whose keys and values are in its pages now (tokens)")
    pages: int = about("pages of the pool it holds (pages)")
    page_ids: list[int] = about(
        "which pages of the pool it holds, in the order of its tokens "
        "(its block table: physical page numbers, 0 to pages - 1; a page found in the prefix cache is in "
        "several chats' tables)"
    )
    preemptions: int = about("times it gave its pages back and was recomputed (no unit)")
    prefix_hit_tokens: int = about(
        "tokens of its prompt found in the prefix cache when it was (last) seated: their pages are shared with an "
        "earlier chat's and were not computed again (tokens)"
    )


@dataclass(frozen=True)
class EngineSnapshot:
    """The engine now: seats, queue, pages, throughput, and every chat's progress."""

    model: str = about("the model this engine serves")
    seats: int = about("chats one step can serve (sequences)")
    seats_in_use: int = about("chats running now (sequences)")
    queue_limit: int = about("chats that may wait; more get a 429 (requests)")
    queued: int = about("chats waiting now (requests)")
    queue_per_client: int = about("chats one client may have waiting; running ones are not capped (requests)")
    worker: int = about(
        "process id of the server worker that answered: with `inside-llm serve --workers N` each worker runs its "
        "own engine, and a connection is answered by one of them (no unit)"
    )
    workers: int = about(
        "worker processes of this server, each with its own engine; to read every one, ask again on a new "
        "connection until this many distinct `worker` values have answered (processes)"
    )
    pages: int = about("pages in the key/value pool (pages)")
    pages_in_use: int = about("pages held by running chats (pages)")
    page_tokens: int = about("token slots per page (tokens)")
    prefix_caching: bool = about(
        "whether chats share the pages of equal prompt prefixes (vLLM's enable_prefix_caching)"
    )
    bytes_per_token: int = about("keys and values of one token, every layer, float32 (bytes)")
    tokens_per_s: float = about("tokens written per second over the last rate_window_s (tokens/s)")
    rate_window_s: float = about("window of tokens_per_s (s)")
    steps: int = about("forward passes since the engine started (no unit)")
    tokens_written: int = about("tokens written since the engine started (tokens)")
    finished: int = about("chats ended since the engine started (requests)")
    preempted: int = about("preemptions since the engine started (no unit)")
    prefix_cache_queries: int = about(
        "tokens of every chat seated since the engine started, looked up in the prefix cache (vLLM's "
        "prefix_cache_queries; tokens)"
    )
    prefix_cache_hits: int = about(
        "of those, tokens found cached: pages another chat computed, shared instead of computed (tokens)"
    )
    prefix_cache_hit_rate: float = about("prefix_cache_hits / prefix_cache_queries (0 before any; no unit)")
    cached_pages: int = about("pages registered in the prefix cache now, in use or free and evictable (pages)")
    prefix_cache_evictions: int = about("cached pages handed out again, their hash dropped (no unit)")
    sequences: list[ChatProgress] = about("running chats, then waiting ones; never their text")


# ---- one engine per served model, per process -------------------------------------------------------

_engines: dict[int, Engine] = {}
_engines_lock = threading.Lock()


def _served_as(model: DemoModel) -> tuple:
    """What a model is served as: a reloaded model (a new object of the same kind and name) replaces the old."""
    return type(model), getattr(model, "name", None)


def engine_for(model: DemoModel, limits: EngineLimits = EngineLimits()) -> Engine:
    """The process's engine for `model` (made on first use; its loop thread starts with the first chat).

    A new object for a model already served (the model was reloaded) gets a new engine that replaces the old
    one in engines(), so /metrics lists each served model once; the old engine, once idle, is closed."""
    replaced: list[Engine] = []
    with _engines_lock:
        eng = _engines.get(id(model))
        if eng is None or eng.model is not model:
            for key, old in list(_engines.items()):
                if _served_as(old.model) == _served_as(model):
                    replaced.append(_engines.pop(key))
            eng = _engines[id(model)] = Engine(model, limits)
    for old in replaced:
        snap = old.snapshot()
        if not snap["seats_in_use"] and not snap["queued"]:
            old.close()  # else its chats finish on its own thread (it is no longer listed)
    return eng


def workers() -> int:
    """Worker processes of this server (`inside-llm serve --workers N` says so in INSIDE_LLM_WORKERS), else 1."""
    try:
        return max(1, int(os.environ.get("INSIDE_LLM_WORKERS", "1")))
    except ValueError:
        return 1


def engines() -> list[Engine]:
    with _engines_lock:
        return list(_engines.values())
