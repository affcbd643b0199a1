"""The tour as one journey: "the number" follows each chapter's main control, and the control sits
beside the picture on a desktop and on a phone."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from pagekit import change, open_page, rendered, unexpected_errors, watch_console

from inside_llm.scenes import load_scenes, scene_by_slug

pytestmark = pytest.mark.browser

# Each chapter's main control moved to a value that changes its fact (log2 sliders: the exponent).
MOVES = {
    "tokens": ("text", "one two three"),
    "embeddings": ("prompt", "Why is the sky blue?"),
    "layer": ("layer", 2),
    "gpu": ("gpu", "h200"),
    "roofline": ("batch", 6),
    "kv-cache": ("block_size", "64"),
    "batching": ("rate", 16),
    "quantization": ("precision", "fp8"),
    "speculative": ("alpha", 0.5),
    "parallelism": ("tp", "4"),
    "dials": ("batch", 6),
}


def move(page, slug: str) -> None:
    """Move the chapter's main control through its form element, as a visitor would."""
    name, value = MOVES[slug]
    c = next(c for c in scene_by_slug(slug).controls if c.name == name)
    el = page.locator(f"#ctl-{name}")
    if c.kind == "select":
        el.select_option(str(value))
    elif c.kind in ("text", "textarea"):
        el.fill(str(value))
    else:
        el.evaluate("(el, v) => { el.value = v; el.dispatchEvent(new Event('input', { bubbles: true })); }", str(value))


def move_params(slug: str) -> dict[str, str]:
    """The moved control as the API reads it."""
    name, value = MOVES[slug]
    c = next(c for c in scene_by_slug(slug).controls if c.name == name)
    return {name: str(2**value if c.scale == "log2" else value)}


@pytest.mark.parametrize("slug", list(MOVES))
def test_the_number_follows_the_main_control(page, base_url, client, slug):
    open_page(page, f"{base_url}/tour/{slug}")
    box = page.locator("#fact .fact-text")
    before = box.inner_text()
    assert before == client.get(f"/api/facts/{slug}").json()["text"]
    expected = client.get(f"/api/facts/{slug}?{urlencode(move_params(slug))}").json()["text"]
    assert expected != before
    change(page, lambda: move(page, slug))
    page.wait_for_function("(t) => document.querySelector('#fact .fact-text').textContent === t", arg=expected)


SIZES = {"desktop": (1440, 900), "phone": (390, 844)}
PAGES = [f"/tour/{s}" for s in MOVES] + ["/dials"]


def boxes(page, main: str) -> dict:
    """Viewport boxes of the main control, the stage, and what covers the bottom (the phone's control bar)."""
    return page.evaluate(
        """(name) => {
      const r = (el) => { if (!el) return null; const b = el.getBoundingClientRect();
        return { top: b.top, bottom: b.bottom, left: b.left, right: b.right }; };
      const el = document.getElementById('ctl-' + name);
      const b = el.getBoundingClientRect();
      const x = Math.min(Math.max(b.left + b.width / 2, 1), innerWidth - 1), y = Math.min(Math.max(b.top + b.height / 2, 1), innerHeight - 1);
      const hit = document.elementFromPoint(x, y);
      const rail = document.getElementById('rail');
      const fixed = rail && getComputedStyle(rail).position === 'fixed';
      return { control: r(el), stage: r(document.getElementById('stage')), header: r(document.querySelector('.site-header')),
               bar: fixed ? r(rail) : null, reachable: !!hit && (hit === el || el.contains(hit) || hit.closest('label')?.control === el),
               scrollY: scrollY, width: innerWidth, height: innerHeight };
    }""",
        main,
    )


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("path", PAGES)
def test_main_control_and_stage_share_the_first_screen(browser, base_url, path, size):
    w, h = SIZES[size]
    ctx = browser.new_context(viewport={"width": w, "height": h})
    page = watch_console(ctx.new_page())
    try:
        open_page(page, base_url + path)
        slug = "dials" if path == "/dials" else path.rsplit("/", 1)[1]
        b = boxes(page, scene_by_slug(slug).main_control().name)
        c, s = b["control"], b["stage"]
        assert b["scrollY"] == 0
        assert c["top"] >= b["header"]["bottom"] - 1 and c["bottom"] <= h and c["left"] >= 0 and c["right"] <= w, c
        assert b["reachable"], "nothing covers the main control"
        floor = b["bar"]["top"] if b["bar"] else h
        visible = min(s["bottom"], floor) - max(s["top"], b["header"]["bottom"])
        assert visible >= (0.55 if size == "desktop" else 0.3) * h, f"only {visible:.0f}px of the stage in view"
        if size == "phone":
            assert b["bar"] is not None and s["top"] < b["bar"]["top"], "on a phone the stage comes before the controls"
        assert unexpected_errors(page) == []
    finally:
        ctx.close()


