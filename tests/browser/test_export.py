"""In the browser: Share/Embed copy the right text, SVG/PNG downloads are valid images with a caption, and
the `inside-llm export` bundle works opened from disk (file://) with no server and no network."""

from __future__ import annotations

import re
import struct
import xml.etree.ElementTree as ET

import pytest
from pagekit import change, rendered, unexpected_errors, watch_console

from inside_llm.api.registry import CHAPTER_SLUGS
from inside_llm.export import export_bundle

pytestmark = pytest.mark.browser
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture()
def clip_page(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 860}, accept_downloads=True)
    ctx.grant_permissions(["clipboard-read", "clipboard-write"])
    pg = watch_console(ctx.new_page())
    yield pg
    errors = unexpected_errors(pg)
    ctx.close()
    assert errors == [], f"console errors: {errors}"


def download(page, tool: str) -> tuple[str, bytes]:
    with page.expect_download() as d:
        page.click(f'.stage-tools [data-tool="{tool}"]')
    return d.value.suggested_filename, open(d.value.path(), "rb").read()


def test_svg_download_is_the_stage_with_a_caption(clip_page, base_url):
    page = clip_page
    page.goto(f"{base_url}/tour/tokens?encoding=llama3")
    page.wait_for_selector(".chip")
    name, data = download(page, "svg")
    assert name == "inside-llm-01-tokens.svg"
    root = ET.fromstring(data)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    text = "".join(root.itertext())
    assert "1. From keystroke to tokens" in text and "Llama 3 (Meta)" in text, "caption names scene and params"
    assert root.find("{http://www.w3.org/2000/svg}foreignObject") is not None, "HTML stage kept as HTML"
    assert "Words per token" in text and "GPU" in text
    w = float(root.get("width"))
    assert abs(w - page.locator("#stage").bounding_box()["width"]) <= 1
    assert page.console_errors == []


SVG_SCENE = """
// svg-only scene (test double): a bar chart in viewBox units coloured with the theme's variables.
export function mount(stage) { stage.replaceChildren(); }
export function update(data) {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', '0 0 400 200');
  svg.setAttribute('width', '100%');
  const bar = document.createElementNS(ns, 'rect');
  Object.entries({ x: 10, y: 20, width: 300, height: 60, style: 'fill: var(--c-kv)' }).forEach(([k, v]) => bar.setAttribute(k, v));
  const label = document.createElementNS(ns, 'text');
  Object.entries({ x: 10, y: 120 }).forEach(([k, v]) => label.setAttribute(k, v));
  label.textContent = `${data.num_tokens} tokens`;
  svg.append(bar, label);
  document.getElementById('stage').appendChild(svg);
}
export function unmount() {}
"""


def test_svg_only_stage_downloads_as_pure_vector(clip_page, base_url):
    page = clip_page
    page.route(
        "**/static/js/scenes/tokens.js",
        lambda route: route.fulfill(status=200, body=SVG_SCENE, content_type="text/javascript"),
    )
    page.goto(f"{base_url}/tour/tokens")
    page.wait_for_selector("#stage svg text")
    _, data = download(page, "svg")
    root = ET.fromstring(data)
    ns = {"s": "http://www.w3.org/2000/svg"}
    assert root.find(".//s:foreignObject", ns) is None, "vector stages stay vector (opens in slide tools)"
    rect = next(r for r in root.iterfind(".//s:svg/s:rect", ns))
    assert "fill:rgb(142, 92, 240)" in rect.get("style").replace(" ", "").replace(",", ", "), "theme colour resolved"
    assert "23 tokens" in "".join(root.itertext()) and "From keystroke to tokens" in "".join(root.itertext())
    _, png = download(page, "png")
    assert png[:8] == PNG_MAGIC


def test_png_download_is_high_resolution(clip_page, base_url):
    page = clip_page
    page.goto(f"{base_url}/tour/tokens")
    page.wait_for_selector(".chip")
    box = page.locator("#stage").bounding_box()
    name, data = download(page, "png")
    assert name.endswith(".png") and data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 2 * box["width"] - 2, "at least 2x the on-screen size"
    assert abs(height / width - (box["height"] + 46) / box["width"]) < 0.01, "stage plus caption band"
    assert len(data) > 20_000, "a real picture, not a blank canvas"
    assert page.locator("#stage-status").inner_text() == ""


def test_share_copies_the_exact_state_url(clip_page, base_url):
    page = clip_page
    page.goto(f"{base_url}/tour/tokens")
    page.wait_for_selector(".chip")
    page.locator("#ctl-encoding").select_option("llama3")
    page.get_by_role("button", name=re.compile("^Share")).click()
    page.wait_for_selector(".tool-panel .tool-note:has-text('Copied')")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == page.url and copied.startswith(base_url) and "encoding=llama3" in copied
    page.keyboard.press("Escape")
    assert page.locator("#tool-panel").is_hidden()


