"""api/measured.py on a real server: measurements are model jobs, awaited without a thread or a lock, bounded,
and dropped when their clients leave (issue 23's H2)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
from livekit import HealthProbe

from inside_llm.model_work import WORK

URL = "/api/speculative/measured"


def _measure(base: str, k, timeout: float = 120, gamma: int = 1, max_tokens: int = 2) -> httpx.Response | None:
    """One speculative measurement with a prompt no one asked before (a new key: a new measurement)."""
    try:
        q = {"gamma": gamma, "max_tokens": max_tokens, "prompt": f"x{k} is", "model": "toy"}  # the toy: fast
        return httpx.get(f"{base}{URL}", params=q, timeout=timeout)
    except httpx.TimeoutException:
        return None  # the client gave up and left


@contextmanager
def _worker_held():
    """The one model-work worker busy until the block ends: a job that waits on a gate (so what queues behind
    it, and what is refused, does not depend on how fast this machine runs a measurement)."""
    gate = threading.Event()
    holder = threading.Thread(target=WORK.call, args=(("test-hold", time.monotonic_ns()), gate.wait), daemon=True)
    holder.start()
    _until(lambda: WORK.snapshot()["waiting"] == 0 and holder.is_alive(), "the hold started")
    time.sleep(0.2)  # the worker has taken the hold off the queue (waiting 0) and runs it
    try:
        yield
    finally:
        gate.set()
        holder.join(timeout=60)


def _until(cond, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def test_fifty_measurements_at_once_never_stall_the_pages_and_queued_ones_leave_with_their_clients(base_url):
    """The report's H2: 50 GETs with unique prompts hung /healthz, / and /api/catalog for 34 s (one global lock,
    40 pool threads waiting on it). Now at most 1 runs and 4 wait; the rest get a 429 in words at once, and the
    pages keep answering. The running job is held by a gate, so the counts are exact on any machine."""
    assert _measure(base_url, -1).status_code == 200  # the toy is loaded and measured once
    with ThreadPoolExecutor(50) as pool:  # (left last: it waits for the four, which wait for the hold)
        with _worker_held(), HealthProbe(base_url, 0.1, paths=("/healthz", "/", "/api/catalog")) as probe:
            futures = [pool.submit(_measure, base_url, k) for k in range(50)]
            _until(lambda: sum(f.done() for f in futures) == 46, "46 of the 50 were refused")
            refused = [f.result() for f in futures if f.done()]
            assert WORK.snapshot()["waiting"] == 4  # the other four wait behind the held job
            time.sleep(1)  # the probe keeps reading pages while the model work is held
    ms = sorted(probe.ms)  # was 34 s each; pages never wait for model work now
    codes = sorted(f.result().status_code for f in futures)
    assert [r.status_code for r in refused] == [429] * 46 and codes == [200] * 4 + [429] * 46, codes
    busy = refused[0]
    assert int(busy.headers["retry-after"]) >= 1
    assert "4 pieces of model work are already waiting beside the chats (at most 4)" in busy.json()["detail"]
    assert len(ms) >= 5 and ms[-1] < 30_000, ms

    # Four clients queue behind a held job and leave after a second: their jobs are dropped (never run), so
    # four new ones are accepted while the hold lasts (kept, the queue would be full: 429s).
    dropped = WORK.snapshot()["dropped"]
    with ThreadPoolExecutor(8) as pool, _worker_held():
        left = list(pool.map(lambda k: _measure(base_url, 100 + k, timeout=1), range(4)))
        assert left == [None] * 4, "the clients left before their measurements"
        _until(lambda: WORK.snapshot()["dropped"] == dropped + 4, "the four jobs were dropped")
        assert WORK.snapshot()["waiting"] == 0
        again = [pool.submit(_measure, base_url, 200 + k) for k in range(4)]
        _until(lambda: WORK.snapshot()["waiting"] == 4, "the four new ones queued")
    assert [a.result().status_code for a in again] == [200] * 4


def test_every_measured_endpoint_is_a_coroutine():
    """No /measured endpoint takes a worker thread while it waits: each awaits its model job on the event loop."""
    import inspect

    from inside_llm.api.registry import ROUTERS

    routes = [r for router in ROUTERS for r in router.routes if r.path.endswith("/measured")]
    assert len(routes) >= 6 and all(inspect.iscoroutinefunction(r.endpoint) for r in routes), routes
