"""Chapter 9 in Chromium: ghost guesses, the big model's verdict pass by pass, the γ curve, the CPU panel."""

from __future__ import annotations

import re

import pytest
from pagekit import change, measured_bars, open_page, refetch, rendered, set_range

pytestmark = pytest.mark.browser


def api(page, base_url, query=""):
    """The endpoint's JSON; a generous read timeout (a new prompt is seconds of real-model work on a busy CPU)."""
    return page.request.get(base_url + "/api/speculative" + query, timeout=180_000).json()


def test_a_step_shows_the_guesses_and_the_verdict(page, base_url):
    d = api(page, base_url)["demo"]
    frames = d["frames"]
    # A pass with a mistake if the draft ever made one (it does not while it checks itself), else a full accept.
    i = next((j for j, f in enumerate(frames) if f["rejected"]), None)
    if i is None:
        i = next(j for j, f in enumerate(frames) if f["kind"] == "bonus")
    f = frames[i]
    page.goto(base_url + f"/tour/speculative?step={i + 1}")
    rendered(page)
    chips = page.locator(".sp-chips .sp-chip")
    g, k = len(f["proposed"]), f["num_accepted"]
    assert page.locator(".sp-chip.kept").count() == k
    assert page.locator(".sp-chip.rejected").count() == (1 if f["rejected"] else 0)
    assert page.locator(".sp-chip.dropped").count() == (g - k - 1 if f["rejected"] else 0)
    assert page.locator(".sp-chip.own").count() == 1 and chips.count() == g + 1
    assert page.locator(".sp-chip.ghost").count() == 0, "a frozen step shows the verdict, not the guessing"
    own = page.locator(".sp-chip.own").inner_text()
    assert own == f["target_token"]["text"].replace("\n", "↵")
    assert page.locator(".sp-pass-label").inner_text() == f"Pass {i + 1} of {len(frames)}"
    visible = page.locator(".sp-text .sp-tok:not(.prompt):not([hidden])").count()
    assert visible == f["start"] + len(f["emitted"])
    verdict = page.locator(".sp-verdict").inner_text()
    assert ("instead" in verdict) if f["rejected"] else ("kept" in verdict and "free token" in verdict)
    assert page.console_errors == []


def test_a_frozen_step_stays_still_and_step_zero_is_the_prompt(page, base_url):
    page.goto(base_url + "/tour/speculative?step=2")
    rendered(page)
    label, bench = page.locator(".sp-pass-label").inner_text(), page.locator(".sp-bench").inner_text()
    page.wait_for_timeout(1500)
    assert page.locator(".sp-pass-label").inner_text() == label and page.locator(".sp-bench").inner_text() == bench
    assert page.locator(".sp-transport [aria-pressed]").get_attribute("aria-pressed") == "false"
    page.goto(base_url + "/tour/speculative?step=0")
    rendered(page)
    assert page.locator(".sp-text .sp-tok:not(.prompt):not([hidden])").count() == 0
    assert page.locator(".sp-chips .sp-chip").count() == 0
    assert page.console_errors == []


def test_autoplay_drafts_ghosts_then_moves_on(page, base_url):
    page.goto(base_url + "/tour/speculative")
    rendered(page)
    assert page.locator(".sp-transport [aria-pressed]").get_attribute("aria-pressed") == "true"
    page.wait_for_selector(".sp-chip.ghost", timeout=15_000)
    page.wait_for_function(
        "() => /Pass [3-9]/.test(document.querySelector('.sp-pass-label')?.textContent)", timeout=20_000
    )
    page.locator(".sp-transport [aria-pressed]").click()
    assert page.locator(".sp-transport [aria-pressed]").get_attribute("aria-pressed") == "false"
    assert page.console_errors == []


def test_gamma_moves_the_curve_highlight_and_refetches_the_demo(page, base_url):
    page.goto(base_url + "/tour/speculative?step=last")
    rendered(page)
    assert page.locator(".sp-dot.chosen").get_attribute("data-gamma") == "4"
    assert page.locator(".sp-dot").count() == 10
    refetch(page, "/api/speculative?", "gamma=7", lambda: set_range(page, "#ctl-gamma", 7))
    page.wait_for_function("() => document.querySelector('.sp-dot.chosen')?.dataset.gamma === '7'", timeout=120_000)
    assert "gamma=7" in page.url
    d = api(page, base_url, "?gamma=7")
    assert re.search(r"γ = 7: [\d.]+×", page.locator(".sp-chart").inner_html())
    best = page.locator(".sp-dot.best")
    assert best.count() == (1 if d["optimal_gamma"] <= 10 else 0)
    page.locator('.sp-dot[data-gamma="2"]').click()  # a new real-model run: seconds on a busy CPU
    page.wait_for_function("() => document.querySelector('.sp-dot.chosen')?.dataset.gamma === '2'", timeout=120_000)
    assert page.console_errors == []


def test_measured_panel_sits_beside_the_prediction(page, base_url):
    page.goto(base_url + "/tour/speculative?step=last")
    rendered(page)
    text = measured_bars(page, ".sp-measured", ".sp-bar", 4, timeout=150_000)
    assert "this server’s CPU" in text and "more than one decode step" in text
    values = page.locator(".sp-bar-value").all_inner_texts()
    assert all(re.fullmatch(r"[\d.]+×", v) for v in values)
    assert page.locator(".sp-bar.measured").count() == 1 and page.locator(".sp-bar.predicted").count() == 1
    assert "Identical" in page.locator(".sp-check").inner_text()
    dc = api(page, base_url)["demo"]["draft_choice"]
    if dc:  # the real model: why prompt lookup, one line per candidate draft
        items = page.locator(".sp-why-list li").all_inner_texts()
        assert len(items) == len(dc["drafts"]) and items[0].startswith("prompt lookup (c = 0.00)")
        assert f"{dc['drafts'][0]['runs'][0]['gpu_time_speedup']:.1f}×" in items[0]
    assert page.console_errors == []


