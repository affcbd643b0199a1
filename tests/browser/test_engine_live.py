"""'This server, now' (scenes/engine-live.js) in Chromium: chapter 7 draws the real engine's seats as lanes and
chapter 6 its page pool, both fed by /api/engine; "Load it" starts demo chats that fill the seats. Never a prompt's
text; no console errors; an embed builds no panel and opens no feed."""

from __future__ import annotations

import re

import pytest

from inside_llm.api import engine as api
from inside_llm.api.demo_model import served_model
from inside_llm.engine import engine_for

pytestmark = pytest.mark.browser

LIVE = "() => document.querySelector('.le')?.dataset.state === 'live'"


@pytest.fixture()
def demo_engine():
    eng = engine_for(served_model("smollm2").model)
    yield eng
    eng.cancel_client(api.DEMO_CLIENT)


def load_it(page):
    page.wait_for_function(LIVE, timeout=60_000)
    page.locator(".le-load").click()
    page.wait_for_function("() => +document.querySelector('.le').dataset.seatsInUse >= 2", timeout=60_000)


def test_chapter_7_load_it_fills_the_seats_in_lanes(page, base_url, demo_engine):
    page.goto(base_url + "/tour/batching?step=4")
    load_it(page)
    panel = page.locator(".le")
    seats = int(panel.get_attribute("data-seats"))
    assert seats == demo_engine.limits.seats == 8
    assert panel.locator(".le-lane").count() == seats
    # each seated chat is a coloured span in its lane (chapter 7's request colours)
    page.wait_for_function("() => document.querySelectorAll('.le .le-span').length >= 2")
    fills = panel.locator(".le-span").evaluate_all("els => els.map(e => e.getAttribute('fill'))")
    assert all(f.startswith("var(--bqr-") for f in fills), fills
    text = panel.inner_text()
    assert re.search(r"\d+ of 8 seats in use · \d+ waiting", text), text
    assert re.search(r"[\d.,]+ tokens/s over the last 5 s", text) and "finished" in text
    assert (
        "Started" in panel.locator(".le-note").inner_text() or "still running" in panel.locator(".le-note").inner_text()
    )
    html = panel.evaluate("el => el.outerHTML")
    assert not any(q in html for q in api.DEMO_QUESTIONS) and "capital" not in html.lower()
    assert page.console_errors == []


def test_chapter_6_pool_matches_the_api(page, base_url, demo_engine):
    page.goto(base_url + "/tour/kv-cache?step=4")
    load_it(page)
    # what is drawn is one snapshot: its pages_in_use pages coloured, and the readout says the same number (read
    # in the same frame as the wait: the demo's short answers end, and free their pages, within a second or two)
    drawn = page.wait_for_function(
        "() => { const el = document.querySelector('.le'); return +el.dataset.pagesInUse >= 2 && "
        "[el.dataset.pagesInUse, el.querySelectorAll('.le-page').length, el.querySelector('.le-readouts').textContent]; }"
    ).json_value()
    panel = page.locator(".le")
    snap = page.request.get(base_url + "/api/engine").json()
    assert panel.locator(".le-free").count() == snap["pages"] == int(panel.get_attribute("data-pages"))
    assert int(drawn[0]) == drawn[1] >= 2
    assert drawn[2].startswith(f"{drawn[0]} of {snap['pages']} pages in use")
    per_page = snap["page_tokens"] * snap["bytes_per_token"]
    assert f"{snap['page_tokens']} tokens" in drawn[2] and f"{round(per_page / 1e3)} KB" in drawn[2], drawn[2]
    assert "prefix cache: " in drawn[2] and "tokens of seated chats found in pages another chat computed" in drawn[2]
    fills = panel.locator(".le-page").evaluate_all("els => els.map(e => e.getAttribute('fill'))")
    assert all(f.startswith("var(--kvr-") for f in fills)
    assert not any(q in panel.evaluate("el => el.outerHTML") for q in api.DEMO_QUESTIONS)
    assert page.console_errors == []