def test_chapter_names_in_the_wide_navigation(browser, base_url):
    ctx = browser.new_context(viewport={"width": 1440, "height": 900})
    page = watch_console(ctx.new_page())
    try:
        open_page(page, f"{base_url}/tour/gpu")
        names = page.locator(".steps a .name")
        assert names.count() == 11
        assert [n.inner_text() for n in names.all()] == [s.short for s in load_scenes()]
        header = page.locator(".site-header").bounding_box()
        brand, tools = page.locator(".brand").bounding_box(), page.locator(".header-tools").bounding_box()
        links = [a.bounding_box() for a in page.locator(".steps a").all()]
        for a, b in zip(links, links[1:]):
            assert a["x"] + a["width"] <= b["x"] + 0.5, "names do not overlap"
        assert links[0]["x"] >= brand["x"] + brand["width"] and links[-1]["x"] + links[-1]["width"] <= tools["x"]
        assert all(a["y"] >= header["y"] and a["y"] + a["height"] <= header["y"] + header["height"] for a in links)
        current = page.locator('.steps a[aria-current="step"]')
        assert current.inner_text().replace("\n", " ") in ("4The GPU", "4 The GPU")
        assert current.evaluate("(a) => getComputedStyle(a).backgroundColor") != "rgba(0, 0, 0, 0)"
    finally:
        ctx.close()


def test_phone_menu_names_every_chapter(browser, base_url):
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, has_touch=True)
    page = watch_console(ctx.new_page())
    try:
        open_page(page, f"{base_url}/tour/parallelism")
        assert not page.locator(".steps-nav").is_visible()
        menu = page.locator(".step-menu summary")
        assert "10" in menu.inner_text() and "Parallelism" in menu.inner_text()
        assert "step 10 of 11" in menu.get_attribute("aria-label")
        box = menu.bounding_box()
        assert box["x"] + box["width"] <= 390 and box["height"] >= 44
        menu.tap()
        items = page.locator(".step-menu li a")
        assert items.count() >= 11
        for a in items.all():
            b = a.bounding_box()
            assert b["height"] >= 44 and b["x"] >= 0 and b["x"] + b["width"] <= 390
        eleven = page.locator('.step-menu li a[data-step="dials"]')
        assert eleven.is_visible() and "11" in eleven.inner_text() and "dials" in eleven.inner_text().lower()
        assert page.locator('.step-menu li a[aria-current="step"]').inner_text().startswith("10")
        theme = page.locator("#theme-toggle").bounding_box()
        assert theme["x"] + theme["width"] <= 390, "the header fits the phone"
        eleven.tap()
        page.wait_for_url("**/tour/dials")
    finally:
        ctx.close()


QUESTION = "Why is the sky blue?"
QUESTION_CONTROLS = {"tokens": "text", "embeddings": "prompt", "layer": "prompt", "speculative": "prompt"}


def test_the_cover_draws_the_server_and_names_every_step(page, base_url):
    open_page(page, base_url + "/")
    assert page.locator("label[for=q]").inner_text() == "Ask the server something"
    assert page.locator("#stage .par-board svg").count() == 1, "chapter 10's board, drawn"
    assert page.locator("#stage .par-board svg rect").count() >= 8
    for el in (".par-readouts", ".par-timeline", ".par-cards", ".par-math"):
        assert all(not x.is_visible() for x in page.locator(f"#stage {el}").all())
    cards = page.locator(".chapters a")
    assert cards.count() == 11
    for a, s in zip(cards.all(), load_scenes()):
        assert a.locator(".chapter-title").inner_text() == s.title and a.locator(".chapter-hook").inner_text() == s.hook
    box = page.locator("#q")
    box.fill(QUESTION)
    assert cards.nth(5).get_attribute("href").endswith("/tour/kv-cache?q=Why+is+the+sky+blue%3F")
    page.locator(".ask button[type=submit]").click()
    page.wait_for_url("**/tour/tokens?q=*")
    rendered(page)
    assert page.locator("#ctl-text").input_value() == QUESTION


