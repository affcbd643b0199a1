"""Chapter 1 in a real Chromium: characters per token beside words per token, when the 3/4-word rule does not
apply, and the linked highlight (token chip -> its characters in the text -> its id in the list, and back)."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest

from inside_llm.sim.model import tokenizer as tk
from inside_llm.sim.quant.demo_quality import heldout_ratio

pytestmark = pytest.mark.browser

DEFAULT = "The GPU server reads your prompt as tokens, not letters. Unbelievably, 🦙 emoji split too!"
CJK = "🦙🚀 日本語のテキストも分割されます。"
CODE = "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)"


def open_text(page, base_url, text):
    page.goto(f"{base_url}/tour/tokens?text={quote(text)}")
    n = len(tk.encode(text, "cl100k_base"))
    page.wait_for_function(
        f"() => document.querySelectorAll('#stage .chip').length === {n} && "
        f"document.querySelectorAll('#stage .tok-id').length === {n}"
    )
    return tk.tokenize(text, "cl100k_base")


def readout(page, label):
    return page.locator("#stage .readout", has=page.locator(".label", has_text=re.compile(f"^{label}$", re.I)))


def lit(page):
    return page.evaluate("""() => ({
      chars: [...document.querySelectorAll('#stage .tok-seg.lit')].map(s => s.textContent).join(''),
      ids: [...document.querySelectorAll('#stage .tok-id.lit')].map(s => s.textContent),
      chips: [...document.querySelectorAll('#stage .chip.lit')].map(c => Number(c.dataset.i)),
      inside: [...document.querySelectorAll('#stage .tok-seg.lit')].every(s => {
        const r = s.getBoundingClientRect(), b = document.querySelector('#stage .tok-source').getBoundingClientRect();
        return r.width > 4 && r.height > 10 && r.left >= b.left && r.right <= b.right && r.top >= b.top && r.bottom <= b.bottom;
      }),
    })""")


def test_characters_per_token_and_the_rule_on_english(page, base_url):
    toks = open_text(page, base_url, DEFAULT)
    n, chars = len(toks), len(DEFAULT)
    assert readout(page, "Chars per token").locator(".value").inner_text() == f"{chars / n:.1f}"
    assert readout(page, "Words per token").locator(".value").inner_text() == f"{tk.count_words(DEFAULT) / n:.2f}"
    rule = page.locator("#stage .tok-rule")
    assert rule.get_attribute("class").split() == ["tok-rule", "applies"]
    ref = tk.reference_ratio("cl100k_base")
    corpus = heldout_ratio("cl100k_base")  # the held-out Shakespeare (sim.quant.demo_quality owns that text)
    text = rule.inner_text()
    assert text.startswith("The ¾-word rule fits this text")
    assert f"{corpus['words']:,} words of Shakespeare" in text and f"({ref['words']} words)" in text
    # Each meter's bar is the visitor's value over the meter's scale (1.5 words, 6 characters per token).
    widths = page.evaluate("""() => [...document.querySelectorAll('#stage .tok-meter .meter')].map(m =>
      m.querySelector('span').getBoundingClientRect().width / m.getBoundingClientRect().width)""")
    assert widths[0] == pytest.approx(tk.count_words(DEFAULT) / n / 1.5, abs=0.01)
    assert widths[1] == pytest.approx(chars / n / 6, abs=0.01)
    assert page.locator("#stage .tok-meter .meter b").count() == 5  # rule + 2 references, 2 references
    assert page.console_errors == []


def test_rule_does_not_apply_to_another_script_or_code(page, base_url):
    toks = open_text(page, base_url, CJK)
    rule = page.locator("#stage .tok-rule")
    assert "moot" in rule.get_attribute("class")
    assert rule.inner_text().startswith("The ¾-word rule does not apply here: 100% of its letters are not A–Z")
    assert f"{len(CJK) / len(toks):.1f} here" in rule.inner_text()
    assert "tok-moot" in readout(page, "Words per token").get_attribute("class")
    toks = open_text(page, base_url, CODE)
    assert "code punctuation" in page.locator("#stage .tok-rule").inner_text()
    assert page.console_errors == []


def test_rule_judged_on_the_measured_ratio_of_a_z_text(page, base_url):
    """A–Z text whose own words per token is far from English's (one long compound word) is not said to fit."""
    word = "Donaudampfschifffahrtsgesellschaftskapitän"
    toks = open_text(page, base_url, word)
    mine = tk.count_words(word) / len(toks)
    ref = tk.reference_ratio("cl100k_base")["words_per_token"]
    assert mine < ref / 1.5, "the test needs a text far off the English ratio"
    rule = page.locator("#stage .tok-rule")
    assert rule.get_attribute("class").split() == ["tok-rule", "moot"]
    text = rule.inner_text()
    assert text.startswith("The ¾-word rule is off for this text") and f"{mine:.2f} words per token here" in text
    assert "tok-moot" in readout(page, "Words per token").get_attribute("class")
    assert page.console_errors == []


def test_hover_and_focus_light_a_tokens_characters_and_id(page, base_url):
    toks = open_text(page, base_url, DEFAULT)
    src = page.locator("#stage .tok-source")
    assert src.inner_text() == DEFAULT  # the whole text, cut at every token boundary
    # A byte token of the llama emoji ("20 F0 9F": a space and the emoji's first two bytes) lights the
    # characters it is part of, and its own id.
    i = next(k for k, t in enumerate(toks) if t.text is None)
    page.locator("#stage .chip").nth(i).hover()
    got = lit(page)
    assert (
        got["chars"] == DEFAULT[toks[i].char_start : toks[i].char_end] == " 🦙"
        and got["ids"] == [str(toks[i].id)]
        and got["chips"] == [i]
        and got["inside"]
    )
    # Keyboard focus does the same for a whole-word token.
    j = next(k for k, t in enumerate(toks) if t.text == " server")
    page.locator("#stage .chip").nth(j).focus()
    got = lit(page)
    assert got["chars"] == " server" and got["ids"] == [str(toks[j].id)] and got["chips"] == [j]
    # Hovering the emoji in the text lights every token that carries one of its bytes.
    page.locator("#stage .tok-seg", has_text="🦙").hover()
    split = [k for k, t in enumerate(toks) if t.char_start <= DEFAULT.index("🦙") < t.char_end]
    got = lit(page)
    assert len(split) >= 2 and got["chips"] == split and got["ids"] == [str(toks[k].id) for k in split]
    # Hovering an id lights its chip; leaving clears everything.
    page.locator("#stage .tok-id").nth(2).hover()
    assert lit(page)["chips"] == [2] and lit(page)["chars"] == toks[2].text
    page.mouse.move(2, 2)
    assert lit(page) == {"chars": "", "ids": [], "chips": [], "inside": True}
    assert page.console_errors == []


def test_smollm2_vocabulary_and_its_chatml_template(page, base_url, smollm):
    page.goto(f"{base_url}/tour/tokens?text={quote('Hello world! 123')}&encoding=smollm2&view=chat")
    page.wait_for_function("() => document.querySelectorAll('#stage .chip').length === 37")
    chips = page.locator("#stage .chip").all_inner_texts()
    assert chips[0] == "<|im_start|>" and "<|im_end|>" in chips and chips.count("<|im_start|>") == 3
    assert "ChatML" in page.locator("#stage .legend").inner_text()
    assert page.locator("#ctl-encoding option:checked").inner_text() == "SmolLM2 (the model on this server)"
    assert page.console_errors == []
