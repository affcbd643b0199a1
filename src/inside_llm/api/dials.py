"""Chapter 11, the dials: GET /api/dials -> time to first token, tokens/s, cost and memory per GPU.

A thin wrapper over `sim.cost.serving.estimate`, plus a TPOT-vs-context curve for the small chart.
Bring your own model or GPU without a registry change: `model=custom` reads the Hugging Face
config.json fields below (defaults: Llama 3.1 70B's shape), `gpu=custom` the GPU fields (defaults:
H100 SXM's datasheet). Those fields are ignored for catalog ids. The catalog routes live in
`api/catalog.py`.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Annotated, Any, Literal, NamedTuple

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ..sim.core.errors import SimError
from ..sim.cost import serving, table
from ..sim.cost.costmodel import EngineConfig, MemoryBreakdown, memory_per_gpu, step_time
from ..sim.hardware import catalog
from ..sim.hardware.hardware import GPU, gpu_from_fields
from ..sim.model.models import ModelSpec
from . import catalog as catalog_api
from .catalog import derived_model
from .common import KvPrecision, Math, WeightPrecision, label, per_params

router = APIRouter(tags=["11 · dials"])

ModelOrCustom = Literal[(*catalog.models(), "custom")]  # type: ignore[valid-type]
GpuOrCustom = Literal[(*catalog.gpus(), "custom")]  # type: ignore[valid-type]
CURVE_POINTS = 33
CURVE_MIN_CONTEXT = 16
_M = catalog.model(catalog.DEFAULT_MODEL)  # defaults of the custom-model fields
_G = catalog.gpu(catalog.DEFAULT_GPU)  # defaults of the custom-GPU fields
CUSTOM_GPU_FIELDS = (
    "bf16_dense_tflops",
    "fp8_dense_tflops",
    "int8_dense_tops",
    "hbm_capacity_gb",
    "hbm_bandwidth_tb_s",
    "interconnect_bandwidth_gb_s",
)
CUSTOM_MODEL_FIELDS = catalog_api.CUSTOM_MODEL_FIELDS


def _shape(default: int, hi: int, what: str) -> Any:
    return Field(default, ge=1, le=hi, description=f"model=custom only: {what} (config.json; 1-{hi:,}).")


def _hw(default: float | None, lo: float, hi: float, what: str) -> Any:
    """A custom-GPU figure with a practical floor (a tiny positive value made the estimate divide by zero)."""
    return Field(float(default or 0), ge=lo, le=hi, description=f"gpu=custom only: {what}; {lo:g}-{hi:,.0f}.")


class DialsParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: ModelOrCustom = Field(catalog.DEFAULT_MODEL, description="Catalog model id, or `custom` (fields below).")
    gpu: GpuOrCustom = Field(catalog.DEFAULT_GPU, description="Catalog GPU id, or `custom` (fields below).")
    gpus: int = Field(8, ge=1, le=serving.MAX_GPUS, description=f"GPUs in the server (1-{serving.MAX_GPUS}).")
    tp: int = Field(
        8,
        ge=1,
        le=64,
        description="Tensor-parallel GPUs per replica (1-64); tp x pp must divide gpus. "
        "Beyond one node (8 GPUs; 72 on GB200 NVL72) its all-reduces cross the network.",
    )
    pp: int = Field(1, ge=1, le=128, description="Pipeline stages per replica (1-128, at most the model's layers).")
    precision: WeightPrecision = Field("bf16", description="Weight storage and GEMM math: bf16|fp16|fp8|int8|int4.")
    kv_precision: KvPrecision = Field("bf16", description="KV-cache storage: bf16|fp8|int8|int4.")
    batch: int = Field(
        16,
        ge=1,
        le=serving.MAX_BATCH,
        description=f"Requests run together per replica (sequences; 1-{serving.MAX_BATCH:,}).",
    )
    prompt_tokens: int = Field(
        1024,
        ge=1,
        le=serving.MAX_TOKENS,
        description="Prompt length per request "
        f"(tokens; 1-{serving.MAX_TOKENS:,}; prompt + output <= the model's context).",
    )
    output_tokens: int = Field(
        256, ge=1, le=serving.MAX_TOKENS, description=f"Answer length per request (tokens; 1-{serving.MAX_TOKENS:,})."
    )
    price_per_gpu_hour: float = Field(3.0, ge=0, le=1000, description="Rental price (USD per GPU-hour; 0-1000).")
    throughput_mode: Literal["static", "continuous"] = Field(
        "static",
        description="Which batching `tokens_per_s_total` and the cost assume: static batches (the "
        "next starts when the last ends) or continuous batching (every seat refilled as a chat ends).",
    )
    engine: Literal["auto", "tensorrt-llm", "vllm", "sglang"] = Field(
        "auto",
        description="Serving engine whose published efficiency profile prices the figures (sim.cost.engines): auto = "
        "the best published engine for the GPU's vendor (TensorRT-LLM on NVIDIA, vLLM on AMD).",
    )
    format: Literal["json", "csv"] = Field(
        "json", description="json, or csv: one header and one row (sim/cost/table.py's columns; no unit)."
    )
    hidden_size: int = _shape(_M.hidden_size, 65536, "hidden size, numbers per token")
    num_hidden_layers: int = _shape(_M.num_hidden_layers, 1024, "layers")
    num_attention_heads: int = _shape(_M.num_attention_heads, 1024, "query heads")
    num_key_value_heads: int = _shape(_M.num_key_value_heads, 1024, "key/value heads (must divide query heads)")
    head_dim: int = _shape(_M.head_dim, 1024, "dimension per head")
    intermediate_size: int = _shape(_M.intermediate_size, 1 << 20, "MLP width (per expert)")
    vocab_size: int = _shape(_M.vocab_size, 1 << 21, "vocabulary size, tokens")
    max_position_embeddings: int = _shape(_M.max_position_embeddings, serving.MAX_TOKENS, "context window, tokens")
    num_local_experts: int = _shape(_M.num_local_experts, 1024, "experts per MoE layer (1 = dense)")
    num_experts_per_tok: int = _shape(_M.num_experts_per_tok, 64, "experts each token uses")
    tie_word_embeddings: bool = Field(False, description="model=custom only: lm_head shares the embedding table.")
    bf16_dense_tflops: float = _hw(_G.bf16_dense_tflops, 1, 1e5, "dense BF16 tensor throughput (TFLOP/s)")
    fp8_dense_tflops: float = _hw(
        _G.fp8_dense_tflops,
        0,
        1e5,
        "dense FP8 tensor throughput (TFLOP/s; 0 = no FP8 "
        "tensor cores, FP8 weights then use BF16 math; else at least 1)",
    )
    int8_dense_tops: float = _hw(
        _G.int8_dense_tops, 0, 1e5, "dense INT8 tensor throughput (TOP/s; 0 = none, else at least 1)"
    )
    hbm_capacity_gb: float = _hw(_G.hbm_capacity_gb, 1, 1e4, "memory capacity (decimal GB)")
    hbm_bandwidth_tb_s: float = _hw(_G.hbm_bandwidth_tb_s, 0.01, 1e3, "memory bandwidth (TB/s)")
    interconnect_bandwidth_gb_s: float = _hw(
        _G.interconnect_bandwidth_gb_s,
        1,
        1e5,
        "GPU-to-GPU bandwidth per GPU, both directions added (GB/s; H100 NVLink: 900)",
    )

    @field_validator("fp8_dense_tflops", "int8_dense_tops")
    @classmethod
    def _none_or_real(cls, v: float, info: ValidationInfo) -> float:
        if 0 < v < 1:
            raise SimError(
                info.field_name, f"{label(info.field_name)} must be 0 (no such tensor path) or at least 1, not {v:g}."
            )
        return v


class CurveOut(BaseModel):
    """Decode step time as every sequence's context grows (same batch and sharding)."""

    context_tokens: list[int]
    tpot_ms: list[float]
    fits: list[bool] = Field(description="Whether `batch` sequences of this length fit in memory.")
    mean_context_tokens: float = Field(description="prompt + output/2: where tpot_ms is read off the curve.")


