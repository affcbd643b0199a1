"""poller.py against hostile targets: each try is bounded (deadline, size cap, no redirect), says what went wrong
in words, and opens a circuit that backs off; one good page closes it. Every wait below is an explicit bound far
above the poller's own 2 s deadline, so these tests do not depend on the machine's speed."""

from __future__ import annotations

import asyncio
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest
from hostile import hostile_server

from inside_llm.attach.poller import FETCH_TIMEOUT_S, MAX_PAGE_BYTES, Poller
from inside_llm.attach.targets import parse_targets

BOUND_S = 60  # a round of polls must end well inside this, whatever the targets do


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


async def _round(p: Poller) -> None:
    try:
        await asyncio.wait_for(p.poll_once(), timeout=BOUND_S)
    finally:
        await p.stop()


def in_thread(coro) -> None:
    """asyncio.run on a thread of its own (a browser test earlier in the session may leave a loop running in the
    main thread), bounded."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coro).result(timeout=4 * BOUND_S)


def run(p: Poller) -> None:
    in_thread(_round(p))


@pytest.fixture(scope="module")
def hostile():
    with hostile_server() as h:
        yield h


def test_every_failure_is_bounded_and_said_in_words(hostile):
    names = ["ok", "hang", "drip", "big", "declared-big", "garbage", "unknown", "redirect", "missing"]
    entries = [f"{n}={hostile.url}/{n}" for n in names] + [f"down=http://127.0.0.1:{_dead_port()}"]
    p = Poller(parse_targets([" ".join(entries[:8])]) + parse_targets([" ".join(entries[8:])]))
    run(p)  # returns within BOUND_S although /hang and /drip never finish on their own
    v = {x["name"]: x for x in p.views()}
    assert v["ok"]["status"] == "ok" and v["ok"]["error"] is None
    assert v["ok"]["reading"].engine == "vllm" and v["ok"]["reading"].models == ["smollm2"]
    assert v["hang"]["status"] == "slow" and f"whole page within {FETCH_TIMEOUT_S:g} s" in v["hang"]["error"]
    assert v["drip"]["status"] == "slow" and "whole page" in v["drip"]["error"]
    assert v["big"]["status"] == "garbled" and f"more than {MAX_PAGE_BYTES / 1e6:g} MB" in v["big"]["error"]
    assert v["declared-big"]["status"] == "garbled" and "MB" in v["declared-big"]["error"]
    assert v["garbage"]["status"] == "garbled" and "not Prometheus exposition text" in v["garbage"]["error"]
    assert v["unknown"]["status"] == "unknown" and "No known engine" in v["unknown"]["error"]
    assert v["redirect"]["status"] == "refused" and "redirects are not followed" in v["redirect"]["error"]
    assert v["missing"]["status"] == "refused" and "HTTP 404" in v["missing"]["error"]
    assert v["down"]["status"] == "down" and "Nothing answers" in v["down"]["error"]
    assert hostile.hits["/redirect/metrics"] == 1  # and the redirect's target was never asked
    for name in names[1:] + ["down"]:
        assert v[name]["failures"] == 1 and v[name]["retry_in_s"] > 0 and v[name]["reading"] is None


def test_the_circuit_backs_off_and_one_good_page_closes_it(hostile):
    hostile.pages["/flaky/metrics"] = b"<html>not metrics</html>"
    p = Poller(parse_targets([f"flaky={hostile.url}/flaky"]), interval_s=0.5)
    s = p.states["flaky"]

    async def scenario():
        try:
            before = hostile.hits["/flaky/metrics"]
            await asyncio.wait_for(p.poll_once(), BOUND_S)
            assert s.failures == 1 and s.next_try - s.last_try >= 0.5 * 2
            await asyncio.wait_for(p.poll_once(), BOUND_S)  # not due: the circuit is open, nothing is sent
            assert hostile.hits["/flaky/metrics"] == before + 1
            s.next_try = 0.0  # due again
            await asyncio.wait_for(p.poll_once(), BOUND_S)
            assert s.failures == 2 and s.next_try - s.last_try >= 0.5 * 4  # twice as long
            hostile.pages["/flaky/metrics"] = hostile.pages["/ok/metrics"]
            s.next_try = 0.0
            await asyncio.wait_for(p.poll_once(), BOUND_S)
            assert (s.status, s.failures, s.error) == ("ok", 0, None) and s.reading is not None
            hostile.pages["/flaky/metrics"] = b"\x00"
            s.next_try = 0.0
            await asyncio.wait_for(p.poll_once(), BOUND_S)
            view = p.view("flaky")
            assert view["status"] == "garbled" and "NUL" in view["error"]
            assert view["stale"] and view["reading"] is not None  # the last good reading stays, marked stale
        finally:
            await p.stop()

    in_thread(scenario())


def test_a_second_good_page_gives_rates(hostile):
    p = Poller(parse_targets([f"ok={hostile.url}/ok"]), interval_s=0.01)

    async def scenario():
        try:
            await asyncio.wait_for(p.poll_once(), BOUND_S)
            assert p.states["ok"].reading.generation_tokens_per_s.value is None  # one scrape: no rate yet
            p.states["ok"].next_try = 0.0
            await asyncio.wait_for(p.poll_once(), BOUND_S)
            r = p.states["ok"].reading
            assert r.window_s is not None and r.window_s > 0
            assert r.generation_tokens_per_s.value == 0.0  # the same page twice: nothing was written between
        finally:
            await p.stop()

    in_thread(scenario())


def test_a_hung_target_never_delays_a_healthy_one(hostile):
    """While /hang holds its one request (held by an event, with a deadline far past this test), the healthy target
    keeps being polled on its own schedule."""
    hostile.release.clear()
    before = hostile.hits["/hang/metrics"]
    p = Poller(parse_targets([f"ok={hostile.url}/ok hang={hostile.url}/hang"]), interval_s=0.05, timeout_s=BOUND_S)

    async def scenario():
        task = asyncio.create_task(p.run())
        try:
            async with asyncio.timeout(BOUND_S):
                while p.states["ok"].polls < 4:
                    await asyncio.sleep(0.05)
            assert p.states["hang"].polls == 1 and p.states["hang"].status == "waiting"  # still in flight
            assert p.states["ok"].status == "ok"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await p.stop()

    in_thread(scenario())
    assert hostile.hits["/hang/metrics"] == before + 1
