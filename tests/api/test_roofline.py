"""GET /api/roofline: roofs, ridge, prefill and decode points equal to the simulation; decode uses well under 1%."""

from __future__ import annotations

import pytest
from apikit import assert_refused, assert_same_bytes_and_etag, forget_measurements

from inside_llm.sim.core.result import as_json
from inside_llm.sim.cost import roofline as rl
from inside_llm.sim.hardware import catalog


def test_defaults_equal_the_simulation(client):
    r = client.get("/api/roofline")
    assert r.status_code == 200
    d = r.json()
    assert (d["model"]["id"], d["gpu"]["id"], d["roof"]["precision"], d["tp"], d["batch"], d["prompt_tokens"]) == (
        "llama-3.1-70b",
        "h100-sxm",
        "bf16",
        8,
        1,
        1024,
    )
    want = as_json(rl.roofline())
    for k in ("roof", "prefill", "decode", "decode_curve", "roof_curve"):
        assert d[k] == want[k], k
    assert d["math"]["ridge_flops_per_byte"]["value"] == d["roof"]["ridge_flops_per_byte"]
    assert d["math"]["decode_share_of_peak"]["value"] == d["decode"]["share_of_peak"]


def test_decoding_one_chat_uses_well_under_one_percent_of_the_math(client):
    d = client.get("/api/roofline").json()
    dec, roof = d["decode"], d["roof"]
    assert dec["share_of_peak"] < 0.01
    assert dec["share_of_peak"] == pytest.approx(dec["attained_flops_per_s"] / roof["peak_flops_per_s"])
    assert dec["arithmetic_intensity"] < roof["ridge_flops_per_byte"] and d["binding_roof"] == "memory"
    assert d["prefill"]["share_of_peak"] > 30 * dec["share_of_peak"]


def test_share_of_math_rises_with_batch(client):
    shares = [
        client.get("/api/roofline", params={"batch": b}).json()["decode"]["share_of_peak"]
        for b in (1, 4, 16, 64, 256, 1024)
    ]
    assert shares == sorted(shares) and shares[-1] > 20 * shares[0]
    curve = client.get("/api/roofline").json()["decode_curve"]
    assert curve["batch"] == [2**i for i in range(11)]
    assert curve["share_of_peak"] == sorted(curve["share_of_peak"])


@pytest.mark.parametrize(
    "query",
    [
        {"gpu": "b200", "precision": "fp8", "batch": 64, "prompt_tokens": 4096, "tp": 4},
        {"gpu": "a100-80gb", "precision": "fp8"},
        {"model": "mixtral-8x7b", "gpu": "mi300x"},
    ],
)
def test_other_configurations_equal_the_simulation(client, query):
    d = client.get("/api/roofline", params=query).json()
    want = rl.roofline(
        d["model"]["id"],
        d["gpu"]["id"],
        d["roof"]["precision"],
        batch=d["batch"],
        context_tokens=d["prompt_tokens"],
        tp=d["tp"],
    )
    assert d["decode"] == want.decode.__dict__ and d["prefill"] == want.prefill.__dict__
    assert d["roof"] == want.roof.__dict__
    assert set(rl.point_math(want, d["tp"])) <= set(d["math"])


def test_switching_gpu_or_precision_moves_the_roofs(client):
    h100 = client.get("/api/roofline").json()["roof"]
    fp8 = client.get("/api/roofline", params={"precision": "fp8"}).json()["roof"]
    a100 = client.get("/api/roofline", params={"gpu": "a100-80gb", "precision": "fp8"}).json()["roof"]
    assert fp8["ridge_flops_per_byte"] == pytest.approx(2 * h100["ridge_flops_per_byte"], rel=1e-3)
    assert a100["math"] == "bf16"  # no FP8 tensor cores: weight-only FP8, BF16 math
    g = catalog.gpu("a100-80gb")
    assert a100["peak_flops_per_s"] == g.bf16_dense_tflops * 1e12


def test_past_the_ridge_the_compute_roof_binds(client):
    d = client.get("/api/roofline", params={"batch": 1024}).json()
    assert d["decode"]["arithmetic_intensity"] > d["roof"]["ridge_flops_per_byte"]
    assert d["binding_roof"] == "compute" and "compute roof binds" in d["math"]["decode_roof"]["formula"]


