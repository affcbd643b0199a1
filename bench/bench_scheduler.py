"""Benchmark the KV-cache and batching simulations: wall time at 1,000 and 10,000 requests, and the
figures they produce at their defaults (waste per policy, throughput and latency per batching policy).

run() -> rows of {"name", "value", "unit", "note"}; `python bench/bench_scheduler.py` prints them.
Targets: 1,000 requests well under a second, 10,000 in a few seconds (response frames sampled,
metrics over every step).
"""

from __future__ import annotations

import time

from inside_llm.sim.serve.kvpolicies import simulate_kv
from inside_llm.sim.serve.simulate import simulate_batching


def _row(name: str, value: float, unit: str, note: str) -> dict:
    return {"name": name, "value": round(float(value), 4), "unit": unit, "note": note}


def _timed(fn, **kw) -> tuple[float, dict]:
    t0 = time.perf_counter()
    out = fn(**kw)
    return time.perf_counter() - t0, out


def run() -> list[dict]:
    rows = []
    for n in (1000, 10_000):
        s, kv = _timed(simulate_kv, num_requests=n)
        rows.append(
            _row(
                f"kv_sim_{n}_requests",
                s,
                "s",
                "4 policies (paged/contiguous/pow2/oracle), sharegpt, 16-token pages, 16,384-token cache",
            )
        )
        s, bt = _timed(simulate_batching, num_requests=n)
        rows.append(
            _row(
                f"batching_sim_{n}_requests",
                s,
                "s",
                "static + continuous, sharegpt at 4 req/s, 16 seats, default SimpleStepCost",
            )
        )
        if n == 1000:
            steps = sum(p.num_steps for p in bt.policies)
            rows.append(
                _row("batching_sim_steps_per_s", steps / s, "steps/s", f"{steps:,} engine steps, both policies")
            )
    for workload in ("sharegpt", "alpaca"):
        for p in simulate_kv(workload=workload, max_frames=1).policies:
            rows.append(
                _row(
                    f"kv_waste_{workload}_{p.name}",
                    p.waste_fraction,
                    "fraction",
                    f"max {p.max_concurrent_requests} requests at once; 300 requests, seed 0",
                )
            )
    for p in simulate_batching(max_frames=1).policies:
        for key, unit in (
            ("throughput_tokens_per_s", "tokens/s"),
            ("latency_ms_p50", "ms"),
            ("ttft_ms_p50", "ms"),
            ("seat_utilization", "fraction"),
        ):
            rows.append(
                _row(f"batching_{p.name}_{key}", getattr(p, key), unit, "defaults: 200 sharegpt requests, seed 0")
            )
    return rows


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:<44} {row['value']:>12,.4f} {row['unit']:<9} {row['note']}")