def test_reduced_motion_shows_the_whole_answer_still(phone, base_url):
    phone.goto(base_url + "/tour/speculative")
    rendered(phone)
    d = api(phone, base_url)["demo"]
    n = len(d["frames"])
    assert phone.locator(".sp-pass-label").inner_text() == f"Pass {n} of {n}"
    assert phone.locator(".sp-text .sp-tok:not(.prompt):not([hidden])").count() == d["num_tokens"]
    assert phone.locator(".sp-transport [aria-pressed]").get_attribute("aria-pressed") == "false"
    phone.locator(".sp-transport [aria-pressed]").click()  # plays still steps: each pass's verdict, no sweep
    phone.wait_for_function(
        "() => document.querySelector('.sp-pass-label')?.textContent === 'Pass 1 of %d'" % n, timeout=30_000
    )
    assert phone.locator(".sp-chip.ghost:not([hidden])").count() == 0


def test_opens_on_a_run_the_draft_mostly_guesses_then_offers_a_bad_one(page, base_url):

    good = api(page, base_url)
    ex, d = good["example_prompts"], good["demo"]
    assert d["acceptance_rate"] >= 0.5 and d["gpu_time"]["speedup"] > 1.2
    first = next(f for f in d["frames"] if f["kind"] != "prefill")
    assert first["num_accepted"] == len(first["proposed"])  # the first check keeps every guess
    open_page(page, base_url + "/tour/speculative?step=2")
    assert page.locator(".sp-chip.kept").count() == len(first["proposed"])
    other = page.locator(".sp-other")
    assert "usually right" in other.inner_text() and f"{100 * d['acceptance_rate']:.0f}%" in other.inner_text()
    change(page, lambda: page.locator(".sp-other-btn").click())
    bad = api(page, base_url, "?" + __import__("urllib.parse").parse.urlencode({"prompt": ex["often_wrong"]}))["demo"]
    assert bad["acceptance_rate"] < 0.3 < d["acceptance_rate"] and bad["gpu_time"]["speedup"] < d["gpu_time"]["speedup"]
    page.wait_for_function("() => document.querySelector('.sp-other')?.textContent.includes('often wrong (')")
    assert page.locator("#ctl-prompt").input_value() == ex["often_wrong"]
    assert page.locator(".sp-text").inner_text().count(ex["often_wrong"][:20]) == 1  # the run shown is that prompt's
    assert "usually right" in page.locator(".sp-other-btn").inner_text()
    assert page.console_errors == []


def test_the_question_drafted_three_ways_and_the_formula_on_one_time_axis(page, base_url):
    """Chapter 9's first picture: on the visitor's question, the big model alone, prompt lookup and two
    self-drafts (its own first layers), then the formula at the sliders' alpha, gamma, c, each row as long as
    its GPU time says (one unit = one big-model pass), its speed-up the API's; alpha moves the formula's row."""
    q = "?q=What+is+the+capital+of+France%3F"
    d = api(page, base_url, "?prompt=What+is+the+capital+of+France%3F")
    drafts, n = d["demo"]["drafts"], d["demo"]["num_tokens"]
    assert [x["kind"] for x in drafts][0] in ("lookup", "model") and {x["kind"] for x in drafts[1:]} == {"self"}
    open_page(page, base_url + "/tour/speculative" + q + "&step=last")
    rows = page.evaluate("""() => [...document.querySelectorAll('.sp-ledger-row')].map((r) => {
        const s = r.querySelector('.sp-ledger-bar'), box = s.getBoundingClientRect(), vb = s.viewBox.baseVal;
        const rects = [...s.querySelectorAll('rect')].map((x) => x.getBoundingClientRect());
        return { cls: r.className, count: r.querySelector('.sp-ledger-count').textContent, left: box.left,
                 scale: box.width / vb.width, right: Math.max(...rects.map((x) => x.right)),
                 passes: s.querySelectorAll('rect.pass').length, drafts: s.querySelectorAll('rect.draft').length };
    })""")
    assert len(rows) == 1 + len(drafts) + 1 and "plain" in rows[0]["cls"] and "formula" in rows[-1]["cls"]
    unit = rows[0]["scale"] * 10
    assert rows[0]["passes"] == n and rows[0]["right"] - rows[0]["left"] == pytest.approx(n * unit, abs=unit * 0.2)
    for row, x in zip(rows[1:-1], drafts, strict=True):
        assert row["count"] == f"{x['speedup']:.2f}×"
        assert row["right"] - row["left"] == pytest.approx(x["gpu_time"] * unit, abs=unit * 0.2)
        assert row["passes"] == sum(st["tokens"] for st in x["steps"])  # each check split into its tokens
        assert row["drafts"] == (sum(st["drafted"] for st in x["steps"]) if x["cost_ratio"] > 0 else 0)
    assert rows[-1]["count"] == f"{d['speedup']:.2f}×"
    assert rows[-1]["right"] - rows[-1]["left"] == pytest.approx(n / d["speedup"] * unit, abs=unit * 0.3)
    change(page, lambda: set_range(page, "#ctl-alpha", 0.3))
    slow = api(page, base_url, "?prompt=What+is+the+capital+of+France%3F&alpha=0.3")
    page.wait_for_function(
        "(v) => document.querySelector('.sp-ledger-row.formula .sp-ledger-count')?.textContent === v",
        arg=f"{slow['speedup']:.2f}×",
    )
    assert "α = 0.30" in page.locator(".sp-ledger-row.formula").inner_text()
    assert page.console_errors == []
