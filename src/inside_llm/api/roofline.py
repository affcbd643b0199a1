"""Chapter 5, roofline: GET /api/roofline -> the GPU's two roofs, prefill and decode on them, decode over batch.

A thin wrapper over `sim.cost.roofline.roofline`: roofs and ridge for the GPU and precision, the prefill
and decode points for the model, batch and prompt length (per GPU of a tensor-parallel group), the
decode curve for batch 1..1024 with which batches fit in memory, and show-the-math for each number.
GET /api/roofline/measured -> this server's CPU as a roofline (its measured memory and compute roofs)
with the served model's measured prefill and decode on it (sim.measure.cpu_measure), measured once per process.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from ..sim.core.derivation import math_dict
from ..sim.cost import roofline as rl
from ..sim.hardware import catalog
from ..sim.measure import cpu_measure
from . import measured as ms
from .common import MAX_CONTEXT, ContextTokens, GpuId, Math, ModelId, TensorParallel, WeightPrecision, per_params
from .gpu import MAX_BATCH
from .measured import Measured, MeasuredHeader

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
    prompt_tokens: ContextTokens = Field(
        1024,
        description="Prompt length per chat; decode reads this much KV cache per chat "
        f"(tokens; 1-{MAX_CONTEXT:,}, at most the model's window).",
    )
    tp: TensorParallel = Field(
        8, description="Tensor-parallel GPUs sharing the model (GPUs; 1, 2, 4 or 8). Points are per GPU."
    )


class RooflineResponse(BaseModel):
    model: dict[str, Any] = Field(description="id and name.")
    gpu: dict[str, Any] = Field(description="id and name.")
    batch: int
    prompt_tokens: int
    tp: int
    roof: rl.Roof
    prefill: rl.RooflinePoint
    decode: rl.RooflinePoint
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


@per_params()
def roofline_view(p: RooflineParams) -> RooflineResponse:
    res = rl.roofline(p.model, p.gpu, p.precision, batch=p.batch, context_tokens=p.prompt_tokens, tp=p.tp)
    binds = "compute" if res.decode.arithmetic_intensity >= res.roof.ridge_flops_per_byte else "memory"
    m, g = catalog.model(p.model), catalog.gpu(p.gpu)
    return RooflineResponse(
        model={"id": m.id, "name": m.name},
        gpu={"id": g.id, "name": g.name},
        batch=p.batch,
        prompt_tokens=p.prompt_tokens,
        tp=p.tp,
        roof=res.roof,
        prefill=res.prefill,
        decode=res.decode,
        binding_roof=binds,
        decode_curve=res.decode_curve,
        prefill_curve=res.prefill_curve,
        roof_curve=res.roof_curve,
        math=math_dict(**res.math, **rl.point_math(res, p.tp)),
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


# ---- measured on this server's CPU: its own two roofs, and the served model under them ----------
# How many times the roofs are timed again when a point lands above them (each takes about a second here).
ROOF_RETRIES = 2

MEASURED_NOTE = (
    "Wall-clock time in numpy, measured once when this server process first needed it; every figure is the "
    "fastest of a few rounds, so a busy neighbour on the CPU counts least. Memory roof: numpy copying one "
    "buffer into another, both together larger than the last-level cache (bytes read + bytes written per "
    "second; one thread). Compute roof: a float32 matrix multiply with the BLAS threads the model runs with. "
    "The model's FLOPs and bytes per token are computed from its own weight arrays; its times are measured."
)


class CpuRoofs(BaseModel):
    """This CPU's two roofs, measured. Units: bytes/s, FLOP/s, FLOP/byte."""

    memory_bandwidth_bytes_per_second: float = Field(
        description="numpy copying one buffer into another: bytes read + bytes written per second (one thread)."
    )
    copy_buffer_bytes: int = Field(description="Size of each of the two buffers copied (bytes).")
    last_level_cache_bytes: int | None = Field(description="The CPU's last-level cache as Linux reports it (bytes).")
    matrix_multiply_flops_per_second: float = Field(
        description="A float32 [n, n] @ [n, n] matrix multiply, 2 n^3 FLOPs, with `blas_threads` threads (FLOP/s)."
    )
    matrix_size: int = Field(description="n of that matrix multiply.")
    blas_threads: int = Field(description="Threads BLAS runs with in this server process (the model's too).")
    ridge_flops_per_byte: float = Field(description="Compute roof / memory roof: where the two roofs meet.")


