"""GET /api/layer: Q/K/V, causal attention weights grouped by KV head, the MLP's activations, bounds."""

from __future__ import annotations

import numpy as np

from inside_llm.api.embeddings import MAX_PROMPT_TOKENS
from inside_llm.api.generate import demo_model
from inside_llm.api.layer import facts
from inside_llm.sim import catalog

PROMPT = "To be, or not to be, that is the"


def get(client, layer=0, prompt=PROMPT):
    r = client.get("/api/layer", params={"prompt": prompt, "layer": layer})
    assert r.status_code == 200, r.text
    return r.json()


def trace(layer, prompt=PROMPT):
    m = demo_model()
    return m.forward(m.encode(prompt), intermediates=True).layers[layer]


def test_attention_is_lower_triangular_rows_sum_to_one_and_real(client):
    m = demo_model()
    last = m.config.n_layers - 1
    d, tr = get(client, last), trace(last)
    T = d["num_tokens"]
    assert T == len(m.encode(PROMPT)) and d["layer"] == last
    assert len(d["heads"]) == m.config.n_heads
    for h in d["heads"]:
        rows = h["weights"]
        assert [len(r) for r in rows] == list(range(1, T + 1)), "row i holds keys 0..i: tokens only look back"
        for i, row in enumerate(rows):
            assert abs(sum(row) - 1) < 2e-3
            np.testing.assert_allclose(row, tr.attn[h["head"], i, :i + 1], rtol=1e-3, atol=1e-6)
        assert np.allclose(tr.attn[h["head"]][np.triu_indices(T, 1)], 0), "the model itself masks the future"


def test_query_heads_are_grouped_by_the_kv_head_they_share(client):
    c = demo_model().config
    d = get(client)
    g = c.n_heads // c.n_kv_heads
    assert len(d["groups"]) == c.n_kv_heads and c.n_kv_heads < c.n_heads
    assert sorted(h for grp in d["groups"] for h in grp["query_heads"]) == list(range(c.n_heads))
    for grp in d["groups"]:
        assert len(grp["query_heads"]) == g
        assert all(d["heads"][h]["kv_head"] == grp["kv_head"] for h in grp["query_heads"])


def test_qkv_and_mlp_are_the_layers_real_activations(client):
    c = demo_model().config
    d, tr = get(client), trace(0)
    T = d["num_tokens"]
    q, k, v = (np.array(d["qkv"][n]) for n in "qkv")
    assert q.shape == (T, c.n_heads * c.head_dim) and k.shape == v.shape == (T, c.n_kv_heads * c.head_dim)
    np.testing.assert_allclose(k, tr.k.transpose(1, 0, 2).reshape(T, -1), rtol=1e-3, atol=1e-3 * d["qkv"]["k_scale"])
    np.testing.assert_allclose(d["qkv"]["q_norm"], np.linalg.norm(tr.q, axis=-1).T, rtol=1e-3)
    hidden = np.array(d["mlp"]["hidden"])
    assert hidden.shape == (T, c.ffn_dim), "the MLP stretches each vector ffn_dim wide"
    np.testing.assert_allclose(hidden, tr.mlp_hidden, rtol=1e-2, atol=1e-2 * d["mlp"]["hidden_scale"])
    out = np.array(d["mlp"]["out"])
    assert out.shape == (T, c.dim), "... and squeezes it back to dim"
    np.testing.assert_allclose(out, tr.mlp_out, rtol=1e-3, atol=1e-3 * d["mlp"]["out_scale"])
    np.testing.assert_allclose(d["residual"]["out_norm"], np.linalg.norm(tr.resid_out, axis=-1), rtol=1e-3)
    assert d["math"]["kv_numbers_per_token"]["value"] == 2 * c.n_kv_heads * c.head_dim


def test_layers_differ(client):
    n = demo_model().config.n_layers
    assert get(client, 0)["heads"] != get(client, n - 1)["heads"]


def test_layer_out_of_range_gets_422_naming_layer_and_bound(client):
    n = demo_model().config.n_layers
    for bad in (n, -1, 99):
        r = client.get("/api/layer", params={"prompt": "x", "layer": bad})
        assert r.status_code == 422
        err = r.json()["detail"][0]
        assert err["loc"][-1] == "layer"
    assert str(n - 1) in client.get("/api/layer", params={"layer": n}).json()["detail"][0]["msg"]
    spec = client.get("/openapi.json").json()["paths"]["/api/layer"]["get"]["parameters"]
    assert next(p for p in spec if p["name"] == "layer")["schema"]["maximum"] == n - 1


def test_too_long_prompt_gets_422_naming_prompt(client):
    r = client.get("/api/layer", params={"prompt": "word " * (MAX_PROMPT_TOKENS + 1)})
    assert r.status_code == 422
    err = r.json()["detail"][0]
    assert err["loc"][-1] == "prompt" and str(MAX_PROMPT_TOKENS) in err["msg"]


def test_same_url_same_bytes(client):
    a = client.get("/api/layer", params={"prompt": "same bytes", "layer": 0})
    assert "etag" in a.headers
    assert client.get("/api/layer", params={"prompt": "same bytes", "layer": 0}).content == a.content


def test_fact_figures_from_the_catalog():
    r, f = catalog.model("llama-3.1-70b"), facts()
    assert f["num_heads"] == str(r.num_attention_heads) and f["num_kv_heads"] == str(r.num_key_value_heads)
    assert f["ffn_dim"] == f"{r.intermediate_size:,}"


def test_measured_kv_cache_vs_recompute(client):
    a = client.get("/api/layer/measured")
    d = a.json()
    assert a.status_code == 200 and d["available"] and d["same_tokens"] is True
    assert d["cached_ms_per_token"] > 0 and d["recompute_ms_per_token"] > 0 and d["speedup_x"] > 0
    assert client.get("/api/layer/measured").content == a.content


def test_an_empty_prompt_is_an_empty_picture(client):
    d = get(client, 0, "")
    assert d["num_tokens"] == 0 and d["qkv"]["q"] == [] and all(h["weights"] == [] for h in d["heads"])
    assert len(d["heads"]) == demo_model().config.n_heads
