"""GET /api/attach and /api/attach/{name}: the operator's servers as last read, names only (no request parameter
reaches the network), live (no-store), answering while a target hangs; and end to end over real HTTP, a second
`inside-llm serve --attach` process reading the first one's /metrics, in agreement with its own /api/engine."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from fake_openai import fake_openai
from fastapi.testclient import TestClient
from hostile import hostile_server
from livekit import live_server, serve_in_thread

from inside_llm.app import create_app
from inside_llm.attach import chat
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


# ---- chapter 11's question through an attached server: POST /api/attach/{name}/chat --------------------------

SETUP = {"model": "llama-3.1-8b", "gpu": "l4", "gpus": 1, "tp": 1, "precision": "bf16"}


def events(r) -> list[tuple[str, dict]]:
    """The server-sent events of a finished response, in order."""
    out, name = [], None
    for line in r.text.splitlines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            out.append((name, json.loads(line[6:])))
    return out


def sent(fake) -> int:
    """Requests that reached the stub, besides the poller's reads of its /metrics."""
    return sum(n for path, n in fake.hits.items() if not path.endswith("/metrics"))


@pytest.fixture(scope="module")
def fake():
    with fake_openai() as f:
        yield f


@pytest.fixture(scope="module")
def relay_url(fake):
    """The tour (real HTTP, in a thread) with stub servers attached; measure runs allowed against `held` only."""
    names = ("ok", "held", "missing", "garbage", "huge", "nomodel")
    targets = parse_targets([" ".join(f"{n}={fake.url}/{n}" for n in names) + " down=http://127.0.0.1:9"])
    with serve_in_thread(create_app(Settings(attach=targets, attach_measure=("held", "ok")))) as url:
        yield url


def test_the_question_is_relayed_measured_and_set_beside_the_prediction(fake, relay_url):
    r = httpx.post(f"{relay_url}/api/attach/ok/chat", json={"prompt": "Why?", "max_tokens": 5, **SETUP},
                   timeout=WAIT_S)  # fmt: skip
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["cache-control"] == "no-store"
    ev = events(r)
    assert [e for e, _ in ev] == ["start", "token", "token", "token", "done"]
    assert ev[0][1] == {"name": "ok", "model": "fake-model", "max_tokens": 5}
    assert "".join(d["text"] for e, d in ev if e == "token") == "one two three"
    sent = fake.bodies[-1]  # what reached the server: the question, the model it lists, the cap, streamed
    assert sent["messages"] == [{"role": "user", "content": "Why?"}] and sent["model"] == "fake-model"
    assert (sent["max_tokens"], sent["stream"], sent["stream_options"]) == (5, True, {"include_usage": True})
    done = ev[-1][1]
    assert (done["output_tokens"], done["prompt_tokens"], done["tokens_from"], done["chunks"]) == (3, 12, "usage", 3)
    assert 0 < done["ttft_ms"] <= done["total_ms"] and done["itl_ms"] >= 0
    p = done["predicted"]
    assert (p["batch"], p["prompt_tokens"], p["output_tokens"], p["fits"]) == (1, 12, 3, True)
    direct = chat.predict(SETUP, 12, 3)
    assert p["ttft_ms"] == pytest.approx(direct["ttft_ms"]) and p["itl_ms"] == pytest.approx(direct["itl_ms"])
    e = done["error_pct"]
    assert e["ttft_ms"] == pytest.approx(100 * (done["ttft_ms"] - p["ttft_ms"]) / p["ttft_ms"])
    assert e["itl_ms"] == pytest.approx(100 * (done["itl_ms"] - p["itl_ms"]) / p["itl_ms"])
    # the default answer length
    done = events(httpx.post(f"{relay_url}/api/attach/ok/chat", json={"prompt": "Hi", **SETUP}, timeout=WAIT_S))
    assert done[-1][1]["output_tokens"] == 3 and fake.bodies[-1]["max_tokens"] == 64


@pytest.mark.parametrize(
    "body, field, words",
    [
        ({**SETUP, "prompt": ""}, "prompt", "must not be empty"),
        ({**SETUP, "prompt": "x" * 2001}, "prompt", "at most 2,000 characters"),
        ({**SETUP, "prompt": "Hi", "max_tokens": 257}, "max_tokens", "256"),
        ({**SETUP, "prompt": "Hi", "url": "http://169.254.169.254/"}, "url", "url"),
        ({**SETUP, "prompt": "Hi", "base_url": "http://x"}, "base_url", "base_url"),
        ({**SETUP, "prompt": "Hi", "model": "no-such"}, "model", "llama-3.1-8b"),
        ({"prompt": "Hi", "model": "llama-3.1-8b"}, "gpu", "The GPU is required"),
        ({**SETUP, "prompt": "Hi", "gpus": 2, "tp": 3}, "tp", "must divide the GPU count (2)"),
    ],
)
def test_bad_input_is_refused_in_words_before_anything_is_sent(fake, relay_url, body, field, words):
    before = sent(fake)
    r = httpx.post(f"{relay_url}/api/attach/ok/chat", json=body, timeout=WAIT_S)
    assert r.status_code == 422, r.text
    d = r.json()["detail"][0]
    assert field in (d.get("field"), *(d.get("fields") or ())) and words in d["msg"], d
    assert sent(fake) == before


