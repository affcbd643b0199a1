"""Chapter 2 in a real Chromium: the prompt's vectors rise floor by floor; focusing a token shows its guesses."""

from __future__ import annotations

import pytest

from inside_llm.api.generate import demo_model

pytestmark = pytest.mark.browser


def floors_shown(page) -> int:
    return page.evaluate("() => document.querySelectorAll('#stage g.emb-floor.shown').length")


def test_typed_prompt_draws_one_column_per_token_and_a_floor_per_layer(page, base_url):
    m = demo_model()
    page.goto(base_url + "/tour/embeddings?autoplay=0")  # the drawing, not the rise's timing (tested below)
    box = page.locator("#ctl-prompt")
    box.fill("")
    box.type("Juliet is the sun", delay=10)
    n = len(m.encode("Juliet is the sun"))
    page.wait_for_function(f"() => document.querySelectorAll('#stage .emb-token').length === {n}")
    assert page.locator("#stage g.emb-floor").count() == m.config.n_layers + 1
    assert page.locator("#stage g.emb-floor image.strip-img").count() == m.config.n_layers + 1
    page.wait_for_function(f"() => document.querySelectorAll('#stage g.emb-floor.shown').length === {m.config.n_layers + 1}")
    readouts = page.locator("#stage .readouts").inner_text()
    assert str(n) in readouts and str(m.config.dim) in readouts and "8,192" in readouts
    assert "Juliet" in page.url
    assert page.console_errors == []


def test_focusing_a_token_shows_what_each_floor_would_predict(page, base_url):
    page.goto(base_url + "/tour/embeddings?prompt=To%20be%2C%20or%20not&autoplay=0")
    page.wait_for_selector("#stage .emb-token")
    first = page.locator("#stage .emb-token").first
    first.focus()
    assert "selected" in first.get_attribute("class")
    assert "After To" in page.locator("#stage .emb-lens-title").inner_text()
    head = page.locator("#stage .emb-lens-head").text_content()
    assert "To" in head
    page.keyboard.press("ArrowRight")
    assert "selected" in page.locator("#stage .emb-token").nth(1).get_attribute("class")
    assert "be" in page.locator("#stage .emb-lens-title").inner_text()
    assert page.console_errors == []


def test_steps_freeze_the_rise_and_reduced_motion_jumps_to_the_end(browser, base_url):
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, reduced_motion="reduce")
    page = ctx.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(base_url + "/tour/embeddings")
    page.wait_for_selector("#stage .emb-token")
    n = demo_model().config.n_layers + 1
    assert floors_shown(page) == n, "reduced motion: every floor at once"
    page.goto(base_url + "/tour/embeddings?step=0")
    page.wait_for_selector("#stage .emb-token")
    page.wait_for_timeout(200)
    assert floors_shown(page) == 0
    page.goto(base_url + "/tour/embeddings?step=2")
    page.wait_for_selector("#stage .emb-token")
    page.wait_for_timeout(200)
    assert floors_shown(page) == 2
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth"), "no sideways scroll at 390 px"
    assert errors == []
    ctx.close()


def test_generate_streams_to_an_eventsource(page, base_url):
    """/api/generate (mounted with this chapter) as chapter 11's chat box reads it: EventSource, closed on done."""
    m = demo_model()
    page.goto(base_url + "/tour/embeddings?autoplay=0")
    got = page.evaluate("""() => new Promise((resolve, reject) => {
      const es = new EventSource('/api/generate?model=toy&prompt=ROMEO%3A&max_tokens=6&temperature=0&tokens_per_s=100');
      const out = { ids: [], text: '' };
      es.addEventListener('token', (e) => { const t = JSON.parse(e.data); out.ids.push(t.id); out.text += t.text; });
      es.addEventListener('done', (e) => { es.close(); out.done = JSON.parse(e.data); resolve(out); });
      es.onerror = () => { es.close(); reject(new Error('stream failed')); };
    })""")
    expect = list(m.generate(m.encode("ROMEO:"), 6, temperature=0.0))
    assert got["ids"] == expect and got["text"] == m.decode(expect)
    assert got["done"]["num_tokens"] == 6
    assert page.console_errors == []


def test_the_rise_ends_with_every_floor_shown(page, base_url):
    m = demo_model()
    page.goto(base_url + "/tour/embeddings")
    page.wait_for_function(f"() => document.querySelectorAll('#stage g.emb-floor.shown').length === {m.config.n_layers + 1}",
                           timeout=20000)
    assert page.console_errors == []


def test_typing_after_an_empty_prompt_draws_again(page, base_url):
    """An empty prompt clears the selected token; the next prompt selects its last token and draws every floor."""
    n_floors = demo_model().config.n_layers + 1
    page.goto(base_url + "/tour/embeddings?prompt=&autoplay=0")
    page.wait_for_function("() => document.querySelector('#stage .emb-note')?.textContent.startsWith('Type a prompt')")
    page.locator("#ctl-prompt").type("To be", delay=10)
    page.wait_for_function(f"() => document.querySelectorAll('#stage g.emb-floor.shown').length === {n_floors}")
    assert page.locator("#stage-status").inner_text() == ""
    assert "selected" in page.locator("#stage .emb-token").last.get_attribute("class")
    assert page.console_errors == []
