"""The real model against this CPU's memory roof: `python bench/run.py roof` (issue 25).

Every figure is printed beside this machine's read bandwidth measured in the same run and the weight bytes
one decode step actually reads, so a loaded machine shows up as a low roof, not as a slow kernel:

- roof: float32 GEMV over the tied head (113 MB, x[1,576] @ W[576,49152]), one thread and two (two Python
  threads, each half the columns; numpy releases the GIL); the best of 5;
- decode: the float32 reference (16-column panels, OpenBLAS, one thread: what the server ran before) and the
  served int8 form (sim/model/q8.py, numba on all threads, and pinned to one), each at batch 1, 2 and 8, rounds
  alternating format by format (the load average is read after each, and its range printed); tokens/s over all sequences, the best round (other people's work only slows
  a round down), and the least CPU time per step of the rounds beside it;
- cold start (a fresh process: import, check and load the cache, first token) and its RSS after answering:
  twice on a linked copy of the cache, first without the record of a passed check (every file's checksum is
  read, as every start did before smollm.verify_cache) and then with it (file stamps compared); the ratio
  note gives the second's CPU time over the first's.

Each ratio is given twice: tokens/s (wall) and CPU time per token (time.process_time over every thread),
which other people's work on a shared 2-core machine inflates far less.

Targets (issue 25): int8 single stream >= 2.5x the float32 path in the same run and >= 50% of the roof for
the bytes it reads; batch 8 >= 4x batch 1 and >= 350 tokens/s; batch 2 never below batch 1; cold start
<= 2 s; RSS <= 600 MB. Benchmarks print; they never pass or fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

STEPS = 12
ROUNDS = 3
BATCHES = (1, 2, 8)

COLD = r"""
import json, time
t0, c0 = time.perf_counter(), time.process_time()
from inside_llm import modelfile
m = modelfile.served_smollm()
load_s = time.perf_counter() - t0
first = next(t for t in m.served_form.generate(m.chat_ids("What is the capital of France?"), 1) if t is not None)
out = {"load_s": load_s, "first_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
for line in open("/proc/self/smaps_rollup"):
    k, _, v = line.partition(":")
    if k in ("Rss", "Pss"):
        out[k] = int(v.split()[0])
print(json.dumps(out))
"""


def _row(name, value, unit, note="", ratio=None) -> dict:
    r = {"name": name, "value": round(float(value), 3), "unit": unit, "note": note}
    if ratio is not None:
        r["ratio"] = round(float(ratio), 3)
    return r


def roof(w: np.ndarray) -> tuple[float, float]:
    """(GB/s with one thread, with two) of float32 GEMV w [M, K] @ x, best of 5."""
    x = np.ones(w.shape[1], np.float32)
    halves = [w[: w.shape[0] // 2], w[w.shape[0] // 2 :]]

    def one() -> float:
        t0 = time.perf_counter()
        w @ x
        return w.nbytes / (time.perf_counter() - t0) / 1e9

    def two() -> float:
        ts = [threading.Thread(target=lambda h=h: h @ x) for h in halves]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return w.nbytes / (time.perf_counter() - t0) / 1e9

    one()
    return max(one() for _ in range(5)), max(two() for _ in range(5))


def decode(model, batch: int, ids: list[int]) -> tuple[float, float]:
    """(tokens/s over all sequences, CPU s per step) of STEPS decode steps at this batch."""
    from inside_llm.sim.model.transformer import KVCache

    caches = [KVCache(model.config) for _ in range(batch)]
    for c in caches:
        model.forward(ids, c, last_only=True)
    toks = [504] * batch
    model.decode_step_batch(toks, caches)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(STEPS):
        model.decode_step_batch(toks, caches)
    wall = time.perf_counter() - t0
    return batch * STEPS / wall, (time.process_time() - c0) / STEPS


SPEC_PROMPTS = ("What is a prime number", "Tell me about the moon", "Name a fruit that is red")


def speculative_new_prompts(ref) -> tuple[list[float], list[float], dict]:
    """Chapter 9's work for never-seen prompts (speculative_demo.run_demo on the real setup, gamma 4): CPU s and
    wall s of each, and the parts of the last one (CPU s: prefill of its own tokens, each decode step, the check
    pass), timed by wrapping the model's own methods."""
    from inside_llm.sim.decoding import speculative_demo as demo

    setup = demo.real_setup(ref)
    demo.run_demo("Warm the kernels up.", 4, 16, setup)
    tag = f"{time.time_ns() % 100000}"  # a prompt no earlier run of this process (or cache) has seen
    cpus, walls = [], []
    for p in SPEC_PROMPTS:
        c0, w0 = time.process_time(), time.perf_counter()
        demo.run_demo(f"{p} ({tag})?", 4, 16, setup)
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - w0)
    target, parts = setup.target, {"prefill": 0.0, "decode": [], "check": 0.0}
    fwd, rows = target.forward, target.forward_rows

    def forward(ids, cache=None, **kw):
        c0 = time.process_time()
        out = fwd(ids, cache, **kw)
        (parts["decode"].append if len(ids) == 1 else lambda t: parts.__setitem__("prefill", t))(
            time.process_time() - c0
        )
        return out

    def forward_rows(ids, cache):
        c0 = time.process_time()
        out = rows(ids, cache)
        parts["check"] = time.process_time() - c0
        return out

    target.forward, target.forward_rows = forward, forward_rows
    try:
        demo.run_demo(f"Say something new ({tag}).", 4, 16, setup)
    finally:
        del target.forward, target.forward_rows
    return cpus, walls, parts


