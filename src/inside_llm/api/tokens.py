"""Chapter 1, tokens: GET/POST /api/tokens -> every token with its spans, counts and the chat view.

A long text (over LONG_TEXT_CHARS) is tokenized in a worker process (at most LONG_TEXTS.n at once, the rest a
429), which hands back the finished JSON bytes: its second of pure-Python work never holds this process's GIL,
so the event loop (/healthz, every page) keeps answering while it runs (issue 23, H1)."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import threading
from concurrent.futures.process import BrokenProcessPool
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from .. import modelfile
from ..model_work import Kept, Slots
from ..settings import Settings
from ..sim.core.derivation import derive, math_dict
from ..sim.core.errors import SimError
from ..sim.model import tokenizer as tk
from ..sim.model.tokenizer import MAX_RETURNED_TOKENS, MAX_TEXT_CHARS
from ..sim.quant import demo_quality
from .common import BUSY, Math, counted

router = APIRouter(tags=["1 · tokens"])

DEFAULT_TEXT = "The GPU server reads your prompt as tokens, not letters. Unbelievably, 🦙 emoji split too!"
Encoding = Literal["cl100k_base", "llama3", "smollm2"]
CHAT_FORMATS = {"llama3": "Llama 3 format", "smollm2": "SmolLM2's ChatML, read from its model file"}


class TokensParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(
        DEFAULT_TEXT,
        max_length=MAX_TEXT_CHARS,
        description=(
            f"Text to tokenize (characters; at most {MAX_TEXT_CHARS:,}). In a GET the whole URL is at most "
            f"{Settings.max_url_bytes:,} bytes, and percent-encoding spends 3 bytes on a non-ASCII byte (a typical "
            "non-Latin character takes 6-12), so send long text with POST /api/tokens."
        ),
    )
    encoding: Encoding = Field(
        "cl100k_base",
        description=(
            "Vocabulary: cl100k_base (GPT-4), llama3 (Meta) or smollm2 (SmolLM2-135M-Instruct, the model on this "
            "server; needs it fetched: inside-llm fetch-model)."
        ),
    )


class TokenColumns(BaseModel):
    """The first tokens (at most MAX_RETURNED_TOKENS), one list per field: token i is index i of every list."""

    id: list[int]
    text: list[str | None] = Field(description="Each piece as text; null when it is a partial UTF-8 sequence.")
    bytes: list[str] = Field(description="Each piece's bytes in hex.")
    byte_start: list[int]
    byte_end: list[int]
    char_start: list[int]
    char_end: list[int]
    special: list[bool]


class ChatColumns(BaseModel):
    """The chat view's first tokens (at most MAX_RETURNED_TOKENS), one list per field."""

    id: list[int]
    text: list[str | None] = Field(description="Each piece as text; null when it is a partial UTF-8 sequence.")
    bytes: list[str] = Field(description="Each piece's bytes in hex.")
    special: list[bool]
    kind: list[Literal["template", "content"]]
    role: list[str]


class ChatView(BaseModel):
    encoding: Literal["llama3", "smollm2"] = Field(
        description="The chat format's vocabulary: smollm2 when the text's encoding is smollm2, else llama3."
    )
    format: str = Field(description="Which chat template wraps the message.")
    tokens: ChatColumns
    num_tokens: int = Field(description="Tokens of the whole chat view (tokens lists the first num_returned).")
    num_template_tokens: int
    num_returned: int = Field(
        description=f"Tokens listed in tokens: all of them, or the first {MAX_RETURNED_TOKENS:,}."
    )


