"""Embed pages and their options as the server renders them; only embeds may be framed elsewhere."""

from __future__ import annotations

import json
import re

import pytest

from inside_llm.web.pages import embed_options


def state(html: str) -> dict:
    raw = re.search(r'<script type="application/json" id="page-state">(.*?)</script>', html, re.S).group(1)
    return json.loads(raw)


@pytest.mark.parametrize(
    "query, expected",
    [
        ({}, {}),
        (
            {"controls": "1", "autoplay": "0", "theme": "dark", "present": "1"},
            {"controls": "1", "autoplay": "0", "theme": "dark", "present": "1"},
        ),
        ({"controls": "yes", "theme": "purple", "autoplay": "2"}, {}),
        ({"step": "3"}, {"step": "3"}),
        ({"step": "last"}, {"step": "last"}),
        ({"step": "-1"}, {}),
        ({"step": "1e9"}, {}),
        ({"step": "99999"}, {}),
        ({"scale": "1.5"}, {"scale": "1.5"}),
        ({"scale": "9"}, {}),
        ({"scale": "nan"}, {}),
        ({"size": "xl"}, {"scale": "1.7"}),
        ({"size": "huge"}, {}),
    ],
)
def test_embed_options_are_validated(query, expected):
    assert embed_options(query) == expected


def test_embed_hides_controls_unless_asked(client):
    html = client.get("/embed/tokens").text
    assert 'id="embed-controls" hidden' in html and "site-header" not in html
    shown = client.get("/embed/tokens", params={"controls": "1"}).text
    assert 'id="embed-controls">' in shown and 'id="ctl-text"' in shown


def test_embed_renders_theme_scale_and_state(client):
    html = client.get("/embed/tokens", params={"theme": "dark", "scale": "2", "step": "1", "encoding": "llama3"}).text
    assert '<html lang="en" data-theme="dark" style="--scale: 2.0">' in html
    st = state(html)
    assert st["embed"] is True and st["offline"] is False
    assert st["options"] == {"theme": "dark", "step": "1", "scale": "2.0"}
    assert st["params"]["encoding"] == "llama3" and st["urls"]["embed"] == "/embed/"
    assert '<script type="module" src="/static/js/tour.js"></script>' in html


def test_tour_has_a_labelled_stage_toolbar(client):
    html = client.get("/tour/tokens").text
    toolbar = re.search(r'<div class="stage-tools"(.*?)</div>', html, re.S).group(0)
    for tool in ("share", "embed", "svg", "png", "present"):
        button = re.search(rf'<button[^>]*data-tool="{tool}"[^>]*>', toolbar).group(0)
        assert 'type="button"' in button and 'aria-label="' in button


@pytest.mark.parametrize("slug", ["tokens", "no-such-chapter"])
def test_only_embeds_are_framable(client, slug):
    """By path, whatever the page: every /embed/ response may be framed, nothing else may."""
    embed = client.get(f"/embed/{slug}")
    assert "frame-ancestors *" in embed.headers["content-security-policy"]
    assert "x-frame-options" not in embed.headers
    tour = client.get(f"/tour/{slug}")
    assert "frame-ancestors 'self'" in tour.headers["content-security-policy"]
    assert tour.headers["x-frame-options"] == "SAMEORIGIN"
