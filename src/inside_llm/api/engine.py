"""GET /api/engine: the tour's own serving engine, live (chapters 6 and 7 draw it beside their simulations).

What it reports is the engine that serves /api/generate for the served chat model (engine.py): seats in
use, the queue, pages of the key/value pool in use, tokens/s over the last seconds, and each chat's
progress. Never a chat's text: other visitors' questions must not leak. GET /api/engine/feed streams the
same snapshot as server-sent events; POST /api/engine/demo starts a few demo chats so that a lone visitor
can watch batching happen.
"""

from __future__ import annotations

import asyncio
import json
import time

import anyio
from fastapi import APIRouter, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field

from .. import modelfile
from ..live import ClientBusy, EngineSnapshot, QueueFull, engine_for
from .demo_model import served_model

router = APIRouter(tags=["the server's engine"])

FEED_INTERVAL_S = 0.5
FEED_MAX_S = 120.0  # a feed ends after this; the page reopens it while it is shown
DEMO_CLIENT = "demo"
DEMO_CHATS = 12  # more than the engine's 8 seats: a lone visitor sees the seats fill, a queue form, seats refill
DEMO_MAX_TOKENS = 48
DEMO_QUESTIONS = (
    "What is the capital of France?",
    "Name three primary colours.",
    "What is 12 times 12?",
    "Who wrote Romeo and Juliet?",
    "Say good morning in Spanish.",
    "What is the largest planet?",
    "Why is the sky blue?",
    "What does a GPU do?",
)


class DemoOut(BaseModel):
    started: int = Field(description="demo chats started by this call (requests)")
    running: int = Field(description="the caller's chats running or waiting now, demo ones included (requests)")
    engine: EngineSnapshot


def _engine():
    modelfile.check_not_loading()  # 503 while the model loads at start-up (issue 23, M6)
    return engine_for(served_model("smollm2").model)


@router.get("/api/engine", response_model=EngineSnapshot, summary="The server's engine now: seats, queue, pages")
def get_engine() -> JSONResponse:
    """A live reading, so `no-store` (not the API's URL-keyed max-age: the same URL gives new numbers)."""
    return JSONResponse(jsonable_encoder(_engine().snapshot()), headers={"cache-control": "no-store"})


@router.get(
    "/api/engine/feed",
    summary="The engine's snapshot as server-sent events, twice a second",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
            "description": f"An `engine` event every {FEED_INTERVAL_S:g} s with GET /api/engine's "
            f"body, for at most {FEED_MAX_S:g} s.",
        }
    },
)
async def get_engine_feed(request: Request) -> StreamingResponse:
    engine = await anyio.to_thread.run_sync(_engine)  # the first call may load the model: not on the event loop

    async def events():
        end = time.monotonic() + FEED_MAX_S
        while time.monotonic() < end and not await request.is_disconnected():
            yield f"event: engine\ndata: {json.dumps(engine.snapshot(), separators=(',', ':'))}\n\n".encode()
            await asyncio.sleep(FEED_INTERVAL_S)

    return StreamingResponse(
        events(), media_type="text/event-stream", headers={"cache-control": "no-store", "x-accel-buffering": "no"}
    )


@router.post("/api/engine/demo", response_model=DemoOut, summary="Start a few demo chats to watch batching")
def post_engine_demo(request: Request) -> dict:
    """Starts demo chats (fixed questions, greedy, at most DEMO_MAX_TOKENS tokens) until the caller has DEMO_CHATS
    chats running or waiting. They are the caller's chats: they count against the caller's fair share (its
    place in the queue, and who gets a seat first), so pressing it never pushes another visitor back. Nobody
    reads their answers: they exist to be watched."""
    engine = _engine()
    m = engine.model
    caller = request.client.host if request.client else "?"
    running = engine.client_chats(caller)
    started = 0
    for k in range(DEMO_CHATS - running):
        question = DEMO_QUESTIONS[(engine.finished + running + k) % len(DEMO_QUESTIONS)]
        ids = m.chat_ids(question) if hasattr(m, "chat_ids") else m.encode(question)
        try:
            engine.submit(ids, DEMO_MAX_TOKENS, client=caller, label=DEMO_CLIENT)
        except (QueueFull, ClientBusy):
            break
        started += 1
    return {"started": started, "running": running + started, "engine": engine.snapshot()}
