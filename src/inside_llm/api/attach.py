"""GET /api/attach and /api/attach/{name}: the servers this tour's operator attached (`inside-llm serve --attach
NAME=URL`), each as the poller last read it (attach/poller.py): its status and what went wrong in words, and its
/metrics mapped onto one Reading (attach/engines.py) whose figures name the metric they came from, with what its JSON
pages add (GET /v1/models; llama.cpp's /slots and /props: attach/endpoints.py), and each such page's own status.

POST /api/attach/{name}/chat: chapter 11's question relayed to that server's /v1/chat/completions and streamed
back (server-sent events), measured as it passes, beside the cost model's prediction for the setup the visitor
says it runs on (attach/chat.py). POST and GET /api/attach/{name}/measure: a bounded measure run against it, only
when the operator allowed it (`serve --attach-measure`; else 403), one at a time per server (else 409), its
progress and result table polled (attach/jobs.py).

No parameter of these routes names a URL: a visitor picks an attached server by its name only, and any query
parameter is refused (422 in words), so nothing a request carries reaches the network (the question's text goes
to the operator's server as the question). An unknown name is a 404 that lists the names there are. Answers are
live: `Cache-Control: no-store`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..attach import chat, jobs, measure
from ..attach.engines import Reading
from ..attach.poller import FETCH_TIMEOUT_S, MAX_PAGE_BYTES, PAGES, POLL_INTERVAL_S, STATUSES
from ..attach.targets import NAME_RULE
from ..sim.core.errors import SimError
from ..sim.core.result import as_json
from ..sim.cost import serving
from ..sim.hardware import catalog
from .common import KvPrecision, WeightPrecision
from .generate import sse

router = APIRouter(tags=["attached servers"])
NO_STORE = {"cache-control": "no-store"}
HOW = (
    "The operator attaches servers when starting the tour: inside-llm serve --attach NAME=URL (repeatable), "
    "or INSIDE_LLM_ATTACH='NAME=URL ...'. A page can only pick one by its name."
)


class PageRead(BaseModel):
    path: Literal[tuple(PAGES.values())] = Field(  # type: ignore[valid-type]
        description="The JSON page beside /metrics: /v1/models (every engine), /slots and /props (llama.cpp)."
    )
    status: Literal[STATUSES] = Field(description="As the server's status, for this page alone.")  # type: ignore[valid-type]
    error: str | None = Field(description="What went wrong, in words (null when ok).")
    failures: int = Field(description="Failures in a row; its next try waits interval x 2^failures (no unit).")
    checked_s_ago: float | None = Field(description="Seconds since it was last asked for.")
    last_ok_s_ago: float | None = Field(description="Seconds since it last answered well.")
    retry_in_s: float | None = Field(description="Seconds until its next try while its circuit is open.")


class AttachedServer(BaseModel):
    name: str = Field(description="The name the operator gave it.")
    status: Literal[STATUSES] = Field(  # type: ignore[valid-type]
        description="ok; waiting (not polled yet); down (nothing answers); slow (no whole page within the "
        "deadline); refused (an HTTP error or a redirect); garbled (not exposition text, or too big); unknown "
        "(no known engine's metrics)."
    )
    error: str | None = Field(description="What went wrong, in words (null when ok).")
    stale: bool = Field(description="The reading is the last good one, from before the current failure.")
    polls: int = Field(description="Tries so far (no unit).")
    failures: int = Field(description="Failures in a row; the next try waits interval x 2^failures (no unit).")
    checked_s_ago: float | None = Field(description="Seconds since the last try.")
    last_ok_s_ago: float | None = Field(description="Seconds since the last good page.")
    retry_in_s: float | None = Field(description="Seconds until the next try while the circuit is open.")
    reading: Reading | None = Field(description="The server's figures, each naming its metric.")
    pages: list[PageRead] = Field(description="The JSON pages beside /metrics asked for so far, each with its status.")


class AttachList(BaseModel):
    servers: list[AttachedServer] = Field(description="Every attached server, in the operator's order.")
    poll_interval_s: float = Field(description="Seconds between polls of a healthy server.")
    fetch_timeout_s: float = Field(description="Deadline for one page, connect and read (s).")
    max_page_bytes: int = Field(description="Largest /metrics page read (bytes).")
    how: str = Field(description="How a server gets attached.")
    measure: list[str] = Field(
        description="The servers the tour may start measure runs against (the operator's --attach-measure)."
    )
    chat: dict[str, float] = Field(description="The bounds of POST /api/attach/{name}/chat.")


def _poller(request: Request):
    poller = getattr(request.app.state, "attach", None)
    if poller is not None:
        poller.ensure_started()
    return poller


def _no_params(request: Request) -> JSONResponse | None:
    if not request.query_params:
        return None
    key = next(iter(request.query_params))
    msg = (
        f"'{key}' is not a setting of this endpoint: it takes no parameters. The servers it reads are set by "
        "the tour's operator (--attach NAME=URL), never by a request."
    )
    err = {"type": "extra_forbidden", "loc": ["query", key], "field": key, "msg": msg, "input": None}
    return JSONResponse(status_code=422, content={"detail": [err]}, headers=NO_STORE)


def query_free(request: Request) -> None:
    """A dependency of the POST routes: any query parameter is refused (422 in words) before the body is read."""
    if request.query_params:
        key = next(iter(request.query_params))
        msg = f"'{key}' is not a setting of this endpoint: the server it reaches is the operator's, never a request's."
        raise RequestValidationError([{"type": "extra_forbidden", "loc": ("query", key), "msg": msg, "input": None}])


def _allowed(request: Request) -> tuple[str, ...]:
    return tuple(getattr(request.app.state.settings, "attach_measure", ()) or ())


def _unknown(poller, name: str) -> JSONResponse:
    names = ", ".join(poller.names) if poller and poller.names else None
    there = f"the attached servers are {names}" if names else "no server is attached"
    detail = f"No attached server is named '{name[:32]}': {there}. {HOW}"
    return JSONResponse(status_code=404, content={"detail": detail}, headers=NO_STORE)


def _out(view: dict) -> dict:
    return {**view, "reading": None if view["reading"] is None else as_json(view["reading"])}


@router.get("/api/attach", response_model=AttachList, summary="The servers the operator attached, as last read")
async def get_attach(request: Request):
    """Reads only the poller's state: never waits for an attached server."""
    if (refusal := _no_params(request)) is not None:
        return refusal
    poller = _poller(request)
    body = {
        "servers": [_out(v) for v in poller.views()] if poller else [],
        "poll_interval_s": POLL_INTERVAL_S,
        "fetch_timeout_s": FETCH_TIMEOUT_S,
        "max_page_bytes": MAX_PAGE_BYTES,
        "how": HOW,
        "measure": [n for n in poller.names if n in _allowed(request)] if poller else [],
        "chat": CHAT_BOUNDS,
    }
    return JSONResponse(AttachList.model_validate(body).model_dump(mode="json"), headers=NO_STORE)


