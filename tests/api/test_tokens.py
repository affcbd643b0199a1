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
    assert (
        client.post("/api/tokens", json={"text": short}).json()
        == client.get("/api/tokens", params={"text": short}).json()
    )


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
    assert d["encoding"] == "smollm2" and [t["id"] for t in d["tokens"]] == [19556, 905, 17, 216, 33, 34, 35]
    assert [t["char_start"] for t in d["tokens"]] == [0, 5, 11, 12, 13, 14, 15]  # one digit per token
    chat = d["chat"]
    assert chat["encoding"] == "smollm2" and "ChatML" in chat["format"]
    texts = [t["text"] for t in chat["tokens"]]
    assert texts[:3] == ["<|im_start|>", "system", "\n"] and texts[-4:] == ["<|im_start|>", "ass", "istant", "\n"]
    content = [t for t in chat["tokens"] if t["kind"] == "content"]
    assert [t["id"] for t in content] == [19556, 905, 17, 216, 33, 34, 35] and {t["role"] for t in content} == {"user"}
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
    assert [t["text"] for t in chat["tokens"] if t["kind"] == "content"] == ["a", " ", "<|im_start|>"]
    assert chat["num_tokens"] == chat["num_template_tokens"] + 3
