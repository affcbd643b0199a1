"""Benchmark the numpy demo transformer on this CPU: KV cache vs recompute, prefill vs decode, batching.

run() -> rows of {"name", "value", "unit", "note"}; `python bench/bench_demo_model.py` prints them.
For a one-core figure, start Python with OPENBLAS_NUM_THREADS=1 (numpy's BLAS reads it at import).
"""

from __future__ import annotations

from inside_llm.sim.measure import demo_timing
from inside_llm.sim.model.transformer import load_model

PROMPT_TOKENS = 64  # prompt length for every measurement
NEW_TOKENS = 64  # tokens generated when comparing the KV cache with recomputation
BATCH_SIZES = (1, 8, 32)


def _row(name: str, value: float, unit: str, note: str) -> dict:
    return {"name": name, "value": round(float(value), 3), "unit": unit, "note": note}


def run() -> list[dict]:
    rows = []
    for model_name in ("main", "draft"):
        model = load_model(model_name)
        prompt = demo_timing.default_prompt_ids(model, PROMPT_TOKENS)
        model.forward(prompt)  # warm up BLAS and caches
        tag = f"demo_{model_name}"
        kv = demo_timing.time_kv_cache(model, prompt, NEW_TOKENS, rounds=3)
        ctx = f"{model.num_params / 1e6:.1f}M params, {PROMPT_TOKENS}-token prompt, {NEW_TOKENS} new tokens"
        rows += [
            _row(f"{tag}_decode_kv_cache", kv["cached_tokens_per_s"], "tokens/s", f"single stream; {ctx}"),
            _row(
                f"{tag}_decode_recompute",
                kv["recompute_tokens_per_s"],
                "tokens/s",
                f"no cache: every new token reruns the prefix; {ctx}",
            ),
            _row(
                f"{tag}_kv_cache_speedup",
                kv["speedup_x"],
                "x",
                f"recompute time / cached time; same tokens: {kv['same_tokens']}",
            ),
        ]
        pd = demo_timing.time_prefill_decode(model, prompt, num_decode_tokens=32, rounds=3)
        rows += [
            _row(
                f"{tag}_prefill_time_per_token",
                pd["prefill_ms_per_token"],
                "ms/token",
                f"{PROMPT_TOKENS}-token prompt in one forward pass",
            ),
            _row(
                f"{tag}_decode_time_per_token",
                pd["decode_ms_per_token"],
                "ms/token",
                "one token per forward pass, KV cache on",
            ),
        ]
        for b in BATCH_SIZES:
            r = demo_timing.time_batched_decode(model, b, prompt, steps=8, repeats=3)
            rows.append(
                _row(
                    f"{tag}_batched_decode_b{b}",
                    r["tokens_per_s"],
                    "tokens/s",
                    f"batch {b}: weights read once per step for all {b} sequences",
                )
            )
    return rows


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:<40} {row['value']:>10.3f} {row['unit']:<9} {row['note']}")
