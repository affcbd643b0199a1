"""Model work: the one bounded place where the served model runs outside the engine, taking turns with its steps.

Chapters 2, 3 and 9 and the /measured panels run forward passes (and wall-clock measurements) of the same
model that serves every chat. Run freely in request threads, 16 visitors on those chapters took a chat from
49 to 2.5 tokens/s (two cores, one GIL). So every such job goes through `WORK`:
- One worker thread runs the jobs, one at a time, oldest first, from a bounded queue: with `max_waiting`
  jobs already waiting, a new one is refused at once (`Busy`: the API answers 429 with Retry-After and a
  sentence saying why).
- Jobs take turns with the engine's decode steps (`Turns`): the engine wraps each forward pass in
  `TURNS.step()`, so a job never runs during a step; and after a job of t seconds, while chats are decoding,
  the engine gets `engine_share` x t seconds of steps before the next job starts. Under any load of model
  work a decoding chat therefore keeps about engine_share / (1 + engine_share) of its speed (2/3 by default).
- Callers on the event loop `await` the job (an asyncio future; no thread waits on a lock), and a job that
  every waiter has left before it started is dropped, not run.
- Results are kept per key in the caller's `Kept` (a bounded LRU), and requests for the same key while its job
  is queued or running share that one job.
Sync callers (the facts endpoints, the offline export) use `call`: the same queue, the same bound.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


class Busy(Exception):
    """Too much of some expensive work is already waiting: come back in retry_after_s seconds. str() is a
    sentence for the visitor."""

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message)
        self.message, self.retry_after_s = message, retry_after_s


class Slots:
    """At most `n` of one kind of work at once; the next one is refused at once (Busy), never queued.
    what: the work in words, after a count ("long texts are being tokenized")."""

    def __init__(self, n: int, what: str, retry_after_s: int = 2):
        self.n, self.what, self.retry_after_s = n, what, retry_after_s
        self._used = 0
        self._lock = threading.Lock()

    @contextmanager
    def take(self) -> Iterator[None]:
        with self._lock:
            if self._used >= self.n:
                raise Busy(
                    f"{self._used} {self.what} now (at most {self.n} at once). Try again in {self.retry_after_s} s.",
                    self.retry_after_s,
                )
            self._used += 1
        try:
            yield
        finally:
            with self._lock:
                self._used -= 1


class Turns:
    """Turn-taking between the engine's forward passes (step) and model jobs (job).

    A step waits while a job runs; a job waits while a step runs, and while the engine is owed time: each
    job of t seconds owes the engine engine_share x t seconds of steps, paid by the steps that follow. Once
    it is paid, a waiting job goes before the next step. The debt is forgotten when no step has run or
    waited for idle_s (no chat is decoding). One worker runs the jobs, so one job at most asks at a time."""

    def __init__(self, engine_share: float = 2.0, idle_s: float = 0.05):
        self.engine_share, self.idle_s = engine_share, idle_s
        self._cond = threading.Condition()
        self._in_step = self._in_job = False
        self._asking, self._job_asking = 0, False
        self._owed = 0.0
        self._last_step = -math.inf
        self.steps = self.jobs = 0
        self.job_s = self.waited_s = 0.0

    @contextmanager
    def step(self) -> Iterator[None]:
        """The engine's side: around one forward pass of its batch."""
        with self._cond:
            self._asking += 1  # a step waiting for a job to end: the engine is busy, not idle
            while self._in_job or (self._job_asking and self._owed <= 0):  # a job whose turn it is goes first
                self._cond.wait()
            self._asking -= 1
            self._in_step = True
        t0 = time.perf_counter()
        try:
            yield
        finally:
            now = time.perf_counter()
            with self._cond:
                self._in_step = False
                self._owed = max(0.0, self._owed - (now - t0))
                self._last_step, self.steps = now, self.steps + 1
                self._cond.notify_all()

    def _engine_waits(self, now: float) -> bool:
        busy = self._asking or now - self._last_step < self.idle_s  # chats are decoding
        return self._in_step or (self._owed > 0 and busy)

    @contextmanager
    def job(self) -> Iterator[None]:
        """A model job's side: waits for its turn, runs, then owes the engine its share."""
        t_ask = time.perf_counter()
        with self._cond:
            self._job_asking = True
            while self._engine_waits(time.perf_counter()):
                self._cond.wait(timeout=self.idle_s)
            self._job_asking, self._in_job, self._owed = False, True, 0.0  # paid, or no chat is decoding
        t0 = time.perf_counter()
        try:
            yield
        finally:
            t = time.perf_counter() - t0
            with self._cond:
                self._in_job = False
                self._owed = self.engine_share * t
                self.jobs, self.job_s, self.waited_s = self.jobs + 1, self.job_s + t, self.waited_s + t0 - t_ask
                self._cond.notify_all()


TURNS = Turns()


class Kept:
    """A caller's finished results by key, the `keep` most recently used (an LRU)."""

    def __init__(self, keep: int):
        self.keep = keep
        self._d: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            if key not in self._d:
                return default
            self._d.move_to_end(key)
            return self._d[key]

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.keep:
                self._d.popitem(last=False)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._d

    def clear(self) -> None:
        with self._lock:
            self._d.clear()