def test_the_question_is_the_thread(page, base_url):
    from urllib.parse import quote

    open_page(page, f"{base_url}/tour/tokens?q={quote(QUESTION)}")
    for slug in ("embeddings", "layer"):
        page.locator("#next").click()
        page.wait_for_url(f"**/tour/{slug}?q=*")
        rendered(page)
        assert page.locator(f"#ctl-{QUESTION_CONTROLS[slug]}").input_value() == QUESTION
    # a new question typed in chapter 3 becomes the question for the rest
    change(page, lambda: page.locator("#ctl-prompt").fill("Who wrote Hamlet?"))
    assert "q=Who+wrote+Hamlet%3F" in page.url and "prompt=" not in page.url
    assert page.locator("#next").get_attribute("href").endswith("/tour/gpu?q=Who+wrote+Hamlet%3F")
    assert page.locator('.steps a[data-step="speculative"]').get_attribute("href").endswith("?q=Who+wrote+Hamlet%3F")
    share = page.evaluate("() => location.href")
    assert "q=Who+wrote+Hamlet" in share
    open_page(page, f"{base_url}/tour/dials?q={quote('Who wrote Hamlet?')}")
    assert page.locator(".chat-ask input").input_value() == "Who wrote Hamlet?"


@pytest.mark.parametrize("path", ["/tour/parallelism", "/dials"])
def test_an_invalid_combination_is_resolved_and_said_in_one_line(page, base_url, path):
    open_page(page, base_url + path)
    change(page, lambda: page.locator("#ctl-pp").select_option("2"))
    note = page.locator('.control[data-name="pp"] .control-note')
    assert note.inner_text() == "pipeline 2 → tensor 4 so that 4 × 2 = 8 GPUs."
    assert page.locator("#ctl-tp").input_value() == "4"
    assert "pp=2" in page.url and "tp=4" in page.url
    assert page.locator("#stage-status").inner_text() == ""
    change(page, lambda: page.locator("#ctl-gpus").select_option("2"))
    assert page.locator("#ctl-tp").input_value() == "1" and page.locator("#ctl-pp").input_value() == "2"
    assert (
        "GPUs 2 → tensor 1 so that 1 × 2 = 2 GPUs."
        == page.locator('.control[data-name="gpus"] .control-note').inner_text()
    )


def test_a_refusal_is_said_beside_its_control_and_never_lands_in_the_url(page, base_url):
    open_page(page, base_url + "/tour/dials?model=llama-2-7b")
    page.allowed_errors.append("422")
    drawn = page.url
    page.locator("#ctl-prompt_tokens").evaluate(  # 2**13 = 8,192 tokens
        "(el) => { el.value = 13; el.dispatchEvent(new Event('input', { bubbles: true })); }"
    )
    note = page.locator('.control[data-name="prompt_tokens"] .control-note.problem')
    note.wait_for()
    assert "4,096 tokens" in note.inner_text() and "Value error" not in page.content()
    assert page.locator("#ctl-prompt_tokens").get_attribute("aria-invalid") == "true"
    assert page.url == drawn, "the URL keeps the last state that drew"


@pytest.mark.parametrize("slug", ["gpu", "quantization", "roofline"])
def test_formula_tables_fit_a_phone_and_keep_numbers_whole(browser, base_url, slug):
    ctx = browser.new_context(viewport={"width": 390, "height": 844})
    page = watch_console(ctx.new_page())
    try:
        open_page(page, f"{base_url}/tour/{slug}")
        page.evaluate("() => document.querySelectorAll('#stage details.math').forEach((d) => { d.open = true; })")
        cells = page.evaluate("""() => [...document.querySelectorAll('#stage details.math')].filter((d) => d.querySelector('td'))
          .map((d) => { const box = d.getBoundingClientRect();
            return { box: box.right, table: d.querySelector('table').getBoundingClientRect().right,
              nums: [...d.querySelectorAll('td.num')].map((td) => {
                const r = document.createRange(); r.selectNodeContents(td); return r.getClientRects().length; }) }; })""")
        assert cells, "formula tables to check"
        for c in cells:
            assert c["table"] <= c["box"] + 1, "the table stays inside its box"
            assert all(n == 1 for n in c["nums"]), "every number on one line"
        assert unexpected_errors(page) == []
    finally:
        ctx.close()


