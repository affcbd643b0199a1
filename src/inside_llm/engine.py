"""The tour's own serving engine: one loop owns a model and serves every visitor's chat by continuous batching.

Chapter 7 teaches continuous batching and chapter 6 PagedAttention; this is both, running on this server:
- Admission: a chat takes an idle seat at once (in `submit`, not at the next step); when every seat is taken
  it waits in a bounded queue. Only when every seat AND every place in the queue are taken is it refused
  (`QueueFull`: the API answers 429 with Retry-After); so is a client that already has half the queue waiting
  (`ClientBusy`), so that one address (a classroom behind one NAT) may use every idle seat yet never shut the
  others out of the queue.
- Fair share: when a seat frees, the waiting chat whose client has the fewest chats running takes it
  (arrival breaks ties). When every seat is taken and a waiting client has at least 2 chats fewer running than
  the client with the most, the loop preempts that client's most recently admitted chat (recompute
  preemption, below) and seats the waiting one: a lone visitor never waits for one client's whole batch.
- Each step of the loop is ONE forward pass (`DemoModel.step`) over every running sequence: one new token
  for a sequence that is decoding, a piece of the prompt (up to `prefill_chunk` tokens) for one that is
  still being read. Every weight read serves all of them, which is why decode batches well: a step that
  serves eight chats costs little more than one that serves a single chat.
- A sequence that finishes (its stop token or its token limit) or whose client left frees its seat and its
  pages at once, and a waiting request takes them at the next step: continuous batching.
- Keys and values live in fixed-size pages of one pool (`PagedKV`): the block pool and the per-sequence block
  tables are `sim/serve/kv.py`'s `BlockPool` and `KVCacheManager`, the very classes chapter 6 simulates with.
  A request is admitted only when the pool has pages for its first prompt piece; when a running sequence
  needs a page and none is free, the most recently arrived sequence after it is preempted: its pages are
  freed and it goes back to the head of the queue, to be recomputed from its prompt and the tokens it has
  already written (vLLM's recompute preemption, first come first served). Its stream just pauses.
- `snapshot()` is what /api/engine shows: seats, queue, pages, tokens/s over the last seconds, and each
  sequence's progress, never its text (other visitors' questions must not leak).

Batching never changes an answer: each sequence's tokens depend only on its own prompt (a test checks every
sequence of a batch against the same prompt run alone, token for token).
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from .metrics import EngineStats
from .model_work import TURNS
from .sim.core.result import about, as_json
from .sim.model.transformer import DemoModel, sample
from .sim.model.transformer_ops import penalize
from .sim.serve.kv import BlockPool, KVCacheManager, num_blocks_for


class QueueFull(Exception):
    """The waiting queue holds its limit of requests: come back later."""


class ClientBusy(Exception):
    """This client already has its share of chats running or waiting."""


class OutOfPages(Exception):
    """The pool has no free page for a sequence's next tokens."""


# ---- keys and values in pages --------------------------------------------------------------------


class PagedKVStore:
    """The physical pages of every sequence's keys and values, and the bookkeeping of who holds which.

    k[layer], v[layer]: [num_blocks, Hkv, block_size, hd] float32; page b holds block_size consecutive
    positions of one sequence. np.zeros maps memory lazily, so untouched pages cost no RAM.
    """

    def __init__(self, model: DemoModel, num_blocks: int, block_size: int):
        c = model.config
        shape = (num_blocks, c.n_kv_heads, block_size, c.head_dim)
        self.k = [np.zeros(shape, np.float32) for _ in range(c.n_layers)]
        self.v = [np.zeros(shape, np.float32) for _ in range(c.n_layers)]
        self.block_size = block_size
        self.pool = BlockPool(num_blocks)
        self.manager = KVCacheManager(self.pool, block_size)
        self.bytes_per_token = 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4  # K and V, every layer, float32