def test_only_the_operators_names_and_no_url(relay_url):
    r = httpx.post(f"{relay_url}/api/attach/elsewhere/chat", json={"prompt": "Hi", **SETUP}, timeout=WAIT_S)
    assert r.status_code == 404 and "the attached servers are ok, held" in r.json()["detail"]
    r = httpx.post(f"{relay_url}/api/attach/ok/chat?url=http://x", json={"prompt": "Hi", **SETUP}, timeout=WAIT_S)
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "url"
    assert "'url' is not a setting of this endpoint" in r.json()["detail"][0]["msg"]


@pytest.mark.parametrize(
    "name, words",
    [
        ("missing", "It answered HTTP 404: The model `fake-model` does not exist."),
        ("garbage", "not an OpenAI chat stream"),
        ("huge", "more than 1 MB for one answer"),
        ("nomodel", "lists no model at /v1/models"),
        ("down", "Nothing answers at its address"),
    ],
)
def test_what_went_wrong_at_the_server_is_said_in_words(relay_url, name, words):
    r = httpx.post(f"{relay_url}/api/attach/{name}/chat", json={"prompt": "Hi", **SETUP}, timeout=WAIT_S)
    assert r.status_code == 200
    ev = events(r)
    assert ev[-1][0] == "error" and words in ev[-1][1]["detail"], ev[-1]


def test_one_question_at_a_time_per_visitor_then_429(fake, relay_url):
    fake.release.clear()
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(
            httpx.post, f"{relay_url}/api/attach/held/chat", json={"prompt": "Hi", **SETUP}, timeout=WAIT_S
        )
        assert fake.arrived.acquire(timeout=WAIT_S)  # the first is at the server, held there
        r = httpx.post(f"{relay_url}/api/attach/ok/chat", json={"prompt": "Hi", **SETUP}, timeout=WAIT_S)
        assert r.status_code == 429 and r.headers["retry-after"] == "2"
        assert "already have 1 question going through an attached server" in r.json()["detail"]
        assert httpx.get(f"{relay_url}/healthz", timeout=WAIT_S).status_code == 200  # the held one holds nothing
        fake.release.set()
        assert events(first.result(timeout=WAIT_S))[-1][0] == "done"
    # the share came back with the answer
    assert (
        events(httpx.post(f"{relay_url}/api/attach/ok/chat", json={"prompt": "Hi", **SETUP}, timeout=WAIT_S))[-1][0]
        == "done"
    )


# ---- measure runs the tour starts: POST and GET /api/attach/{name}/measure ---------------------------------------

TINY = {"requests": 3, "concurrency": 2, "prompt_tokens": 4, "output_tokens": 3, **SETUP}


def job(url: str, name: str) -> dict:
    r = httpx.get(f"{url}/api/attach/{name}/measure", timeout=WAIT_S)
    assert r.status_code == 200, r.text
    return r.json()


def test_measure_runs_are_refused_unless_the_operator_allowed_them(fake, relay_url):
    before = sent(fake)
    for r in (
        httpx.post(f"{relay_url}/api/attach/missing/measure", json=TINY, timeout=WAIT_S),
        httpx.get(f"{relay_url}/api/attach/missing/measure", timeout=WAIT_S),
    ):
        assert r.status_code == 403 and "--attach-measure" in r.json()["detail"]
    assert sent(fake) == before
    assert httpx.get(f"{relay_url}/api/attach", timeout=WAIT_S).json()["measure"] == ["ok", "held"]
    with TestClient(create_app(Settings(attach=parse_targets([f"ok={fake.url}/ok"])))) as c:
        assert c.post("/api/attach/ok/measure", json=TINY).status_code == 403
        assert c.get("/api/attach").json()["measure"] == []
    r = httpx.post(f"{relay_url}/api/attach/ok/measure", json={**TINY, "concurrency": 4}, timeout=WAIT_S)
    assert r.status_code == 422 and "cannot exceed the number of requests (3)" in r.json()["detail"][0]["msg"]
    r = httpx.post(f"{relay_url}/api/attach/ok/measure", json={**TINY, "requests": 257}, timeout=WAIT_S)
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "requests"


