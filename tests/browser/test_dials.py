"""Chapter 11 in a real Chromium: readouts follow the sliders and the URL, the chat streams, no-fit, math, /dials."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from pagekit import change, settled

from inside_llm import modelfile
from inside_llm.api.catalog import LLAMA_31_8B_CONFIG

pytestmark = pytest.mark.browser
SHOTS = Path(__file__).parents[2] / "out" / "screens"
# the OpenAPI example (Llama 3.1 8B's config.json) as a visitor would paste it, with its name
LLAMA_8B = {**LLAMA_31_8B_CONFIG, "_name_or_path": "meta-llama/Llama-3.1-8B"}


def said(page, key: str) -> str:
    """The final (screen-reader) text of a readout; the visible digits glide towards it."""
    return page.locator(f'.readout[data-key="{key}"] .visually-hidden').inner_text()


def wait_drawn(page):
    page.wait_for_function(
        "() => document.querySelector('.readout[data-key=\"ttft_ms\"] .visually-hidden')?.textContent.length > 0"
    )


def test_batch_slider_moves_the_readouts_and_the_url(page, base_url):
    page.goto(base_url + "/tour/dials")
    wait_drawn(page)
    before = said(page, "tokens_per_s_total")
    per_user = said(page, "tokens_per_s_per_user")
    digits = page.locator('.readout[data-key="tokens_per_s_total"] .n').element_handle()
    bar = page.locator(".membar .seg.kv").element_handle()
    slider = page.locator("#ctl-batch")
    slider.focus()
    for _ in range(4):  # log2 slider: 16 -> 256 chats, one request per step, the latest wins
        page.keyboard.press("ArrowRight")
    page.wait_for_function(
        "() => document.querySelector('.readout[data-key=\"tokens_per_s_total\"] .sub')"
        ".textContent.startsWith('256 chats')"
    )
    assert parse_qs(urlparse(page.url).query)["batch"] == ["256"]
    assert page.locator("#out-batch").inner_text().startswith("256")
    after = float(re.sub(r"[^\d.]", "", said(page, "tokens_per_s_total").split()[0]))
    assert after > 3 * float(re.sub(r"[^\d.]", "", before.split()[0])), "256 chats out-produce 16"
    assert said(page, "tokens_per_s_per_user") != per_user
    assert digits.evaluate("el => el.isConnected") and bar.evaluate("el => el.isConnected"), "updated in place"
    # the glide ends on the exact figure
    shown = settled(page, "() => document.querySelector('.readout[data-key=\"tokens_per_s_total\"] .n').textContent")
    assert said(page, "tokens_per_s_total").startswith(shown)
    assert page.console_errors == []


def test_chat_streams_tokens_over_time_at_the_per_user_speed(page, base_url):
    page.goto(base_url + "/tour/dials?batch=256")
    wait_drawn(page)
    page.locator(".chat-ask input").fill("Write a haiku about the sea.")
    page.locator(".chat-ask button").click()
    # the server's CPU writes the whole answer first (the foot counts it), then the box replays it
    page.wait_for_function("() => Number(document.querySelector('.bubble.bot')?.dataset.count) >= 2", timeout=120000)
    # the pacing contract, read from the page's own schedule (issue 17: no wall-clock rates in browser tests):
    # the foot says "shown of total tokens · s s after a … first token", and s seconds into the stream the box
    # shows 1 + s × the per-user rate tokens (the foot rounds s to 0.1 s); a token not yet written waits
    rate = float(said(page, "tokens_per_s_per_user").split()[0])
    sample = (
        "() => [Number(document.querySelector('.bubble.bot').dataset.count), "
        "document.querySelector('.chat-foot').textContent]"
    )
    samples = []
    while True:
        count, foot = page.evaluate(sample)
        m = re.match(r"([\d,]+) of ([\d,]+|…) tokens · ([\d.]+) s after", foot)
        if m and int(m[1].replace(",", "")) == count:  # the foot and the count come from the same frame
            samples.append((count, m[2], float(m[3])))
            if m[2] != "…" and count == int(m[2].replace(",", "")):
                break
        page.wait_for_function(
            "(n) => Number(document.querySelector('.bubble.bot').dataset.count) > n", arg=count, timeout=120000
        )
    counts = [c for c, _, _ in samples]
    assert counts == sorted(counts) and len(set(counts)) >= 4, f"tokens arrive one after another: {counts}"
    for count, total, s in samples:
        assert count <= 1 + (s + 0.05) * rate * 1.01, f"{count} tokens shown {s} s in, ahead of {rate} tokens/s"
        if total != "…":  # every token is written: none waits, so the box is exactly on schedule
            assert count >= min(int(total.replace(",", "")), (s - 0.05) * rate * 0.99), (
                f"{count} tokens shown {s} s in, behind {rate} tokens/s"
            )
    note = page.locator(".chat-note").inner_text()
    real = modelfile.served_smollm() is not None
    assert ("SmolLM2-135M-Instruct" if real else "toy model") in note and "per-user speed" in note
    if real:
        assert re.search(r"[\d.]+ tokens/s on this server's CPU", note), note
    answer = page.locator(".answer-text").inner_text()
    assert answer.strip() and answer.strip() not in page.locator(".bubble.you").inner_text(), (
        "the answer is generated by the model, not an echo of the prompt"
    )
    assert page.console_errors == []


def test_chat_answers_the_default_question_and_keeps_the_question_whole(page, base_url, smollm):
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(base_url + "/tour/dials?batch=1")
    wait_drawn(page)
    assert page.locator(".chat-ask input").input_value() == "What is the capital of France?"
    page.wait_for_function(
        "() => document.querySelector('.chat-foot')?.textContent.match(/^(\\d+) of \\1 tokens/)", timeout=120000
    )
    assert "Paris" in page.locator(".answer-text").inner_text()
    you, bot = page.locator(".bubble.you").bounding_box(), page.locator(".bubble.bot").bounding_box()
    assert you["y"] + you["height"] <= bot["y"], "the answer bubble overlaps the question"
    full = page.locator(".bubble.you").evaluate("el => el.scrollHeight <= el.clientHeight + 1")
    assert full, "the question bubble is clipped"
    assert page.console_errors == []


def test_405b_on_one_gpu_says_it_does_not_fit_and_by_how_much(page, base_url):
    page.goto(base_url + "/tour/dials")
    wait_drawn(page)
    room = page.locator(".mem-note").inner_text()
    assert re.fullmatch(r"Room for up to [\d,]+ chats of [\d,]+ tokens at once \(the largest batch that fits\)\.", room)
    page.locator(".preset", has_text="405B on one GPU").click()
    page.wait_for_selector(".dials-mem.no-fit")
    verdict = page.locator(".mem-verdict").inner_text()
    assert page.locator(".mem-note").inner_text().startswith("Not even one chat fits")
    assert verdict.startswith("Does not fit") and re.search(r"\d+ GB more than its 80 GB", verdict)
    assert said(page, "spare_gb").startswith("−")
    assert page.locator(".membar .cap").is_visible()
    page.wait_for_function("() => document.querySelector('.chat-foot')?.textContent.includes('does not fit')")
    assert page.console_errors == []


def test_a_setup_that_does_not_fit_shows_no_figures_only_hypothetical_ones(page, base_url):
    """405B on 8 x H100 in BF16 does not fit: the priced cards show no figure, each says what it would be as
    hypothetical (from the API's `hypothetical` block), and the fact says it serves no one."""
    q = "model=llama-3.1-405b&gpu=h100-sxm&gpus=8&precision=bf16"
    d = page.request.get(f"{base_url}/api/dials?{q}").json()
    assert d["fits"] is False and d["ttft_ms"] is None and d["hypothetical"]["ttft_ms"] > 0
    page.goto(f"{base_url}/tour/dials?{q}")
    wait_drawn(page)
    for key in ("ttft_ms", "tokens_per_s_per_user", "tokens_per_s_total", "cost_per_million_tokens_usd"):
        tile = page.locator(f'.readout[data-key="{key}"]')
        assert tile.get_attribute("data-hypothetical") == "true"
        assert said(page, key).startswith("—"), said(page, key)
        assert tile.inner_text().count("(hypothetical)") == 1
    assert said(page, "ttft_ms") == "— does not fit"
    sub = page.locator('.readout[data-key="ttft_ms"]').inner_text()
    shown = re.search(r"([\d.,]+) (ms|s) \(hypothetical\)", sub)
    value = float(shown.group(1).replace(",", "")) * (1000 if shown.group(2) == "s" else 1)
    assert value == pytest.approx(d["hypothetical"]["ttft_ms"], rel=0.01)
    fact = page.locator(".fact-text").inner_text()
    assert "does not fit" in fact and "serves no one" in fact and "hypothetically, if it fit" in fact
    assert fact.index("does not fit") < fact.index("first token in")
    assert page.console_errors == []


def test_show_the_math_a_resolved_combination_and_a_refusal_in_words(page, base_url):
    """Resolve, don't reject: a GPU count that tensor × pipeline no longer divides moves tensor parallel to the
    nearest that fits and says so in one line beside the control; a true refusal (prompt + answer past the
    model's context) is shown in the endpoint's words beside its control, never as "Value error"."""
    page.goto(base_url + "/tour/dials")
    wait_drawn(page)
    page.locator('.readout[data-key="ttft_ms"] .math-btn').click()
    panel = page.locator("#dials-math")
    assert panel.is_visible() and "ttft =" in panel.inner_text() and "H100" in panel.inner_text()
    assert page.locator("#ctl-gpus").input_value() == "8" and page.locator("#ctl-tp").input_value() == "8"
    change(page, lambda: page.locator("#ctl-gpus").select_option("4"))
    note = page.locator('.control[data-name="gpus"] .control-note')
    assert note.inner_text() == "GPUs 4 → tensor 4 so that 4 × 1 = 4 GPUs."
    assert "problem" not in (note.get_attribute("class") or "")
    assert page.locator("#ctl-tp").input_value() == "4" and page.locator("#stage-status").inner_text() == ""
    assert "4 × NVIDIA H100" in page.locator(".dials-config").inner_text()
    assert parse_qs(urlparse(page.url).query)["tp"] == ["4"]
    # a true refusal: Llama 2 7B's context is 4,096 tokens
    change(page, lambda: page.locator("#ctl-model").select_option("llama-2-7b"))
    page.allowed_errors.append("422")  # the refused combination is an expected 422
    page.locator("#ctl-prompt_tokens").fill("12")  # a log2 slider: 4,096 tokens
    page.wait_for_function("() => document.querySelector('#stage-status')?.textContent.startsWith('Not drawn')")
    refusal = page.locator('.control[data-name="prompt_tokens"] .control-note.problem').inner_text()
    assert (
        refusal == "The prompt and the answer together must fit Llama 2 7B's context window of 4,096 tokens; "
        "4,096 + 256 = 4,352 do not."
    )
    assert page.locator("#ctl-prompt_tokens").get_attribute("aria-invalid") == "true"
    assert page.locator("#stage-status").inner_text() == f"Not drawn: {refusal}"
    assert "error" not in (refusal + page.locator("#stage-status").inner_text()).lower()
    # the stale readouts fade (a .2 s transition): wait for the fade rather than sample it mid-way
    page.wait_for_function("() => Number(getComputedStyle(document.querySelector('.dials-readouts')).opacity) < 0.5")
    change(page, lambda: page.locator("#ctl-prompt_tokens").fill("11"))  # 2,048 tokens
    assert page.locator("#stage-status").inner_text() == ""
    assert page.locator("#ctl-prompt_tokens").get_attribute("aria-invalid") is None


def test_full_page_custom_model_starts_from_the_one_on_screen(page, base_url):
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(base_url + "/dials")
    wait_drawn(page)
    assert not page.locator(".custom-model").is_visible()
    for name in (
        "model",
        "gpu",
        "gpus",
        "tp",
        "pp",
        "precision",
        "kv_precision",
        "batch",
        "prompt_tokens",
        "output_tokens",
        "price_per_gpu_hour",
    ):
        assert page.locator(f"#ctl-{name}").is_visible(), name
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "dials-page-test-desktop.png"), full_page=True)
    page.locator("#ctl-model").select_option("llama-3.1-8b")
    page.wait_for_function("() => document.querySelector('.dials-config')?.textContent.startsWith('Llama 3.1 8B')")
    page.locator("#ctl-model").select_option("custom")
    assert page.locator(".custom-model").is_visible()
    page.wait_for_function("() => document.querySelector('#ctl-hidden_size')?.value === '4096'")
    page.wait_for_function(
        "() => document.querySelector('.dials-config')?.textContent.startsWith('Custom model (8.03 B')"
    )
    q = parse_qs(urlparse(page.url).query)
    assert q["model"] == ["custom"] and q["hidden_size"] == ["4096"]
    assert page.console_errors == []


