"""GET /api/generate: a model on this server writes, one server-sent event per token (chapter 11's chat box).

model=smollm2 (the default when its file is fetched): SmolLM2-135M-Instruct answers `prompt` as a user
turn in its own chat template and stops at <|im_end|>. model=toy: the shipped demo transformer continues
`prompt` as plain text. The demo model's helpers shared with chapters 2 and 3 live in api/demo_model.py.
Unlike the chapter endpoints this stream is not a pure function of its URL in time (its pacing and
elapsed_ms are wall-clock), though its tokens are (seeded sampling); it is sent with no-store.
"""

from __future__ import annotations

import codecs
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Literal

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from .. import modelfile
from ..live import ClientBusy, QueueFull, Stream, engine_for
from ..sim.core.errors import SimError
from ..sim.model.transformer import DemoModel
from .demo_model import served_model

router = APIRouter(tags=["demo model · generate"])

MAX_GENERATE_PROMPT_TOKENS = 256
MAX_NEW_TOKENS = 512
MAX_TOKENS_PER_S = 200.0
MAX_PROMPT_CHARS = 4000
_END = object()
RETRY_AFTER_S = 2  # what a 429 (every seat and the queue are taken, or this client has its share) asks a client to wait
MIN_TOKENS_PER_S = 0.5  # a paced stream ends within max_tokens / 0.5 s (1,024 s at most)
MIN_TEMPERATURE = 0.05  # below this, softmax(logits / T) overflows float32; 0 means greedy
MAX_NO_REPEAT_NGRAM = 16
DEFAULT_PROMPT = "What is the capital of France?"
ModelName = Literal["auto", "smollm2", "toy"]


# ---- the served model and prompts ------------------------------------------------------------


def generation_model(name: str = "auto") -> DemoModel:
    """The model that writes: auto (smollm2 when this server has it, else the toy), or exactly the one
    named; smollm2 asked for by name on a server without it is a SimError on `model` (a 422 in words)."""
    if name != "toy":
        modelfile.check_not_loading()  # 503 while the model loads at start-up (issue 23, M6)
    s = served_model("toy" if name == "toy" else "smollm2")  # demo_model.served_model: falls back to the toy
    if name == "smollm2" and s.served != "smollm2":
        raise SimError(
            "model",
            f"SmolLM2 is not installed on this server ({modelfile.HOW_TO_FETCH}); the toy model works without it.",
        )
    return s.model


def generation_ids(m: DemoModel, prompt: str) -> list[int]:
    """What the model reads: a chat model gets prompt as a user turn in its chat template; the toy, the text.
    ValueError naming `prompt` and the bound unless that is 1..MAX_GENERATE_PROMPT_TOKENS tokens."""
    if not prompt.strip():
        raise SimError("prompt", "The prompt must hold at least 1 token.")
    if hasattr(m, "chat_ids"):
        ids, where = m.chat_ids(prompt), f"{m.name}'s chat template"
    else:
        ids, where = m.encode(prompt), "the demo model"
    if len(ids) > MAX_GENERATE_PROMPT_TOKENS:
        raise SimError(
            "prompt", f"The prompt must be at most {MAX_GENERATE_PROMPT_TOKENS} tokens; it is {len(ids)} in {where}."
        )
    return ids


# ---- the stream --------------------------------------------------------------------------------

