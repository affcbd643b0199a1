"""Chapter 10 in Chromium: the HGX board draws, pulses travel, controls redraw the split, no console errors."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.browser


def test_board_draws_eight_gpus_four_switches_and_traffic(page, base_url):
    page.goto(base_url + "/tour/parallelism")
    page.wait_for_selector(".par-svg .gpu-box")
    assert page.locator(".par-svg .gpu").count() == 8
    assert page.locator(".par-svg .switch").count() == 4
    assert page.locator(".par-svg .link").count() == 32
    page.wait_for_function(
        "() => document.querySelectorAll('.par-svg .pulse.tp[visibility=\"visible\"]').length > 0", timeout=8000
    )
    readouts = page.locator(".readouts").inner_text()
    assert re.search(r"WEIGHTS PER GPU\s*17\.6", readouts, re.I) and "yes" in readouts
    assert "Tensor parallel ×8" in page.locator(".par-cards").inner_text()
    assert page.console_errors == []


def test_pipeline_control_draws_stages_and_bubbles(page, base_url):
    page.goto(base_url + "/tour/parallelism")
    page.wait_for_selector(".par-svg .gpu-box")
    page.select_option("#ctl-tp", "1")
    page.select_option("#ctl-pp", "8")
    page.wait_for_selector(".tl-svg .cell.idle")
    assert "pp=8" in page.url and "tp=1" in page.url
    assert page.locator(".tl-svg .cell.busy").count() == 8 * 8 + 1  # 64 cells + the legend swatch
    assert page.locator(".tl-svg .cell.idle").count() == 7 * 8 + 1  # the bubble + the legend swatch
    assert "layers 1–10" in page.locator(".par-board").inner_text()
    assert "47%" in page.locator(".readouts").inner_text()
    page.wait_for_function(
        "() => document.querySelectorAll('.par-svg .pulse.pp[visibility=\"visible\"]').length > 0", timeout=8000
    )
    assert page.console_errors == []


def test_one_gpu_does_not_fit_and_an_invalid_split_says_why(page, base_url):
    page.goto(base_url + "/tour/parallelism?tp=1&pp=1&gpus=1")
    page.wait_for_selector(".par-svg .gpu-box")
    assert "no" in page.locator(".readout.bad").inner_text()
    assert page.locator(".par-svg .gpu.unused").count() == 7
    assert page.locator(".par-svg .mem.over").count() == 1
    page.allowed_errors.append(r"status of 422")  # the refused split, on purpose
    page.select_option("#ctl-pp", "2")
    page.wait_for_function("() => document.querySelector('#stage-status')?.textContent.includes('divide')")
    assert page.console_errors == [] or all("422" in e for e in page.console_errors)


def test_still_picture_for_reduced_motion(phone, base_url):
    phone.goto(base_url + "/tour/parallelism?tp=4&pp=2&micro_batches=4")
    phone.wait_for_selector(".tl-svg .cell.busy")
    assert phone.locator(".par-svg.narrow").count() == 1
    assert phone.locator(".par-svg .pulse.tp[visibility='visible']").count() > 0  # traffic drawn, not animated
    assert phone.locator(".par-caption").inner_text()


LAYER = """() => {
  const svg = document.querySelector('#stage .par-layer-svg');
  const block = (k) => [...svg.querySelectorAll(`.ly-block.${k} .ly-slice`)].map(r => ({
    x: +r.getAttribute('x'), w: +r.getAttribute('width'), cls: r.getAttribute('class'), fill: getComputedStyle(r).fill }));
  const marks = [...document.querySelectorAll('#stage .par-svg .slice-mark')].map(r => getComputedStyle(r).fill);
  const pulses = [...document.querySelectorAll('#stage .par-svg .pulse')].filter(p => p.getAttribute('visibility') === 'visible');
  return { cut: svg.classList.contains('cut'), attention: block('attention'), mlp: block('mlp'), marks,
    pulses: pulses.length, pulseClasses: [...new Set(pulses.map(p => p.getAttribute('class')))].sort(),
    bytes: [...document.querySelectorAll('#stage .sw-bytes')].filter(t => t.getAttribute('visibility') === 'visible').map(t => t.textContent),
    busy: document.querySelectorAll('#stage .par-svg .gpu-box.busy').length,
    caption: document.querySelector('#stage .par-caption').textContent };
}"""


def beat(page, base_url, query, step):
    page.goto(f"{base_url}/tour/parallelism?{query}&step={step}")
    page.wait_for_selector("#stage .par-layer-svg .ly-slice")
    page.wait_for_function("() => document.querySelector('#stage .par-caption')?.textContent.length > 0")
    return page.evaluate(LAYER)


def test_one_layer_is_cut_into_eight_slices_one_per_gpu(page, base_url):
    d = page.request.get(base_url + "/api/parallelism").json()
    ly, tp = d["layer"], d["tp"]
    whole = beat(page, base_url, "tp=8", 0)
    assert not whole["cut"] and whole["caption"].startswith("One layer of 80: 1.71 GB of weights")
    # Whole: the slices touch (one matrix); cut: 8 equal slices per block with gaps, coloured like their GPU.
    assert all(b["x"] + b["w"] == pytest.approx(a["x"], abs=0.2) for b, a in zip(whole["mlp"], whole["mlp"][1:]))
    cut = beat(page, base_url, "tp=8", 1)
    assert cut["cut"] and len(cut["attention"]) == len(cut["mlp"]) == tp == 8
    for block in ("attention", "mlp"):
        s = cut[block]
        assert len({round(r["w"], 1) for r in s}) == 1 and all(b["x"] > a["x"] + a["w"] for a, b in zip(s, s[1:]))
        assert [r["cls"].split()[1] for r in s] == [f"g-{k}" for k in range(8)]
    assert [r["fill"] for r in cut["mlp"]] == cut["marks"]  # GPU k's stripe is slice k's colour
    assert len(set(cut["marks"])) == 8
    span = lambda s: s[-1]["x"] + s[-1]["w"] - s[0]["x"]  # noqa: E731
    assert span(cut["mlp"]) / span(cut["attention"]) == pytest.approx(
        ly["mlp_params"] / ly["attention_params"], rel=0.03
    )
    assert "8 slices of 214 MB" in page.locator("#stage .par-layer-svg .ly-note").text_content()
    assert page.console_errors == []


def test_all_reduce_bytes_travel_through_the_four_switches(page, base_url):
    d = page.request.get(base_url + "/api/parallelism").json()
    per_switch = d["prefill"]["tensor"]["sent_bytes_per_gpu_per_layer"] / 2 / 4
    compute = beat(page, base_url, "tp=8", 2)
    assert compute["busy"] == 8 and compute["pulses"] == 0 and compute["bytes"] == []
    assert all("active" in r["cls"] for r in compute["attention"]) and not any(
        "active" in r["cls"] for r in compute["mlp"]
    )
    up = beat(page, base_url, "tp=8", 3)
    assert up["pulses"] == 8 * 4 and up["busy"] == 0  # every GPU to every switch
    assert up["pulseClasses"] == sorted(f"pulse tp g-{k}" for k in range(8))  # each GPU's own partial result
    assert up["bytes"] == [f"8 × {per_switch / 1e6:.0f} MB"] * 4 == ["8 × 117 MB"] * 4
    assert "each GPU sends 470 MB through the 4 NVSwitches (117 MB through each)" in up["caption"]
    back = beat(page, base_url, "tp=8", 4)
    assert back["pulses"] == 32 and back["pulseClasses"] == ["pulse tp"]  # the shared sum comes back
    last = beat(page, base_url, "tp=8", "last")
    t, step = d["prefill"]["tensor"]["allreduce_ms_per_step"], d["prefill"]["step_ms"]
    assert t > 100 and step > 100  # three significant digits are whole milliseconds here
    assert last["caption"].startswith(
        f"Then layer 2 of 80: 80 layers × 2 all-reduces = {float(f'{t:.3g}'):.0f} ms "
        f"of the {float(f'{step:.3g}'):.0f} ms step"
    )
    assert page.console_errors == []


def test_pipeline_steps_walk_the_bubble_chart(page, base_url):
    q = "tp=1&pp=8&micro_batches=8"
    first = beat(page, base_url, q, 0)
    assert first["caption"].startswith("8 stages: each holds 10 consecutive layers")
    assert page.locator(".tl-svg .cell.idle").count() == 7 * 8 + 1  # the bubble chart stays
    assert page.locator(".tl-svg .tl-cursor").get_attribute("visibility") == "hidden"
    one = beat(page, base_url, q, 1)
    assert one["caption"].startswith("Slot 1 of 15: 1 of 8 stages busy, 7 waiting (bubble)")
    assert page.locator(".tl-svg .tl-cursor").get_attribute("visibility") == "visible"
    last = beat(page, base_url, q, "last")
    assert last["caption"].startswith("Slot 15 of 15: 1 of 8 stages busy")
    assert not last["cut"]  # tensor ×1: each layer whole on one GPU
    assert page.console_errors == []


def test_presenter_arrows_step_through_the_beats(page, base_url):
    page.goto(base_url + "/tour/parallelism?present=1")
    page.wait_for_selector("#stage .par-layer-svg .ly-slice")
    page.wait_for_selector(".presenter-hud")
    captions = []
    for _ in range(7):
        page.wait_for_function("() => document.querySelector('#stage .par-caption')?.textContent.length > 0")
        captions.append(page.locator("#stage .par-caption").text_content())
        page.keyboard.press("ArrowRight")
    assert captions[0].startswith("One layer of 80") and captions[1].startswith("Cut 8 ways")
    assert captions[3].startswith("All-reduce after the attention") and captions[6].startswith("Then layer 2")
    assert len(set(captions)) == 7
    assert page.console_errors == []


def test_memory_bound_decode_reads_the_weights_and_pipeline_stages_differ(page, base_url):
    """Issue 28 red pen: decode at batch 16 is weight streaming, not 'matrix math (GEMMs)' (drawn in the weights'
    colour, as chapter 4's stream); a pipeline's middle stages hold less than its ends (the embedding, the LM head)."""
    page.goto(base_url + "/tour/parallelism?phase=decode")
    page.wait_for_selector(".par-breakdown .par-bar .seg")
    d = page.request.get(base_url + "/api/parallelism").json()["decode"]
    assert d["bound"] == "memory"
    legend = page.locator(".par-breakdown .legend").inner_text()
    assert "reading the weights (GEMMs)" in legend and "matrix math" not in legend
    assert page.locator(".par-breakdown .par-bar .seg.weights").count() == 1
    assert page.locator(".par-breakdown .par-bar .seg.compute").count() == 0
    assert "fitted on published low-batch decode latencies" in page.locator(".par-breakdown .par-bar-note").inner_text()
    page.select_option("#ctl-tp", "1")
    page.select_option("#ctl-pp", "8")
    page.wait_for_function("() => document.querySelector('.readouts')?.textContent.includes('17.1–19.2')")
    assert "end stages also hold the embedding and LM head" in page.locator(".readouts").inner_text()
    assert page.console_errors == []
