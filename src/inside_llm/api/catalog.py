"""Catalogs: GET /api/catalog (GPUs, models, nodes, references, with sources); POST /api/catalog/models.

Not a chapter (the registry lists its router beside the chapters'). A posted
Hugging Face config.json comes back as the derived model with its computed parameter counts and
the query fields that put it on the dials (`model=custom&hidden_size=...`).
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Annotated, Any, get_type_hints

from fastapi import APIRouter, Body
from pydantic import BaseModel, Field, create_model

from ..sim.hardware import catalog
from ..sim.hardware.hardware import FORMATS, KV_PRECISIONS, WEIGHT_PRECISIONS, kv_bytes_per_value
from ..sim.model.models import SHAPE_FIELDS, ModelSpec, from_hf_config, kv_bytes_per_token, param_counts

router = APIRouter(tags=["catalog"])

# The ModelSpec fields /api/dials accepts with model=custom (Hugging Face config.json names).
CUSTOM_MODEL_FIELDS = (*SHAPE_FIELDS, "tie_word_embeddings")
LLAMA_31_8B_CONFIG = {  # meta-llama/Llama-3.1-8B config.json, architecture fields (the OpenAPI example)
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "tie_word_embeddings": False,
    "vocab_size": 128256,
    "torch_dtype": "bfloat16",
}


class ParamBreakdown(BaseModel):
    """Weights by part (numbers of weights, not bytes)."""

    embedding: int
    attention_per_layer: int
    mlp_per_layer: float = Field(
        description="All MLP weights (experts, shared experts, dense layers) per layer, averaged over the layers."
    )
    router_per_layer: float
    norms_per_layer: int
    lm_head: int
    layers: int
    total: int
    active: int


# The ModelSpec fields a derived model shows, typed as ModelSpec declares them and in its order: one owner.
_SPEC_TYPES = get_type_hints(ModelSpec)
_SHOWN_SPEC_FIELDS = {"id", "name", *CUSTOM_MODEL_FIELDS, "attention_bias"}
ModelShape = create_model(
    "ModelShape", **{f.name: (_SPEC_TYPES[f.name], ...) for f in fields(ModelSpec) if f.name in _SHOWN_SPEC_FIELDS}
)


class DerivedModel(ModelShape):
    """A model as POST /api/catalog/models returns it: its shape, then what is computed from it."""

    is_moe: bool
    published_params_b: float | None = None
    params_b: float = Field(description="Parameters computed from the shape, billions.")
    active_params_b: float = Field(description="Parameters used per token (top-k experts only), billions.")
    params: ParamBreakdown
    kv_bytes_per_token: float = Field(description="KV-cache bytes one token occupies at BF16, all layers (B).")
    weights_gb_bf16: float = Field(description="All weights at BF16, decimal GB.")
    dials_params: dict[str, Any] = Field(description="Query fields for GET /api/dials with model=custom.")


def derived_model(m: ModelSpec) -> DerivedModel:
    """A model with its computed counts, sizes and the dials fields that reproduce it."""
    pc = param_counts(m)
    row = catalog.model_summary(m)
    keep = set(DerivedModel.model_fields) - {"params", "kv_bytes_per_token", "weights_gb_bf16", "dials_params"}
    dials = {"model": "custom", **{k: getattr(m, k) for k in CUSTOM_MODEL_FIELDS}}
    return DerivedModel(
        **{k: row[k] for k in keep},
        params=ParamBreakdown(**{k: getattr(pc, k) for k in ParamBreakdown.model_fields}),
        kv_bytes_per_token=kv_bytes_per_token(m, kv_bytes_per_value("bf16")),
        weights_gb_bf16=round(pc.total * 2 / 1e9, 3),
        dials_params=dials,
    )


@router.get("/api/catalog")
def get_catalog() -> dict[str, Any]:
    """Every GPU, model, 8-GPU node and published reference measurement, each figure with its source."""
    return {
        **catalog.catalog_dict(),
        "references": [asdict(r) for r in catalog.references()],
        "precisions": {
            "weights": list(WEIGHT_PRECISIONS),
            "kv": list(KV_PRECISIONS),
            "formats": {k: {**asdict(f), "bytes_per_value": f.bytes_per_value} for k, f in FORMATS.items()},
        },
    }


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs nest the language model under `text_config`; read that when the top has no shape."""
    inner = cfg.get("text_config")
    if "hidden_size" not in cfg and isinstance(inner, dict):
        return {**inner, "architectures": cfg.get("architectures") or inner.get("architectures")}
    return cfg


@router.post("/api/catalog/models", response_model=DerivedModel)
def post_model(
    config: Annotated[
        dict[str, Any],
        Body(
            description="A Hugging Face config.json (only the architecture fields are read; body at most 1 MB).",
            examples=[LLAMA_31_8B_CONFIG],
        ),
    ],
) -> DerivedModel:
    """Derive a model from its config.json: shape, computed parameters, KV bytes per token, dials fields.

    Required: hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, vocab_size.
    A missing or bad field gets a 422 whose `loc` names it; so do Infinity, NaN, numbers beyond 2^40 and an
    `architectures` that is not a list of names.
    """
    catalog.check_hf_numbers(config)
    cfg = _text_config(config)
    name = str(cfg.get("_name_or_path") or cfg.get("name") or "Custom model")[:100]
    return derived_model(from_hf_config(cfg, model_id="custom", name=name))
