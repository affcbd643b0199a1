"""Catalogs: ids, the guide's hardware figures, a source for every figure, look-up errors, demo hook."""

import json

import pytest

from inside_llm.sim.hardware import catalog
from inside_llm.sim.hardware.hardware import GPU
from inside_llm.sim.model.models import from_hf_config, param_counts

GPU_IDS = [
    *("h100-sxm", "h100-pcie", "h200", "a100-80gb", "b200", "mi300x", "l40s", "gb200", "h20", "mi325x"),
    *("rtx-4090", "rtx-5090", "rtx-6000-ada", "l4"),
]
MODEL_IDS = [
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "llama-2-7b",
    "llama-2-70b",
    "mixtral-8x7b",
    "qwen2.5-72b",
    "deepseek-v3",
    "gpt-oss-120b",
    "qwen3-32b",
    "qwen3-30b-a3b",
    "llama-4-scout",
    "qwen3-235b-a22b",
]


def test_ids_and_defaults():
    assert list(catalog.gpus()) == GPU_IDS
    assert list(catalog.models())[: len(MODEL_IDS)] == MODEL_IDS
    assert catalog.gpu().id == catalog.DEFAULT_GPU == "h100-sxm"
    assert catalog.model().id == catalog.DEFAULT_MODEL == "llama-3.1-70b"


def test_h100_sxm_datasheet_figures():
    g = catalog.gpu("h100-sxm")
    assert (g.bf16_dense_tflops, g.fp8_dense_tflops, g.int8_dense_tops) == (989.4, 1978.9, 1978.9)
    assert (g.hbm_capacity_gb, g.hbm_bandwidth_tb_s, g.l2_cache_mb) == (80, 3.35, 50)
    assert (g.sm_count, g.tensor_cores_per_sm, g.interconnect_bandwidth_gb_s, g.tdp_w) == (132, 4, 900, 700)
    assert g.memory_type == "HBM3"


def test_dense_not_sparse():
    """Hopper's dense FP8 is twice dense BF16; the sparsity headline (3958) must not appear."""
    for gid in ("h100-sxm", "h100-pcie", "h200"):
        g = catalog.gpu(gid)
        assert g.fp8_dense_tflops == pytest.approx(2 * g.bf16_dense_tflops, rel=1e-3)
        assert g.fp8_dense_tflops < 2500
    assert catalog.gpu("a100-80gb").fp8_dense_tflops is None  # no FP8 tensor cores on Ampere


@pytest.mark.parametrize("gid", GPU_IDS)
def test_every_gpu_figure_has_a_source(gid):
    g = catalog.gpu(gid)
    for name in GPU.__dataclass_fields__:
        if name in ("id", "name", "vendor", "architecture", "sources") or getattr(g, name) is None:
            continue
        assert g.source(name), f"{gid}.{name} has no source"


@pytest.mark.parametrize("mid", MODEL_IDS)
def test_every_model_has_sources(mid):
    m = catalog.model(mid)
    assert m.source.startswith("https://huggingface.co/")
    assert m.published_params_b and m.published_source


def test_node_facts():
    n = catalog.node("h100-sxm")
    assert (n.gpus, n.nvswitch_chips, n.nvlink_bandwidth_gb_s) == (8, 4, 900)
    assert n.allreduce_bus_bandwidth_gb_s == 370
    assert all(n.sources.get(k) for k in ("nvswitch_chips", "nvlink_bandwidth_gb_s", "allreduce_bus_bandwidth_gb_s"))
    assert catalog.node("l40s") is None


def test_unknown_ids_name_the_field():
    with pytest.raises(ValueError, match="gpu must be one of"):
        catalog.gpu("h900")
    with pytest.raises(ValueError, match="model must be one of"):
        catalog.model("gpt-5")


def test_references_have_conditions_and_sources():
    refs = catalog.references()
    assert len(refs) >= 20
    for r in refs:
        assert r.source and r.conditions and r.engine
        assert r.model in catalog.models() and r.gpu in catalog.gpus()
        assert r.batch is not None or r.max_batch
        assert r.in_scope or r.out_of_scope_reason


def test_catalog_dict_is_json_ready():
    d = catalog.catalog_dict()
    json.dumps(d)
    row = next(m for m in d["models"] if m["id"] == "mixtral-8x7b")
    assert row["is_moe"] and row["params_b"] == pytest.approx(46.7, rel=0.005)


HF_CARD = {
    "id": "demo",
    "name": "Demo",
    "config": {
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 688,
        "vocab_size": 4096,
        "max_position_embeddings": 512,
    },
}
TRAINER_CARD = {
    "models": {
        "draft": {
            "config": {
                "dim": 128,
                "n_layers": 2,
                "n_heads": 4,
                "n_kv_heads": 1,
                "head_dim": 32,
                "ffn_dim": 384,
                "vocab_size": 11785,
                "max_seq_len": 256,
                "rope_theta": 10000.0,
            },
            "tied_embeddings": True,
        }
    }
}


@pytest.mark.parametrize(
    "card,model_id,kv_heads",
    [(HF_CARD, "demo", 2), (TRAINER_CARD, "demo-draft", 1), ({"models": {"x": {"oops": 1}}}, None, None)],
)
def test_demo_model_card_hook(tmp_path, monkeypatch, card, model_id, kv_heads):
    path = tmp_path / "model_card.json"
    path.write_text(json.dumps(card))
    monkeypatch.setattr(catalog, "DEMO_CARD", path)
    catalog.models.cache_clear()
    try:
        ids = list(catalog.models())
        assert ids[: len(MODEL_IDS)] == MODEL_IDS  # a malformed card adds nothing and breaks nothing
        if model_id:
            assert catalog.model(model_id).num_key_value_heads == kv_heads
        else:
            assert len(ids) == len(MODEL_IDS)
    finally:
        monkeypatch.undo()
        catalog.models.cache_clear()


def test_demo_trainer_card_params_match_its_own_count():
    """The tiny draft model: 1,885,952 weights by the trainer's count and by ours."""
    entries = catalog._demo_entries(TRAINER_CARD)
    assert param_counts(from_hf_config(entries[0][2])).total == 1_885_952