def test_the_panel_names_each_figures_series_and_its_lines_run(page, base_url):
    """Under each picture, the /metrics series of each drawn figure; "Load it yourself" holds this server's own
    curl and openai lines, and the Python one, pasted as it stands, gets an answer from this server."""
    for slug, series in (("batching", "vllm:num_requests_running"), ("kv-cache", "vllm:kv_cache_usage_perc")):
        page.goto(base_url + f"/tour/{slug}?step=4")
        page.wait_for_function(LIVE, timeout=60_000)
        names = page.locator(".le-metrics").inner_text()
        assert series in names and "/metrics" in names, names
        page.locator(".le-yourself summary").click()
        code = page.locator(".le-yourself code").all_inner_texts()
        assert any(c.startswith(f"curl -N {base_url}/v1/chat/completions") for c in code), code
        assert any(f"--base-url {base_url} " in c for c in code), code
    python = next(c for c in code if c.startswith("from openai import OpenAI"))
    printed = []
    exec(python, {"print": lambda *a: printed.append(a)})  # the panel's own line, against this server
    assert printed and printed[0][0] and printed[0][1].completion_tokens > 0
    assert page.console_errors == []


SPY = """(() => { const Real = window.EventSource; window.__feeds = [];
  window.EventSource = class extends Real { constructor(...a) { super(...a); window.__feeds.push(this); } }; })()"""


def test_the_feed_opens_while_shown_and_closes_when_the_chapter_goes(page, base_url):
    page.add_init_script(SPY)
    page.goto(base_url + "/tour/batching?step=4")
    page.wait_for_function(LIVE, timeout=60_000)
    page.locator(".le").scroll_into_view_if_needed()
    page.wait_for_function(
        "() => window.__feeds.some(f => f.url.endsWith('/api/engine/feed') && f.readyState === 1)", timeout=30_000
    )
    page.evaluate("document.activeElement.blur()")
    page.keyboard.press("ArrowRight")  # the next chapter: this scene unmounts
    page.wait_for_selector('#stage[data-slug="quantization"]')
    assert page.evaluate("window.__feeds.map(f => f.readyState)") == [2] * page.evaluate("window.__feeds.length")
    assert page.console_errors == []


def test_embed_builds_no_live_panel(page, base_url):
    asked = []
    page.on("request", lambda r: asked.append(r.url) if "/api/engine" in r.url else None)
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(base_url + "/embed/batching?step=9")
    page.wait_for_function("() => document.querySelectorAll('.bt-svg g[data-policy]').length === 2")
    assert page.locator(".le").count() == 0 and asked == []
    assert page.console_errors == []


def test_offline_the_panel_says_it_needs_the_live_server(browser, tmp_path):
    """An exported copy read from disk: no request leaves the page, and the panel says why it is empty."""
    from pagekit import watch_console

    from inside_llm.export import export_bundle

    assert export_bundle(tmp_path, ["kv-cache", "batching"]) == 0
    ctx = browser.new_context(viewport={"width": 1280, "height": 860})
    pg = watch_console(ctx.new_page())
    network = []
    ctx.route(re.compile(r"^https?://"), lambda route: (network.append(route.request.url), route.abort()))
    for slug in ("batching", "kv-cache"):
        pg.goto((tmp_path / "tour" / f"{slug}.html").as_uri())
        pg.wait_for_function("() => document.querySelector('.le')?.dataset.state === 'offline'")
        assert "needs the live server" in pg.locator(".le-note").inner_text()
        assert pg.locator(".le-load").is_disabled() and pg.locator(".le-lane, .le-page").count() == 0
    assert network == [] and pg.console_errors == []
    ctx.close()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_panel_passes_axe(browser, base_url, demo_engine, theme):
    from pagekit import serious_violations, watch_console

    ctx = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme=theme)
    pg = watch_console(ctx.new_page())
    for slug in ("batching", "kv-cache"):
        pg.goto(base_url + f"/tour/{slug}?step=4")
        load_it(pg)
        assert serious_violations(pg, ".le") == [], f"{slug} {theme}"
    assert pg.console_errors == []
    ctx.close()
