"""Benchmark the cost-model entry points the dials and roofline endpoints call, at their defaults.

run() -> rows of {"name", "value", "unit", "note"}; `python bench/bench_costmodel.py` prints them.
Targets (issue 3, on the 2-core dev machine): dials estimate median < 2 ms, roofline < 5 ms.
"""

from __future__ import annotations

import statistics
import time

from inside_llm.sim.core.result import as_json
from inside_llm.sim.cost import roofline, serving
from inside_llm.sim.hardware import catalog

CALLS = 400


def _time(fn, calls: int = CALLS) -> list[float]:
    fn()  # warm: catalog parse and caches
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def _rows(name: str, ms: list[float], note: str) -> list[dict]:
    ms = sorted(ms)
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
    return [
        {"name": f"{name}_median", "value": round(statistics.median(ms), 4), "unit": "ms", "note": note},
        {"name": f"{name}_p99", "value": round(p99, 4), "unit": "ms", "note": f"{len(ms)} calls"},
    ]


def run() -> list[dict]:
    catalog.gpus(), catalog.models()
    rows = _rows(
        "dials_estimate",
        _time(lambda: serving.estimate().to_dict()),
        "serving.estimate() at defaults incl. to_dict() with math; target median < 2 ms",
    )
    rows += _rows(
        "roofline",
        _time(lambda: as_json(roofline.roofline())),
        "roofline.roofline() at defaults incl. decode curve and as_json(); target median < 5 ms",
    )
    return rows


if __name__ == "__main__":
    for r in run():
        print(f"{r['name']:<24} {r['value']:>10} {r['unit']:<4} {r['note']}")
