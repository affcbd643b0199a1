"""/v1 (OpenAI-compatible) and /metrics (Prometheus, vLLM v1's names) on the tour's own serving engine.

What every serving engine speaks (vLLM, SGLang, llama.cpp's server, TensorRT-LLM, NIM), so that the official
`openai` client, `vllm bench serve` and guidellm can be pointed at the tour (base URL http://HOST:PORT/v1, any
API key):
- GET /v1/models: the served models (`smollm2` when its file is here, and `toy`).
- POST /v1/chat/completions: `messages` go through SmolLM2's own chat template (ChatML, read from its GGUF);
  `max_tokens` / `max_completion_tokens`, `temperature`, `top_p`, `seed`, `stop`, `stream`,
  `stream_options.include_usage`. Not streamed: one `chat.completion`. Streamed: `chat.completion.chunk`s
  (`delta.role` first, then `delta.content` pieces, `finish_reason` "stop" or "length" on the last), the usage
  chunk with empty `choices` when asked for, then `data: [DONE]`.
- POST /v1/completions: plain continuation of `prompt` (the toy model lives here too).
- Each answer carries its timings as vLLM (`metrics`) and llama.cpp (`timings`) spell them (metrics.py).
- Errors are OpenAI's `{"error": {"message", "type", "param", "code"}}`: 400 for a bad parameter (OpenAI's
  status, not the tour's 422; the message still names the field and the bound) or a prompt over the limit
  (`context_length_exceeded`), 404 for an unknown model, 429 with Retry-After when the engine's queue is full
  or this client has its share of chats, 503 with Retry-After while the model is still loading.

The same engine path and limits as GET /api/generate: the same served models (generate.generation_model), the
same caps (256 prompt tokens after the template, 512 to write), the same engine (engine_for) and the same fair
share per client address. These routes follow OpenAI's published API rather than the tour's conventions, so
they are kept out of /openapi.json (whose generic tests hold every listed parameter to the 422 convention);
tests/api/test_v1.py holds them to OpenAI's. GET /metrics (text/plain, Prometheus exposition) is read from a
CollectorRegistry made per app (metrics.registry); it carries counts and times, never a chat's text.
"""

from __future__ import annotations

import codecs
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Literal

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .. import metrics
from ..live import ClientBusy, QueueFull, Stream, engine_for, engines
from ..modelfile import ModelLoading
from ..sim.core.errors import SimError
from ..sim.model.transformer import DemoModel
from .common import in_words, label
from .generate import (
    MAX_GENERATE_PROMPT_TOKENS,
    MAX_NEW_TOKENS,
    MAX_PROMPT_CHARS,
    MIN_TEMPERATURE,
    RETRY_AFTER_S,
    generation_model,
)

router = APIRouter(tags=["OpenAI-compatible API and metrics"], include_in_schema=False)

LOAD_WAIT_S = 10.0  # a request waits this long for the model to load, then gets a 503 with Retry-After
LOAD_RETRY_AFTER_S = 5
MAX_MESSAGES = 32
MAX_STOPS = 4  # OpenAI's limit on stop sequences
MAX_STOP_CHARS = 64
MAX_SEED = 2**63 - 1
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
OWNER = "inside-llm"
_STARTED = int(time.time())
_END = object()
# what each id is, for /v1/models (`root`: where its weights come from)
ROOTS = {"smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct", metrics.TOY_ID: "the tour's demo transformer"}


class V1Error(Exception):
    """An answer in OpenAI's error shape."""

    def __init__(self, status: int, message: str, type_: str, param: str | None = None, code: str | None = None,
                 retry_after: int | None = None):  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code
        self.retry_after = retry_after

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        headers = {"retry-after": str(self.retry_after)} if self.retry_after else {}
        return JSONResponse(self.body(), status_code=self.status, headers=headers | {"cache-control": "no-store"})


def bad(message: str, param: str | None = None, code: str | None = "invalid_value") -> V1Error:
    return V1Error(400, message, "invalid_request_error", param, code)


# ---- requests ---------------------------------------------------------------------------------------------


