"""SmolLM2-135M-Instruct read from its GGUF file: metadata, tokenizer, forward, KV cache, batch decode.

Reference ids (Hugging Face's tokenizer.json for HuggingFaceTB/SmolLM2-*, whose tokenizer this GGUF
carries): published in public test code, verbatim:
- a GGUF tokenizer packer's self-checks for pre-tokenizer type `smollm` ("Hello, we can use",
  "The capital of France is", "Hello world! 123", "Café déjà vu.", "  multiple   spaces", ...);
- an inference-server test suite's greedy-verification case for SmolLM2-135M-Instruct: the ChatML prompt of
  "What is the capital of France?" (37 ids, default system prompt) and its greedy answer
  [504, 3575, 282, 4649, 314, 7042, 30, 2] = "The capital of France is Paris.<|im_end|>".
Pre-tokenizer: llama.cpp src/llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_SMOLLM: "\\p{N}", then GPT-2's pattern.
"""

from __future__ import annotations

import numpy as np
import pytest

from inside_llm import modelfile
from inside_llm.sim.model.smollm import Panels
from inside_llm.sim.model.transformer import KVCache

# The reference ids as published, a line each (left unformatted).
# fmt: off
PUBLISHED = {
    "Hello, we can use": [19556, 28, 392, 416, 722],
    "The capital of France is": [504, 3575, 282, 4649, 314],
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face":
        [2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712, 8182],
    "\n": [198],
    "Hello world! 123": [19556, 905, 17, 216, 33, 34, 35],
    "Café déjà vu.": [51, 1939, 2756, 32564, 90, 16739, 386, 101, 30],
    "  multiple   spaces": [216, 2701, 256, 5600],
}
FRANCE_CHAT = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407,
               19712, 8182, 2, 198, 1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198]
# fmt: on
FRANCE_GREEDY = [504, 3575, 282, 4649, 314, 7042, 30, 2]


def test_hyperparameters_come_from_the_file(smollm):
    c = smollm.config
    assert (c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_dim) == (30, 576, 9, 3, 64, 1536)
    assert (c.vocab_size, c.max_seq_len, c.rope_theta) == (49152, 8192, 100000.0)
    assert c.norm_eps == pytest.approx(1e-5)
    assert smollm.meta["pre_tokenizer"] == "smollm" and "<|im_start|>" in smollm.meta["chat_template"]
    assert smollm.num_params == 134_515_008  # 30 x 3,538,944 + 576 x 30 x 2 (norms) + 49,152 x 576 + 576


@pytest.mark.parametrize("text, ids", PUBLISHED.items())
def test_tokenizer_matches_published_reference_ids(smollm, text, ids):
    assert smollm.encode(text) == ids
    assert smollm.decode(ids) == text


def test_chat_template_from_the_file_gives_the_published_prompt(smollm):
    ids = smollm.chat_ids("What is the capital of France?")
    assert ids == FRANCE_CHAT
    assert smollm.decode(ids).startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert smollm.decode(ids).endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_greedy_answer_matches_the_published_reference(smollm):
    got = list(smollm.generate(FRANCE_CHAT, len(FRANCE_GREEDY), temperature=0.0))
    assert got == FRANCE_GREEDY and "Paris" in smollm.decode(got)


def test_prefill_and_incremental_decode_give_the_same_logits(smollm):
    ids = smollm.encode("The quick brown fox jumps over the lazy dog. It")
    full = smollm.forward(ids).logits  # [T, V] all at once
    cache = KVCache(smollm.config)
    first_four = [smollm.forward(ids[:4], cache).logits]
    steps = np.concatenate(first_four + [smollm.forward([t], cache).logits for t in ids[4:]])  # then one by one
    assert cache.num_tokens == len(ids)
    np.testing.assert_allclose(steps, full, rtol=0, atol=2e-3 * np.abs(full).max())
    assert (steps.argmax(-1) == full.argmax(-1)).all()
    last = smollm.forward(ids, last_only=True).logits
    assert last.shape == (1, smollm.config.vocab_size)
    np.testing.assert_allclose(last[0], full[-1], rtol=0, atol=1e-3 * np.abs(full).max())


