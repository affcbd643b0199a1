"""attach/chat.py: the relay's whole-answer cap, said in words, and its fair share (Shares) taken and given back;
a visitor who leaves mid-answer gives the share back (over real HTTP, the stub holding the answer on an event)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from fake_openai import fake_openai
from livekit import serve_in_thread

from inside_llm.app import create_app
from inside_llm.attach import chat
from inside_llm.attach.targets import parse_targets
from inside_llm.model_work import Busy
from inside_llm.settings import Settings

SETUP = {"model": "llama-3.1-8b", "gpu": "l4"}


async def _collect(target, total_s):
    return [e async for e in chat.relay(target, "Hi", 3, None, total_s=total_s)]


def test_an_answer_held_past_the_cap_is_stopped_and_said_so():
    with fake_openai() as f:
        f.release.clear()  # the answer is held until the end of the test: the cap always comes first
        (target,) = parse_targets([f"held={f.url}/held"])
        events = asyncio.run(_collect(target, 0.5))
    assert events[-1] == ("error", {"detail": "It did not finish its answer within 0.5 s; the tour stopped there."})


def test_shares_per_visitor_and_per_server():
    s = chat.Shares(per_client=1, per_target=2)
    s.take("v1", "a")
    with pytest.raises(Busy, match="already have 1 question going"):
        s.take("v1", "b")
    s.take("v2", "a")
    with pytest.raises(Busy, match="2 questions are already going through 'a'"):
        s.take("v3", "a")
    s.give("v1", "a")
    s.take("v3", "a")
    assert dict(s.clients) == {"v2": 1, "v3": 1} and dict(s.targets) == {"a": 2}


def test_a_visitor_who_leaves_mid_answer_gets_the_share_back():
    with fake_openai() as f:
        f.release.clear()
        targets = parse_targets([f"held={f.url}/held ok={f.url}/ok"])
        with serve_in_thread(create_app(Settings(attach=targets))) as url:
            body = {"prompt": "Hi", **SETUP}
            with httpx.stream("POST", f"{url}/api/attach/held/chat", json=body, timeout=120) as r:
                assert r.status_code == 200
                lines = r.iter_lines()  # (leaving this loop by break would close the response at once)
                while not next(lines).startswith("event: start"):
                    pass
                assert f.arrived.acquire(timeout=120)  # held at the server; now the visitor leaves
            end = time.monotonic() + 120
            while True:  # polled, never slept through: the share comes back once the tour sees the visitor gone
                r = httpx.post(f"{url}/api/attach/ok/chat", json=body, timeout=120)
                if r.status_code == 200:
                    break
                assert r.status_code == 429 and time.monotonic() < end, r.text
                time.sleep(0.2)
            assert "event: done" in r.text