class _Body(BaseModel):
    """What both endpoints share. Unknown fields are ignored (as vLLM does: clients send many); the few whose
    effect this server cannot give (n > 1, logprobs, tools) are refused by name."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = Field(None, max_length=200, description="A model id from GET /v1/models.")
    max_tokens: int | None = Field(None, ge=1, le=MAX_NEW_TOKENS, description=f"Tokens to write (1-{MAX_NEW_TOKENS}).")
    temperature: float = Field(1.0, ge=0, le=2, description="Sampling temperature (0 = greedy, else 0.05-2).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling: the likeliest tokens whose p sums to top_p.")
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="Sampling seed (same seed, same tokens).")
    stop: str | list[Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS)]] | None = Field(
        None, description=f"Up to {MAX_STOPS} sequences where the answer ends (not included)."
    )
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=1, description="Answers per request (this server writes 1).")
    logprobs: bool | int | None = None

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, v: float) -> float:
        if 0 < v < MIN_TEMPERATURE:
            raise SimError("temperature", f"The temperature must be 0 (greedy) or at least {MIN_TEMPERATURE:g}, not {v:g}.")  # fmt: skip
        return v

    @field_validator("stop")
    @classmethod
    def _stop(cls, v):
        stops = [v] if isinstance(v, str) else list(v or [])
        if len(stops) > MAX_STOPS:
            raise SimError("stop", f"The stop sequences must be at most {MAX_STOPS}, not {len(stops)}.")
        if any(not s or len(s) > MAX_STOP_CHARS for s in stops):
            raise SimError("stop", f"A stop sequence must be 1 to {MAX_STOP_CHARS} characters long.")
        return stops

    @field_validator("logprobs")
    @classmethod
    def _logprobs(cls, v):
        if v:
            raise SimError("logprobs", "This server does not return log probabilities (logprobs must be false).")
        return v


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str = Field(max_length=MAX_PROMPT_CHARS)


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant"]
    content: Annotated[str, Field(max_length=MAX_PROMPT_CHARS)] | list[TextPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text for p in self.content)
        return self.content or ""


class ChatBody(_Body):
    messages: list[Message] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_NEW_TOKENS)
    tools: list | None = None

    @field_validator("tools")
    @classmethod
    def _tools(cls, v):
        if v:
            raise SimError("tools", "This server's model does not call tools (tools must be absent).")
        return v


class CompletionBody(_Body):
    prompt: Annotated[str, Field(max_length=MAX_PROMPT_CHARS)] | list[Annotated[str, Field(max_length=MAX_PROMPT_CHARS)]]  # fmt: skip
    echo: bool = False

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v):
        if isinstance(v, list):
            if len(v) != 1:
                raise SimError("prompt", f"This server completes one prompt per request, not {len(v)}.")
            v = v[0]
        return v

    @field_validator("echo")
    @classmethod
    def _echo(cls, v):
        if v:
            raise SimError("echo", "This server does not echo the prompt (echo must be false).")
        return v


_Body.model_rebuild()


async def _parse(request: Request, kind: type[_Body]) -> _Body:
    """The request's JSON body as `kind`, or a 400 in OpenAI's shape naming the field and the bound."""
    try:
        data = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError):
        raise bad("The request body is not valid JSON.", code=None) from None
    try:
        return kind.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc.errors()[0]) from None


def _invalid(err: dict) -> V1Error:
    """One pydantic error as OpenAI's 400: `param` the field's path (messages.0.role), the message in the tour's
    words (common.in_words), union branches (str | list of parts) left out of both."""
    loc = [x for x in err.get("loc", ()) if isinstance(x, int) or (x.isidentifier() and x not in _TYPE_NAMES)]
    err = {**err, "loc": tuple(loc)}
    message, field, _ = in_words(err)
    kind, ctx = err.get("type"), err.get("ctx") or {}
    if kind in ("too_short", "too_long"):  # a list (messages, stop) out of its bounds
        short = kind == "too_short"
        n = ctx.get("min_length" if short else "max_length")
        message = f"{label(field)} must hold {'at least' if short else 'at most'} {n} items."
    elif kind == "list_type":
        message = f"{label(field)} must be a list."
    elif kind == "model_type":
        message = f"{label(field)} must be a JSON object." if field else "The request body must be a JSON object."
    param = ".".join(map(str, loc)) or None
    return bad(message, param, "invalid_value" if param else None)


_TYPE_NAMES = {"str", "int", "float", "bool", "list", "dict"}


# ---- the model and the prompt -----------------------------------------------------------------------------


async def _model(name: str | None, chat: bool) -> DemoModel:
    """The served model for `name` (None: the chat model when it is here, else the toy), loaded in a worker
    thread; a 404 for a model this server does not serve, a 503 when loading takes over LOAD_WAIT_S."""
    if name is not None and name not in (*ROOTS, ROOTS["smollm2"]):
        raise V1Error(404, f"The model '{name}' does not exist here; GET /v1/models lists them.",
                      "invalid_request_error", "model", "model_not_found")  # fmt: skip
    want = "toy" if name == metrics.TOY_ID else "smollm2" if name else "auto"
    with anyio.move_on_after(LOAD_WAIT_S):
        try:
            m = await anyio.to_thread.run_sync(generation_model, want, abandon_on_cancel=True)
        except SimError as e:  # smollm2 asked for by name on a server without its file
            raise V1Error(404, e.message, "invalid_request_error", "model", "model_not_found") from None
        if chat and not hasattr(m, "chat_ids"):
            raise bad("The toy model has no chat template: send its text to POST /v1/completions as `prompt`.", "model")
        return m
    raise V1Error(503, "The model is still loading; try again in a few seconds.", "server_error", None,
                  "model_loading", LOAD_RETRY_AFTER_S)  # fmt: skip


def _check_length(m: DemoModel, ids: list[int], max_tokens: int | None, default: int, param: str) -> int:
    """max_tokens to ask the engine for; a 400 (context_length_exceeded) when the prompt is over the server's
    cap or prompt + answer over the model's context."""
    if not ids:
        raise bad("The prompt must hold at least 1 token.", param)
    if len(ids) > MAX_GENERATE_PROMPT_TOKENS:
        raise bad(
            f"The prompt must be at most {MAX_GENERATE_PROMPT_TOKENS} tokens on this server; it is {len(ids)} "
            f"in {metrics.model_name(m)}'s tokens{', the chat template included' if hasattr(m, 'chat_ids') else ''}.",
            param,
            "context_length_exceeded",
        )
    room = m.config.max_seq_len - len(ids)
    if max_tokens is None:
        return max(1, min(default, room))
    if max_tokens > room:
        raise bad(
            f"The prompt ({len(ids)} token{'s' * (len(ids) != 1)}) and max_tokens ({max_tokens}) must fit "
            f"{metrics.model_name(m)}'s "
            f"context of {m.config.max_seq_len} tokens.",
            "max_tokens",
            "context_length_exceeded",
        )
    return max_tokens