class GpuOut(BaseModel):
    id: str
    name: str
    hbm_capacity_gb: float
    hbm_bandwidth_tb_s: float
    bf16_dense_tflops: float
    dials_params: dict[str, Any] = Field(
        description="Query fields for GET /api/dials with gpu=custom (0 TFLOP/s: no tensor path for that format)."
    )


class HypotheticalOut(BaseModel):
    """The figures of a setup that does not fit in memory: what it would do if it could run."""

    reason: str
    ttft_ms: float
    tpot_ms: float
    e2e_latency_ms: float
    tokens_per_s_per_user: float
    tokens_per_s_total: float
    tokens_per_s_static: float
    tokens_per_s_continuous: float
    cost_per_million_tokens_usd: float
    mfu: float
    bandwidth_utilization: float


_NULL_WHEN_NO_FIT = " Null when the setup does not fit (then under `hypothetical`)."


class DialsResponse(BaseModel):
    params: dict[str, Any] = Field(description="The inputs as used (custom model/GPU reduced to `custom`).")
    model: dict[str, Any] = Field(description="The model: shape and computed parameters (as POST /api/catalog/models).")
    gpu: GpuOut
    fits: bool = Field(
        description="Whether the batch fits in memory; when not, every time, rate and cost figure is "
        "null and the would-be figures sit under `hypothetical`."
    )
    hypothetical: HypotheticalOut | None
    ttft_ms: float | None = Field(description="Prefill of one batch of `batch` prompts (ms)." + _NULL_WHEN_NO_FIT)
    tpot_ms: float | None = Field(
        description="Mean decode step over the answer (ms per output token)." + _NULL_WHEN_NO_FIT
    )
    e2e_latency_ms: float | None
    tokens_per_s_per_user: float | None
    tokens_per_s_total: float | None = Field(
        description="Output tokens/s of all replicas together, under `throughput_mode`." + _NULL_WHEN_NO_FIT
    )
    tokens_per_s_static: float | None = Field(description="Static batches: the next batch starts when this one ends.")
    tokens_per_s_continuous: float | None = Field(
        description="Continuous batching: every seat refilled as a chat ends."
    )
    throughput_mode: Literal["static", "continuous"] = Field(
        description="Which of the two `tokens_per_s_total` and the cost show."
    )
    nodes: serving.NodeFacts
    engine_profile: str = Field(description="The engine profile that priced the figures (sim.cost.engines), in words.")
    cost_per_million_tokens_usd: float | None
    memory: MemoryBreakdown
    max_batch: int = Field(description="Largest batch that fits at prompt + output tokens.")
    bound: Literal["memory", "compute"] = Field(description="The roof the decode step sits under.")
    prefill_bound: Literal["memory", "compute"]
    mfu: float | None
    bandwidth_utilization: float | None
    replicas: int
    tpot_curve: CurveOut
    math: Math


