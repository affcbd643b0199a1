"""GET /api/dials/sweep and /api/dials/solve: equal the simulation, the memory knee, binding constraints, 422s."""

from __future__ import annotations

from dataclasses import replace

import pytest
from apikit import assert_refused, get_json

from inside_llm.sim.cost import serving, solve

BASE = serving.ServingParams()


def test_sweep_equals_the_estimate_at_each_point(client):
    d = get_json(client, "/api/dials/sweep", x="batch")
    assert d["current"] == 16 and [p["x"] for p in d["points"]] == [2**i for i in range(13)]
    for p in d["points"]:
        e = serving.estimate(replace(BASE, batch=p["x"]))
        assert p["fits"] == e.fits
        if e.fits:
            assert p["tokens_per_s_total"] == pytest.approx(e.tokens_per_s_total)
        else:
            assert p["tokens_per_s_total"] is None
    assert d["knee"] == next(p["x"] for p in d["points"] if not p["fits"])


def test_sweeps_over_context_gpus_and_precision(client):
    ctx = get_json(client, "/api/dials/sweep", x="prompt_tokens", output_tokens=256)
    assert ctx["points"][0]["x"] == 128 and ctx["points"][-1]["x"] <= 131072 - 256
    gpus = get_json(client, "/api/dials/sweep", x="gpus", gpus=8, tp=8)
    assert [p["x"] for p in gpus["points"]] == [8, 16, 32, 64, 128]
    prec = get_json(client, "/api/dials/sweep", x="precision")
    assert [p["x"] for p in prec["points"]] == list(solve.SWEEP_PRECISIONS)


def test_solve_equals_the_simulation(client):
    d = get_json(client, "/api/dials/solve", ask="batch", max_ttft_ms=2000, min_tokens_per_s_per_user=20)
    s = solve.largest_batch(BASE, 2000, 20)
    assert (d["value"], d["binding"], d["text"]) == (s.value, s.binding, s.text)
    assert d["adopt"]["batch"] == s.value and d["figures"]["ttft_ms"] <= 2000
    g = get_json(client, "/api/dials/solve", ask="gpus", users=300)
    assert g["feasible"] and g["adopt"]["gpus"] == g["value"]
    c = get_json(client, "/api/dials/solve", ask="context", batch=64)
    assert c["value"] == solve.longest_context(replace(BASE, batch=64)).value


def test_infeasible_asks_say_which_constraint_binds(client):
    d = get_json(client, "/api/dials/solve", ask="batch", max_ttft_ms=1)
    assert not d["feasible"] and d["binding"] == "ttft" and d["adopt"] is None
    d = get_json(client, "/api/dials/solve", ask="batch", gpus=1, tp=1)
    assert not d["feasible"] and d["binding"] == "memory"


@pytest.mark.parametrize(
    ("path", "query", "field", "words"),
    [
        ("/api/dials/sweep", {"x": "colour"}, "x", "The swept input must be one of batch"),
        ("/api/dials/sweep", {"format": "xls"}, "format", "The format must be"),
        ("/api/dials/solve", {"ask": "money"}, "ask", "The question must be one of batch"),
        ("/api/dials/solve", {"users": 0}, "users", "The users must be at least 1"),
        ("/api/dials/solve", {"max_ttft_ms": -1}, "max_ttft_ms", "The time-to-first-token limit must be at least 0"),
    ],
)
def test_refusals_in_words(client, path, query, field, words):
    assert_refused(client, path, query, field, words)


def test_sweep_and_solve_as_csv(client):
    import csv
    import io

    r = client.get("/api/dials/sweep", params={"x": "batch", "format": "csv"})
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert r.headers["content-type"].startswith("text/csv") and [int(x["batch"]) for x in rows] == [
        2**i for i in range(13)
    ]
    r = client.get("/api/dials/solve", params={"ask": "batch", "max_ttft_ms": 2000, "format": "csv"})
    (row,) = list(csv.DictReader(io.StringIO(r.text)))
    assert int(row["batch"]) == solve.largest_batch(BASE, 2000).value


def test_solve_within_the_dials_gives_answers_its_controls_can_show(client):
    g = get_json(client, "/api/dials/solve", ask="gpus", users=3000, within="dials")
    assert g["value"] == g["adopt"]["gpus"] == 32  # 24 would do, but the dials' GPU menu has no 24
    assert get_json(client, "/api/dials/solve", ask="gpus", users=3000)["value"] == 24
    c = get_json(client, "/api/dials/solve", ask="context", within="dials")
    assert c["value"] == c["adopt"]["prompt_tokens"] == 65536 and c["binding"] == "prompt_limit"
    assert_refused(client, "/api/dials/solve", {"within": "galaxy"}, "within", "must be one of any or dials")