def cold_start(cache: Path | None = None) -> dict:
    """A fresh process's start (COLD), on the model cache at `cache` (default: the real one)."""
    from inside_llm import modelfile

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "NUMBA_CACHE_DIR": str(modelfile.numba_cache_dir())}
    if cache is not None:
        env["INSIDE_LLM_CACHE"] = str(cache)
    run = subprocess.run([sys.executable, "-c", COLD], capture_output=True, text=True, env=env, timeout=600)
    return json.loads(run.stdout.strip().splitlines()[-1])


def cold_starts() -> tuple[dict, dict]:
    """(first start, second start) on a copy of the model cache whose files link to the real ones: the first
    has no record of a passed check (smollm.VERIFIED) and reads every file's checksum, as every start did
    before the record; the second finds the record and only compares file stamps."""
    from inside_llm import modelfile
    from inside_llm.sim.model import smollm

    real, gguf = modelfile.f32_dir(), modelfile.gguf_path()
    with tempfile.TemporaryDirectory(prefix="bench-roof-cache-") as tmp:
        folder = Path(tmp) / real.name
        folder.mkdir()
        (Path(tmp) / gguf.name).symlink_to(gguf)
        for f in real.iterdir():
            if f.name == "config.json":
                (folder / f.name).write_bytes(f.read_bytes())
            elif f.name != smollm.VERIFIED:
                (folder / f.name).symlink_to(f)
        return cold_start(Path(tmp)), cold_start(Path(tmp))


