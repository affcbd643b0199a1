"""GET /api/layer: Q/K/V, causal attention weights grouped by KV head, the MLP's activations, model=smollm2|toy, bounds.

Tests read the model that actually serves (SmolLM2 when its file is here, else the toy), so they hold either way.
"""

from __future__ import annotations

import numpy as np
import pytest

from inside_llm.api.demo_model import MAX_PROMPT_TOKENS, served_model
from inside_llm.api.layer import MAX_LAYER, facts
from inside_llm.api.packed import unpack
from inside_llm.sim.hardware import catalog
from inside_llm.sim.model.transformer_ops import rms_norm

PROMPT = "To be, or not to be, that is the"
MODELS = ("smollm2", "toy")


def demo_model():
    """The model the default request reads."""
    return served_model().model


def get(client, layer=0, prompt=PROMPT, model=None):
    params = {"prompt": prompt, "layer": layer} | ({"model": model} if model else {})
    r = client.get("/api/layer", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def trace(layer, prompt=PROMPT, model="smollm2"):
    m = served_model(model).model
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
            np.testing.assert_allclose(row, tr.attn[h["head"], i, : i + 1], rtol=1e-3, atol=1e-6)
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
    q, k, v = (unpack(d["qkv"][n]) for n in "qkv")
    assert q.shape == (T, c.n_heads * c.head_dim) and k.shape == v.shape == (T, c.n_kv_heads * c.head_dim)

    def close(got, packed, want, scale):  # packed: within half a unit (the block's colour scale / 16)
        assert packed["unit"] == pytest.approx(scale / 16, rel=1e-3)
        np.testing.assert_allclose(got, want, rtol=2**-11, atol=packed["unit"] / 2 * 1.001)

    for n, x, want in (("q", q, tr.q), ("k", k, tr.k), ("v", v, tr.v)):
        close(x, d["qkv"][n], want.transpose(1, 0, 2).reshape(T, -1), d["qkv"][f"{n}_scale"])
    np.testing.assert_allclose(d["qkv"]["q_norm"], np.linalg.norm(tr.q, axis=-1).T, rtol=1e-3)
    hidden = unpack(d["mlp"]["hidden"])
    assert hidden.shape == (T, c.ffn_dim), "the MLP stretches each vector ffn_dim wide"
    close(hidden, d["mlp"]["hidden"], tr.mlp_hidden, d["mlp"]["hidden_scale"])
    out = unpack(d["mlp"]["out"])
    assert out.shape == (T, c.dim), "... and squeezes it back to dim"
    close(out, d["mlp"]["out"], tr.mlp_out, d["mlp"]["out_scale"])
    m = demo_model()
    want_in = rms_norm(tr.resid_mid, m.layers[0].mlp_norm, c.norm_eps)
    close(unpack(d["mlp"]["input"]), d["mlp"]["input"], want_in, d["mlp"]["input_scale"])
    np.testing.assert_allclose(d["residual"]["out_norm"], np.linalg.norm(tr.resid_out, axis=-1), rtol=1e-3)
    assert d["math"]["kv_numbers_per_token"]["value"] == 2 * c.n_kv_heads * c.head_dim


def test_layers_differ(client):
    n = demo_model().config.n_layers
    assert get(client, 0)["heads"] != get(client, n - 1)["heads"]


def test_layer_out_of_range_gets_422_naming_layer_and_bound(client):
    for model in MODELS:
        n = served_model(model).model.config.n_layers
        for bad in (n, -1, 99):
            r = client.get("/api/layer", params={"prompt": "x", "layer": bad, "model": model})
            assert r.status_code == 422
            err = r.json()["detail"][0]
            assert err["loc"][-1] == "layer"
        assert str(n - 1) in client.get("/api/layer", params={"layer": n, "model": model}).json()["detail"][0]["msg"]
    spec = client.get("/openapi.json").json()["paths"]["/api/layer"]["get"]["parameters"]
    deepest = max(served_model(m).model.config.n_layers for m in MODELS)
    assert next(p for p in spec if p["name"] == "layer")["schema"]["maximum"] == MAX_LAYER >= deepest - 1


@pytest.mark.parametrize("model", MODELS)
def test_each_model_opens_its_own_layers_with_its_own_heads(client, model):
    s = served_model(model)
    c = s.model.config
    d = get(client, c.n_layers - 1, model=model)
    assert d["model"]["served"] == s.served and d["layer"] == c.n_layers - 1
    assert len(d["heads"]) == c.n_heads and len(d["groups"]) == c.n_kv_heads
    assert unpack(d["qkv"]["q"]).shape == (d["num_tokens"], c.n_heads * c.head_dim)
    tr = trace(c.n_layers - 1, model=model)
    np.testing.assert_allclose(d["heads"][-1]["weights"][-1], tr.attn[-1, -1], rtol=1e-3, atol=1e-6)
    assert d["model"]["choices"]["toy"] == {
        "served": "toy",
        "n_layers": served_model("toy").model.config.n_layers,
        "n_heads": served_model("toy").model.config.n_heads,
    }


def test_without_the_model_file_the_toy_serves_and_says_so(client, no_model):
    d = get(client, 1, "Paris is", "smollm2")
    assert d["model"]["served"] == "toy" and "fetch-model" in d["model"]["note"]
    n = served_model("toy").model.config.n_layers
    r = client.get("/api/layer", params={"prompt": "x", "layer": n, "model": "smollm2"})
    assert r.status_code == 422 and str(n - 1) in r.json()["detail"][0]["msg"]


def test_too_long_prompt_gets_422_naming_prompt(client):
    r = client.get("/api/layer", params={"prompt": "word " * (MAX_PROMPT_TOKENS + 1)})
    assert r.status_code == 422
    err = r.json()["detail"][0]
    assert err["loc"][-1] == "prompt" and str(MAX_PROMPT_TOKENS) in err["msg"]


def test_the_slider_in_the_scene_file_reaches_the_deepest_model():
    from inside_llm.scenes import scene_by_slug

    ctl = {c.name: c for c in scene_by_slug("layer").controls}
    if served_model("smollm2").served == "smollm2":  # the deepest model: the slider ends at its last layer exactly
        assert ctl["layer"].max == MAX_LAYER == served_model("smollm2").model.config.n_layers - 1
    assert (
        ctl["layer"].max == MAX_LAYER
        and ctl["head"].max >= max(served_model(m).model.config.n_heads for m in MODELS) - 1
    )
    assert ctl["head"].api is False and [o[0] for o in ctl["model"].options] == list(MODELS)


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
    assert d["num_tokens"] == 0 and unpack(d["qkv"]["q"]).size == 0 and all(h["weights"] == [] for h in d["heads"])
    assert len(d["heads"]) == demo_model().config.n_heads


def test_the_default_layer_and_head_look_at_content_not_a_sink(client):
    """Issue 28: from layer ~2 most heads park their attention on the first token (named a sink on the stage); the
    chapter opens where content attention shows: the default prompt, layer and head (scenes/03-layer.toml) send under
    half of the later tokens' attention to the first token, and the last token spreads over several tokens."""
    from inside_llm.scenes import scene_by_slug

    ctl = {c.name: c for c in scene_by_slug("layer").controls}
    r = client.get("/api/layer", params={"prompt": ctl["prompt"].default, "layer": ctl["layer"].default})
    weights = r.json()["heads"][ctl["head"].default]["weights"]
    sink = sum(row[0] for row in weights[1:]) / (len(weights) - 1)
    assert sink < 0.5, f"head {ctl['head'].default} of layer {ctl['layer'].default} is a sink ({sink:.0%})"
    assert sum(w > 0.1 for w in weights[-1]) >= 3
