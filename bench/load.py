"""Load test on loopback: `inside-llm serve --workers N` started here on a free port, hit by CONNECTIONS
keep-alive connections over a mix of endpoints, pages, static files and ETag revalidations.

    python bench/load.py [--workers 1] [--connections 64] [--seconds 30] [--memory-requests 100000]
                         [--compare-workers 1,2 --compare-seconds 10]

Phases: (1) `--seconds` of load: requests/s, errors, p50/p99; (2) keep going until `--memory-requests`
requests in all, sampling the server's RSS (all its workers) every second: start, end, peak; (3) the same
load for `--compare-seconds` at each worker count, for requests/s per worker count. Bounded in requests and
time; the server is stopped at the end. The client is a minimal asyncio HTTP/1.1 client (no dependencies),
so it costs the server's cores little. On a 2-core machine the client and server share the cores.

run() -> rows (for bench/run.py); main() prints them.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _server import cpu_s, percentile, rss_mb, serve, server_pids  # noqa: E402

# (path, extra headers): chapter endpoints at defaults and presets, pages, static files, a revalidation.
MIX = [
    ("/api/tokens", ""),
    ("/api/tokens?text=Hello%20world&encoding=llama3", ""),
    ("/api/embeddings", ""),
    ("/api/layer", ""),
    ("/api/gpu", ""),
    ("/api/gpu?batch=64", ""),
    ("/api/roofline", ""),
    ("/api/roofline?batch=256", ""),
    ("/api/kv-cache", ""),
    ("/api/batching", ""),
    ("/api/quantization", ""),
    ("/api/speculative", ""),
    ("/api/parallelism", ""),
    ("/api/dials", ""),
    ("/api/dials?batch=64&prompt_tokens=4096", ""),
    ("/api/catalog", ""),
    ("/healthz", ""),
    ("/tour/roofline", ""),
    ("/embed/kv-cache", ""),
    ("/static/js/tour.js", ""),
    ("/api/gpu", "etag"),
]
DEADLINE_S = 60.0  # a single request slower than this counts as an error


class Stats:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors: dict[str, int] = {}
        self.count = 0
        self.client_cpu_s = 0.0  # this process's CPU time during the phase (the client shares the cores)

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


async def _request(reader, writer, host: str, path: str, headers: str) -> int:
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{headers}\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.lower() == "content-length":
            length = int(value)
        elif name.lower() == "transfer-encoding":
            raise RuntimeError("chunked responses are not expected from this mix")
    if length:
        await reader.readexactly(length)
    return status


async def _etags(host: str, port: int) -> dict[str, str]:
    """ETags of the paths revalidated with If-None-Match (one fetch each)."""
    out = {}
    for path, kind in MIX:
        if kind == "etag" and path not in out:
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            await writer.drain()
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            out[path] = next(ln.split(":", 1)[1].strip() for ln in head.split("\r\n") if ln.lower().startswith("etag:"))
            writer.close()
    return out


async def _worker(
    i: int, host: str, port: int, stop_at: float, budget: list[int], stats: Stats, etags: dict[str, str]
) -> None:
    reader = writer = None
    k = i
    while time.monotonic() < stop_at and budget[0] > 0:
        budget[0] -= 1
        path, kind = MIX[k % len(MIX)]
        k += 7  # connections walk the mix at different offsets
        extra = f"If-None-Match: {etags[path]}\r\n" if kind == "etag" else ""
        t0 = time.perf_counter()
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(host, port)
            status = await asyncio.wait_for(_request(reader, writer, host, path, extra), DEADLINE_S)
            ok = status == (304 if kind == "etag" else 200)
            if not ok:
                stats.error(f"{status} {path}")
        except (TimeoutError, OSError, asyncio.IncompleteReadError, RuntimeError, ValueError) as e:
            stats.error(f"{type(e).__name__} {path}")
            if writer is not None:
                writer.close()
            reader = writer = None
            continue
        stats.latencies.append((time.perf_counter() - t0) * 1e3)
        stats.count += 1
    if writer is not None:
        writer.close()


async def _load(base: str, connections: int, seconds: float, max_requests: int, on_tick=None) -> tuple[Stats, float]:
    host, port = base.removeprefix("http://").split(":")
    port = int(port)
    etags = await _etags(host, port)
    stats, budget = Stats(), [max_requests]
    cpu0 = time.process_time()
    t0 = time.monotonic()
    stop_at = t0 + seconds
    tasks = [asyncio.create_task(_worker(i, host, port, stop_at, budget, stats, etags)) for i in range(connections)]
    while not all(t.done() for t in tasks):
        await asyncio.sleep(1.0)
        if on_tick:
            on_tick(stats)
    await asyncio.gather(*tasks)
    stats.client_cpu_s = time.process_time() - cpu0
    return stats, time.monotonic() - t0


def _warm(base: str) -> None:
    """One request per path first, so the timed phases do not include start-up work."""
    import urllib.request

    for path, _ in MIX:
        with urllib.request.urlopen(base + path, timeout=120) as r:
            r.read()


def _summary(name: str, stats: Stats, secs: float, workers: int, connections: int, server_cpu: float) -> list[dict]:
    lat = stats.latencies
    errors = sum(stats.errors.values())
    tag = f"{workers} worker(s), {connections} connections"
    return [
        {
            "name": f"{name}_requests_per_s",
            "value": round(stats.count / secs, 1),
            "unit": "req/s",
            "note": f"{stats.count:,} requests in {secs:.1f} s; {tag}; server used {server_cpu / secs:.2f} cores, "
            f"client {stats.client_cpu_s / secs:.2f}",
        },
        {
            "name": f"{name}_latency",
            "value": round(statistics.median(lat), 2) if lat else None,
            "p99": round(percentile(lat, 0.99), 2),
            "unit": "ms",
            "note": f"p50 / p99 over the mix; {tag}",
        },
        {
            "name": f"{name}_errors",
            "value": errors,
            "unit": "requests",
            "note": ", ".join(f"{k}: {v}" for k, v in sorted(stats.errors.items())[:5]) or "none",
        },
    ]


def run(
    workers: int = 1,
    connections: int = 64,
    seconds: float = 30.0,
    memory_requests: int = 100_000,
    compare: tuple[int, ...] = (1, 2),
    compare_seconds: float = 10.0,
) -> list[dict]:
    rows = []
    with serve(workers=workers) as (base, proc):
        _warm(base)
        pids = server_pids(proc)
        cpu0 = cpu_s(pids)
        stats, secs = asyncio.run(_load(base, connections, seconds, 10**9))
        rows += _summary("load", stats, secs, workers, connections, cpu_s(pids) - cpu0)
        samples = [rss_mb(pids)]
        left = max(0, memory_requests - stats.count)
        more, secs2 = asyncio.run(
            _load(base, connections, 3600.0, left, on_tick=lambda s: samples.append(rss_mb(pids)))
        )
        samples.append(rss_mb(pids))
        total = stats.count + more.count
        rows.append(
            {
                "name": "memory_rss_start",
                "value": round(samples[0], 1),
                "unit": "MB",
                "note": f"server RSS ({len(pids)} process(es)) after the 30 s phase",
            }
        )
        rows.append(
            {
                "name": "memory_rss_end",
                "value": round(samples[-1], 1),
                "unit": "MB",
                "note": f"after {total:,} requests in all; peak {max(samples):.1f} MB; {len(samples)} samples",
            }
        )
        rows.append(
            {
                "name": "memory_phase_errors",
                "value": sum(more.errors.values()),
                "unit": "requests",
                "note": f"{more.count:,} requests at {more.count / secs2:.0f} req/s",
            }
        )
    for n in compare:
        with serve(workers=n) as (base, proc):
            _warm(base)
            pids = server_pids(proc)
            cpu0 = cpu_s(pids)
            stats, secs = asyncio.run(_load(base, connections, compare_seconds, 10**9))
            used = cpu_s(pids) - cpu0
        rows += _summary(f"workers_{n}", stats, secs, n, connections, used)
    return rows


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--memory-requests", type=int, default=100_000)
    ap.add_argument("--compare-workers", default="1,2", help="worker counts compared for throughput ('' = none)")
    ap.add_argument("--compare-seconds", type=float, default=10.0)
    a = ap.parse_args(argv)
    compare = tuple(int(x) for x in a.compare_workers.split(",") if x)
    rows = run(a.workers, a.connections, a.seconds, a.memory_requests, compare, a.compare_seconds)
    for r in rows:
        p99 = f"{r['p99']:>9}" if "p99" in r else " " * 9
        print(f"{r['name']:<28} {r['value']!s:>10} {p99} {r['unit']:<9} {r['note']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
