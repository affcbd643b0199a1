"""Chapter 1, tokens: GET/POST /api/tokens -> every token with its spans, counts and the chat view."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from ..sim import tokenizer as tk
from ..sim.derivation import derive, math_dict

router = APIRouter(tags=["1 · tokens"])

MAX_TEXT_CHARS = 100_000
DEFAULT_TEXT = "The GPU server reads your prompt as tokens, not letters. Unbelievably, 🦙 emoji split too!"
Encoding = Literal["cl100k_base", "llama3"]


class TokensParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(DEFAULT_TEXT, max_length=MAX_TEXT_CHARS,
                      description=f"Text to tokenize (characters; at most {MAX_TEXT_CHARS:,}).")
    encoding: Encoding = Field("cl100k_base", description="Vocabulary: cl100k_base (GPT-4) or llama3 (Meta).")


class TokenOut(BaseModel):
    id: int
    text: str | None = Field(description="The piece as text; null when it is a partial UTF-8 sequence.")
    bytes: str = Field(description="The piece's bytes in hex.")
    byte_start: int
    byte_end: int
    char_start: int
    char_end: int
    special: bool


class ChatTokenOut(BaseModel):
    id: int
    text: str | None = Field(description="The piece as text; null when it is a partial UTF-8 sequence.")
    bytes: str = Field(description="The piece's bytes in hex.")
    special: bool
    kind: Literal["template", "content"]
    role: str


class ChatView(BaseModel):
    encoding: Literal["llama3"] = "llama3"
    tokens: list[ChatTokenOut]
    num_tokens: int
    num_template_tokens: int


class TokensResponse(BaseModel):
    encoding: Encoding
    tokens: list[TokenOut]
    num_tokens: int
    num_words: int
    num_chars: int
    num_bytes: int
    tokens_per_word: float | None
    words_per_token: float | None
    chars_per_token: float | None = Field(description="num_chars / num_tokens: meaningful in every script.")
    profile: dict = Field(description="What the text is made of (shares of non-space characters) and whether "
                          "the 3/4-word rule of thumb applies to it (sim.tokenizer.text_profile).")
    reference: dict = Field(description="Words and characters per token measured on public-domain English "
                            "passages, and (corpus) on the held-out Shakespeare that ships with the package.")
    chat: ChatView
    math: dict


def tokenize_text(p: TokensParams) -> TokensResponse:
    toks = tk.tokenize(p.text, p.encoding)
    words, n = tk.count_words(p.text), len(toks)
    chat = tk.chat_tokens(p.text)
    ref = tk.reference_ratio(p.encoding)
    wpt = derive(round(words / n, 3) if n else 0, "words/token", "words_per_token = num_words / num_tokens",
                 {"num_words": (words, "words"), "num_tokens": (n, "tokens")},
                 ["a word is a run of non-whitespace characters"],
                 ["Rule of thumb: 1 token ≈ ¾ of an English word (OpenAI, 'What are tokens and how to count them?')"])
    return TokensResponse(
        encoding=p.encoding, tokens=[t.to_dict() for t in toks], num_tokens=n, num_words=words,
        num_chars=len(p.text), num_bytes=len(p.text.encode("utf-8")),
        tokens_per_word=round(n / words, 3) if words else None,
        words_per_token=round(words / n, 3) if n else None,
        chars_per_token=round(len(p.text) / n, 3) if n else None, profile=tk.text_profile(p.text), reference=ref,
        chat=ChatView(tokens=chat, num_tokens=len(chat),
                      num_template_tokens=sum(t["kind"] == "template" for t in chat)),
        math=math_dict(words_per_token=wpt))


@router.get("/api/tokens", response_model=TokensResponse)
def get_tokens(p: Annotated[TokensParams, Query()]) -> TokensResponse:
    """Tokenize text given in the query string."""
    return tokenize_text(p)


@router.post("/api/tokens", response_model=TokensResponse)
def post_tokens(p: TokensParams) -> TokensResponse:
    """Tokenize text given as a JSON body (for long text)."""
    return tokenize_text(p)


def facts(p: TokensParams | None = None) -> dict[str, str]:
    """The visitor's text in tokens and words, beside the reference passages' words per token (same encoding)."""
    p = p or TokensParams()
    ref = tk.reference_ratio(p.encoding)
    corpus = ref["corpus"]
    return {"encoding": p.encoding, "text_tokens": f"{len(tk.tokenize(p.text, p.encoding)):,}",
            "text_words": f"{tk.count_words(p.text):,}", "words_per_token": f"{ref['words_per_token']:.2f}",
            "num_samples": str(len(ref["samples"])), "num_words": f"{ref['words']:,}",
            "corpus_words": f"{corpus['words']:,}", "corpus_words_per_token": f"{corpus['words_per_token']:.2f}"}
