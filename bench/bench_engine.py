"""Benchmark the serving engine (engine.py) on the real model: continuous batching over paged keys and values.

run() -> rows of {"name", "value", "unit", "note"}; `python bench/bench_engine.py` prints them.
Targets (issue 18): aggregate decode throughput with 8 chats >= 4x one chat's; each of 8 chats >= 8 tokens/s;
time to first token of a new 64-token chat while 7 others decode <= 1 s; RSS flat over 1,000 short chats, with
every page back in the pool at the end.

The decode and first-token rows drive the engine's steps on this thread (engine.step(), the loop's own body), so
they time exactly the steps and can be read in CPU time too: on a shared machine the wall clock also holds the
waits for a core. The 1,000 chats go through the loop thread and the streams, as /api/generate uses them.
Answers here never stop early: the stop token is switched off so that every chat writes its full length.
"""

from __future__ import annotations

import os
import statistics
import time

from inside_llm import modelfile
from inside_llm.api.engine import DEMO_QUESTIONS as QUESTIONS  # the live demo's own questions
from inside_llm.engine import Engine, EngineLimits

DECODE_STEPS = 16
PROMPT_TOKENS = 64
CHATS = 1000
SHORT_TOKENS = 4


def _row(name: str, value: float, unit: str, note: str) -> dict:
    return {"name": name, "value": round(float(value), 3), "unit": unit, "note": note}


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _manual(m, **limits) -> Engine:
    """An engine whose steps this thread drives (no loop thread), writing to full length (no stop token)."""
    eng = Engine(m, EngineLimits(**limits))
    eng._ensure_thread = lambda: None
    eng.stop_ids = frozenset()
    return eng


