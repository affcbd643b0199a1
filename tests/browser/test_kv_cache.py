"""Chapter 6 in Chromium: one chat's cache grows token by token, two cache grids draw in distinct colours, waste
meters show numbers, the scrubber moves the step, a page click opens its request's block table, controls refetch,
reduced motion keeps a still frame."""

from __future__ import annotations

import re

import pytest
from pagekit import refetch, rendered, set_range

pytestmark = pytest.mark.browser

WASTE = re.compile(r"^\d+(\.\d)?%$")


def test_grids_draw_and_waste_meters_show_numbers(page, base_url):
    page.goto(base_url + "/tour/kv-cache?step=4")  # mid-way through the paged run: both grids busy
    rendered(page)
    panels = page.locator(".kv-panel")
    assert panels.count() == 2
    assert panels.nth(0).get_attribute("data-policy") == "contiguous"
    assert panels.nth(1).get_attribute("data-policy") == "paged"
    for i in range(2):
        assert WASTE.match(panels.nth(i).locator(".kv-waste .value").first.inner_text())
        label = panels.nth(i).locator("canvas").get_attribute("aria-label")
        assert re.search(r"\d+ requests? hold", label)
    contiguous = float(panels.nth(0).locator(".kv-waste .value").first.inner_text().rstrip("%"))
    paged = float(panels.nth(1).locator(".kv-waste .value").first.inner_text().rstrip("%"))
    assert contiguous > 10 * paged
    painted = page.evaluate("""() => [...document.querySelectorAll('.kv-grid')].map((c) => {
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 3; i < d.length; i += 4) n += d[i] > 0; return n / (d.length / 4); })""")
    assert all(p > 0.3 for p in painted), painted
    assert page.locator(".kv-table tbody tr").count() == 4
    assert page.console_errors == []


def test_scrubber_changes_the_frame(page, base_url):
    page.goto(base_url + "/tour/kv-cache?step=2")
    rendered(page)
    assert not page.locator(".kv-clock").inner_text().startswith("step 1,200 of")
    before = page.locator(".kv-right canvas").get_attribute("aria-label")
    counts = page.locator(".kv-right .kv-counts").inner_text()
    set_range(page, ".kv-transport input[type=range]", 1200)
    assert page.locator(".kv-clock").inner_text().startswith("step 1,200 of")
    assert page.locator(".kv-right .kv-counts").inner_text() != counts
    assert page.locator(".kv-right canvas").get_attribute("aria-label") != before
    assert page.locator(".kv-play").inner_text().endswith("Play")


def clock(page) -> tuple[int, int]:
    step, steps = re.search(r"step ([\d,]+) of ([\d,]+)", page.locator(".kv-clock").inner_text()).groups()
    return int(step.replace(",", "")), int(steps.replace(",", ""))


def test_steps_are_a_dozen_beats_most_while_both_policies_run(page, base_url):
    """Thousands of steps are too many key presses for a speaker: 8 beats span the paged run, 4 the rest."""
    page.goto(base_url + "/tour/kv-cache?step=0&present=1")
    page.wait_for_selector(".presenter-label")
    assert page.locator(".presenter-label").inner_text().endswith("step 1 of 12")
    assert clock(page)[0] == 0
    frames = []
    for step in range(12):
        page.goto(base_url + f"/tour/kv-cache?step={step}")
        rendered(page)
        frames.append(clock(page))
        paged = page.locator(".kv-right .kv-counts").inner_text()
        assert paged.startswith("All ") == (step >= 8), (step, paged)
    shown = [f for f, _ in frames]
    assert shown == sorted(set(shown)), "each beat shows a later step"
    assert shown[-1] == frames[-1][1], "the last beat is the last step"
    assert shown[7] < frames[-1][1] / 2, "the paged run ends well before the reserved-region run"