def test_batch_decode_equals_one_sequence_at_a_time(smollm):
    prompts = [smollm.chat_ids(q) for q in ("Hi!", "Name a colour.", "What is 2+2?")]
    caches = [KVCache(smollm.config) for _ in prompts]
    nxt = [int(smollm.forward(p, c, last_only=True).logits[-1].argmax()) for p, c in zip(prompts, caches)]
    batch = smollm.decode_step_batch(nxt, caches)  # [3, V] in one step
    for b, (p, t) in enumerate(zip(prompts, nxt)):
        alone = smollm.forward(p + [t]).logits[-1]
        np.testing.assert_allclose(batch[b], alone, rtol=0, atol=2e-3 * np.abs(alone).max())
        assert caches[b].num_tokens == len(p) + 1


def test_panels_multiply_like_the_matrix():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((40, 192)).astype(np.float32)  # [in, out]
    x = rng.standard_normal((3, 40)).astype(np.float32)
    p = Panels(Panels.pack(w, cols=96))
    assert p.shape == (40, 192) and p.size == w.size
    np.testing.assert_allclose(x @ p, x @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x[0] @ p, x[0] @ w, rtol=1e-5, atol=1e-5)  # a vector
    np.testing.assert_allclose(x[None] @ p, x[None] @ w, rtol=1e-5, atol=1e-5)  # a stack
    np.testing.assert_array_equal(np.asarray(p), w)
    with pytest.raises(ValueError, match="multiple of 96"):
        Panels.pack(w[:, :100], cols=96)


def test_missing_truncated_and_wrong_files_are_named(tmp_path):
    missing = modelfile.check_file(tmp_path / "none.gguf")
    assert not missing.ok and "no model file" in missing.problem and "fetch-model" in missing.message()
    short = tmp_path / "short.gguf"
    short.write_bytes(b"GGUF" + bytes(1000))
    s = modelfile.check_file(short)
    assert not s.ok and "1,004 bytes" in s.problem and f"{modelfile.SIZE_BYTES:,}" in s.problem
    wrong = tmp_path / "wrong.gguf"
    with open(wrong, "wb") as f:
        f.truncate(modelfile.SIZE_BYTES)  # right size, all zeros
    w = modelfile.check_file(wrong)
    assert not w.ok and "sha256" in w.problem


def test_absent_model_serves_none_and_logs_one_line(no_model, caplog):
    with caplog.at_level("WARNING", logger="inside_llm.model"):
        assert modelfile.served_smollm() is None
        assert modelfile.served_smollm() is None  # checked once per process
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "toy model serves" in lines[0] and "inside-llm fetch-model" in lines[0]


def test_map_weights_changes_the_layer_matrices_only(smollm):
    ids = smollm.encode("The capital of France is")
    same = smollm.map_weights(lambda f, w: w, name="copy")
    assert same.name == "copy" and same.tok_emb is smollm.tok_emb
    np.testing.assert_array_equal(same.forward(ids, last_only=True).logits, smollm.forward(ids, last_only=True).logits)
    zeroed = smollm.map_weights(lambda f, w: np.zeros_like(w) if f == "w2" else w)  # no MLP output at all
    assert not np.allclose(zeroed.forward(ids, last_only=True).logits, smollm.forward(ids, last_only=True).logits)
    assert np.asarray(zeroed.layers[0].w2).shape == (1536, 576) and not np.asarray(zeroed.layers[0].w2).any()


# ---- the served form: int8 matrices (sim/model/q8.py), what the engine decodes from ------------------------


def test_served_form_reads_int8_and_answers_the_published_reference(smollm):
    served = smollm.served_form
    assert served.reference is smollm and served.weights_format == "q8"
    assert served.vocab is smollm.vocab and served.config == smollm.config
    # 30 layers x 3,538,944 weights + the 49,152 x 576 head, one byte each, one float32 scale per output row
    assert served.bytes_per_token == 134_515_008 - 576 * 61 + 4 * (30 * (960 + 576 + 3072 + 576) + 49_152)
    got = list(served.generate(FRANCE_CHAT, len(FRANCE_GREEDY), temperature=0.0))
    assert got == FRANCE_GREEDY


def test_served_form_stays_close_to_the_float32_reference(smollm):
    ids = smollm.encode("The quick brown fox jumps over the lazy dog. It")
    ref = smollm.forward(ids, intermediates=True)
    got = smollm.served_form.forward(ids, intermediates=True)
    for a, b in zip(ref.layers, got.layers):  # the same traces, within int8's rounding of the weights
        for name in ("q", "k", "v", "mlp_gate", "mlp_up", "resid_out"):
            x, y = getattr(a, name), getattr(b, name)
            assert x.shape == y.shape
            assert np.abs(x - y).max() <= 0.1 * np.abs(x).max(), name
    top_ref, top_got = ref.logits.argmax(-1), got.logits.argmax(-1)
    assert (top_ref == top_got).mean() >= 0.9


