"""GET /api/embeddings: real embedding rows, per-layer change, logit lens, fallback info, bounds, caching."""

from __future__ import annotations

import numpy as np

from inside_llm.api.embeddings import MAX_PROMPT_TOKENS, facts
from inside_llm.api.generate import demo_model
from inside_llm.sim import catalog

PROMPT = "To be, or not to be, that is the"


def get(client, prompt=PROMPT):
    r = client.get("/api/embeddings", params={"prompt": prompt})
    assert r.status_code == 200, r.text
    return r.json()


def test_floor_zero_holds_the_embedding_table_rows_of_the_prompts_ids(client):
    m, d = demo_model(), get(client)
    ids = m.encode(PROMPT)
    assert [t["id"] for t in d["tokens"]] == ids and d["num_tokens"] == len(ids)
    assert [t["cl100k_id"] for t in d["tokens"]] == m.cl100k_ids(ids)
    rows = np.array(d["floors"][0]["vectors"])
    assert rows.shape == (len(ids), m.config.dim)
    np.testing.assert_allclose(rows, m.tok_emb[ids], rtol=1e-3, atol=1e-6)
    assert d["model"]["name"] == m.name and d["model"]["n_layers"] == m.config.n_layers


def test_one_floor_per_layer_and_change_is_the_relative_update(client):
    m, d = demo_model(), get(client)
    fw = m.forward(m.encode(PROMPT), intermediates=True)
    assert len(d["floors"]) == m.config.n_layers + 1
    assert d["floors"][0]["change"] is None
    for f, tr in zip(d["floors"][1:], fw.layers, strict=True):
        expect = np.linalg.norm(tr.resid_out - tr.resid_in, axis=-1) / np.linalg.norm(tr.resid_in, axis=-1)
        np.testing.assert_allclose(f["change"], expect, rtol=1e-3)
        np.testing.assert_allclose(f["vectors"], tr.resid_out, rtol=1e-3, atol=1e-3 * f["scale"])
        np.testing.assert_allclose(f["norm"], np.linalg.norm(tr.resid_out, axis=-1), rtol=1e-3)
        assert f["scale"] > 0


def test_logit_lens_after_the_last_layer_is_the_models_prediction(client):
    m, d = demo_model(), get(client)
    logits = m.forward(m.encode(PROMPT)).logits  # [T, V]
    top = [lens[0]["id"] for lens in d["floors"][-1]["lens"]]
    assert top == [int(i) for i in np.argmax(logits, axis=-1)]
    assert d["next_token"]["id"] == int(np.argmax(logits[-1]))
    assert d["next_token"]["text"] == m.piece(d["next_token"]["id"]).decode("utf-8", errors="replace")
    for f in d["floors"]:
        for guesses in f["lens"]:
            ps = [g["p"] for g in guesses]
            assert len(ps) == 3 and ps == sorted(ps, reverse=True) and 0 < sum(ps) <= 1.0001


def test_fallback_pieces_are_spelled_in_bytes(client):
    prompt = "Hello 🦙 cryptocurrency"
    m, d = demo_model(), get(client, prompt)
    assert [t["id"] for t in d["tokens"]] == m.encode(prompt)
    assert d["num_fallback_pieces"] == sum(not p["in_vocab"] for p in d["pieces"]) > 0
    for t in d["tokens"]:
        assert t["fallback"] == (not d["pieces"][t["piece"]]["in_vocab"])
    joined = bytes.fromhex("".join(t["bytes"].replace(" ", "") for t in d["tokens"]))
    assert joined == prompt.encode()
    assert any(t["text"] is None for t in d["tokens"]), "emoji bytes shown as bytes"


def test_the_real_scale_comes_from_the_catalog(client):
    d = get(client)
    real = catalog.model("llama-3.1-70b")
    assert d["real_model"]["hidden_size"] == real.hidden_size == 8192
    assert d["real_model"]["num_layers"] == real.num_hidden_layers == 80
    assert d["math"]["real_numbers_per_token"]["value"] == 8192 and d["math"]["real_numbers_per_token"]["sources"]
    f = facts()
    assert f["hidden_size"] == "8,192" and f["num_layers"] == "80"
    assert f["demo_layers"] == str(demo_model().config.n_layers)


def test_too_long_prompt_gets_422_naming_the_field(client):
    r = client.get("/api/embeddings", params={"prompt": "word " * (MAX_PROMPT_TOKENS + 5)})
    assert r.status_code == 422
    err = r.json()["detail"][0]
    assert err["loc"][-1] == "prompt" and str(MAX_PROMPT_TOKENS) in err["msg"]
    assert client.get("/api/embeddings", params={"prompt": "x", "bogus": 1}).status_code == 422


def test_an_empty_prompt_is_an_empty_picture_not_an_error(client):
    """The page asks while the box is cleared; that must not log a failed request."""
    d = get(client, "")
    assert d["num_tokens"] == 0 and d["next_token"] is None and d["tokens"] == []
    assert len(d["floors"]) == demo_model().config.n_layers + 1 and all(f["vectors"] == [] for f in d["floors"])


def test_same_url_same_bytes_with_etag(client):
    a = client.get("/api/embeddings", params={"prompt": "cache me"})
    b = client.get("/api/embeddings", params={"prompt": "cache me"}, headers={"if-none-match": a.headers["etag"]})
    assert b.status_code == 304
    assert client.get("/api/embeddings", params={"prompt": "cache me"}).content == a.content


def test_measured_prefill_vs_decode_lives_apart_and_is_cached(client):
    a = client.get("/api/embeddings/measured")
    assert a.status_code == 200
    d = a.json()
    assert d["available"] and d["measured_on"] == "this server's CPU"
    assert d["prefill_ms_per_token"] > 0 and d["decode_ms_per_token"] > 0
    assert d["model"]["name"] == demo_model().name
    assert client.get("/api/embeddings/measured").content == a.content  # measured once per process
