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
from inside_llm.sim.smollm import Panels
from inside_llm.sim.transformer import KVCache

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
