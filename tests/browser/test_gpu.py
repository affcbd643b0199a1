"""Chapter 4 in a real Chromium: the package drawing has the GPU's real SM count, weights stream, GPU switch redraws."""

from __future__ import annotations

import re

import pytest
from pagekit import open_page

from inside_llm.sim.hardware import catalog

pytestmark = pytest.mark.browser

SM = "#stage .gpu-svg g.sm"


def sm_count(page, n):
    page.wait_for_function(f"() => document.querySelectorAll('{SM}').length === {n}")
    return page.locator(SM).count()


def test_h100_draws_132_sms_with_four_tensor_cores_and_streams_tiles(page, base_url):
    page.goto(base_url + "/tour/gpu")
    assert sm_count(page, catalog.gpu("h100-sxm").sm_count) == 132
    assert page.locator(f"{SM} rect.tc").count() == 132 * 4
    assert page.locator("#stage rect.gpu-hbm:not(.inactive)").count() == 5
    assert page.locator("#stage rect.gpu-hbm.inactive").count() == 1
    assert page.locator("#stage rect.gpu-l2").count() == 2
    readouts = page.locator("#stage .readouts").inner_text()
    assert re.search(r"17\.4\s*GB", readouts) and re.search(r"11\.5\s*ms", readouts)
    assert re.search(r"Slowed [\d,]+×", page.locator("#stage .gpu-speed").inner_text())
    # Tiles move: the same tile element is somewhere else a moment later.
    page.wait_for_function(
        "() => [...document.querySelectorAll('#stage rect.tile')].some(t => t.getAttribute('visibility') === 'visible')"
    )
    before = page.evaluate(
        "() => [...document.querySelectorAll('#stage rect.tile')].map(t => t.getAttribute('transform')).join('|')"
    )
    page.wait_for_timeout(250)
    after = page.evaluate(
        "() => [...document.querySelectorAll('#stage rect.tile')].map(t => t.getAttribute('transform')).join('|')"
    )
    assert before != after
    assert page.console_errors == []


def test_switching_gpu_redraws_its_real_layout(page, base_url):
    page.goto(base_url + "/tour/gpu")
    sm_count(page, 132)
    for gid in ("b200", "mi300x", "h200"):
        g = catalog.gpu(gid)
        page.select_option("#ctl-gpu", gid)
        assert sm_count(page, g.sm_count) == g.sm_count
        assert page.locator("#stage rect.gpu-hbm:not(.inactive)").count() == g.hbm_stacks
        assert f"gpu={gid}" in page.url
    assert page.locator("#stage rect.gpu-hbm.inactive").count() == 0  # H200: all six sites hold stacks
    assert page.console_errors == []


def test_phone_width_and_reduced_motion_keep_the_numbers(phone, base_url):
    phone.goto(base_url + "/tour/gpu?gpu=mi300x")
    sm_count(phone, 304)
    assert phone.locator("#stage .gpu-svg.gpu-narrow").count() == 1
    tile = phone.locator("#stage rect.tile").first.evaluate("t => t.getBoundingClientRect().width")
    assert tile >= 8  # was 5.5 px on a phone
    text = phone.locator("#stage .gpu-clock-text").inner_text()
    assert text.startswith("One step:") and "GB" in text and "ms" in text
    first = phone.evaluate(
        "() => [...document.querySelectorAll('#stage rect.tile')].map(t => t.getAttribute('transform')).join('|')"
    )
    phone.wait_for_timeout(300)
    assert (
        phone.evaluate(
            "() => [...document.querySelectorAll('#stage rect.tile')].map(t => t.getAttribute('transform')).join('|')"
        )
        == first
    )


