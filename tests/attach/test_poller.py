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


def test_json_pages_beside_metrics_are_bounded_and_said_in_words(hostile):
    """llama.cpp's /slots, /props and every engine's /v1/models get /metrics' bounds: each page that hangs, sends
    10 MB, sends broken or wrongly shaped JSON, redirects or is switched off fails on its own, in words, while the
    target's /metrics reading stands; the figures it would have given say why they are missing."""
    modes = ["ok", "hang", "big", "malformed", "shape", "redirect", "off"]
    p = Poller(parse_targets([" ".join(f"{m}={hostile.url}/llama-{m}" for m in modes)]) + parse_targets(
        [f"vllm={hostile.url}/ok"]))  # fmt: skip
    run(p)
    v = {x["name"]: x for x in p.views()}
    for m in modes:
        assert v[m]["status"] == "ok" and v[m]["reading"].engine == "llama.cpp", m
        assert [pg["path"] for pg in v[m]["pages"]] == ["/v1/models", "/slots", "/props"], m
    ok = v["ok"]["reading"]
    assert all(pg["status"] == "ok" for pg in v["ok"]["pages"])
    assert (ok.slots_total.value, ok.slots_busy.value, ok.context_tokens.value) == (2.0, 1.0, 2048.0)
    assert ok.served_models == ["SmolLM2-135M-Instruct.Q4_1.gguf"] and ok.kv_usage.metric.startswith("GET /slots")
    expect = {
        "hang": ("slow", f"within {FETCH_TIMEOUT_S:g} s"),
        "big": ("garbled", f"more than {MAX_PAGE_BYTES / 1e6:g} MB for the JSON of GET /slots"),
        "malformed": ("garbled", "GET /slots did not answer JSON"),
        "shape": ("garbled", "GET /slots did not answer a list of slots"),
        "redirect": ("refused", "redirects are not followed"),
        "off": ("refused", "HTTP 501 instead of the JSON of GET /slots"),
    }
    for m, (status, words) in expect.items():
        slots = next(pg for pg in v[m]["pages"] if pg["path"] == "/slots")
        assert slots["status"] == status and words in slots["error"], (m, slots)
        state = p.states[m].pages["slots"]
        assert slots["failures"] == 1 and state.next_try - state.last_try >= p.interval_s * 2, m  # circuit open
        r = v[m]["reading"]
        assert r.slots_busy.value is None and f"GET /slots failed ({status})" in r.slots_busy.note, m
        assert r.running.value == 1.0, m  # /metrics' figures stand
    assert hostile.hits["/llama-redirect/slots"] == 1  # and the redirect's target was never asked
    # vLLM: /v1/models only (the hostile server 404s it); llama.cpp's pages are not asked for
    assert [(pg["path"], pg["status"]) for pg in v["vllm"]["pages"]] == [("/v1/models", "refused")]
    assert hostile.hits["/ok/slots"] == hostile.hits["/ok/props"] == 0
    assert v["vllm"]["reading"].slots_total.value is None and "Only llama.cpp" in v["vllm"]["reading"].slots_total.note


def test_a_failed_page_backs_off_on_its_own_circuit(hostile):
    p = Poller(parse_targets([f"off={hostile.url}/llama-off"]), interval_s=0.5)
    s = p.states["off"]

    async def scenario():
        try:
            await asyncio.wait_for(p.poll_once(), BOUND_S)
            slots = s.pages["slots"]
            assert slots.failures == 1 and slots.next_try - slots.last_try >= 0.5 * 2
            before = dict(hostile.hits)
            s.next_try = 0.0  # /metrics due again; /slots' circuit is still open
            await asyncio.wait_for(p.poll_once(), BOUND_S)
            assert hostile.hits["/llama-off/metrics"] == before["/llama-off/metrics"] + 1
            assert hostile.hits["/llama-off/slots"] == before["/llama-off/slots"]  # not asked again yet
            assert s.status == "ok" and "GET /slots failed (refused)" in s.reading.slots_busy.note
        finally:
            await p.stop()

    in_thread(scenario())
