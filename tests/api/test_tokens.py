"""GET/POST /api/tokens: tokens with spans, counts, chat view, bounds and caching."""

from __future__ import annotations

from inside_llm.api.tokens import MAX_TEXT_CHARS
from inside_llm.sim import tokenizer as tk


def test_get_returns_every_token_with_spans_and_counts(client):
    text = "Tokens, not letters: 🦙!"
    r = client.get("/api/tokens", params={"text": text, "encoding": "llama3"})
    assert r.status_code == 200
    d = r.json()
    assert [t["id"] for t in d["tokens"]] == tk.encode(text, "llama3")
    assert d["num_tokens"] == len(d["tokens"]) and d["num_words"] == 4 and d["num_chars"] == len(text)
    assert d["num_bytes"] == len(text.encode())
    assert d["words_per_token"] == round(4 / d["num_tokens"], 3)
    assert d["tokens"][-1]["byte_end"] == d["num_bytes"]
    assert any(t["text"] is None for t in d["tokens"]), "emoji bytes split across tokens show as bytes"
    assert d["math"]["words_per_token"]["inputs"][0]["value"] == 4


def test_post_accepts_long_text_and_equals_get(client):
    text = "To be, or not to be: that is the question. " * 2000
    post = client.post("/api/tokens", json={"text": text}).json()
    assert post["num_tokens"] == len(tk.encode(text, "cl100k_base"))
    short = "same answer either way"
    assert client.post("/api/tokens", json={"text": short}).json() == client.get(
        "/api/tokens", params={"text": short}).json()


def test_chat_view_adds_template_tokens(client):
    d = client.get("/api/tokens", params={"text": "Hi"}).json()
    chat = d["chat"]
    assert chat["num_template_tokens"] > 5
    assert chat["num_tokens"] == chat["num_template_tokens"] + len(tk.encode("Hi", "llama3"))
    assert chat["tokens"][0]["text"] == "<|begin_of_text|>"


def test_text_over_the_limit_gets_422_naming_it(client):
    r = client.post("/api/tokens", json={"text": "a" * (MAX_TEXT_CHARS + 1)})
    assert r.status_code == 422
    err = r.json()["detail"][0]
    assert err["loc"][-1] == "text" and str(MAX_TEXT_CHARS) in err["msg"]


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