def test_served_batch_gives_the_same_bits_as_each_sequence_alone(smollm):
    served = smollm.served_form
    prompts = [served.chat_ids(q) for q in ("Hi!", "Name a colour.", "What is 2+2?")]
    caches = [KVCache(served.config) for _ in prompts]
    nxt = [int(served.forward(p, c, last_only=True).logits[-1].argmax()) for p, c in zip(prompts, caches)]
    batch = served.decode_step_batch(nxt, caches)  # [3, V] in one step
    for b, (p, t) in enumerate(zip(prompts, nxt)):
        cache = KVCache(served.config)
        served.forward(p, cache, last_only=True)
        alone = served.decode_step_batch([t], [cache])[0]
        np.testing.assert_array_equal(batch[b], alone)


def test_served_form_has_no_float32_matrices_to_map(smollm):
    with pytest.raises(TypeError, match="reference"):
        smollm.served_form.map_weights(lambda f, w: w)


# ---- the cache's integrity (every file's size and checksum are in its manifest) ---------------------


@pytest.fixture
def cache_copy(smollm, tmp_path, monkeypatch):
    """A model cache in tmp_path whose files link to the real one's (config.json copied): damage one by
    replacing its link with a changed copy. INSIDE_LLM_CACHE points at it; the served model is forgotten."""
    from inside_llm.sim.model import smollm as sm

    real, gguf = modelfile.f32_dir(), modelfile.gguf_path()
    root = tmp_path / "cache"
    (root / real.name).mkdir(parents=True)
    (root / gguf.name).symlink_to(gguf)
    for f in real.iterdir():
        if f.name == "config.json":
            (root / real.name / f.name).write_bytes(f.read_bytes())
        else:
            (root / real.name / f.name).symlink_to(f)
    monkeypatch.setenv("INSIDE_LLM_CACHE", str(root))
    modelfile.forget_served()
    assert sm.f32_cache_ok(root / real.name, root / gguf.name)
    yield root / real.name
    monkeypatch.undo()
    modelfile.forget_served()


def _damage(folder, name, change):
    data = bytearray((folder / name).read_bytes())
    (folder / name).unlink()
    (folder / name).write_bytes(change(data))


def test_a_truncated_tokenizer_is_rebuilt_or_the_toy_serves_with_one_line(cache_copy, monkeypatch, caplog):
    from inside_llm.sim.model import smollm as sm

    _damage(cache_copy, "tokenizer.json", lambda b: b[:100_000])  # what the reliability probe did (M5)
    assert not sm.f32_cache_ok(cache_copy, modelfile.gguf_path())

    def cannot_write(gguf, out):
        raise PermissionError(f"read-only: {out}")

    monkeypatch.setattr(sm, "build_f32_cache", cannot_write)
    with caplog.at_level("WARNING", logger="inside_llm.model"):
        assert modelfile.served_smollm() is None
        assert modelfile.served_smollm() is None  # decided once: no retry, no error per request
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "building the model cache" in lines[0]
    assert "PermissionError" in lines[1] and "toy model serves" in lines[1]


def test_a_damaged_cache_is_rebuilt_then_serves(cache_copy, monkeypatch, caplog):
    from inside_llm.sim.model import smollm as sm

    _damage(cache_copy, "tokenizer.json", lambda b: b[:100_000])
    source = (cache_copy / "tok_emb.npy").resolve().parent  # the real cache the links point into
    rebuilt = []

    def repair(gguf, out):  # a stand-in for the 30-s rebuild: the file as it was built
        rebuilt.append(out)
        (out / "tokenizer.json").unlink()
        (out / "tokenizer.json").symlink_to(source / "tokenizer.json")

    monkeypatch.setattr(sm, "build_f32_cache", repair)
    with caplog.at_level("WARNING", logger="inside_llm.model"):
        m = modelfile.served_smollm()
    assert rebuilt == [cache_copy] and m is not None
    assert list(m.served_form.generate(FRANCE_CHAT, 3)) == FRANCE_GREEDY[:3]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "building the model cache" in lines[0]


