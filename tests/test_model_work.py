"""model_work: the one bounded queue of model jobs, its worker, and the turns it takes with the engine's steps."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from inside_llm.model_work import Busy, ClientGone, Kept, ModelWork, Slots, Turns


def _run(main):
    """asyncio.run(main()) on a thread of its own: a browser test earlier in the session can leave an event loop
    running in this thread (Playwright's sync API), and asyncio.run refuses to start inside one."""
    out: dict = {}

    def go():
        try:
            out["value"] = asyncio.run(main())
        except BaseException as e:  # re-raised in the test's thread
            out["error"] = e

    t = threading.Thread(target=go)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _engine_stepping(turns: Turns, step_s: float, stop: threading.Event, log: list) -> threading.Thread:
    """A stand-in engine: back-to-back steps of step_s seconds inside turns.step(), logged as (start, end)."""

    def run():
        while not stop.is_set():
            with turns.step():
                t0 = time.perf_counter()
                time.sleep(step_s)
                log.append(("step", t0, time.perf_counter()))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_jobs_never_overlap_a_step_and_leave_the_engine_its_share():
    turns, stop, log = Turns(engine_share=2.0), threading.Event(), []
    work = ModelWork(turns, max_waiting=8)
    engine = _engine_stepping(turns, 0.005, stop, log)

    def job():
        t0 = time.perf_counter()
        time.sleep(0.03)
        log.append(("job", t0, time.perf_counter()))

    try:
        for i in range(6):
            work.call(("job", i), job)
    finally:
        stop.set()
        engine.join(timeout=5)
    spans = sorted(log, key=lambda e: e[1])
    for (_, _, a1), (_, b0, _) in zip(spans, spans[1:]):
        assert b0 >= a1 - 1e-4, "a job and a step overlapped"
    jobs = [e for e in spans if e[0] == "job"]
    assert len(jobs) == 6
    for (_, _, end), (_, nxt, _) in zip(jobs, jobs[1:]):
        stepped = sum(s1 - s0 for kind, s0, s1 in spans if kind == "step" and end <= s0 and s1 <= nxt)
        assert stepped >= 0.8 * 2.0 * 0.03, f"the engine got {stepped * 1e3:.0f} ms between two jobs of 30 ms"


def test_without_chats_a_job_does_not_wait_for_the_engine():
    turns = Turns(engine_share=2.0, idle_s=0.05)
    work = ModelWork(turns)
    t0 = time.perf_counter()
    for i in range(5):
        work.call(i, lambda: time.sleep(0.02))
    assert time.perf_counter() - t0 < 0.5


def test_a_full_queue_refuses_at_once_in_words_and_results_are_kept():
    gate = threading.Event()
    work = ModelWork(Turns(), max_waiting=2)
    kept = Kept(4)

    async def main():
        running = asyncio.ensure_future(work.run("slow", gate.wait, kept))
        await asyncio.sleep(0.1)  # the worker has taken it
        queued = [asyncio.ensure_future(work.run(k, lambda k=k: k * 2, kept)) for k in (1, 2)]
        await asyncio.sleep(0.05)
        with pytest.raises(Busy) as refused:
            await work.run(3, lambda: 6, kept)
        same = asyncio.ensure_future(work.run(1, lambda: "never run: key 1 is already queued", kept))
        gate.set()
        return refused.value, await running, [await q for q in queued], await same

    busy, first, rest, same = _run(main)
    assert "2 pieces of model work are already waiting beside the chats (at most 2)" in busy.message
    assert busy.retry_after_s >= 1 and f"Try again in {busy.retry_after_s} s" in busy.message
    assert first is True and rest == [2, 4] and same == 2
    assert 1 in kept and work.call(1, lambda: "not run again", kept) == 2


def test_a_queued_job_is_dropped_when_its_client_leaves():
    gate, ran = threading.Event(), []
    work = ModelWork(Turns(), max_waiting=4)

    async def main():
        gone = asyncio.Event()

        async def receive():
            await gone.wait()
            return {"type": "http.disconnect"}

        busy = asyncio.ensure_future(work.run("busy", gate.wait))
        await asyncio.sleep(0.1)
        left = asyncio.ensure_future(work.run("left", lambda: ran.append("left"), receive=receive))
        await asyncio.sleep(0.05)
        assert work.snapshot()["waiting"] == 1
        gone.set()
        with pytest.raises(ClientGone):
            await left
        assert work.snapshot()["waiting"] == 0 and work.snapshot()["dropped"] == 1
        gate.set()
        await busy

    _run(main)
    assert ran == [], "the job of a client that left was never run"


def test_slots_refuse_past_their_bound():
    slots = Slots(1, "long texts are being tokenized")
    with slots.take():
        with pytest.raises(Busy, match="1 long texts are being tokenized now \\(at most 1 at once\\)"):
            with slots.take():
                pass
    with slots.take():
        pass


def test_every_forward_pass_outside_the_engine_runs_as_a_model_job(client, monkeypatch):
    """M4: chapters 2, 3 and 9 and the measured panels ran the served model in request threads, beside the
    engine's steps (a chat fell from 49 to 2.5 tokens/s). Every transformer block now runs on the engine's
    thread or the model-work worker, which takes turns with it."""
    from inside_llm.sim.model.transformer import DemoModel

    threads: set[str] = set()
    block = DemoModel._block

    def spy(self, *args, **kwargs):
        threads.add(threading.current_thread().name)
        return block(self, *args, **kwargs)

    monkeypatch.setattr(DemoModel, "_block", spy)
    word = f"w{time.monotonic_ns()}"  # a prompt no cache has seen
    for url in (
        f"/api/embeddings?prompt=The {word}",
        f"/api/layer?prompt=The {word}&layer=1",
        f"/api/speculative?prompt=The {word}&gamma=2&max_tokens=4",
        f"/api/speculative/measured?prompt=The {word}&gamma=1&max_tokens=2",
    ):
        assert client.get(url).status_code == 200, url
    assert threads == {"inside-llm-model-work"}, threads
