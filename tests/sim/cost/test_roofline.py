"""Roofline (chapter 5): roofs and ridge from the catalog, decode far below the math roof."""

import json

import numpy as np
import pytest

from inside_llm.sim.core.result import as_json
from inside_llm.sim.cost import roofline
from inside_llm.sim.hardware import catalog


def test_h100_roofs_and_ridge():
    r = roofline.roof(catalog.gpu("h100-sxm"), "bf16")
    assert r.peak_flops_per_s == 989.4e12 and r.bandwidth_bytes_per_s == 3.35e12
    assert r.ridge_flops_per_byte == pytest.approx(295.3, abs=0.1)
    assert roofline.roof(catalog.gpu("h100-sxm"), "fp8").ridge_flops_per_byte == pytest.approx(590.7, abs=0.1)
    assert "whitepaper" in r.peak_source and "3.35" in r.bandwidth_source


def test_decoding_one_chat_uses_well_under_one_percent_of_the_math():
    res = roofline.roofline()  # Llama 3.1 70B, 8 x H100, BF16, batch 1
    d = res.decode
    assert d.arithmetic_intensity == pytest.approx(1.0, abs=0.05)  # 2 FLOPs per 2-byte weight
    assert d.share_of_peak < 0.01 and d.roof_share_of_peak < 0.01
    assert d.bound == "memory"
    for gid in ("h100-sxm", "h200", "b200", "a100-80gb", "mi300x"):
        assert roofline.roofline(gpu=gid).decode.share_of_peak < 0.01


def test_prefill_sits_on_the_compute_roof():
    p = roofline.roofline(context_tokens=2048).prefill
    assert p.arithmetic_intensity > roofline.roof(catalog.gpu(), "bf16").ridge_flops_per_byte
    assert p.bound == "compute" and p.share_of_peak > 0.3 and p.roof_share_of_peak == 1.0


def test_decode_point_climbs_with_batch():
    curve = roofline.roofline().decode_curve
    share, ai = np.array(curve["share_of_peak"]), np.array(curve["arithmetic_intensity"])
    assert curve["batch"][0] == 1 and curve["batch"][-1] == 1024
    assert np.all(np.diff(share) > 0) and np.all(np.diff(ai) > 0)
    assert curve["fits"][0] and curve["max_batch"] > 0


def test_roof_curve_is_min_of_two_roofs():
    rc = roofline.roofline().roof_curve
    x, y = np.array(rc["arithmetic_intensity"]), np.array(rc["attainable_flops_per_s"])
    assert np.all(np.diff(y) >= 0) and y[-1] == 989.4e12 and y[0] == pytest.approx(x[0] * 3.35e12)


def test_bounds_and_json():
    with pytest.raises(ValueError, match="batch"):
        roofline.roofline(batch=0)
    with pytest.raises(ValueError, match="context window of Llama 2 7B"):
        roofline.roofline(model="llama-2-7b", context_tokens=5000)
    d = as_json(roofline.roofline())
    json.dumps(d)
    assert set(d["math"]) == {"ridge_flops_per_byte", "decode_arithmetic_intensity", "decode_share_of_peak"}