class CpuPoint(BaseModel):
    """The served model's prefill or decode on this CPU: measured time, computed FLOPs and bytes."""

    phase: Literal["prefill", "decode"]
    tokens: int = Field(description="Prefill: prompt tokens in one forward pass. Decode: tokens timed, one per pass.")
    milliseconds_per_token: float
    tokens_per_second: float
    flops_per_token: float = Field(description="2 per weight per token + attention's (computed, FLOPs).")
    bytes_per_token: float = Field(description="Weights read once per pass + keys and values read and written.")
    arithmetic_intensity: float = Field(description="FLOPs / bytes of one pass (FLOP/byte).")
    attained_flops_per_second: float = Field(description="flops_per_token / measured seconds per token (FLOP/s).")
    roof_flops_per_second: float = Field(description="min(compute roof, intensity x memory roof) (FLOP/s).")
    bound: Literal["memory", "compute"] = Field(description="The roof above the point: left or right of the ridge.")
    weights: str = Field(
        "float32",
        description="The form of the weights this pass read: float32 (the reference the inside views use), or "
        "int8 (one float32 scale per output row: sim/model/q8.py, the form the engine serves from).",
    )
    above_roof: bool = Field(
        description="Measured faster than its roof even after the roofs were measured again: the machine was busier "
        "while the roofs were timed than while the model was (the panel draws the point on its roof and says so)."
    )


class DecodePrediction(BaseModel):
    """Decode time predicted from memory bandwidth alone vs measured."""

    weight_bytes_per_token: int = Field(
        description="Bytes of every weight matrix one decode step reads, the tied unembedding included, summed "
        "from the model's arrays."
    )
    predicted_milliseconds_per_token: float = Field(description="weight bytes / measured memory bandwidth.")
    measured_milliseconds_per_token: float
    measured_over_predicted: float = Field(description="How many times slower than reading the weights alone.")
    weights_fit_in_last_level_cache: bool | None = Field(
        description="The weights a step reads fit in the CPU's last-level cache, so a step need not read them from "
        "memory and the bandwidth floor says little (None when Linux does not report the cache)."
    )


class RooflineMeasuredResponse(MeasuredHeader):
    model: dict | None = Field(
        None, description="The model timed: SmolLM2 when its file is here, else the toy (served, note say which)."
    )
    roofs: CpuRoofs | None = None
    prefill: CpuPoint | None = None
    decode: CpuPoint | None = None
    served_decode: CpuPoint | None = Field(
        None,
        description="Decode as the engine runs it: SmolLM2 from its int8 matrices (fewer bytes per token, the same "
        "products); None when the served model has no other form (the toy).",
    )
    decode_prediction: DecodePrediction | None = None
    rounds: int | None = Field(None, description="Rounds of each model timing (the fastest is kept).")
    note: str = MEASURED_NOTE


def _cpu_unavailable(reason: str, *key) -> dict:
    return RooflineMeasuredResponse(available=False, reason=reason, cpu=ms.cpu_info()).model_dump()


