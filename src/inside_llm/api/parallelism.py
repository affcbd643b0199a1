"""Chapter 10, eight GPUs, one model: GET /api/parallelism -> per-GPU memory, TP all-reduce traffic,
PP stages and bubbles, and the effect on time to first token and tokens/s (sim.parallelism)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from ..sim import catalog
from ..sim import parallelism as par
from ..sim.hardware import WEIGHT_PRECISIONS
from .common import ModelId, NodeGpu, WeightPrecision

router = APIRouter(tags=["10 · parallelism"])


class ParallelismParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: ModelId = Field(catalog.DEFAULT_MODEL, description="Catalog model id.")
    gpu: NodeGpu = Field(catalog.DEFAULT_GPU, description="GPU of the 8-GPU NVLink server (HGX-style baseboard).")
    precision: WeightPrecision = Field("bf16", description="Weight format: " + " | ".join(WEIGHT_PRECISIONS) + ".")
    gpus: int = Field(
        8,
        ge=1,
        le=par.MAX_NODE_GPUS,
        description=f"GPUs used (1-{par.MAX_NODE_GPUS}); tp x pp must divide it, the rest are replicas.",
    )
    tp: int = Field(8, ge=1, le=par.MAX_NODE_GPUS, description="Tensor-parallel GPUs per replica (1-8).")
    pp: int = Field(1, ge=1, le=par.MAX_NODE_GPUS, description="Pipeline stages per replica (1-8).")
    micro_batches: int = Field(
        8,
        ge=1,
        le=par.MAX_MICRO_BATCHES,
        description="Pieces the batch is cut into so "
        f"pipeline stages overlap (1-{par.MAX_MICRO_BATCHES}, at most batch; ignored when pp = 1).",
    )
    batch: int = Field(16, ge=1, le=par.MAX_BATCH, description=f"Chats per replica (sequences; 1-{par.MAX_BATCH}).")
    prompt_tokens: int = Field(
        1024, ge=1, le=par.MAX_PROMPT_TOKENS, description=f"Prompt length (tokens; 1-{par.MAX_PROMPT_TOKENS:,})."
    )
    output_tokens: int = Field(
        256, ge=1, le=par.MAX_OUTPUT_TOKENS, description=f"Answer length (tokens; 1-{par.MAX_OUTPUT_TOKENS:,})."
    )


@lru_cache(maxsize=512)
def _compute(p: par.ParallelParams) -> dict[str, Any]:
    return par.parallelism(p)


@router.get("/api/parallelism", response_model=par.ParallelismResult)
def get_parallelism(p: Annotated[ParallelismParams, Query()]) -> dict[str, Any]:
    """How the model is split over the node's GPUs, the NVLink traffic and bubbles, and the resulting speed."""
    return _compute(par.ParallelParams(**p.model_dump()))


def facts(p: ParallelismParams | None = None) -> dict[str, str]:
    """The chosen split: weights per GPU; the server's NVLink; the model's layers over an 8-stage pipeline."""
    p = p or ParallelismParams()
    d = _compute(par.ParallelParams(**p.model_dump()))
    node, pp8 = d["node"], _compute(par.ParallelParams(model=p.model, gpu=p.gpu, precision=p.precision, tp=1, pp=8))
    return {
        "tp": str(p.tp),
        "pp": str(p.pp),
        "per_gpu_gb": f"{d['weights_gb']:.1f}",
        "precision": p.precision.upper(),
        "model_name": d["model_name"],
        "weights_gb": f"{d['model_weights_gb']:.0f}",
        "gpu_name": re.sub(r"^NVIDIA |\s*\d+GB$", "", d["gpu_name"]),
        "hbm_capacity_gb": f"{d['capacity_gb']:.0f}",
        "nvlink_gb_s": f"{node['nvlink_bandwidth_gb_s']:.0f}",
        "busbw_gb_s": f"{d['prefill']['tensor']['busbw_gb_s']:.0f}",
        "layers_per_gpu": str(pp8["stages"][0]["num_layers"]),
        "num_layers": str(d["num_layers"]),
        "nvswitch_chips": str(node["nvswitch_chips"]),
    }