def test_clicking_a_page_opens_its_block_table(page, base_url):
    page.goto(base_url + "/tour/kv-cache?step=6")
    rendered(page)
    canvas = page.locator(".kv-right canvas")
    box = canvas.bounding_box()
    for fx, fy in [(0.5, 0.5), (0.25, 0.3), (0.75, 0.6), (0.1, 0.1), (0.6, 0.2)]:
        canvas.click(position={"x": box["width"] * fx, "y": box["height"] * fy})
        if page.locator(".kv-pick select").input_value():
            break
    rid = page.locator(".kv-pick select").input_value()
    assert rid, "a click on a used page selects its request"
    text = page.locator(".kv-bt-text").first.inner_text()
    assert text.startswith(f"Request #{rid}") and re.search(r"in \d+ pages? of 16", text)
    pages = page.locator(".kv-bt-pages li:not([hidden])")
    n = int(re.search(r"in (\d+) pages? of", text).group(1))
    assert pages.count() == n and re.fullmatch(r"\d+", pages.first.locator("b").inner_text())
    page.locator(".kv-pick select").select_option("")
    assert "(in memory longest)" in page.locator(".kv-bt-text").first.inner_text()
    assert page.console_errors == []


def test_controls_refetch_and_url_state(page, base_url):
    page.goto(base_url + "/tour/kv-cache?compare=oracle&step=4")
    rendered(page)
    assert page.locator(".kv-left").get_attribute("data-policy") == "oracle"
    refetch(page, "/api/kv-cache", "block_size=64", lambda: page.select_option("#ctl-block_size", "64"))
    page.wait_for_function("() => document.querySelector('.kv-right h3')?.textContent.includes('64-token')")
    assert "block_size=64" in page.url
    assert page.console_errors == []


def test_reduced_motion_shows_a_still_frame(phone, base_url):
    phone.goto(base_url + "/tour/kv-cache")
    rendered(phone)
    first = phone.locator(".kv-clock").inner_text()
    phone.wait_for_timeout(600)
    assert phone.locator(".kv-clock").inner_text() == first and not first.startswith("step 0 of")
    assert phone.locator(".kv-play").get_attribute("aria-pressed") == "false"
    assert WASTE.match(phone.locator(".kv-right .kv-waste .value").first.inner_text())


def test_phone_sized_embed_keeps_the_two_grids_readable(page, base_url):
    """A phone-sized slide frame drops the block table and the policy table, so the grids fit without scrolling."""
    page.set_viewport_size({"width": 390, "height": 700})
    page.goto(base_url + "/embed/kv-cache?step=4")
    rendered(page)
    page.wait_for_load_state("networkidle")
    assert page.locator(".kv-grid").nth(1).is_visible()
    assert page.locator(".kv-bt").is_hidden() and page.locator(".kv-summary").is_hidden()
    page.wait_for_function("() => !document.querySelector('#stage').classList.contains('fit-scroll')")
    fit = float(page.evaluate("() => getComputedStyle(document.documentElement).getPropertyValue('--fit')"))
    assert fit > 0.7, f"type shrunk to {fit:.0%} of its size"
    page.set_viewport_size({"width": 1280, "height": 720})
    page.wait_for_function("() => getComputedStyle(document.querySelector('.kv-bt')).display !== 'none'")
    assert page.console_errors == []


def question_tokens(base_url: str, q: str) -> int:
    """The question's token count as the page asks it: SmolLM2's chat template, else Llama 3's tokens."""
    import httpx

    api = httpx.get(base_url + "/api/tokens", params={"text": q, "encoding": "smollm2"}, timeout=120)
    if api.status_code == 200:
        return api.json()["chat"]["num_tokens"]
    return httpx.get(base_url + "/api/tokens", params={"text": q, "encoding": "llama3"}, timeout=120).json()[
        "num_tokens"
    ]


