"""Measure the demo transformer on this machine's CPU: prefill vs decode, KV cache on vs off, batching.

Wall-clock times from time.perf_counter, reported as plain dicts whose keys carry their units.
Prefill/decode and KV-cache figures are the fastest of `rounds` rounds; batched decode the median of
`repeats` runs. Inputs are fixed text, so only the clock varies.
These are real measurements of a tiny numpy model, the same effects as on a GPU server in miniature:
a prompt's tokens share each weight read (prefill), one decoded token does not (decode).
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np

from inside_llm.sim.model.transformer import DemoModel, KVCache

DEFAULT_PROMPT = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
    "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\n"
    "Resolved. resolved.\n\nFirst Citizen:\nFirst, you know Caius Marcius is chief enemy "
    "to the people.\n"
)


def default_prompt_ids(model: DemoModel, num_tokens: int = 64) -> list[int]:
    """The first num_tokens ids of a fixed passage (repeated as needed)."""
    ids = model.encode(DEFAULT_PROMPT)
    return (ids * (num_tokens // len(ids) + 1))[:num_tokens]


def best_seconds(fn: Callable[[], object], rounds: int) -> float:
    """The fastest of `rounds` wall-clock runs of fn(), in seconds (a neighbour on a shared CPU only ever
    slows a round down, so the fastest is the least disturbed)."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _median_s(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of fn() in seconds over `repeats` runs."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_prefill_decode(
    model: DemoModel, prompt_ids: Sequence[int], num_decode_tokens: int = 8, rounds: int = 3
) -> dict:
    """Prefill time per prompt token (the prompt in one forward pass) vs decode time per generated token
    (one token per forward pass after it, KV cache on); each the fastest of `rounds` rounds."""
    T = len(prompt_ids)
    model.forward(prompt_ids[:8])  # warm up BLAS
    prefill_s = best_seconds(lambda: model.forward(prompt_ids, KVCache(model.config, capacity=T)), rounds)
    cache = KVCache(model.config, capacity=T + num_decode_tokens)
    model.forward(prompt_ids, cache)

    def decode() -> None:
        cache.truncate(T)
        for _ in range(num_decode_tokens):
            model.forward([prompt_ids[-1]], cache, last_only=True)

    decode_s = best_seconds(decode, rounds)
    prefill_ms, decode_ms = 1e3 * prefill_s / T, 1e3 * decode_s / num_decode_tokens
    return {
        "model": model.name,
        "prompt_tokens": T,
        "decode_tokens": num_decode_tokens,
        "rounds": rounds,
        "prefill_ms_per_token": prefill_ms,
        "decode_ms_per_token": decode_ms,
        "prefill_tokens_per_s": 1e3 / prefill_ms,
        "decode_tokens_per_s": 1e3 / decode_ms,
        "decode_over_prefill_time_per_token": decode_ms / prefill_ms,
    }


def time_kv_cache(model: DemoModel, prompt_ids: Sequence[int], num_new_tokens: int = 6, rounds: int = 2) -> dict:
    """Per new token: decoding with the KV cache (one token through the model) vs recomputing the whole
    prefix (prompt + tokens so far), as a model without a cache must; each the fastest of `rounds` rounds.

    Both read the prompt once first (untimed: the same work either way). same_tokens: recomputing predicts
    the same greedy tokens as the cache did (the cache changes the cost, not the answer).
    """
    T = len(prompt_ids)
    cache = KVCache(model.config, capacity=T + num_new_tokens + 1)
    out = [int(np.argmax(model.forward(prompt_ids, cache, last_only=True).logits[-1]))]
    for _ in range(num_new_tokens):  # the greedy continuation, token by token with the cache
        out.append(int(np.argmax(model.forward(out[-1:], cache, last_only=True).logits[-1])))

    def cached() -> None:
        cache.truncate(T)
        for t in out[:-1]:
            model.forward([t], cache, last_only=True)

    same = True

    def recompute() -> None:
        nonlocal same
        for i in range(num_new_tokens):
            logits = model.forward([*prompt_ids, *out[: i + 1]], last_only=True).logits[-1]
            same &= int(np.argmax(logits)) == out[i + 1]

    cached_s = best_seconds(cached, rounds) / num_new_tokens
    recompute_s = best_seconds(recompute, rounds) / num_new_tokens
    return {
        "model": model.name,
        "prompt_tokens": T,
        "new_tokens": num_new_tokens,
        "rounds": rounds,
        "cached_ms_per_token": 1e3 * cached_s,
        "recompute_ms_per_token": 1e3 * recompute_s,
        "cached_tokens_per_s": 1 / cached_s,
        "recompute_tokens_per_s": 1 / recompute_s,
        "speedup_x": recompute_s / cached_s,
        "same_tokens": same,
    }


def time_batched_decode(
    model: DemoModel, batch_size: int, prompt_ids: Sequence[int], steps: int = 16, repeats: int = 3
) -> dict:
    """Decode steps for batch_size sequences at once, each with its own cache holding the prompt."""
    base = KVCache(model.config, capacity=len(prompt_ids) + steps)  # no buffer growth while timed
    model.forward(prompt_ids, base)
    ids = [prompt_ids[-1]] * batch_size
    times = []
    for _ in range(repeats):
        caches = [copy.deepcopy(base) for _ in range(batch_size)]  # not timed
        t0 = time.perf_counter()
        for _ in range(steps):
            model.decode_step_batch(ids, caches)
        times.append(time.perf_counter() - t0)
    step_s = statistics.median(times) / steps
    return {
        "model": model.name,
        "batch_size": batch_size,
        "context_tokens": len(prompt_ids),
        "steps": steps,
        "ms_per_step": 1e3 * step_s,
        "ms_per_token": 1e3 * step_s / batch_size,
        "tokens_per_s": batch_size / step_s,
    }
