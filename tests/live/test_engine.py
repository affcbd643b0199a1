"""The live engine (live/engine.py): continuous batching over paged keys and values on the serving core's
Scheduler, on the real model and the toy.

Batching must never change an answer; pages must all come back; a chat that leaves frees its pages within a
step; a full queue refuses at once; the live view never carries a prompt's text.
"""

from __future__ import annotations

import copy
import threading

import numpy as np
import pytest

from inside_llm.live import ClientBusy, Engine, EngineLimits, QueueFull
from inside_llm.sim.model.transformer import KVCache, load_model

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
    from inside_llm.live import PagedKV

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
    want = [alone(smollm.served_form, p, 16) for p in prompts]  # the engine runs the int8 form (sim/model/q8.py)
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


def by_hand(limits: EngineLimits):
    """A toy-model engine with no loop thread: only engine.step() below moves anything."""
    model = load_model("main")
    engine = Engine(model, limits)
    engine._ensure_thread = lambda: None
    return model, engine, model.encode("ROMEO:")


def running_clients(engine) -> list[str]:
    return sorted(s.client for s in engine.running)


def test_a_burst_takes_every_seat_and_the_whole_queue_before_a_refusal():
    # issue 23 (M3): 24 chats at once got 7 refusals ("16 chats are already waiting") with 7 of 8 seats idle
    _, engine, ids = by_hand(EngineLimits(seats=8, queue=16))
    for k in range(24):
        engine.submit(ids, 4, client=f"10.0.0.{k}")
    snap = engine.snapshot()
    assert snap["seats_in_use"] == 8 and snap["queued"] == 16, "idle seats are taken at submit, not next step"
    with pytest.raises(QueueFull, match="all 8 seats and all 16 places in the queue are taken"):
        engine.submit(ids, 4, client="10.0.0.99")


def test_one_client_may_use_every_idle_seat_and_half_the_queue():
    # issue 23 (M2): behind one NAT or proxy every visitor is one client; a hard cap of 2 served 2 chats in all
    _, engine, ids = by_hand(EngineLimits(seats=4, queue=4))
    for _ in range(4 + 2):
        engine.submit(ids, 4, client="nat")
    assert running_clients(engine) == ["nat"] * 4 and len(engine.waiting) == 2
    with pytest.raises(ClientBusy, match="already has 2 chats waiting"):
        engine.submit(ids, 4, client="nat")
    for _ in range(2):  # the other half of the queue is still open to others
        engine.submit(ids, 4, client="someone else")
    with pytest.raises(QueueFull):
        engine.submit(ids, 4, client="a third")


def test_a_freed_seat_goes_to_the_client_with_fewer_chats_running():
    _, engine, ids = by_hand(EngineLimits(seats=3, queue=4))
    a1 = engine.submit(ids, 40, client="a")
    engine.submit(ids, 40, client="a")
    b1 = engine.submit(ids, 40, client="b")
    a3 = engine.submit(ids, 40, client="a")  # arrives first, but a already has 2 seats
    b2 = engine.submit(ids, 40, client="b")
    engine.step()
    assert running_clients(engine) == ["a", "a", "b"], "2 against 1: no preemption"
    b1.close()
    engine.step()
    assert b2.seq.state != "waiting" and a3.seq.state == "waiting"
    a1.close()
    engine.step()
    assert a3.seq.state != "waiting"


def test_a_lone_visitor_gets_a_seat_from_the_busiest_client_and_no_answer_changes():
    model, engine, _ = by_hand(EngineLimits(seats=2, queue=4))
    prompts = [model.encode(t) for t in ("ROMEO:", "JULIET:", "HAMLET:")]
    a1 = engine.submit(prompts[0], 12, client="a")
    a2 = engine.submit(prompts[1], 12, client="a")
    for _ in range(3):
        engine.step()
    b1 = engine.submit(prompts[2], 12, client="b")
    assert b1.seq.state == "waiting"
    engine.step()
    assert b1.seq.state != "waiting" and a2.seq.preemptions == 1 and a1.seq.preemptions == 0
    assert running_clients(engine) == ["a", "b"]
    for _ in range(200):
        if not engine.running and not engine.waiting:
            break
        engine.step()
    got = [[t for t in s if t is not None] for s in (a1, a2, b1)]
    assert got == [alone(model, p, 12) for p in prompts]
    assert engine.store.pool.num_free_blocks == engine.limits.num_blocks


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
        "prefix_hit_tokens",
    }
    running = [s for s in snap["sequences"] if s["state"] != "waiting"]
    held = [p for s in running for p in s["page_ids"]]
    # the toy's 31-token prompt: its first page is hashed, but both chats were seated before either computed it
    assert len(held) == len(set(held)) == snap["pages_in_use"] and all(
        len(s["page_ids"]) == s["pages"] for s in running
    )