def _custom_model(p: DialsParams) -> ModelSpec:
    fields = {k: getattr(p, k) for k in CUSTOM_MODEL_FIELDS}
    return ModelSpec(id="custom", name="Custom model", source="user input (query fields)", **fields)


def _custom_gpu(p: DialsParams) -> GPU:
    fields = {k: getattr(p, k) or None for k in CUSTOM_GPU_FIELDS}  # 0 TFLOP/s: no tensor path
    return gpu_from_fields({**fields, "name": "Custom GPU"}, gpu_id="custom")


def serving_params(p: DialsParams) -> serving.ServingParams:
    """The sim's params for a query (custom model/GPU built from their fields); SimError names a field."""
    model = _custom_model(p) if p.model == "custom" else p.model
    gpu = _custom_gpu(p) if p.gpu == "custom" else p.gpu
    return serving.params_from(p, model=model, gpu=gpu)


def tpot_curve(cfg: EngineConfig, sp: serving.ServingParams) -> CurveOut:
    """Decode step at contexts from 16 tokens to the model's window, log-spaced, plus the mean context.

    Same step as serving's TPOT: min(pp, batch) micro-batches in flight, the largest of ceil(batch / that)
    sequences; a sequence attends to its whole context.
    """
    xs, tpot, fits = _curve(cfg, math.ceil(sp.batch / min(cfg.pp, sp.batch)), sp.batch)
    return CurveOut(
        context_tokens=list(xs),
        tpot_ms=list(tpot),
        fits=list(fits),
        mean_context_tokens=sp.prompt_tokens + sp.output_tokens / 2,
    )


@lru_cache(maxsize=256)
def _curve(cfg: EngineConfig, per_mb: int, batch: int) -> tuple[tuple[int, ...], tuple[float, ...], tuple[bool, ...]]:
    """The curve's points: a pure function of the engine, the micro-batch and the batch, not of the prompt and
    answer lengths or the price (moving those re-prices the state without stepping the curve again)."""
    top = max(cfg.model.max_position_embeddings, CURVE_MIN_CONTEXT * 2)
    lo, hi = math.log2(CURVE_MIN_CONTEXT), math.log2(top)
    xs = tuple(sorted({round(2 ** (lo + (hi - lo) * i / (CURVE_POINTS - 1))) for i in range(CURVE_POINTS)}))
    tpot = tuple(
        step_time(cfg, num_decode_seqs=per_mb, decode_context_tokens_total=per_mb * x).seconds * 1e3 for x in xs
    )
    # memory grows with context (KV and activations never shrink), so the points that fit are a prefix:
    # bisect for its end instead of pricing the memory at every point
    lo, hi = 0, len(xs)  # invariant: xs[:lo] fit, xs[hi:] do not
    while lo < hi:
        mid = (lo + hi) // 2
        if memory_per_gpu(cfg, batch, xs[mid]).fits:
            lo = mid + 1
        else:
            hi = mid
    return xs, tpot, (True,) * lo + (False,) * (len(xs) - lo)


