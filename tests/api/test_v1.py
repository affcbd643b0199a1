"""/v1 driven by the official `openai` client against a real server on loopback (the base_url fixture): the text
is the engine's own greedy answer for the same messages, streamed or not; stop sequences, usage, timings; a 429
the client retries, 400s it raises, a 503 while the model loads."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest

from inside_llm.api import v1
from inside_llm.api.demo_model import served_model
from inside_llm.engine import ClientBusy, QueueFull, engine_for

MESSAGES = [
    {"role": "system", "content": "You answer in one short sentence."},
    {"role": "user", "content": "What is the capital of France?"},
]
N = 24


def _client(base_url: str, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="sk-no-key-required", timeout=120, **kw)


def _greedy(m, ids: list[int], n: int) -> tuple[str, int]:
    """(text, tokens written incl. the stop token) of the engine's greedy answer, decoded piece by piece."""
    out = engine_for(m).generate(ids, n)
    stopped = len(out) < n
    return b"".join(m.piece(t) for t in out).decode("utf-8", errors="replace"), len(out) + stopped


@pytest.fixture(scope="module")
def reference(smollm):
    m = smollm
    ids = m.vocab.encode(m.vocab.chat_prompt(MESSAGES))
    text, tokens = _greedy(m, ids, N)
    return {"ids": ids, "text": text, "tokens": tokens}


def test_models_lists_what_serves(base_url, smollm):
    models = _client(base_url).models.list()
    ids = [x.id for x in models.data]
    assert ids == ["smollm2", "toy"]
    assert models.data[0].owned_by == "inside-llm" and models.data[0].model_extra["max_model_len"] == 768


def test_chat_equals_the_engines_greedy_answer(base_url, reference):
    r = _client(base_url).chat.completions.create(model="smollm2", messages=MESSAGES, temperature=0, max_tokens=N)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-") and r.model == "smollm2"
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == reference["text"]
    assert choice.finish_reason == ("stop" if reference["tokens"] <= N and "Paris" in reference["text"] else "length")
    assert r.usage.prompt_tokens == len(reference["ids"]) and r.usage.completion_tokens == reference["tokens"]
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    extra = r.model_extra
    assert set(extra["metrics"]) == {
        "time_to_first_token_ms",
        "generation_time_ms",
        "queue_time_ms",
        "mean_itl_ms",
        "tokens_per_second",
    }
    assert (
        extra["timings"]["prompt_n"] == len(reference["ids"]) and extra["timings"]["predicted_n"] == reference["tokens"]
    )
    assert extra["metrics"]["time_to_first_token_ms"] > 0 and extra["timings"]["cache_n"] % 16 == 0