def test_repetition_settings_change_only_their_own_chat_and_no_4gram_repeats():
    """A chat with a chat UI's settings (repetition penalty 1.1, no repeated 4-gram) never repeats a 4-gram of its
    prompt and answer; the plain greedy chat beside it in the same steps is the model's own answer, unchanged."""
    model = load_model("main")
    ids = model.encode("ROMEO:")
    engine = Engine(model)
    guarded = engine.submit(ids, 60, client="a", repetition_penalty=1.1, no_repeat_ngram=4)
    plain = engine.submit(ids, 60, client="b")
    got = [t for t in guarded if t is not None]
    base = [t for t in plain if t is not None]
    assert base == alone(model, ids, 60)
    ctx = ids + got
    grams = [tuple(ctx[i : i + 4]) for i in range(len(ctx) - 3)]
    assert len(grams) == len(set(grams)), "a 4-gram repeats"
    assert got != base


def test_a_reloaded_model_replaces_its_engine_in_the_list():
    """engines() (what /metrics reads) lists each served model once: a model loaded again (a new object of the
    same kind and name) gets a new engine in place of the old, which is closed once idle."""
    from inside_llm.live import engine_for, engines

    first = load_model()
    again = copy.copy(first)  # as a reload would give: another object, the same kind and name
    a = engine_for(first)
    assert engine_for(first) is a and a in engines()
    b = engine_for(again)
    listed = [e for e in engines() if type(e.model) is type(again)]
    assert b is not a and b in listed and a not in listed and len(listed) == 1
    assert a._stop, "the replaced, idle engine is closed"


# ---- the prefix cache: a chat whose prompt begins like an earlier one's takes that chat's pages ----------------

SPEECH = "First Citizen:\nBefore we proceed any further, hear me speak."  # 13 toy tokens: 3 full pages of 4


def toy_by_hand(**limits):
    model, engine, _ = by_hand(EngineLimits(**limits))
    return model, engine


def drain(engine, *streams, steps=500):
    for _ in range(steps):
        if not engine.chats:
            break
        engine.step()
    assert not engine.chats, "every chat ended"
    return [[t for t in s if t is not None] for s in streams]


def test_a_second_chat_takes_the_first_ones_pages_and_writes_the_same_answer():
    model, engine = toy_by_hand(block_size=4)
    ids = model.encode(SPEECH)
    first = engine.submit(ids, 12, client="a")
    for _ in range(3):
        engine.step()  # its prompt is computed: 3 full pages registered
    second = engine.submit(ids, 12, client="b")
    assert second.seq.prefix_hit_tokens == 12, "3 pages of 4 tokens found; the 13th token is computed"
    a, b = (engine.store.manager.block_table(s.seq.rid) for s in (first, second))
    assert a[:3] == b[:3] and a[3] != b[3], "the prompt's pages are shared, the answers' are not"
    shared = [engine.store.pool.blocks[p].ref_cnt for p in a[:3]]
    assert shared == [2, 2, 2]
    snap = engine.snapshot()
    held = {p for s in snap["sequences"] for p in s["page_ids"]}
    assert snap["pages_in_use"] == len(held), "a shared page is counted once"
    assert snap["prefix_cache_hits"] == 12 and snap["prefix_cache_queries"] == 2 * len(ids)
    got = drain(engine, first, second)
    assert got == [alone(model, ids, 12)] * 2


