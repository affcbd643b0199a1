"""App-wide contracts: health, pages, security headers, body cap, docs, static safety."""

from __future__ import annotations

from inside_llm import __version__
from inside_llm.api.registry import CHAPTER_SLUGS
from inside_llm.app import create_app
from inside_llm.settings import Settings


def test_healthz_reports_version(client):
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok", "version": __version__}


def test_every_step_has_a_tour_and_an_embed_page(client):
    for slug in CHAPTER_SLUGS:
        tour = client.get(f"/tour/{slug}")
        assert tour.status_code == 200 and f'data-slug="{slug}"' in tour.text
        assert 'class="steps"' in tour.text
        embed = client.get(f"/embed/{slug}")
        assert embed.status_code == 200 and 'class="steps"' not in embed.text


def test_the_cover_asks_and_lists_every_step_with_its_hook(client):
    from markupsafe import escape

    from inside_llm.scenes import load_scenes

    html = client.get("/").text
    assert "Ask the server something" in html and 'action="/tour/tokens" method="get"' in html
    assert 'data-slug="parallelism"' in html, "the cover draws chapter 10's board"
    for s in load_scenes():
        assert f'href="/tour/{s.slug}" data-step="{s.slug}"><b>{s.number}</b>' in html and escape(s.hook) in html


def test_the_question_fills_every_question_control(client):
    assert 'value="Who wrote Hamlet?"' in client.get("/tour/embeddings?q=Who+wrote+Hamlet%3F").text
    assert ">Who wrote Hamlet?</textarea>" in client.get("/tour/tokens?q=Who+wrote+Hamlet%3F").text
    assert 'value="Mine"' in client.get("/tour/layer?q=Theirs&prompt=Mine").text, "a named control wins"
    state = client.get("/tour/gpu?q=Hi").text
    assert '"question": "Hi"' in state


def test_unknown_step_is_404(client):
    assert client.get("/tour/nope").status_code == 404


def test_url_state_fills_the_controls(client):
    html = client.get("/tour/tokens", params={"text": "state in the URL", "encoding": "llama3"}).text
    assert "state in the URL</textarea>" in html
    assert '<option value="llama3" selected>' in html


def test_bad_url_values_fall_back_to_defaults(client):
    assert client.get("/tour/tokens", params={"encoding": "bogus"}).status_code == 200


def test_security_headers(client):
    page = client.get("/tour/tokens")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    assert "frame-ancestors 'self'" in csp and page.headers["x-frame-options"] == "SAMEORIGIN"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["referrer-policy"]
    embed = client.get("/embed/tokens")
    assert "frame-ancestors *" in embed.headers["content-security-policy"]
    assert "x-frame-options" not in embed.headers


def test_frame_ancestors_is_configurable():
    from fastapi.testclient import TestClient

    c = TestClient(create_app(Settings(frame_ancestors="https://slides.example")))
    assert "frame-ancestors https://slides.example" in c.get("/").headers["content-security-policy"]


def test_no_inline_script_in_pages(client):
    html = client.get("/tour/tokens").text
    assert '<script type="module" src="/static/js/tour.js">' in html
    for chunk in html.split("<script")[1:]:
        assert 'src="' in chunk.split(">")[0] or 'type="application/json"' in chunk.split(">")[0]


def test_request_body_over_cap_is_413(client):
    r = client.post("/api/tokens", content=b"x" * 1_000_001, headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_static_files_refuse_traversal(client):
    for path in ("/static/..%2f..%2fpyproject.toml", "/static/../pyproject.toml", "/static/%2e%2e/README.md",
                 "/static//etc/passwd"):
        r = client.get(path)
        assert r.status_code in (400, 404), path
        assert "[project]" not in r.text


def test_docs_page_and_openapi(client):
    assert "api-docs" in client.get("/docs").text
    spec = client.get("/openapi.json").json()
    assert "/api/tokens" in spec["paths"]


def test_every_router_is_registered_in_the_registry():
    """A module under inside_llm.api that has a `router` is served: registry.ROUTERS lists it (and nothing else)."""
    import importlib
    import pkgutil

    import inside_llm.api as api
    from inside_llm.api.registry import ROUTERS

    routers = [m.router for info in pkgutil.iter_modules(api.__path__)
               if hasattr(m := importlib.import_module(f"inside_llm.api.{info.name}"), "router")]
    assert len(routers) == len(ROUTERS) == 13 and all(any(r is s for s in ROUTERS) for r in routers)


def test_the_chapter_stages_do_not_import_each_other():
    """Chapters 2 and 3 share the demo model's helpers through api/demo_model.py, not through each other."""
    import ast

    from inside_llm.paths import PACKAGE_DIR

    for name in ("layer", "embeddings", "generate"):
        tree = ast.parse((PACKAGE_DIR / "api" / f"{name}.py").read_text(encoding="utf-8"))
        imported = {a.module for a in ast.walk(tree) if isinstance(a, ast.ImportFrom) and a.level == 1}
        assert not imported & {"embeddings", "generate", "layer", "batching"}, (name, imported)