def run() -> list[dict]:
    from threadpoolctl import threadpool_limits

    from inside_llm import modelfile

    ref = modelfile.served_smollm()
    if ref is None:
        return [_row("(skipped)", 0, "", f"SmolLM2 not installed: {modelfile.HOW_TO_FETCH}")]
    import numba

    served = ref.served_form
    ids = ref.chat_ids("What is the capital of France?")
    threads = numba.get_num_threads()
    fields = ("wq", "wk", "wv", "wo", "w1", "w2", "w3")
    f32_bytes = 4 * (sum(getattr(w, f).size for w in ref.layers for f in fields) + ref.unembed.size)
    head = np.asarray(ref.tok_emb)  # [V, dim] float32, memory-mapped: the roof's matrix
    q8_bytes = served.bytes_per_token
    load0 = os.getloadavg()[0]
    loads = [load0]  # the 1-minute load average after each measurement: how quiet the machine was
    best: dict[tuple, list] = {}
    with threadpool_limits(limits=1, user_api="blas"):
        roofs = [roof(head)]
        for _ in range(ROUNDS):
            for name, model, nthreads in (("float32", ref, 1), ("int8", served, threads), ("int8 1 thread", served, 1)):
                numba.set_num_threads(nthreads)
                for b in BATCHES:
                    tps, cpu = decode(model, b, ids)
                    loads.append(os.getloadavg()[0])
                    k = (name, b)
                    best[k] = [max(tps, best[k][0]), min(cpu, best[k][1])] if k in best else [tps, cpu]
            roofs.append(roof(head))
        numba.set_num_threads(threads)
    r1, r2 = max(r[0] for r in roofs), max(r[1] for r in roofs)
    load1 = os.getloadavg()[0]
    note_load = f"load {load0:.1f} -> {load1:.1f} (range {min(loads):.1f}-{max(loads):.1f})"
    rows = [
        _row("read bandwidth, 1 thread", r1, "GB/s", f"float32 GEMV 576x49152, best of {5 * (ROUNDS + 1)}"),
        _row("read bandwidth, 2 threads", r2, "GB/s", f"same, two threads; {note_load}"),
        _row("weights read per token, float32", f32_bytes / 1e6, "MB", "30 layers x 7 matrices + the tied head"),
        _row("weights read per token, int8", q8_bytes / 1e6, "MB", "codes + one float32 scale per output row"),
    ]
    for (name, b), (tps, cpu) in best.items():
        nbytes = f32_bytes if name == "float32" else q8_bytes
        gbs = tps / b * nbytes / 1e9  # one weight read per step serves all b sequences
        roof_gbs = r1 if name != "int8" else r2
        rows.append(
            _row(
                f"decode {name}, batch {b}",
                tps,
                "tokens/s",
                f"{cpu * 1e3:.1f} CPU-ms/step; {gbs:.1f} GB/s of weights = {gbs / roof_gbs:.0%} of the "
                f"{'2' if name == 'int8' else '1'}-thread roof {roof_gbs:.1f}",
            )
        )
    f1, q1 = best[("float32", 1)][0], best[("int8", 1)][0]
    rows.append(_row("int8 / float32, single stream", q1 / f1, "x", "target >= 2.5"))
    rows.append(
        _row("int8 both cores / one, single stream", q1 / best[("int8 1 thread", 1)][0], "x", f"{threads} threads")
    )
    rows.append(_row("int8 batch 2 / batch 1", best[("int8", 2)][0] / q1, "x", "target >= 1"))
    rows.append(_row("int8 batch 8 / batch 1", best[("int8", 8)][0] / q1, "x", "target >= 4"))
    rows.append(_row("float32 batch 8 / batch 1", best[("float32", 8)][0] / f1, "x", "the reference, same run"))
    # CPU time, which other people's work on a shared machine inflates far less than wall time
    cpu = {k: v[1] / k[1] for k, v in best.items()}  # CPU s per token (all threads), the least of the rounds
    rows.append(
        _row(
            "float32 / int8 CPU per token, single stream",
            cpu[("float32", 1)] / cpu[("int8 1 thread", 1)],
            "x",
            f"{cpu[('float32', 1)] * 1e3:.1f} vs {cpu[('int8 1 thread', 1)] * 1e3:.1f} CPU-ms, one thread each; "
            "target >= 2.5",
        )
    )
    rows.append(
        _row(
            "int8 batch 8 / batch 1, tokens per CPU-second",
            cpu[("int8", 1)] / cpu[("int8", 8)],
            "x",
            f"{cpu[('int8', 8)] * 1e3:.1f} vs {cpu[('int8', 1)] * 1e3:.1f} CPU-ms per token, {threads} threads; "
            "target >= 4",
        )
    )
    for b in (2, 8):
        one = cpu[("int8 1 thread", 1)]
        rows.append(
            _row(
                f"int8 1 thread batch {b} / batch 1, tokens per CPU-second",
                one / cpu[("int8 1 thread", b)],
                "x",
                f"{cpu[('int8 1 thread', b)] * 1e3:.1f} vs {one * 1e3:.1f} CPU-ms per token; "
                + ("target >= 1" if b == 2 else "target >= 4"),
            )
        )
    rows.append(
        _row(
            "int8 1 thread batch 8 / batch 1, tokens/s",
            best[("int8 1 thread", 8)][0] / best[("int8 1 thread", 1)][0],
            "x",
            "wall clock, best rounds; target >= 4",
        )
    )
    cpus, walls, parts = speculative_new_prompts(ref)
    dec = parts["decode"]
    rows.append(
        _row(
            "chapter 9, a never-seen prompt (CPU)",
            sorted(cpus)[len(cpus) // 2] * 1e3,
            "ms",
            f"median of {len(cpus)} (run_demo, gamma 4; {', '.join(f'{c * 1e3:.0f}' for c in cpus)} CPU-ms, wall "
            f"{', '.join(f'{w * 1e3:.0f}' for w in walls)} ms; load {os.getloadavg()[0]:.1f}); one more: prefill "
            f"{parts['prefill'] * 1e3:.0f}, {len(dec)} decode steps {sum(dec) * 1e3:.0f} "
            f"({min(dec, default=0) * 1e3:.0f}-{max(dec, default=0) * 1e3:.0f} each), check pass "
            f"{parts['check'] * 1e3:.0f} CPU-ms; target <= 300",
        )
    )
    full, c = cold_starts()
    rows.append(
        _row(
            "cold start to the first token, full check",
            full["first_s"],
            "s",
            f"{full['cpu_s']:.2f} CPU-s; load {full['load_s']:.2f} s; every file's checksum read (no record yet)",
        )
    )
    rows.append(
        _row(
            "cold start to the first token",
            c["first_s"],
            "s",
            f"{c['cpu_s']:.2f} CPU-s ({c['cpu_s'] / full['cpu_s']:.2f}x the full check's); load "
            f"{c['load_s']:.2f} s; the check's record found; target <= 2",
        )
    )
    rows.append(
        _row("RSS after the first answer", c["Rss"] / 1024, "MB", f"PSS {c['Pss'] / 1024:.0f} MB; target <= 600")
    )
    return rows


if __name__ == "__main__":
    for r in run():
        print(r)
