"""GET /api/attach and /api/attach/{name}: the servers this tour's operator attached (`inside-llm serve --attach
NAME=URL`), each as the poller last read it (attach/poller.py): its status and what went wrong in words, and its
/metrics mapped onto one Reading (attach/engines.py) whose figures name the metric they came from, with what its JSON
pages add (GET /v1/models; llama.cpp's /slots and /props: attach/endpoints.py), and each such page's own status.

No parameter of these routes names a URL: a visitor picks an attached server by its name only, and any query
parameter is refused (422 in words), so nothing a request carries reaches the network. An unknown name is a 404
that lists the names there are. Answers are live: `Cache-Control: no-store`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from ..attach.engines import Reading
from ..attach.poller import FETCH_TIMEOUT_S, MAX_PAGE_BYTES, PAGES, POLL_INTERVAL_S, STATUSES
from ..attach.targets import NAME_RULE
from ..sim.result import as_json

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
        names = ", ".join(poller.names) if poller and poller.names else None
        there = f"the attached servers are {names}" if names else "no server is attached"
        detail = f"No attached server is named '{name[:32]}': {there}. {HOW}"
        return JSONResponse(status_code=404, content={"detail": detail}, headers=NO_STORE)
    return JSONResponse(AttachedServer.model_validate(_out(view)).model_dump(mode="json"), headers=NO_STORE)