@router.get(
    "/api/attach/{name}",
    response_model=AttachedServer,
    summary="One attached server, by the name the operator gave it",
    responses={404: {"description": "No attached server has that name (the names there are, in words)."}},
)
async def get_attach_one(
    request: Request,
    name: Annotated[str, Path(min_length=1, max_length=32, description=f"The server's name: {NAME_RULE}.")],
):
    if (refusal := _no_params(request)) is not None:
        return refusal
    poller = _poller(request)
    view = poller.view(name) if poller else None
    if view is None:
        return _unknown(poller, name)
    return JSONResponse(AttachedServer.model_validate(_out(view)).model_dump(mode="json"), headers=NO_STORE)


# ---- chapter 11: the visitor's question through an attached server ------------------------------------------

Name = Annotated[str, Path(min_length=1, max_length=32, description=f"The server's name: {NAME_RULE}.")]
CHAT_BOUNDS = {
    "max_prompt_chars": chat.MAX_PROMPT_CHARS,
    "max_tokens": chat.MAX_TOKENS,
    "total_time_s": chat.TOTAL_TIME_S,
    "max_stream_bytes": chat.MAX_STREAM_BYTES,
    "per_client": chat.PER_CLIENT,
    "per_target": chat.PER_TARGET,
}
ModelId = Literal[tuple(catalog.models())]  # type: ignore[valid-type]
GpuId = Literal[tuple(catalog.gpus())]  # type: ignore[valid-type]


SETUP_FIELDS = ("model", "gpu", "gpus", "tp", "pp", "precision", "kv_precision", "engine")


class SetupFields(BaseModel):
    """What the attached server runs on, as the visitor says: the cost model's inputs (catalog ids), never a
    network address."""

    model_config = ConfigDict(extra="forbid")
    model: ModelId = Field(
        description="What the server runs: a catalog model id (GET /api/catalog), for the prediction."
    )
    gpu: GpuId = Field(description="What it runs on: a catalog GPU id (GET /api/catalog), for the prediction.")
    gpus: int = Field(1, ge=1, le=serving.MAX_GPUS, description=f"GPUs in the server (GPUs; 1-{serving.MAX_GPUS}).")
    tp: int = Field(1, ge=1, le=64, description="Tensor-parallel GPUs per replica (GPUs; 1-64); tp x pp divides gpus.")
    pp: int = Field(1, ge=1, le=128, description="Pipeline stages per replica (stages; 1-128).")
    precision: WeightPrecision = Field("bf16", description="Weight precision.")
    kv_precision: KvPrecision = Field("bf16", description="KV-cache precision.")
    engine: Literal["auto", "tensorrt-llm", "vllm", "sglang"] = Field(
        "auto", description="Engine profile that prices the prediction (as on the dials)."
    )

    def setup(self) -> dict:
        return {k: getattr(self, k) for k in SETUP_FIELDS}


