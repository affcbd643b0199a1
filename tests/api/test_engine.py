"""GET /api/engine, its feed and POST /api/engine/demo: the live engine, as a visitor's page sees it."""

from __future__ import annotations

import json
import os
import time

from inside_llm.api import engine as api
from inside_llm.api.demo_model import served_model
from inside_llm.engine import engine_for


def test_engine_reports_seats_queue_and_pages(client):
    body = client.get("/api/engine").json()
    assert body["seats"] == 8 and body["pages"] == 256 and body["page_tokens"] == 16
    m = served_model("smollm2").model
    c = m.config
    assert body["bytes_per_token"] == 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4
    assert 0 <= body["pages_in_use"] <= body["pages"] and body["model"] == m.name


def test_demo_chats_show_up_without_their_text(client):
    engine = engine_for(served_model("smollm2").model)
    try:
        r = client.post("/api/engine/demo")
        assert r.status_code == 200
        body = r.json()
        assert body["running"] == api.DEMO_CHATS
        snap = client.get("/api/engine").json()
        assert snap["seats_in_use"] + snap["queued"] >= api.DEMO_CHATS - snap["finished"]
        text = json.dumps(snap)
        assert not any(q in text for q in api.DEMO_QUESTIONS) and "capital" not in text
        again = client.post("/api/engine/demo").json()
        assert again["running"] <= api.DEMO_CHATS, "a second press never runs more than the demo's share"
    finally:
        engine.cancel_client(api.DEMO_CLIENT)


def test_demo_chats_count_against_the_callers_share(client):
    # issue 23 (L3): one POST a second kept 12 demo chats ahead of every visitor (first token 0.33 -> 3.9 s)
    engine = engine_for(served_model("smollm2").model)
    m = engine.model
    try:
        assert client.post("/api/engine/demo").json()["started"] > 0
        assert engine.client_chats("testclient") >= engine.limits.seats, "the demo's chats are the caller's"
        visitor = engine.submit(m.chat_ids("Hi") if hasattr(m, "chat_ids") else m.encode("Hi"), 4, client="visitor")
        deadline = time.monotonic() + 30
        while visitor.seq.state == "waiting" and time.monotonic() < deadline:
            time.sleep(0.01)
        demo_waiting = sum(s.label == api.DEMO_CLIENT for s in list(engine.waiting))
        assert visitor.seq.state != "waiting", "the visitor never got a seat"
        assert demo_waiting > 0, "the visitor was seated only once the demo's queue had drained"
        visitor.close()
    finally:
        engine.cancel_client(api.DEMO_CLIENT)


def test_engine_says_which_worker_answered(client, monkeypatch):
    # issue 23 (L11): with --workers N, /api/engine alternated between engines with nothing to tell them apart
    monkeypatch.setenv("INSIDE_LLM_WORKERS", "3")
    body = client.get("/api/engine").json()
    assert body["worker"] == os.getpid() and body["workers"] == 3


def test_feed_streams_snapshots(client):
    with client.stream("GET", "/api/engine/feed") as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = []
        for line in r.iter_lines():
            lines.append(line)
            if line.startswith("data:"):
                break
    assert lines[0] == "event: engine"
    assert set(json.loads(lines[-1][5:])) >= {"seats", "seats_in_use", "queued", "pages_in_use", "tokens_per_s"}


def test_the_live_snapshot_is_never_cached(client):
    """GET /api/engine is a reading of now: `no-store`, not the URL-keyed max-age every pure endpoint gets (a
    browser reused an hour-old snapshot before)."""
    r = client.get("/api/engine")
    assert r.status_code == 200 and r.headers["cache-control"] == "no-store" and "etag" not in r.headers
    assert {"seats", "queued", "pages", "pages_in_use"} <= set(r.json())
