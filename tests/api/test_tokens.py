"""GET/POST /api/tokens: tokens with spans, counts, chat view, bounds and caching."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
from livekit import HealthProbe, live_server

from inside_llm.api.tokens import MAX_TEXT_CHARS
from inside_llm.sim.model import tokenizer as tk


def test_get_returns_every_token_with_spans_and_counts(client):
    text = "Tokens, not letters: 🦙!"
    r = client.get("/api/tokens", params={"text": text, "encoding": "llama3"})
    assert r.status_code == 200
    d = r.json()
    cols = d["tokens"]  # one list per field: token i is index i of each
    assert set(cols) == {"id", "text", "bytes", "byte_start", "byte_end", "char_start", "char_end", "special"}
    assert cols["id"] == tk.encode(text, "llama3") and all(len(v) == len(cols["id"]) for v in cols.values())
    assert d["num_tokens"] == d["num_returned"] == len(cols["id"]) and d["num_words"] == 4
    assert d["num_chars"] == len(text) and d["num_bytes"] == len(text.encode())
    assert d["words_per_token"] == round(4 / d["num_tokens"], 3)
    assert cols["byte_end"][-1] == d["num_bytes"]
    assert None in cols["text"], "emoji bytes split across tokens show as bytes"
    assert d["math"]["words_per_token"]["inputs"][0]["value"] == 4


def test_post_accepts_long_text_and_equals_get(client):
    text = "To be, or not to be: that is the question. " * 2000
    post = client.post("/api/tokens", json={"text": text}).json()
    assert post["num_tokens"] == len(tk.encode(text, "cl100k_base"))
    short = "same answer either way"
    assert (
        client.post("/api/tokens", json={"text": short}).json()
        == client.get("/api/tokens", params={"text": short}).json()
    )


def test_chat_view_adds_template_tokens(client):
    d = client.get("/api/tokens", params={"text": "Hi"}).json()
    chat = d["chat"]
    assert chat["num_template_tokens"] > 5
    assert chat["num_tokens"] == chat["num_template_tokens"] + len(tk.encode("Hi", "llama3"))
    assert chat["tokens"]["text"][0] == "<|begin_of_text|>" and chat["num_returned"] == chat["num_tokens"]


def test_text_over_the_limit_gets_422_naming_it(client):
    r = client.post("/api/tokens", json={"text": "a" * (MAX_TEXT_CHARS + 1)})
    assert r.status_code == 422
    err = r.json()["detail"][0]
    assert err["loc"][-1] == "text" and f"{MAX_TEXT_CHARS:,} characters" in err["msg"]


def test_unknown_encoding_gets_422_listing_valid_ones(client):
    r = client.get("/api/tokens", params={"text": "x", "encoding": "gpt2"})
    assert r.status_code == 422
    msg = r.json()["detail"][0]["msg"]
    assert "cl100k_base" in msg and "llama3" in msg


def test_unknown_parameter_is_rejected(client):
    r = client.get("/api/tokens", params={"text": "x", "bogus": "1"})
    assert r.status_code == 422


def test_etag_and_conditional_get(client):
    r = client.get("/api/tokens", params={"text": "cache me"})
    etag = r.headers["etag"]
    assert "max-age" in r.headers["cache-control"]
    again = client.get("/api/tokens", params={"text": "cache me"}, headers={"if-none-match": etag})
    assert again.status_code == 304 and again.content == b""
    other = client.get("/api/tokens", params={"text": "cache you"})
    assert other.headers["etag"] != etag


def test_characters_per_token_and_the_rule_of_thumb_verdict(client):
    text = "🦙🚀 日本語のテキストも分割されます。"
    d = client.get("/api/tokens", params={"text": text}).json()
    assert d["chars_per_token"] == round(len(text) / d["num_tokens"], 3)
    assert d["profile"]["kind"] == "other script" and d["profile"]["rule_applies"] is False
    d = client.get("/api/tokens", params={"text": "It is a truth universally acknowledged."}).json()
    assert d["profile"]["rule_applies"] is True
    corpus = d["reference"]["corpus"]
    assert corpus["words"] > 10_000 and corpus["words_per_token"] == round(corpus["words"] / corpus["tokens"], 3)


def test_smollm2_is_a_third_vocabulary_with_its_own_chatml(client, smollm):
    d = client.get("/api/tokens", params={"text": "Hello world! 123", "encoding": "smollm2"}).json()
    assert d["encoding"] == "smollm2" and d["tokens"]["id"] == [19556, 905, 17, 216, 33, 34, 35]
    assert d["tokens"]["char_start"] == [0, 5, 11, 12, 13, 14, 15]  # one digit per token
    chat = d["chat"]
    assert chat["encoding"] == "smollm2" and "ChatML" in chat["format"]
    texts = chat["tokens"]["text"]
    assert texts[:3] == ["<|im_start|>", "system", "\n"] and texts[-4:] == ["<|im_start|>", "ass", "istant", "\n"]
    content = [i for i, kind in enumerate(chat["tokens"]["kind"]) if kind == "content"]
    assert [chat["tokens"]["id"][i] for i in content] == [19556, 905, 17, 216, 33, 34, 35]
    assert {chat["tokens"]["role"][i] for i in content} == {"user"}
    assert chat["num_tokens"] == chat["num_template_tokens"] + 7 == 37  # 30 template tokens around 7
    assert d["reference"]["encoding"] == "smollm2" and 0.5 < d["reference"]["words_per_token"] < 1.2


def test_smollm2_without_the_model_is_a_422_saying_how_to_fetch(client, no_model):
    r = client.get("/api/tokens", params={"text": "x", "encoding": "smollm2"})
    assert r.status_code == 422
    err = r.json()["detail"][0]
    assert err["loc"][-1] == "encoding" and "inside-llm fetch-model" in err["msg"]


def test_smollm2_chat_view_survives_template_text_in_the_prompt(client, smollm):
    r = client.get("/api/tokens", params={"text": "a <|im_start|>", "encoding": "smollm2"})
    assert r.status_code == 200
    chat = r.json()["chat"]
    t = chat["tokens"]
    assert [s for s, kind in zip(t["text"], t["kind"]) if kind == "content"] == ["a", " ", "<|im_start|>"]
    assert chat["num_tokens"] == chat["num_template_tokens"] + 3


def test_a_long_text_lists_its_first_tokens_and_counts_them_all(client):
    text = "🦙" * 20_000  # 60,000 tokens: the response lists the first MAX_RETURNED_TOKENS, in columns
    r = client.post("/api/tokens", json={"text": text}, headers={"accept-encoding": "gzip"})
    assert r.status_code == 200 and r.headers["content-encoding"] == "gzip", "POST answers are gzipped too"
    d = r.json()
    ids = tk.encode(text, "cl100k_base")
    assert d["num_tokens"] == len(ids) > tk.MAX_RETURNED_TOKENS == d["num_returned"]
    assert d["tokens"]["id"] == ids[: tk.MAX_RETURNED_TOKENS]
    assert d["tokens"]["char_end"][-1] == tk.tokenize(text, "cl100k_base")[tk.MAX_RETURNED_TOKENS - 1].char_end
    chat = d["chat"]
    assert chat["num_tokens"] == len(tk.chat_tokens(text)) and chat["num_returned"] == tk.MAX_RETURNED_TOKENS
    assert chat["num_template_tokens"] == sum(t["kind"] == "template" for t in tk.chat_tokens(text))
    assert int(r.headers["content-length"]) < 100_000 < len(r.content), "300 KB of JSON, gzipped on the wire"


def test_a_lone_surrogate_is_refused_in_words_not_the_codec_s(client):
    r = client.post("/api/tokens", content=b'{"text": "ab\\ud800cd"}', headers={"content-type": "application/json"})
    assert r.status_code == 422
    msg = r.json()["detail"][0]["msg"]
    assert (
        "holds a lone surrogate" in msg
        and r.json()["detail"][0]["field"] == "text"
        and "codec" not in msg
        and "surrogates not allowed" not in msg
    )


def test_long_texts_over_their_bound_get_429_with_retry_after_in_words(client):
    from inside_llm.api.tokens import LONG_TEXTS

    with LONG_TEXTS.take(), LONG_TEXTS.take():  # both slots in use
        r = client.post("/api/tokens", json={"text": "word " * 2_000})
        short = client.post("/api/tokens", json={"text": "a short text never waits"})
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert "long texts are being tokenized now (at most 2 at once)" in r.json()["detail"]
    assert short.status_code == 200


def _status_mb(pid: int, key: str) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith(key + ":")) / 1024


def _reset_peak(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as f:
        f.write("5")


def test_100k_emoji_cost_a_bounded_request_and_16_at_once_leave_healthz_fast():
    """The report's H1 on a real server: 100,000 emoji in a POST took +1.08 GB and 63 MB on the wire; 8 at once
    +4.64 GB. Now one costs <= 100 MB of peak RSS (the server's and its tokenizer worker's, summed) and <= 2 MB on
    the wire, and of 16 at once two run (in worker processes) and the rest get a 429 at once, while /healthz keeps
    answering: its 90th percentile stays under a second on a machine shared by many test runs (20-35 ms at load 2
    here; `make bench` -> holds prints it beside the 50 ms goal)."""
    body = json.dumps({"text": "🦙" * 100_000}, ensure_ascii=False).encode()  # 400 KB, inside both caps
    headers = {"content-type": "application/json", "accept-encoding": "gzip"}
    p90 = lambda ms: sorted(ms)[len(ms) * 9 // 10]  # noqa: E731
    with live_server() as srv, httpx.Client(base_url=srv.url, timeout=120) as c:
        assert c.post("/api/tokens", json={"text": "warm up 🦙"}).status_code == 200  # vocabularies loaded
        assert c.post("/api/tokens", json={"text": "warm up 🦙 " * 1000}).status_code == 200  # a worker started
        pids = [srv.proc.pid, *srv.children()]
        assert len(pids) >= 2, "a long text is tokenized in a worker process"
        base = sum(_status_mb(p, "VmRSS") for p in pids)
        for p in pids:
            _reset_peak(p)
        r = c.post("/api/tokens", content=body, headers=headers)
        growth = sum(_status_mb(p, "VmHWM") for p in pids) - base  # each one's peak: at least the sum's
        assert r.status_code == 200 and r.json()["num_tokens"] == 300_000
        assert int(r.headers["content-length"]) <= 2_000_000, "on the wire"
        assert growth <= 100, f"peak RSS grew {growth:.0f} MB"

        def post(_):
            with httpx.Client(base_url=srv.url, timeout=120) as one:
                return one.post("/api/tokens", content=body, headers=headers)

        with HealthProbe(srv.url, every_s=0.05) as probe, ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(post, range(16)))
        codes = sorted(a.status_code for a in answers)
        assert set(codes) <= {200, 429} and 200 in codes, codes
        busy = next(a for a in answers if a.status_code == 429)
        assert int(busy.headers["retry-after"]) >= 1 and "at most 2 at once" in busy.json()["detail"]
        assert len(probe.ms) >= 5 and p90(probe.ms) < 1000, sorted(probe.ms)


def test_a_long_text_is_tokenized_in_a_worker_and_answers_the_same(client, monkeypatch):
    """Issue 23's H1: a long text's pure-Python second never holds the server's GIL (it runs in a worker process);
    the bytes it sends back are exactly what this process would have written, for every encoding."""
    from inside_llm.api import tokens

    calls = []
    real = tokens._workers

    def counted_workers():
        calls.append(1)
        return real()

    monkeypatch.setattr(tokens, "_workers", counted_workers)
    text = "To be, or not to be 🦙 " * 300  # over LONG_TEXT_CHARS
    for encoding in ("cl100k_base", "llama3"):
        r = client.post("/api/tokens", json={"text": text, "encoding": encoding})
        here = tokens._tokenize(tokens.TokensParams(text=text, encoding=encoding)).model_dump_json().encode()
        body, cut = r.content, len(here) - 1  # the same bytes, then the answer's facts before its closing brace
        assert r.status_code == 200 and body[:cut] == here[:-1] and body[cut:].startswith(b',"facts":'), encoding
    assert len(calls) == 2, "both long texts went to the worker processes"
    assert client.post("/api/tokens", json={"text": "short"}).status_code == 200 and len(calls) == 2
