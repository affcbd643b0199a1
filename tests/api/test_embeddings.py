"""GET /api/embeddings: real embedding rows, per-layer change, logit lens, drawn floors, model=smollm2|toy, bounds.

Each test reads the model that actually serves a choice (served_model): SmolLM2 when its file is on this
machine, else the toy (and the response says so), so they hold with or without the file.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from inside_llm.api.demo_model import MAX_PROMPT_TOKENS, served_model
from inside_llm.api.embeddings import DRAWN_COLUMNS, embeddings_json, facts
from inside_llm.api.packed import unpack
from inside_llm.sim.hardware import catalog
from inside_llm.sim.model.lens import drawn_floors
from inside_llm.sim.model.transformer_ops import log_softmax

PROMPT = "To be, or not to be, that is the"
MODELS = ("smollm2", "toy")


def get(client, prompt=PROMPT, model=None):
    params = {"prompt": prompt} | ({"model": model} if model else {})
    r = client.get("/api/embeddings", params=params)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("model", MODELS)
def test_floor_zero_holds_the_embedding_table_rows_of_the_prompts_ids(client, model):
    s = served_model(model)
    m, d = s.model, get(client, model=model)
    ids = m.encode(PROMPT)
    assert [t["id"] for t in d["tokens"]] == ids and d["num_tokens"] == len(ids)
    assert d["model"]["served"] == s.served and d["model"]["requested"] == model
    rows = unpack(d["floors"][0]["vectors"])
    assert rows.shape == (len(ids), m.config.dim) and len(ids) <= DRAWN_COLUMNS
    # packed: within half a unit (the floor's colour scale / 16) of the float32 rows
    unit = d["floors"][0]["vectors"]["unit"]
    assert unit == pytest.approx(d["floors"][0]["scale"] / 16, rel=1e-3)
    np.testing.assert_allclose(rows, m.tok_emb[ids], rtol=0, atol=unit / 2 * 1.001)
    assert d["model"]["n_layers"] == m.config.n_layers and d["model"]["dim"] == m.config.dim


@pytest.mark.parametrize("model", MODELS)
def test_every_floor_has_norm_and_change_and_the_drawn_ones_their_vectors(client, model):
    m, d = served_model(model).model, get(client, model=model)
    fw = m.forward(m.encode(PROMPT), intermediates=True)
    assert len(d["floors"]) == m.config.n_layers + 1 and d["floors"][0]["change"] is None
    assert d["drawn_floors"] == drawn_floors(m.config.n_layers) == [f["after_layer"] for f in d["floors"] if f["drawn"]]
    assert d["drawn_floors"][0] == 0 and d["drawn_floors"][-1] == m.config.n_layers and len(d["drawn_floors"]) <= 7
    for f, tr in zip(d["floors"][1:], fw.layers, strict=True):
        expect = np.linalg.norm(tr.resid_out - tr.resid_in, axis=-1) / np.linalg.norm(tr.resid_in, axis=-1)
        np.testing.assert_allclose(f["change"], expect, rtol=1e-3)
        np.testing.assert_allclose(f["norm"], np.linalg.norm(tr.resid_out, axis=-1), rtol=1e-3)
        if f["drawn"]:
            # within half a unit (scale / 16) of the float32 vectors; float16's 2^-11 beyond 2,048 units
            unit = f["vectors"]["unit"]
            np.testing.assert_allclose(unpack(f["vectors"]), tr.resid_out, rtol=2**-11, atol=unit / 2 * 1.001)
        else:
            assert f["vectors"] is None
        assert f["scale"] > 0
    for f, x in zip(d["floors"], [fw.embeddings] + [t.resid_out for t in fw.layers], strict=True):
        # a typical token's range: one outsized token saturates
        typical = np.median(np.quantile(np.abs(x), 0.98, axis=-1))
        assert f["scale"] == pytest.approx(typical, rel=5e-3)  # 3 significant digits
    assert d["shared_scale"] == max(f["scale"] for f in d["floors"] if f["drawn"])


@pytest.mark.parametrize("model", MODELS)
def test_logit_lens_every_floor_for_the_last_token_and_drawn_floors_for_all(client, model):
    m, d = served_model(model).model, get(client, model=model)
    fw = m.forward(m.encode(PROMPT), intermediates=True)
    T = d["num_tokens"]
    top = [lens[0]["id"] for lens in d["floors"][-1]["lens"]]
    assert top == [int(i) for i in np.argmax(fw.logits, axis=-1)], "the top floor's lens is the model's prediction"
    assert d["next_token"]["id"] == int(np.argmax(fw.logits[-1]))
    xs = [fw.embeddings] + [t.resid_out for t in fw.layers]
    for f, x in zip(d["floors"], xs, strict=True):
        assert f["lens"][-1] is not None, "the last token's lens on every floor"
        assert all(
            (g is not None) == ((f["drawn"] and t >= T - DRAWN_COLUMNS) or t == T - 1) for t, g in enumerate(f["lens"])
        )
        logp = log_softmax(m.head(x[-1:]))[0]
        want = np.argsort(-logp)[:3]
        assert [g["id"] for g in f["lens"][-1]] == [int(i) for i in want]
        np.testing.assert_allclose([g["p"] for g in f["lens"][-1]], np.exp(logp[want]), rtol=2e-3, atol=1e-9)


def test_a_long_prompt_gets_the_vectors_and_lens_for_the_columns_the_stage_draws(client):
    prompt = " ".join(["word"] * 40)
    d = get(client, prompt, "toy")
    T = d["num_tokens"]
    assert T > DRAWN_COLUMNS
    assert [g is not None for g in d["floors"][1]["lens"]] == [t >= T - DRAWN_COLUMNS for t in range(T)]
    m = served_model("toy").model
    x = m.forward(m.encode(prompt), intermediates=True).layers[0].resid_out
    v = d["floors"][1]["vectors"]
    assert (v["rows"], v["cols"]) == (DRAWN_COLUMNS, m.config.dim)
    np.testing.assert_allclose(unpack(v), x[-DRAWN_COLUMNS:], rtol=2**-11, atol=v["unit"] / 2 * 1.001)


def test_a_piece_that_is_part_of_a_character_is_sent_as_bytes(client):
    prompt = "The GPU streams 🦙 tokens"
    for model in MODELS:
        d = get(client, prompt, model)
        joined = bytes.fromhex("".join(t["bytes"].replace(" ", "") for t in d["tokens"]))
        assert joined == prompt.encode()
        assert any(t["text"] is None for t in d["tokens"]), "the llama emoji's bytes are split across tokens"
        for t in d["tokens"]:
            raw = bytes.fromhex(t["bytes"].replace(" ", ""))
            assert t["text"] == (raw.decode() if t["text"] is not None else None)


def test_toy_fallback_pieces_are_spelled_in_bytes(client):
    prompt = "Hello 🦙 cryptocurrency"
    m, d = served_model("toy").model, get(client, prompt, "toy")
    assert [t["id"] for t in d["tokens"]] == m.encode(prompt)
    assert d["num_fallback_pieces"] == sum(not p["in_vocab"] for p in d["pieces"]) > 0
    for t in d["tokens"]:
        assert t["fallback"] == (not d["pieces"][t["piece"]]["in_vocab"])


def test_without_the_model_file_the_toy_serves_and_says_so(client, no_model):
    for model in ("smollm2", None):
        d = get(client, "Paris is", model)
        assert d["model"]["requested"] == "smollm2" and d["model"]["served"] == "toy"
        assert (
            "fetch-model" in d["model"]["note"] and d["model"]["n_layers"] == served_model("toy").model.config.n_layers
        )
        assert d["model"]["choices"]["smollm2"]["served"] == "toy"
    assert get(client, "Paris is", "toy")["model"]["note"] is None


def test_the_real_scale_comes_from_the_catalog(client):
    d = get(client)
    real = catalog.model("llama-3.1-70b")
    assert d["real_model"]["hidden_size"] == real.hidden_size == 8192
    assert d["real_model"]["num_layers"] == real.num_hidden_layers == 80
    assert d["math"]["real_numbers_per_token"]["value"] == 8192 and d["math"]["real_numbers_per_token"]["sources"]
    f = facts()
    assert f["hidden_size"] == "8,192" and f["num_layers"] == "80"
    assert f["demo_layers"] == str(served_model().model.config.n_layers)


def test_too_long_prompt_gets_422_naming_the_field(client):
    for model in MODELS:
        r = client.get("/api/embeddings", params={"prompt": "word " * (MAX_PROMPT_TOKENS + 5), "model": model})
        assert r.status_code == 422
        err = r.json()["detail"][0]
        assert err["loc"][-1] == "prompt" and str(MAX_PROMPT_TOKENS) in err["msg"]
    assert client.get("/api/embeddings", params={"prompt": "x", "bogus": 1}).status_code == 422
    r = client.get("/api/embeddings", params={"model": "gpt5"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "model"


def test_an_empty_prompt_is_an_empty_picture_not_an_error(client):
    """The page asks while the box is cleared; that must not log a failed request."""
    d = get(client, "")
    assert d["num_tokens"] == 0 and d["next_token"] is None and d["tokens"] == []
    assert len(d["floors"]) == served_model().model.config.n_layers + 1 and all(
        f["vectors"] is None for f in d["floors"]
    )


def test_same_url_same_bytes_with_etag(client):
    a = client.get("/api/embeddings", params={"prompt": "cache me"})
    b = client.get("/api/embeddings", params={"prompt": "cache me"}, headers={"if-none-match": a.headers["etag"]})
    assert b.status_code == 304
    assert client.get("/api/embeddings", params={"prompt": "cache me"}).content == a.content
    body = json.loads(embeddings_json("cache me"))
    assert {k: v for k, v in a.json().items() if k != "facts"} == body  # the response adds the chapter's facts


def test_measured_prefill_vs_decode_lives_apart_and_is_cached(client):
    a = client.get("/api/embeddings/measured")
    assert a.status_code == 200
    d = a.json()
    assert d["available"] and d["measured_on"] == "this server's CPU"
    assert d["prefill_ms_per_token"] > 0 and d["decode_ms_per_token"] > 0
    assert client.get("/api/embeddings/measured").content == a.content  # measured once per process


def test_the_bare_text_may_end_the_turn_while_the_chat_template_answers(client, smollm):
    """Chapter 2 reads the bare words: after "Why is the sky blue?" SmolLM2 ends its turn (<|im_end|>); asked in
    its chat template (chapters 9 and 11) its answer starts with "The". Both are sent; the toy has no template."""
    d = client.get("/api/embeddings", params={"prompt": "Why is the sky blue?", "model": "smollm2"}).json()
    assert d["next_token"]["text"] == "<|im_end|>"
    c = d["chat_next_token"]
    ids = smollm.chat_ids("Why is the sky blue?")
    logits = smollm.forward(ids, last_only=True).logits[-1]
    assert c["id"] == int(np.argmax(logits)) and c["text"] == "The" and 0 < c["p"] <= 1
    # read on from the chat template's system turn (kept once): the same probability as one full pass
    assert c["p"] == pytest.approx(float(np.exp(log_softmax(logits[None])[0].max())), rel=2e-3)
    toy = client.get("/api/embeddings", params={"prompt": "To be", "model": "toy"}).json()
    assert toy["chat_next_token"] is None