@pytest.mark.parametrize(
    "query,field,needle",
    [
        ({"gpu": "tpu"}, "gpu", "h100-sxm"),
        ({"model": "gpt-5"}, "model", "llama-3.1-70b"),
        ({"precision": "fp4"}, "precision", "bf16"),
        ({"batch": 0}, "batch", "1"),
        ({"batch": 2048}, "batch", "1,024"),
        ({"prompt_tokens": 0}, "prompt_tokens", "1"),
        ({"model": "llama-2-70b", "prompt_tokens": 8192}, "prompt_tokens", "4,096"),
        ({"tp": 5}, "tp", "1, 2, 4 or 8"),
        ({"context": 10}, "context", "not a setting"),
    ],
)
def test_bad_input_gets_422_naming_the_field(client, query, field, needle):
    assert_refused(client, "/api/roofline", query, field, needle)


def test_parameters_have_bounds_and_units_in_openapi(client):
    op = client.get("/openapi.json").json()["paths"]["/api/roofline"]["get"]
    params = {p["name"]: p for p in op["parameters"]}
    assert set(params) == {"model", "gpu", "precision", "batch", "prompt_tokens", "tp"}
    for name in ("batch", "prompt_tokens", "tp"):
        assert params[name]["schema"]["maximum"] and "(" in params[name]["description"]


def test_deterministic_and_cacheable(client):
    assert_same_bytes_and_etag(client, "/api/roofline?batch=32")


def test_fact_is_the_models_own_number(client):
    from inside_llm.api.roofline import facts

    d = client.get("/api/roofline").json()
    f = facts()
    assert f["decode_math_pct"] == f"{d['decode']['share_of_peak'] * 100:.2g}%"
    assert float(f["decode_math_pct"].rstrip("%")) < 1
    assert f["ridge"] == f"{d['roof']['ridge_flops_per_byte']:.0f}"


def test_prefill_curve_slides_over_the_ridge_as_the_prompt_grows(client):
    """The prefill point's drag path: batch x prompt tokens per weight fetch; short prompts sit left of the ridge."""
    d = client.get("/api/roofline", params={"model": "llama-3.1-8b", "tp": 1, "batch": 2}).json()
    pc, ridge = d["prefill_curve"], d["roof"]["ridge_flops_per_byte"]
    assert pc["prompt_tokens"] == [128, 256, 512, 1024, 2048, 4096]
    assert pc["tokens_per_step"] == [2 * n for n in pc["prompt_tokens"]]
    ai = pc["arithmetic_intensity"]
    assert ai == sorted(ai) and ai[0] < ridge < ai[-1]
    i = pc["prompt_tokens"].index(1024)
    assert ai[i] == d["prefill"]["arithmetic_intensity"]


# ---- GET /api/roofline/measured: this CPU's own roofs and the served model on them ----------------


@pytest.fixture
def fresh_measurements(monkeypatch):
    """Nothing measured yet in this process (each test measures for itself)."""
    from inside_llm.api import roofline

    forget_measurements(monkeypatch, roofline, roofline._measure_cpu, roofline._cpu_unavailable)


