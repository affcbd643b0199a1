"""/api/facts/<slug>: "the number" for the same parameters as the chapter endpoint."""

from __future__ import annotations

import re

import pytest

from inside_llm.api.registry import CHAPTER_SLUGS
from inside_llm.scenes import scene_by_slug

# one parameter per chapter that its fact quotes, and a figure that must appear once it is moved
MOVED = {
    "tokens": ("text=one+two+three", "This text is 3 tokens for 3 words"),
    "embeddings": ("prompt=", "Your prompt is 0 tokens"),
    "layer": ("layer=2", "Layer 2 (counting from zero) of"),
    "gpu": ("gpu=h200", "H200"),
    "roofline": ("batch=1024", "1,024 chats at a time"),
    "kv-cache": ("block_size=64", "64-token pages"),
    "batching": ("rate=16", "At 16 requests per second"),
    "quantization": ("precision=fp8", "in FP8 ("),
    "speculative": ("alpha=0.5", "probability 50%"),
    "parallelism": ("tp=4", "Split 4 ways by tensor"),
    "dials": ("batch=64", "serving 64 chats"),
}


@pytest.mark.parametrize("slug", CHAPTER_SLUGS)
def test_facts_follow_the_params(client, slug):
    default = client.get(f"/api/facts/{slug}").json()
    assert default["slug"] == slug and "{" not in default["text"]
    assert set(scene_by_slug(slug).fact_fields()) <= set(default["values"])
    query, figure = MOVED[slug]
    moved = client.get(f"/api/facts/{slug}?{query}").json()["text"]
    assert figure in moved and moved != default["text"]


def test_facts_validate_like_the_chapter(client):
    r = client.get("/api/facts/gpu?tp=3")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "tp"
    assert client.get("/api/facts/parallelism?tp=4&pp=4").status_code == 422
    assert client.get("/api/facts/nope").status_code == 404


def test_long_text_facts_by_post(client):
    text = "word " * 3000
    r = client.post("/api/facts/tokens", json={"text": text})
    assert r.status_code == 200 and re.search(r"for 3,000 words", r.json()["text"])


def test_the_dials_fact_for_a_setup_that_does_not_fit_says_so_before_any_figure(client):
    text = client.get(
        "/api/facts/dials", params={"model": "llama-3.1-405b", "gpu": "h100-sxm", "gpus": 8, "precision": "bf16"}
    ).json()["text"]
    assert "does not fit: each GPU is" in text and "serves no one" in text
    assert text.index("does not fit") < text.index("first token in")
    assert "gives each user" in client.get("/api/facts/dials").json()["text"]


@pytest.mark.parametrize("slug", CHAPTER_SLUGS)
def test_each_chapter_answer_carries_its_facts(client, slug):
    """One request per state: the chapter's own answer holds the same fact as /api/facts/<slug>, moved or not."""
    query, figure = MOVED[slug]
    for q in ("", query):
        d = client.get(f"/api/{slug}?{q}").json()
        assert d["facts"] == {k: v for k, v in client.get(f"/api/facts/{slug}?{q}").json().items() if k != "slug"}
    assert figure in d["facts"]["text"]


def test_long_text_answer_by_post_carries_its_facts(client):
    r = client.post("/api/tokens", json={"text": "word " * 3000})
    assert r.status_code == 200 and "for 3,000 words" in r.json()["facts"]["text"]


def test_the_schema_shows_the_facts_field(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for name in ("DialsResponse", "GpuResponse", "TokensResponse", "ParallelismResult", "KVCacheResponse"):
        assert schemas[name]["properties"]["facts"]["anyOf"][0]["$ref"] == "#/components/schemas/Facts", name


def test_a_state_is_estimated_once_for_its_page_answer_and_fact(client, monkeypatch):
    """The dials page renders its fact, then asks /api/dials (which carries the fact): one estimate in all."""
    from inside_llm.api import dials
    from inside_llm.sim.cost import serving

    calls = []
    real = serving.estimate_resolved  # what the API calls (estimate() wraps it): counting it counts every estimate
    monkeypatch.setattr(serving, "estimate_resolved", lambda sp: calls.append(sp) or real(sp))
    q = {"prompt_tokens": 1234, "batch": 24}
    assert client.get("/dials", params=q).status_code == 200
    d = client.get("/api/dials", params=q).json()
    assert client.get("/api/facts/dials", params=q).json()["text"] == d["facts"]["text"]
    assert len(calls) == 1 and dials.dials_state.cache_info().hits >= 2