def test_stream_with_usage_equals_the_greedy_answer(base_url, reference):
    chunks = list(
        _client(base_url).chat.completions.create(
            model="smollm2",
            messages=MESSAGES,
            temperature=0,
            max_completion_tokens=N,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    *body, last, usage = chunks
    assert "".join(c.choices[0].delta.content or "" for c in body) == reference["text"]
    assert all(c.choices[0].finish_reason is None for c in body)
    assert last.choices[0].finish_reason in ("stop", "length") and not last.choices[0].delta.content
    assert usage.choices == [] and usage.usage.completion_tokens == reference["tokens"]
    assert usage.usage.prompt_tokens == len(reference["ids"]) and "metrics" in usage.model_extra


def test_raw_stream_is_unnamed_data_lines_ending_in_done(base_url, reference):
    body = {"model": "smollm2", "messages": MESSAGES, "temperature": 0, "max_tokens": 4, "stream": True}
    with httpx.stream("POST", f"{base_url}/v1/chat/completions", json=body, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
    last = json.loads(lines[-2][6:])
    assert last["choices"][0]["finish_reason"] == "length" and "timings" in last and "usage" not in last


def test_stop_sequences_end_the_answer_before_them(base_url, reference):
    text = reference["text"]
    words = text.split()
    assert len(words) >= 3, text
    stop = words[2]
    want = text[: text.index(stop)]
    c = _client(base_url)
    r = c.chat.completions.create(model="smollm2", messages=MESSAGES, temperature=0, max_tokens=N, stop=[stop])
    assert r.choices[0].message.content == want and r.choices[0].finish_reason == "stop"
    streamed = c.chat.completions.create(
        model="smollm2", messages=MESSAGES, temperature=0, max_tokens=N, stop=stop, stream=True
    )
    chunks = list(streamed)
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == want
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_completions_continue_plain_text_with_the_toy(base_url):
    m = served_model("toy").model
    prompt = "ROMEO:\nWhat light"
    text, _ = _greedy(m, m.encode(prompt), 12)
    c = _client(base_url)
    r = c.completions.create(model="toy", prompt=prompt, max_tokens=12, temperature=0)
    assert r.object == "text_completion" and r.choices[0].text == text and r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == len(m.encode(prompt)) and r.usage.completion_tokens == 12
    streamed = list(c.completions.create(model="toy", prompt=prompt, max_tokens=12, temperature=0, stream=True))
    assert "".join(x.choices[0].text for x in streamed) == text


def test_sampling_is_seeded(base_url, smollm):
    c = _client(base_url)
    kw = {"model": "smollm2", "messages": MESSAGES, "max_tokens": 8, "temperature": 0.9, "top_p": 0.8, "seed": 7}
    a, b = (c.chat.completions.create(**kw).choices[0].message.content for _ in range(2))
    assert a == b


@pytest.mark.parametrize(
    "change,param,words",
    [
        ({"temperature": 3}, "temperature", "at most 2"),
        ({"temperature": 0.01}, "temperature", "0.05"),
        ({"max_tokens": 513}, "max_tokens", "at most 512"),
        ({"top_p": 0}, "top_p", "more than 0"),
        ({"n": 2}, "n", "at most 1"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4"),
        ({"messages": []}, "messages", "at least 1"),
        ({"messages": [{"role": "user", "content": "Paris " * 300}]}, "messages", "at most 256 tokens"),
        ({"model": "gpt-4o"}, "model", "does not exist"),
        ({"model": "toy"}, "model", "no chat template"),
    ],
)
def test_bad_requests_are_raised_as_openai_errors(base_url, smollm, change, param, words):
    kw = {"model": "smollm2", "messages": MESSAGES, "max_tokens": 4} | change
    with pytest.raises((openai.BadRequestError, openai.NotFoundError)) as info:
        _client(base_url, max_retries=0).chat.completions.create(**kw)
    err = info.value.body
    assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
    assert err["param"] == param and words in err["message"], err
    assert info.value.status_code == (404 if "exist" in words else 400)
    if "256 tokens" in words:
        assert err["code"] == "context_length_exceeded"


@pytest.mark.parametrize(
    "path,body,param,words",
    [
        ("/v1/chat/completions", [], None, "body must be a JSON object"),
        ("/v1/chat/completions", {"messages": "hi"}, "messages", "must be a list"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, "messages.0.content", "must be text"),
        ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role", "one of"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x" * 4001}]},
            "messages.0.content",
            "4,000",
        ),
        ("/v1/chat/completions", {"messages": MESSAGES, "stream_options": 3}, "stream_options", "JSON object"),
        ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": "abc"}, "max_tokens", "whole number"),
        ("/v1/chat/completions", {"messages": MESSAGES, "seed": -1}, "seed", "at least 0"),
        ("/v1/chat/completions", {"messages": MESSAGES, "logprobs": True}, "logprobs", "log probabilities"),
        ("/v1/chat/completions", {"messages": MESSAGES, "tools": [{"type": "function"}]}, "tools", "tools"),
        ("/v1/completions", {}, "prompt", "is required"),
        ("/v1/completions", {"prompt": ["a", "b"]}, "prompt", "one prompt"),
        ("/v1/completions", {"prompt": "a", "echo": True}, "echo", "echo"),
        ("/v1/completions", {"prompt": "", "model": "toy"}, "prompt", "at least 1 token"),
        ("/v1/completions", {"prompt": "a", "model": "toy", "max_tokens": 300}, "max_tokens", "context of 256"),
    ],
)
def test_malformed_bodies_are_400s_naming_the_field(client, path, body, param, words):
    r = client.post(path, json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and words in err["message"] and err["type"] == "invalid_request_error", err


def test_not_json_is_a_400_in_openais_shape(base_url):
    r = httpx.post(f"{base_url}/v1/chat/completions", content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_a_full_share_is_a_429_the_client_retries(base_url, smollm):
    """This address fills every seat and its half of the queue (chats put straight into the server's engine,
    which runs in this process); the next chat gets a 429 with Retry-After, and the client retries after it.
    The hook that sees the 429 ends those chats, so the retry finds room."""
    from inside_llm.api.generate import generation_model

    served = generation_model("smollm2")  # the server's own model object (a test may have reloaded it)
    engine = engine_for(served)
    ids = served.vocab.encode(served.vocab.chat_prompt(MESSAGES))

    def fill() -> None:
        for _ in range(engine.limits.seats + engine.queue_share()):
            try:
                engine.submit(ids, 400, temperature=0.8, client="127.0.0.1")
            except (ClientBusy, QueueFull):
                return

    seen = []

    def hook(response: httpx.Response) -> None:
        seen.append((response.status_code, response.headers.get("retry-after")))
        if response.status_code == 429:
            engine.cancel_client("127.0.0.1")

    fill()
    try:
        retrying = _client(base_url, max_retries=2, http_client=httpx.Client(event_hooks={"response": [hook]}))
        r = retrying.chat.completions.create(model="smollm2", messages=MESSAGES, max_tokens=2, temperature=0)
    finally:
        engine.cancel_client("127.0.0.1")
    assert seen[0] == (429, str(v1.RETRY_AFTER_S)) and seen[-1][0] == 200, seen
    assert r.choices[0].message.content
    while engine.client_chats("127.0.0.1"):  # the cancelled chats leave at the loop's next step
        time.sleep(0.05)
    fill()
    try:
        with pytest.raises(openai.RateLimitError) as info:
            _client(base_url, max_retries=0).chat.completions.create(model="smollm2", messages=MESSAGES, max_tokens=2)
    finally:
        engine.cancel_client("127.0.0.1")
    assert info.value.body["code"] == "rate_limit_exceeded" and info.value.response.headers["retry-after"]


def test_a_model_still_loading_is_a_503_with_retry_after(base_url, monkeypatch):
    loaded = threading.Event()
    real = v1.generation_model

    def slow(name: str = "auto"):
        loaded.wait(30)
        return real(name)

    monkeypatch.setattr(v1, "generation_model", slow)
    monkeypatch.setattr(v1, "LOAD_WAIT_S", 0.3)
    try:
        r = httpx.post(f"{base_url}/v1/chat/completions", json={"messages": MESSAGES}, timeout=30)
        assert r.status_code == 503 and r.headers["retry-after"] == str(v1.LOAD_RETRY_AFTER_S)
        assert r.json()["error"]["code"] == "model_loading"
        with pytest.raises(openai.InternalServerError):
            _client(base_url, max_retries=0).models.list()
    finally:
        loaded.set()
