"""`inside-llm export --out DIR [--scenes ...]`: the tour and every embed page as static files that work
with no server and no network, opened from disk (file://) or any static host.

    DIR/index.html             the chapters, with links to each tour page and embed page
    DIR/tour/<slug>.html       tour pages;  DIR/embed/<slug>.html  embed pages (same ?options as live)
    DIR/data/<slug>.js         precomputed endpoint responses + page state, a classic script
    DIR/api/<slug>/<n>.json    the same responses as JSON files; DIR/manifest.json maps URLs to them
    DIR/static/                CSS, icons, and static/js/inside-llm.bundle.js (all ES modules as one
                               classic script: Chromium refuses module scripts and fetch() from file://)

Responses are precomputed in-process (TestClient) for each scene's defaults, its [[presets]], every
option of each select or toggle, and every position of small sliders (each varied alone from the
defaults). Anything else (typing new text, other combinations) needs the live server; the bundle says so.
Chapter 11's chat answer is recorded too (each token with the time it arrived, played back offline) for the
default question and each `--question`; the index's links then carry the first of these as `q`.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi.testclient import TestClient

from . import __version__
from .app import create_app
from .jsbundle import bundle
from .paths import static_dir
from .scenes import Control, Scene, load_scenes
from .web.pages import DEFAULT_QUESTION, Links, page_context, page_state, templates

OFFLINE = Links(root="..", suffix=".html", offline=True)
MAX_SLIDER_POSITIONS = 16  # sliders with at most this many positions are precomputed at each one
MAX_VARIANTS = 64  # per scene, so a huge select cannot make the bundle explode
SHARED_ENDPOINTS = ("/api/catalog",)  # parameterless endpoints any scene may fetch via ctx.fetchJSON
BUNDLE_JS = "js/inside-llm.bundle.js"


def _slider_positions(c: Control) -> list[float]:
    """Every value a range control can take, if there are few enough; else []."""
    if c.kind != "range" or c.min is None or c.max is None:
        return []
    if c.scale == "log2":
        vals, v = [], c.min
        while v <= c.max and len(vals) <= MAX_SLIDER_POSITIONS:
            vals.append(v)
            v *= 2
    else:
        step = c.step or 1
        n = int(round((c.max - c.min) / step)) + 1
        vals = [c.min + i * step for i in range(n)] if n <= MAX_SLIDER_POSITIONS else []
    vals = [int(v) if isinstance(c.default, int) and float(v).is_integer() else v for v in vals]
    return vals if len(vals) <= MAX_SLIDER_POSITIONS else []


def variants(scene: Scene) -> list[dict[str, Any]]:
    """The endpoint parameter sets to precompute: defaults, presets, then one control varied at a time."""
    api = [c for c in scene.controls if c.api]
    base = {c.name: c.default for c in api}
    out = [base] + [{**base, **{k: v for k, v in p.get("params", {}).items() if k in base}} for p in scene.presets]
    for c in api:
        values = (
            [v for v, _ in c.options]
            if c.kind == "select"
            else [not c.default]
            if c.kind == "toggle"
            else _slider_positions(c)
        )
        out += [{**base, c.name: v} for v in values]
    seen, unique = set(), []
    for v in out:
        key = json.dumps(v, sort_keys=True)
        if key not in seen:
            seen.add(key)
            unique.append(v)
    return unique[:MAX_VARIANTS]


def _query_value(v: Any) -> str:
    return ("1" if v else "0") if isinstance(v, bool) else str(v)


# Parameters the offline page re-derives from a precomputed answer (closed forms; lib/offline.js DERIVED).
COMPUTED_OFFLINE = {"speculative": ("alpha", "cost_ratio"), "dials": ("price_per_gpu_hour",)}


def live_only(scene: Scene) -> list[str]:
    """What in this scene needs the live server once exported (shown in the index and printed)."""
    api = [c for c in scene.controls if c.api and c.name not in COMPUTED_OFFLINE.get(scene.slug, ())]
    notes = [
        f"typing your own text in “{c.label}” (the default and the presets work offline)"
        for c in api
        if c.kind in ("text", "textarea")
    ]
    free = [f"“{c.label}”" for c in api if c.kind == "number" or (c.kind == "range" and not _slider_positions(c))]
    if free:
        notes.append(f"values other than the defaults and presets for {', '.join(free)}")
    if len(api) > 1:
        notes.append("changing two settings at once (each was precomputed alone, from the defaults)")
    return notes


def _responses(client: TestClient, scene: Scene, progress: Callable[..., None]) -> list[dict]:
    """Fetch every variant from the app; failures are counted, reported once and left out."""
    found, failed, todo = [], {}, variants(scene)
    for i, params in enumerate(todo, 1):
        query = urlencode({k: _query_value(v) for k, v in params.items()})
        progress(f"  {scene.slug}: response {i} of {len(todo)}")
        r = client.get(f"/api/{scene.slug}?{query}")
        if r.status_code != 200:
            failed[r.status_code] = failed.get(r.status_code, 0) + 1
            continue
        # the answer carries "the number" box for the same state (`facts`): one response per state
        found.append({"path": f"/api/{scene.slug}", "params": params, "query": query, "data": r.json()})
    for code, n in failed.items():
        progress(f"  {scene.slug}: {n} of {len(todo)} responses answered HTTP {code}; left out", final=True)
    return found


# chapter 11's chat asks with these (static/js/scenes/dials-chat.js: CHAT_SETTINGS, CHAT_MAX_TOKENS)
CHAT_REQUEST = {"max_tokens": 128, "tokens_per_s": 0, "temperature": 0, "repetition_penalty": 1.1, "no_repeat_ngram": 4}


def _sse(text: str) -> list[tuple[str, dict]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            out.append((lines["event"], json.loads(lines.get("data", "{}"))))
    return out


def _answers(client: TestClient, questions: list[str], progress: Callable[..., None]) -> list[dict]:
    """Chapter 11's answer to each question, as the chat asks for it, with each token's arrival time (ms)."""
    found = []
    for i, q in enumerate(dict.fromkeys(questions), 1):
        progress(f"  dials: answer {i} of {len(questions)}")
        r = client.get("/api/generate", params={"prompt": q, **CHAT_REQUEST})
        ev = _sse(r.text) if r.status_code == 200 else []
        tokens = [d for e, d in ev if e == "token"]
        if not ev or ev[-1][0] != "done":
            progress(f"  dials: no answer recorded for {q!r} (HTTP {r.status_code}); left out", final=True)
            continue
        found.append(
            {
                "prompt": q,
                "model": ev[0][1]["model"],
                "settings": {k: v for k, v in ev[0][1].items() if k != "template"},
                "tokens": [t["text"] for t in tokens],
                "arrivals_ms": [t["elapsed_ms"] for t in tokens],
                "done": ev[-1][1],
            }
        )
    return found


def _shared(client: TestClient) -> list[dict]:
    """Parameterless endpoints every scene may fetch (the catalog), when the app has them."""
    found = []
    for path in SHARED_ENDPOINTS:
        r = client.get(path)
        if r.status_code == 200:
            found.append({"path": path, "params": {}, "data": r.json()})
    return found


def _write_scene(
    out: Path,
    scene: Scene,
    tour: tuple[Scene, ...],
    responses: list[dict],
    shared: list[dict],
    extra: dict | None = None,
) -> dict:
    """data/<slug>.js, api/<slug>/*.json, tour/<slug>.html, embed/<slug>.html; returns the manifest entry.

    `tour` is the exported scenes: the pages link (and the presenter moves) only among them. `extra`: more keys
    of the scene's data (the dials' recorded answers).
    """
    state = page_state(scene, scene.defaults(), {}, embed=True, links=OFFLINE, scenes=tour)
    payload = {
        "state": state,
        "responses": [{k: r[k] for k in ("path", "params", "data")} for r in responses] + shared,
        **(extra or {}),
    }
    blob = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    _write(
        out / "data" / f"{scene.slug}.js",
        f"// Precomputed responses for {scene.slug} (inside-llm export {__version__}).\n"
        f"(globalThis.insideLLMOffline = globalThis.insideLLMOffline || {{}})[{json.dumps(scene.slug)}] = {blob};\n",
    )
    files = []
    for n, r in enumerate(responses):
        rel = f"api/{scene.slug}/{n}.json"
        _write(out / rel, json.dumps(r["data"], ensure_ascii=False))
        files.append({"url": f"{r['path']}?{r['query']}", "params": r["params"], "file": rel})
    for kind, template, embed in (("tour", "tour.html", False), ("embed", "embed.html", True)):
        html = templates.get_template(template).render(page_context(scene, {}, embed, OFFLINE, tour))
        _write(out / kind / f"{scene.slug}.html", html)
    return {
        "slug": scene.slug,
        "number": scene.number,
        "title": scene.title,
        "tour": f"tour/{scene.slug}.html",
        "embed": f"embed/{scene.slug}.html",
        "responses": files,
        "needs_live_server": live_only(scene),
    }


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _select(slugs: list[str] | None) -> list[Scene]:
    scenes = list(load_scenes())
    if not slugs:
        return scenes
    known = {s.slug: s for s in scenes}
    unknown = [s for s in slugs if s not in known]
    if unknown:
        raise SystemExit(f"inside-llm export: unknown scene(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    return [s for s in scenes if s.slug in slugs]


def _progress(line: str, final: bool = False) -> None:
    """On a terminal, one line that updates in place; elsewhere only the final lines."""
    if sys.stdout.isatty():
        print(f"\r\033[K{line}", end="\n" if final else "", flush=True)
    elif final:
        print(line, flush=True)


def export_bundle(out: str | Path, slugs: list[str] | None = None, questions: list[str] | None = None) -> int:
    """Write the offline bundle into `out`; prints progress and what needs the live server. questions: the
    visitor's questions the bundle answers in chapter 11 (besides the default) and its links carry (`q`).

    Returns 0, or 1 when some scene could not be rendered (the rest of the bundle is still written).
    """
    scenes, out, t0 = _select(slugs), Path(out), time.perf_counter()
    print(f"Exporting {len(scenes)} scene(s) to {out.resolve()}", flush=True)
    shutil.copytree(static_dir(), out / "static", dirs_exist_ok=True)
    js = static_dir() / "js"
    lazy = [f"scenes/{s.slug}.js" for s in scenes if (js / "scenes" / f"{s.slug}.js").is_file()]
    _write(out / "static" / BUNDLE_JS, bundle(js, "tour.js", lazy))
    entries, broken = [], []
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        shared = _shared(client)
        for i, scene in enumerate(scenes, 1):
            try:
                responses = _responses(client, scene, _progress)
                extra = (
                    {"answers": _answers(client, [DEFAULT_QUESTION, *(questions or [])], _progress)}
                    if scene.slug == "dials"
                    else None
                )
                entries.append(_write_scene(out, scene, tuple(scenes), responses, shared, extra))
            except Exception as e:  # one chapter that fails must not sink the whole deck: it is reported
                broken.append(scene.slug)
                _progress(f"[{i}/{len(scenes)}] {scene.slug}: FAILED ({type(e).__name__}: {e}); left out", final=True)
                continue
            _progress(f"[{i}/{len(scenes)}] {scene.slug}: {len(responses)} precomputed responses", final=True)
    manifest = {"version": __version__, "scenes": entries}
    _write(out / "manifest.json", json.dumps(manifest, ensure_ascii=False, indent=1))
    tail = f"?{urlencode({'q': questions[0]})}" if questions else ""
    _write(
        out / "index.html",
        templates.get_template("export_index.html").render(
            entries=entries,
            version=__version__,
            theme="auto",
            u=Links(root=".", suffix=".html", offline=True),
            tail=tail,
        ),
    )
    _report(entries, out, time.perf_counter() - t0)
    if broken:
        print(f"Incomplete: {', '.join(broken)} could not be exported (see above); their links will not open.")
    return 1 if broken else 0


def _report(entries: list[dict], out: Path, seconds: float) -> None:
    print(f"Done in {seconds:.1f} s. Open {(out / 'index.html').resolve().as_uri()}", flush=True)
    print("Needs the live server (inside-llm serve):")
    for e in entries:
        for note in e["needs_live_server"]:
            print(f"  {e['slug']}: {note}")
    print("  every scene: anything it fetches beyond its precomputed endpoint responses (e.g. live streams)")
