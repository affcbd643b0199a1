"""GET /api/dials uncached vs /healthz on one live `inside-llm serve` (one worker, loopback, keep-alive client), in
the same run: every dials request is a state the server has not seen, so the estimate really runs. The states
move one control each in turn, as a hand does (batch, prompt length, answer length, price, GPU count), so both
the states that re-price a kept curve (lengths, price) and those that step a new one (batch, GPUs) are timed.
The two are interleaved so a busy neighbour weighs on both alike (issue 25: goal <= 2x). A repeated URL (the
state kept per params) is timed too. Wall time on a shared 2-core box is mostly waiting for a core, so the
server's own CPU time per request (user + system, /proc) is given beside it, block by block: the ratio that a
busy neighbour moves least.

run() -> rows; `python bench/bench_dials.py` prints them (or `make bench BENCH_ARGS="dials --no-load"`).
"""

from __future__ import annotations

import statistics

import httpx
from _server import cpu_s, get_ms, latency_row, serve, server_pids

STATES = 200  # distinct dials states, each asked once
HEALTHZ_PER_STATE = 2


def _state(i: int) -> str:
    """The i-th never-seen state: one control moved from the defaults (distinct for every i < STATES)."""
    k, j = divmod(i, 5)
    return ("batch={}", "prompt_tokens={}", "output_tokens={}", "price_per_gpu_hour={}", "kv_precision=fp8&batch={}")[
        j
    ].format((17 + k, 2000 + k, 300 + k, f"{1 + k / 100:g}", 300 + k)[j])


def _cpu_ms(client: httpx.Client, pids: list[int], paths: list[str]) -> float:
    """The server's CPU time per request (ms) over the given requests, asked one after another."""
    c0 = cpu_s(pids)
    for path in paths:
        get_ms(client, path)
    return (cpu_s(pids) - c0) * 1e3 / len(paths)


def run() -> list[dict]:
    with serve(workers=1) as (base, proc), httpx.Client(base_url=base, timeout=120) as client:
        pids = server_pids(proc)
        for _ in range(20):  # warm: catalogs loaded, first-request work done
            get_ms(client, "/healthz")
            get_ms(client, "/api/dials?prompt_tokens=100")
        health, fresh, again = [], [], []
        for i in range(STATES):
            health += [get_ms(client, "/healthz") for _ in range(HEALTHZ_PER_STATE)]
            fresh.append(get_ms(client, f"/api/dials?{_state(i)}"))
            again.append(get_ms(client, "/api/dials"))
        # CPU, block by block: states not asked above (k from STATES on), healthz before and after them
        cpu_hz = _cpu_ms(client, pids, ["/healthz"] * 2 * STATES)
        cpu_fresh = _cpu_ms(client, pids, [f"/api/dials?{_state(STATES + i)}" for i in range(STATES)])
        cpu_hz = (cpu_hz + _cpu_ms(client, pids, ["/healthz"] * 2 * STATES)) / 2
        cpu_again = _cpu_ms(client, pids, ["/api/dials"] * STATES)
    hz = statistics.median(health)
    cpu = [
        {"name": n, "value": round(v, 3), "unit": "ms", "ratio": round(v / cpu_hz, 2), "note": note}
        for n, v, note in (
            ("server CPU per /healthz", cpu_hz, f"user + system, {4 * STATES} requests"),
            ("server CPU per /api/dials uncached", cpu_fresh, f"{STATES} more never-seen states"),
            ("server CPU per /api/dials same URL", cpu_again, f"defaults, {STATES} requests"),
        )
    ]
    return [
        latency_row("GET /healthz (beside dials)", health, hz, f"trivial endpoint; {len(health)} requests"),
        latency_row(
            "GET /api/dials uncached", fresh, hz, f"{STATES} states never asked before (one control moved each)"
        ),
        latency_row("GET /api/dials same URL", again, hz, f"defaults, {STATES} requests"),
        *cpu,
    ]


if __name__ == "__main__":
    for r in run():
        print(f"{r['name']:<36} {r['value']:>8} ms  p99 {r.get('p99', '-'):>8}  x{r['ratio']}  {r['note']}")