class TokensResponse(BaseModel):
    encoding: Encoding
    tokens: TokenColumns
    num_tokens: int = Field(description="Tokens of the whole text (tokens lists the first num_returned).")
    num_returned: int = Field(
        description=f"Tokens listed in tokens: all of them, or the first {MAX_RETURNED_TOKENS:,}."
    )
    num_words: int
    num_chars: int
    num_bytes: int
    tokens_per_word: float | None
    words_per_token: float | None
    chars_per_token: float | None = Field(description="num_chars / num_tokens: meaningful in every script.")
    profile: dict = Field(
        description="What the text is made of (shares of non-space characters) and whether "
        "the 3/4-word rule of thumb applies to it (sim.model.tokenizer.text_profile)."
    )
    reference: dict = Field(
        description="Words and characters per token measured on public-domain English "
        "passages, and (corpus) on the held-out Shakespeare that ships with the package."
    )
    chat: ChatView
    math: Math


def _load(encoding: str) -> None:
    """smollm2 exists only when the server has the real model: register its vocabulary, or a 422 in words."""
    if encoding == "smollm2":
        m = modelfile.served_smollm()
        if m is None:
            raise SimError(
                "encoding",
                "The smollm2 vocabulary belongs to SmolLM2-135M-Instruct, which this server "
                f"has not fetched ({modelfile.HOW_TO_FETCH}); cl100k_base and llama3 work without it.",
            )
        tk.use_vocabulary("smollm2", m.vocab)


def reference(encoding: str) -> dict:
    """Words per token of `encoding` on the reference passages, and (`corpus`) on the held-out Shakespeare."""
    return tk.reference_ratio(encoding) | {"corpus": demo_quality.heldout_ratio(encoding)}


LONG_TEXT_CHARS = 5_000  # a text longer than this takes one of LONG_TEXTS' slots (about 0.1-1 s of CPU each)
LONG_TEXTS = Slots(2, "long texts are being tokenized")
_pool: concurrent.futures.ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