def test_zeroed_weights_of_the_same_size_are_caught_by_their_checksum(cache_copy):
    from inside_llm.sim.model import smollm as sm

    def zero_some(b):
        b[-4000:] = bytes(4000)
        return b

    _damage(cache_copy, "q8_wo.npy", zero_some)  # the reliability probe zeroed 30 MB of wq.npy (L4)
    assert sm.f32_cache_ok(cache_copy, modelfile.gguf_path())  # the sizes still match
    problem = sm.check_cache(cache_copy)
    assert problem is not None and "q8_wo.npy" in problem and "damaged" in problem


def test_a_warm_start_reads_no_weights_and_any_change_brings_back_the_full_check(cache_copy, monkeypatch):
    import os

    from inside_llm.sim.model import smollm as sm

    (cache_copy / sm.VERIFIED).unlink(missing_ok=True)  # a link to the real cache's record: start without one
    full = []
    check = sm.check_cache
    monkeypatch.setattr(sm, "check_cache", lambda out: full.append(out) or check(out))
    assert sm.verify_cache(cache_copy) is None and len(full) == 1  # no record: checked in full, then recorded
    assert (cache_copy / sm.VERIFIED).is_file() and not (cache_copy / sm.VERIFIED).is_symlink()
    assert sm.verify_cache(cache_copy) is None and len(full) == 1  # nothing changed: no checksum read
    st = (cache_copy / "q8_wo.npy").stat()

    def zero_some(b):
        b[-4000:] = bytes(4000)
        return b

    _damage(cache_copy, "q8_wo.npy", zero_some)  # the same size, and its times set back as they were
    os.utime(cache_copy / "q8_wo.npy", ns=(st.st_atime_ns, st.st_mtime_ns))
    problem = sm.verify_cache(cache_copy)
    assert len(full) == 2 and problem is not None and "q8_wo.npy" in problem and "damaged" in problem
    assert sm.verify_cache(cache_copy) is not None and len(full) == 3  # a damaged cache is never recorded
    assert sm.verify_cache(cache_copy, full=True) is not None and len(full) == 4


def test_an_interrupted_build_leaves_nothing_behind_at_the_next_start(tmp_path):
    from inside_llm.sim.model import smollm as sm

    out = tmp_path / "SmolLM2-135M-Instruct.f32-v9"
    dead, live, old = (out.with_name(f"{out.name}{x}") for x in (".tmp-999999999", ".tmp-1", ".old-5"))
    for d in (dead, live, old):
        (d / "w1.npy").parent.mkdir(parents=True)
        (d / "w1.npy").write_bytes(b"partial")
    gone = sm.remove_stale_builds(out)
    assert sorted(gone) == sorted([dead, old]) and not dead.exists() and not old.exists()
    assert live.exists()  # pid 1 runs: another process may be building


# The test questions' greedy answers, float32 reference vs served int8 (measured 2026-12-01, 24 tokens):
# the same up to <|im_end|> or 24 tokens, or parting at this token, where the two best next tokens are close
# enough that int8's rounding of the weights (half a step of 1/254 of each row's largest weight) flips them.
PARTS_AT = {
    "What is the capital of France?": None,
    "Name three primary colours.": None,
    "What is 12 times 12?": None,
    "Who wrote Romeo and Juliet?": 13,
    "Say good morning in Spanish.": 14,
    "What is the largest planet?": 22,
}


def _greedy(model, ids, n):
    out = []
    for t in model.generate(ids, n):
        out.append(t)
        if t in model.stop_ids:
            break
    return out


@pytest.mark.parametrize("question, parts_at", PARTS_AT.items())
def test_served_greedy_answers_equal_the_float32_path_or_part_where_stated(smollm, question, parts_at):
    ids = smollm.chat_ids(question)
    n = 24 if parts_at is None else parts_at + 1
    ref, got = _greedy(smollm, ids, n), _greedy(smollm.served_form, ids, n)
    if parts_at is None:
        assert got == ref
        return
    assert got[:parts_at] == ref[:parts_at] and got[parts_at] != ref[parts_at]
    logits = smollm.forward(ids + ref[:parts_at], last_only=True).logits[-1]  # the reference at the parting
    top = np.argsort(logits)[::-1]
    assert got[parts_at] in top[:3]  # the served form took one of the reference's own best three
    assert logits[top[0]] - logits[got[parts_at]] < 1.0  # a near-tie (logits in nats)