def test_chapter_4_lifts_one_gpu_out_of_the_server(browser, base_url):
    for motion in ("no-preference", "reduce"):
        ctx = browser.new_context(viewport={"width": 1440, "height": 900}, reduced_motion=motion)
        page = watch_console(ctx.new_page())
        try:
            page.goto(f"{base_url}/tour/gpu")
            rendered(page)
            if motion == "reduce":
                assert page.locator(".lift").count() == 0, "reduced motion: no lift"
                continue
            page.wait_for_selector(".lift.go")
            assert page.locator(".lift .lift-gpu").count() == 8 and page.locator(".lift .lift-switch").count() == 4
            grown = page.locator(".lift-gpu").first.evaluate("(el) => el.style.transform")
            assert "scale(" in grown
            page.wait_for_selector(".lift", state="detached")  # the chip's drawing is left on the stage
            assert page.locator("#stage svg").count() >= 1
            assert unexpected_errors(page) == []
        finally:
            ctx.close()


def test_presets_and_demo_runs_never_lose_the_question(page, base_url):
    """Chapter 1's Code preset gives the text its own parameter and leaves q; "← back to your question" restores
    it. Chapter 9's "Back to a run where it is usually right" keeps q too (it was emptied), and chapter 11 then
    asks the question."""
    from urllib.parse import parse_qs, quote, urlparse

    open_page(page, f"{base_url}/tour/tokens?q={quote(QUESTION)}")
    change(page, lambda: page.locator(".preset", has_text="Code").click())
    q = parse_qs(urlparse(page.url).query)
    assert q["q"] == [QUESTION] and q["text"][0].startswith("def fib")
    back = page.locator('.control[data-name="text"] .back-to-question')
    assert back.inner_text() == f"← back to your question: “{QUESTION}”"
    assert page.locator("#next").get_attribute("href").endswith(f"?q={quote(QUESTION).replace('%20', '+')}")
    change(page, back.click)
    assert page.locator("#ctl-text").input_value() == QUESTION and "text=" not in page.url
    assert page.locator(".back-to-question").count() == 0
    # chapter 9's "Back to a run where it is usually right" sets its prompt to "" (the demo run): that state's URL
    open_page(page, f"{base_url}/tour/speculative?q={quote(QUESTION)}&prompt=")
    query = parse_qs(urlparse(page.url).query, keep_blank_values=True)
    assert query["q"] == [QUESTION] and query["prompt"] == [""]
    assert page.locator("#ctl-prompt").input_value() == ""
    assert page.locator('.control[data-name="prompt"] .back-to-question').is_visible()
    page.locator("#next").click()
    page.wait_for_url("**/tour/parallelism?q=*")
    rendered(page)
    page.locator("#next").click()
    page.wait_for_url("**/tour/dials?q=*")
    rendered(page)
    assert page.locator(".chat-ask input").input_value() == QUESTION


def test_send_in_chapter_11_writes_the_question(page, base_url):
    from urllib.parse import parse_qs, urlparse

    open_page(page, f"{base_url}/tour/dials")
    page.locator(".chat-ask input").fill("What is a KV cache?")
    page.locator(".chat-ask button").click()
    page.wait_for_function("() => location.search.includes('q=What+is+a+KV+cache')")
    assert parse_qs(urlparse(page.url).query)["q"] == ["What is a KV cache?"]
    assert page.locator('.steps a[data-step="tokens"]').get_attribute("href").endswith("?q=What+is+a+KV+cache%3F")
    assert page.locator(".bubble.you").inner_text() == "What is a KV cache?"


def test_a_link_that_cannot_be_drawn_is_resolved_on_load_and_said(page, phone, base_url):
    """/tour/parallelism?pp=2 (tensor 8 × pipeline 2 on 8 GPUs) opened to an empty stage; now it opens
    resolved as a control change would be, the URL rewritten, one line saying so."""
    open_page(page, f"{base_url}/tour/parallelism?pp=2")
    note = page.locator('.control[data-name="pp"] .link-fix')
    assert note.inner_text() == (
        "This link's settings could not be drawn together: pipeline 2 → tensor 4 so that 4 × 2 = 8 GPUs."
    )
    assert page.locator("#ctl-tp").input_value() == "4" and page.locator("#stage-status").inner_text() == ""
    assert "pp=2" in page.url and "tp=4" in page.url
    change(
        page,
        lambda: page.locator("#ctl-micro_batches").evaluate(
            "(el) => { el.value = 4; el.dispatchEvent(new Event('input', { bubbles: true })); }"
        ),
    )
    assert page.locator(".link-fix").count() == 0, "the line goes with the next change"
    open_page(phone, f"{base_url}/tour/parallelism?pp=2")  # the phone's closed dock shows that control and line
    line = phone.locator(".link-fix")
    assert line.is_visible() and line.bounding_box()["y"] + 10 <= 844


