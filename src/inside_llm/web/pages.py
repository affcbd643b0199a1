"""HTML pages: the tour (/ and /tour/<slug>), the stage alone (/embed/<slug>), /dials, /docs.

The same context builder renders the live pages and the offline bundle (export.py); only the
`Links` differ (absolute server paths vs relative `.html` files).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from .. import __version__
from ..api import oembed
from ..jsbundle import module_graph
from ..paths import static_dir, templates_dir
from ..scenes import Control, Scene, load_scenes, scene_by_slug
from ..sim.model.tokenizer import MAX_TEXT_CHARS
from .facts import fact_text, facts_for, params_model

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(templates_dir()))
SIZES = {"s": 0.8, "m": 1.0, "l": 1.3, "xl": 1.7}  # `size=` aliases for `scale=`
SCALE_BOUNDS = (0.25, 4.0)
MAX_STEP = 10_000


@dataclass(frozen=True)
class Links:
    """Where pages point: live server paths (root "") or relative files in an export (root "..")."""

    root: str = ""
    suffix: str = ""  # ".html" in an export
    offline: bool = False

    def static(self, path: str) -> str:
        return f"{self.root}/static/{path}"

    def tour(self, slug: str) -> str:
        return f"{self.root}/tour/{slug}{self.suffix}"

    def embed(self, slug: str) -> str:
        return f"{self.root}/embed/{slug}{self.suffix}"

    def home(self) -> str:
        return f"{self.root}/index.html" if self.offline else "/"

    def dials(self) -> str:
        return self.tour("dials") if self.offline else "/dials"

    def for_js(self) -> dict[str, str]:
        return {"root": self.root, "tour": f"{self.root}/tour/", "embed": f"{self.root}/embed/", "suffix": self.suffix}


LIVE = Links()
templates.env.globals["u"] = LIVE


def _coerce(c: Control, raw: str | None) -> Any:
    """A URL value for control c, or its default when missing or out of bounds (the page never fails)."""
    if raw is None:
        return c.default
    try:
        if c.kind == "toggle":
            return raw in ("1", "true", "on", "yes")
        if c.kind in ("range", "number"):
            v = float(raw)
            if (c.min is not None and v < c.min) or (c.max is not None and v > c.max):
                return c.default
            return int(v) if isinstance(c.default, int) and v.is_integer() else v
        if c.kind == "select":
            values = [str(v) for v, _ in c.options]
            return c.options[values.index(raw)][0] if raw in values else c.default
        return raw[:MAX_TEXT_CHARS]
    except ValueError:
        return c.default


MAX_QUESTION_CHARS = 500


DEFAULT_QUESTION = "What is the capital of France?"  # the cover's suggestion; our words, not a figure


def question(query: Mapping[str, str]) -> str | None:
    """The visitor's question (`q`), the thread through the chapters; None when absent or empty."""
    q = (query.get("q") or "").strip()[:MAX_QUESTION_CHARS]
    return q or None


def page_params(scene: Scene, query: Mapping[str, str]) -> dict[str, Any]:
    """Each control's value from the URL; a `question` control takes `q` unless the URL names it."""
    q = question(query)
    return {
        c.name: _coerce(c, q if c.question and q is not None and c.name not in query else query.get(c.name))
        for c in scene.controls
    }


def _scale(query: Mapping[str, str]) -> str | None:
    """`scale=1.5` (0.25-4) or `size=s|m|l|xl`, as a number string; None when absent or invalid."""
    raw, size = query.get("scale"), query.get("size")
    if raw is None and size in SIZES:
        return str(SIZES[size])
    try:
        v = float(raw) if raw is not None else None
    except ValueError:
        return None
    return str(v) if v is not None and SCALE_BOUNDS[0] <= v <= SCALE_BOUNDS[1] else None


def _step(raw: str | None) -> str | None:
    """`step=N` (0-based animation step) or `step=last`; None when absent or invalid."""
    if raw == "last" or (raw is not None and raw.isdigit() and int(raw) <= MAX_STEP):
        return raw if raw == "last" else str(int(raw))
    return None


def embed_options(query: Mapping[str, str]) -> dict[str, str]:
    """The presentation options in a URL, validated; anything invalid is dropped, never an error.

    controls=0|1 (embeds show no controls unless 1), autoplay=0|1, theme=light|dark|auto,
    step=N|last, scale=0.25-4 (or size=s|m|l|xl), present=0|1. tour.js reads the same rules.
    """
    allowed = {
        "controls": ("0", "1"),
        "autoplay": ("0", "1"),
        "theme": ("light", "dark", "auto"),
        "present": ("0", "1"),
    }
    opts = {k: query[k] for k, ok in allowed.items() if query.get(k) in ok}
    for k, v in (("step", _step(query.get("step"))), ("scale", _scale(query))):
        if v is not None:
            opts[k] = v
    return opts


def rendered_fact(scene: Scene, params: Mapping[str, Any] | None = None) -> str | None:
    """The fact sentence for these control values (the defaults when None), filled from the simulation;
    None when the combination is refused. It reads the result the chapter keeps for these params (api/facts.py),
    so the page's own first request finds it computed; after every draw the page refills it from that answer's
    `facts`."""
    model = params_model(scene.slug)
    try:
        p = (
            None
            if model is None or params is None
            else model.model_validate({k: v for k, v in params.items() if k in model.model_fields})
        )
        return fact_text(scene, facts_for(scene.slug, p))
    except ValueError:
        return None