def test_cached_pages_outlive_their_last_user_and_are_evicted_under_pressure():
    model, engine = toy_by_hand(block_size=4, num_blocks=12)
    ids = model.encode(SPEECH)
    drain(engine, engine.submit(ids, 8, client="a"))
    snap = engine.snapshot()
    assert snap["pages_in_use"] == 0 and snap["cached_pages"] >= 3, "freed, but still cached (evictable)"
    again = engine.submit(ids, 8, client="b")
    assert again.seq.prefix_hit_tokens == 12, "found after its last user left"
    drain(engine, again)
    # other chats that need every page of the pool: the free queue hands out the cached pages too (LRU)
    others = [engine.submit(model.encode(t), 40, client=f"o{k}") for k, t in enumerate(("ROMEO:", "JULIET:"))]
    drain(engine, *others)
    snap = engine.snapshot()
    assert snap["prefix_cache_evictions"] > 0
    late = engine.submit(ids, 8, client="c")
    assert late.seq.prefix_hit_tokens < 12, "its pages were evicted: it computes them again"
    assert drain(engine, late) == [alone(model, ids, 8)]
    assert engine.store.pool.num_free_blocks == 12


def test_real_model_visitors_share_the_chat_templates_page_and_answers_do_not_change(smollm):
    """SmolLM2's chat template: every visitor's prompt begins with the same 24 tokens (system prompt and the
    user turn's header), one full 16-token page that every chat after the first finds cached."""
    engine = Engine(smollm)
    engine._ensure_thread = lambda: None
    prompts = [smollm.chat_ids(q) for q in QUESTIONS[:3]]
    first = engine.submit(prompts[0], 8, client="a")
    engine.step()  # 32 of its 37 prompt tokens computed: its first two pages registered
    rest = [engine.submit(p, 8, client=f"v{k}") for k, p in enumerate(prompts[1:])]
    assert [s.seq.prefix_hit_tokens for s in rest] == [16, 16]
    got = drain(engine, first, *rest)
    assert got == [alone(smollm.served_form, p, 8) for p in prompts]
    snap = engine.snapshot()
    assert snap["prefix_cache_hits"] == 32 and snap["prefix_cache_hit_rate"] > 0


# ---- the core's one preemption rule, live: every chat still ends ----------------------------------------------


def test_the_newest_admitted_chat_is_preempted_even_the_asker_and_every_chat_ends():
    """The live engine follows the core's rule (sim/serve/scheduler.py): a chat that cannot grow preempts the
    newest admitted chat, possibly itself, and no chat is seated in a step that preempted. (Before issue 24 the
    loop preempted the newest *arrived* chat after the asker, never the asker.) The oldest running chat is never
    preempted while another runs and the pool holds any one chat whole, so each chat in turn ends: 9 chats of 3
    clients on 4 seats and a pool of 10 pages of 4 tokens (half what 4 of them need at once) all end, in bounded steps,
    every answer its own, every page back."""
    model, engine, _ = by_hand(EngineLimits(seats=4, queue=8, num_blocks=10, block_size=4, prefill_chunk=4))
    texts = ["ROMEO:", "JULIET:", "HAMLET:", "GLOUCESTER:", "KING RICHARD III:", "First Citizen:"]
    prompts = [model.encode(texts[k % len(texts)]) for k in range(9)]
    streams = [engine.submit(p, 16, client="abc"[k % 3]) for k, p in enumerate(prompts)]
    memory_preemptions = 0
    for _ in range(2000):
        if not engine.chats:
            break
        before = {s.seq.seq_id for s in streams if s.seq.state in ("prefill", "decode")}
        engine.step()
        if engine.scheduler.preempted:  # a memory preemption: nobody seated in this step
            memory_preemptions += 1
            assert {s.seq.seq_id for s in streams if s.seq.state in ("prefill", "decode")} <= before
    assert not engine.chats, "no livelock: every chat ended"
    assert memory_preemptions > 0
    got = [[t for t in s if t is not None] for s in streams]
    assert got == [alone(model, p, 16) for p in prompts]
    assert engine.store.pool.num_free_blocks == 10
