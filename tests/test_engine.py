"""The serving engine (engine.py): continuous batching over paged keys and values, on the real model and the toy.

Batching must never change an answer; pages must all come back; a chat that leaves frees its pages within a
step; a full queue refuses at once; the live view never carries a prompt's text.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from inside_llm.engine import ClientBusy, Engine, EngineLimits, QueueFull
from inside_llm.sim.transformer import KVCache, load_model

QUESTIONS = [
    "What is the capital of France?",
    "Name three colours.",
    "What is 2+2?",
    "Who wrote Hamlet?",
    "Say hello in Spanish.",
    "What is the largest planet?",
]


def alone(model, ids, n):
    """The model's own greedy answer, read in one piece and written one token at a time (no engine)."""
    out = []
    for t in model.generate(ids, n):
        if t in getattr(model, "stop_ids", ()):
            break
        out.append(t)
    return out


def together(engine, prompts, n):
    """Every prompt submitted at once from its own thread: they share the engine's steps."""
    got = [None] * len(prompts)

    def run(k):
        got[k] = engine.generate(prompts[k], n)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return got


def test_paged_kv_reads_back_what_a_contiguous_cache_holds():
    model = load_model("main")
    engine = Engine(model, EngineLimits(num_blocks=16, block_size=4))
    from inside_llm.engine import PagedKV

    paged, plain = PagedKV(engine.store, 1), KVCache(model.config)
    ids = model.encode("ROMEO: But soft, what light")
    a = model.step([(paged, ids)])
    b = model.step([(plain, ids)])
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    for layer in (0, model.config.n_layers - 1):
        for lo, end in ((0, len(ids)), (3, len(ids)), (5, 6)):
            for got, want in zip(paged.read(layer, lo, end), plain.read(layer, lo, end), strict=True):
                np.testing.assert_array_equal(got, want)
    assert len(engine.store.manager.block_table(1)) == -(-len(ids) // 4)


def test_toy_batch_equals_each_alone_and_returns_every_page():
    model = load_model("main")
    prompts = [
        model.encode(t)
        for t in (
            "ROMEO:",
            "JULIET:\nO Romeo",
            "First Citizen:\nBefore we proceed",
            "KING RICHARD III:",
            "To be, or not to be",
        )
    ]
    engine = Engine(model)
    got = together(engine, prompts, 20)
    assert got == [alone(model, p, 20) for p in prompts]
    assert engine.steps < 5 * 20, "the chats shared steps"
    snap = engine.snapshot()
    assert snap["pages_in_use"] == 0 and snap["seats_in_use"] == 0 and snap["finished"] == len(prompts)


def test_real_model_batch_equals_each_alone(smollm):
    prompts = [smollm.chat_ids(q) for q in QUESTIONS]
    engine = Engine(smollm)
    got = together(engine, prompts, 16)
    want = [alone(smollm, p, 16) for p in prompts]
    assert got == want
    assert "Paris" in smollm.decode(got[0])
    assert engine.snapshot()["pages_in_use"] == 0


def test_preemption_recomputes_and_changes_no_answer():
    model = load_model("main")
    prompts = [model.encode(t) for t in ("ROMEO:", "JULIET:", "HAMLET:", "GLOUCESTER:")]
    # 8 pages of 4 tokens: four chats of 3 + 24 tokens cannot all hold their pages at once
    engine = Engine(model, EngineLimits(num_blocks=8, block_size=4, prefill_chunk=4))
    got = together(engine, prompts, 24)
    assert engine.preempted > 0, "the pool was too small for all four: some chat had to give its pages back"
    assert got == [alone(model, p, 24) for p in prompts]
    assert engine.store.pool.num_free_blocks == 8


def test_a_chat_that_leaves_frees_its_pages_at_the_next_step():
    model = load_model("main")
    engine = Engine(model)
    engine._ensure_thread = lambda: None  # drive the loop by hand
    stream = engine.submit(model.encode("ROMEO:"), 100)
    engine.step()
    engine.step()
    assert engine.snapshot()["pages_in_use"] > 0
    stream.close()
    engine.step()
    snap = engine.snapshot()
    assert snap["pages_in_use"] == 0 and snap["seats_in_use"] == 0 and stream.finish_reason == "cancelled"


def test_full_queue_and_busy_client_are_refused_at_once():
    model = load_model("main")
    engine = Engine(model, EngineLimits(seats=1, queue=2, per_client=1))
    engine._ensure_thread = lambda: None  # no loop thread: only engine.step() below moves anything
    ids = model.encode("ROMEO:")
    engine.submit(ids, 4, client="a")
    engine.submit(ids, 4, client="b")
    with pytest.raises(QueueFull):
        engine.submit(ids, 4, client="c")
    engine.step()  # a takes the one seat, b waits: the queue has room for one more, but not a's
    assert engine.snapshot()["queued"] == 1
    with pytest.raises(ClientBusy):
        engine.submit(ids, 4, client="a")
    engine.submit(ids, 4, client="d")


def test_snapshot_carries_progress_but_never_text():
    model = load_model("main")
    engine = Engine(model, EngineLimits(seats=2))
    engine._ensure_thread = lambda: None
    secret = "My secret question about Verona"
    for c in "abc":
        engine.submit(model.encode(secret), 8, client=c)
    engine.step()
    snap = engine.snapshot()
    assert snap["seats_in_use"] == 2 and snap["queued"] == 1 and len(snap["sequences"]) == 3
    assert {s["state"] for s in snap["sequences"]} == {"decode", "waiting"} or {
        s["state"] for s in snap["sequences"]
    } == {"prefill", "waiting"}
    flat = repr(snap)
    assert "secret" not in flat and "Verona" not in flat
    assert set(snap["sequences"][0]) == {
        "id",
        "state",
        "prompt_tokens",
        "written_tokens",
        "max_tokens",
        "cached_tokens",
        "pages",
        "page_ids",
        "preemptions",
    }
    running = [s for s in snap["sequences"] if s["state"] != "waiting"]
    held = [p for s in running for p in s["page_ids"]]
    assert len(held) == len(set(held)) == snap["pages_in_use"] and all(
        len(s["page_ids"]) == s["pages"] for s in running
    )
