"""Embeds framed by a page on a second origin: sizing from phone to 4K without scrollbars, options, steps; framed
the way blogs (sandboxed, opaque origin) and decks opened from disk (file://) frame them."""

from __future__ import annotations

import functools
import http.server
import re
import threading

import pytest
from pagekit import change, js_num, rendered, settled
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from stepping_scene import NUM_STEPS, use_stepping_scene

from inside_llm.api.registry import CHAPTER_SLUGS, CHAPTERS
from inside_llm.paths import static_dir

pytestmark = pytest.mark.browser

FRAME_SIZES = [(390, 700), (960, 540), (1280, 720), (1920, 1080), (3840, 2160)]
HOST_HTML = (
    '<!doctype html><title>slides</title><link rel="icon" href="data:,">'
    '<body style="margin:0"><iframe id="f" title="scene" style="border:0"></iframe>'
)


# How WordPress frames every oEmbed it discovers: scripts allowed, no allow-same-origin, so the embed's
# origin is opaque ("null") and its modules and fetches are cross-origin requests.
SANDBOXED_HTML = HOST_HTML.replace('<iframe id="f"', '<iframe id="f" sandbox="allow-scripts"')


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def second_origin(tmp_path_factory):
    """A plain static server on another port: a different origin from the app, like a slide tool."""
    root = tmp_path_factory.mktemp("host")
    (root / "host.html").write_text(HOST_HTML)
    (root / "sandboxed.html").write_text(SANDBOXED_HTML)
    handler = functools.partial(QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://localhost:{server.server_address[1]}"
    server.shutdown()


def framed(page, host: str, src: str, width: int, height: int, host_page: str = "host.html"):
    """Load `src` in the host page's iframe at width x height; returns the frame."""
    page.set_viewport_size({"width": max(width, 400) + 20, "height": max(height, 300) + 20})
    page.goto(f"{host}/{host_page}")
    page.evaluate(
        "([src, w, h]) => { const f = document.getElementById('f'); f.width = w; f.height = h; f.src = src; }",
        [src, width, height],
    )
    page.wait_for_function("() => document.getElementById('f').contentWindow && frames.length === 1")
    frame = page.frame_locator("#f")
    frame.locator("#stage > *").first.wait_for()
    return next(f for f in page.frames if f.url.startswith(src.split("?")[0]))


METRICS = """() => {
  const d = document.documentElement, s = document.getElementById('stage');
  return {docW: d.scrollWidth, docCW: d.clientWidth, docH: d.scrollHeight, docCH: d.clientHeight,
          stageH: s.scrollHeight, stageCH: s.clientHeight, stageW: s.scrollWidth, stageCW: s.clientWidth,
          font: parseFloat(getComputedStyle(d).fontSize), scroll: s.classList.contains('fit-scroll'),
          fit: d.style.getPropertyValue('--fit'), innerW: innerWidth, innerH: innerHeight};
}"""


NEXT_FRAMES = "() => new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(() => ok(true))))"


FITTED = f"""() => {{
  const m = ({METRICS})();
  return m.docW <= m.docCW && m.docH <= m.docCH && m.stageW <= m.stageCW + 1 && m.stageH <= m.stageCH + 1 && m;
}}"""


def settled_metrics(frame, settle_ms: float = 20_000):
    """The frame's metrics once its fit has settled: the refit after a draw runs in a later animation frame, and a
    scene still stepping (chapter 9 writes its checks one by one) grows a frame before each refit. So wait, up to
    settle_ms, for a frame in which the content fits, and return that frame's own metrics (read in the same
    evaluation: a later read can land on the next growth); a stage that never fits returns its overflow."""
    frame.wait_for_function("() => document.documentElement.style.getPropertyValue('--fit') !== ''")
    frame.evaluate(NEXT_FRAMES)
    try:
        return frame.wait_for_function(FITTED, timeout=settle_ms).json_value()
    except PlaywrightTimeoutError:
        return frame.evaluate(METRICS)  # the caller's assertion says what overflows


def assert_no_scrollbars(m, label):
    assert m["docW"] <= m["docCW"] and m["docH"] <= m["docCH"], f"{label}: page scrolls {m}"
    assert m["stageW"] <= m["stageCW"] + 1 and m["stageH"] <= m["stageCH"] + 1, f"{label}: stage scrolls {m}"
    assert not m["scroll"], f"{label}: had to fall back to a scrolling stage {m}"


@pytest.mark.parametrize("query", ["", "controls=1"])
def test_embed_fills_frames_from_phone_to_4k_without_scrollbars(page, base_url, second_origin, query):
    fonts = {}
    for w, h in FRAME_SIZES:
        frame = framed(page, second_origin, f"{base_url}/embed/tokens?{query}", w, h)
        frame.wait_for_selector(".chip")
        m = settled_metrics(frame)
        assert (m["innerW"], m["innerH"]) == (w, h)
        assert_no_scrollbars(m, f"{w}x{h} {query}")
        fonts[(w, h)] = m["font"]
        if query:
            assert frame.locator("#ctl-text").is_visible()
    assert fonts[(3840, 2160)] > 2 * fonts[(1280, 720)] > 2 * 14, "type grows with the frame (4K projector)"
    assert fonts[(390, 700)] >= 0.45 * 14
    assert page.console_errors == []


def test_embed_is_framable_cross_origin_but_the_tour_is_not(page, base_url, second_origin):
    frame = framed(page, second_origin, f"{base_url}/embed/tokens", 960, 540)
    assert frame.url.startswith(base_url) and not page.url.startswith(base_url)
    frame.wait_for_selector(".chip")
    page.allowed_errors.append("frame-ancestors")
    with page.expect_event("framenavigated", predicate=lambda f: f.parent_frame and not f.url.startswith(base_url)):
        page.evaluate("(src) => { document.getElementById('f').src = src; }", f"{base_url}/tour/tokens")
    assert not page.frames[1].url.startswith(base_url), "the tour refused to be framed by another origin"
    assert any("frame-ancestors" in e for e in page.console_errors)


def test_scale_and_size_options_enlarge_type(page, base_url):
    sizes = {}
    page.set_viewport_size({"width": 1280, "height": 720})
    for q in ("", "scale=1.5", "size=xl"):
        page.goto(f"{base_url}/embed/tokens?{q}")
        page.wait_for_selector(".chip")
        sizes[q] = page.evaluate("() => parseFloat(getComputedStyle(document.documentElement).fontSize)")
        assert_no_scrollbars(settled_metrics(page.main_frame), q)
    assert sizes["scale=1.5"] > 1.2 * sizes[""] and sizes["size=xl"] > 1.2 * sizes[""]


def test_theme_and_controls_options(page, base_url):
    page.goto(f"{base_url}/embed/tokens?theme=dark&controls=0")
    page.wait_for_selector(".chip")
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    assert not page.locator("#ctl-text").is_visible()
    bg = page.evaluate("getComputedStyle(document.body).backgroundColor")
    page.goto(f"{base_url}/embed/tokens?theme=light&controls=1&encoding=llama3")
    page.wait_for_selector(".chip")
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") != bg
    assert page.locator("#ctl-encoding").input_value() == "llama3"
    change(page, lambda: page.locator("#ctl-encoding").select_option("cl100k_base"))  # the URL follows the draw
    assert "encoding" not in page.url and "controls=1" in page.url and "theme=light" in page.url


def test_step_option_freezes_a_stepping_scene(page, base_url):
    use_stepping_scene(page)
    page.goto(f"{base_url}/embed/tokens?step=2")
    page.wait_for_selector("#stepping")
    page.wait_for_function("() => window.__stepping?.shown.length > 0")
    log = page.evaluate("window.__stepping")
    assert log["mounts"] == [{"autoplay": "0", "embed": True}], "a frozen step tells the scene not to animate"
    assert log["shown"][-1] == 2 and page.locator("#stepping").inner_text() == "step 2"
    page.goto(f"{base_url}/embed/tokens?step=last")
    page.wait_for_function("() => window.__stepping?.shown.length > 0")
    assert page.evaluate("window.__stepping.shown.at(-1)") == NUM_STEPS - 1
    page.goto(f"{base_url}/embed/tokens?step=99")
    page.wait_for_function("() => window.__stepping?.shown.length > 0")
    assert page.evaluate("window.__stepping.shown.at(-1)") == NUM_STEPS - 1, "clamped to the last step"
    page.goto(f"{base_url}/embed/tokens?autoplay=1")
    page.wait_for_function("() => window.__stepping?.updates > 0")
    assert page.evaluate("window.__stepping") | {"updates": 0} == {
        "mounts": [{"autoplay": "1", "embed": True}],
        "updates": 0,
        "shown": [],
    }


def test_arrow_keys_step_inside_an_embed(page, base_url):
    use_stepping_scene(page)
    page.goto(f"{base_url}/embed/tokens?step=0")
    page.wait_for_function("() => window.__stepping?.shown.length > 0")
    page.locator("body").focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    page.wait_for_url(re.compile(r"step=2"))
    assert page.locator("#stepping").inner_text() == "step 2" and "/embed/tokens" in page.url
    page.keyboard.press("ArrowLeft")
    page.wait_for_url(re.compile(r"step=1"))


def _stepping_chapters() -> list[str]:
    """Chapters whose scene module implements the optional step contract."""
    found = []
    for js in sorted((static_dir() / "js" / "scenes").glob("*.js")):
        src = js.read_text(encoding="utf-8")
        if js.stem in CHAPTERS and "export function showStep" in src and "export function numSteps" in src:
            found.append(js.stem)
    return found


def test_real_stepping_scenes_hold_still_at_a_step(page, base_url):
    """For each chapter that adopted numSteps/showStep: ?step=1 draws a still frame."""
    for slug in _stepping_chapters():
        page.goto(f"{base_url}/embed/{slug}?step=1")
        page.wait_for_function("() => document.querySelector('#stage')?.children.length > 0")
        page.wait_for_load_state("networkidle", timeout=60000)  # late panels (CPU measurements) have landed
        rendered(page)
        page.evaluate(NEXT_FRAMES)
        first = page.locator("#stage").screenshot(animations="allow")
        page.wait_for_timeout(700)  # this test is about time: the same picture 0.7 s later
        assert page.locator("#stage").screenshot(animations="allow") == first, f"{slug} still moves at step=1"
    assert page.console_errors == []


def test_every_chapter_embeds_in_a_slide_frame(page, base_url):
    """Each chapter's embed at 16:9 and phone sizes: a stage, no page scrollbars, no console errors."""
    for slug in CHAPTER_SLUGS:
        for w, h in ((960, 540), (390, 700)):
            page.set_viewport_size({"width": w, "height": h})
            page.goto(f"{base_url}/embed/{slug}")
            page.wait_for_function(
                "() => document.querySelector('#stage')?.children.length > 0 && "
                "!document.querySelector('#stage')?.hasAttribute('aria-busy')"
            )
            page.wait_for_load_state("networkidle", timeout=60000)  # late panels have landed
            m = settled_metrics(page.main_frame)
            # 16:9 and phone frames: every scene fits without falling back to a scrolling stage
            assert_no_scrollbars(m, f"{slug} {w}x{h}")
            assert page.locator("#stage .building").count() == 0, f"{slug}: no live stage"
    assert page.console_errors == []


def test_every_embed_settles_on_one_fit(page, base_url):
    """The fit factor must settle: a scene whose drawn height lags its width can make the frame refit forever."""
    page.set_viewport_size({"width": 1280, "height": 860})
    for slug in CHAPTER_SLUGS:
        page.goto(f"{base_url}/embed/{slug}?step=1")
        page.wait_for_load_state("networkidle", timeout=60000)
        rendered(page)
        page.evaluate(NEXT_FRAMES)
        fits = set()
        for _ in range(10):  # 2.5 s: a refit loop flips every second or so
            fits.add(page.evaluate("() => getComputedStyle(document.documentElement).getPropertyValue('--fit')"))
            page.wait_for_timeout(250)  # about time: a refit loop shows only over seconds
        assert len(fits) == 1, f"{slug}: the fit keeps changing {sorted(fits)}"
    assert page.console_errors == []


# What each chapter's stage draws from its own data: (JavaScript read in the frame, the value the chapter's
# /api/<slug> at its defaults says it must be). Counts and labels, so a blank or wrong stage fails.
DRAWN = {
    "tokens": ("document.querySelectorAll('#stage .chip').length", lambda d: d["num_tokens"]),
    "embeddings": (
        "document.querySelectorAll('#stage .emb-token').length + ' tokens, ' + "
        "document.querySelectorAll('#stage g.emb-floor').length + ' floors'",
        lambda d: f"{d['num_tokens']} tokens, {len(d['drawn_floors'])} floors",
    ),
    "layer": ("document.querySelectorAll('#stage g.ly-thumb').length", lambda d: len(d["heads"])),
    "gpu": ("document.querySelectorAll('#stage .gpu-svg g.sm').length", lambda d: d["layout"]["sm_count"]),
    "roofline": (
        "document.querySelector('#stage text.rf-ridge-label')?.textContent",
        lambda d: f"ridge · {js_num(d['roof']['ridge_flops_per_byte'])} FLOP/byte",
    ),
    "kv-cache": ("document.querySelectorAll('#stage .kv-panel').length", lambda d: len(d["drawn"])),
    "batching": (
        "document.querySelectorAll('#stage .bt-svg g[data-policy] .bt-lane').length",
        lambda d: len(d["policies"]) * d["params"]["seats"],
    ),
    "quantization": ("document.querySelectorAll('#stage .q-size').length", lambda d: len(d["rows"])),
    "speculative": (
        "(document.querySelector('#stage .sp-pass-label')?.textContent || '').replace(/^Pass \\d+ /, 'Pass k ')",
        lambda d: f"Pass k of {len(d['demo']['frames'])}",
    ),
    "parallelism": ("document.querySelectorAll('#stage .par-svg .gpu').length", lambda d: d["gpus"]),
    "dials": (
        "document.querySelector('#stage .readout[data-key=\"ttft_ms\"] .visually-hidden')?.textContent",
        lambda d: f"{js_num(d['ttft_ms'])} ms",
    ),
}


def assert_drew_its_own(frame, page, base_url, slug):
    """Wait until the frame's stage shows what /api/<slug> says it must (or time out saying what it showed)."""
    js, expect = DRAWN[slug]
    want = expect(page.request.get(f"{base_url}/api/{slug}").json())
    try:
        frame.wait_for_function(f"(want) => ({js}) === want", arg=want, timeout=30_000)
    except Exception as exc:  # say what was drawn instead
        raise AssertionError(f"{slug}: drew {frame.evaluate('() => ' + js)!r}, its data says {want!r}") from exc


def test_drawn_table_covers_every_chapter():
    assert sorted(DRAWN) == sorted(CHAPTER_SLUGS)


def test_every_chapter_draws_sandboxed_on_another_origin(page, base_url, second_origin):
    """WordPress's frame (sandbox="allow-scripts", an opaque origin, on another host): every chapter's modules
    and data load cross-origin (Access-Control-Allow-Origin: *) and its stage draws its own counts and labels."""
    for slug in CHAPTER_SLUGS:
        frame = framed(page, second_origin, f"{base_url}/embed/{slug}", 960, 540, "sandboxed.html")
        assert frame.evaluate("() => self.origin") == "null", "the frame runs with an opaque origin"
        rendered(frame)
        assert frame.locator("#stage .building").count() == 0, f"{slug}: no live stage"
        assert_drew_its_own(frame, page, base_url, slug)
    assert page.console_errors == []


def test_a_deck_opened_from_disk_frames_a_live_embed(page, base_url, tmp_path):
    """A reveal.js-style deck opened as file://: frame-ancestors admits file:, so the live embed draws in it."""
    deck = tmp_path / "deck.html"
    deck.write_text(
        '<!doctype html><title>deck</title><link rel="icon" href="data:,"><body style="margin:0">'
        f'<section><iframe id="f" src="{base_url}/embed/roofline" width="960" height="540" style="border:0">'
        "</iframe></section>"
    )
    page.set_viewport_size({"width": 1000, "height": 600})
    page.goto(deck.as_uri())
    page.wait_for_function("() => frames.length === 1")
    frame = next(f for f in page.frames if f.url.startswith(f"{base_url}/embed/roofline"))
    rendered(frame)
    assert_drew_its_own(frame, page, base_url, "roofline")
    assert page.console_errors == []


@pytest.mark.parametrize("slug", ["layer", "quantization"])
def test_size_xl_grows_type_and_still_fits_a_slide(page, base_url, slug):
    """size=xl in a 960x540 frame: larger type than size=m, and nothing clipped or scrolled (the drawing shrinks)."""
    page.set_viewport_size({"width": 960, "height": 540})
    fonts = {}
    for q in ("", "size=xl"):
        page.goto(f"{base_url}/embed/{slug}?{q}")
        rendered(page)
        settled(page, "() => document.documentElement.style.getPropertyValue('--fit')")
        m = settled_metrics(page.main_frame)
        assert_no_scrollbars(m, f"{slug} {q or 'size=m'}")
        fonts[q] = m["font"]
    assert fonts["size=xl"] > fonts[""], f"{slug}: size=xl type {fonts}"
    assert page.console_errors == []
