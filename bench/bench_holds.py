"""The server holds (issue 23): what a fresh `inside-llm serve` does when many visitors arrive at once.

Scenario `chats_64_addresses`: 64 chats start at once, each from its own loopback source address
(127.0.0.2 to 127.0.0.65: the client socket is bound to it, so the server sees 64 clients without trusting
any forwarded header). Each asks /api/generate for MAX_TOKENS tokens (model=auto: SmolLM2 when fetched) and
reads its stream to the end. Figures: chats accepted (200), refused (429), errors (any other status, a
network error, or an accepted stream that ends without its `done` event), and 429s sent while a seat or a
place in the queue was still free (every refusal must say that all seats and the whole queue are taken).
The engine's capacity (seats + queue) is read from the same server's GET /api/engine.

Scenario `model_work_beside_a_chat` (issue 23's M4): one chat's decode speed alone, then beside 16 clients that
loop on /api/embeddings and /api/layer with prompts no cache has seen (every request a forward pass of the
served model). Those requests are model jobs (model_work.py) that take turns with the engine's steps; over the
queue's bound they get a 429, and these clients wait its Retry-After (as a page does) before asking again.
Figure: the chat's decode tokens/s under load / idle, in the same run (goal >= 0.5).

Scenario `tokens_16_hostile` (issue 23's H1): 16 POST /api/tokens of 100,000 emoji at once while /healthz is
probed every 50 ms: its p90 under that load beside idle (goal < 50 ms), and how the 16 were answered.

More scenarios go in SCENARIOS (each a function of the base URL returning rows); the server is started once.
run() -> rows; `python bench/bench_holds.py` prints them.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
from _server import percentile, serve

CLIENTS = 64
MAX_TOKENS = 8
STREAM_DEADLINE_S = 300.0  # one chat's whole stream, queue included; past it, it counts as an error
FULL = "seats and all"  # what a 429 says when every seat and the whole queue are taken (engine.QueueFull)


def _row(name: str, value, unit: str, note: str, p99=None) -> dict:
    row = {"name": name, "value": value, "unit": unit, "note": note}
    if p99 is not None:
        row["p99"] = p99
    return row


async def _chat(base: str, k: int, start: asyncio.Event) -> dict:
    """One chat from source address 127.0.0.(k + 2): its status, whether it ended with `done`, its timings."""
    source = f"127.0.0.{k + 2}"
    transport = httpx.AsyncHTTPTransport(local_address=source)
    params = {"prompt": f"Say a word about the number {k}.", "max_tokens": MAX_TOKENS}
    out = {"source": source, "status": None, "done": False, "detail": "", "ttft_s": None, "total_s": None}
    async with httpx.AsyncClient(base_url=base, transport=transport, timeout=STREAM_DEADLINE_S) as client:
        await start.wait()
        t0 = time.perf_counter()
        try:
            async with client.stream("GET", "/api/generate", params=params) as r:
                out["status"] = r.status_code
                if r.status_code != 200:
                    out["detail"] = json.loads(await r.aread()).get("detail", "")
                    return out
                event = ""
                async for line in r.aiter_lines():
                    if line.startswith("event:"):
                        event = line[6:].strip()
                        if event == "token" and out["ttft_s"] is None:
                            out["ttft_s"] = time.perf_counter() - t0
                        out["done"] = out["done"] or event == "done"
            out["total_s"] = time.perf_counter() - t0
        except (httpx.HTTPError, OSError, ValueError) as e:
            out["detail"] = f"{type(e).__name__}: {e}"
    return out


async def _burst(base: str) -> list[dict]:
    start = asyncio.Event()
    tasks = [asyncio.create_task(_chat(base, k, start)) for k in range(CLIENTS)]
    await asyncio.sleep(0.5)  # every client has its connection pool ready; then all at once
    start.set()
    return await asyncio.gather(*tasks)


def chats_64_addresses(base: str) -> list[dict]:
    snap = httpx.get(base + "/api/engine", timeout=120).json()  # the first call loads the model
    capacity = snap["seats"] + snap["queue_limit"]
    t0 = time.perf_counter()
    got = asyncio.run(_burst(base))
    wall = time.perf_counter() - t0
    accepted = [g for g in got if g["status"] == 200]
    refused = [g for g in got if g["status"] == 429]
    errors = [g for g in got if g["status"] not in (200, 429) or (g["status"] == 200 and not g["done"])]
    early = [g for g in refused if FULL not in g["detail"]]
    after = httpx.get(base + "/api/engine", timeout=30).json()
    ttft = [g["ttft_s"] for g in accepted if g["ttft_s"] is not None]
    where = f"{CLIENTS} chats at once from 127.0.0.2-{CLIENTS + 1}, max_tokens {MAX_TOKENS}, model {snap['model']}"
    return [
        _row("chats_accepted", len(accepted), "chats", f"{where}; capacity {capacity} (seats + queue) in flight"),
        _row("chats_refused_429", len(refused), "chats", "each must say every seat and the whole queue are taken"),
        _row("refused_below_capacity", len(early), "chats", "429s that did not say seats + queue were full (goal 0)"),
        _row(
            "errors",
            len(errors),
            "chats",
            "other status, network error, or a 200 stream without `done` (goal 0)"
            + (f"; first: {errors[0]['status']} {errors[0]['detail'][:80]}" if errors else ""),
        ),
        _row("accepted_ended_with_done", sum(g["done"] for g in accepted), "chats", "of the accepted (goal: all)"),
        _row(
            "ttft_accepted",
            round(percentile(ttft, 0.5), 3) if ttft else None,
            "s",
            "time to first token of the accepted chats, queue included",
            p99=round(percentile(ttft, 0.99), 3) if ttft else None,
        ),
        _row("burst_wall", round(wall, 2), "s", "from the burst to the last stream's end"),
        _row(
            "engine_after",
            after["seats_in_use"] + after["queued"] + after["pages_in_use"],
            "seats+queued+pages",
            "left held after every stream ended (goal 0)",
        ),
    ]


CHAT_PROMPT = "Write a long story about a lighthouse keeper and a storm."
CHAT_TOKENS = 64
LOAD_CLIENTS = 16


async def _one_chat(client: httpx.AsyncClient) -> dict:
    """One chat's `done` event (decode_tokens_per_s, num_tokens, ...)."""
    params = {"prompt": CHAT_PROMPT, "max_tokens": CHAT_TOKENS, "model": "auto"}
    async with client.stream("GET", "/api/generate", params=params) as r:
        r.raise_for_status()
        event = ""
        async for line in r.aiter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event == "done":
                return json.loads(line[5:])
    raise RuntimeError("the chat ended without `done`")


