"""Chapters 2 and 3 at a question the server has never seen (issue 25, "the chapters that take your question
answer like the others"): for each of PROMPTS new prompts (questions of 6-9 SmolLM2 tokens, a word drawn
afresh each run; the bodies are built directly, past the per-URL memo), the CPU time of building the body (time.process_time over every thread: the forward pass, the
logit lens, the chat question's first token, the JSON) and the body's gzip size (level 6, as the server's
GZipMiddleware), in this process, SmolLM2 when its file is here (else the toy, and the note says so).
Rows: the median of the prompts, and the longest prompt the chapters take (MAX_PROMPT_TOKENS tokens of prose).
Targets: <= 40 ms CPU and <= 40 KB gzip for /api/embeddings and /api/layer; each note says met or NOT met.

run() -> rows; `python bench/bench_pages_questions.py` prints them. Figures only: nothing passes or fails.
"""

from __future__ import annotations

import gzip
import random
import statistics
import time

from inside_llm.api import embeddings, layer
from inside_llm.api.demo_model import MAX_PROMPT_TOKENS, served_model

PROMPTS = 7
TARGET_MS = 40.0
TARGET_GZIP = 40_000
QUESTIONS = (
    "Why is the {} sky blue at noon?",
    "How do {} bees make honey?",
    "What does a {} compiler do?",
    "Name three {} rivers in Europe.",
    "Tell me a joke about {} cats.",
    "Where do {} penguins live?",
    "Is a {} tomato a fruit?",
)
WORDS = ("small", "old", "green", "quiet", "happy", "young", "cold", "bright", "tiny", "brave", "wild", "lazy")
PROSE = (
    "The river runs past the old mill and under the stone bridge, where children stop to watch the water "
    "turn the wheel. In spring the banks fill with yellow flowers, and in autumn the leaves drift down "
    "and gather in the shallows until the first storms of winter carry them away to the sea, far beyond "
    "the hills that keep the valley warm and green through every season of the year."
)


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _one(fn) -> tuple[float, int]:
    c0 = time.process_time()
    body = fn()
    return (time.process_time() - c0) * 1e3, len(gzip.compress(body, 6))


def run() -> list[dict]:
    s = served_model("smollm2")
    n_layers = s.model.config.n_layers
    jobs = {
        "/api/embeddings": lambda p: embeddings._embeddings_json(p, "smollm2"),
        "/api/layer (layer 0)": lambda p: layer._layer_json(p, 0, "smollm2"),
        f"/api/layer (layer {n_layers - 1})": lambda p: layer._layer_json(p, n_layers - 1, "smollm2"),
    }
    for fn in jobs.values():  # warm: the model loaded, the chat template's prefix read once
        fn("warm up")
    rng = random.Random()
    prompts = [q.format(rng.choice(WORDS)) for q in QUESTIONS[:PROMPTS]]
    tokens = statistics.median(len(s.model.encode(p)) for p in prompts)
    longest = s.model.decode(s.model.encode(PROSE)[:MAX_PROMPT_TOKENS])
    rows = []
    for name, fn in jobs.items():
        got = [_one(lambda p=p, fn=fn: fn(p)) for p in prompts]
        ms, gz = statistics.median(g[0] for g in got), statistics.median(g[1] for g in got)
        who = f"{s.served}, {tokens:g} tokens median, {len(prompts)} never-seen prompts"
        rows.append(
            {
                "name": f"{name} CPU, never-seen prompt",
                "value": round(ms, 1),
                "p99": round(max(g[0] for g in got), 1),
                "unit": "ms",
                "note": f"target <= {TARGET_MS:g} ms: {_met(ms <= TARGET_MS)} ({who}; p99 column: the slowest)",
            }
        )
        rows.append(
            {
                "name": f"{name} gzip, never-seen prompt",
                "value": round(gz / 1e3, 1),
                "unit": "KB",
                "note": f"target <= {TARGET_GZIP / 1e3:g} KB: {_met(gz <= TARGET_GZIP)} ({who})",
            }
        )
        ms_long, gz_long = _one(lambda fn=fn: fn(longest))
        rows.append(
            {
                "name": f"{name} gzip, {MAX_PROMPT_TOKENS}-token prompt",
                "value": round(gz_long / 1e3, 1),
                "unit": "KB",
                "note": f"the longest prompt taken; CPU {ms_long:.0f} ms; target <= {TARGET_GZIP / 1e3:g} KB: "
                f"{_met(gz_long <= TARGET_GZIP)}",
            }
        )
    return rows


if __name__ == "__main__":
    for r in run():
        print(f"{r['name']:<52} {r['value']:>8} {r['unit']:<3} {r['note']}")
