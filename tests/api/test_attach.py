"""GET /api/attach and /api/attach/{name}: the operator's servers as last read, names only (no request parameter
reaches the network), live (no-store), answering while a target hangs; and end to end over real HTTP, a second
`inside-llm serve --attach` process reading the first one's /metrics, in agreement with its own /api/engine."""

from __future__ import annotations

import time

import httpx
import openai
import pytest
from fastapi.testclient import TestClient
from hostile import hostile_server
from livekit import live_server

from inside_llm.app import create_app
from inside_llm.attach.targets import parse_targets
from inside_llm.settings import Settings

WAIT_S = 120  # the longest any state below is waited for (polled, not slept through)


def wait_for(get, ok, what: str):
    end = time.monotonic() + WAIT_S
    while True:
        got = get()
        if ok(got):
            return got
        assert time.monotonic() < end, f"{what}: still {got}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def hostile():
    with hostile_server() as h:
        yield h


def test_no_server_attached(client):
    r = client.get("/api/attach")
    assert r.status_code == 200 and r.json()["servers"] == []
    assert "--attach NAME=URL" in r.json()["how"] and r.headers["cache-control"] == "no-store"
    r = client.get("/api/attach/vllm")
    assert r.status_code == 404 and "No attached server is named 'vllm': no server is attached" in r.json()["detail"]


def test_names_only_and_the_page_stays_responsive_while_a_target_hangs(hostile):
    targets = parse_targets([f"ok={hostile.url}/ok hang={hostile.url}/hang down=http://127.0.0.1:9"])
    with TestClient(create_app(Settings(attach=targets))) as c:
        # the poller runs with the app; a hung target never holds a request (each read below has its own bound)
        ok = wait_for(lambda: c.get("/api/attach/ok").json(), lambda j: j["status"] == "ok", "ok")
        assert ok["reading"]["engine"] == "vllm" and ok["reading"]["running"]["metric"] == "vllm:num_requests_running"
        hang = wait_for(lambda: c.get("/api/attach/hang").json(), lambda j: j["status"] != "waiting", "hang")
        assert hang["status"] == "slow" and "within 2 s" in hang["error"]
        assert c.get("/healthz").status_code == 200
        listed = c.get("/api/attach")
        assert [s["name"] for s in listed.json()["servers"]] == ["ok", "hang", "down"]
        assert listed.headers["cache-control"] == "no-store" and "etag" not in listed.headers
        # no parameter names a URL: any query is refused in words, and an unknown name lists the known ones
        r = c.get("/api/attach", params={"url": "http://169.254.169.254/"})
        assert r.status_code == 422
        assert r.json()["detail"][0]["field"] == "url" and "never by a request" in r.json()["detail"][0]["msg"]
        assert c.get("/api/attach/ok", params={"target": "http://x"}).status_code == 422
        r = c.get("/api/attach/elsewhere")
        assert r.status_code == 404 and "the attached servers are ok, hang, down" in r.json()["detail"]
        r = c.get("/api/attach/" + "x" * 40)
        assert r.status_code == 422 and "at most 32 characters" in r.json()["detail"][0]["msg"]
    assert hostile.hits["/hang/metrics"] >= 1


def test_a_second_serve_process_attaches_to_the_first(smollm):
    """`inside-llm serve --attach a=URL` reads another `inside-llm serve` over real HTTP; after three chats there,
    its figures equal that server's own /api/engine."""
    with live_server(timeout_s=120) as a, live_server(timeout_s=120, args=("--attach", f"a={a.url}")) as b:
        chat = openai.OpenAI(base_url=f"{a.url}/v1", api_key="none", timeout=300, max_retries=0)
        for q in ("Hi.", "Say yes.", "Name a fruit."):
            chat.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": q}], max_tokens=3)

        def reading():
            j = httpx.get(f"{b.url}/api/attach/a").json()
            return j["reading"] if j["status"] == "ok" else None

        r = wait_for(reading, lambda r: r and r["finished_requests"]["value"] == 3 and r["window_s"], "3 chats seen")
        engine = httpx.get(f"{a.url}/api/engine").json()
        assert r["engine"] == "vllm" and "smollm2" in r["models"]
        assert r["finished_requests"]["value"] == engine["finished"] == 3
        assert r["preemptions"]["value"] == engine["preempted"]
        assert (r["running"]["value"], r["waiting"]["value"]) == (engine["seats_in_use"], engine["queued"]) == (0, 0)
        assert r["kv_usage"]["value"] == engine["pages_in_use"] / engine["pages"]
        assert r["ttft_p50_s"]["value"] > 0 and r["ttft_p50_s"]["metric"] == "vllm:time_to_first_token_seconds"


def test_llama_servers_json_pages_are_in_the_answer(hostile):
    """A llama-server's /v1/models, /slots and /props: each page's status in `pages`, what they add in `reading`;
    one switched off (HTTP 501) says so in words while its /metrics figures stand."""
    targets = parse_targets([f"ll={hostile.url}/llama-ok off={hostile.url}/llama-off"])
    with TestClient(create_app(Settings(attach=targets))) as c:
        ll = wait_for(lambda: c.get("/api/attach/ll").json(), lambda j: j["status"] == "ok" and j["pages"], "ll")
        assert {p["path"]: p["status"] for p in ll["pages"]} == {"/v1/models": "ok", "/slots": "ok", "/props": "ok"}
        r = ll["reading"]
        assert (r["slots_total"]["value"], r["slots_busy"]["value"], r["context_tokens"]["value"]) == (2, 1, 2048)
        assert r["served_models"] == ["SmolLM2-135M-Instruct.Q4_1.gguf"] and r["build"] == "b1234-abcdef0"
        off = wait_for(lambda: c.get("/api/attach/off").json(), lambda j: j["status"] == "ok" and j["pages"], "off")
        slots = next(p for p in off["pages"] if p["path"] == "/slots")
        assert slots["status"] == "refused" and "HTTP 501" in slots["error"] and slots["failures"] >= 1
        assert off["reading"]["running"]["value"] == 1 and "HTTP 501" in off["reading"]["slots_busy"]["note"]
