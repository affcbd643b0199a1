"""Chapter 11's "That server: your question" (scenes/dials-attach.js) in Chromium: with OpenAI-compatible stubs
attached (tests/attach/fake_openai.py: `ok` streams "one two three", `missing` answers 404), the visitor's question
goes through the picked server; its measured time to first token and inter-token time appear beside the dials'
prediction for that setup, with the error; moving a dial re-prices the prediction (the measured figures stay).
Measure runs are allowed for `ok` only: its run's progress reaches 100% and its table's counts match; `missing`
has no run button. With nothing attached (the shared live server) no card is built."""

from __future__ import annotations

import pytest
from fake_openai import fake_openai
from livekit import serve_in_thread
from pagekit import change, open_page, serious_violations

from inside_llm.app import create_app
from inside_llm.attach.targets import parse_targets
from inside_llm.settings import Settings

pytestmark = pytest.mark.browser
CARD = ".dials-attach"
DONE = "() => ['done', 'error'].includes(document.querySelector('.dials-attach')?.dataset.state)"


@pytest.fixture(scope="module")
def attached_url():
    with fake_openai() as f:
        targets = parse_targets([f"ok={f.url}/ok missing={f.url}/missing"])
        with serve_in_thread(create_app(Settings(attach=targets, attach_measure=("ok",)))) as url:
            yield url


def figures(page) -> dict:
    return page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('.da-table tbody tr')].map((tr) => [tr.dataset.key,
        Object.fromEntries(['pred', 'meas', 'err'].map((c) => [c, tr.querySelector('.' + c).dataset.value]))]))"""
    )


def test_the_answer_is_measured_beside_the_prediction_and_a_dial_reprices_it(page, attached_url):
    open_page(page, attached_url + "/tour/dials?gpu=l4&model=llama-3.1-8b&gpus=1&tp=1")
    page.wait_for_selector(CARD, timeout=60_000)
    card = page.locator(CARD)
    assert card.get_attribute("data-name") == "ok" and "Send the question through ok" in card.inner_text()
    card.locator(".da-ask button").click()
    page.wait_for_function(DONE, timeout=120_000)
    assert card.get_attribute("data-state") == "done"
    assert card.locator(".da-answer").inner_text() == "one two three"
    f = figures(page)
    for key in ("ttft", "itl"):
        pred, meas, err = (float(f[key][c]) for c in ("pred", "meas", "err"))
        assert pred > 0 and meas >= 0 and err == pytest.approx(100 * (meas - pred) / pred)
    # the prediction is the dials' cost model for this setup, this question alone, at the lengths the server counted
    api = page.request.get(
        attached_url + "/api/dials?gpu=l4&model=llama-3.1-8b&gpus=1&tp=1&batch=1&prompt_tokens=12&output_tokens=3"
        "&throughput_mode=continuous"
    ).json()
    assert float(f["ttft"]["pred"]) == pytest.approx(api["ttft_ms"]) and float(f["itl"]["pred"]) == pytest.approx(
        api["tpot_ms"]
    )
    text = card.inner_text()
    assert "Time to first token" in text and "Inter-token time" in text and "Error" in text
    assert "ok (fake-model) wrote 3 tokens" in text and "this question alone (batch 1), 12 tokens in, 3 out" in text
    # a dial moves the prediction; what was measured stays
    change(page, lambda: page.locator("#ctl-gpu").select_option("h100-sxm"))
    page.wait_for_function(
        "(p) => document.querySelector('.da-table tr[data-key=ttft] .pred').dataset.value !== p",
        arg=f["ttft"]["pred"],
        timeout=60_000,
    )
    g = figures(page)
    assert float(g["ttft"]["pred"]) < float(f["ttft"]["pred"]) and g["ttft"]["meas"] == f["ttft"]["meas"]
    pred, meas = float(g["ttft"]["pred"]), float(g["ttft"]["meas"])
    assert float(g["ttft"]["err"]) == pytest.approx(100 * (meas - pred) / pred)
    assert "H100" in card.locator(".da-foot").inner_text()


def test_a_measure_run_shows_its_progress_then_its_table(page, attached_url):
    open_page(page, attached_url + "/tour/dials?gpu=l4&model=llama-3.1-8b&gpus=1&tp=1")
    page.wait_for_selector(CARD, timeout=60_000)
    run = page.locator(".da-run")
    assert run.is_visible()
    for name, value in (("requests", "3"), ("concurrency", "2"), ("prompt_tokens", "4"), ("output_tokens", "3")):
        run.locator(f"input[name={name}]").fill(value)
    run.locator("button").click()
    page.wait_for_function("() => ['done', 'failed'].includes(document.querySelector('.da-run').dataset.state)",
                           timeout=120_000)  # fmt: skip
    assert run.get_attribute("data-state") == "done" and run.get_attribute("data-progress") == "1"
    assert page.evaluate("() => document.querySelector('.da-progress progress').value") == 1
    assert "3 of 3 requests ended, 3 with an answer" in run.inner_text()
    rows = run.locator(".da-run-table tbody tr")
    assert rows.count() == 3
    assert rows.nth(0).locator("th").inner_text() == "Time to first token"
    note = run.locator(".da-run-note").inner_text()
    assert "3 of 3 requests finished, 2 at a time" in note and "at batch 2" in note
    job = page.request.get(attached_url + "/api/attach/ok/measure").json()
    assert job["summary"]["finished"] == 3 and job["progress"] == 1


def test_a_server_without_measure_runs_and_its_error_in_words(page, attached_url):
    open_page(page, attached_url + "/tour/dials?gpu=l4&model=llama-3.1-8b&gpus=1&tp=1")
    page.wait_for_selector(CARD, timeout=60_000)
    card = page.locator(CARD)
    card.locator(".da-pick select").select_option("missing")
    assert card.get_attribute("data-name") == "missing" and not page.locator(".da-run").is_visible()
    card.locator(".da-ask button").click()
    page.wait_for_function(DONE, timeout=120_000)
    assert card.get_attribute("data-state") == "error"
    assert "It answered HTTP 404: The model `fake-model` does not exist." in card.locator(".da-foot").inner_text()


def test_no_card_when_nothing_is_attached(page, base_url):
    open_page(page, base_url + "/tour/dials")
    page.wait_for_load_state("networkidle")
    assert page.locator(CARD).count() == 0


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_card_passes_axe(browser, attached_url, theme):
    """axe-core (WCAG 2.1 A/AA) on the card after an answer and a run, wide and phone: no serious or critical
    violation."""
    for width, height in ((1440, 900), (390, 844)):
        ctx = browser.new_context(viewport={"width": width, "height": height}, color_scheme=theme)
        page = ctx.new_page()
        try:
            open_page(page, attached_url + "/tour/dials?gpu=l4&model=llama-3.1-8b&gpus=1&tp=1")
            page.wait_for_selector(CARD, timeout=60_000)
            page.locator(f"{CARD} .da-ask button").click()
            page.wait_for_function(DONE, timeout=120_000)
            page.locator(".da-run input[name=requests]").fill("2")
            page.locator(".da-run input[name=concurrency]").fill("1")
            page.locator(".da-run button").click()  # a run of its own (none is going: each test waits for its end)
            page.wait_for_function("() => document.querySelector('.da-run').dataset.state === 'done'", timeout=120_000)
            page.locator(CARD).scroll_into_view_if_needed()
            assert serious_violations(page, CARD) == [], f"{theme} {width}px"
        finally:
            ctx.close()
