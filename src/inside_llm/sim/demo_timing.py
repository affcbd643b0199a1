"""Measure the demo transformer on this machine's CPU: prefill vs decode, KV cache on vs off, batching.

Wall-clock times from time.perf_counter, reported as plain dicts whose keys carry their units.
Each timing is the median of `repeats` runs. Inputs are fixed text, so only the clock varies.
These are real measurements of a tiny numpy model, the same effects as on a GPU server in miniature:
a prompt's tokens share each weight read (prefill), one decoded token does not (decode).
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np

from inside_llm.sim.transformer import DemoModel, KVCache

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


def _median_s(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of fn() in seconds over `repeats` runs."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _decode_cached(model: DemoModel, prompt_ids: Sequence[int], num_new: int) -> list[int]:
    """Greedy tokens, one cached forward each after one prefill."""
    cache = KVCache(model.config)
    logits = model.forward(prompt_ids, cache).logits[-1]  # [V]
    out = []
    for _ in range(num_new):
        out.append(int(np.argmax(logits)))
        logits = model.forward(out[-1:], cache).logits[-1]
    return out


def _decode_recompute(model: DemoModel, prompt_ids: Sequence[int], num_new: int) -> list[int]:
    """Greedy tokens with no cache: every step reruns the whole prefix."""
    ids = list(prompt_ids)
    for _ in range(num_new):
        ids.append(int(np.argmax(model.forward(ids).logits[-1])))
    return ids[len(prompt_ids) :]


def time_prefill_decode(
    model: DemoModel, prompt_ids: Sequence[int], num_decode_tokens: int = 32, repeats: int = 3
) -> dict:
    """Prefill time per prompt token vs decode time per generated token (KV cache on)."""
    prefill_s = _median_s(lambda: model.forward(prompt_ids, KVCache(model.config)), repeats)
    cache = KVCache(model.config, capacity=len(prompt_ids) + num_decode_tokens)
    model.forward(prompt_ids, cache)
    start = cache.num_tokens

    def decode() -> None:
        cache.truncate(start)
        for _ in range(num_decode_tokens):
            model.forward([prompt_ids[-1]], cache)

    decode_s = _median_s(decode, repeats)
    prefill_ms, decode_ms = 1e3 * prefill_s / len(prompt_ids), 1e3 * decode_s / num_decode_tokens
    return {
        "model": model.name,
        "prompt_tokens": len(prompt_ids),
        "decode_tokens": num_decode_tokens,
        "prefill_ms_per_token": prefill_ms,
        "decode_ms_per_token": decode_ms,
        "prefill_tokens_per_s": 1e3 / prefill_ms,
        "decode_tokens_per_s": 1e3 / decode_ms,
        "decode_over_prefill_time_per_token": decode_ms / prefill_ms,
    }


def time_kv_cache(model: DemoModel, prompt_ids: Sequence[int], num_new_tokens: int = 32, repeats: int = 1) -> dict:
    """Greedy decoding with the KV cache vs recomputing the whole prefix for every new token."""
    cached = _decode_cached(model, prompt_ids, num_new_tokens)
    recomputed = _decode_recompute(model, prompt_ids, num_new_tokens)
    cached_s = _median_s(lambda: _decode_cached(model, prompt_ids, num_new_tokens), repeats)
    recompute_s = _median_s(lambda: _decode_recompute(model, prompt_ids, num_new_tokens), repeats)
    return {
        "model": model.name,
        "prompt_tokens": len(prompt_ids),
        "new_tokens": num_new_tokens,
        "cached_ms_per_token": 1e3 * cached_s / num_new_tokens,
        "recompute_ms_per_token": 1e3 * recompute_s / num_new_tokens,
        "cached_tokens_per_s": num_new_tokens / cached_s,
        "recompute_tokens_per_s": num_new_tokens / recompute_s,
        "speedup_x": recompute_s / cached_s,
        "same_tokens": cached == recomputed,
        "note": "cached timing includes the one prefill of the prompt",
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
