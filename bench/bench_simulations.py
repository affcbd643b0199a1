"""The two simulations at scrubbing speed (issue 15): /api/batching and /api/kv-cache over HTTP with settings the
server has never seen (a new seed each request, so the per-URL memo cannot help), at defaults and at their
maximum sizes; the share of that time spent outside the simulation; bytes on the wire with and without gzip;
and a 10,000-request batching run at 32 requests/s on 64 seats in-process.

Targets: defaults median <= 40 ms over HTTP, maximum sizes <= 250 ms, time outside the simulation <= 20%,
default bodies <= 40 KB gzipped, 10,000 requests <= 2 s.

run() -> rows; `python bench/bench_simulations.py` prints them.
"""

from __future__ import annotations

import statistics
import time

import httpx
from _server import percentile, serve

REPEATS = 15
MAX_REPEATS = 5
CASES = {  # name: (path, query without seed, repeats)
    "batching defaults": ("/api/batching", "", REPEATS),
    "kv-cache defaults": ("/api/kv-cache", "", REPEATS),
    "batching max (1,000 requests, 32/s, 64 seats)": ("/api/batching", "requests=1000&rate=32&seats=64&", MAX_REPEATS),
    "kv-cache max (1,000 requests, 8-token pages)": ("/api/kv-cache", "requests=1000&block_size=8&", MAX_REPEATS),
}


def _in_process_sim_ms(path: str, query: str, seeds: list[int]) -> tuple[list[float], list[float]]:
    """The simulation alone, in-process, for the same settings the HTTP rows used: (wall ms, CPU ms)."""
    from inside_llm.api import batching, kv_cache

    params = dict(p.split("=") for p in query.strip("&").split("&") if p)
    out, cpu = [], []
    for seed in seeds:
        if path == "/api/batching":
            p = batching.BatchingParams(**params, seed=seed)
            eng = batching.engine(p.seats)
            t0, c0 = time.perf_counter(), time.process_time()
            from inside_llm.sim.serve.simulate import simulate_batching

            simulate_batching(
                rate=p.rate,
                num_requests=p.requests,
                seats=p.seats,
                workload=p.workload,
                seed=p.seed,
                step_time=batching.clock(),
                kv_capacity_tokens=eng["kv_capacity_tokens"],
                block_size=batching.BLOCK_SIZE,
                max_frames=batching.MAX_FRAMES,
                max_num_batched_tokens=batching.MAX_NUM_BATCHED_TOKENS,
                max_seq_len=batching.MAX_SEQ_LEN,
            )
        else:
            p = kv_cache.KVCacheParams(**params, seed=seed)
            t0, c0 = time.perf_counter(), time.process_time()
            kv_cache.simulate(p)
        out.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return out, cpu


def _body_cpu_ms(path: str, query: str, seeds: list[int]) -> list[float]:
    """CPU time (not wall time: the machine may be shared) to build the response body in-process."""
    from inside_llm.api import batching, kv_cache

    params = dict(p.split("=") for p in query.strip("&").split("&") if p)
    out = []
    for seed in seeds:
        if path == "/api/batching":
            fn, p = batching.batching_json.__wrapped__, batching.BatchingParams(**params, seed=seed)
        else:
            fn, p = kv_cache.kv_cache_json.__wrapped__, kv_cache.KVCacheParams(**params, seed=seed)
        t0 = time.process_time()
        fn(p)
        out.append((time.process_time() - t0) * 1e3)
    return out


def _row(name: str, value: float, unit: str, note: str, p99: float | None = None) -> dict:
    row = {"name": name, "value": round(value, 3), "unit": unit, "note": note}
    if p99 is not None:
        row["p99"] = round(p99, 3)
    return row


def run() -> list[dict]:
    rows = []
    with serve(workers=1) as (base, _), httpx.Client(base_url=base, timeout=120) as client:
        client.get("/api/batching?seed=999999", headers={"accept-encoding": "gzip"})  # warm: imports, engine
        client.get("/api/kv-cache?seed=999999", headers={"accept-encoding": "gzip"})
        for k, (name, (path, query, n)) in enumerate(CASES.items()):
            seeds = [1000 * (k + 1) + i for i in range(n)]
            ms = []
            for seed in seeds:
                t0 = time.perf_counter()
                r = client.get(f"{path}?{query}seed={seed}", headers={"accept-encoding": "gzip"})
                r.raise_for_status()
                ms.append((time.perf_counter() - t0) * 1e3)
            med = statistics.median(ms)
            target = 40 if "defaults" in name else 250
            rows.append(
                _row(
                    f"GET {name}, never-seen seed",
                    med,
                    "ms",
                    f"{n} requests, each a new seed; target median <= {target} ms",
                    percentile(ms, 0.99),
                )
            )
            sim_wall, sim_cpu = (statistics.median(x) for x in _in_process_sim_ms(path, query, seeds))
            rows.append(
                _row(
                    f"GET {name}: outside the simulation",
                    (med - sim_wall) / med,
                    "fraction",
                    f"(HTTP median - in-process simulation median {sim_wall:.1f} ms) / HTTP median, wall "
                    "clock; target <= 0.2",
                )
            )
            cpu = statistics.median(_body_cpu_ms(path, query, seeds))
            rows.append(
                _row(
                    f"{name}: CPU time to build the body",
                    cpu,
                    "ms",
                    f"in-process, simulation + serialisation, process CPU time (other load does not inflate "
                    f"it); the simulation alone {sim_cpu:.1f} ms, so {(cpu - sim_cpu) / cpu:.0%} outside it",
                )
            )
        for path in ("/api/batching", "/api/kv-cache"):
            gz = client.get(path, headers={"accept-encoding": "gzip"})
            plain = client.get(path, headers={"accept-encoding": "identity"})
            rows.append(
                _row(
                    f"{path} defaults on the wire, gzip",
                    int(gz.headers["content-length"]) / 1e3,
                    "KB",
                    f"uncompressed {int(plain.headers['content-length']) / 1e3:.1f} KB; target <= 40 KB",
                )
            )
    rows.append(_ten_thousand())
    return rows


def _ten_thousand() -> dict:
    from inside_llm.api import batching
    from inside_llm.sim.serve.simulate import simulate_batching

    eng = batching.engine(64)
    t0, c0 = time.perf_counter(), time.process_time()
    r = simulate_batching(
        rate=32.0,
        num_requests=10_000,
        seats=64,
        step_time=batching.clock(),
        kv_capacity_tokens=eng["kv_capacity_tokens"],
        max_frames=150,
    )
    s, cpu = time.perf_counter() - t0, time.process_time() - c0
    steps = sum(p.num_steps for p in r.policies)
    return _row(
        "batching_sim_10000_requests_32_per_s_64_seats",
        s,
        "s",
        f"in-process wall time (CPU time {cpu:.2f} s), both policies, the API's cost-model clock and KV "
        f"pool; {steps:,} engine steps; target <= 2 s",
    )


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:<70} {row['value']:>10,.3f} {row['unit']:<8} {row['note']}")
