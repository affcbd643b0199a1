"""Tokenizer throughput on this CPU: ids only (encode), ids with spans (tokenize, what chapter 1 returns),
and POST /api/tokens with the largest text the endpoint takes, in-process (no network).

Text: the public-domain Shakespeare corpus in ../shared/data (a repeated sentence when it is absent),
cut to the endpoint's 100,000-character maximum. run() -> rows; `python bench/bench_tokenizer.py` prints them.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from _server import percentile

from inside_llm.api.tokens import MAX_TEXT_CHARS
from inside_llm.sim.model import tokenizer as tk

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare.txt"
REPEATS = 7


def _text() -> tuple[str, str]:
    if CORPUS.is_file():
        return CORPUS.read_text(encoding="utf-8")[:MAX_TEXT_CHARS], "tinyshakespeare"
    line = "The GPU server reads your prompt as tokens, not letters. Unbelievably, 🦙 emoji split too! "
    return (line * (MAX_TEXT_CHARS // len(line) + 1))[:MAX_TEXT_CHARS], "repeated sentence"


def _times(fn, n: int = REPEATS) -> list[float]:
    fn()  # warm: vocabulary load
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _rows(name: str, secs: list[float], chars: int, tokens: int, note: str) -> list[dict]:
    med = statistics.median(secs)
    return [
        {
            "name": f"{name}_chars_per_s",
            "value": round(chars / med),
            "unit": "chars/s",
            "p99": round(chars / percentile(secs, 0.99)),
            "note": note,
        },
        {
            "name": f"{name}_tokens_per_s",
            "value": round(tokens / med),
            "unit": "tokens/s",
            "note": f"{tokens:,} tokens in {med * 1e3:.1f} ms (median of {len(secs)})",
        },
    ]


def run() -> list[dict]:
    from fastapi.testclient import TestClient

    from inside_llm.app import create_app

    text, source = _text()
    rows = []
    for enc in ("cl100k_base", "llama3"):
        n = len(tk.encode(text, enc))
        rows += _rows(
            f"encode_{enc}",
            _times(lambda enc=enc: tk.encode(text, enc)),
            len(text),
            n,
            f"ids only; {len(text):,} chars of {source}",
        )
        rows += _rows(
            f"tokenize_{enc}",
            _times(lambda enc=enc: tk.tokenize(text, enc)),
            len(text),
            n,
            "ids + byte/char spans per token",
        )
    client = TestClient(create_app())
    n = client.post("/api/tokens", json={"text": text}).json()["num_tokens"]
    secs = _times(lambda: client.post("/api/tokens", json={"text": text}).raise_for_status(), 3)
    rows += _rows("post_api_tokens_100k", secs, len(text), n, "whole request in-process: JSON in, tokens + chat out")
    return rows


if __name__ == "__main__":
    for r in run():
        print(f"{r['name']:<40} {r['value']:>12,} {r['unit']:<9} {r['note']}")
