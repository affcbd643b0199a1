"""Chapter 10, eight GPUs, one model: GET /api/parallelism -> per-GPU memory, TP all-reduce traffic,
PP stages and bubbles, and the effect on time to first token and tokens/s (sim.cost.parallelism)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from ..sim.cost import parallelism as par
from ..sim.hardware import catalog
from ..sim.hardware.hardware import WEIGHT_PRECISIONS
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


def _split_words(d: dict[str, Any], tp: int, pp: int, layers_8: int) -> tuple[str, str]:
    """The split and the layers in words: each stage's own weights (only the first holds the embedding, only
    the last the LM head), and how many layers a stage runs (or would, in a pipeline over the whole server)."""
    stages, n_layers = d["stages"], d["num_layers"]
    if tp > 1 and pp > 1:
        how = f"Split {tp} ways by tensor and into {pp} pipeline stages"
    elif tp > 1:
        how = f"Split {tp} ways by tensor"
    elif pp > 1:
        how = f"Split into {pp} pipeline stages"
    else:
        how = "Kept whole on one GPU"
    first, last = stages[0]["weights_gb"], stages[-1]["weights_gb"]
    middle = [s["weights_gb"] for s in stages[1:-1]]
    gpu = "each GPU" if tp * pp > 1 else "the GPU"
    if pp > 1 and middle and max(first, last) - min(middle) >= 0.05:
        ends = f"{first:.1f} GB" if abs(first - last) < 0.05 else f"{first:.1f} and {last:.1f} GB"
        held = (
            f"{gpu} of a middle stage holds {min(middle):.1f} GB of weights, the first and last stage "
            f"{ends} (the first also holds the embedding, the last the LM head)"
        )
    elif pp > 1:
        held = f"{gpu} holds {first:.1f} GB of weights (the first stage also the embedding, the last the LM head)"
    else:
        held = f"{gpu} holds {first:.1f} GB of weights"
    runs = sorted({s["num_layers"] for s in stages})
    per = f"{runs[0]}" if len(runs) == 1 else f"{runs[0]}-{runs[-1]}"
    if pp > 1:
        layers = f"each stage runs {per} of its {n_layers} layers"
    else:
        layers = f"a pipeline over all {par.MAX_NODE_GPUS} GPUs would give each {layers_8} of its {n_layers} layers"
    return f"{how}, {held}", layers


def facts(p: ParallelismParams | None = None) -> dict[str, str]:
    """The chosen split: each stage's weights per GPU; the server's NVLink; the layers per stage."""
    p = p or ParallelismParams()
    d = _compute(par.ParallelParams(**p.model_dump()))
    node, pp8 = d["node"], _compute(par.ParallelParams(model=p.model, gpu=p.gpu, precision=p.precision, tp=1, pp=8))
    split, layers = _split_words(d, p.tp, p.pp, pp8["stages"][0]["num_layers"])
    return {
        "split": split,
        "layers": layers,
        "precision": p.precision.upper(),
        "model_name": d["model_name"],
        "weights_gb": f"{d['model_weights_gb']:.0f}",
        "gpu_name": re.sub(r"^NVIDIA |\s*\d+GB$", "", d["gpu_name"]),
        "hbm_capacity_gb": f"{d['capacity_gb']:.0f}",
        "nvlink_gb_s": f"{node['nvlink_bandwidth_gb_s']:.0f}",
        "busbw_gb_s": f"{d['prefill']['tensor']['busbw_gb_s']:.0f}",
        "num_layers": str(d["num_layers"]),
        "nvswitch_chips": str(node["nvswitch_chips"]),
    }
