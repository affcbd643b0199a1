"""create_app(): the chapter routers, the pages, static files and the headers every response gets."""

from __future__ import annotations

import os

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles

from . import __version__, modelfile
from .api import tokens as tokens_api
from .api.common import client_gone, model_loading, too_busy, unprocessable
from .api.registry import ROUTERS
from .attach.chat import Shares
from .attach.jobs import Jobs
from .attach.poller import Poller
from .model_work import Busy, ClientGone
from .paths import static_dir
from .settings import Settings
from .web import facts, pages
from .web.middleware import (
    BodyLimit,
    ETagCache,
    HeadAsGet,
    HostlessRedirects,
    PublicCors,
    SecurityHeaders,
    StaticCache,
    UrlLimit,
    security_headers,
)


def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    """Never leak a stack trace or a local path. Sent from outside the middleware, so it adds the headers itself."""
    headers = {k.decode(): v.decode() for k, v in security_headers(request.url.path, request.app.state.settings)}
    return JSONResponse(status_code=500, content={"detail": "internal error"}, headers=headers)


def _document_limits(app: FastAPI, settings: Settings) -> None:
    """Every operation may answer 414 (URL over the cap); those that take a body also 400 (not JSON, e.g.
    bad UTF-8) and 413 (body over the cap)."""
    max_body_bytes = settings.max_body_bytes
    build = app.openapi
    detail = {
        "application/json": {
            "schema": {"type": "object", "properties": {"detail": {"type": "string"}}, "required": ["detail"]}
        }
    }

    def openapi() -> dict:
        fresh = app.openapi_schema is None
        spec = build()
        for op in (op for ops in spec["paths"].values() for op in ops.values() if fresh):
            op["responses"].setdefault(
                "414",
                {
                    "description": f"The URL is over {settings.max_url_bytes:,} bytes (send long text with POST).",
                    "content": detail,
                },
            )
            if "requestBody" not in op:
                continue
            op["responses"].setdefault("400", {"description": "The body could not be parsed.", "content": detail})
            op["responses"].setdefault(
                "413", {"description": f"The body is over {max_body_bytes:,} bytes.", "content": detail}
            )
        return spec

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_env()
    app = FastAPI(
        title="Inside LLM Inference",
        version=__version__,
        docs_url=None,
        redoc_url=None,
        description="One simulation endpoint per chapter of the tour. Every response is a pure "
        "function of its URL (fixed seeds) and carries an ETag.",
    )
    app.state.settings = settings
    if os.environ.get(modelfile.PRELOAD_ENV):  # `inside-llm serve`: check and load the model now, off the loop
        modelfile.start_loading()
    app.state.attach = Poller(settings.attach) if settings.attach else None  # GET /api/attach reads it
    if app.state.attach is not None:
        app.router.on_startup.append(app.state.attach.ensure_started_async)
        app.router.on_shutdown.append(app.state.attach.stop)
        app.state.attach_jobs = Jobs()  # measure runs the tour starts (serve --attach-measure)
        app.state.attach_shares = Shares()  # chapter 11's questions relayed to an attached server, per visitor
        app.router.on_shutdown.append(app.state.attach_jobs.stop)
    app.router.on_shutdown.append(tokens_api.stop_workers)  # long texts' worker processes end with the server
    for router in ROUTERS:
        app.include_router(router)
    app.include_router(facts.router)
    app.include_router(pages.router)

    @app.get("/healthz", tags=["meta"])
    async def healthz() -> dict:  # on the event loop: never waits for a worker thread
        """Liveness: 200 with the version."""
        return {"status": "ok", "version": __version__}

    app.mount("/static", StaticFiles(directory=str(static_dir())), name="static")
    app.add_exception_handler(RequestValidationError, unprocessable)  # bounds and types, in words
    app.add_exception_handler(ValueError, unprocessable)  # SimError from a simulation
    app.add_exception_handler(Busy, too_busy)  # expensive work over its bound: 429 with Retry-After, in words
    app.add_exception_handler(modelfile.ModelLoading, model_loading)  # a chat while the model loads: 503
    app.add_exception_handler(ClientGone, client_gone)
    app.add_exception_handler(Exception, _internal_error)
    app.add_middleware(StaticCache)
    app.add_middleware(ETagCache, max_age_s=settings.cache_max_age_s)
    app.add_middleware(BodyLimit, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(UrlLimit, max_url_bytes=settings.max_url_bytes)
    app.add_middleware(SecurityHeaders, settings=settings)
    app.add_middleware(PublicCors)
    app.add_middleware(HostlessRedirects)
    app.add_middleware(HeadAsGet)  # outermost: every layer below sees a GET
    _document_limits(app, settings)
    return app
