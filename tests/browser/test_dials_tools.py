"""Chapter 11's practitioner panels in a real Chromium: "Explain my launch command" draws what GET /api/explain says."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlencode
from urllib.request import urlopen

import pytest
from pagekit import open_page

pytestmark = pytest.mark.browser
SHOTS = Path(__file__).parents[2] / "out" / "screens"


def _api(base_url: str, **q) -> dict:
    with urlopen(f"{base_url}/api/explain?{urlencode(q)}", timeout=60) as r:
        return json.load(r)


def test_explain_panel_draws_the_api_answer(page, base_url):
    open_page(page, base_url + "/dials?gpu=l40s")
    page.locator("#dials-explain > summary").click()
    page.locator('[data-example="llama.cpp"]').click()
    page.wait_for_selector(".explain-out:not([hidden]) .explain-log")
    cmd = page.locator("#explain-cmd").input_value()
    api = _api(base_url, cmd=cmd, gpu="l40s")
    assert page.locator(".explain-log").inner_text() == "\n".join(api["log_lines"])
    drawn = page.locator(".explain-bar .xseg").evaluate_all("els => els.map(e => [e.dataset.key, +e.dataset.gib])")
    assert drawn == [[s["key"], s["gib"]] for s in api["memory"] if s["gib"] >= 0.01]  # rounding parts not drawn
    assert "n_ctx = 2048" in page.locator(".explain-log").inner_text()  # -c 8192 -np 4: each slot gets 2,048
    assert page.locator(".explain-verdict").inner_text() == api["verdict"]
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#dials-explain").screenshot(path=str(SHOTS / "dials-explain.png"))


def test_explain_panel_says_which_word_is_wrong(page, base_url):
    page.allowed_errors.append("422")  # the malformed command is an expected 422
    open_page(page, base_url + "/tour/dials")
    page.locator("#dials-explain").evaluate("(d) => { d.open = true; }")  # open, whatever state it kept
    page.locator("#explain-cmd").fill("vllm serve Qwen/Qwen3-32B --tensor-parallel-size two")
    page.locator(".explain-form button[type=submit]").click()
    page.wait_for_function("() => document.querySelector('.explain-status').textContent.includes('word 5')")
    text = page.locator(".explain-status").inner_text()
    assert "--tensor-parallel-size takes a whole number, not 'two'" in text
    assert page.locator(".explain-out").is_hidden()


def test_download_link_is_this_setups_csv(page, base_url):
    open_page(page, base_url + "/dials?batch=64&tp=4")
    href = page.locator("#dials-csv").get_attribute("href")
    assert href.endswith("&format=csv") and "batch=64" in href and "tp=4" in href
    with urlopen(base_url + href, timeout=60) as r:
        text = r.read().decode()
    header, row = text.strip().split("\r\n")
    values = dict(zip(header.split(","), row.split(","), strict=True))
    assert (values["batch"], values["tp"]) == ("64", "4")


def test_sweep_chart_draws_the_apis_points_and_the_memory_knee(page, base_url):
    open_page(page, base_url + "/dials?batch=16")
    page.locator("#dials-tools > summary").click()
    page.wait_for_selector("#sweep-chart .sweep-dot")
    api = json.load(urlopen(f"{base_url}/api/dials/sweep?batch=16&x=batch", timeout=60))
    dots = page.locator("#sweep-chart .sweep-dot").evaluate_all("els => els.map(e => [e.dataset.x, +e.dataset.y])")
    assert dots == [[str(p["x"]), p["tokens_per_s_total"]] for p in api["points"] if p["fits"]]
    assert page.locator("#sweep-chart .sweep-dot.current").get_attribute("data-x") == "16"
    assert page.locator("#sweep-chart .sweep-knee").inner_html() == f"memory runs out at {api['knee']}"
    page.locator("#sweep-y").select_option("ttft_ms")
    page.wait_for_function(
        "(y) => document.querySelector('#sweep-chart .sweep-dot')?.dataset.y === String(y)",
        arg=api["points"][0]["ttft_ms"],
    )
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#dials-tools").screenshot(path=str(SHOTS / "dials-sweep.png"))


def test_solve_answers_as_the_api_and_adopts_the_setup(page, base_url):
    open_page(page, base_url + "/dials")
    page.locator("#dials-tools > summary").click()
    page.locator("#solve-ttft").fill("2000")
    page.locator("#solve-tps").fill("20")
    page.locator(".solve-form button[type=submit]").click()
    page.wait_for_selector("#solve-adopt:not([hidden])")
    api = json.load(urlopen(f"{base_url}/api/dials/solve?ask=batch&max_ttft_ms=2000&min_tokens_per_s_per_user=20"))
    assert page.locator("#solve-answer").inner_text() == api["text"]
    assert page.locator("#solve-answer").get_attribute("data-binding") == api["binding"] == "ttft"
    page.locator("#solve-adopt").click()
    page.wait_for_function("(b) => new URL(location.href).searchParams.get('batch') === String(b)", arg=api["value"])
    page.locator("#solve-ttft").fill("1")
    page.locator(".solve-form button[type=submit]").click()
    page.wait_for_function("() => document.querySelector('#solve-answer').textContent.startsWith('Infeasible')")
    assert page.locator("#solve-adopt").is_hidden()


def test_pinned_a_stays_beside_b_with_the_difference(page, base_url):
    open_page(page, base_url + "/dials?batch=16")
    page.locator("#dials-tools > summary").click()
    page.wait_for_selector("#sweep-chart .sweep-dot")
    page.locator("#sweep-pin").click()
    page.locator("#ctl-precision").select_option("fp8")
    page.wait_for_selector("#sweep-chart .sweep-dot.a")
    page.wait_for_function("() => document.querySelector('.sweep-note').textContent.includes('Dashed: A')")
    a = json.load(urlopen(f"{base_url}/api/dials/sweep?batch=16&x=batch", timeout=60))
    b = json.load(urlopen(f"{base_url}/api/dials/sweep?batch=16&precision=fp8&x=batch", timeout=60))
    drawn_a = page.locator("#sweep-chart .sweep-dot.a").evaluate_all("els => els.map(e => +e.dataset.y)")
    drawn_b = page.locator("#sweep-chart .sweep-dot:not(.a)").evaluate_all("els => els.map(e => +e.dataset.y)")
    assert drawn_a == [p["tokens_per_s_total"] for p in a["points"] if p["fits"]]
    assert drawn_b == [p["tokens_per_s_total"] for p in b["points"] if p["fits"]]
    assert "At 16: B " in page.locator(".sweep-note").inner_text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#dials-tools").screenshot(path=str(SHOTS / "dials-sweep-ab.png"))


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_open_panels_pass_axe(browser, base_url, theme):
    from axe_playwright_python.sync_playwright import Axe

    ctx = browser.new_context(viewport={"width": 1440, "height": 900}, color_scheme=theme)
    pg = ctx.new_page()
    try:
        open_page(pg, base_url + "/dials")
        pg.locator("#dials-explain > summary").click()
        pg.locator('[data-example="vLLM"]').click()
        pg.wait_for_selector(".explain-out:not([hidden]) .explain-log")
        pg.locator("#dials-tools > summary").click()
        pg.wait_for_selector("#sweep-chart .sweep-dot")
        pg.locator(".solve-form button[type=submit]").click()
        pg.wait_for_selector("#solve-adopt:not([hidden])")
        rules = {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}
        r = Axe().run(pg, options={"resultTypes": ["violations"], "runOnly": rules})
        bad = [v["id"] for v in r.response["violations"] if v["impact"] in ("serious", "critical")]
        assert bad == []
    finally:
        ctx.close()