def test_one_run_at_a_time_its_progress_then_its_table(fake, relay_url):
    fake.release.clear()
    r = httpx.post(f"{relay_url}/api/attach/held/measure", json=TINY, timeout=WAIT_S)
    assert r.status_code == 202, r.text
    assert r.json()["state"] in ("starting", "running") and r.json()["progress"] == 0
    assert fake.arrived.acquire(timeout=WAIT_S) and fake.arrived.acquire(timeout=WAIT_S)  # two held at the server
    held = job(relay_url, "held")
    assert (held["state"], held["ended"], held["model"]) == ("running", 0, "fake-model")
    r = httpx.post(f"{relay_url}/api/attach/held/measure", json=TINY, timeout=WAIT_S)
    assert r.status_code == 409 and "already going (0 of 3 requests ended): one at a time per server" in r.text
    assert httpx.post(f"{relay_url}/api/attach/ok/measure", json=TINY, timeout=WAIT_S).status_code == 202  # another
    fake.release.set()
    done = wait_for(lambda: job(relay_url, "held"), lambda j: j["state"] != "running", "the held run")
    assert (done["state"], done["progress"], done["ended"], done["finished"]) == ("done", 1.0, 3, 3)
    s = done["summary"]
    assert (s["requests"], s["finished"], s["failed"], s["unfinished"], s["concurrency"]) == (3, 3, {}, 0, 2)
    assert s["base_url"] is None and s["model"] == "fake-model" and s["output_tokens_mean"] == 3
    p = s["predicted"]
    assert p["batch"] == 2 and p["prompt_tokens"] == 12 and p["ttft_ms"] > 0
    assert s["error_pct"]["ttft_ms"] == pytest.approx(
        100 * (s["measured"]["ttft_ms"]["median"] - p["ttft_ms"]) / p["ttft_ms"]
    )
    ok = wait_for(lambda: job(relay_url, "ok"), lambda j: j["state"] not in ("starting", "running"), "the ok run")
    assert ok["summary"]["finished"] == 3 and ok["summary"]["predicted"]["batch"] == 2


def test_a_second_serve_process_answers_chapter_11_and_a_measure_run(smollm):
    """`inside-llm serve --attach a=URL --attach-measure` relays a question to another `inside-llm serve` over real
    HTTP: the same tokens as asking it directly with the openai client; then a tiny measure run there, whose counts
    match that server's own /api/engine."""
    with (
        live_server(timeout_s=120) as a,
        live_server(timeout_s=120, args=("--attach", f"a={a.url}", "--attach-measure")) as b,
    ):
        v1 = openai.OpenAI(base_url=f"{a.url}/v1", api_key="none", timeout=300, max_retries=0)
        model = v1.models.list().data[0].id
        q = {"prompt": "Name a fruit.", "max_tokens": 3, **SETUP}
        ev = events(httpx.post(f"{b.url}/api/attach/a/chat", json=q, timeout=300))
        assert ev[0] == ("start", {"name": "a", "model": model, "max_tokens": 3}) and ev[-1][0] == "done", ev[-1]
        done = ev[-1][1]
        direct = v1.chat.completions.create(
            model=model, messages=[{"role": "user", "content": q["prompt"]}], max_tokens=3, temperature=0
        )
        assert "".join(d["text"] for e, d in ev if e == "token") == direct.choices[0].message.content
        assert (done["output_tokens"], done["prompt_tokens"]) == (
            direct.usage.completion_tokens,
            direct.usage.prompt_tokens,
        )
        assert done["ttft_ms"] > 0 and done["predicted"]["prompt_tokens"] == direct.usage.prompt_tokens
        assert httpx.get(f"{a.url}/api/engine").json()["finished"] == 2
        r = httpx.post(f"{b.url}/api/attach/a/measure", json={**TINY, "output_tokens": 2}, timeout=60)
        assert r.status_code == 202, r.text
        run = wait_for(lambda: job(b.url, "a"), lambda j: j["state"] not in ("starting", "running"), "the run")
        assert (run["state"], run["progress"], run["ended"], run["finished"]) == ("done", 1.0, 3, 3), run
        s = run["summary"]
        assert (s["finished"], s["failed"], s["unfinished"], s["model"]) == (3, {}, 0, model)
        assert httpx.get(f"{a.url}/api/engine").json()["finished"] == 2 + 3
        assert s["predicted"]["batch"] == 2 and s["error_pct"]["tpot_ms"] is not None
