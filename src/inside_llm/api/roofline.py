"""Chapter 5, roofline: GET /api/roofline -> the GPU's two roofs, prefill and decode on them, decode over batch.

A thin wrapper over `sim.roofline.roofline`: roofs and ridge for the GPU and precision, the prefill
and decode points for the model, batch and prompt length (per GPU of a tensor-parallel group), the
decode curve for batch 1..1024 with which batches fit in memory, and show-the-math for each number.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ..sim import catalog
from ..sim import roofline as rl
from ..sim.derivation import math_dict
from .common import GpuId, Math, ModelId, WeightPrecision
from .gpu import MAX_BATCH, MAX_CONTEXT, check_context, check_tp

router = APIRouter(tags=["5 · roofline"])


class RooflineParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: ModelId = Field(catalog.DEFAULT_MODEL, description="Catalog model id placed on the chart.")
    gpu: GpuId = Field(catalog.DEFAULT_GPU, description="Catalog GPU id whose roofs are drawn.")
    precision: WeightPrecision = Field(
        "bf16", description="Weight storage and GEMM math path (sets the compute roof): bf16|fp16|fp8|int8|int4."
    )
    batch: int = Field(
        1,
        ge=1,
        le=MAX_BATCH,
        description=f"Chats decoded together (sequences; 1-{MAX_BATCH:,}); prefill runs that many prompts.",
    )
    prompt_tokens: int = Field(
        1024,
        ge=1,
        le=MAX_CONTEXT,
        validate_default=True,
        description="Prompt length per chat; decode reads this much KV cache per chat "
        f"(tokens; 1-{MAX_CONTEXT:,}, at most the model's window).",
    )
    tp: int = Field(
        8, ge=1, le=8, description="Tensor-parallel GPUs sharing the model (GPUs; 1, 2, 4 or 8). Points are per GPU."
    )

    @field_validator("tp")
    @classmethod
    def _tp(cls, v: int) -> int:
        return check_tp(v)

    @field_validator("prompt_tokens")
    @classmethod
    def _prompt(cls, v: int, info: ValidationInfo) -> int:
        return check_context(v, info, "prompt_tokens")


class RoofOut(BaseModel):
    """The GPU's two roofs at this precision. Units: FLOP/s, bytes/s, FLOP/byte."""

    gpu_id: str
    precision: str
    math: str = Field(description="Tensor path the GEMMs run on (an FP8 model on A100 runs BF16 math).")
    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    ridge_flops_per_byte: float
    peak_source: str
    bandwidth_source: str


class PointOut(BaseModel):
    """One engine step on one GPU: FLOPs, HBM bytes, intensity, attained and ideal FLOP/s."""

    phase: Literal["prefill", "decode"]
    batch: int
    context_tokens: int
    flops: float
    hbm_bytes: float
    arithmetic_intensity: float = Field(description="FLOP/byte.")
    seconds: float
    attained_flops_per_s: float = Field(description="FLOPs / step seconds (cost model, overheads included).")
    roof_flops_per_s: float = Field(description="The ideal roof at this intensity.")
    share_of_peak: float = Field(description="attained / peak: the share of the chip's math used.")
    roof_share_of_peak: float
    bound: Literal["memory", "compute"]


class RooflineResponse(BaseModel):
    model: dict[str, Any] = Field(description="id and name.")
    gpu: dict[str, Any] = Field(description="id and name.")
    batch: int
    prompt_tokens: int
    tp: int
    roof: RoofOut
    prefill: PointOut
    decode: PointOut
    binding_roof: Literal["memory", "compute"] = Field(
        description="The roof above the decode point: memory left of the ridge, compute right of it."
    )
    decode_curve: dict[str, Any] = Field(
        description="Decode for batch 1..1024: intensity, attained FLOP/s, share, "
        "step ms, tokens/s, fits (memory) and max_batch."
    )
    prefill_curve: dict[str, Any] = Field(
        description="Prefill of `batch` prompts of 128..4096 tokens: prompt_tokens, "
        "tokens_per_step, intensity, attained FLOP/s, share of peak."
    )
    roof_curve: dict[str, Any] = Field(description="Log-spaced points of min(peak, intensity x bandwidth); ridge.")
    math: Math


def roofline_view(p: RooflineParams) -> RooflineResponse:
    res = rl.roofline(p.model, p.gpu, p.precision, batch=p.batch, context_tokens=p.prompt_tokens, tp=p.tp)
    d = res.to_dict()
    binds = "compute" if res.decode.arithmetic_intensity >= res.roof.ridge_flops_per_byte else "memory"
    m, g = catalog.model(p.model), catalog.gpu(p.gpu)
    return RooflineResponse(
        model={"id": m.id, "name": m.name},
        gpu={"id": g.id, "name": g.name},
        batch=p.batch,
        prompt_tokens=p.prompt_tokens,
        tp=p.tp,
        roof=d["roof"],
        prefill=d["prefill"],
        decode=d["decode"],
        binding_roof=binds,
        decode_curve=d["decode_curve"],
        prefill_curve=d["prefill_curve"],
        roof_curve=d["roof_curve"],
        math={**d["math"], **math_dict(**rl.point_math(res, p.tp))},
    )


@router.get("/api/roofline", response_model=RooflineResponse)
def get_roofline(p: Annotated[RooflineParams, Query()]) -> RooflineResponse:
    """Roofs, ridge, prefill and decode points, and the decode curve over batch, per GPU."""
    return roofline_view(p)


def facts(p: RooflineParams | None = None) -> dict[str, str]:
    """Decoding the chosen batch on the chosen server: where it sits against the ridge, and the math it uses."""
    p = p or RooflineParams()
    d = roofline_view(p)
    share, ai, ridge = d.decode.share_of_peak * 100, d.decode.arithmetic_intensity, d.roof.ridge_flops_per_byte
    side = "far left of" if ai < ridge / 10 else "left of" if ai < ridge else "right of"
    return {
        "chats": "one chat" if p.batch == 1 else f"{p.batch:,} chats",
        "side": side,
        "model_name": d.model["name"],
        "gpu_name": d.gpu["name"],
        "decode_math_pct": f"{share:.2g}%",
        "decode_intensity": f"{d.decode.arithmetic_intensity:.1f}",
        "ridge": f"{d.roof.ridge_flops_per_byte:.0f}",
    }
