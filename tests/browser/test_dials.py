"""Chapter 11 in a real Chromium: readouts follow the sliders and the URL, the chat streams, no-fit, math, /dials."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

pytestmark = pytest.mark.browser
SHOTS = Path(__file__).parents[2] / "out" / "screens"
LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
            "max_position_embeddings": 131072, "num_attention_heads": 32, "num_hidden_layers": 32,
            "num_key_value_heads": 8, "vocab_size": 128256, "_name_or_path": "meta-llama/Llama-3.1-8B"}


def said(page, key: str) -> str:
    """The final (screen-reader) text of a readout; the visible digits glide towards it."""
    return page.locator(f'.readout[data-key="{key}"] .visually-hidden').inner_text()


def wait_drawn(page):
    page.wait_for_function("() => document.querySelector('.readout[data-key=\"ttft_ms\"] .visually-hidden')"
                           "?.textContent.length > 0")


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
    page.wait_for_function("() => document.querySelector('.readout[data-key=\"tokens_per_s_total\"] .sub')"
                           ".textContent.startsWith('256 chats')")
    assert parse_qs(urlparse(page.url).query)["batch"] == ["256"]
    assert page.locator("#out-batch").inner_text().startswith("256")
    after = float(re.sub(r"[^\d.]", "", said(page, "tokens_per_s_total").split()[0]))
    assert after > 3 * float(re.sub(r"[^\d.]", "", before.split()[0])), "256 chats out-produce 16"
    assert said(page, "tokens_per_s_per_user") != per_user
    assert digits.evaluate("el => el.isConnected") and bar.evaluate("el => el.isConnected"), "updated in place"
    page.wait_for_timeout(450)  # the glide ends on the exact figure
    shown = page.locator('.readout[data-key="tokens_per_s_total"] .n').inner_text()
    assert said(page, "tokens_per_s_total").startswith(shown)
    assert page.console_errors == []


def test_chat_streams_tokens_over_time_at_the_per_user_speed(page, base_url):
    page.goto(base_url + "/tour/dials?batch=256")
    wait_drawn(page)
    bot = page.locator(".bubble.bot")
    page.wait_for_function("() => Number(document.querySelector('.bubble.bot').dataset.count) >= 2", timeout=15000)
    samples = []
    t_end = time.monotonic() + 10
    while time.monotonic() < t_end:
        samples.append((time.monotonic(), int(bot.get_attribute("data-count"))))
        if page.locator(".chat-foot").inner_text().startswith(f"{samples[-1][1]} of {samples[-1][1]} "):
            break
        page.wait_for_timeout(80)
    counts = [c for _, c in samples]
    assert counts == sorted(counts) and len(set(counts)) >= 4, f"tokens arrive one after another: {counts}"
    rate = float(said(page, "tokens_per_s_per_user").split()[0])
    (t0, c0), (t1, c1) = samples[0], samples[-1]
    measured = (c1 - c0) / (t1 - t0)
    assert 0.4 * rate < measured < 1.8 * rate, f"streamed {measured:.1f} tokens/s vs {rate} per user"
    assert "prompt's own tokens" in page.locator(".chat-note").inner_text()
    assert page.console_errors == []


def test_405b_on_one_gpu_says_it_does_not_fit_and_by_how_much(page, base_url):
    page.goto(base_url + "/tour/dials")
    wait_drawn(page)
    page.locator(".preset", has_text="405B on one GPU").click()
    page.wait_for_selector(".dials-mem.no-fit")
    verdict = page.locator(".mem-verdict").inner_text()
    assert verdict.startswith("Does not fit") and re.search(r"\d+ GB more than its 80 GB", verdict)
    assert said(page, "spare_gb").startswith("−")
    assert page.locator(".membar .cap").is_visible()
    page.wait_for_function("() => document.querySelector('.chat-foot').textContent.includes('does not fit')")
    assert page.console_errors == []


def test_show_the_math_and_a_422_named_in_the_status(page, base_url):
    page.goto(base_url + "/tour/dials")
    wait_drawn(page)
    page.locator('.readout[data-key="ttft_ms"] .math-btn').click()
    panel = page.locator("#dials-math")
    assert panel.is_visible() and "ttft =" in panel.inner_text() and "H100" in panel.inner_text()
    page.locator("#ctl-gpus").select_option("4")
    page.wait_for_function("() => document.querySelector('#stage-status').textContent.includes('divide gpus')")
    status = page.locator("#stage-status").inner_text()
    assert "tp" in status and "gpus" in status
    assert page.locator(".dials-readouts").evaluate("el => Number(getComputedStyle(el).opacity)") < 0.9
    page.locator("#ctl-tp").select_option("4")
    page.wait_for_function("() => document.querySelector('#stage-status').textContent === ''")
    assert "4 × NVIDIA H100" in page.locator(".dials-config").inner_text()


def test_full_page_custom_model_starts_from_the_one_on_screen(page, base_url):
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(base_url + "/dials")
    wait_drawn(page)
    assert not page.locator(".custom-model").is_visible()
    for name in ("model", "gpu", "gpus", "tp", "pp", "precision", "kv_precision", "batch", "prompt_tokens",
                 "output_tokens", "price_per_gpu_hour"):
        assert page.locator(f"#ctl-{name}").is_visible(), name
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "dials-page-test-desktop.png"), full_page=True)
    page.locator("#ctl-model").select_option("llama-3.1-8b")
    page.wait_for_function("() => document.querySelector('.dials-config').textContent.startsWith('Llama 3.1 8B')")
    page.locator("#ctl-model").select_option("custom")
    assert page.locator(".custom-model").is_visible()
    page.wait_for_function("() => document.querySelector('#ctl-hidden_size').value === '4096'")
    page.wait_for_function("() => document.querySelector('.dials-config').textContent.startsWith('Custom model (8.03 B')")
    q = parse_qs(urlparse(page.url).query)
    assert q["model"] == ["custom"] and q["hidden_size"] == ["4096"]
    assert page.console_errors == []


def test_pasted_config_json_lands_on_the_dials(page, base_url):
    page.goto(base_url + "/dials?gpus=1&tp=1")
    wait_drawn(page)
    page.locator(".dials-byo summary").click()
    page.locator(".dials-byo textarea").fill(json.dumps(LLAMA_8B))
    page.locator(".dials-byo button[type=submit]").click()
    page.wait_for_function("() => document.querySelector('.dials-byo [role=status]').textContent.includes('8.03 B')")
    page.wait_for_function("() => document.querySelector('.dials-config').textContent.startsWith('Custom model (8.03 B')")
    assert page.locator("#ctl-model").input_value() == "custom"
    assert page.locator("#ctl-num_hidden_layers").input_value() == "32"
    page.locator(".dials-byo textarea").fill('{"hidden_size": 4096}')
    page.locator(".dials-byo button[type=submit]").click()
    page.wait_for_function("() => document.querySelector('.dials-byo [role=status]').textContent.includes('num_hidden_layers')")
    errors = [e for e in page.console_errors if "422" not in e]  # the refused config is an expected 422
    assert errors == []