class ChatBody(SetupFields):
    prompt: str = Field(
        min_length=1,
        max_length=chat.MAX_PROMPT_CHARS,
        description=f"The visitor's question (characters; 1-{chat.MAX_PROMPT_CHARS:,}).",
    )
    max_tokens: int = Field(
        chat.DEFAULT_TOKENS, ge=1, le=chat.MAX_TOKENS, description=f"Answer length cap (tokens; 1-{chat.MAX_TOKENS})."
    )


CHAT_CONTRACT = f"""Relays the question to the attached server's /v1/chat/completions (streamed, temperature 0, the
first model its /v1/models lists) and streams server-sent events back: `start` {{name, model, max_tokens}}, `token`
{{text}} per piece as it arrives, then `done` (ttft_ms and itl_ms as measured at the tour's server, output_tokens
and prompt_tokens as the server counted them, `predicted` for the setup at batch 1, and `error_pct`, (measured -
predicted) / predicted x 100) or `error` {{detail}} in words (the server down, an HTTP error with its own message,
a stream that is not OpenAI's, over {chat.MAX_STREAM_BYTES / 1e6:g} MB, or over {chat.TOTAL_TIME_S:g} s). At most
{chat.PER_CLIENT} relay per visitor and {chat.PER_TARGET} per server at a time: more get a 429 with Retry-After."""


class _Relayed(StreamingResponse):
    """A stream whose fair share is given back when the response ends, however it ends (even when the client went
    away before the body started)."""

    def __init__(self, body: AsyncIterator[bytes], release):
        super().__init__(body, media_type="text/event-stream", headers={**NO_STORE, "x-accel-buffering": "no"})
        self._release = release

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


def _fallback_models(poller, name: str) -> list[str]:
    view = poller.view(name) if poller else None
    reading = view and view.get("reading")  # the poller's /v1/models, else the model names its /metrics carry
    return [*(getattr(reading, "served_models", None) or ()), *(getattr(reading, "models", None) or ())]


async def _chat_events(poller, name: str, body: ChatBody) -> AsyncIterator[bytes]:
    target = poller.states[name].target
    setup = body.setup()
    async for event, data in chat.relay(target, body.prompt, body.max_tokens, _fallback_models(poller, name)):
        if event == "done":
            try:
                data = await asyncio.to_thread(chat.compare, data, setup)
            except SimError as e:  # the server's counted prompt does not fit the setup's context
                data = {**data, "setup": setup, "predicted": None, "error_pct": None, "no_prediction": e.message}
        yield sse(event, data)


@router.post(
    "/api/attach/{name}/chat",
    response_class=StreamingResponse,
    dependencies=[Depends(query_free)],
    summary="The visitor's question through an attached server, measured beside the prediction",
    description=CHAT_CONTRACT,
    responses={
        200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}, "description": "start, token…, done"},
        404: {"description": "No attached server has that name (the names there are, in words)."},
        429: {
            "description": "This visitor has a question going through an attached server already, or that "
            "server has its share; retry after Retry-After seconds."
        },  # fmt: skip
    },
)
async def post_attach_chat(request: Request, name: Name, body: ChatBody):
    poller = _poller(request)
    if poller is None or poller.view(name) is None:
        return _unknown(poller, name)
    # a setup the cost model refuses: a 422 naming the field, before anything is sent
    await asyncio.to_thread(chat.predict, body.setup(), 1, 1)
    shares: chat.Shares = request.app.state.attach_shares
    client = request.client.host if request.client else "?"
    shares.take(client, name)  # Busy: the app's 429 with Retry-After, in words
    given = []

    def release():
        if not given:
            given.append(True)
            shares.give(client, name)

    return _Relayed(_chat_events(poller, name, body), release)


# ---- measure runs the tour starts (serve --attach-measure) ------------------------------------------------------