async def _model_load(base: str, k: int, stop: asyncio.Event, seen: dict) -> None:
    """One visitor on chapters 2 and 3 with fresh prompts; a 429 is waited out for its Retry-After."""
    async with httpx.AsyncClient(base_url=base, timeout=120) as client:
        n = 0
        while not stop.is_set():
            n += 1
            word = f"word{k}x{n}x{time.monotonic_ns() % 100000}"
            path, params = (
                ("/api/embeddings", {"prompt": f"The {word} is"})
                if n % 2
                else ("/api/layer", {"prompt": f"A {word} was", "layer": n % 3})
            )
            try:
                r = await client.get(path, params=params)
            except httpx.HTTPError:
                seen["errors"] += 1
                continue
            seen[r.status_code] = seen.get(r.status_code, 0) + 1
            if r.status_code == 429:
                await asyncio.sleep(float(r.headers.get("retry-after", "1")))


async def _beside(base: str) -> tuple[list[dict], list[dict], dict]:
    async with httpx.AsyncClient(base_url=base, timeout=300) as client:
        idle = [await _one_chat(client) for _ in range(2)]
        stop, seen = asyncio.Event(), {"errors": 0}
        load = [asyncio.create_task(_model_load(base, k, stop, seen)) for k in range(LOAD_CLIENTS)]
        await asyncio.sleep(3)  # the load is running before the chats start
        busy = [await _one_chat(client) for _ in range(2)]
        stop.set()
        await asyncio.gather(*load)
    return idle, busy, seen


