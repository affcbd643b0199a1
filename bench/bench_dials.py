"""GET /api/dials uncached vs /healthz on one live `inside-llm serve` (one worker, loopback, keep-alive client), in
the same run: every dials request is a state the server has not seen (a new prompt length each time), so the
estimate really runs; the two are interleaved so a busy neighbour weighs on both alike (issue 25: goal <= 2x).
A repeated URL (the state kept per params) is timed too.

run() -> rows; `python bench/bench_dials.py` prints them (or `make bench BENCH_ARGS="dials --no-load"`).
"""

from __future__ import annotations

import statistics

import httpx
from _server import get_ms, latency_row, serve

STATES = 200  # distinct dials states, each asked once
HEALTHZ_PER_STATE = 2


def run() -> list[dict]:
    with serve(workers=1) as (base, _), httpx.Client(base_url=base, timeout=120) as client:
        for _ in range(20):  # warm: catalogs loaded, first-request work done
            get_ms(client, "/healthz")
            get_ms(client, "/api/dials?prompt_tokens=100")
        health, fresh, again = [], [], []
        for i in range(STATES):
            health += [get_ms(client, "/healthz") for _ in range(HEALTHZ_PER_STATE)]
            fresh.append(get_ms(client, f"/api/dials?prompt_tokens={2000 + i}"))
            again.append(get_ms(client, "/api/dials"))
    hz = statistics.median(health)
    return [
        latency_row("GET /healthz (beside dials)", health, hz, f"trivial endpoint; {len(health)} requests"),
        latency_row("GET /api/dials uncached", fresh, hz, f"{STATES} states never asked before (prompt_tokens moves)"),
        latency_row("GET /api/dials same URL", again, hz, f"defaults, {STATES} requests"),
    ]


if __name__ == "__main__":
    for r in run():
        print(f"{r['name']:<32} {r['value']:>8} ms  p99 {r['p99']:>8}  x{r['ratio']}  {r['note']}")