def _prompt(m, k: int, n: int) -> list[int]:
    """Chat k's prompt cut or repeated to n tokens."""
    ids = m.chat_ids(QUESTIONS[k % len(QUESTIONS)])
    return (ids * (n // len(ids) + 1))[:n]


def _decode_rate(m, chats: int) -> tuple[float, float]:
    """(tokens/s, tokens/CPU-s) of DECODE_STEPS engine steps with `chats` chats all decoding."""
    eng = _manual(m)
    for k in range(chats):
        eng.submit(_prompt(m, k, PROMPT_TOKENS), DECODE_STEPS + 8, client=f"c{k}")
    while any(s.state != "decode" for s in eng.running) or eng.waiting:
        eng.step()
    eng.step()  # warm
    walls, cpus = [], []
    for _ in range(3):
        t0, c0, n = time.perf_counter(), time.process_time(), 0
        for _ in range(DECODE_STEPS // 3):
            n += eng.step()
        walls.append(n / (time.perf_counter() - t0))
        cpus.append(n / max(1e-9, time.process_time() - c0))
    return statistics.median(walls), statistics.median(cpus)


def _ttft(m) -> tuple[float, float, int]:
    """(wall s, CPU s, steps) from submitting a 64-token chat to its first token while 7 chats decode."""
    eng = _manual(m)
    for k in range(7):
        eng.submit(_prompt(m, k, PROMPT_TOKENS), 200, client=f"c{k}")
    while any(s.state != "decode" for s in eng.running) or eng.waiting:
        eng.step()
    eng.step()
    t0, c0 = time.perf_counter(), time.process_time()
    stream = eng.submit(_prompt(m, 7, PROMPT_TOKENS), 8, client="new")
    steps = 0
    while stream.seq.state != "decode" or not stream.seq.out:
        eng.step()
        steps += 1
    return time.perf_counter() - t0, time.process_time() - c0, steps


def _many(m) -> dict:
    """CHATS short chats, 8 at a time through the loop thread; RSS every 100; pages free at the end."""
    eng = Engine(m)
    samples, t0 = [], time.perf_counter()
    done = 0
    while done < CHATS:
        streams = [
            eng.submit(m.encode(QUESTIONS[(done + k) % len(QUESTIONS)]), SHORT_TOKENS, client=f"c{k}")
            for k in range(min(8, CHATS - done))
        ]
        for s in streams:
            for _ in s:
                pass
        if (done + len(streams)) // 100 > done // 100 or done + len(streams) == CHATS:
            samples.append(_rss_mb())
        done += len(streams)
    wall = time.perf_counter() - t0
    snap = eng.snapshot()
    eng.close()
    pool_mb = snap["pages"] * snap["page_tokens"] * snap["bytes_per_token"] / 2**20
    return {
        "pool_mb": pool_mb,
        "rss": samples,
        "wall": wall,
        "free": eng.store.pool.num_free_blocks,
        "pages": snap["pages"],
        "finished": snap["finished"],
        "in_use": snap["pages_in_use"],
    }


def run() -> list[dict]:
    m = modelfile.served_smollm()
    if m is None:
        return [{"name": "engine (model absent)", "value": None, "unit": "", "note": modelfile.check_file().message()}]
    load = f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    rows = []
    one, one_cpu = _decode_rate(m, 1)
    eight, eight_cpu = _decode_rate(m, 8)
    rows += [
        _row(
            "engine_decode_1_chat", one, "tokens/s", f"one chat decoding after a {PROMPT_TOKENS}-token prompt; {load}"
        ),
        _row("engine_decode_8_chats", eight, "tokens/s", "8 chats decoding, one engine step writes a token for each"),
        _row("engine_decode_8_over_1", eight / one, "x", "target >= 4"),
        _row("engine_decode_per_chat_of_8", eight / 8, "tokens/s", "each of the 8; target >= 8"),
        _row("engine_decode_1_chat_cpu", one_cpu, "tokens/CPU-s", "the same, per second of this process's CPU"),
        _row("engine_decode_8_chats_cpu", eight_cpu, "tokens/CPU-s", "one BLAS thread: one core's own work"),
        _row("engine_decode_8_over_1_cpu", eight_cpu / one_cpu, "x", "target >= 4"),
        _row("engine_decode_per_chat_of_8_cpu", eight_cpu / 8, "tokens/CPU-s", "target >= 8"),
    ]
    wall, cpu, steps = _ttft(m)
    rows += [
        _row(
            "engine_ttft_new_chat_with_7_running",
            wall,
            "s",
            f"a {PROMPT_TOKENS}-token chat arrives while 7 decode; its prompt goes in {steps} steps "
            "beside their tokens; target <= 1 s",
        ),
        _row("engine_ttft_new_chat_with_7_running_cpu", cpu, "CPU-s", "the same, in CPU time"),
    ]
    r = _many(m)
    rows += [
        _row("engine_1000_chats_rss_first", r["rss"][0], "MB", "process RSS after the first 100 short chats"),
        _row(
            "engine_1000_chats_rss_last",
            r["rss"][-1],
            "MB",
            f"after all {r['finished']}; samples every 100: {', '.join(f'{x:.0f}' for x in r['rss'])}",
        ),
        _row(
            "engine_1000_chats_rss_growth",
            r["rss"][-1] - r["rss"][0],
            "MB",
            f"first to last sample; the key/value pool ({r['pool_mb']:.0f} MB) is np.zeros, mapped as its pages are "
            "first written, so RSS climbs until every page has been used once",
        ),
        _row(
            "engine_1000_chats_rss_growth_last_700",
            r["rss"][-1] - r["rss"][2],
            "MB",
            "after chat 300 (every page used by then); target: flat",
        ),
        _row(
            "engine_1000_chats_pages_free",
            r["free"],
            "pages",
            f"of {r['pages']} at the end (in use: {r['in_use']}); target: all",
        ),
        _row("engine_1000_chats_wall", r["wall"], "s", f"{CHATS} chats of {SHORT_TOKENS} tokens, 8 at a time"),
    ]
    return rows


if __name__ == "__main__":
    for row in run():
        v = "-" if row["value"] is None else f"{row['value']:>10.3f}"
        print(f"{row['name']:<42} {v} {row['unit']:<12} {row['note']}")