_MISSING = object()


@dataclass(eq=False)
class Job:
    key: Hashable
    fn: Callable[[], Any]
    kept: Kept | None
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    waiters: int = 0
    started: bool = False


class ModelWork:
    """The bounded queue of model jobs and the one worker thread that runs them in turns with the engine."""

    def __init__(self, turns: Turns = TURNS, max_waiting: int = 4):
        self.turns, self.max_waiting = turns, max_waiting
        self._lock = threading.Condition()
        self._queue: deque[Job] = deque()
        self._jobs: dict[Hashable, Job] = {}  # queued or running, by key
        self._thread: threading.Thread | None = None
        self._recent: deque[float] = deque(maxlen=16)  # seconds of the last jobs, for Retry-After
        self.done = self.refused = self.dropped = 0

    # -- the callers' side --
    def _join(self, key: Hashable, fn: Callable[[], Any], kept: Kept | None) -> Job:
        """The job for key (a new one, or the one queued or running), with one more waiter; Busy when full."""
        with self._lock:
            job = self._jobs.get(key)
            if job is None:
                if len(self._queue) >= self.max_waiting:
                    self.refused += 1
                    wait = self.retry_after_s()
                    raise Busy(
                        f"the model on this server is busy: {len(self._queue)} pieces of model work are already "
                        f"waiting beside the chats (at most {self.max_waiting}). Try again in {wait} s.",
                        wait,
                    )
                job = self._jobs[key] = Job(key, fn, kept)
                self._queue.append(job)
                self._ensure_thread()
                self._lock.notify()
            job.waiters += 1
            return job

    def _leave(self, job: Job) -> None:
        """A waiter left: a job nobody waits for any more is dropped if it has not started."""
        with self._lock:
            job.waiters -= 1
            if job.waiters == 0 and not job.started and job in self._queue:
                self._queue.remove(job)
                self._jobs.pop(job.key, None)
                job.future.cancel()
                self.dropped += 1

    async def run(self, key: Hashable, fn: Callable[[], Any], kept: Kept | None = None, receive=None) -> Any:
        """fn()'s result (kept[key] when there), computed as a model job; await it on the event loop.

        receive: the request's ASGI receive; when it says the client has left, the wait ends with ClientGone
        and the job is dropped if no one else waits for it."""
        if kept is not None and (hit := kept.get(key, _MISSING)) is not _MISSING:
            return hit
        job = self._join(key, fn, kept)
        fut = asyncio.wrap_future(job.future)
        watch = asyncio.ensure_future(_disconnect(receive)) if receive is not None else None
        try:
            if watch is None:
                return await asyncio.shield(fut)
            await asyncio.wait({fut, watch}, return_when=asyncio.FIRST_COMPLETED)
            if fut.done():
                return fut.result()
            raise ClientGone()
        finally:
            if watch is not None:
                watch.cancel()
            if not job.future.done():
                self._leave(job)
            else:
                with self._lock:
                    job.waiters -= 1

    def call(self, key: Hashable, fn: Callable[[], Any], kept: Kept | None = None) -> Any:
        """fn()'s result as a model job, for a caller that is not on the event loop (it blocks its thread)."""
        if kept is not None and (hit := kept.get(key, _MISSING)) is not _MISSING:
            return hit
        if threading.current_thread() is self._thread:  # a job that needs another one: run it in this turn
            result = fn()
            if kept is not None:
                kept.put(key, result)
            return result
        job = self._join(key, fn, kept)
        try:
            return job.future.result()
        finally:
            with self._lock:
                job.waiters -= 1

    def retry_after_s(self) -> int:
        """Seconds until the queue has probably moved on: the waiting jobs at the recent mean, 1 to 30."""
        mean = sum(self._recent) / len(self._recent) if self._recent else 1.0
        return max(1, min(30, math.ceil(mean * (len(self._queue) + 1) * (1 + self.turns.engine_share))))

    def snapshot(self) -> dict:
        with self._lock:
            return {
                "waiting": len(self._queue),
                "max_waiting": self.max_waiting,
                "done": self.done,
                "refused": self.refused,
                "dropped": self.dropped,
            }

    # -- the worker's side --
    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="inside-llm-model-work", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue:
                    self._lock.wait()
                job = self._queue.popleft()
                job.started = True
            try:
                result = self._compute(job)
            except BaseException as exc:  # the caller sees the job's own exception
                with self._lock:
                    self._jobs.pop(job.key, None)
                job.future.set_exception(exc)
                continue
            with self._lock:
                self._jobs.pop(job.key, None)
                self.done += 1
            job.future.set_result(result)

    def _compute(self, job: Job) -> Any:
        with self.turns.job():
            t0 = time.perf_counter()
            result = job.fn()
            self._recent.append(time.perf_counter() - t0)
        if job.kept is not None:
            job.kept.put(job.key, result)
        return result


class ClientGone(Exception):
    """The client left while its model job waited."""


async def _disconnect(receive) -> None:
    """Returns once ASGI receive() says the client has left (a request body not yet read is skipped)."""
    while (await receive())["type"] != "http.disconnect":
        pass


WORK = ModelWork()
