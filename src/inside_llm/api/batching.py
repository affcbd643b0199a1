"""Chapter 7, batching: GET /api/batching -> static vs continuous batching on one trace and one clock.

Each engine step lasts what the calibrated cost model says for the batch it runs (Llama 3.1 8B in
BF16 on one H100 SXM). GET /api/batching/measured -> the demo model decoding batches of 1, 8 and
32 on this server's CPU, measured once per process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ..sim.core.derivation import derive, math_dict
from ..sim.cost import costmodel
from ..sim.hardware import catalog
from ..sim.serve.clocks import CostModelClock
from ..sim.serve.records import BatchingResult
from ..sim.serve.simulate import MAX_RATE, MAX_SEATS, SYSTEM_PROMPT_TOKENS, simulate_batching
from .common import MAX_REQUESTS, Workload, seed_field
from .measured import Measured, MeasuredHeader, cpu_info

router = APIRouter(tags=["7 · batching"])

MIN_RATE = 0.01  # slower arrivals overflow the trace's clock (5e-324 req/s gave infinite times)
MAX_FRAMES = 150
MAX_SEQ_LEN = 2048
BLOCK_SIZE = 16
MAX_NUM_BATCHED_TOKENS = 2048  # the default token budget per step (vLLM's max_num_batched_tokens)
BUDGET_BOUNDS = (256, 8192)  # below 256 a 1,000-request run costs over 20% more CPU than at the default
MODEL_ID, GPU_ID = "llama-3.1-8b", "h100-sxm"


class BatchingParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)  # hashable: responses are cached per params
    rate: float = Field(
        3.0, ge=MIN_RATE, le=MAX_RATE, description=f"Poisson arrival rate (requests/s; {MIN_RATE:g}-{MAX_RATE:g})."
    )
    requests: int = Field(200, ge=1, le=MAX_REQUESTS, description=f"Requests in the trace (1-{MAX_REQUESTS:,}).")
    seats: int = Field(8, ge=1, le=MAX_SEATS, description=f"Seats: requests decoded together at most (1-{MAX_SEATS}).")
    workload: Workload = Field(
        "sharegpt",
        description="Request lengths: sharegpt (161 in / 338 out tokens on "
        "average), alpaca (19 / 58) or fixed (161 / 338).",
    )
    seed: int = seed_field("lengths and arrivals")
    shared_prefix: float = Field(
        0.0,
        ge=0,
        le=1,
        description=f"Share of requests that begin with one {SYSTEM_PROMPT_TOKENS}-token system prompt "
        "(0-1); the prefix cache lets them share its KV pages.",
    )
    max_num_batched_tokens: int = Field(
        MAX_NUM_BATCHED_TOKENS,
        ge=BUDGET_BOUNDS[0],
        le=BUDGET_BOUNDS[1],
        description=f"Tokens one continuous-batching step computes at most ({BUDGET_BOUNDS[0]}-{BUDGET_BOUNDS[1]}; "
        "vLLM's max_num_batched_tokens): longer prompts are prefilled in chunks beside the decodes.",
    )


@dataclass
class BatchingResponse(BatchingResult):
    engine: dict = field(default_factory=dict)  # the model, GPU and limits every step's duration comes from


RESPONSE = TypeAdapter(BatchingResponse)


@lru_cache(maxsize=1)
def engine_config() -> costmodel.EngineConfig:
    return costmodel.EngineConfig(catalog.model(MODEL_ID), catalog.gpu(GPU_ID))


@lru_cache(maxsize=1)
def clock() -> CostModelClock:
    """Every step's duration: the cost model's step time for what the step computes."""
    return CostModelClock(engine_config())


def step_seconds(p: int, d: int, c: int) -> costmodel.StepTime:
    return clock()(p, d, c)


@lru_cache(maxsize=MAX_SEATS)
def engine(seats: int) -> dict:
    """The engine the trace runs on, with its KV pool sized from what the GPU has left."""
    cfg = engine_config()
    mem = costmodel.memory_per_gpu(cfg, seats, MAX_SEQ_LEN)
    room_gb = mem.capacity_gb - mem.weights_gb - mem.activations_gb - mem.reserve_gb
    kv_per_token = cfg.shard.kv_bytes_per_token_stage
    kv_tokens = int(room_gb * costmodel.GB // kv_per_token) // BLOCK_SIZE * BLOCK_SIZE
    b1, full = step_seconds(0, 1, 500), step_seconds(0, seats, 500 * seats)
    gpu, model = cfg.gpu, cfg.model
    return {
        "model": model.name,
        "model_id": MODEL_ID,
        "gpu": gpu.name,
        "gpu_id": GPU_ID,
        "tp": cfg.tp,
        "precision": cfg.precision,
        "kv_precision": cfg.kv_precision,
        "kv_capacity_tokens": kv_tokens,
        "block_size": BLOCK_SIZE,
        "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS,
        "max_seq_len": MAX_SEQ_LEN,
        "system_prompt_tokens": SYSTEM_PROMPT_TOKENS,
        "decode_step_ms_batch_1": round(b1.seconds * 1e3, 3),
        "decode_step_ms_all_seats": round(full.seconds * 1e3, 3),
        "prefill_step_ms_2048_tokens": round(step_seconds(2048, 0, 0).seconds * 1e3, 3),
        "math": math_dict(
            kv_capacity_tokens=derive(
                kv_tokens,
                "tokens",
                "(HBM - weights - activations - runtime reserve) / KV bytes per token",
                {
                    "hbm": (gpu.hbm_capacity_gb, "GB", "vendor datasheet (data/gpus.toml)"),
                    "weights": (round(mem.weights_gb, 3), "GB"),
                    "activations": (round(mem.activations_gb, 3), "GB"),
                    "runtime_reserve": (round(mem.reserve_gb, 3), "GB"),
                    "kv_bytes_per_token": (kv_per_token, "bytes"),
                },
                [
                    "KV cache in BF16: 2 (K and V) x layers x KV heads x head dim x 2 bytes",
                    "runtime reserve as vLLM's gpu_memory_utilization = 0.9",
                ],
            ),
            decode_step_ms_all_seats=derive(
                round(full.seconds * 1e3, 3),
                "ms",
                "max(GEMM FLOPs / (peak x eff), weight bytes / (HBM x eff)) + max(attention FLOPs / (peak x eff), "
                "KV bytes / (HBM x eff)) + per-layer and per-step overhead",
                {
                    "num_decode_seqs": (seats, "sequences"),
                    "context_per_seq": (500, "tokens"),
                    "hbm_bandwidth": (gpu.hbm_bandwidth_tb_s, "TB/s", "vendor datasheet"),
                    "bf16_dense": (gpu.bf16_dense_tflops, "TFLOP/s", "vendor datasheet"),
                    "memory_s": (round(full.memory_s * 1e3, 3), "ms"),
                    "compute_s": (round(full.compute_s * 1e3, 3), "ms"),
                    "overhead_s": (round(full.overhead_s * 1e3, 3), "ms"),
                },
                [
                    "efficiency factors calibrated against published measurements (docs/calibration.md)",
                    "a step's prefill tokens are costed as one prompt (its attention is an upper bound)",
                ],
            ),
        ),
    }


@lru_cache(maxsize=64)
def batching_json(p: BatchingParams) -> bytes:
    """The response body for one parameter set (pure: same params, same bytes)."""
    eng = {**engine(p.seats), "max_num_batched_tokens": p.max_num_batched_tokens}
    result = simulate_batching(
        rate=p.rate,
        num_requests=p.requests,
        seats=p.seats,
        workload=p.workload,
        seed=p.seed,
        step_time=clock(),
        kv_capacity_tokens=eng["kv_capacity_tokens"],
        block_size=BLOCK_SIZE,
        max_frames=MAX_FRAMES,
        max_num_batched_tokens=p.max_num_batched_tokens,
        max_seq_len=MAX_SEQ_LEN,
        shared_prefix=p.shared_prefix,
    )
    fields = {**vars(result), "params": p.model_dump(), "engine": eng}
    return RESPONSE.dump_json(BatchingResponse(**fields))


@router.get("/api/batching", response_model=BatchingResponse)
def get_batching(p: Annotated[BatchingParams, Query()]) -> Response:
    """Static vs continuous batching: throughput, TTFT and latency percentiles, seat use, seats over time."""
    return Response(content=batching_json(p), media_type="application/json")


def facts(p: BatchingParams | None = None) -> dict[str, str]:
    p = p or BatchingParams()
    import json

    d = json.loads(batching_json(p))
    pols = {pol["name"]: pol for pol in d["policies"]}
    ratio = pols["continuous"]["throughput_tokens_per_s"] / pols["static"]["throughput_tokens_per_s"]
    return {
        "num_requests": f"{d['params']['requests']:,}",
        "throughput_ratio": f"{ratio:.1f}",
        "rate": f"{p.rate:g}",
        "seats": str(d["params"]["seats"]),
        "model": d["engine"]["model"],
        "gpu": d["engine"]["gpu"],
    }


# ---- measured, not only simulated: the demo model on this server's CPU ------------------------
MEASURED_BATCHES = (1, 8, 32)
MEASURED_CONTEXT_TOKENS = 64
MEASURED_STEPS, MEASURED_REPEATS, MEASURED_ROUNDS = 8, 3, 2


class MeasuredBatch(BaseModel):
    batch_size: int
    tokens_per_s: float
    ms_per_step: float = Field(description="one decode step for the whole batch (ms): the best round's median")


class MeasuredResponse(MeasuredHeader):
    model: dict | None = None
    context_tokens: int = MEASURED_CONTEXT_TOKENS
    steps: int = MEASURED_STEPS
    repeats: int = MEASURED_REPEATS
    rounds: int = MEASURED_ROUNDS
    batches: list[MeasuredBatch] = []
    note: str = (
        "Wall-clock time of numpy decode steps of the tour's tiny demo transformer, measured once when this "
        "server process first answered this URL (per batch size: the fastest of `rounds` rounds, each the "
        "median of `repeats` runs of `steps` steps, so a busy neighbour on the CPU counts least). "
        "A batch shares every weight read, as on a GPU."
    )


def _demo_model():
    """The tour's demo model ('main'), or its small draft model when main is not installed."""
    from ..sim.model.transformer import load_model

    for name in ("main", "draft"):
        try:
            return load_model(name)
        except (FileNotFoundError, OSError):
            continue
    return None