def test_embed_snippet_has_chosen_size_and_options(clip_page, base_url):
    page = clip_page
    page.goto(f"{base_url}/tour/tokens?encoding=llama3")
    page.wait_for_selector(".chip")
    embed = page.get_by_role("button", name=re.compile("^Embed"))
    embed.click()
    assert embed.get_attribute("aria-expanded") == "true"
    page.get_by_label("Frame size").select_option("1920x1080")
    page.get_by_label("Show controls").check()
    page.get_by_label("Theme", exact=True).select_option("dark")
    snippet = page.locator(".tool-panel textarea.snippet").input_value()
    assert f'src="{base_url}/embed/tokens?encoding=llama3&amp;controls=1&amp;autoplay=1&amp;theme=dark"' in snippet
    assert 'width="1920" height="1080"' in snippet and snippet.startswith("<iframe")
    page.get_by_role("button", name="Copy snippet").click()
    page.wait_for_selector(".tool-panel .tool-note:has-text('Copied')")
    assert page.evaluate("navigator.clipboard.readText()") == snippet
    page.get_by_role("button", name="Close").click()
    assert page.locator("#tool-panel").is_hidden() and embed.get_attribute("aria-expanded") == "false"


def test_every_chapter_downloads_as_svg_and_png(clip_page, base_url):
    page = clip_page
    for slug in CHAPTER_SLUGS:
        page.goto(f"{base_url}/tour/{slug}")
        page.wait_for_function(
            "() => document.querySelector('#stage')?.children.length > 0 && "
            "!document.querySelector('#stage')?.hasAttribute('aria-busy')"
        )
        _, svg = download(page, "svg")
        root = ET.fromstring(svg)
        assert root.tag.endswith("svg") and "Inside LLM Inference" in "".join(root.itertext()), slug
        _, png = download(page, "png")
        assert png[:8] == PNG_MAGIC and struct.unpack(">I", png[16:20])[0] >= 2 * 300, slug
        assert page.locator("#stage-status").inner_text() == "", slug
    assert page.console_errors == []


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle")
    assert export_bundle(out, ["tokens", "embeddings", "roofline"]) == 0
    return out


