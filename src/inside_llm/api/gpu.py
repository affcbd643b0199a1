"""Chapter 4, the GPU: GET /api/gpu -> the package's real layout and one decode step streaming through it.

Layout (SM groups, tensor cores, L2, HBM stacks and where they sit) comes from `sim.hardware.gpu_layout`;
the step's bytes and time per GPU from the cost model (`decode_stream`), with a slow-motion factor
so the page can show one step in a few seconds and say by how much time was slowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from ..sim.core.derivation import math_dict
from ..sim.core.result import about, as_json
from ..sim.cost import engines, gpu_layout
from ..sim.cost.costmodel import EngineConfig, memory_per_gpu
from ..sim.cost.roofline import MAX_BATCH
from ..sim.hardware import catalog
from .common import MAX_CONTEXT, ContextTokens, GpuId, Math, ModelId, TensorParallel, WeightPrecision, per_params

router = APIRouter(tags=["4 · gpu"])

TILES_PER_STEP = 120  # the drawing splits one step's bytes into this many travelling tiles


class GpuParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gpu: GpuId = Field(catalog.DEFAULT_GPU, description="Catalog GPU id (h100-sxm, h200, b200, mi300x, ...).")
    model: ModelId = Field(catalog.DEFAULT_MODEL, description="Catalog model id whose decode step is streamed.")
    precision: WeightPrecision = Field(
        "bf16", description="Weight storage (bytes per weight): bf16|fp16|fp8|int8|int4."
    )
    batch: int = Field(1, ge=1, le=MAX_BATCH, description=f"Chats decoded together (sequences; 1-{MAX_BATCH:,}).")
    context: ContextTokens = Field(
        1024,
        description="Tokens already in each chat, read from the KV cache every step "
        f"(tokens; 1-{MAX_CONTEXT:,}, at most the model's window).",
    )
    tp: TensorParallel = Field(
        8, description="Tensor-parallel GPUs sharing the model (GPUs; 1, 2, 4 or 8). Figures are per GPU."
    )


@dataclass(frozen=True)
class StreamOut(gpu_layout.DecodeStream):
    """One decode step on one GPU, and how the page slows it down."""

    slow_motion: float = about("Time on screen / real time (a 1-2-5 factor).")
    screen_step_s: float = about("Seconds one step takes on screen.")
    tiles_per_step: int = about("Travelling tiles the drawing splits one step's bytes into.")
    tile_bytes: float = about("Bytes each drawn tile stands for.")
    kv_tiles: int = about("Of tiles_per_step, how many carry KV cache rather than weights.")


class GpuResponse(BaseModel):
    gpu: dict[str, Any] = Field(
        description="id, name, vendor, architecture, engine_profile (the engine whose efficiencies price the step)."
    )
    model: dict[str, Any] = Field(description="id, name, max context.")
    precision: str
    batch: int
    context: int
    tp: int
    layout: dict[str, Any] = Field(
        description="sim.hardware.gpu_layout.layout: SMs by group, tensor cores, L2, HBM, sources."
    )
    package: dict[str, Any] = Field(description="HBM sites and placement, L2 partitions, I/O dies, source.")
    stream: StreamOut
    memory: dict[str, Any] = Field(description="Memory per GPU (GB) for this batch and context; fits.")
    math: Math


@per_params()
def gpu_view(p: GpuParams) -> GpuResponse:
    g, m = catalog.gpu(p.gpu), catalog.model(p.model)
    cfg = EngineConfig(m, g, tp=p.tp, precision=p.precision, efficiency=engines.profile("auto", g).efficiency())
    stream = gpu_layout.decode_stream(cfg, p.batch, p.context)
    mem = memory_per_gpu(cfg, p.batch, p.context)
    slow = gpu_layout.slow_motion(stream.step_ms / 1e3)
    kv_tiles = round(TILES_PER_STEP * stream.kv_bytes_per_step / stream.bytes_per_step)
    return GpuResponse(
        gpu={
            "id": g.id,
            "name": g.name,
            "vendor": g.vendor,
            "architecture": g.architecture,
            "engine_profile": engines.profile("auto", g).label(),
        },
        model={"id": m.id, "name": m.name, "max_context": m.max_position_embeddings},
        precision=p.precision,
        batch=p.batch,
        context=p.context,
        tp=p.tp,
        layout=gpu_layout.layout(g),
        package=gpu_layout.package(g),
        stream=StreamOut(
            **vars(stream),
            slow_motion=slow["factor"],
            screen_step_s=slow["screen_step_s"],
            tiles_per_step=TILES_PER_STEP,
            tile_bytes=stream.bytes_per_step / TILES_PER_STEP,
            kv_tiles=kv_tiles,
        ),
        memory=as_json(mem),
        math=math_dict(**gpu_layout.decode_stream_math(cfg, p.batch, p.context)),
    )


@router.get("/api/gpu", response_model=GpuResponse)
def get_gpu(p: Annotated[GpuParams, Query()]) -> GpuResponse:
    """The chosen GPU's package layout and one decode step of the chosen model streaming through it, per GPU."""
    return gpu_view(p)


def facts(p: GpuParams | None = None) -> dict[str, str]:
    """The scene's fact: the chosen GPU's memory and SMs, and the chosen model's decode step on it."""
    p = p or GpuParams()
    d = gpu_view(p)
    lay, s = d.layout, d.stream
    return {
        "gpu_name": d.gpu["name"],
        "hbm_capacity_gb": f"{lay['hbm_capacity_gb']:g}",
        "memory_type": lay["memory_type"],
        "hbm_stacks": str(lay["hbm_stacks"]),
        "hbm_bandwidth_tb_s": f"{lay['hbm_bandwidth_tb_s']:g}",
        "sm_count": str(lay["sm_count"]),
        "sm_units": f"{lay['sm_label']}s" if lay["sm_label"] == "SM" else f"{lay['sm_name']}s ({lay['sm_label']}s)",
        "tensor_cores_per_sm": str(lay["tensor_cores_per_sm"]),
        "matrix_units": f"{lay['matrix_unit']}s",
        "model_name": d.model["name"],
        "tp": str(d.tp),
        "split": f"split over {d.tp} GPUs" if d.tp > 1 else "on one GPU",
        "step_gb": f"{s.bytes_per_step / 1e9:.1f}",
        "step_ms": f"{s.step_ms:.1f}",
    }
