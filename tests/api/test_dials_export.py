"""GET /api/dials?format=csv: one header and one row, parsed back equal to the JSON's figures."""

from __future__ import annotations

import csv
import io

import pytest
from apikit import assert_refused, get_json

from inside_llm.sim.cost import table

Q = {"batch": 64, "prompt_tokens": 2048, "tp": 4, "gpus": 8}


def test_csv_row_equals_the_json(client):
    r = client.get("/api/dials", params={**Q, "format": "csv"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert 'filename="dials.csv"' in r.headers["content-disposition"]
    (row,) = list(csv.DictReader(io.StringIO(r.text)))
    assert tuple(row) == table.COLUMNS
    d = get_json(client, "/api/dials", **Q)
    for k in ("ttft_ms", "tokens_per_s_total", "cost_per_million_tokens_usd", "mfu"):
        assert float(row[k]) == pytest.approx(d[k])
    for k, v in d["memory"].items():
        if k != "fits":
            assert float(row[f"memory_{k}"]) == pytest.approx(v)
    assert (row["batch"], row["tp"], row["replicas"], row["fits"]) == ("64", "4", "2", "true")


def test_csv_of_a_setup_that_does_not_fit_has_no_figures(client):
    r = client.get("/api/dials", params={"gpus": 1, "tp": 1, "format": "csv"})
    (row,) = list(csv.DictReader(io.StringIO(r.text)))
    assert row["fits"] == "false" and row["ttft_ms"] == "" and float(row["memory_shortfall_gb"]) > 0


def test_unknown_format_is_refused(client):
    assert_refused(client, "/api/dials", {"format": "xlsx"}, "format", "The format must be one of json or csv")