@lru_cache(maxsize=64)
def _model_out(m: ModelSpec) -> dict[str, Any]:
    """A model's counts and sizes as the response gives them: a pure function of the model, kept per model."""
    return derived_model(m).model_dump()


class DialsState(NamedTuple):
    """One state's estimate, the response built from it and its JSON body: the endpoint, the CSV and the fact
    read the same."""

    estimate: serving.ServingEstimate
    response: DialsResponse
    body: bytes


@per_params(maxsize=128)
def dials_state(p: DialsParams) -> DialsState:
    """The estimate for p, computed once per state (the answer, its fact and the page's fact all read it)."""
    sp = serving_params(p)
    est, cfg = serving.estimate_resolved(sp)
    g = cfg.gpu
    d = est.to_dict()
    response = DialsResponse(
        **d,
        params=serving.params_dict(sp),
        model=_model_out(cfg.model),
        gpu=GpuOut(
            id=g.id,
            name=g.name,
            hbm_capacity_gb=g.hbm_capacity_gb,
            hbm_bandwidth_tb_s=g.hbm_bandwidth_tb_s,
            bf16_dense_tflops=g.bf16_dense_tflops,
            dials_params={"gpu": "custom", **{k: float(getattr(g, k) or 0) for k in CUSTOM_GPU_FIELDS}},
        ),
        tpot_curve=tpot_curve(cfg, sp),
    )
    return DialsState(est, response, JSONResponse(response.model_dump(mode="json")).body)  # as FastAPI writes it


def dials(p: DialsParams) -> DialsResponse:
    return dials_state(p).response


@router.get(
    "/api/dials",
    response_model=DialsResponse,
    responses={200: {"content": {"text/csv": {"schema": {"type": "string"}}}}},
)
def get_dials(p: Annotated[DialsParams, Query()]) -> Any:
    """The whole server's estimate: TTFT, TPOT (and its curve over context), tokens/s, $ per million
    output tokens, memory per GPU, which roof binds, each headline with its derivation in `math`.
    `format=csv`: the same figures as one CSV row under a header (a download)."""
    if p.format == "csv":
        body = table.to_csv([table.row(serving.params_dict(serving_params(p)), dials_state(p).estimate.to_dict())])
        return Response(
            body, media_type="text/csv", headers={"content-disposition": 'attachment; filename="dials.csv"'}
        )
    return Response(dials_state(p).body, media_type="application/json")


def facts(p: DialsParams | None = None) -> dict[str, str]:
    """The chosen configuration's figures, for the scene's fact sentence."""
    p = p or DialsParams()
    e, r, _ = dials_state(p)
    rate = f"{e.tokens_per_s_per_user:.1f}" if e.tokens_per_s_per_user < 9.95 else f"{e.tokens_per_s_per_user:,.0f}"
    ttft_s = e.ttft_ms / 1e3
    ttft = (
        f"{e.ttft_ms:,.0f} ms"
        if ttft_s < 10
        else f"{ttft_s:.1f} s"
        if ttft_s < 120
        else f"{ttft_s / 60:.1f} min"
        if ttft_s < 7200
        else f"{ttft_s / 3600:.1f} h"
    )
    priced = f"the first token in {ttft} and then {rate} token{'' if rate in ('1', '1.0') else 's'}/s, at ${e.cost_per_million_tokens_usd:.2f} per million output tokens"
    outcome = (
        f"gives each user {priced}."
        if e.fits
        else f"does not fit: each GPU is {e.memory.shortfall_gb:,.1f} GB short, so it serves no one "
        f"(hypothetically, if it fit: {priced})."
    )
    return {
        "outcome": outcome,
        "batch_chats": f"{p.batch:,} chat{'' if p.batch == 1 else 's'}",
        "ttft": ttft,
        "per_user_rate": f"{rate} token{'' if rate in ('1', '1.0') else 's'}/s",
        "model_name": r.model["name"],
        "gpu_name": r.gpu.name,
        "gpus": str(p.gpus),
        "price_per_gpu_hour": f"{p.price_per_gpu_hour:g}",
        "batch": str(p.batch),
        "prompt_tokens": f"{p.prompt_tokens:,}",
        "output_tokens": f"{p.output_tokens:,}",
        "ttft_ms": f"{e.ttft_ms:,.0f}",
        "tokens_per_s_per_user": f"{e.tokens_per_s_per_user:.0f}",
        "tokens_per_s_total": f"{e.tokens_per_s_total:,.0f}",
        "cost_per_million_tokens_usd": f"{e.cost_per_million_tokens_usd:.2f}",
        "spare_gb": f"{e.memory.spare_gb:.0f}",
    }
