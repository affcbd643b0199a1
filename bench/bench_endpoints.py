"""Every GET endpoint at its defaults on a live `inside-llm serve` (one worker, loopback, keep-alive client):
the first request (cold: the simulation runs, lazy loads), then the steady median and p99 over repeated
requests (routers that memoize per URL answer from memory), each as a ratio to /healthz on the same server
in the same run. /api/generate is timed to its last event (at defaults: SmolLM2 answering "What is the capital of
France?" greedily, 7 tokens, on this CPU; the toy model writing 64 tokens where the real model is absent).
The engine's live feed is left out (it does not finish; bench_engine.py times the engine).

run() -> rows; `python bench/bench_endpoints.py` prints them.
"""

from __future__ import annotations

import statistics
import time

import httpx
from _server import get_ms, latency_row, serve

REPEATS = 40  # steady-state requests per endpoint (after the cold one)
HEALTHZ_REPEATS = 400
STREAM_REPEATS = 3
# A live feed is not a request that finishes: it reports the engine for as long as a page watches it.
# bench_engine.py times the engine itself.
LIVE_FEEDS = ("/api/engine/feed",)


def _get_paths(client: httpx.Client) -> list[str]:
    """GET operations that need no parameter, from the server's own OpenAPI schema."""
    spec = client.get("/openapi.json").json()
    out = []
    for path, ops in spec["paths"].items():
        op = ops.get("get")
        if op and not any(p.get("required") for p in op.get("parameters", [])) and "{" not in path:
            out.append(path)
    return out


def _is_stream(client: httpx.Client, path: str) -> bool:
    spec = client.get("/openapi.json").json()
    return "text/event-stream" in spec["paths"][path]["get"]["responses"].get("200", {}).get("content", {})


def _time(client: httpx.Client, path: str, n: int) -> list[float]:
    return [get_ms(client, path) for _ in range(n)]


def _time_stream(client: httpx.Client, path: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        with client.stream("GET", path) as r:
            body = b"".join(r.iter_bytes())
        assert b"event: done" in body, body[-200:]
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def run() -> list[dict]:
    rows = []
    with serve(workers=1) as (base, _), httpx.Client(base_url=base, timeout=120) as client:
        paths = [p for p in _get_paths(client) if p != "/healthz" and p not in LIVE_FEEDS]
        streams = {p for p in paths if _is_stream(client, p)}
        cold = {}
        for path in paths:  # cold pass first: nothing memoized yet
            t0 = time.perf_counter()
            (_time_stream if path in streams else _time)(client, path, 1)
            cold[path] = (time.perf_counter() - t0) * 1e3
        health = _time(client, "/healthz", HEALTHZ_REPEATS)
        hz = statistics.median(health)
        rows.append(latency_row("GET /healthz", health, hz, f"trivial endpoint; {HEALTHZ_REPEATS} requests"))
        for path in paths:
            if path in streams:
                ms = _time_stream(client, path, STREAM_REPEATS)
                rows.append(
                    latency_row(f"GET {path}", ms, hz, f"to the last event, defaults; {STREAM_REPEATS} streams")
                )
                continue
            ms = _time(client, path, REPEATS)
            rows.append(latency_row(f"GET {path}", ms, hz, f"steady, defaults; {REPEATS} requests"))
            rows.append(
                {
                    "name": f"GET {path} (first)",
                    "value": round(cold[path], 1),
                    "unit": "ms",
                    "ratio": round(cold[path] / hz, 1),
                    "note": "cold: first request after start-up",
                }
            )
    return rows


if __name__ == "__main__":
    for r in run():
        print(f"{r['name']:<40} {r['value']:>10} {r.get('p99', ''):>10} {r['unit']:<4} x{r.get('ratio')} {r['note']}")
