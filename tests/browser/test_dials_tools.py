"""Chapter 11's practitioner panels in a real Chromium: "Explain my launch command" draws what GET /api/explain says."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlencode
from urllib.request import urlopen

import pytest
from pagekit import change, open_page, rendered, serious_violations

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
    a = json.load(urlopen(f"{base_url}/api/dials/sweep?batch=16&x=batch", timeout=60))
    b = json.load(urlopen(f"{base_url}/api/dials/sweep?batch=16&precision=fp8&x=batch", timeout=60))
    page.wait_for_function(  # B's line redrawn at FP8 (A's, BF16, was drawn as soon as it was pinned)
        "(y) => document.querySelector('#sweep-chart .sweep-dot:not(.a)')?.dataset.y === String(y)",
        arg=b["points"][0]["tokens_per_s_total"],
    )
    page.wait_for_function("() => document.querySelector('.sweep-note').textContent.includes('Dashed: A')")
    drawn_a = page.locator("#sweep-chart .sweep-dot.a").evaluate_all("els => els.map(e => +e.dataset.y)")
    drawn_b = page.locator("#sweep-chart .sweep-dot:not(.a)").evaluate_all("els => els.map(e => +e.dataset.y)")
    assert drawn_a == [p["tokens_per_s_total"] for p in a["points"] if p["fits"]]
    assert drawn_b == [p["tokens_per_s_total"] for p in b["points"] if p["fits"]]
    assert "At 16: B " in page.locator(".sweep-note").inner_text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#dials-tools").screenshot(path=str(SHOTS / "dials-sweep-ab.png"))


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_open_panels_pass_axe(browser, base_url, theme):
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
        assert serious_violations(pg) == []
    finally:
        ctx.close()


CARDS = ("ttft_ms", "tokens_per_s_per_user", "tokens_per_s_total", "cost_per_million_tokens_usd", "spare_gb")


def _dials(base_url: str, query: str) -> dict:
    with urlopen(f"{base_url}/api/dials?{query}", timeout=60) as r:
        return json.load(r)


def _card_figures(d: dict) -> list[str]:
    """Each card's figure as the page keeps it in data-a / data-b ('' where the setup does not fit)."""
    out = [d["memory"]["spare_gb"] if k == "spare_gb" else d[k] for k in CARDS]
    return ["" if v is None else repr(float(v)).removesuffix(".0") for v in out]


def _vs(page) -> list[tuple[str, str]]:
    return page.locator(".dials-readouts .readout .vs").evaluate_all("els => els.map(e => [e.dataset.a, e.dataset.b])")


def test_pin_a_is_in_the_url_and_comes_back_after_a_reload(page, base_url):
    open_page(page, base_url + "/dials?batch=64")
    page.locator("#dials-pin").click()
    page.wait_for_function("() => new URL(location.href).searchParams.get('a') === ''")  # A equals B: pinned, no diff
    change(page, lambda: page.locator("#ctl-precision").select_option("fp8"))
    page.wait_for_function("() => new URL(location.href).searchParams.get('a') === 'precision.bf16'")
    url = page.url
    assert "a=precision.bf16" in url and "precision=fp8" in url
    page.goto(url)  # the shared link: A (BF16) beside B (FP8), both with their numbers
    rendered(page)
    page.wait_for_function("() => document.querySelector('.readout .vs')?.dataset.a")
    a, b = _dials(base_url, "batch=64"), _dials(base_url, "batch=64&precision=fp8")
    assert _vs(page) == [list(t) for t in zip(_card_figures(a), _card_figures(b), strict=True)]
    first = page.locator(".readout .vs").first.inner_text()
    assert first.startswith("A ") and " · B " in first
    assert page.locator("#dials-pin-note").inner_text() == "Pinned A: weights BF16 (B FP8)."
    href = page.locator("#dials-csv-a").get_attribute("href")  # A's numbers leave the page too
    assert "precision=bf16" in href and "batch=64" in href and href.endswith("&format=csv")
    page.locator("#dials-pin").click()  # unpin: the URL lets A go
    page.wait_for_function("() => !new URL(location.href).searchParams.has('a')")
    assert page.locator(".readout .vs").first.is_hidden()