CHAPTERS = [s.slug for s in load_scenes()]


@pytest.mark.parametrize("slug", CHAPTERS[:-1])
def test_next_is_on_the_first_screen_of_every_chapter(browser, base_url, slug):
    ctx = browser.new_context(viewport={"width": 1440, "height": 900})
    ctx.set_default_navigation_timeout(180_000)  # a loaded CI box: chapters 3 and 9 run the model for the question
    pg = watch_console(ctx.new_page())
    pg.goto(f"{base_url}/tour/{slug}?q=Why+is+the+sky+blue%3F")
    rendered(pg, timeout=240_000)
    nxt = pg.locator("#next-top")
    box = nxt.bounding_box()
    assert box and box["y"] >= 0 and box["y"] + box["height"] <= 900, box
    assert nxt.get_attribute("href").endswith("?q=Why+is+the+sky+blue%3F")
    assert unexpected_errors(pg) == []
    ctx.close()


def test_the_first_tab_stop_skips_to_the_main_control(page, base_url):
    open_page(page, f"{base_url}/tour/roofline")
    page.keyboard.press("Tab")
    skip = page.locator(".skip-link")
    assert page.evaluate("() => document.activeElement.className") == "skip-link"
    assert skip.inner_text() == "Skip to the main control: Chats decoded together" and skip.is_visible()
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.activeElement?.id === 'ctl-batch'")


@pytest.mark.parametrize(("slug", "picture"), [("tokens", ".chips"), ("roofline", ".rf-point.decode")])
def test_the_phone_dock_leaves_the_picture_uncovered(phone, base_url, slug, picture):
    open_page(phone, f"{base_url}/tour/{slug}")
    phone.locator(picture).wait_for()
    pic, dock = phone.locator(picture).bounding_box(), phone.locator("#rail").bounding_box()
    assert pic["y"] + min(pic["height"], 60) <= dock["y"], f"{picture} at {pic} under the dock at {dock['y']}"


def test_the_cover_shows_the_whole_question_and_names_its_board(page, base_url):
    page.set_viewport_size({"width": 1440, "height": 900})
    open_page(page, f"{base_url}/")
    box = page.locator("#q")
    assert box.evaluate("el => el.scrollWidth <= el.clientWidth"), "the default question is cut off"
    title = page.locator(".cover-board-title").inner_text()
    assert title.startswith("Llama 3.1 70B split across 8 GPUs")
    assert "Each card is one GPU" in page.locator(".cover-server figcaption").inner_text()


def test_chapter_2_says_both_next_tokens_for_the_question(page, base_url, smollm):
    from urllib.parse import quote

    open_page(page, f"{base_url}/tour/embeddings?q={quote(QUESTION)}")
    note = page.locator(".emb-note").inner_text()
    assert "next token is “<|im_end|>” (it would end its turn here)" in note
    assert "its answer starts with “The”" in note
    # both next tokens in the readouts, side by side, each on one line at 1440 x 900 (was '45⏎% likely')
    page.set_viewport_size({"width": 1440, "height": 900})
    nxt = page.locator("#stage .readout.emb-next")
    assert nxt.count() == 2
    assert nxt.nth(0).locator(".label").inner_text().lower() == "next token, bare text"
    assert nxt.nth(0).locator(".value").inner_text().startswith("<|im_end|>")
    assert nxt.nth(1).locator(".label").inner_text().lower() == "as a chat"
    assert nxt.nth(1).locator(".value").inner_text().startswith("The")
    tops = page.evaluate("""() => [...document.querySelectorAll('#stage .readouts .readout')].map((r) => {
        const v = r.querySelector('.value').getBoundingClientRect(), u = r.querySelector('.unit')?.getBoundingClientRect();
        return [r.getBoundingClientRect().top, u ? Math.abs(u.bottom - v.bottom) : 0]; })""")
    assert len({round(t) for t, _ in tops}) == 1, f"the five readouts sit in one row: {tops}"
    assert all(gap < 12 for _, gap in tops), f"each unit on its value's line: {tops}"


def test_chapter_2_on_a_phone_shows_the_tower_before_the_note(phone, base_url, smollm):
    from urllib.parse import quote

    open_page(phone, f"{base_url}/tour/embeddings?q={quote(QUESTION)}")
    figure = phone.locator("#stage .emb-figure").bounding_box()
    note = phone.locator("#stage .emb-note").bounding_box()
    assert figure["y"] < note["y"] and figure["y"] < 844, (figure, note)