def test_measured_cpu_roofline_is_consistent_and_shared_with_chapter_2(client):
    from inside_llm.api.measured import served
    from inside_llm.sim.measure import cpu_measure

    r = client.get("/api/roofline/measured")
    assert r.status_code == 200
    d = r.json()
    assert d["available"] and d["measured_on"] == "this server's CPU" and d["reason"] is None
    roofs, pre, dec, pred = d["roofs"], d["prefill"], d["decode"], d["decode_prediction"]
    bw, peak = roofs["memory_bandwidth_bytes_per_second"], roofs["matrix_multiply_flops_per_second"]
    assert 1e8 < bw < 1e13 and 1e8 < peak < 1e14 and roofs["blas_threads"] >= 1
    assert roofs["ridge_flops_per_byte"] == pytest.approx(peak / bw, rel=2e-3)
    assert 2 * roofs["copy_buffer_bytes"] >= (roofs["last_level_cache_bytes"] or 0)
    s = served()
    assert d["model"]["served"] == s.served and d["model"]["name"] == s.model.name
    assert pred["weight_bytes_per_token"] == cpu_measure.weight_bytes_per_token(s.model)
    assert pred["predicted_milliseconds_per_token"] == pytest.approx(
        1e3 * pred["weight_bytes_per_token"] / bw, rel=2e-3
    )
    assert pred["measured_milliseconds_per_token"] == dec["milliseconds_per_token"]
    ratio = pred["measured_milliseconds_per_token"] / pred["predicted_milliseconds_per_token"]
    assert pred["measured_over_predicted"] == pytest.approx(ratio, rel=2e-3)
    assert (pre["phase"], dec["phase"], pre["tokens"]) == ("prefill", "decode", 64)
    assert dec["bound"] == "memory" and dec["arithmetic_intensity"] < 1  # one token per weight read
    assert pre["arithmetic_intensity"] > 30 * dec["arithmetic_intensity"]  # 64 tokens share each weight read
    for p in (pre, dec):
        assert p["tokens_per_second"] == pytest.approx(1e3 / p["milliseconds_per_token"], rel=2e-3)
        assert p["roof_flops_per_second"] == pytest.approx(min(peak, p["arithmetic_intensity"] * bw), rel=2e-3)
        # above_roof only when the point was timed faster than its roof (after the roofs were timed again)
        assert p["above_roof"] == (p["attained_flops_per_second"] > p["roof_flops_per_second"] * (1 + 2e-3)) or (
            p["attained_flops_per_second"] == pytest.approx(p["roof_flops_per_second"], rel=2e-3)
        )
    sv = d["served_decode"]  # decode as the engine runs it: SmolLM2 from its int8 matrices
    if s.served == "smollm2":
        assert (sv["phase"], sv["weights"], dec["weights"]) == ("decode", "int8", "float32")
        assert sv["bytes_per_token"] < dec["bytes_per_token"] / 3 and sv["flops_per_token"] == dec["flops_per_token"]
        assert sv["arithmetic_intensity"] > 3 * dec["arithmetic_intensity"] and sv["bound"] == "memory"
    else:
        assert sv is None
    e = client.get("/api/embeddings/measured").json()  # chapter 2 shows the same measurement
    assert (e["prefill_ms_per_token"], e["decode_ms_per_token"]) == (
        pre["milliseconds_per_token"],
        dec["milliseconds_per_token"],
    )
    assert e["model"]["served"] == d["model"]["served"]
    assert client.get("/api/roofline/measured").content == r.content, "measured once per process, then cached"
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    assert {"memory_bandwidth_bytes_per_second", "ridge_flops_per_byte"} <= set(schema["CpuRoofs"]["properties"])
    assert "decode_prediction" in schema["RooflineMeasuredResponse"]["properties"]


def test_a_roof_timed_on_a_busy_moment_is_timed_again(client, fresh_measurements, monkeypatch):
    """A compute roof measured while the machine was busy (here: 1 FLOP/s) would put both points above it: the
    roofs are timed again, the higher figure kept, and no point is left above its roof."""
    from inside_llm.sim.measure import cpu_measure

    real, calls = cpu_measure.machine_roofs, []

    def busy_first(*a, **k):
        r = real(*a, **k)
        calls.append(1)
        if len(calls) == 1:
            r["compute"] = {**r["compute"], "flops_per_s": 1.0}
        return r

    monkeypatch.setattr(cpu_measure, "machine_roofs", busy_first)
    d = client.get("/api/roofline/measured").json()
    assert len(calls) >= 2, "the roofs were timed again"
    assert d["roofs"]["matrix_multiply_flops_per_second"] > 1e8
    for p in (d["prefill"], d["decode"]):
        assert p["roof_flops_per_second"] > 1e6
        if not p["above_roof"]:
            assert p["attained_flops_per_second"] <= p["roof_flops_per_second"] * (1 + 2e-3)


def test_measured_cpu_roofline_unavailable_says_why(client, fresh_measurements, monkeypatch):
    from inside_llm.sim.measure import cpu_measure

    def broken(*a, **k):
        raise MemoryError

    monkeypatch.setattr(cpu_measure, "machine_roofs", broken)
    d = client.get("/api/roofline/measured").json()
    assert d["available"] is False and d["reason"] == "the measurement failed (MemoryError)"
    assert d["roofs"] is None and d["decode"] is None and d["cpu"]["logical_cores"] >= 1


def test_measured_cpu_roofline_times_the_toy_without_smollm2(client, no_model, fresh_measurements):
    from inside_llm.api.demo_model import demo_model
    from inside_llm.sim.measure import cpu_measure

    d = client.get("/api/roofline/measured").json()
    assert d["available"] and d["model"]["served"] == "toy" and d["model"]["requested"] == "smollm2"
    assert "SmolLM2-135M-Instruct is not on this server" in d["model"]["note"]
    pred, llc = d["decode_prediction"], d["roofs"]["last_level_cache_bytes"]
    assert pred["weight_bytes_per_token"] == cpu_measure.weight_bytes_per_token(demo_model())
    # the toy's ~24 MB of weights sit in any cache of at least that size: the panel then says the floor says little
    assert pred["weights_fit_in_last_level_cache"] == (None if llc is None else pred["weight_bytes_per_token"] <= llc)