def _submit(request: Request, m: DemoModel, ids: list[int], b: _Body, max_tokens: int) -> Stream:
    """The chat into the model's engine (the same as /api/generate's); a 429 when it cannot wait there."""
    client = request.client.host if request.client else "?"
    seed = b.seed if b.seed is not None else secrets.randbits(31)  # OpenAI: unseeded sampling is not repeatable
    try:
        return engine_for(m).submit(ids, max_tokens, b.temperature, None, seed % 2**32, client=client, top_p=b.top_p)
    except (QueueFull, ClientBusy) as busy:
        raise V1Error(429, f"The server is busy: {busy}. Try again in a few seconds.", "requests", None,
                      "rate_limit_exceeded", RETRY_AFTER_S) from None  # fmt: skip


# ---- reading the engine's tokens as text ------------------------------------------------------------------


class Answer:
    """The text of one chat as its tokens arrive: partial UTF-8 held back, and the tail that could still become
    a stop sequence held back until it cannot (so no streamed piece is ever taken back)."""

    def __init__(self, m: DemoModel, stream: Stream, stops: list[str]):
        self.m, self.stream, self.stops = m, stream, stops
        self.utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text, self.sent, self.tokens = "", 0, 0
        self.finish_reason = "length"

    async def pieces(self, request: Request) -> AsyncIterator[str]:
        """New text as it becomes final; then finish_reason and tokens are set."""
        stops_at = getattr(self.m, "stop_ids", frozenset())
        while True:
            if await request.is_disconnected():
                self.finish_reason = "abort"
                return
            token = await anyio.to_thread.run_sync(next, self.stream, _END)
            if token is None:  # still waiting or reading the prompt: look at the client again
                continue
            if token is _END:
                reason = self.stream.finish_reason
                if reason == "error":
                    raise RuntimeError("the model failed")
                if reason == "stop":  # its stop token: written, counted, not shown
                    self.tokens += 1
                self.finish_reason = "stop" if reason == "stop" else "length"
                self.text += self.utf8.decode(b"", final=True)
                if tail := self._cut(len(self.text)):
                    yield tail
                return
            if token in stops_at:
                continue
            self.tokens += 1
            self.text += self.utf8.decode(self.m.piece(token))
            if (hit := self._stop_hit()) is not None:
                self.finish_reason, self.stream.seq.stopped_by_text = "stop", True
                self.stream.close()  # the engine drops the chat and frees its pages at its next step
                if piece := self._cut(hit):
                    yield piece
                return
            if piece := self._cut(self._safe()):
                yield piece

    def _stop_hit(self) -> int | None:
        hits = [i for s in self.stops if (i := self.text.find(s, self.sent)) >= 0]
        return min(hits) if hits else None

    def _safe(self) -> int:
        """Where the text may be sent up to: before any tail that is the start of a stop sequence."""
        safe = len(self.text)
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.text) - self.sent), 0, -1):
                if s.startswith(self.text[-k:]):
                    safe = min(safe, len(self.text) - k)
                    break
        return safe

    def _cut(self, end: int) -> str:
        """The text from what was sent up to `end`, now sent; past `end` is dropped when a stop ends it."""
        piece, self.sent = self.text[self.sent : end], max(self.sent, end)
        if self.finish_reason == "stop" and end < len(self.text):
            self.text = self.text[:end]
        return piece

    def usage(self, prompt_tokens: int) -> dict:
        return {"prompt_tokens": prompt_tokens, "completion_tokens": self.tokens,
                "total_tokens": prompt_tokens + self.tokens}  # fmt: skip


