"""Speed work must not change what the simulations say: the metrics of seeded runs, pinned.

tests/pinned_results.json holds the run metrics of /api/batching and /api/kv-cache at several settings
(through the HTTP contract) and of simulate_batching / simulate_kv with preemption (SimpleStepCost, no
cost model). Each value must match to one unit of its last pinned decimal, finer than anything the page
shows (3 significant digits, or percentages to 0.1).

When a change is *meant* to change results (a recalibrated cost model, a new scheduling rule), rerun
`python tests/test_pinned_results.py --update` and explain the diff in the commit.
"""

from __future__ import annotations

import json
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from inside_llm.sim.serve.kvpolicies import simulate_kv
from inside_llm.sim.serve.simulate import simulate_batching

PINS = Path(__file__).with_name("pinned_results.json")
DATA = json.loads(PINS.read_text())
SIMS = {"batching": simulate_batching, "kv": simulate_kv}


def last_digit(v: float) -> float:
    """One unit of the last decimal written in the pin (0.001 for 12.679, 1 for 17570)."""
    exp = Decimal(repr(v)).as_tuple().exponent
    return float(Decimal(1).scaleb(min(0, exp)))


def assert_same(pinned, got, where: str) -> None:
    if isinstance(pinned, dict):
        assert set(got) >= set(pinned), where
        for k, v in pinned.items():
            assert_same(v, got[k], f"{where}.{k}")
    elif isinstance(pinned, float):
        assert got == pytest.approx(pinned, abs=last_digit(pinned) * 1.0001), where
    else:
        assert got == pinned, where


def metrics(result, pinned_policies: dict) -> dict:
    """{policy: {metric: value}} from a JSON body or a simulation's typed result."""
    policies = (
        result["policies"]
        if isinstance(result, dict)
        else [p if isinstance(p, dict) else vars(p) for p in result.policies]
    )
    return {p["name"]: {k: p[k] for k in pinned_policies[p["name"]]} for p in policies}


@pytest.mark.parametrize("case", DATA["api"], ids=[c["url"] for c in DATA["api"]])
def test_api_metrics_are_pinned(client, case):
    r = client.get(case["url"])
    assert r.status_code == 200
    d = r.json()
    assert_same(case["policies"], metrics(d, case["policies"]), case["url"])
    if "horizon_s" in case:
        assert_same(case["horizon_s"], d["horizon_s"], "horizon_s")


@pytest.mark.parametrize("case", DATA["sim"], ids=[c["simulate"] for c in DATA["sim"]])
def test_sim_metrics_are_pinned(case):
    result = SIMS[case["simulate"]](**case["kwargs"])
    assert_same(case["policies"], metrics(result, case["policies"]), case["simulate"])


def update() -> None:
    """Rewrite the pins from the current code (only when results are meant to change)."""
    from fastapi.testclient import TestClient

    from inside_llm.app import create_app

    client = TestClient(create_app())
    for case in DATA["api"]:
        d = client.get(case["url"]).json()
        case["policies"] = metrics(d, case["policies"])
        if "horizon_s" in case:
            case["horizon_s"] = d["horizon_s"]
    for case in DATA["sim"]:
        case["policies"] = metrics(SIMS[case["simulate"]](**case["kwargs"]), case["policies"])
    PINS.write_text(json.dumps(DATA, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__" and "--update" in sys.argv:
    update()
