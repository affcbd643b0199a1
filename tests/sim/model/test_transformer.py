"""The numpy demo transformer: shipped weights, causality, KV cache, sampling, vocabulary, parity."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from inside_llm.sim.measure import demo_timing
from inside_llm.sim.model.tokenizer import encode as cl100k_encode
from inside_llm.sim.model.transformer import DEMO_DIR, KVCache, load_model, model_card

REPO = Path(__file__).resolve().parents[3]
SHARED_TEXT = REPO.parent / "shared/data/tinyshakespeare.txt"
TRAIN_SCRIPT = REPO / "scripts/train_demo_model.py"
TEXT = "ROMEO:\nBut soft, what light through yonder window breaks?\nIt is the east, and Juliet is the sun."


@pytest.fixture(scope="module", params=["main", "draft"])
def model(request):
    return load_model(request.param)


@pytest.fixture(scope="module")
def main():
    return load_model("main")


@pytest.fixture(scope="module")
def ids(main):
    return main.encode(TEXT)


def test_shipped_weights_load_and_match_the_card(model):
    entry = model_card()["models"][model.name]
    c = model.config
    assert c.n_kv_heads < c.n_heads and c.n_heads % c.n_kv_heads == 0  # grouped-query attention
    assert model.num_params == entry["params"]["total"]
    assert c.vocab_size == model.vocab.size == model.tok_emb.shape[0]
    logits = model.forward(model.encode(TEXT)).logits
    assert logits.shape == (len(model.encode(TEXT)), c.vocab_size)
    assert logits.dtype == np.float32 and np.isfinite(logits).all()


def test_main_and_draft_share_a_vocabulary():
    main, draft = load_model("main"), load_model("draft")
    assert np.array_equal(main.vocab.cl100k, draft.vocab.cl100k)
    assert draft.num_params * 2 < main.num_params


def test_changing_a_later_token_never_changes_earlier_logits(main, ids):
    base = main.forward(ids).logits
    changed = list(ids)
    changed[10] = (changed[10] + 1) % main.config.vocab_size
    out = main.forward(changed).logits
    np.testing.assert_allclose(out[:10], base[:10], atol=1e-5)
    assert not np.allclose(out[10:], base[10:], atol=1e-3)


def test_attention_is_causal_and_normalised_with_grouped_query_shapes(main, ids):
    c, T = main.config, len(ids)
    f = main.forward(ids, intermediates=True)
    assert f.embeddings.shape == (T, c.dim) and len(f.layers) == c.n_layers
    np.testing.assert_array_equal(f.embeddings, main.tok_emb[ids])
    for layer in f.layers:
        assert layer.q.shape == (c.n_heads, T, c.head_dim)
        assert layer.k.shape == layer.v.shape == (c.n_kv_heads, T, c.head_dim)
        assert layer.attn.shape == (c.n_heads, T, T)
        assert layer.mlp_gate.shape == layer.mlp_hidden.shape == (T, c.ffn_dim)
        np.testing.assert_allclose(layer.attn.sum(-1), 1.0, atol=1e-5)
        assert np.all(np.triu(layer.attn, k=1) == 0)
        np.testing.assert_allclose(layer.resid_out, layer.resid_in + layer.attn_out + layer.mlp_out, atol=1e-4)
    np.testing.assert_allclose(main.head(f.layers[-1].resid_out), f.logits, atol=1e-5)


def test_kv_cached_incremental_decoding_equals_full_recompute(main, ids):
    full = main.forward(ids).logits
    cache = KVCache(main.config, capacity=4)  # forces the cache to grow
    steps = np.concatenate([main.forward([t], cache).logits for t in ids])
    np.testing.assert_allclose(steps, full, atol=1e-4)
    assert cache.num_tokens == len(ids)
    c = main.config
    assert cache.nbytes == len(ids) * c.n_layers * 2 * c.n_kv_heads * c.head_dim * 4


def test_upto_runs_the_first_layers_only_and_skips_the_head(main, ids):
    """What chapters 2 and 3 ask for: the layers up to the one opened, no output head."""
    full = main.forward(ids[:8], intermediates=True)
    part = main.forward(ids[:8], intermediates=True, upto=2)
    assert len(part.layers) == 2 and part.logits.size == 0
    for a, b in zip(part.layers, full.layers[:2], strict=True):
        np.testing.assert_array_equal(a.resid_out, b.resid_out)
        np.testing.assert_array_equal(a.attn, b.attn)
    every = main.forward(ids[:8], intermediates=True, upto=main.config.n_layers)
    np.testing.assert_array_equal(every.layers[-1].resid_out, full.layers[-1].resid_out)
    assert every.logits.size == 0


def test_residuals_of_two_sequences_in_one_pass_equal_each_alone(main, ids):
    """Chapter 2's pass: the prompt and its chat question read together give each one's own residual stream."""
    a, b = ids[:6], ids[6:15]
    both = main.residuals([(KVCache(main.config), a), (KVCache(main.config), b)])
    assert len(both) == main.config.n_layers + 1 and both[0].shape == (len(a) + len(b), main.config.dim)
    for seq, rows in ((a, slice(0, len(a))), (b, slice(len(a), None))):
        fw = main.forward(seq, intermediates=True)
        want = [fw.embeddings] + [t.resid_out for t in fw.layers]
        for got, w in zip(both, want, strict=True):
            np.testing.assert_allclose(got[rows], w, rtol=1e-4, atol=1e-4)


def test_multi_token_cached_forward_equals_one_at_a_time(main, ids):
    """The target's single verify pass in speculative decoding, and rollback of rejected tokens."""
    prefix, new = ids[:12], ids[12:17]
    cache = KVCache(main.config)
    main.forward(prefix, cache)
    at_once = main.forward(new, cache).logits
    cache.truncate(len(prefix))
    one_by_one = np.concatenate([main.forward([t], cache).logits for t in new])
    np.testing.assert_allclose(at_once, one_by_one, atol=1e-4)
    assert cache.num_tokens == len(prefix) + len(new)


