"""Embeds framed by a page on a second origin: sizing from phone to 4K without scrollbars, options, steps."""

from __future__ import annotations

import functools
import http.server
import re
import threading

import pytest
from pagekit import change, rendered
from stepping_scene import NUM_STEPS, use_stepping_scene

from inside_llm.api.registry import CHAPTER_SLUGS, CHAPTERS
from inside_llm.paths import static_dir

pytestmark = pytest.mark.browser

FRAME_SIZES = [(390, 700), (960, 540), (1280, 720), (1920, 1080), (3840, 2160)]
HOST_HTML = (
    '<!doctype html><title>slides</title><link rel="icon" href="data:,">'
    '<body style="margin:0"><iframe id="f" title="scene" style="border:0"></iframe>'
)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def second_origin(tmp_path_factory):
    """A plain static server on another port: a different origin from the app, like a slide tool."""
    root = tmp_path_factory.mktemp("host")
    (root / "host.html").write_text(HOST_HTML)
    handler = functools.partial(QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://localhost:{server.server_address[1]}"
    server.shutdown()


def framed(page, host: str, src: str, width: int, height: int):
    """Load `src` in the host page's iframe at width x height; returns the frame."""
    page.set_viewport_size({"width": max(width, 400) + 20, "height": max(height, 300) + 20})
    page.goto(host + "/host.html")
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


def settled_metrics(frame):
    frame.wait_for_function("() => document.documentElement.style.getPropertyValue('--fit') !== ''")
    frame.evaluate(NEXT_FRAMES)  # the refit after the last draw runs in the next animation frame
    return frame.evaluate(METRICS)


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