CONTRACT = """Streams a model's answer to `prompt` as server-sent events (text/event-stream).

`model=smollm2` (what the default `model=auto` picks when the server has fetched it; `inside-llm fetch-model`): SmolLM2-135M-Instruct
reads `prompt` as a user turn in its own chat template (ChatML) and answers until `<|im_end|>` or `max_tokens`.
`model=toy`: the shipped demo transformer (6M parameters, trained on Shakespeare) continues `prompt` as text;
it also serves when smollm2 is absent. Both run in numpy on this server's CPU.

Events, in order (each `data:` is one JSON object):

* `start` — `{model, num_prompt_tokens, max_tokens, tokens_per_s, temperature, top_k, seed, repetition_penalty,
  no_repeat_ngram, template}` once,
  before any work; `template` is the exact text the model reads (the chat template applied) or null for the toy.
* `token` — one per generated token: `{index, id, cl100k_id, text, elapsed_ms}`. `index` counts from 0;
  `id` is the model's id and `cl100k_id` the cl100k_base id chapter 1 shows (null for smollm2); `text` is the decoded
  piece, with partial UTF-8 held back until its character completes (so it may be `""`), so that the
  concatenated `text` of all token events equals the decoded answer exactly; `elapsed_ms` counts from
  the start of the stream (after the prompt is checked).
* `done` — last: `{num_prompt_tokens, num_tokens, finish_reason ("stop" at <|im_end|>, else "length"), elapsed_ms, ttft_ms,
  tokens_per_s, decode_tokens_per_s}`; `ttft_ms` is the time to the first token (prefill included),
  `tokens_per_s` = num_tokens / elapsed, `decode_tokens_per_s` = (num_tokens - 1) / (last - first token time).
* `error` — `{detail}` if the model fails mid-stream (the stream then ends).

Pacing: token i is sent no earlier than i / tokens_per_s seconds after the first (0 = as fast as the
CPU allows). Sampling is seeded (temperature 0 = greedy), so the same URL gives the same tokens.
`repetition_penalty` (CTRL's, over the last 64 tokens, as llama.cpp's repeat_penalty) and `no_repeat_ngram`
(Hugging Face's no_repeat_ngram_size) are a chat UI's guards against loops; the defaults (1, 0) leave the
model's own choice. Chapter 11's chat asks for 1.1 and 4.
Bad parameters get a 422 (JSON) before the stream opens. Every chat of a model is served by one engine
that batches them continuously (see `GET /api/engine`): a chat takes an idle seat at once, else waits in its
queue, and when seats free up the client with the fewest chats running goes first. Only when every seat and
every place in the queue are taken, or this client already has its share of the queue waiting, is the answer
a 429 with Retry-After. The client is the connection's address (or, behind a proxy named with
`inside-llm serve --forwarded-allow-ips`, the address that proxy forwards).
The stream stops, and the model stops working, when the client disconnects. With an EventSource, call
`close()` on `done` or `error`: browsers otherwise reconnect when the stream ends and would start over.
Example: `const es = new EventSource('/api/generate?prompt=...&max_tokens=64&tokens_per_s=20');
es.addEventListener('token', (e) => append(JSON.parse(e.data).text));
es.addEventListener('done', (e) => { es.close(); finish(JSON.parse(e.data)); });`
"""


class GenerateParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(
        DEFAULT_PROMPT,
        max_length=MAX_PROMPT_CHARS,
        description=(
            f"The question (smollm2) or text to continue (toy) (characters; at most {MAX_PROMPT_CHARS:,}, and "
            f"1-{MAX_GENERATE_PROMPT_TOKENS} tokens of what the model reads, the chat template included)."
        ),
    )
    model: ModelName = Field(
        "auto",
        description=(
            "smollm2 (SmolLM2-135M-Instruct, a real chat model), toy (the demo transformer), or auto: "
            "smollm2 when the server has fetched it, else toy."
        ),
    )
    max_tokens: int = Field(
        64, ge=1, le=MAX_NEW_TOKENS, description=f"Tokens to generate (tokens; 1-{MAX_NEW_TOKENS})."
    )
    tokens_per_s: float = Field(
        0.0,
        ge=0,
        le=MAX_TOKENS_PER_S,
        description=(
            f"Pace of the stream (tokens/s; 0 = as fast as possible, else {MIN_TOKENS_PER_S:g}-{MAX_TOKENS_PER_S:g})."
        ),
    )
    temperature: float = Field(
        0.0, ge=0, le=2, description=(f"Sampling temperature (no unit; 0 = greedy, else {MIN_TEMPERATURE:g}-2).")
    )
    top_k: int = Field(40, ge=1, le=1000, description="Sample among the k likeliest tokens (tokens; 1-1000).")
    seed: int = Field(
        0, ge=0, le=2**31 - 1, description="Sampling seed (no unit; 0-2147483647; same seed, same tokens)."
    )
    repetition_penalty: float = Field(
        1.0,
        ge=1,
        le=2,
        description="Divides the logit of every token among the last 64 (no unit; 1-2; 1 = none).",
    )
    no_repeat_ngram: int = Field(
        0,
        ge=0,
        le=MAX_NO_REPEAT_NGRAM,
        description=f"Never repeat an n-gram of this many tokens (tokens; 0 = off, else 2-{MAX_NO_REPEAT_NGRAM}).",
    )

    @field_validator("no_repeat_ngram")
    @classmethod
    def _ngram(cls, v: int) -> int:
        if v == 1:
            raise SimError("no_repeat_ngram", "no_repeat_ngram must be 0 (off) or 2-16 tokens, not 1.")
        return v

    @field_validator("tokens_per_s")
    @classmethod
    def _pace(cls, v: float) -> float:
        if 0 < v < MIN_TOKENS_PER_S:
            raise SimError(
                "tokens_per_s",
                f"The pace must be 0 (as fast as possible) or at least {MIN_TOKENS_PER_S:g} tokens/s, not {v:g}.",
            )
        return v

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, v: float) -> float:
        if 0 < v < MIN_TEMPERATURE:
            raise SimError(
                "temperature", f"The temperature must be 0 (greedy) or at least {MIN_TEMPERATURE:g}, not {v:g}."
            )
        return v


