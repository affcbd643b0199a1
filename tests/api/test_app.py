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
    for path in (
        "/static/..%2f..%2fpyproject.toml",
        "/static/../pyproject.toml",
        "/static/%2e%2e/README.md",
        "/static//etc/passwd",
    ):
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

    routers = [
        m.router
        for info in pkgutil.iter_modules(api.__path__)
        if hasattr(m := importlib.import_module(f"inside_llm.api.{info.name}"), "router")
    ]
    assert len(routers) == len(ROUTERS) == 19 and all(any(r is s for s in ROUTERS) for r in routers)


def test_the_chapter_stages_do_not_import_each_other():
    """Chapters 2 and 3 share the demo model's helpers through api/demo_model.py, not through each other."""
    import ast

    from inside_llm.paths import PACKAGE_DIR

    for name in ("layer", "embeddings", "generate"):
        tree = ast.parse((PACKAGE_DIR / "api" / f"{name}.py").read_text(encoding="utf-8"))
        imported = {a.module for a in ast.walk(tree) if isinstance(a, ast.ImportFrom) and a.level == 1}
        assert not imported & {"embeddings", "generate", "layer", "batching"}, (name, imported)


BAD_INPUTS = [  # one of each kind of refusal: a bound, a choice, a type, a joined limit, a name, a body
    ("GET", "/api/batching?seats=999", None, "seats", "Seats must be at most 64, not 999."),
    ("GET", "/api/batching?rate=abc", None, "rate", "The arrival rate must be a number, not 'abc'."),
    ("GET", "/api/layer?layer=-1", None, "layer", "The layer must be at least 0, not -1."),
    (
        "GET",
        "/api/kv-cache?workload=x",
        None,
        "workload",
        "The workload must be one of sharegpt, alpaca or fixed, not 'x'.",
    ),
    (
        "GET",
        "/api/dials?tp=3&pp=2",
        None,
        "tp",
        "Pipeline stages × tensor parallel must divide the GPU count (8); 2 × 3 does not.",
    ),
    ("GET", "/api/gpu?tp=3", None, "tp", "Tensor parallel (tp) must be 1, 2, 4 or 8 GPUs, not 3."),
    ("GET", "/api/tokens?bogus=1", None, "bogus", "'bogus' is not a setting of this endpoint."),
    (
        "POST",
        "/api/catalog/models",
        {"hidden_size": 8},
        "num_hidden_layers",
        "config.json is missing the field 'num_hidden_layers'.",
    ),
    ("POST", "/api/tokens", [1], None, "The request body must be a JSON object."),
]
RAW = ("Value error", "Input should", "String should", "Extra inputs", "Field required", " * ", "got ")


def test_bad_input_is_refused_in_words_naming_the_field(client):
    """Every 422 says in words what is wrong and names the field (`field`, and `loc` as FastAPI has it)."""
    for method, url, body, field, message in BAD_INPUTS:
        r = client.request(method, url, json=body)
        assert r.status_code == 422, (url, r.text)
        err = r.json()["detail"][0]
        assert (err["field"], err["msg"]) == (field, message), url
        assert err["loc"][-1] == (field or err["loc"][0]) and err["loc"][0] in ("query", "body")
        assert not any(raw in err["msg"] for raw in RAW), err["msg"]


def test_a_url_over_the_limit_gets_414_in_json_over_a_real_socket(base_url):
    """uvicorn would answer a 180 KB query with a bare 400 and a reset; the server reads it and says 414."""
    import http.client
    from urllib.parse import urlsplit

    from inside_llm.settings import Settings

    host = urlsplit(base_url)
    conn = http.client.HTTPConnection(host.hostname, host.port, timeout=30)
    try:
        conn.request("GET", "/api/tokens?text=" + "%C3%A9" * 30_000)  # 180,000 bytes of percent-encoded é
        r = conn.getresponse()
        body = r.read()
    finally:
        conn.close()
    assert r.status == 414 and r.getheader("content-type") == "application/json"
    detail = __import__("json").loads(body)["detail"]
    assert f"{Settings.max_url_bytes:,}" in detail and "POST /api/tokens" in detail and "180," in detail


def test_get_tokens_states_its_limit_in_bytes_of_url(client):
    from inside_llm.settings import Settings

    op = client.get("/openapi.json").json()["paths"]["/api/tokens"]["get"]
    limit = f"{Settings.max_url_bytes:,} bytes"
    assert limit in op["description"] and "POST /api/tokens" in op["description"] and "414" in op["responses"]
    text = next(p for p in op["parameters"] if p["name"] == "text")
    assert limit in text["description"] and "POST /api/tokens" in text["description"]


def test_sim_results_are_their_own_response_models_with_every_field_described(client):
    """A sim dataclass used as a response model shows each field's description (dataclasses.field metadata)
    in /docs, and a computed derivation input has no `source` key while an outside figure keeps its own."""
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    names = ("Roof", "RooflinePoint", "MemoryBreakdown", "NodeFacts", "Derivation", "DerivationInput")
    for name in (*names, "ParallelismResult", "SpeculativeResponse", "StreamOut", "EngineSnapshot", "ChatProgress"):
        props = schemas[name]["properties"]
        assert props and all(p.get("description") for p in props.values()), name
    inputs = client.get("/api/roofline").json()["math"]["ridge_flops_per_byte"]["inputs"]
    assert [("source" in i) for i in inputs] == [True, True]
    inputs = client.get("/api/roofline").json()["math"]["decode_arithmetic_intensity"]["inputs"]
    assert [("source" in i) for i in inputs] == [False, False, False]