def test_weight_stream_is_big_and_l2_labels_stay_readable(page, base_url):
    """Tiles are large enough to see, flow lanes mark the path, and L2 labels sit on opaque pills above the tiles."""
    page.goto(base_url + "/tour/gpu")
    sm_count(page, 132)
    page.wait_for_function(
        "() => [...document.querySelectorAll('#stage rect.tile')].some(t => t.getAttribute('visibility') === 'visible')"
    )
    tile = page.evaluate("""() => { const t = [...document.querySelectorAll('#stage rect.tile')]
      .find(t => t.getAttribute('visibility') === 'visible').getBoundingClientRect(); return [t.width, t.height]; }""")
    sm = page.locator(f"{SM} rect.sm-body").first.bounding_box()
    assert tile[0] >= 12 and tile[1] >= 12, tile  # was 8 px
    assert tile[0] >= 0.45 * sm["width"]  # a tile is a visible fraction of an SM, not a speck
    assert page.locator("#stage .gpu-lane").count() == 5  # one flow lane per active HBM stack
    flow = page.locator("#stage .gpu-flow-label").evaluate_all("els => els.map(e => e.textContent)")
    assert flow.count("weights →") == 3 and flow.count("← weights") == 2
    pills = page.evaluate("""() => [...document.querySelectorAll('#stage .gpu-l2-pill')].map(p => {
      const tiles = document.querySelector('#stage .gpu-tiles');
      const r = p.querySelector('rect'), t = p.querySelector('text');
      const rb = r.getBoundingClientRect(), tb = t.getBoundingClientRect();
      return { text: t.textContent, above: !!(tiles.compareDocumentPosition(p) & Node.DOCUMENT_POSITION_FOLLOWING),
        fill: getComputedStyle(r).fill, opacity: getComputedStyle(r).fillOpacity,
        contains: tb.left >= rb.left && tb.right <= rb.right && tb.top >= rb.top - 1 && tb.bottom <= rb.bottom + 1 };
    })""")
    assert [p["text"] for p in pills] == ["L2 cache · 25 MB"] * 2
    assert all(p["above"] and p["contains"] and p["fill"] != "none" and p["opacity"] == "1" for p in pills), pills
    assert page.console_errors == []


def test_stage_explains_the_average_rate_from_the_response(page, base_url):
    page.goto(base_url + "/tour/gpu")
    sm_count(page, 132)
    s = page.request.get(base_url + "/api/gpu").json()["stream"]
    head = page.locator("#stage .gpu-budget-head").inner_text()
    assert head.startswith(f"Why {s['effective_tb_s']:.2f} of {s['peak_tb_s']:.2f} TB/s?")
    assert f"({round(100 * s['bandwidth_share'])}% of peak)" in head
    segs = page.evaluate("""() => { const bar = document.querySelector('#stage .gpu-budget-bar').getBoundingClientRect().width;
      return [...document.querySelectorAll('#stage .gpu-budget-bar .seg')].map(e => [e.className.split(' ')[1],
        e.getBoundingClientRect().width / bar]); }""")
    kinds = [k for k, _ in segs]
    assert kinds == ["reading", "below-peak", "comm", "overhead"]  # decode of 70B on 8 GPUs: no math wait
    want = {
        "reading": s["ideal_ms"],
        "below-peak": s["memory_ms"] - s["ideal_ms"],
        "comm": s["comm_ms"],
        "overhead": s["overhead_ms"],
    }
    for k, share in segs:
        assert share == pytest.approx(want[k] / s["step_ms"], abs=0.01), k
    assert sum(share for _, share in segs) == pytest.approx(1, abs=0.01)
    keys = page.locator("#stage .gpu-budget-key .item").all_inner_texts()
    assert keys[2].endswith("all-reduces with the 7 other GPUs: HBM idle")
    # the 3 ms of launches says where it comes from (issue 28 red pen)
    assert f"({s['overhead_note']}): HBM idle" in keys[3] and "NIM 1.8" in keys[3]
    # One GPU: no all-reduce segment, and the numbers follow the response.
    page.select_option("#ctl-tp", "1")
    page.wait_for_function("() => document.querySelectorAll('#stage .gpu-budget-bar .seg.comm').length === 0")
    s1 = page.request.get(base_url + "/api/gpu?tp=1").json()["stream"]
    assert (
        page.locator("#stage .gpu-budget-head")
        .inner_text()
        .startswith(f"Why {s1['effective_tb_s']:.2f} of {s1['peak_tb_s']:.2f} TB/s?")
    )
    assert page.console_errors == []


def test_on_a_phone_no_readout_unit_breaks_over_two_lines(phone, base_url):
    """Screenshot fix: 'TB/s · peak 3.35' broke as 'peak 3.3' / '5' in a phone's readout tile (now 'TB/s of 3.35')."""
    open_page(phone, base_url + "/tour/gpu")
    lines = phone.evaluate(
        "() => [...document.querySelectorAll('#stage .readout .unit')].map((u) => [u.textContent, u.getClientRects().length])"
    )
    assert lines and all(n == 1 for _, n in lines), lines
    assert any(t == "TB/s of 3.35" for t, _ in lines), lines