_active = {"streams": 0}


def active_streams() -> int:
    """Generations running now in this process (tests check that a disconnect ends one)."""
    return _active["streams"]


def sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


@router.get(
    "/api/generate",
    response_class=StreamingResponse,
    description=CONTRACT,
    summary="Stream the demo model's tokens (server-sent events)",
    responses={
        200: {
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
            "description": "Events start, token…, done (see above).",
        },
        429: {
            "description": "Every seat and place in the engine's queue are taken, or this client has its "
            "share of the queue waiting; retry after Retry-After seconds."
        },
        503: {"description": "SmolLM2 is still loading after a start; retry after Retry-After seconds."},
    },
)
async def get_generate(request: Request, p: Annotated[GenerateParams, Query()]):
    client = request.client.host if request.client else "?"
    m = await anyio.to_thread.run_sync(generation_model, p.model)  # the first call loads it: not on the event loop
    ids = generation_ids(m, p.prompt)
    try:  # the engine batches every chat of this model into one forward pass per step (engine.py)
        steps = engine_for(m).submit(
            ids,
            p.max_tokens,
            p.temperature,
            None if p.temperature == 0 else p.top_k,
            p.seed,
            client=client,
            repetition_penalty=p.repetition_penalty,
            no_repeat_ngram=p.no_repeat_ngram,
        )
    except (QueueFull, ClientBusy) as busy:
        return JSONResponse(
            {"detail": f"The server is busy: {busy}. Try again in a few seconds."},
            status_code=429,
            headers={"retry-after": str(RETRY_AFTER_S)},
        )
    return StreamingResponse(
        _events(request, m, ids, p, steps, client),
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


async def _events(
    request: Request, m: DemoModel, ids: list[int], p: GenerateParams, steps: Stream, client: str = "local"
) -> AsyncIterator[bytes]:
    _active["streams"] += 1
    try:
        t0 = time.perf_counter()
        ms = lambda t: round(1e3 * (t - t0), 2)  # noqa: E731
        yield sse(
            "start",
            {
                "model": m.name,
                "num_prompt_tokens": len(ids),
                "max_tokens": p.max_tokens,
                "tokens_per_s": p.tokens_per_s,
                "temperature": p.temperature,
                "top_k": p.top_k,
                "seed": p.seed,
                "repetition_penalty": p.repetition_penalty,
                "no_repeat_ngram": p.no_repeat_ngram,
                "template": m.decode(ids) if hasattr(m, "chat_ids") else None,
            },
        )
        utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        first = last = t0
        n, finish, stops = 0, "length", getattr(m, "stop_ids", frozenset())
        while n < p.max_tokens:
            if await request.is_disconnected():
                return
            try:
                token = await anyio.to_thread.run_sync(next, steps, _END)
            except Exception as e:  # a broken model must end the stream with a reason, not a 500 mid-body
                yield sse("error", {"detail": f"the model failed ({type(e).__name__})"})
                return
            if token is None:  # still waiting or reading the prompt; look at the client again
                continue
            if token is _END:
                finish = steps.finish_reason or finish
                if finish == "error":
                    yield sse("error", {"detail": "the model failed"})
                    return
                break
            if token in stops:  # the end of the assistant's turn: not shown
                finish = "stop"
                break
            last = time.perf_counter()
            if n == 0:
                first = last
            elif p.tokens_per_s > 0 and (wait := first + n / p.tokens_per_s - last) > 0:
                await anyio.sleep(wait)
                last = time.perf_counter()
            text = utf8.decode(m.piece(token), final=n + 1 == p.max_tokens)
            yield sse(
                "token",
                {"index": n, "id": token, "cl100k_id": m.cl100k_ids([token])[0], "text": text, "elapsed_ms": ms(last)},
            )
            n += 1
        elapsed = max(last - t0, 1e-9)
        yield sse(
            "done",
            {
                "num_prompt_tokens": len(ids),
                "num_tokens": n,
                "finish_reason": finish,
                "elapsed_ms": ms(last),
                "ttft_ms": ms(first) if n else None,
                "tokens_per_s": round(n / elapsed, 2),
                "decode_tokens_per_s": round((n - 1) / (last - first), 2) if n > 1 and last > first else None,
            },
        )
    finally:
        _active["streams"] -= 1
        steps.close()
