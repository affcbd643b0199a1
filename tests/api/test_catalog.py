"""GET /api/catalog and POST /api/catalog/models (bring your own config.json)."""

from __future__ import annotations

import json

import pytest

from inside_llm.sim.hardware import catalog
from inside_llm.sim.model.models import param_counts

# meta-llama/Llama-3.1-70B config.json, verbatim apart from rope_scaling (irrelevant here)
LLAMA_31_70B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 8192,
    "initializer_range": 0.02,
    "intermediate_size": 28672,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}
MIXTRAL = {
    "architectures": ["MixtralForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
}


def test_catalog_lists_gpus_models_nodes_references_with_sources(client):
    d = client.get("/api/catalog").json()
    assert d["defaults"] == {"gpu": "h100-sxm", "model": "llama-3.1-70b"}
    gpus = {g["id"]: g for g in d["gpus"]}
    assert {"h100-sxm", "h100-pcie", "h200", "a100-80gb", "b200", "mi300x", "l40s"} <= set(gpus)
    h100 = gpus["h100-sxm"]
    assert h100["hbm_capacity_gb"] == 80 and h100["hbm_bandwidth_tb_s"] == 3.35 and h100["sm_count"] == 132
    assert all(h100["sources"].get(k) for k in ("hbm_capacity_gb", "hbm_bandwidth_tb_s", "bf16_dense_tflops"))
    models = {m["id"]: m for m in d["models"]}
    assert models["llama-3.1-70b"]["params_b"] == pytest.approx(70.6, abs=0.1)
    assert models["mixtral-8x7b"]["is_moe"] and models["mixtral-8x7b"]["active_params_b"] < 14
    assert all(m["source"] for m in d["models"])
    assert d["nodes"] and all(n["sources"] for n in d["nodes"])
    assert len(d["references"]) == len(catalog.references())
    assert all(r["source"] and r["conditions"] for r in d["references"])
    assert d["precisions"]["formats"]["int4"]["bytes_per_value"] == pytest.approx(0.515625)


def test_post_llama_config_returns_its_parameter_count(client):
    r = client.post("/api/catalog/models", json=LLAMA_31_70B)
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["params_b"] == pytest.approx(70.6, abs=0.1)  # Hugging Face lists 70.6B parameters
    assert d["params"]["total"] == param_counts(catalog.model("llama-3.1-70b")).total
    assert d["head_dim"] == 128 and d["num_key_value_heads"] == 8 and not d["is_moe"]
    assert d["kv_bytes_per_token"] == 2 * 80 * 8 * 128 * 2  # 320 KiB per token at BF16
    assert d["weights_gb_bf16"] == pytest.approx(141, abs=1)
    assert d["dials_params"]["model"] == "custom" and d["dials_params"]["hidden_size"] == 8192


def test_posted_model_runs_on_the_dials_and_matches_the_catalog_model(client):
    d = client.post("/api/catalog/models", json=LLAMA_31_70B).json()
    custom = client.get("/api/dials", params=d["dials_params"]).json()
    catalog_70b = client.get("/api/dials").json()
    assert custom["tpot_ms"] == pytest.approx(catalog_70b["tpot_ms"])
    assert custom["memory"] == catalog_70b["memory"]


def test_post_mixtral_counts_active_and_total(client):
    d = client.post("/api/catalog/models", json=MIXTRAL).json()
    assert d["is_moe"] and d["params_b"] == pytest.approx(46.7, abs=0.1)
    # Mistral's published 12.9 B active counts the input embedding (a lookup, 0.13 B), which is not multiplied
    assert d["active_params_b"] + d["params"]["embedding"] / 1e9 == pytest.approx(12.9, abs=0.1)
    assert d["active_params_b"] == pytest.approx(12.75, abs=0.01)


def test_multimodal_text_config_is_read(client):
    d = client.post("/api/catalog/models", json={"architectures": ["X"], "text_config": LLAMA_31_70B}).json()
    assert d["params_b"] == pytest.approx(70.6, abs=0.1)


@pytest.mark.parametrize(
    "missing", ["hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"]
)
def test_missing_field_gets_422_naming_it(client, missing):
    cfg = {k: v for k, v in LLAMA_31_70B.items() if k != missing}
    r = client.post("/api/catalog/models", json=cfg)
    assert r.status_code == 422
    err = r.json()["detail"][0]
    assert err["loc"] == ["body", missing] and missing in err["msg"]


@pytest.mark.parametrize("field, value", [("num_key_value_heads", 7), ("hidden_size", -1), ("vocab_size", "many")])
def test_bad_field_gets_422_naming_it(client, field, value):
    r = client.post("/api/catalog/models", json={**LLAMA_31_70B, field: value})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", field]


def test_body_must_be_a_json_object(client):
    assert client.post("/api/catalog/models", json=[1, 2]).status_code == 422
    assert (
        client.post(
            "/api/catalog/models", content=b"not json", headers={"content-type": "application/json"}
        ).status_code
        == 422
    )


def test_body_over_the_cap_is_413(client):
    big = {**LLAMA_31_70B, "padding": "x" * 1_100_000}
    assert client.post("/api/catalog/models", json=big).status_code == 413


# The report's variants (issue 23, M1): Python's json reads Infinity, NaN and 10^400; each answered 500.
HOSTILE_NUMBERS = [
    ("hidden_size", "Infinity"),
    ("num_hidden_layers", "-Infinity"),
    ("hidden_size", "NaN"),
    ("hidden_size", "1e300"),
    ("kv_lora_rank", "1e400"),
    ("qk_nope_head_dim", "Infinity"),
    ("sliding_window", "Infinity"),
    ("num_local_experts", "Infinity"),
    ("hidden_size", "1" + "0" * 400),
    ("architectures", "5"),
    ("architectures", "true"),
    ("architectures", "1.5"),
    ("architectures", '"LlamaForCausalLM"'),
    ("architectures", "[1, 2]"),
]


@pytest.mark.parametrize("field, raw", HOSTILE_NUMBERS)
def test_non_finite_huge_and_mistyped_numbers_get_422_naming_the_field(client, field, raw):
    cfg = {**MIXTRAL, "layer_types": ["sliding_attention"] * 32, "num_attention_heads": 1}
    body = json.dumps({k: v for k, v in cfg.items() if k != field})[:-1] + f', "{field}": {raw}}}'
    r = client.post("/api/catalog/models", content=body.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 422, (field, raw, r.status_code, r.text[:200])
    err = r.json()["detail"][0]
    assert err["loc"] == ["body", field] and field in err["msg"], err
    assert "float" not in err["msg"] and "convert" not in err["msg"], err["msg"]  # words, not Python's


def test_a_hostile_number_inside_text_config_is_named_too(client):
    body = '{"architectures": ["X"], "text_config": {"hidden_size": Infinity, "num_hidden_layers": 2}}'
    r = client.post("/api/catalog/models", content=body.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "hidden_size"]
    # and the connection stays usable: the next request on it is answered
    assert client.post("/api/catalog/models", json=MIXTRAL).status_code == 200