def test_batched_decode_equals_each_sequence_alone(main, ids):
    prompts = [ids[:5], ids[:9], ids[3:20]]
    caches = [KVCache(main.config) for _ in prompts]
    for p, c in zip(prompts, caches):
        main.forward(p[:-1], c)
    batched = main.decode_step_batch([p[-1] for p in prompts], caches)
    for p, row in zip(prompts, batched):
        np.testing.assert_allclose(row, main.forward(p).logits[-1], atol=1e-4)
    with pytest.raises(ValueError):
        main.decode_step_batch([1, 2], [caches[0], caches[0]])


def test_greedy_generation_is_deterministic_and_matches_argmax(main, ids):
    out = list(main.generate(ids, 8))
    assert out == list(main.generate(ids, 8)) and len(out) == 8
    seq = list(ids)
    for _ in range(3):
        seq.append(int(np.argmax(main.forward(seq).logits[-1])))
    assert out[:3] == seq[len(ids) :]
    assert list(main.generate(ids, 8, temperature=0.8, top_k=1, seed=5)) == out


def test_seeded_sampling_is_reproducible(main, ids):
    a = list(main.generate(ids, 12, temperature=1.0, top_k=40, seed=1))
    assert a == list(main.generate(ids, 12, temperature=1.0, top_k=40, seed=1))
    assert a != list(main.generate(ids, 12, temperature=1.0, top_k=40, seed=2))


def test_attention_window_slides_past_the_trained_context():
    draft = load_model("draft")
    window = draft.config.max_seq_len
    ids = (draft.encode(TEXT) * 40)[: window + 40]
    full = draft.forward(ids, intermediates=True)
    lag = np.arange(len(ids))[:, None] - np.arange(len(ids))[None, :]
    assert np.all(full.layers[0].attn[:, lag >= window] == 0)
    cache = KVCache(draft.config)
    chunks = [draft.forward(ids[i : i + 70], cache).logits for i in range(0, len(ids), 70)]
    np.testing.assert_allclose(np.concatenate(chunks), full.logits, atol=1e-4)


def test_byte_fallback_encodes_unknown_pieces_and_round_trips(main):
    text = "Hark! 🦜 東京の夜 — naïve façade\u200b"
    ids, num_fallback = main.vocab.encode_with_stats(text)
    assert num_fallback > 0 and all(0 <= i < main.config.vocab_size for i in ids)
    assert main.decode(ids) == text
    assert b"".join(main.piece(i) for i in ids) == text.encode("utf-8")
    known = main.encode("Hark! what light")
    assert main.cl100k_ids(known) == cl100k_encode("Hark! what light", "cl100k_base")