def _workers() -> concurrent.futures.ProcessPoolExecutor:
    """The worker processes for long texts, one per slot, started on first use (spawned: a clean interpreter,
    never a fork of this threaded server)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            ctx = multiprocessing.get_context("spawn")
            _pool = concurrent.futures.ProcessPoolExecutor(max_workers=LONG_TEXTS.n, mp_context=ctx)
        return _pool


def stop_workers() -> None:
    """At shutdown: the worker processes end with the server (app.py's shutdown hook)."""
    with _pool_lock:
        pool = _pool
    if pool is not None:
        _forget_workers(pool)


def _forget_workers(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    global _pool
    with _pool_lock:
        if _pool is pool:
            _pool = None
    pool.shutdown(wait=False, cancel_futures=True)


# One computation per state: the answers to the last short texts (bytes), and every recent text's counts, by
# (text, encoding); the fact reads the counts of the answer just given, the page's first request its answer.
ANSWERS, COUNTS = Kept(32), Kept(16)


def _answer(p: TokensParams) -> tuple[bytes, int, int]:
    r = _tokenize(p)
    return r.model_dump_json().encode(), r.num_tokens, r.num_words


def _tokenize_bytes(text: str, encoding: str) -> tuple[bytes, int, int]:
    """In a worker process: the whole response body, as bytes (cheap to send back, nothing to rebuild here),
    and its token and word counts."""
    return _answer(TokensParams(text=text, encoding=encoding))


def tokens_json(p: TokensParams) -> bytes:
    """The response body: a short text here, a long one in a worker process (Busy when both are in use)."""
    key = (p.text, p.encoding)
    if len(p.text) <= LONG_TEXT_CHARS:
        _load(p.encoding)  # smollm2 without the model: its 422, never a kept answer
        if (body := ANSWERS.get(key)) is None:
            body, n, words = _answer(p)
            ANSWERS.put(key, body)
            COUNTS.put(key, (n, words))
        return body
    with LONG_TEXTS.take():  # Busy (a 429 with Retry-After) when two are in progress
        _load(p.encoding)  # smollm2 without the model: the 422 is said here, not in the worker
        pool = _workers()
        try:
            body, n, words = pool.submit(_tokenize_bytes, p.text, p.encoding).result()
        except BrokenProcessPool:  # a worker died (killed, out of memory): new workers next time, this one here
            _forget_workers(pool)
            body, n, words = _answer(p)
    COUNTS.put(key, (n, words))
    return body


def _tokenize(p: TokensParams) -> TokensResponse:
    _load(p.encoding)
    cols, n = tk.token_columns(p.text, p.encoding)
    words = tk.count_words(p.text)
    chat_encoding = "smollm2" if p.encoding == "smollm2" else "llama3"
    if chat_encoding == "smollm2":
        v = modelfile.served_smollm().vocab
        chat, chat_n, chat_template = tk.chat_columns(v.chat_segments(p.text), v.piece, v.special_ids)
    else:
        chat, chat_n, chat_template = tk.chat_view(p.text)
    ref = reference(p.encoding)
    wpt = derive(
        round(words / n, 3) if n else 0,
        "words/token",
        "words_per_token = num_words / num_tokens",
        {"num_words": (words, "words"), "num_tokens": (n, "tokens")},
        ["a word is a run of non-whitespace characters"],
        ["Rule of thumb: 1 token ≈ ¾ of an English word (OpenAI, 'What are tokens and how to count them?')"],
    )
    return TokensResponse(
        encoding=p.encoding,
        tokens=cols,
        num_tokens=n,
        num_returned=len(cols["id"]),
        num_words=words,
        num_chars=len(p.text),
        num_bytes=len(p.text.encode("utf-8")),
        tokens_per_word=round(n / words, 3) if words else None,
        words_per_token=round(words / n, 3) if n else None,
        chars_per_token=round(len(p.text) / n, 3) if n else None,
        profile=tk.text_profile(p.text),
        reference=ref,
        chat=ChatView(
            encoding=chat_encoding,
            format=CHAT_FORMATS[chat_encoding],
            tokens=chat,
            num_tokens=chat_n,
            num_template_tokens=chat_template,
            num_returned=len(chat["id"]),
        ),
        math=math_dict(words_per_token=wpt),
    )


@router.get(
    "/api/tokens",
    response_model=TokensResponse,
    responses=BUSY,
    description=(
        f"Tokenize text given in the query string. The URL is at most {Settings.max_url_bytes:,} bytes as sent (a "
        f"longer one gets 414); for long text (up to {MAX_TEXT_CHARS:,} characters) use POST /api/tokens."
    ),
)
def get_tokens(p: Annotated[TokensParams, Query()]) -> Response:
    """Tokenize text given in the query string (see the description for the URL limit)."""
    return Response(content=tokens_json(p), media_type="application/json")


@router.post("/api/tokens", response_model=TokensResponse, responses=BUSY)
def post_tokens(p: TokensParams) -> Response:
    """Tokenize text given as a JSON body (for long text)."""
    return Response(content=tokens_json(p), media_type="application/json")


# How the fact names each vocabulary (the control's labels, without the parenthesis).
ENCODING_NAMES = {"cl100k_base": "cl100k_base", "llama3": "Llama 3", "smollm2": "SmolLM2"}


def facts(p: TokensParams | None = None) -> dict[str, str]:
    """The visitor's text in tokens and words, beside the reference passages' words per token (same encoding)."""
    p = p or TokensParams()
    _load(p.encoding)
    key = (p.text, p.encoding)
    if COUNTS.get(key) is None and len(p.text) <= LONG_TEXT_CHARS:
        tokens_json(p)  # the answer the page asks for next, kept: the text is tokenized once
    n, words = COUNTS.get(key) or (len(tk.encode(p.text, p.encoding)), tk.count_words(p.text))
    ref = reference(p.encoding)
    corpus = ref["corpus"]
    return {
        "encoding": ENCODING_NAMES.get(p.encoding, p.encoding),
        "text_tokens": counted(n, "token"),
        "text_words": counted(words, "word"),
        "words_per_token": f"{ref['words_per_token']:.2f}",
        "num_samples": str(len(ref["samples"])),
        "num_words": f"{ref['words']:,}",
        "corpus_words": f"{corpus['words']:,}",
        "corpus_words_per_token": f"{corpus['words_per_token']:.2f}",
    }
