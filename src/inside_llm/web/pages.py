"""HTML pages: the tour (/ and /tour/<slug>), the stage alone (/embed/<slug>), /dials, /docs, /healthz."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from .. import __version__
from ..api.registry import chapter_facts, chapter_module
from ..paths import templates_dir
from ..scenes import Control, Scene, load_scenes, scene_by_slug

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(templates_dir()))
EMBED_OPTIONS = {"controls": ("0", "1"), "autoplay": ("0", "1"), "theme": ("light", "dark", "auto")}


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
        return raw[:100_000]
    except ValueError:
        return c.default


def page_params(scene: Scene, request: Request) -> dict[str, Any]:
    return {c.name: _coerce(c, request.query_params.get(c.name)) for c in scene.controls}


def rendered_fact(scene: Scene) -> str | None:
    """The fact sentence with its figures filled in from the simulation, or None if not yet built."""
    facts = chapter_facts(scene.slug)
    try:
        return scene.fact.format_map(facts)
    except KeyError:
        return None


def _state(scene: Scene, params: dict, request: Request, embed: bool) -> str:
    scenes = load_scenes()
    i = scenes.index(scene)
    opts = {k: request.query_params.get(k) for k in ("controls", "autoplay", "theme", "step", "scale",
                                                      "present")}
    state = {
        "slug": scene.slug, "number": scene.number, "title": scene.title, "api": f"/api/{scene.slug}",
        "built": chapter_module(scene.slug) is not None, "embed": embed, "params": params,
        "defaults": scene.defaults(), "presets": list(scene.presets), "controls": [c.__dict__ | {"options": list(c.options)} for c in scene.controls],
        "prev": scenes[i - 1].slug if i > 0 else None,
        "next": scenes[i + 1].slug if i + 1 < len(scenes) else None,
        "options": {k: v for k, v in opts.items() if v is not None},
    }
    return json.dumps(state, ensure_ascii=False).replace("</", "<\\/")


def _render(request: Request, scene: Scene, template: str, embed: bool) -> HTMLResponse:
    params = page_params(scene, request)
    ctx = {"scene": scene, "scenes": load_scenes(), "params": params, "fact": rendered_fact(scene),
           "state_json": _state(scene, params, request, embed), "version": __version__,
           "theme": request.query_params.get("theme", "auto")}
    return templates.TemplateResponse(request, template, ctx)


def _scene_or_404(slug: str) -> Scene:
    scene = scene_by_slug(slug)
    if scene is None:
        raise HTTPException(404, f"no chapter {slug!r}")
    return scene


@router.get("/", response_class=HTMLResponse)
def home(request: Request) -> HTMLResponse:
    return _render(request, load_scenes()[0], "tour.html", embed=False)


@router.get("/tour/{slug}", response_class=HTMLResponse)
def tour(slug: str, request: Request) -> HTMLResponse:
    return _render(request, _scene_or_404(slug), "tour.html", embed=False)


@router.get("/embed/{slug}", response_class=HTMLResponse)
def embed(slug: str, request: Request) -> HTMLResponse:
    return _render(request, _scene_or_404(slug), "embed.html", embed=True)


@router.get("/dials", response_class=HTMLResponse)
def dials(request: Request) -> HTMLResponse:
    return _render(request, _scene_or_404("dials"), "dials.html", embed=False)


@router.get("/docs", response_class=HTMLResponse)
def docs(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "docs.html", {"version": __version__, "theme": "auto"})