def _measure_cpu(served: str) -> dict:
    s = ms.served()
    roofs, timing = ms.machine_roofs(), ms.prefill_decode(s)
    mem, gemm = roofs["memory"], roofs["compute"]
    bw, peak = mem["bytes_per_s"], gemm["flops_per_s"]
    pts = cpu_measure.measured_points(s.model, timing)
    served_timing = ms.served_prefill_decode(s)
    if served_timing is not None:
        served_bytes = s.model.served_form.bytes_per_token
        pts["served_decode"] = cpu_measure.measured_points(s.model, served_timing, served_bytes)["decode"]

    def under_roofs() -> bool:
        return all(p["flops_per_s"] <= min(peak, p["arithmetic_intensity"] * bw) for p in pts.values())

    # The roofs and the points are timed at different moments; on a busy machine a roof's rounds can all be slowed
    # while the model's were not, which draws a point above its own roof. Time the roofs again (best of all rounds).
    for _ in range(ROOF_RETRIES):
        if under_roofs():
            break
        again = cpu_measure.machine_roofs()
        if again["memory"]["bytes_per_s"] > bw:
            mem, bw = again["memory"], again["memory"]["bytes_per_s"]
        if again["compute"]["flops_per_s"] > peak:
            gemm, peak = again["compute"], again["compute"]["flops_per_s"]

    def point(phase: str, tokens: int, key: str | None = None, weights: str = "float32") -> CpuPoint:
        p = pts[key or phase]
        ai = p["arithmetic_intensity"]
        return CpuPoint(
            phase=phase,
            weights=weights,
            tokens=tokens,
            milliseconds_per_token=ms.sig4(1e3 * p["seconds_per_token"]),
            tokens_per_second=ms.sig4(p["tokens_per_s"]),
            flops_per_token=p["flops_per_token"],
            bytes_per_token=p["bytes_per_token"],
            arithmetic_intensity=ms.sig4(ai),
            attained_flops_per_second=ms.sig4(p["flops_per_s"]),
            roof_flops_per_second=ms.sig4(min(peak, ai * bw)),
            bound="compute" if ai >= peak / bw else "memory",
            above_roof=p["flops_per_s"] > min(peak, ai * bw),
        )

    pred = cpu_measure.decode_prediction(s.model, bw, timing["decode_ms_per_token"])
    return RooflineMeasuredResponse(
        available=True,
        cpu=ms.cpu_info(),
        model=ms.served_model_info(s),
        roofs=CpuRoofs(
            memory_bandwidth_bytes_per_second=ms.sig4(bw),
            copy_buffer_bytes=mem["buffer_bytes"],
            last_level_cache_bytes=mem["last_level_cache_bytes"],
            matrix_multiply_flops_per_second=ms.sig4(peak),
            matrix_size=gemm["size"],
            blas_threads=roofs["blas_threads"],
            ridge_flops_per_byte=ms.sig4(peak / bw),
        ),
        prefill=point("prefill", timing["prompt_tokens"]),
        decode=point("decode", timing["decode_tokens"]),
        served_decode=None
        if served_timing is None
        else point("decode", served_timing["decode_tokens"], "served_decode", "int8"),
        decode_prediction=DecodePrediction(
            weight_bytes_per_token=pred["weight_bytes_per_token"],
            predicted_milliseconds_per_token=ms.sig4(pred["predicted_ms_per_token"]),
            measured_milliseconds_per_token=ms.sig4(pred["measured_ms_per_token"]),
            measured_over_predicted=ms.sig4(pred["measured_over_predicted"]),
            weights_fit_in_last_level_cache=None
            if mem["last_level_cache_bytes"] is None
            else pred["weight_bytes_per_token"] <= mem["last_level_cache_bytes"],
        ),
        rounds=timing["rounds"],
    ).model_dump()


MEASURED = Measured(_measure_cpu, keys=2, on_failure=_cpu_unavailable)


@router.get("/api/roofline/measured", response_model=RooflineMeasuredResponse)
async def get_measured(request: Request) -> Response:
    """This server's CPU as a roofline (measured memory and compute roofs) with the served model's prefill and
    decode on it, and decode time predicted from bandwidth vs measured (measured once per process)."""
    return await MEASURED.respond(request, (await ms.served_async()).served)