def test_one_chat_grows_token_by_token_with_bytes_from_the_model_shape(page, base_url):
    page.goto(base_url + "/tour/kv-cache?step=0")
    rendered(page)
    assert page.locator(".kv-scene").get_attribute("data-phase") == "one-chat"
    tokens = []
    for step in (3, 4, 5, 20):
        set_range(page, ".kv-transport input[type=range]", step)
        text = page.locator(".kv-chat-text").inner_text()
        tokens.append(int(re.match(r"([\d,]+) of [\d,]+ tokens", text).group(1).replace(",", "")))
        assert "× 328 KB per token" in text and "Llama 3.1 70B" in text, text
    assert tokens[1] - tokens[0] == 1 and tokens[2] - tokens[1] == 1 and tokens[3] - tokens[0] == 17, tokens
    math = page.locator(".kv-chat-math").inner_text()
    assert "2 × 80 layers × 8 KV heads × 128 values × 2 bytes = 327,680 bytes" in math
    height = page.locator(".kv-chat-grid").bounding_box()["height"]
    assert height >= 10
    refetch(page, "/api/kv-cache", "model=llama-3.1-8b", lambda: page.select_option("#ctl-model", "llama-3.1-8b"))
    page.wait_for_function("() => document.querySelector('.kv-chat-math').textContent.includes('131,072 bytes')")
    assert page.console_errors == []


def test_requests_get_distinct_colours_and_preemption_is_explained(page, base_url):
    page.goto(base_url + "/tour/kv-cache?step=3")
    rendered(page)
    colours = page.evaluate("""() => { const cs = getComputedStyle(document.querySelector('.kv-scene'));
        return Array.from({ length: 10 }, (_, i) => cs.getPropertyValue(`--kvr-${i}`).trim()); }""")
    assert len(set(colours)) == 10 and all(colours), colours
    hues = page.evaluate("""() => { const c = document.querySelector('.kv-right canvas');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; const seen = new Set();
        for (let i = 0; i < d.length; i += 4 * 7) if (d[i + 3] === 255) seen.add(`${d[i] >> 3},${d[i + 1] >> 3},${d[i + 2] >> 3}`);
        return seen.size; }""")
    assert hues >= 8, hues
    residents = int(page.locator(".kv-right canvas").get_attribute("data-residents"))
    assert residents >= 10
    note = page.locator(".kv-right .kv-note").inner_text()
    assert note.startswith("Preempted:") and "evicted" in note and "front of the queue" in note
    assert page.console_errors == []


def test_the_visitors_question_is_the_chat_whose_cache_is_weighed(page, base_url):
    """The tour's thread (q): chapter 6 says what the question's own keys and values weigh in the chosen model,
    from its token count as the model on this server reads it."""
    from urllib.parse import quote

    import httpx

    q = "What is the capital of France?"
    tokens = question_tokens(base_url, q)
    per_token = httpx.get(base_url + "/api/kv-cache", timeout=120).json()["kv_per_token"]
    page.goto(base_url + "/tour/kv-cache?step=4&q=" + quote(q))
    line = page.locator(".kv-chat-question")
    line.wait_for(state="visible")
    assert int(line.get_attribute("data-tokens")) == tokens > 7, "the chat template adds its own tokens"
    text = line.inner_text()
    assert q in text and f"{tokens} tokens" in text and per_token["model"] in text
    shown = re.search(r"= ([\d.,]+) (KB|MB)", text)
    value = float(shown.group(1).replace(",", "")) * {"KB": 1e3, "MB": 1e6}[shown.group(2)]
    assert abs(value - tokens * per_token["bytes"]) <= 0.005 * tokens * per_token["bytes"], (text, tokens)
    page.goto(base_url + "/tour/kv-cache?step=4")
    rendered(page)
    assert page.locator(".kv-chat-question").is_hidden(), "without a question the line stays hidden"
    assert page.console_errors == []


