"""Embed pages and their options as the server renders them; only embeds may be framed elsewhere."""

from __future__ import annotations

import json
import posixpath
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


# ---- issue 22: frames from anywhere (CORS on public reads, file: decks) and oEmbed -------------------------


def test_embeds_may_be_framed_by_a_deck_opened_from_disk(client):
    assert client.get("/embed/layer").headers["content-security-policy"].endswith("frame-ancestors * file:")


@pytest.mark.parametrize(
    "path", ["/static/js/tour.js", "/static/css/theme.css", "/embed/tokens", "/api/tokens", "/api/catalog"]
)
def test_public_reads_may_be_read_from_any_origin(client, path):
    """An embed framed with sandbox="allow-scripts" has the opaque origin null: its modules and fetches need this."""
    r = client.get(path, headers={"Origin": "null"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-credentials" not in r.headers


@pytest.mark.parametrize("path", ["/", "/tour/tokens", "/dials", "/docs", "/healthz", "/openapi.json"])
def test_pages_and_meta_carry_no_cors_header(client, path):
    assert "access-control-allow-origin" not in client.get(path, headers={"Origin": "null"}).headers


def test_a_post_gets_no_cors_header(client):
    r = client.post("/api/tokens", json={"text": "hello"}, headers={"Origin": "https://elsewhere.example"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def oembed_link(html: str) -> str:
    tag = re.search(r'<link rel="alternate" type="application/json\+oembed" href="([^"]+)"', html)
    return tag.group(1).replace("&amp;", "&")


@pytest.mark.parametrize("path", ["/tour/layer?layer=3&q=Why", "/embed/roofline?batch=8", "/dials"])
def test_every_tour_and_embed_page_links_its_oembed(client, path):
    from urllib.parse import parse_qs, urlsplit

    href = oembed_link(client.get(path).text)
    parts = urlsplit(href)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == "http://testserver/oembed"
    assert parse_qs(parts.query) == {"url": [f"http://testserver{path}"], "format": ["json"]}


def test_oembed_answers_a_rich_iframe_of_the_same_state(client):
    r = client.get("/oembed", params={"url": "http://testserver/tour/layer?layer=3&q=Why", "format": "json"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
    d = r.json()
    assert {k: d[k] for k in ("version", "type", "width", "height", "provider_url")} == {
        "version": "1.0",
        "type": "rich",
        "width": 960,
        "height": 540,
        "provider_url": "http://testserver/",
    }
    assert d["title"] == "3. Inside one layer · Inside LLM Inference"
    assert d["html"].startswith(
        '<iframe src="http://testserver/embed/layer?layer=3&amp;q=Why" width="960" height="540"'
    )


@pytest.mark.parametrize(
    "maxwidth, maxheight, size",
    [(None, None, (960, 540)), (400, None, (400, 225)), (None, 180, (320, 180)), (640, 200, (355, 200))],
)
def test_oembed_fits_maxwidth_and_maxheight_at_16_9(client, maxwidth, maxheight, size):
    params = {"url": "http://testserver/embed/tokens", "maxwidth": maxwidth, "maxheight": maxheight}
    d = client.get("/oembed", params={k: v for k, v in params.items() if v is not None}).json()
    assert (d["width"], d["height"]) == size and f'width="{size[0]}" height="{size[1]}"' in d["html"]


@pytest.mark.parametrize(
    "url, fmt, status",
    [
        ("http://elsewhere.example/tour/layer", "json", 404),
        ("http://testserver/tour/no-such-chapter", "json", 404),
        ("http://testserver/", "json", 404),
        ("javascript:alert(1)", "json", 404),
        ("http://testserver/tour/layer", "xml", 501),
    ],
)
def test_oembed_refusals_have_the_specs_status_and_a_short_body(client, url, fmt, status):
    r = client.get("/oembed", params={"url": url, "format": fmt})
    assert r.status_code == status and len(r.content) < 200 and r.json()["detail"]


def test_oembed_bounds_are_refused_in_words(client):
    r = client.get("/oembed", params={"url": "http://testserver/tour/layer", "maxwidth": "0"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "maxwidth"


def test_micawber_discovers_and_expands_a_tour_url(base_url, tmp_path):
    """A real oEmbed consumer: the provider is found from the page's own discovery <link>, entered in micawber's
    provider list (oembed.com's providers.json format), and micawber turns a pasted tour link into the iframe."""
    import urllib.request

    from micawber.providers import bootstrap_oembed

    tour = f"{base_url}/tour/layer?layer=3"
    with urllib.request.urlopen(tour, timeout=30) as page:
        endpoint = oembed_link(page.read().decode()).split("?")[0]
    providers = [
        {
            "provider_name": "Inside LLM Inference",
            "provider_url": f"{base_url}/",
            "endpoints": [{"schemes": [f"{base_url}/tour/*", f"{base_url}/embed/*"], "url": endpoint}],
        }
    ]
    (tmp_path / "providers.json").write_text(json.dumps(providers))
    registry = bootstrap_oembed(providers_file=str(tmp_path / "providers.json"), timeout=30)
    assert registry.request(tour)["type"] == "rich"
    post = registry.parse_text(f"Look inside a layer:\n{tour}\n")  # a link on its own line becomes the frame
    frame = f'<iframe src="{base_url}/embed/layer?layer=3" width="960" height="540"'
    assert post.startswith("Look inside a layer:\n<iframe ") and frame in post


# ---- issue 25: no module waterfall ---------------------------------------------------------------------------


def test_static_files_go_gzipped_with_revalidation(client):
    plain = client.get("/static/js/lib/controller.js", headers={"Accept-Encoding": "identity"})
    r = client.get("/static/js/lib/controller.js", headers={"Accept-Encoding": "gzip"})
    assert r.headers["content-encoding"] == "gzip" and r.headers["cache-control"] == "no-cache"
    assert int(r.headers["content-length"]) < len(plain.content) / 2 and r.content == plain.content  # httpx inflates
    assert r.headers["etag"].endswith('-gzip"') and r.headers["etag"] != plain.headers["etag"]
    assert "Accept-Encoding" in r.headers["vary"] and plain.headers["cache-control"] == "no-cache"
    for tag in (r.headers["etag"], plain.headers["etag"]):  # either representation's tag revalidates
        again = client.get("/static/js/lib/controller.js", headers={"Accept-Encoding": "gzip", "If-None-Match": tag})
        assert again.status_code == 304 and again.headers["etag"] == r.headers["etag"]


def test_small_and_binary_static_files_are_not_gzipped(client):
    assert "content-encoding" not in client.get("/static/favicon.svg", headers={"Accept-Encoding": "gzip"}).headers


def _preloads(html: str) -> list[str]:
    return re.findall(r'<link rel="modulepreload" href="([^"]+)">', html)


@pytest.mark.parametrize(
    "path, entry, slug", [("/tour/batching", "tour.js", "batching"), ("/", "cover.js", "parallelism")]
)
def test_pages_preload_their_whole_module_graph(client, path, entry, slug):
    """Every module the page runs (entry, scene, and everything they import) is preloaded, and nothing else."""
    from inside_llm.paths import static_dir

    links = _preloads(client.get(path).text)
    assert links[:2] == [f"/static/js/{entry}", f"/static/js/scenes/{slug}.js"] and len(set(links)) == len(links)
    js = static_dir() / "js"
    graph, todo = set(), [entry, f"scenes/{slug}.js"]
    while todo:  # an independent walk of the static imports
        mid = todo.pop()
        if mid in graph:
            continue
        graph.add(mid)
        base = mid.rsplit("/", 1)[0] + "/" if "/" in mid else ""
        for spec in re.findall(
            r"""^\s*(?:import|export)\b[^'"`;]*?from\s*['"](\.[^'"]+)['"]""", (js / mid).read_text(), re.M
        ):
            todo.append(posixpath.normpath(base + spec))
    assert {link.removeprefix("/static/js/") for link in links} == graph
    for link in links:
        assert client.get(link).status_code == 200


def test_offline_pages_preload_nothing():
    from inside_llm.scenes import scene_by_slug
    from inside_llm.web.pages import Links, page_context

    ctx = page_context(scene_by_slug("tokens"), {}, embed=False, links=Links(root="..", suffix=".html", offline=True))
    assert ctx["modules"] == ()