@pytest.fixture()
def offline_page(browser):
    """A page that may only read files: every http(s) request is refused and recorded."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 860}, accept_downloads=True)
    pg = ctx.new_page()
    pg.network = []
    ctx.route(re.compile(r"^https?://"), lambda route: (pg.network.append(route.request.url), route.abort()))
    watch_console(pg)
    yield pg
    errors = unexpected_errors(pg)
    ctx.close()
    assert errors == [], f"console errors: {errors}"


def test_bundle_tour_works_from_disk(offline_page, bundle_dir):
    page = offline_page
    page.goto((bundle_dir / "index.html").as_uri())
    page.get_by_role("link", name=re.compile("Start the tour")).click()
    page.wait_for_selector(".chip")
    assert page.url.startswith("file://") and page.url.endswith("/tour/tokens.html")
    page.locator(".preset", has_text="Code").click()
    page.wait_for_function("() => [...document.querySelectorAll('.chip')].some(c => c.textContent.includes('fib'))")
    assert "text=def" in page.url and "q=" not in page.url, "a preset keeps its own parameter, never the question"
    page.locator("#ctl-encoding").select_option("llama3")  # with the Code text: a combination not precomputed
    page.wait_for_function("() => document.getElementById('stage-status').textContent.includes('live server')")
    assert "encoding" not in page.url, "the address keeps the last state that drew"
    page.locator("#ctl-text").fill("words nobody precomputed")
    page.wait_for_function("() => document.getElementById('stage-status').textContent.includes('live server')")
    page.evaluate("document.activeElement.blur()")
    page.keyboard.press("ArrowRight")
    page.wait_for_url(re.compile(r"/tour/embeddings\.html"))  # the next chapter, offline
    assert "q=def" not in page.url, "a preset's text is not the question, so it does not travel"
    assert page.locator("#scene-title").inner_text()
    assert page.network == [] and page.console_errors == []


def test_bundle_embed_and_presenter_work_from_disk(offline_page, bundle_dir):
    page = offline_page
    page.goto((bundle_dir / "embed" / "tokens.html").as_uri() + "?controls=1&theme=dark&encoding=llama3")
    page.wait_for_selector(".chip")
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    assert page.locator("#ctl-encoding").input_value() == "llama3" and page.locator("#ctl-text").is_visible()
    page.goto((bundle_dir / "tour" / "tokens.html").as_uri() + "?present=1")
    page.wait_for_selector(".presenter-hud")
    page.wait_for_selector(".chip")
    page.keyboard.press("ArrowRight")
    page.wait_for_selector('#stage[data-slug="embeddings"]')
    page.wait_for_function("() => document.querySelector('.presenter-label')?.textContent.startsWith('2/11')")
    assert page.evaluate("document.body.classList.contains('presenting')")
    assert page.network == [] and page.console_errors == []


def test_bundle_png_download_works_from_disk(offline_page, bundle_dir):
    page = offline_page
    page.goto((bundle_dir / "tour" / "tokens.html").as_uri())
    page.wait_for_selector(".chip")
    with page.expect_download() as d:
        page.click('.stage-tools [data-tool="png"]')
    assert open(d.value.path(), "rb").read()[:8] == PNG_MAGIC


def test_bundle_of_every_chapter_draws_from_disk(offline_page, tmp_path):
    """Each chapter with a stage, exported together, draws offline with its own styles and no network."""
    slugs = list(CHAPTER_SLUGS)
    assert export_bundle(tmp_path, slugs) == 0
    page = offline_page
    for slug in slugs:
        for kind in ("tour", "embed"):
            page.goto((tmp_path / kind / f"{slug}.html").as_uri())
            page.wait_for_function(
                "() => document.querySelector('#stage')?.children.length > 0 && "
                "!document.querySelector('#stage')?.hasAttribute('aria-busy')"
            )
            assert page.locator("#stage .building").count() == 0, f"{kind}/{slug}: no live stage offline"
            assert page.locator("#stage-status").inner_text() == "", f"{kind}/{slug}"
    assert page.network == [] and page.console_errors == []


@pytest.fixture(scope="module")
def computed_bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("computed")
    assert export_bundle(out, ["speculative", "dials"], ["Why is the sky blue?"]) == 0
    return out


def _slide(page, name: str, value: str) -> None:
    page.locator(f"#ctl-{name}").evaluate(
        "(el, v) => { el.value = v; el.dispatchEvent(new Event('input', { bubbles: true })); }", value
    )


def test_offline_the_page_computes_closed_forms_and_says_what_needs_the_server(offline_page, computed_bundle):
    page = offline_page
    page.goto((computed_bundle / "tour" / "speculative.html").as_uri())
    rendered(page)
    change(page, lambda: _slide(page, "alpha", "0.5"))  # alpha: a closed formula, no server needed
    assert page.locator("#stage-status").inner_text() == ""
    assert "alpha=0.5" in page.url
    change(page, lambda: _slide(page, "cost_ratio", "0.3"))  # and c, on top of it
    assert "cost_ratio=0.3" in page.url and page.locator("#stage-status").inner_text() == ""
    page.goto((computed_bundle / "tour" / "dials.html").as_uri())
    rendered(page)
    value = "() => document.querySelector('.readout[data-key=\"cost_per_million_tokens_usd\"] .value .n').textContent"
    cost = float(re.findall(r"[\d.]+", page.evaluate(value))[-1])
    change(page, lambda: _slide(page, "price_per_gpu_hour", "6"))  # the price multiplies
    page.wait_for_function(
        f"() => {{ const t = ({value})().match(/[\\d.]+/g) || []; return t.length === 1 && "
        f"Math.abs(Number(t[0]) - {2 * cost}) < {0.02 * cost}; }}"
    )
    # the chat plays the answer recorded at export for the default question, and for the --question (its q)
    done = "() => /^(\\d+) of \\1 tokens/.test(document.querySelector('.chat-foot')?.textContent || '')"
    page.wait_for_function(done, timeout=60_000)
    assert page.locator(".answer-text").inner_text().strip()
    how = page.locator(".chat-how").evaluate("el => el.textContent")
    assert "recorded when this copy was exported" in how and "Repetition penalty 1.1" in how
    page.goto((computed_bundle / "tour" / "dials.html").as_uri() + "?q=Why+is+the+sky+blue%3F")
    rendered(page)
    assert page.locator(".chat-ask input").input_value() == "Why is the sky blue?"
    page.wait_for_function(done, timeout=60_000)
    page.locator(".chat-ask input").fill("Something never exported?")
    page.locator(".chat-ask button").click()
    page.locator(".chat-foot").filter(has_text="needs the live server").wait_for()
    index = (computed_bundle / "index.html").read_text()
    assert "tour/speculative.html?q=Why+is+the+sky+blue%3F" in index
    assert page.network == []