class PagedKV:
    """One sequence's keys and values: its block table in a PagedKVStore. Same interface as KVCache."""

    def __init__(self, store: PagedKVStore, seq_id: int):
        self.store, self.seq_id, self.num_tokens = store, seq_id, 0

    def reserve(self, num_tokens: int) -> None:
        """Pages for num_tokens positions; OutOfPages (allocating nothing) if the pool has too few."""
        if self.store.manager.allocate(self.seq_id, num_tokens) is None:
            raise OutOfPages(f"sequence {self.seq_id} needs pages for {num_tokens} tokens")

    def release(self) -> int:
        """Give every page back to the pool; returns how many."""
        self.num_tokens = 0
        return self.store.manager.free(self.seq_id)

    def _slots(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """(page id, slot in page) of positions start..end-1."""
        table = np.asarray(self.store.manager.block_table(self.seq_id))
        pos = np.arange(start, end)
        return table[pos // self.store.block_size], pos % self.store.block_size

    def write(self, layer: int, start: int, k: np.ndarray, v: np.ndarray) -> None:
        """Scatter k, v [Hkv, T, hd] into the pages that hold positions start..start+T-1."""
        pages, slots = self._slots(start, start + k.shape[1])
        self.store.k[layer][pages, :, slots] = k.transpose(1, 0, 2)  # [T, Hkv, hd] at (page, slot)
        self.store.v[layer][pages, :, slots] = v.transpose(1, 0, 2)

    def pages(self, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(k, v [num_blocks, Hkv, block_size, hd] of every page, this sequence's page table, block_size): the
        served model's attention reads its keys in place (sim/model/q8.attend_one) instead of a gathered copy."""
        table = np.asarray(self.store.manager.block_table(self.seq_id), np.int64)
        return self.store.k[layer], self.store.v[layer], table, self.store.block_size

    def read(self, layer: int, lo: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """Gather keys and values [Hkv, end-lo, hd] of positions lo..end-1 from this sequence's pages."""
        bs = self.store.block_size
        table = self.store.manager.block_table(self.seq_id)[lo // bs : num_blocks_for(end, bs)]
        first = (lo // bs) * bs

        def gather(pages: np.ndarray) -> np.ndarray:
            g = pages[table]  # [n, Hkv, bs, hd]
            g = g.transpose(1, 0, 2, 3).reshape(g.shape[1], -1, g.shape[3])  # [Hkv, n*bs, hd]
            return g[:, lo - first : end - first]

        return gather(self.store.k[layer]), gather(self.store.v[layer])


# ---- requests ------------------------------------------------------------------------------------


@dataclass(eq=False)
class Chat:
    """One chat in the engine. prompt: the ids it reads; out: the ids it has written so far."""

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
    fed: int = 0  # ids of context already in the cache (the next one to feed is context[fed])
    state: str = "waiting"  # waiting, prefill, decode, done
    finish_reason: str = ""  # once done: stop (its stop token), length, cancelled or error
    cancelled: bool = False
    preemptions: int = 0
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
    decides who runs when others wait); prefill_chunk: prompt ids one sequence feeds per step;
    step_tokens: ids one step feeds in all (a new prompt cannot stall the chats that are decoding)."""

    seats: int = 8
    queue: int = 16
    queue_per_client: int | None = None
    num_blocks: int = 256
    block_size: int = 16
    prefill_chunk: int = 32
    step_tokens: int = 96
    rate_window_s: float = 5.0


class Engine:
    """One model, one loop thread, many chats. submit() hands back a Stream; the loop does the rest."""

    def __init__(self, model: DemoModel, limits: EngineLimits = EngineLimits(), stop_ids: Sequence[int] = ()):
        self.model, self.limits = model, limits
        self.stop_ids = frozenset(stop_ids) | getattr(model, "stop_ids", frozenset())
        self.store = PagedKVStore(model, limits.num_blocks, limits.block_size)
        self.waiting: deque[Chat] = deque()
        self.running: list[Chat] = []
        self._ids = itertools.count(1)
        self._lock = threading.Condition()
        self._recent: deque[tuple[float, int]] = deque()  # (time, tokens written) per step, for tokens/s
        self.steps = 0
        self.tokens_written = 0
        self.finished = 0
        self.preempted = 0
        self.stats = EngineStats()  # counters and latency histograms for /metrics (metrics.py)
        self.last_error: str | None = None
        self._thread: threading.Thread | None = None
        self._stop = False

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
            if len(self.running) + len(self.waiting) >= lim.seats + lim.queue:
                raise QueueFull(
                    f"all {lim.seats} seats and all {lim.queue} places in the queue are taken "
                    f"({len(self.running)} chats running, {len(self.waiting)} waiting)"
                )
            rng = np.random.default_rng(seed)
            seq = Chat(next(self._ids), client, list(prompt), max_new_tokens, temperature, top_k, rng, label=label)
            seq.top_p = top_p
            seq.repetition_penalty, seq.no_repeat_ngram = repetition_penalty, no_repeat_ngram
            self.waiting.append(seq)
            self._admit(preempt=False)  # an idle seat is taken now: a burst never waits for the next step
            cap = self.queue_share()
            mine = sum(s.client == client for s in self.waiting)
            if seq in self.waiting and mine > cap:
                self.waiting.remove(seq)
                raise ClientBusy(
                    f"every seat is taken and this client already has {mine - 1} chats waiting "
                    f"(at most {cap}, half the queue)"
                )
            self._ensure_thread()
            self._lock.notify()
        return Stream(self, seq, poll_s)

    def queue_share(self) -> int:
        """A client's chats waiting at most: limits.queue_per_client, else half the queue."""
        share = self.limits.queue_per_client
        return self.limits.queue // 2 if share is None else share

    def _client_chats(self, client: str) -> int:
        return sum(s.client == client and not s.cancelled for s in itertools.chain(self.waiting, self.running))

    def client_chats(self, client: str) -> int:
        """Chats of `client` running or waiting now (not those cancelled and about to leave)."""
        with self._lock:
            return self._client_chats(client)

    def cancel_client(self, client: str) -> None:
        """Cancel every chat of `client`, or labelled `client` (running or waiting)."""
        with self._lock:
            for seq in itertools.chain(self.waiting, self.running):
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
                while not self._stop and not self.waiting and not self.running:
                    self._lock.wait()
                if self._stop:
                    return
            try:
                self.step()
            except Exception as exc:  # a broken model ends every chat with nothing more, never hangs them
                with self._lock:
                    for seq in list(self.running) + list(self.waiting):
                        self._finish(seq, "error")
                    self.waiting.clear()
                self.last_error = f"{type(exc).__name__}: {exc}"

    def _finish(self, seq: Chat, reason: str) -> None:
        """Free the sequence's seat and pages and end its stream (lock held)."""
        if seq.kv is not None:
            seq.kv.release()
            seq.kv = None
        if seq in self.running:
            self.running.remove(seq)
        seq.state, seq.finish_reason = "done", reason
        seq.tokens.put(None)
        self.finished += 1
        self.stats.finished(seq, reason, time.perf_counter())

    def _preempt(self, seq: Chat) -> None:
        """Free a running sequence's pages and put it back at the head of the queue (lock held)."""
        seq.kv.release()
        seq.kv, seq.fed, seq.state = None, 0, "waiting"
        seq.preemptions += 1
        self.preempted += 1
        self.running.remove(seq)
        self.waiting.appendleft(seq)

    def _admit(self, preempt: bool = True) -> None:
        """Waiting sequences take free seats, fair share first, while the pool has pages for their first piece
        (lock held). The next is the waiting chat whose client has the fewest chats running (then the oldest:
        a preempted chat keeps its place). preempt (the loop's own call only: submit() runs beside a forward
        pass and must not take pages from it): with every seat taken, a waiting client 2 or more chats behind
        the busiest one gets that client's most recently admitted seat (recompute preemption)."""
        lim = self.limits
        for seq in [s for s in self.waiting if s.cancelled]:
            self.waiting.remove(seq)
            self._finish(seq, "cancelled")
        while self.waiting:
            counts: dict[str, int] = {}
            for s in self.running:
                counts[s.client] = counts.get(s.client, 0) + 1
            seq = min(self.waiting, key=lambda s: (counts.get(s.client, 0), s.seq_id))
            free = self.store.pool.num_free_blocks
            if len(self.running) >= lim.seats:
                if not preempt or not counts:
                    return
                busiest = max(counts, key=lambda c: (counts[c], c))
                if counts[busiest] < counts.get(seq.client, 0) + 2:
                    return
                victim = max((s for s in self.running if s.client == busiest), key=lambda s: s.admitted_at)
                free += len(self.store.manager.block_table(victim.seq_id)) if victim.kv else 0
            first = min(len(seq.context), lim.prefill_chunk) + 1
            if num_blocks_for(first, lim.block_size) > free:
                return
            if len(self.running) >= lim.seats:
                self._preempt(victim)
            self.waiting.remove(seq)
            seq.kv, seq.fed, seq.state = PagedKV(self.store, seq.seq_id), 0, "prefill"
            seq.admitted_at = time.perf_counter()
            self.stats.scheduled(seq, seq.admitted_at)
            self.running.append(seq)

    def _plan(self) -> list[tuple[Chat, list[int]]]:
        """Each running sequence's ids for this step, with pages reserved for them (lock held).

        Decoding sequences first (one id each), then prompt pieces within the step's budget. Priority is
        arrival: a sequence that cannot get a page preempts the most recently arrived of the running ones
        that came after it; if none did, it waits for this step. So the oldest chat always moves on (the pool
        holds any one chat whole: submit() checks), every chat ends, and none thrash.
        """
        lim, plan = self.limits, []
        budget = lim.step_tokens
        for seq in sorted(self.running, key=lambda s: (s.state != "decode", s.seq_id)):
            if seq.kv is None:
                continue  # preempted earlier in this plan
            if seq.state == "prefill" and budget <= 0:
                continue  # this step is full; its prompt goes on at the next one
            ctx = seq.context
            todo = ctx[seq.fed : seq.fed + min(lim.prefill_chunk, budget)] if seq.state == "prefill" else ctx[seq.fed :]
            while todo:
                try:
                    seq.kv.reserve(seq.fed + len(todo))
                    break
                except OutOfPages:
                    younger = [s for s in self.running if s.seq_id > seq.seq_id and s.kv is not None]
                    if not younger:
                        todo = []  # an older chat holds the pages: wait for it
                        break
                    victim = max(younger, key=lambda s: s.seq_id)
                    self._preempt(victim)
                    plan = [(s, ids) for s, ids in plan if s is not victim]
            if todo:
                plan.append((seq, todo))
                budget -= len(todo)
        return plan

    def step(self) -> int:
        """One pass of the loop: drop the cancelled, admit, plan, one forward pass, hand out tokens.
        Returns how many tokens this step wrote."""
        with self._lock:
            for seq in [s for s in self.running if s.cancelled]:
                self._finish(seq, "cancelled")
            self._admit()
            plan = self._plan()
        if not plan:
            return 0
        runner = getattr(self.model, "served_form", self.model)  # SmolLM2: its int8 form (sim/model/smollm.py)
        with TURNS.step():  # model work outside the engine (model_work.py) runs between steps, never during one
            logits = runner.step([(seq.kv, ids) for seq, ids in plan])  # [B, V]: the one forward pass
        written, t = 0, time.perf_counter()
        with self._lock:
            for (seq, ids), row in zip(plan, logits, strict=True):
                seq.fed += len(ids)
                if seq.fed < len(seq.context):
                    continue  # more of the prompt to read
                seq.state = "decode"
                if seq.repetition_penalty != 1.0 or seq.no_repeat_ngram:
                    row = penalize(row, seq.context, seq.repetition_penalty, 64, seq.no_repeat_ngram)
                token = int(sample(row, seq.temperature, seq.top_k, seq.rng, seq.top_p))
                written += 1
                self.stats.token(seq, t)
                if token in self.stop_ids:
                    self._finish(seq, "stop")
                    continue
                seq.out.append(token)
                seq.tokens.put(token)
                if len(seq.out) >= seq.max_new_tokens or seq.cancelled:
                    self._finish(seq, "cancelled" if seq.cancelled else "length")
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
            pool = self.store.pool

            def row(seq: Chat) -> ChatProgress:
                table = list(self.store.manager.block_table(seq.seq_id)) if seq.kv else []
                return ChatProgress(
                    id=seq.seq_id,
                    state=seq.state,
                    prompt_tokens=len(seq.prompt),
                    written_tokens=len(seq.out),
                    max_tokens=seq.max_new_tokens,
                    cached_tokens=seq.kv.num_tokens if seq.kv else 0,
                    pages=len(table),
                    page_ids=table,
                    preemptions=seq.preemptions,
                )

            return as_json(
                EngineSnapshot(
                    model=self.model.name,
                    seats=self.limits.seats,
                    seats_in_use=len(self.running),
                    queue_limit=self.limits.queue,
                    queued=len(self.waiting),
                    queue_per_client=self.queue_share(),
                    worker=os.getpid(),
                    workers=workers(),
                    pages=pool.num_blocks,
                    pages_in_use=pool.num_used_blocks,
                    page_tokens=self.limits.block_size,
                    bytes_per_token=self.store.bytes_per_token,
                    tokens_per_s=round(sum(recent) / self.limits.rate_window_s, 2),
                    rate_window_s=self.limits.rate_window_s,
                    steps=self.steps,
                    tokens_written=self.tokens_written,
                    finished=self.finished,
                    preempted=self.preempted,
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
        "(its block table: physical page numbers, 0 to pages - 1)"
    )
    preemptions: int = about("times it gave its pages back and was recomputed (no unit)")


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
    bytes_per_token: int = about("keys and values of one token, every layer, float32 (bytes)")
    tokens_per_s: float = about("tokens written per second over the last rate_window_s (tokens/s)")
    rate_window_s: float = about("window of tokens_per_s (s)")
    steps: int = about("forward passes since the engine started (no unit)")
    tokens_written: int = about("tokens written since the engine started (tokens)")
    finished: int = about("chats ended since the engine started (requests)")
    preempted: int = about("preemptions since the engine started (no unit)")
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
