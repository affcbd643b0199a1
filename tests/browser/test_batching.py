"""Chapter 7 in Chromium: one lane per seat for each policy, a shared clock, readouts, the measured CPU panel."""

from __future__ import annotations

import re

import pytest
from pagekit import measured_bars, refetch, rendered, set_range

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("seats", [16, 5])
def test_one_lane_per_seat_for_each_policy(page, base_url, seats):
    page.goto(base_url + f"/tour/batching?seats={seats}&step=5")
    rendered(page)
    for name in ("static", "continuous"):
        assert page.locator(f'.bt-svg g[data-policy="{name}"] .bt-lane').count() == seats
    assert page.locator(".bt-svg rect[fill^='var(--bqr-']").count() >= 2 * 50
    assert page.console_errors == []


def test_readouts_and_the_shared_clock(page, base_url):
    page.goto(base_url + "/tour/batching?step=3")
    rendered(page)
    table = page.locator(".bt-table").inner_text()
    assert re.search(r"Throughput\s+[\d,]+ tokens/s\s+[\d,]+ tokens/s", table)
    assert "×" in table and "p99" in table and "%" in table
    clock = page.locator(".bt-clock").inner_text()
    x = page.locator(".bt-cursor").get_attribute("x1")
    set_range(page, ".bt-transport input[type=range]", 700)
    assert page.locator(".bt-clock").inner_text() != clock
    assert float(page.locator(".bt-cursor").get_attribute("x1")) > float(x)
    statuses = page.locator(".bt-status").all_text_contents()
    assert len(statuses) == 2 and all(re.search(r"\d", s) for s in statuses)
    page.locator(".bt-math summary").first.click()
    assert page.locator(".bt-math details.math").count() >= 8
    assert page.console_errors == []


def test_a_shared_system_prompt_shows_its_prefix_cache_hits(page, base_url):
    page.goto(base_url + "/tour/batching?shared_prefix=0.5&requests=40")
    rendered(page)
    row = page.locator(".bt-table tr", has_text="Prefix cache hits").inner_text()
    assert re.search(r"Prefix cache hits\s+9\d\.\d% of 5,120 tokens\s+9\d\.\d% of 5,120 tokens", row), row
    assert "256-token system prompt" in page.locator("p.bt-engine").first.inner_text()
    page.goto(base_url + "/tour/batching?requests=40")
    rendered(page)
    assert page.locator(".bt-table tr", has_text="Prefix cache hits").count() == 0
    assert page.console_errors == []


def test_the_token_budget_is_a_dial_named_in_the_engine_note(page, base_url):
    page.goto(base_url + "/tour/batching?max_num_batched_tokens=256&requests=40")
    rendered(page)
    assert "computes at most 256 tokens" in page.locator("p.bt-engine").first.inner_text()
    assert page.locator(".bt-table tr", has_text="Time per output token").count() == 1
    assert page.console_errors == []


def test_measured_panel_shows_tokens_per_second_for_three_batches(page, base_url):
    page.goto(base_url + "/tour/batching?step=1")
    rendered(page)
    text = measured_bars(page, ".bt-measured", ".bt-bar", 3, timeout=60_000)
    assert "this server's CPU" in text
    if "Not measured" not in text:
        values = page.locator(".bt-bar-value").all_inner_texts()
        assert [re.match(r"[\d,.]+ tokens/s", v) is not None for v in values] == [True] * 3
        assert page.locator(".bt-bar-label").all_inner_texts() == ["batch 1", "batch 8", "batch 32"]
    assert page.console_errors == []


def test_controls_refetch(page, base_url):
    page.goto(base_url + "/tour/batching?step=8")
    rendered(page)
    refetch(page, "/api/batching?", "seats=24", lambda: set_range(page, "#ctl-seats", 24))
    page.wait_for_function("() => document.querySelectorAll('.bt-svg g[data-policy=static] .bt-lane').length === 24")
    assert "seats=24" in page.url
    assert page.console_errors == []


def test_reduced_motion_shows_the_whole_run(phone, base_url):
    phone.goto(base_url + "/tour/batching")
    rendered(phone)
    clock = phone.locator(".bt-clock").inner_text()
    m = re.match(r"([\d.,]+) s of ([\d.,]+) s", clock)
    assert m and m.group(1) == m.group(2), clock
    assert phone.locator(".bt-play").get_attribute("aria-pressed") == "false"