def page_state(
    scene: Scene,
    params: dict,
    opts: dict,
    embed: bool,
    links: Links = LIVE,
    scenes: tuple[Scene, ...] | None = None,
    standalone: bool = False,
    q: str | None = None,
) -> dict:
    """What tour.js needs (the `page-state` JSON block): scene, params, controls, neighbours, links.

    `scenes` is the tour being navigated (all chapters live; the exported ones in an offline bundle).
    """
    scenes = scenes or load_scenes()
    i = scenes.index(scene)
    return {
        "slug": scene.slug,
        "number": scene.number,
        "title": scene.title,
        "api": f"/api/{scene.slug}",
        "embed": embed,
        "params": params,
        "defaults": scene.defaults(),
        "presets": list(scene.presets),
        "resolve": list(scene.resolve),
        "controls": [c.__dict__ | {"options": list(c.options)} for c in scene.controls],
        "prev": scenes[i - 1].slug if i > 0 else None,
        "next": scenes[i + 1].slug if i + 1 < len(scenes) else None,
        "count": len(load_scenes()),
        "options": opts,
        "offline": links.offline,
        "urls": links.for_js(),
        "standalone": standalone,
        "question": q,
    }


def state_json(state: dict) -> str:
    """JSON for a <script type="application/json"> block: no '<' at all, so no '</script>' or '<!--' can
    end or confuse the block, whatever the URL carried."""
    return json.dumps(state, ensure_ascii=False).replace("<", "\\u003c")


@cache
def preloads(entry: str, slug: str) -> tuple[str, ...]:
    """The ES modules a page runs (its entry script and its scene, and all they import), for modulepreload
    links: without them the browser discovers the graph one import level per round trip (a 6-deep chain).
    Computed once per process from the files (a release does not change them while it runs)."""
    return tuple(module_graph(static_dir() / "js", [entry, f"scenes/{slug}.js"]))


def page_context(
    scene: Scene,
    query: Mapping[str, str],
    embed: bool,
    links: Links = LIVE,
    scenes: tuple[Scene, ...] | None = None,
    standalone: bool = False,
) -> dict:
    """Template context for a tour or embed page (shared by the server and the offline export)."""
    scenes = scenes or load_scenes()
    params = page_params(scene, query)
    opts = embed_options(query)
    state = page_state(scene, params, opts, embed, links, scenes, standalone, question(query))
    by_slug = {s.slug: s for s in scenes}
    return {
        "scene": scene,
        "scenes": scenes,
        "total": len(load_scenes()),
        "params": params,
        "prev_scene": by_slug.get(state["prev"]),
        "next_scene": by_slug.get(state["next"]),
        "fact": rendered_fact(scene, params),
        "state_json": state_json(state),
        "opts": opts,
        "version": __version__,
        "theme": opts.get("theme", "auto"),
        "u": links,
        "scale": opts.get("scale"),
        "show_controls": not embed or opts.get("controls") == "1",
        "scene_css": (static_dir() / "css" / "scenes" / f"{scene.slug}.css").is_file(),
        "modules": () if links.offline else tuple(links.static(f"js/{m}") for m in preloads("tour.js", scene.slug)),
    }


def oembed_link(request: Request) -> str:
    """The oEmbed discovery URL for this page as requested (its query is its state): base.html's <link>."""
    return f"{str(request.base_url).rstrip('/')}{oembed.PATH}?{urlencode({'url': str(request.url), 'format': 'json'})}"


def _render(request: Request, scene: Scene, template: str, embed: bool, standalone: bool = False) -> HTMLResponse:
    ctx = page_context(scene, request.query_params, embed, standalone=standalone)
    ctx["oembed"] = oembed_link(request)  # live pages only: an offline export has no provider to ask
    return templates.TemplateResponse(request, template, ctx)


def _scene_or_404(slug: str) -> Scene:
    scene = scene_by_slug(slug)
    if scene is None:
        raise HTTPException(404, f"no chapter {slug!r}")
    return scene


COVER_BOARD = "parallelism"  # the cover draws chapter 10's board: the whole server


def cover_context(query: Mapping[str, str], links: Links = LIVE) -> dict:
    """The cover: the question box, the server board (chapter 10's scene, drawn alone) and every chapter."""
    board = scene_by_slug(COVER_BOARD)
    ctx = page_context(board, {}, embed=True, links=links)
    state = page_state(board, board.defaults(), {"autoplay": "1"}, embed=True, links=links)
    modules = () if links.offline else tuple(links.static(f"js/{m}") for m in preloads("cover.js", board.slug))
    return {
        **ctx,
        "modules": modules,
        "state_json": state_json(state),
        "question": question(query) or DEFAULT_QUESTION,
        "max_question": MAX_QUESTION_CHARS,
        "theme": embed_options(query).get("theme", "auto"),
    }


@router.get("/", response_class=HTMLResponse)
def home(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "cover.html", cover_context(request.query_params))


@router.get("/tour/{slug}", response_class=HTMLResponse)
def tour(slug: str, request: Request) -> HTMLResponse:
    return _render(request, _scene_or_404(slug), "tour.html", embed=False)


@router.get("/embed/{slug}", response_class=HTMLResponse)
def embed(slug: str, request: Request) -> HTMLResponse:
    return _render(request, _scene_or_404(slug), "embed.html", embed=True)


@router.get("/dials", response_class=HTMLResponse)
def dials(request: Request) -> HTMLResponse:
    return _render(request, _scene_or_404("dials"), "dials.html", embed=False, standalone=True)


@router.get("/docs", response_class=HTMLResponse)
def docs(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "docs.html", {"version": __version__, "theme": "auto"})
