"""Benchmark the serving engine (engine.py) on the real model: continuous batching over paged keys and values.

run() -> rows of {"name", "value", "unit", "note"}; `python bench/bench_engine.py` prints them.
Targets (issue 18): aggregate decode throughput with 8 chats >= 4x one chat's; each of 8 chats >= 8 tokens/s;
time to first token of a new 64-token chat while 7 others decode <= 1 s; RSS flat over 1,000 short chats, with
every page back in the pool at the end.

Prefix caching (issue 24): the time to first token of a chat alone in the engine, on an engine that has served
one chat before it, with the prefix cache (a new question finds the chat template's first page; the same
question again finds its first two) and without it (EngineLimits(prefix_caching=False)): steps, wall and CPU
seconds, and their ratio within this run. `python bench/bench_engine.py prefix` prints these rows only.

The decode and first-token rows drive the engine's steps on this thread (engine.step(), the loop's own body), so
they time exactly the steps and can be read in CPU time too: on a shared machine the wall clock also holds the
waits for a core. The 1,000 chats go through the loop thread and the streams, as /api/generate uses them.
Answers here never stop early: the stop token is switched off so that every chat writes its full length.

The same 8-chat load also goes over HTTP to a fresh `inside-llm serve` (bench/_server.py), once through
GET /api/generate (the tour's events) and once through POST /v1/chat/completions (the official `openai` client,
streamed), each chat from its own loopback address (127.0.0.2-9: 8 visitors, as the fair share sees them): the two
rows of tokens/s and time to first token are printed side by side, their ratio within this run, and whether the
16 answers are the same 8 (both are greedy on one engine). These answers do stop at <|im_end|>.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

from inside_llm import modelfile
from inside_llm.api.engine import DEMO_QUESTIONS as QUESTIONS  # the live demo's own questions
from inside_llm.live import Engine, EngineLimits

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _server import cpu_s, serve, server_pids  # noqa: E402

DECODE_STEPS = 16
HTTP_CHATS = 8
HTTP_TOKENS = 32
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


def _first_token(eng, ids) -> tuple[float, float, int, int]:
    """(wall s, CPU s, steps, prompt tokens found cached) from submitting ids alone to its first token."""
    t0, c0 = time.perf_counter(), time.process_time()
    stream = eng.submit(ids, 2, client="ttft")
    steps = 0
    while not stream.seq.out:
        eng.step()
        steps += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    while eng.chats:
        eng.step()
    return wall, cpu, steps, stream.seq.prefix_hit_tokens


def _prefix_rows(m) -> list[dict]:
    """First token of a chat after one earlier chat, with and without the prefix cache (median of 5 rounds)."""
    cases = {"new_question": (0, 1), "same_question": (0, 0)}  # (earlier chat, timed chat) question numbers
    got: dict = {}
    for caching in (True, False):
        for name, (before, timed) in cases.items():
            runs = []
            for _ in range(5):
                eng = _manual(m, prefix_caching=caching)
                _first_token(eng, m.chat_ids(QUESTIONS[before]))  # the earlier visitor (and a warm-up)
                runs.append(_first_token(eng, m.chat_ids(QUESTIONS[timed])))
            got[caching, name] = [statistics.median(r[i] for r in runs) for i in range(4)]
    rows = []
    for name in cases:
        hit, miss = got[True, name], got[False, name]
        n = len(m.chat_ids(QUESTIONS[cases[name][1]]))
        rows += [
            _row(
                f"engine_prefix_ttft_{name}_hit",
                hit[0],
                "s",
                f"alone, {n}-token prompt, {hit[3]:.0f} found cached: first token after {hit[2]:.0f} steps",
            ),
            _row(f"engine_prefix_ttft_{name}_miss", miss[0], "s", f"no prefix cache: {miss[2]:.0f} steps"),
            _row(f"engine_prefix_ttft_{name}_miss_over_hit", miss[0] / hit[0], "x", "same run, wall"),
            _row(f"engine_prefix_ttft_{name}_miss_over_hit_cpu", miss[1] / hit[1], "x", "same run, CPU time"),
        ]
    return rows


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


def _http_client(k: int) -> httpx.Client:
    """Chat k's own loopback address (the fair share counts chats per address)."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=f"127.0.0.{k + 2}"), timeout=300)