def _sse(data: dict | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


async def _respond(request: Request, m: DemoModel, ids: list[int], b: _Body, max_tokens: int, chat: bool):
    stream = _submit(request, m, ids, b, max_tokens)
    answer = Answer(m, stream, b.stop or [])
    rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
    head = {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
            "model": metrics.model_name(m)}  # fmt: skip
    if not b.stream:
        try:
            text = "".join([p async for p in answer.pieces(request)])
        except RuntimeError:
            raise V1Error(500, "The model failed while writing.", "server_error") from None
        finally:
            stream.close()
        choice = {"index": 0, "finish_reason": answer.finish_reason, "logprobs": None}
        choice |= {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        timings = metrics.request_timings(stream.seq, answer.tokens)
        return JSONResponse(
            head | {"choices": [choice], "usage": answer.usage(len(ids))} | timings,
            headers={"cache-control": "no-store"},
        )
    include_usage = bool(b.stream_options and b.stream_options.include_usage)
    return StreamingResponse(
        _chunks(request, answer, head, len(ids), chat, include_usage),
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


async def _chunks(request: Request, answer: Answer, head: dict, prompt_tokens: int, chat: bool, include_usage: bool):
    head = head | {"object": "chat.completion.chunk" if chat else "text_completion"}
    extra = {"usage": None} if include_usage else {}

    def chunk(piece: dict | None, finish: str | None = None) -> dict:
        choice = {"index": 0, "finish_reason": finish, "logprobs": None}
        choice |= {"delta": piece or {}} if chat else {"text": (piece or {}).get("content", "")}
        return head | {"choices": [choice]} | extra

    try:
        if chat:
            yield _sse(chunk({"role": "assistant", "content": ""}))
        try:
            async for piece in answer.pieces(request):
                yield _sse(chunk({"content": piece}))
        except RuntimeError:
            yield _sse({"error": {"message": "The model failed while writing.", "type": "server_error",
                                  "param": None, "code": None}})  # fmt: skip
            return
        if answer.finish_reason == "abort":
            return
        timings = metrics.request_timings(answer.stream.seq, answer.tokens)
        last = chunk(None, answer.finish_reason)
        yield _sse(last if include_usage else last | timings)
        if include_usage:
            yield _sse(head | {"choices": [], "usage": answer.usage(prompt_tokens)} | timings)
        yield _sse("[DONE]")
    finally:
        answer.stream.close()


# ---- the routes -------------------------------------------------------------------------------------------


@router.get("/v1/models")
async def get_models() -> JSONResponse:
    """The served models, OpenAI's list shape (plus vLLM's max_model_len and root)."""
    try:
        with anyio.fail_after(LOAD_WAIT_S):
            chat = await anyio.to_thread.run_sync(generation_model, "auto", abandon_on_cancel=True)
    except TimeoutError:
        return V1Error(503, "The model is still loading; try again in a few seconds.", "server_error", None,
                       "model_loading", LOAD_RETRY_AFTER_S).response()  # fmt: skip
    toy = await anyio.to_thread.run_sync(generation_model, "toy")
    served = [m for m in (chat, toy) if hasattr(m, "chat_ids")] + [toy]
    data = [
        {
            "id": metrics.model_name(m),
            "object": "model",
            "created": _STARTED,
            "owned_by": OWNER,
            "root": ROOTS[metrics.model_name(m)],
            "max_model_len": min(m.config.max_seq_len, MAX_GENERATE_PROMPT_TOKENS + MAX_NEW_TOKENS),
        }
        for m in served
    ]
    return JSONResponse({"object": "list", "data": data})


@router.post("/v1/chat/completions")
async def post_chat_completions(request: Request):
    try:
        b = await _parse(request, ChatBody)
        m = await _model(b.model, chat=True)
        messages = [{"role": "system" if x.role == "developer" else x.role, "content": x.text()} for x in b.messages]
        ids = m.vocab.encode(m.vocab.chat_prompt(messages))
        max_tokens = _check_length(m, ids, b.max_completion_tokens or b.max_tokens, MAX_NEW_TOKENS, "messages")
        return await _respond(request, m, ids, b, max_tokens, chat=True)
    except V1Error as e:
        return e.response()


@router.post("/v1/completions")
async def post_completions(request: Request):
    try:
        b = await _parse(request, CompletionBody)
        m = await _model(b.model, chat=False)
        ids = m.encode(b.prompt)
        max_tokens = _check_length(m, ids, b.max_tokens, COMPLETIONS_DEFAULT_MAX_TOKENS, "prompt")
        return await _respond(request, m, ids, b, max_tokens, chat=False)
    except V1Error as e:
        return e.response()


@router.get("/metrics")
async def get_metrics(request: Request) -> Response:
    """Prometheus text exposition of every engine in this process, in vLLM v1's names (metrics.py)."""
    reg = getattr(request.app.state, "metrics_registry", None)
    if reg is None:
        reg = request.app.state.metrics_registry = metrics.registry(engines)
    await anyio.to_thread.run_sync(_served_engine)
    body = await anyio.to_thread.run_sync(generate_latest, reg)
    return Response(body, media_type=CONTENT_TYPE_LATEST, headers={"cache-control": "no-store"})


def _served_engine() -> None:
    """The chat model's engine exists from the first scrape on (its series read 0 before the first chat). While
    the model still loads after a start, a scrape answers with the series it has: /metrics never refuses."""
    try:
        engine_for(generation_model("auto"))
    except ModelLoading:
        pass
