"""Meta-tests: exactly eleven scenes, each with TOML, JS module, endpoint, facts and consistent controls."""

from __future__ import annotations

import re

import pytest

from inside_llm.api.registry import CHAPTER_SLUGS, CHAPTERS
from inside_llm.paths import static_dir
from inside_llm.scenes import load_scenes
from inside_llm.web.facts import facts_for
from inside_llm.web.pages import rendered_fact

SCENES = load_scenes()


def test_exactly_eleven_scenes_in_registry_order():
    assert len(SCENES) == 11
    assert tuple(s.slug for s in SCENES) == CHAPTER_SLUGS
    assert [s.number for s in SCENES] == list(range(1, 12))


@pytest.mark.parametrize("scene", SCENES, ids=lambda s: s.slug)
def test_scene_has_js_module_and_endpoint(scene):
    assert (static_dir() / "js" / "scenes" / f"{scene.slug}.js").is_file()
    paths = {r.path for r in CHAPTERS[scene.slug].router.routes}
    assert f"/api/{scene.slug}" in paths


@pytest.mark.parametrize("scene", SCENES, ids=lambda s: s.slug)
def test_fact_figures_come_from_the_simulation(scene):
    facts = facts_for(scene.slug)
    assert set(scene.fact_fields()) <= set(facts), f"unfilled: {set(scene.fact_fields()) - set(facts)}"
    text = rendered_fact(scene)
    bare = re.sub(r"\{[^}]*\}", "", scene.fact)
    assert not re.search(r"(?<![\w.])\d", bare), f"a figure is typed into the fact: {scene.fact!r}"
    assert text and "{" not in text


@pytest.mark.parametrize("scene", SCENES, ids=lambda s: s.slug)
def test_controls_match_the_endpoint(scene, client):
    """Every control the page sends is a query parameter of the endpoint with the same default."""
    spec = client.get("/openapi.json").json()
    op = spec["paths"][f"/api/{scene.slug}"]["get"]
    params = {p["name"]: p for p in op.get("parameters", [])}
    for c in scene.controls:
        if not c.api:
            continue
        assert c.name in params, f"{scene.slug}: control {c.name} is not a parameter of /api/{scene.slug}"
        schema = params[c.name]["schema"]
        if "default" in schema:
            assert schema["default"] == c.default, f"{scene.slug}.{c.name}: default differs"
        if c.kind == "range":
            lo = schema.get("minimum", schema.get("exclusiveMinimum"))
            hi = schema.get("maximum")
            assert lo is not None and hi is not None, f"{scene.slug}.{c.name}: endpoint has no bounds"
            assert lo <= c.min and c.max <= hi, f"{scene.slug}.{c.name}: slider exceeds endpoint bounds"


# Pickers that deliberately leave catalog entries out, and why (issue 16: new entries in every chapter).
PICKER_EXCEPTIONS = {
    ("quantization", "precision"): {"fp16", "nvfp4", "mxfp4"},  # chapter 8 quantizes real arrays: no FP4 quantizer
    ("quantization", "model"): {"llama-2-7b"},
    ("quantization", "gpu"): {"h100-pcie"},
    ("parallelism", "model"): {"llama-2-7b"},
    ("kv-cache", "model"): {"llama-2-70b"},  # same KV shape as Llama 3.1 70B
    ("parallelism", "precision"): {"fp16"},
    ("gpu", "precision"): {"fp16"},
    ("roofline", "precision"): {"fp16"},
}


@pytest.mark.parametrize(
    "scene",
    [s for s in SCENES if any(c.name in ("model", "gpu", "precision") for c in s.controls)],
    ids=lambda s: s.slug,
)
def test_pickers_offer_every_catalog_entry_the_endpoint_accepts(scene, client):
    """Every model, GPU and weight format the chapter's endpoint accepts is in its picker (minus documented gaps)."""
    spec = client.get("/openapi.json").json()
    params = {p["name"]: p for p in spec["paths"][f"/api/{scene.slug}"]["get"].get("parameters", [])}
    for c in scene.controls:
        if c.name not in ("model", "gpu", "precision") or c.name not in params:
            continue
        schema = params[c.name]["schema"]
        accepted = set(schema.get("enum") or [v for s in schema.get("anyOf", []) for v in s.get("enum", [])])
        accepted = {v for v in accepted if v != "custom" and not str(v).startswith("demo")}
        offered = {value for value, _label in c.options}
        missing = accepted - offered - PICKER_EXCEPTIONS.get((scene.slug, c.name), set())
        assert not missing, f"{scene.slug}.{c.name} picker lacks {sorted(missing)}"


def test_a_unit_is_singular_beside_exactly_one():
    from inside_llm.scenes import singular_unit

    assert [singular_unit(u) for u in ("chats", "GPUs", "tokens", "requests")] == ["chat", "GPU", "token", "request"]
    assert [singular_unit(u) for u in ("requests/s", "USD", "per check")] == ["requests/s", "USD", "per check"]
    gpu = next(s for s in SCENES if s.slug == "gpu")
    tp = next(c for c in gpu.controls if c.name == "tp")
    assert (tp.unit_for(1), tp.unit_for(8)) == ("GPU", "GPUs")


def test_the_select_option_for_one_gpu_says_gpu(client):
    html = client.get("/tour/gpu").text
    assert (
        re.search(r'<option value="1"\s*>1 GPU</option>', html) and '<option value="8" selected>8 GPUs</option>' in html
    )