def test_steps_are_a_dozen_instants_most_before_continuous_finishes(page, base_url):
    """150 sampled frames are too many key presses: 8 beats until the first policy finishes, 4 to the horizon."""
    page.goto(base_url + "/tour/batching?step=0&present=1")
    page.wait_for_selector(".presenter-label")
    assert page.locator(".presenter-label").inner_text().endswith("step 1 of 12")
    times = []
    for step in range(12):
        page.goto(base_url + f"/tour/batching?step={step}")
        rendered(page)
        t, horizon = (
            float(x) for x in re.findall(r"[\d.]+", page.locator(".bt-clock").inner_text().replace(",", ""))[:2]
        )
        times.append(t)
        continuous = page.locator(".bt-status").all_text_contents()[1]
        assert continuous.startswith("all ") == (step >= 8), (step, continuous)
    assert times == sorted(set(times)) and times[0] == 0 and times[-1] == horizon


def test_embed_keeps_the_lanes_and_the_table_for_a_slide(page, base_url):
    measured = []
    page.on("request", lambda r: measured.append(r.url) if "/api/batching/measured" in r.url else None)
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(base_url + "/embed/batching?step=9")
    rendered(page)
    assert page.locator(".bt-table").is_visible()
    for hidden in (".bt-engine", ".bt-math", ".bt-measured"):
        assert page.locator(hidden).is_hidden(), hidden
    assert measured == [], "a slide does not run the CPU measurement"
    fits = page.evaluate("() => document.scrollingElement.scrollHeight <= innerHeight + 1")
    assert fits, "a 16:9 frame shows the whole scene without scrolling"
    assert page.console_errors == []


@pytest.mark.parametrize("seats", [2, 3, 4])
def test_few_seats_still_draw_the_queue_stack_without_errors(page, base_url, seats):
    page.goto(base_url + f"/tour/batching?seats={seats}&step=4")
    rendered(page)
    sizes = page.eval_on_selector_all(
        ".bt-waiting", "els => els.map(e => [+e.getAttribute('width'), +e.getAttribute('height')])"
    )
    assert len(sizes) == 2 * 24 and all(w >= 6 and h >= 6 for w, h in sizes), sizes[:4]
    shown = page.eval_on_selector_all(
        ".bt-panel[data-policy=static] .bt-waiting", "els => els.filter(e => e.style.display !== 'none').length"
    )
    assert shown > 0, "static batching with a few seats has a queue at this beat"
    assert page.console_errors == []


def test_default_load_queues_under_both_policies_and_one_chat_is_followed(page, base_url):
    page.goto(base_url + "/tour/batching?step=0")
    rendered(page)
    seen = {"static": 0, "continuous": 0}
    for value in range(0, 1001, 50):
        set_range(page, ".bt-transport input[type=range]", value)
        for name in seen:
            seen[name] = max(
                seen[name], int(page.locator(f".bt-panel[data-policy={name}]").get_attribute("data-waiting"))
            )
    assert seen["static"] >= 3 and seen["continuous"] >= 1, seen
    follow = page.locator(".bt-follow").inner_text()
    m = re.search(r"chat #(\d+)", follow)
    assert m and "). Under static batching it waits" in follow, follow
    assert "; under continuous batching it waits" in follow, follow
    for name in seen:  # its stay is outlined in both lanes, with an arrival mark
        spans = page.locator(f".bt-panel[data-policy={name}] .bt-span.bt-followed")
        assert spans.count() >= 1 and spans.first.get_attribute("data-request") == m.group(1)
        assert page.locator(f".bt-panel[data-policy={name}] .bt-arrival").count() == 1
    assert page.console_errors == []


def test_a_fast_drag_keeps_one_request_in_flight_and_draws_the_last_setting(page, base_url):
    """lib/api.js createFetcher: while one request is out, newer settings wait (each replacing the one before);
    a stale answer is dropped, and the last setting is what the lanes show."""
    page.goto(base_url + "/tour/batching?rate=5.25&seats=2&step=0")
    rendered(page)
    open_, most, sent = [0], [0], []

    def started(r):
        if "/api/batching?" in r.url:
            sent.append(r.url)
            open_[0] += 1
            most[0] = max(most[0], open_[0])

    def ended(r):
        if "/api/batching?" in r.url:
            open_[0] -= 1

    page.on("request", started)
    page.on("requestfinished", ended)
    page.on("requestfailed", ended)
    page.evaluate("""async () => { const el = document.querySelector('#ctl-seats');
        for (let s = 3; s <= 40; s += 3) { el.value = String(s); el.dispatchEvent(new Event('input', { bubbles: true }));
          await new Promise((r) => setTimeout(r, 15)); } }""")
    page.wait_for_function(
        "() => document.querySelectorAll('.bt-panel[data-policy=static] .bt-lane').length === 39 "
        "&& !document.querySelector('#stage').hasAttribute('aria-busy')",
        timeout=120_000,
    )
    assert most[0] == 1, f"{most[0]} requests in flight at once"
    assert 1 <= len(sent) < 13 and "seats=39" in sent[-1], sent
    assert page.locator(".bt-engine").first.inner_text().count("all 39 seats") == 1
    assert page.console_errors == []
