"""Benchmark the real model (SmolLM2-135M-Instruct, numpy, float32) on this CPU, one BLAS thread.

run() -> rows of {"name", "value", "unit", "note"}; `python bench/bench_smollm.py` prints them.
Targets (issue 12): single-stream decode >= 15 tokens/s on one core; batch-8 decode >= 5x the batch-1
tokens/s; 64-token prefill <= 400 ms; load from the float32 cache <= 2 s; first dequantization <= 30 s;
RSS of the first worker <= 800 MB and <= 200 MB more for each further worker (memory-mapped weights).
Without the fetched model file it prints one row saying so. Timed figures are medians of 3 runs.
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from inside_llm import modelfile
from inside_llm.sim.model import smollm
from inside_llm.sim.model.transformer import KVCache

QUESTION = "What is the capital of France?"
DECODE_TOKENS = 32
PREFILL_TOKENS = 64

# A worker: load the model, answer once, report its memory (kB) from /proc; stays alive until told to go.
WORKER = r"""
import json, sys, time
t0 = time.perf_counter()
from inside_llm import modelfile
m = modelfile.served_smollm()
load_s = time.perf_counter() - t0
list(m.generate(m.chat_ids("What is the capital of France?"), 8))
mem = {}
for line in open("/proc/self/smaps_rollup"):
    k, _, v = line.partition(":")
    if k in ("Rss", "Pss", "Private_Clean", "Private_Dirty", "Shared_Clean", "Shared_Dirty"):
        mem[k] = int(v.split()[0])
print(json.dumps({"load_s": load_s, **mem}), flush=True)
sys.stdin.readline()
"""


def _row(name: str, value: float, unit: str, note: str) -> dict:
    return {"name": name, "value": round(float(value), 3), "unit": unit, "note": note}


def _median(fn, repeats: int = 3, clock=time.perf_counter) -> float:
    times = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times)


def _both(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of fn(), medians of 3. With one BLAS thread the CPU
    time is what one core spends; on a shared machine the wall time also holds the waits for a core."""
    return _median(fn), _median(fn, clock=time.process_time)


def _workers(n: int) -> list[dict]:
    """Start n workers one after another (each keeps running), return each one's report."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    procs, out = [], []
    try:
        for _ in range(n):
            p = subprocess.Popen(
                [sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
            )
            procs.append(p)
            out.append(json.loads(p.stdout.readline()))
    finally:
        for p in procs:
            p.communicate("\n", timeout=60)
    return out


def _batch_rate(m, ids: list[int], batch: int, clock, steps: int = 8) -> float:
    """Tokens per clock-second of decode_step_batch for `batch` sequences that each hold the prompt."""
    base = KVCache(m.config, capacity=len(ids) + 4 * steps)
    m.forward(ids, base, last_only=True)
    caches = [copy.deepcopy(base) for _ in range(batch)]
    m.decode_step_batch([ids[-1]] * batch, caches)  # warm
    return (
        batch
        * steps
        / _median(lambda: [m.decode_step_batch([ids[-1]] * batch, caches) for _ in range(steps)], clock=clock)
    )


def run() -> list[dict]:
    m = modelfile.served_smollm()
    if m is None:
        return [{"name": "smollm2 (absent)", "value": None, "unit": "", "note": modelfile.check_file().message()}]
    rows = []
    with tempfile.TemporaryDirectory(prefix="inside-llm-bench-") as tmp:
        t0 = time.perf_counter()
        smollm.build_f32_cache(modelfile.gguf_path(), Path(tmp) / "f32")
        rows.append(
            _row(
                "smollm2_first_dequantization",
                time.perf_counter() - t0,
                "s",
                "GGUF (Q4_1/Q8_0) -> float32 .npy panels + tokenizer.json, once per machine; target <= 30 s",
            )
        )
    w = _workers(2)
    rows += [
        _row(
            "smollm2_load_from_f32_cache",
            w[0]["load_s"],
            "s",
            "a fresh process: check the file, memory-map the float32 cache, read the tokenizer; target <= 2 s",
        ),
        _row(
            "smollm2_rss_first_worker",
            w[0]["Rss"] / 1024,
            "MB",
            f"after one short answer (PSS {w[0]['Pss'] / 1024:.0f} MB); target <= 800 MB",
        ),
        _row(
            "smollm2_rss_further_worker_private",
            (w[1]["Private_Clean"] + w[1]["Private_Dirty"]) / 1024,
            "MB",
            f"what a second worker adds: its private pages (its RSS {w[1]['Rss'] / 1024:.0f} MB is mostly "
            "the first worker's shared weight pages); target <= 200 MB",
        ),
    ]

    ids = m.chat_ids(QUESTION)
    cache = KVCache(m.config, capacity=len(ids) + DECODE_TOKENS + 1)
    m.forward(ids, cache, last_only=True)
    start = cache.num_tokens

    def decode() -> None:
        cache.truncate(start)
        for _ in range(DECODE_TOKENS):
            m.forward([504], cache, last_only=True)

    decode()  # touch every weight page once
    wall, cpu = _both(decode)
    rows += [
        _row(
            "smollm2_decode_single_stream",
            DECODE_TOKENS / wall,
            "tokens/s",
            f"one token per forward pass after the {len(ids)}-token chat prompt, KV cache on; target >= 15 on one core",
        ),
        _row(
            "smollm2_decode_single_stream_cpu",
            DECODE_TOKENS / cpu,
            "tokens/CPU-s",
            "the same, per second of this process's CPU time (one BLAS thread: one core's work)",
        ),
    ]
    prompt = (ids * (PREFILL_TOKENS // len(ids) + 1))[:PREFILL_TOKENS]
    wall, cpu = _both(lambda: m.forward(prompt, last_only=True))
    rows += [
        _row(
            "smollm2_prefill_64_tokens",
            1e3 * wall,
            "ms",
            f"{PREFILL_TOKENS}-token prompt in one forward pass (logits of the last); target <= 400 ms",
        ),
        _row("smollm2_prefill_64_tokens_cpu", 1e3 * cpu, "CPU-ms", "the same, in CPU time"),
    ]
    for clock, unit, tag in ((time.perf_counter, "tokens/s", ""), (time.process_time, "tokens/CPU-s", "_cpu")):
        b1 = _batch_rate(m, ids, 1, clock)
        b8 = _batch_rate(m, ids, 8, clock)
        rows += [
            _row(f"smollm2_batched_decode_b1{tag}", b1, unit, "decode_step_batch with one sequence"),
            _row(f"smollm2_batched_decode_b8{tag}", b8, unit, "8 sequences per step: each weight read serves 8"),
            _row(f"smollm2_batch8_over_batch1{tag}", b8 / b1, "x", "target >= 5"),
        ]
    return rows


if __name__ == "__main__":
    for row in run():
        v = "-" if row["value"] is None else f"{row['value']:>10.3f}"
        print(f"{row['name']:<40} {v} {row['unit']:<9} {row['note']}")
