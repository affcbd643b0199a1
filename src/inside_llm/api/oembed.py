"""GET /oembed: the oEmbed 1.0 provider (https://oembed.com) that turns a pasted tour or embed link into the live stage.

Not a chapter (the registry lists its router beside the chapters'). A blog, a wiki or a slide tool that finds
the `<link rel="alternate" type="application/json+oembed">` in a page's head (base.html) asks here and gets a
`rich` response whose `html` is an iframe of `/embed/<slug>` with the link's own query: the same controls,
question and presentation options, so the frame draws what the link showed. Only links to this server's own
host are answered (404 otherwise, as the spec says for a URL the provider has nothing for); only JSON is
served (501 for `format=xml`, the spec's "cannot return a response in the requested format").
"""

from __future__ import annotations

import html
from typing import Annotated, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from ..scenes import Scene, scene_by_slug

router = APIRouter(tags=["meta"])

PATH = "/oembed"
PROVIDER = "Inside LLM Inference"
WIDTH, HEIGHT = 960, 540  # a 16:9 slide frame, the size the embeds are tuned for
MAX_SIDE = 10_000
MAX_URL_CHARS = 4_000
PAGE_PREFIXES = ("/tour/", "/embed/")
STANDALONE = {"/dials": "dials"}  # pages that are a chapter's stage under another path


class OEmbed(BaseModel):
    """An oEmbed 1.0 `rich` response (https://oembed.com, section 2.3.4)."""

    version: Literal["1.0"] = "1.0"
    type: Literal["rich"] = "rich"
    title: str
    provider_name: str
    provider_url: str
    html: str
    width: int
    height: int
    cache_age: int


class Refusal(BaseModel):
    detail: str


def page_scene(url: str, host: str) -> tuple[Scene, str, str] | None:
    """(scene, scheme://host, query) for a tour, embed or /dials URL on `host`; None for anything else."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or parts.netloc.lower() != host.lower():
        return None
    path = parts.path.rstrip("/") or "/"
    slug = STANDALONE.get(path)
    for prefix in PAGE_PREFIXES:
        if slug is None and path.startswith(prefix) and "/" not in path[len(prefix) :]:
            slug = path[len(prefix) :]
    scene = scene_by_slug(slug) if slug else None
    if scene is None:
        return None
    query = urlencode(parse_qsl(parts.query, keep_blank_values=True))
    return scene, f"{parts.scheme}://{parts.netloc}", query


def frame_size(maxwidth: int | None, maxheight: int | None) -> tuple[int, int]:
    """16:9 at 960 x 540, shrunk (never stretched) to fit within maxwidth x maxheight."""
    w = min(WIDTH, maxwidth or WIDTH)
    if maxheight is not None and w * HEIGHT > maxheight * WIDTH:
        w = maxheight * WIDTH // HEIGHT
    w = max(1, w)
    return w, max(1, min(round(w * HEIGHT / WIDTH), maxheight or MAX_SIDE))


def _refuse(status: int, detail: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"detail": detail})


@router.get(
    PATH,
    response_model=OEmbed,
    responses={
        404: {"model": Refusal, "description": "Not a tour or embed page of this server."},
        501: {"model": Refusal, "description": "A format other than json (this provider serves JSON only)."},
    },
)
def oembed(
    request: Request,
    url: Annotated[
        str,
        Query(
            max_length=MAX_URL_CHARS,
            description=f"A tour or embed page of this server, with its query (at most {MAX_URL_CHARS:,} characters).",
        ),
    ],
    maxwidth: Annotated[
        int,
        Query(
            ge=1, le=MAX_SIDE, description=f"Largest width in CSS pixels, 1 to {MAX_SIDE:,} (the default: no limit)."
        ),
    ] = MAX_SIDE,
    maxheight: Annotated[
        int,
        Query(
            ge=1, le=MAX_SIDE, description=f"Largest height in CSS pixels, 1 to {MAX_SIDE:,} (the default: no limit)."
        ),
    ] = MAX_SIDE,
):
    """The iframe for a tour or embed link: the same chapter and state as the link, 16:9 within maxwidth x maxheight.

    `format` may be json (the default); any other (xml) is answered 501, as the oEmbed spec says. It is read
    from the query directly rather than declared, so the schema promises no 5xx to a generator of valid input.
    """
    fmt = request.query_params.get("format", "json")
    if fmt != "json":
        return _refuse(501, f"format={fmt[:16]!r} is not served here; ask for format=json.")
    found = page_scene(url, request.headers.get("host", ""))
    if found is None:
        return _refuse(404, "Not a tour or embed page of this server (its /tour/<chapter> or /embed/<chapter>).")
    scene, origin, query = found
    w, h = frame_size(maxwidth, maxheight)
    title = f"{scene.number}. {scene.title} · {PROVIDER}"
    src = f"{origin}/embed/{scene.slug}" + (f"?{query}" if query else "")
    frame = (
        f'<iframe src="{html.escape(src)}" width="{w}" height="{h}" title="{html.escape(title)}" '
        'style="border:0" loading="lazy" allow="fullscreen" allowfullscreen></iframe>'
    )
    settings = request.app.state.settings
    return OEmbed(
        title=title,
        provider_name=PROVIDER,
        provider_url=f"{origin}/",
        html=frame,
        width=w,
        height=h,
        cache_age=settings.cache_max_age_s,
    )