def _unavailable(reason: str) -> dict:
    return MeasuredResponse(available=False, reason=reason, cpu=cpu_info()).model_dump()


def _measure_demo_model() -> dict:
    from ..sim.measure import demo_timing

    model = _demo_model()
    if model is None:
        return _unavailable("the demo model's weights are not installed on this server")
    prompt = demo_timing.default_prompt_ids(model, MEASURED_CONTEXT_TOKENS)
    model.forward(prompt)  # warm up BLAS and caches
    best: dict[int, dict] = {}
    for _ in range(MEASURED_ROUNDS):  # rounds interleave the batch sizes, so a noisy moment hits one round
        for b in MEASURED_BATCHES:
            r = demo_timing.time_batched_decode(model, b, prompt, steps=MEASURED_STEPS, repeats=MEASURED_REPEATS)
            if b not in best or r["ms_per_step"] < best[b]["ms_per_step"]:
                best[b] = r
    batches = [
        MeasuredBatch(batch_size=b, tokens_per_s=round(r["tokens_per_s"], 1), ms_per_step=round(r["ms_per_step"], 3))
        for b, r in best.items()
    ]
    c = model.config
    info = {
        "name": model.name,
        "num_params": model.num_params,
        "layers": c.n_layers,
        "dim": c.dim,
        "heads": c.n_heads,
        "kv_heads": c.n_kv_heads,
        "vocab_size": c.vocab_size,
    }
    return MeasuredResponse(available=True, cpu=cpu_info(), model=info, batches=batches).model_dump()


MEASURED = Measured(_measure_demo_model, on_failure=_unavailable)


@router.get("/api/batching/measured", response_model=MeasuredResponse)
async def get_measured(request: Request) -> Response:
    """Tokens/s of the demo model decoding batches of 1, 8 and 32 on this server's CPU (measured once)."""
    return await MEASURED.respond(request)