def test_reported_validation_loss_is_reproduced_by_numpy(main):
    if not SHARED_TEXT.exists():
        pytest.skip(f"held-out text not found at {SHARED_TEXT}; cannot recompute validation loss")
    text = SHARED_TEXT.read_text(encoding="utf-8")
    val_ids = np.array(main.encode(text[int(len(text) * 0.9) :]))
    entry = model_card()["models"]["main"]
    check = entry["check_slice"]
    n, T = check["num_tokens"], main.config.max_seq_len
    assert math.isclose(main.nll(val_ids[:n]), check["loss_nats_per_token"], abs_tol=2e-3)
    val = entry["val"]
    assert math.isclose(val["perplexity_per_token"], math.exp(val["loss_nats_per_token"]), rel_tol=1e-3)
    # 8 of the card's evaluation windows, evenly spread: per-window losses vary (std ~0.8 nats), so
    # their mean lands within ~0.3 nats of the whole held-out loss (one standard error).
    num_windows = (len(val_ids) - 1) // T
    picks = np.linspace(0, num_windows - 1, 8).round().astype(int)
    sample_loss = float(np.mean([main.nll(val_ids[i * T : (i + 1) * T + 1]) for i in picks]))
    assert abs(sample_loss - val["loss_nats_per_token"]) < 0.3, "held-out sample far from the card's loss"


def test_nll_is_the_mean_cross_entropy_and_map_weights_copies(main, ids):
    logits = main.forward(ids[:-1]).logits.astype(np.float64)  # [T, V]
    logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    expected = np.mean(logz - logits[np.arange(len(ids) - 1), ids[1:]])
    assert math.isclose(main.nll(ids), expected, rel_tol=1e-6)
    same = main.map_weights(lambda name, w: w)
    assert same.nll(ids) == main.nll(ids)
    coarse = main.map_weights(lambda name, w: np.round(w * 8) / 8, name="coarse")
    assert coarse.name == "coarse" and coarse.nll(ids) != main.nll(ids)
    assert main.layers[0].wq is not coarse.layers[0].wq


@pytest.fixture(scope="module")
def train_script():
    """scripts/train_demo_model.py as a module (needs torch, a dev-only extra)."""
    pytest.importorskip("torch", reason="torch is not installed (dev-only: pip install -e .[train])")
    if "train_demo_model" not in sys.modules:
        spec = importlib.util.spec_from_file_location("train_demo_model", TRAIN_SCRIPT)
        sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look it up
        spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules["train_demo_model"]


def test_numpy_logits_match_the_torch_training_model(model, train_script):
    import torch

    net = train_script.model_from_npz(DEMO_DIR / f"{model.name}.npz")
    ids = model.encode(TEXT + " 🦜")
    with torch.no_grad():
        expected = net(torch.tensor([ids]))[0].numpy()
    np.testing.assert_allclose(model.forward(ids).logits, expected, atol=1e-4)


def test_timing_helpers_report_units_and_agree_on_tokens():
    draft = load_model("draft")
    prompt = demo_timing.default_prompt_ids(draft, 16)
    pd = demo_timing.time_prefill_decode(draft, prompt, num_decode_tokens=4, rounds=1)
    assert pd["prefill_ms_per_token"] > 0 and pd["decode_ms_per_token"] > 0
    kv = demo_timing.time_kv_cache(draft, prompt, num_new_tokens=4, rounds=1)
    assert kv["same_tokens"] and kv["speedup_x"] > 0 and kv["cached_tokens_per_s"] > 0
    b = demo_timing.time_batched_decode(draft, 4, prompt, steps=2, repeats=1)
    assert b["tokens_per_s"] > 0 and b["batch_size"] == 4


def test_top_p_samples_only_within_the_nucleus():
    """sample()'s top_p keeps the smallest set of likeliest ids whose probabilities reach top_p (/v1's top_p);
    top_p = 1 draws exactly what it drew before top_p existed."""
    from inside_llm.sim.model.transformer_ops import sample

    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    draws = {sample(logits, 1.0, None, np.random.default_rng(s), top_p=0.75) for s in range(200)}
    assert draws == {0, 1}  # 0.5 + 0.3 reaches 0.75; 2 and 3 are never drawn
    assert {sample(logits, 1.0, None, np.random.default_rng(s), top_p=0.1) for s in range(50)} == {0}
    for s in range(20):
        p = np.exp(logits - logits.max())
        before = int(np.random.default_rng(s).choice(4, p=p / p.sum()))
        assert sample(logits, 1.0, None, np.random.default_rng(s)) == before