def test_a_link_with_a_bad_pin_says_so_and_still_draws_b(page, base_url):
    open_page(page, base_url + "/dials?a=warp.9")
    assert "“warp” is not one of the dials' fields" in page.locator("#dials-pin-note").inner_text()
    assert "a=" not in page.url
    page.allowed_errors.append("422")  # the pin's own request is refused: batch out of bounds
    open_page(page, base_url + "/tour/dials?a=batch.99999")
    page.wait_for_function("() => document.querySelector('#dials-pin-note').textContent.includes('not drawn')")
    note = page.locator("#dials-pin-note").inner_text()
    assert note.startswith("Pin A was not drawn: batch") and "4096" in note.replace(",", "")
    assert page.locator(".readout .value").first.inner_text() != ""


@pytest.mark.parametrize("width, height", [(1440, 900), (390, 844)])
def test_the_cards_keep_their_size_when_a_links_a_arrives(browser, base_url, width, height):
    """A's answer is held until B has drawn: the cards' line for A was reserved from the first draw, so nothing moves."""
    ctx = browser.new_context(viewport={"width": width, "height": height})
    pg = ctx.new_page()
    held = []
    pg.route("**/api/dials?*", lambda r: held.append(r) if "batch=16&" in r.request.url else r.continue_())
    try:
        open_page(pg, base_url + "/dials?batch=64&a=batch.16")
        pg.wait_for_function("() => document.querySelector('.readout .vs')?.textContent === 'A …'")
        sizes = (
            "() => [...document.querySelectorAll('.dials-readouts, .dials-readouts .readout')].map(e => e.offsetHeight)"
        )
        before = pg.evaluate(sizes)
        for _ in range(200):  # the held request reaches this side when Playwright next pumps its events
            if held:
                break
            pg.wait_for_timeout(50)
        assert len(held) == 1 and _vs(pg)[0][0] == ""
        held[0].continue_()
        pg.wait_for_function("() => document.querySelector('.readout .vs')?.dataset.a")
        assert pg.evaluate(sizes) == before  # the cards and their row: the same heights with A's figures in
        if width == 1440:  # one screen: the five cards with A beside B sit above the fold
            bottom = pg.locator(".dials-readouts").evaluate("e => e.getBoundingClientRect().bottom")
            assert bottom < height
        SHOTS.mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(SHOTS / f"dials-compare-{width}.png"))
    finally:
        ctx.close()


def test_the_solvers_answer_is_marked_on_the_sweep(page, base_url):
    open_page(page, base_url + "/dials")
    page.locator("#dials-tools > summary").click()
    page.wait_for_selector("#sweep-chart .sweep-dot")
    page.locator("#sweep-x").select_option("prompt_tokens")  # the answer is a batch: the chart moves to batch
    page.locator("#solve-ttft").fill("2000")
    page.locator("#solve-tps").fill("20")
    page.locator(".solve-form button[type=submit]").click()
    page.wait_for_selector("#sweep-chart .sweep-solve")
    api = json.load(urlopen(f"{base_url}/api/dials/solve?ask=batch&max_ttft_ms=2000&min_tokens_per_s_per_user=20"))
    ring = page.locator("#sweep-chart .sweep-solve")
    assert page.locator("#sweep-x").input_value() == "batch"
    assert ring.get_attribute("data-x") == str(api["value"])
    assert float(ring.get_attribute("data-y")) == api["figures"]["tokens_per_s_total"]
    assert page.locator("#sweep-chart .sweep-solve-label").inner_html() == f"solved: {api['value']}"
    page.locator("#sweep-y").select_option("ttft_ms")  # the limited figure: the limit is drawn too
    page.wait_for_selector("#sweep-chart .sweep-limit", state="attached")  # a flat line has no height: "hidden"
    assert page.locator("#sweep-chart .sweep-limit").get_attribute("data-y") == "2000"
    assert float(page.locator("#sweep-chart .sweep-solve").get_attribute("data-y")) == api["figures"]["ttft_ms"]
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#dials-tools").screenshot(path=str(SHOTS / "dials-sweep-solved.png"))