class MeasureBody(SetupFields):
    requests: int = Field(
        16, ge=1, le=measure.MAX_REQUESTS, description=f"Requests in all (requests; 1-{measure.MAX_REQUESTS})."
    )
    concurrency: int = Field(
        4,
        ge=1,
        le=measure.MAX_CONCURRENCY,
        description=f"Requests at a time (requests; 1-{measure.MAX_CONCURRENCY}; <= requests).",
    )
    prompt_tokens: int = Field(
        128,
        ge=1,
        le=jobs.MAX_TOUR_PROMPT_TOKENS,
        description=f"Prompt length (words; 1-{jobs.MAX_TOUR_PROMPT_TOKENS:,}).",
    )
    output_tokens: int = Field(
        64,
        ge=1,
        le=jobs.MAX_TOUR_OUTPUT_TOKENS,
        description=f"max_tokens of each answer (tokens; 1-{jobs.MAX_TOUR_OUTPUT_TOKENS:,}).",
    )
    time_cap_s: float = Field(
        jobs.DEFAULT_TOUR_TIME_CAP_S,
        ge=1,
        le=jobs.MAX_TOUR_TIME_CAP_S,
        description=f"Time before the run stops (s; 1-{jobs.MAX_TOUR_TIME_CAP_S:g}).",
    )

    @model_validator(mode="after")
    def _fits(self):
        if self.concurrency > self.requests:
            raise SimError(
                "concurrency",
                f"Concurrency ({self.concurrency}) cannot exceed the number of requests ({self.requests}).",
            )
        return self


class MeasureJob(BaseModel):
    name: str
    state: Literal["none", "starting", "running", "done", "failed"] = Field(
        description="none (no run yet), starting (finding the model), running, done or failed (error says why)."
    )
    number: int | None = Field(None, description="The run's number on this server process (no unit).")
    model: str | None = None
    requests: int | None = None
    concurrency: int | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    time_cap_s: float | None = None
    setup: dict[str, Any] | None = None
    ended: int = Field(0, description="Requests ended so far, finished or failed.")
    finished: int = Field(0, description="Requests that finished with tokens.")
    progress: float = Field(0.0, description="ended / requests (0-1; 1 when done).")
    elapsed_s: float | None = None
    summary: dict[str, Any] | None = Field(None, description="As `inside-llm measure --json`, when done.")
    error: str | None = None


def _measure_gate(request: Request, name: str) -> JSONResponse | None:
    if (refusal := _no_params(request)) is not None:
        return refusal
    poller = _poller(request)
    if poller is None or poller.view(name) is None:
        return _unknown(poller, name)
    if name not in _allowed(request):
        detail = (
            f"The tour's operator has not allowed measure runs against '{name}': they are allowed when the tour "
            "starts with inside-llm serve --attach-measure (all attached servers) or --attach-measure NAME."
        )
        return JSONResponse(status_code=403, content={"detail": detail}, headers=NO_STORE)
    return None


MEASURE_RESPONSES = {
    403: {"description": "The operator did not allow measure runs against this server (--attach-measure)."},
    404: {"description": "No attached server has that name (the names there are, in words)."},
}


@router.post(
    "/api/attach/{name}/measure",
    status_code=202,
    dependencies=[Depends(query_free)],
    response_model=MeasureJob,
    summary="Start a bounded measure run against an attached server (operator's --attach-measure only)",
    responses={**MEASURE_RESPONSES, 409: {"description": "A run against this server is already going."}},
)
async def post_attach_measure(request: Request, name: Name, body: MeasureBody):
    if (refusal := _measure_gate(request, name)) is not None:
        return refusal
    setup = body.setup()  # refused (422, naming the field) before anything is sent
    await asyncio.to_thread(measure.predict, setup, body.concurrency, body.prompt_tokens, body.output_tokens)
    poller = request.app.state.attach
    job = jobs.Job(name, body.requests, body.concurrency, body.prompt_tokens, body.output_tokens, body.time_cap_s,
                   setup)  # fmt: skip
    try:
        request.app.state.attach_jobs.start(poller.states[name].target, job, _fallback_models(poller, name))
    except jobs.Conflict as e:
        return JSONResponse(status_code=409, content={"detail": str(e)}, headers=NO_STORE)
    return JSONResponse(MeasureJob.model_validate(job.view()).model_dump(mode="json"), 202, headers=NO_STORE)


@router.get(
    "/api/attach/{name}/measure",
    response_model=MeasureJob,
    summary="The latest measure run against an attached server: its progress, then its result table",
    responses=MEASURE_RESPONSES,
)
async def get_attach_measure(request: Request, name: Name):
    if (refusal := _measure_gate(request, name)) is not None:
        return refusal
    view = request.app.state.attach_jobs.view(name) or {"name": name, "state": "none"}
    return JSONResponse(MeasureJob.model_validate(view).model_dump(mode="json"), headers=NO_STORE)
