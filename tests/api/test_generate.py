"""GET /api/generate with model=toy: server-sent tokens equal the model's generate(), paced, bounded, stopped
by a disconnect. The real model's stream (model=smollm2) is tested in test_generate_smollm.py."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import anyio
import httpx
import pytest

from inside_llm.api import generate as gen
from inside_llm.api.demo_model import demo_model
from inside_llm.engine import engine_for

PROMPT = "ROMEO:\nBut soft, what light"


def events(text: str) -> list[tuple[str, dict]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def stream(client, **params):
    r = client.get("/api/generate", params={"prompt": PROMPT, "model": "toy", **params})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream") and "etag" not in r.headers
    return events(r.text)


def test_greedy_stream_equals_generate_and_decode(client):
    m = demo_model()
    ev = stream(client, max_tokens=12, temperature=0)
    assert ev[0][0] == "start" and ev[0][1]["num_prompt_tokens"] == len(m.encode(PROMPT))
    toks = [d for e, d in ev if e == "token"]
    expect = list(m.generate(m.encode(PROMPT), 12, temperature=0.0))
    assert [t["id"] for t in toks] == expect and [t["index"] for t in toks] == list(range(12))
    assert "".join(t["text"] for t in toks) == m.decode(expect)
    assert [t["cl100k_id"] for t in toks] == m.cl100k_ids(expect)
    done = ev[-1]
    assert done[0] == "done" and done[1]["num_tokens"] == 12 and done[1]["finish_reason"] == "length"
    assert done[1]["tokens_per_s"] > 0


def test_a_chat_uis_repetition_settings_are_echoed_and_keep_any_4gram_from_repeating(client):
    ev = stream(client, max_tokens=40, temperature=0, repetition_penalty=1.1, no_repeat_ngram=4)
    assert ev[0][1]["repetition_penalty"] == 1.1 and ev[0][1]["no_repeat_ngram"] == 4
    ids = [d["id"] for e, d in ev if e == "token"]
    grams = [tuple(ids[i : i + 4]) for i in range(len(ids) - 3)]
    assert len(grams) == len(set(grams))
    plain = stream(client, max_tokens=40, temperature=0)
    assert plain[0][1]["repetition_penalty"] == 1.0 and plain[0][1]["no_repeat_ngram"] == 0


def test_sampling_is_seeded(client):
    m = demo_model()
    a = [d["id"] for e, d in stream(client, max_tokens=10, temperature=1.0, top_k=50, seed=7) if e == "token"]
    b = [d["id"] for e, d in stream(client, max_tokens=10, temperature=1.0, top_k=50, seed=7) if e == "token"]
    assert a == b == list(m.generate(m.encode(PROMPT), 10, temperature=1.0, top_k=50, seed=7))


def test_partial_utf8_is_held_until_the_character_completes():
    """A llama emoji spelled as four byte tokens: '' three times, then the whole character."""
    m = demo_model()
    byte_ids = m.encode("🦙")
    assert len(byte_ids) > 1

    class Fake:
        name, piece, cl100k_ids = "fake", m.piece, m.cl100k_ids

    class Steps:  # what the engine hands back: an iterator of ids with a finish reason and close()
        finish_reason = "length"

        def __init__(self, n):
            self.ids = iter((byte_ids * 2)[:n])

        def __next__(self):
            return next(self.ids)

        def close(self):
            pass

    class Req:
        async def is_disconnected(self):
            return False

    async def collect(n):
        p = gen.GenerateParams(prompt="x", max_tokens=n, temperature=0)
        return [e async for e in gen._events(Req(), Fake(), [1], p, Steps(n))]

    with ThreadPoolExecutor(1) as ex:  # its own thread: a browser test's event loop may own this one
        chunks = ex.submit(anyio.run, collect, len(byte_ids) + 1).result()
    ev = events(b"".join(chunks).decode())
    texts = [d["text"] for e, d in ev if e == "token"]
    assert texts[: len(byte_ids)] == [""] * (len(byte_ids) - 1) + ["🦙"]
    assert "".join(texts) == m.decode((byte_ids * 2)[: len(byte_ids) + 1])  # a cut-off character ends as U+FFFD


def test_max_tokens_is_respected_and_pacing_holds(client):
    t0 = time.perf_counter()
    ev = stream(client, max_tokens=5, tokens_per_s=20, temperature=0)
    wall = time.perf_counter() - t0
    toks = [d for e, d in ev if e == "token"]
    assert len(toks) == 5
    assert toks[-1]["elapsed_ms"] - toks[0]["elapsed_ms"] >= 190  # 4 gaps of 1/20 s
    assert wall >= 0.19
    assert ev[-1][1]["decode_tokens_per_s"] <= 21


@pytest.mark.parametrize(
    "params, field, bound",
    [
        ({"prompt": "word " * 300}, "prompt", "256"),
        ({"prompt": ""}, "prompt", "1"),
        ({"max_tokens": 513}, "max_tokens", "512"),
        ({"max_tokens": 0}, "max_tokens", "1"),
        ({"tokens_per_s": 201}, "tokens_per_s", "200"),
        ({"temperature": 3}, "temperature", "2"),
        ({"repetition_penalty": 2.5}, "repetition_penalty", "2"),
        ({"no_repeat_ngram": 17}, "no_repeat_ngram", "16"),
        ({"no_repeat_ngram": 1}, "no_repeat_ngram", "2-16"),
    ],
)
def test_bounds_get_422_naming_the_field(client, params, field, bound):
    r = client.get("/api/generate", params={"prompt": "x"} | params)
    assert r.status_code == 422
    err = r.json()["detail"][0]
    assert err["loc"][-1] == field and bound in err["msg"]


def test_openapi_states_the_event_contract(client):
    op = client.get("/openapi.json").json()["paths"]["/api/generate"]["get"]
    for word in ("`start`", "`token`", "`done`", "elapsed_ms", "text/event-stream"):
        assert word in op["description"]
    assert "text/event-stream" in op["responses"]["200"]["content"]


def test_stream_stops_when_the_client_disconnects(base_url):
    params = {"prompt": PROMPT, "model": "toy", "max_tokens": 512, "tokens_per_s": 10}
    with httpx.Client(timeout=10) as c, c.stream("GET", base_url + "/api/generate", params=params) as r:
        seen = 0
        for line in r.iter_lines():
            seen += line.startswith("event: token")
            if seen == 2:
                break
        assert gen.active_streams() == 1
    for _ in range(60):  # the server notices within one token's pause
        if gen.active_streams() == 0:
            break
        time.sleep(0.05)
    assert gen.active_streams() == 0, "the generation kept running after the client left"


def test_pace_and_temperature_refuse_values_that_never_end_or_overflow(client):
    for q in ({"tokens_per_s": "5e-324"}, {"tokens_per_s": "0.1"}, {"temperature": "5e-324"}, {"temperature": "0.01"}):
        r = client.get("/api/generate", params={"prompt": "ROMEO:", "max_tokens": 2, **q})
        assert r.status_code == 422, q
        err = r.json()["detail"][0]
        assert err["loc"][-1] == next(iter(q)) and ("0.5" in err["msg"] or "0.05" in err["msg"])


@pytest.mark.parametrize(
    "limits, words",
    [
        ({"seats": 0, "queue_per_client": 0}, "this client already has 0 chats waiting"),
        ({"seats": 0, "queue": 0}, "all 0 seats and all 0 places in the queue are taken"),
    ],
)
def test_a_busy_engine_answers_429_with_retry_after(client, monkeypatch, limits, words):
    engine = engine_for(gen.generation_model("toy"))
    monkeypatch.setattr(engine, "limits", replace(engine.limits, **limits))
    r = client.get("/api/generate", params={"prompt": "ROMEO:", "max_tokens": 1, "model": "toy"})
    assert r.status_code == 429 and r.headers["retry-after"] == str(gen.RETRY_AFTER_S)
    assert words in r.json()["detail"] and "busy" in r.json()["detail"]