def _via_generate(base: str, k: int) -> tuple[str, float, int]:
    """(answer, seconds to its first token, tokens) of chat k through GET /api/generate."""
    q = {"prompt": QUESTIONS[k % len(QUESTIONS)], "max_tokens": HTTP_TOKENS, "temperature": 0, "model": "smollm2"}
    text, first, n, t0 = [], None, 0, time.perf_counter()
    with _http_client(k) as c, c.stream("GET", f"{base}/api/generate", params=q) as r:
        event = None
        for line in r.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "token":
                first = first or time.perf_counter() - t0
                text.append(json.loads(line[6:])["text"])
                n += 1
    return "".join(text), first or float("nan"), n


def _via_v1(base: str, k: int) -> tuple[str, float, int]:
    """(answer, seconds to its first token, tokens shown) of chat k through POST /v1/chat/completions."""
    import openai

    c = openai.OpenAI(base_url=f"{base}/v1", api_key="none", http_client=_http_client(k), max_retries=0)
    text, first, n, t0 = [], None, 0, time.perf_counter()
    stream = c.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": QUESTIONS[k % len(QUESTIONS)]}],
        max_tokens=HTTP_TOKENS,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    stopped = False
    for chunk in stream:
        if chunk.usage:  # completion_tokens counts the stop token, as vLLM does; /api/generate's events do not
            n = chunk.usage.completion_tokens - stopped
        elif chunk.choices[0].finish_reason:
            stopped = chunk.choices[0].finish_reason == "stop"
        elif chunk.choices[0].delta.content:
            first = first or time.perf_counter() - t0
            text.append(chunk.choices[0].delta.content)
    return "".join(text), first or float("nan"), n


def _http_load(base: str, one, pids: list[int]) -> dict:
    """HTTP_CHATS chats at once through `one`: tokens/s over the batch (wall, and per CPU-second of the server's
    processes), median time to first token, answers."""
    out: list = [None] * HTTP_CHATS
    c0 = cpu_s(pids)

    def work(k: int) -> None:
        out[k] = one(base, k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(HTTP_CHATS)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    wall = time.perf_counter() - t0
    tokens, cpu = sum(o[2] for o in out), cpu_s(pids) - c0
    return {
        "tokens_per_s": tokens / wall,
        "tokens_per_cpu_s": tokens / max(cpu, 1e-9),
        "ttft": statistics.median(o[1] for o in out),
        "answers": [o[0] for o in out],
    }


def _http_rows() -> list[dict]:
    with serve() as (base, proc):
        httpx.get(f"{base}/api/engine", timeout=300)  # loads the model before either load is timed
        _via_generate(base, 0)  # warm: the first chat pays for page faults in the weights
        pids = server_pids(proc)
        gen = _http_load(base, _via_generate, pids)
        v1 = _http_load(base, _via_v1, pids)
    same = sum(a == b for a, b in zip(gen["answers"], v1["answers"]))
    note = f"{HTTP_CHATS} chats at once, greedy, at most {HTTP_TOKENS} tokens each, one loopback address each"
    return [
        _row("engine_http_8_chats_api_generate", gen["tokens_per_s"], "tokens/s", f"GET /api/generate: {note}"),
        _row("engine_http_8_chats_v1_chat", v1["tokens_per_s"], "tokens/s", "POST /v1/chat/completions, streamed"),
        _row("engine_http_8_chats_v1_over_generate", v1["tokens_per_s"] / gen["tokens_per_s"], "x", "same run"),
        _row(
            "engine_http_8_chats_api_generate_cpu", gen["tokens_per_cpu_s"], "tokens/CPU-s", "per CPU-s of the server"
        ),
        _row("engine_http_8_chats_v1_chat_cpu", v1["tokens_per_cpu_s"], "tokens/CPU-s", "per CPU-s of the server"),
        _row(
            "engine_http_8_chats_v1_over_generate_cpu",
            v1["tokens_per_cpu_s"] / gen["tokens_per_cpu_s"],
            "x",
            "same run; the figure to read on a shared machine",
        ),
        _row("engine_http_8_chats_ttft_api_generate", gen["ttft"], "s", "median over the 8, client side"),
        _row("engine_http_8_chats_ttft_v1_chat", v1["ttft"], "s", "median over the 8, client side"),
        _row("engine_http_8_chats_same_answers", same, "chats", f"of {HTTP_CHATS}: /v1's text equals /api/generate's"),
    ]


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
    rows += _prefix_rows(m)
    rows += _http_rows()
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
    only_prefix = sys.argv[1:] == ["prefix"]
    for row in _prefix_rows(modelfile.served_smollm()) if only_prefix else run():
        v = "-" if row["value"] is None else f"{row['value']:>10.3f}"
        print(f"{row['name']:<42} {v} {row['unit']:<12} {row['note']}")
