"""'That server, now' (scenes/attach-live.js) in Chromium: with servers attached (a loopback server serving SGLang's
and the tour's own recorded /metrics pages, a llama-server's pages, and a dead port), chapters 6 and 7 draw the attached server's figures
from GET /api/attach, each named by its engine's metric; picking the dead one shows what went wrong in words. With
none attached (the shared live server) no panel is built."""

from __future__ import annotations

import socket

import pytest
from hostile import hostile_server
from livekit import serve_in_thread
from pagekit import open_page, serious_violations

from inside_llm.app import create_app
from inside_llm.attach.targets import parse_targets
from inside_llm.settings import Settings

pytestmark = pytest.mark.browser
SGLANG = "tests/fixtures/attach/sglang_production_metrics_doc.txt"


@pytest.fixture(scope="module")
def attached_url():
    """The tour with three attached servers: `sg` (SGLang's documented page), `gone` (nothing listens) and `ll`
    (a llama-server: /metrics, /slots, /props, /v1/models)."""
    with hostile_server() as h, open(SGLANG, "rb") as f:
        h.pages["/sg/metrics"] = f.read()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = s.getsockname()[1]  # closed again: nothing listens there
        app = create_app(
            Settings(attach=parse_targets([f"sg={h.url}/sg gone=http://127.0.0.1:{dead} ll={h.url}/llama-ok"]))
        )
        with serve_in_thread(app) as url:
            yield url


LIVE = "() => document.querySelector('.ta')?.dataset.state === 'live'"


def test_chapter_7_draws_the_attached_servers_queue(page, attached_url):
    open_page(page, attached_url + "/tour/batching?step=4")
    page.wait_for_function(LIVE, timeout=60_000)
    api = page.request.get(attached_url + "/api/attach/sg").json()["reading"]
    panel = page.locator(".ta")
    assert panel.get_attribute("data-engine") == "sglang"
    assert float(panel.get_attribute("data-running")) == api["running"]["value"] == 162
    assert float(panel.get_attribute("data-waiting")) == api["waiting"]["value"] == 2826
    page.wait_for_function("() => document.querySelectorAll('.ta .ta-running').length >= 1")
    codes = panel.locator(".ta-metric").all_inner_texts()
    assert "sglang:num_running_reqs" in codes and "sglang:num_queue_reqs" in codes
    assert "sglang:time_to_first_token_seconds" in codes
    text = panel.inner_text()
    assert "162 running" in text and "2,826 waiting" in text and "p50 30,000 ms" in text
    # the panel comes right after "This server, now"
    assert page.evaluate("() => document.querySelector('.le').nextElementSibling.classList.contains('ta')")
    # the dead one, picked by name, says what went wrong
    panel.locator("select").select_option("gone")
    page.wait_for_function("() => document.querySelector('.ta').dataset.name === 'gone' && "
                           "document.querySelector('.ta').dataset.state === 'failing'", timeout=60_000)  # fmt: skip
    assert "Nothing answers at its address" in panel.locator(".ta-status").inner_text()


def test_chapter_6_fills_the_pool_to_the_attached_servers_kv_usage(page, attached_url):
    open_page(page, attached_url + "/tour/kv-cache?step=4")
    page.wait_for_function(LIVE, timeout=60_000)
    panel = page.locator(".ta")
    assert panel.locator(".ta-used").count() == round(0.28 * 128)
    assert panel.locator(".ta-used").count() + panel.locator(".ta-free").count() == 128
    text = panel.inner_text()
    assert "28.0% of its KV cache in use" in text and "prefix-cache hit rate 0.8%" in text, text  # 0.0075
    assert "sglang:token_usage" in panel.locator(".ta-metric").all_inner_texts()
    assert "SGLang counts tokens, not blocks" in text
    assert "no preemption count" in text


def pick(page, name: str):
    page.locator(".ta select").select_option(name)
    page.wait_for_function(f"() => document.querySelector('.ta').dataset.name === '{name}' && "
                           "document.querySelector('.ta').dataset.state === 'live'", timeout=60_000)  # fmt: skip


def test_a_llama_server_shows_its_slots_and_what_it_holds(page, attached_url):
    """llama.cpp: ch7 says how many of its slots are busy and their context (GET /props, /slots); ch6 fills the
    pool to the slots' held tokens over their context, and says that is what it is (no KV ratio in /metrics)."""
    open_page(page, attached_url + "/tour/batching?step=4")
    page.wait_for_function(LIVE, timeout=60_000)
    pick(page, "ll")
    page.wait_for_function("() => document.querySelector('.ta').innerText.includes('slots busy')", timeout=60_000)
    api = page.request.get(attached_url + "/api/attach/ll").json()["reading"]
    panel = page.locator(".ta")
    busy, total, ctx = (api[k]["value"] for k in ("slots_busy", "slots_total", "context_tokens"))
    assert f"{busy:,.0f} of {total:,.0f} slots busy, {ctx:,.0f} tokens of context each" in panel.inner_text()
    assert "GET /props: total_slots" in panel.locator(".ta-metric").all_inner_texts()
    assert "llama.cpp" in panel.locator(".ta-sub").inner_text()
    open_page(page, attached_url + "/tour/kv-cache?step=4")
    page.wait_for_function(LIVE, timeout=60_000)
    pick(page, "ll")
    page.wait_for_function("() => document.querySelector('.ta').innerText.includes('context held')", timeout=60_000)
    assert panel.locator(".ta-used").count() == round(api["kv_usage"]["value"] * 128)
    assert "of its slots’ context held in their KV cells" in panel.inner_text()
    assert "GET /slots: n_prompt_tokens / n_ctx" in panel.locator(".ta-metric").all_inner_texts()


def test_no_panel_when_nothing_is_attached(page, base_url):
    open_page(page, base_url + "/tour/batching?step=4")
    page.wait_for_function("() => document.querySelector('.le')?.dataset.state !== 'connecting'", timeout=60_000)
    page.wait_for_load_state("networkidle")
    assert page.locator(".ta").count() == 0


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_panel_passes_axe(browser, attached_url, theme):
    """axe-core (WCAG 2.1 A/AA) on the attached panel, wide and phone: no serious or critical violation."""
    for width, height in ((1440, 900), (390, 844)):
        ctx = browser.new_context(viewport={"width": width, "height": height}, color_scheme=theme)
        page = ctx.new_page()
        try:
            open_page(page, attached_url + "/tour/kv-cache?step=4")
            page.wait_for_function(LIVE, timeout=60_000)
            page.locator(".ta").scroll_into_view_if_needed()
            assert serious_violations(page, ".ta") == [], f"{theme} {width}px"
        finally:
            ctx.close()