def test_pasted_config_json_lands_on_the_dials(page, base_url):
    page.goto(base_url + "/dials?gpus=1&tp=1")
    wait_drawn(page)
    page.locator(".dials-byo summary").click()
    page.locator(".dials-byo textarea").fill(json.dumps(LLAMA_8B))
    page.locator(".dials-byo button[type=submit]").click()
    page.wait_for_function("() => document.querySelector('.dials-byo [role=status]')?.textContent.includes('8.03 B')")
    page.wait_for_function(
        "() => document.querySelector('.dials-config')?.textContent.startsWith('Custom model (8.03 B')"
    )
    assert page.locator("#ctl-model").input_value() == "custom"
    assert page.locator("#ctl-num_hidden_layers").input_value() == "32"
    page.locator(".dials-byo textarea").fill('{"hidden_size": 4096}')
    page.locator(".dials-byo button[type=submit]").click()
    page.wait_for_function(
        "() => document.querySelector('.dials-byo [role=status]')?.textContent.includes('num_hidden_layers')"
    )
    page.allowed_errors.append("422")  # the refused config is an expected 422


def test_without_the_real_model_the_toy_answers_and_the_note_says_how_to_fetch(page, base_url, no_model):
    page.goto(base_url + "/tour/dials?batch=1")
    wait_drawn(page)
    page.wait_for_function(
        "() => document.querySelector('.chat-foot')?.textContent.match(/^(\\d+) of \\1 tokens/)", timeout=60000
    )
    note = page.locator(".chat-note").inner_text()
    assert "toy model" in note and "inside-llm fetch-model" in note
    assert page.locator(".answer-text").inner_text().strip()
    assert page.console_errors == []