def model_work_beside_a_chat(base: str) -> list[dict]:
    httpx.get(base + "/api/embeddings", params={"prompt": "warm up"}, timeout=300)  # the first call loads the model
    idle, busy, seen = asyncio.run(_beside(base))
    speed = lambda runs: max(r["decode_tokens_per_s"] for r in runs)  # noqa: E731 - the better of two chats
    ratio = speed(busy) / speed(idle)
    where = f"one chat of {CHAT_TOKENS} tokens, {LOAD_CLIENTS} clients on /api/embeddings + /api/layer (fresh prompts)"
    return [
        _row("chat_decode_idle", round(speed(idle), 2), "tokens/s", f"{where}: the chat alone (better of 2)"),
        _row("chat_decode_under_model_load", round(speed(busy), 2), "tokens/s", "the same chat beside the load"),
        _row("chat_decode_load_over_idle", round(ratio, 3), "x", "under load / idle, same run (goal >= 0.5)"),
        _row(
            "model_requests",
            sum(v for k, v in seen.items() if k != "errors"),
            "requests",
            f"answered while the chats ran: {seen.get(200, 0)} x 200, {seen.get(429, 0)} x 429 (Retry-After waited), "
            f"{seen['errors']} network errors, others {sum(v for k, v in seen.items() if k not in (200, 429, 'errors'))}",
        ),
    ]


def _healthz_ms(base: str, n: int, every_s: float, stop=None) -> list[float]:
    """/healthz latencies (ms) from one keep-alive client: n probes, or until stop is set."""
    out = []
    with httpx.Client(base_url=base, timeout=60) as c:
        while len(out) < n and not (stop is not None and stop.is_set()):
            t0 = time.perf_counter()
            c.get("/healthz")
            out.append(1e3 * (time.perf_counter() - t0))
            time.sleep(every_s)
    return out


def tokens_16_hostile(base: str) -> list[dict]:
    """Issue 23's H1: 16 POST /api/tokens of 100,000 emoji each (400 KB, inside both caps) at once, /healthz
    probed every 50 ms meanwhile: its p90 under that load beside its p90 idle on the same server (goal: under
    50 ms under load), and how the 16 were answered (two run at once, the rest a 429 at once)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    body = json.dumps({"text": "\U0001f999" * 100_000}, ensure_ascii=False).encode()
    headers = {"content-type": "application/json", "accept-encoding": "gzip"}
    idle = _healthz_ms(base, 60, 0.02)

    def post(_):
        with httpx.Client(base_url=base, timeout=300) as one:
            return one.post("/api/tokens", content=body, headers=headers).status_code

    stop = threading.Event()
    with ThreadPoolExecutor(17) as pool:
        probe = pool.submit(_healthz_ms, base, 10_000, 0.05, stop)
        codes = list(pool.map(post, range(16)))
        stop.set()
        loaded = probe.result()
    p_idle, p_load = percentile(idle, 0.9), percentile(loaded, 0.9)
    return [
        _row("tokens_16_hostile.healthz_p90_idle_ms", round(p_idle, 1), "ms", "/healthz alone, same server"),
        _row(
            "tokens_16_hostile.healthz_p90_ms",
            round(p_load, 1),
            "ms",
            f"/healthz while 16 x 100,000-emoji POST /api/tokens run (goal < 50 ms; {len(loaded)} probes)",
            p99=round(percentile(loaded, 0.99), 1),
        ),
        _row(
            "tokens_16_hostile.answers",
            f"{codes.count(200)} x 200, {codes.count(429)} x 429, {len(codes) - codes.count(200) - codes.count(429)} other",
            "",
            "the 16 POSTs: two run at once, the rest refused at once",
        ),
    ]


SCENARIOS = [chats_64_addresses, model_work_beside_a_chat, tokens_16_hostile]


def run() -> list[dict]:
    rows = []
    with serve() as (base, _proc):
        for scenario in SCENARIOS:
            rows += scenario(base)
    return rows


if __name__ == "__main__":
    for r in run():
        print(r)