def test_measured_panel_shows_the_responses_bytes_and_times(page, base_url):
    import json
    import urllib.request

    from pagekit import js_num, measured_panel

    page.goto(base_url + "/tour/kv-cache")
    rendered(page)  # the simulation draws without waiting for the measurement
    panel = measured_panel(page)
    assert panel.get_attribute("data-measured") == "shown"
    with urllib.request.urlopen(base_url + "/api/kv-cache/measured") as r:  # measured once: the numbers drawn
        m = json.load(r)
    small, big, t = m["served_bf16"], m["large_model"], m["decode"]
    bars = panel.locator(".mp-kv-bars .mp-bar")
    assert bars.locator(".mp-bar-label").all_inner_texts() == [small["model"], big["model"]]
    assert bars.locator(".mp-bar-value").all_inner_texts() == [
        f"{small['bytes_per_token']:,} bytes",
        f"{big['bytes_per_token']:,} bytes",
    ]
    widths = bars.locator(".mp-bar-track i").evaluate_all("els => els.map((e) => parseFloat(e.style.width))")
    assert widths[1] == 100 and widths[0] == pytest.approx(100 * small["bytes_per_token"] / big["bytes_per_token"])
    text = panel.inner_text()
    assert f"{js_num(m['large_over_served'])}× as much per token" in text
    assert f"held {m['measured_cache_bytes']:,} bytes, {m['measured_bytes_per_token']:,.0f} per token" in text
    assert panel.locator(".mp-check strong").inner_text().strip() == "Weighed here:"  # it matched the formula
    times = panel.locator(".mp-time-bars .mp-bar-value").all_inner_texts()
    assert times == [
        f"{js_num(t['cached_milliseconds_per_token'])} ms/token",
        f"{js_num(t['recompute_milliseconds_per_token'])} ms/token",
    ]
    assert f"{js_num(t['speedup'])}× faster with the cache" in text


def test_the_visitors_chat_is_drawn_large_and_grows_from_the_question(page, base_url):
    """With a question, the zoomed strip is the visitor's own chat: its question's tokens fill pages of the chosen
    size, the answer appends one token a step, bytes from the model's shape; each panel shows the whole run's waste."""
    from urllib.parse import quote

    import httpx

    q = "What is a KV cache?"
    tokens = question_tokens(base_url, q)
    kv = httpx.get(base_url + "/api/kv-cache", timeout=120).json()
    per_token, block = (
        kv["kv_per_token"]["bytes"],
        next(p for p in kv["policies"] if p["name"] == "paged")["block_size"],
    )
    page.goto(base_url + "/tour/kv-cache?step=0&q=" + quote(q))
    rendered(page)
    page.wait_for_function("() => document.querySelector('.kv-chat').dataset.follows === 'question'")
    assert page.locator(".kv-chat h3").inner_text() == "Your chat, zoomed in"
    seen = []
    for step in (0, 5, 12):
        set_range(page, ".kv-transport input[type=range]", step)
        n = int(page.locator(".kv-chat").get_attribute("data-tokens"))
        seen.append(n)
        text = page.locator(".kv-chat-text").inner_text()
        assert text.startswith(f"{tokens} question + {step} answer tokens = {n} tokens"), text
        pages = -(-n // block)
        assert f"{pages} page{'s' if pages != 1 else ''} of {block} tokens" in text
        shown = re.search(r"= ([\d.,]+) (KB|MB|GB) of keys", text)
        value = float(shown.group(1).replace(",", "")) * {"KB": 1e3, "MB": 1e6, "GB": 1e9}[shown.group(2)]
        assert abs(value - n * per_token) <= 0.01 * n * per_token, text
    assert seen == [tokens, tokens + 5, tokens + 12]
    height = page.locator(".kv-chat-grid").bounding_box()["height"]
    assert height >= 40, f"the chat is drawn large, not as a hairline ({height:.0f} px)"
    runs = page.locator(".kv-panel .kv-waste").all_inner_texts()
    waste = {p["name"]: p["waste_fraction"] for p in kv["policies"]}
    want = [waste["contiguous"], waste["paged"]]  # the left panel compares the default region, the right is paged
    for text, w in zip(runs, want):
        assert "WHOLE RUN" in text.upper() and f"{100 * w:.1f}%" in text, (text, w)
    assert page.console_errors == []
