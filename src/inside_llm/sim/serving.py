"""The dials (chapter 11): a whole server's latency, throughput, memory and cost from a few inputs.

Scenario: the node's GPUs form `replicas = gpus / (tp * pp)` identical replicas. Each runs
batches of `batch` requests, each with `prompt_tokens` in and `output_tokens` out, from prefill
to the last token (static batching: the next batch starts when this one ends). Then

    ttft   = prefill of the whole batch's prompts (one pass; with pp, micro-batches pipelined)
    tpot   = mean decode step over the answer; the cache grows from P to P+O tokens, and since
             the decode step is linear in context length the mean equals the step at P + O/2
    e2e    = ttft + (O - 1) * tpot
    tokens_per_s_total = replicas * batch * O / e2e
    cost_per_million   = gpus * price_per_gpu_hour / 3600 / tokens_per_s_total * 1e6

Every headline number comes with a Derivation in `math` (formula, inputs with units and
sources, assumptions).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from . import catalog
from .costmodel import EngineConfig, MemoryBreakdown, StepTime, max_batch, memory_per_gpu, step_time
from .derivation import Derivation, derive
from .hardware import GPU, math_rate
from .models import ModelSpec

MAX_GPUS = 64
MAX_BATCH = 4096
MAX_TOKENS = 1_000_000


@dataclass(frozen=True)
class ServingParams:
    """Dials inputs. model/gpu: catalog id or a custom ModelSpec/GPU built from fields."""

    model: str | ModelSpec = catalog.DEFAULT_MODEL
    gpu: str | GPU = catalog.DEFAULT_GPU
    gpus: int = 8
    tp: int = 8
    pp: int = 1
    precision: str = "bf16"
    kv_precision: str = "bf16"
    batch: int = 16
    prompt_tokens: int = 1024
    output_tokens: int = 256
    price_per_gpu_hour: float = 3.0


@dataclass(frozen=True)
class ServingEstimate:
    """Dials outputs; memory figures are per GPU, throughput for all replicas."""

    ttft_ms: float
    tpot_ms: float
    e2e_latency_ms: float
    tokens_per_s_per_user: float
    tokens_per_s_total: float
    cost_per_million_tokens_usd: float
    memory: MemoryBreakdown
    max_batch: int
    bound: str
    prefill_bound: str
    mfu: float
    bandwidth_utilization: float
    replicas: int
    math: dict[str, Derivation] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: memory and math expanded to plain dicts."""
        d = {k: v for k, v in self.__dict__.items() if k not in ("memory", "math")}
        d["memory"] = self.memory.to_dict()
        d["math"] = {k: v.to_dict() for k, v in self.math.items()}
        return d


def _check(name: str, value: float, lo: float, hi: float) -> None:
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be between {lo:g} and {hi:g}; got {value!r}")


def resolve(p: ServingParams) -> tuple[EngineConfig, int]:
    """Validate the dials and build the replica's EngineConfig; returns (config, replicas)."""
    m = catalog.model(p.model) if isinstance(p.model, str) else p.model
    g = catalog.gpu(p.gpu) if isinstance(p.gpu, str) else p.gpu
    _check("gpus", p.gpus, 1, MAX_GPUS)
    _check("batch", p.batch, 1, MAX_BATCH)
    _check("prompt_tokens", p.prompt_tokens, 1, MAX_TOKENS)
    _check("output_tokens", p.output_tokens, 1, MAX_TOKENS)
    _check("price_per_gpu_hour", p.price_per_gpu_hour, 0, 1000)
    if p.prompt_tokens + p.output_tokens > m.max_position_embeddings:
        raise ValueError(f"prompt_tokens + output_tokens must be <= the model's context "
                         f"{m.max_position_embeddings}; got {p.prompt_tokens + p.output_tokens}")
    if p.tp < 1 or p.pp < 1 or p.gpus % (p.tp * p.pp):
        raise ValueError(f"tp * pp must divide gpus; got tp={p.tp}, pp={p.pp}, gpus={p.gpus}")
    cfg = EngineConfig(m, g, p.tp, p.pp, p.precision, p.kv_precision)
    return cfg, p.gpus // (p.tp * p.pp)


@dataclass(frozen=True)
class _Phases:
    prefill: StepTime
    decode: StepTime
    micro_batches: int
    ttft_s: float
    tpot_s: float
    e2e_s: float


def _phases(cfg: EngineConfig, p: ServingParams) -> _Phases:
    """Prefill and mean decode step of one batch, micro-batched over the pipeline stages."""
    m_b = min(cfg.pp, p.batch)
    per_mb = math.ceil(p.batch / m_b)
    P, O = p.prompt_tokens, p.output_tokens
    prefill = step_time(cfg, num_prefill_tokens=per_mb * P, num_prefill_seqs=per_mb,
                        prefill_attention_keys=per_mb * P * (P + 1) // 2)
    decode = step_time(cfg, num_decode_seqs=per_mb, decode_context_tokens_total=round(per_mb * (P + O / 2)))
    ttft = prefill.seconds * (cfg.pp + m_b - 1) / cfg.pp
    return _Phases(prefill, decode, m_b, ttft, decode.seconds, ttft + (O - 1) * decode.seconds)


def estimate(p: ServingParams = ServingParams()) -> ServingEstimate:
    """The dials estimate (see module docstring). ValueError names a bad field and its bound."""
    cfg, replicas = resolve(p)
    ph = _phases(cfg, p)
    O = p.output_tokens
    tps_total = replicas * p.batch * O / ph.e2e_s
    cost = p.gpus * p.price_per_gpu_hour / 3600.0 / tps_total * 1e6
    mem = memory_per_gpu(cfg, p.batch, p.prompt_tokens + O)
    fit = max_batch(cfg, p.prompt_tokens + O)
    peak = math_rate(cfg.gpu, cfg.precision).flops_per_s
    n_gpu = cfg.tp * cfg.pp
    work = ph.micro_batches * (ph.prefill.flops + (O - 1) * ph.decode.flops)
    mfu = work / (ph.e2e_s * n_gpu * peak)
    bw_util = ph.micro_batches * ph.decode.hbm_bytes / (ph.tpot_s * n_gpu * cfg.gpu.hbm_bytes_per_s)
    est = ServingEstimate(ph.ttft_s * 1e3, ph.tpot_s * 1e3, ph.e2e_s * 1e3, 1.0 / ph.tpot_s, tps_total, cost,
                          mem, fit, ph.decode.bound, ph.prefill.bound, mfu, bw_util, replicas)
    return ServingEstimate(**{**est.__dict__, "math": _derivations(cfg, p, est, ph)})


def params_dict(p: ServingParams) -> dict[str, Any]:
    """The params as plain data (custom model/GPU reduced to their ids)."""
    d = asdict(p) if isinstance(p.model, str) and isinstance(p.gpu, str) else dict(p.__dict__)
    d["model"] = p.model if isinstance(p.model, str) else p.model.id
    d["gpu"] = p.gpu if isinstance(p.gpu, str) else p.gpu.id
    return d


# ---- show the math ------------------------------------------------------------------------------

def _gpu_inputs(g: GPU, *names: str) -> dict[str, tuple]:
    units = {"hbm_bandwidth_tb_s": "TB/s", "hbm_capacity_gb": "GB", "bf16_dense_tflops": "TFLOP/s",
             "fp8_dense_tflops": "TFLOP/s", "int8_dense_tops": "TOP/s", "interconnect_bandwidth_gb_s": "GB/s"}
    return {f"{g.id}.{n}": (getattr(g, n), units.get(n, ""), g.source(n) or None) for n in names}


def _step_assumptions(cfg: EngineConfig) -> list[str]:
    e = cfg.efficiency
    return [f"GEMMs reach {e.gemm(cfg.shard.math):.0%} of {cfg.shard.math} peak; attention {e.attention_compute:.0%}"
            f" of BF16 peak; HBM streams at {e.hbm:.0%} of peak (calibrated, docs/calibration.md)",
            f"{e.per_layer_overhead_s * 1e6:.0f} us per layer + {e.step_overhead_s * 1e3:.1f} ms per step of "
            "launch/scheduling overhead; tensor-parallel all-reduces on the critical path",
            "embedding and lm_head stay 16-bit; activations BF16"]


def _derivations(cfg: EngineConfig, p: ServingParams, est: ServingEstimate, ph: _Phases) -> dict[str, Derivation]:
    """The `math` block: one Derivation per headline number."""
    return {**_time_derivations(cfg, p, est, ph), **_rate_derivations(cfg, p, est, ph),
            **_memory_derivations(cfg, p, est.memory, est.max_batch)}


def _time_derivations(cfg: EngineConfig, p: ServingParams, est: ServingEstimate, ph: _Phases) -> dict[str, Derivation]:
    g, m = cfg.gpu, cfg.model
    step = _step_assumptions(cfg)
    common = {"model": (m.id, "", m.source or None), "gpu": (g.id, ""), "tp": (cfg.tp, "GPUs"),
              "pp": (cfg.pp, "GPUs"), "precision": (cfg.precision, ""), "batch": (p.batch, "sequences")}
    pf = ph.prefill
    return {
        "ttft_ms": derive(est.ttft_ms, "ms", "ttft = gemm + attention + all-reduce + overhead for the prefill of "
                          "batch x prompt_tokens (each part a roofline max of FLOPs/rate and bytes/bandwidth)",
                          {**common, "prompt_tokens": (p.prompt_tokens, "tokens"),
                           "prefill_flops": (pf.flops, "FLOP"), "gemm_ms": (pf.gemm_s * 1e3, "ms"),
                           "attention_ms": (pf.attention_s * 1e3, "ms"), "comm_ms": (pf.comm_s * 1e3, "ms"),
                           "overhead_ms": (pf.overhead_s * 1e3, "ms"),
                           **_gpu_inputs(g, "bf16_dense_tflops", "hbm_bandwidth_tb_s", "interconnect_bandwidth_gb_s")},
                          step + ["the whole batch's prompts are prefilled in one pass before the first token"]),
        "tpot_ms": derive(est.tpot_ms, "ms", "tpot = decode step at mean context P + O/2 = max(weight bytes, GEMM "
                          "FLOPs) + max(KV bytes, attention FLOPs) + all-reduces + overhead",
                          {**common, "mean_context": (p.prompt_tokens + p.output_tokens / 2, "tokens"),
                           "bytes_per_step": (ph.decode.hbm_bytes * ph.micro_batches, "B"),
                           "gemm_ms": (ph.decode.gemm_s * 1e3, "ms"), "attention_ms": (ph.decode.attention_s * 1e3, "ms"),
                           "comm_ms": (ph.decode.comm_s * 1e3, "ms"), "overhead_ms": (ph.decode.overhead_s * 1e3, "ms"),
                           **_gpu_inputs(g, "hbm_bandwidth_tb_s")},
                          step + ["decode step time is linear in context, so the mean over the answer is the "
                                  "step at the mean context"]),
    }


def _rate_derivations(cfg: EngineConfig, p: ServingParams, est: ServingEstimate, ph: _Phases) -> dict[str, Derivation]:
    g = cfg.gpu
    return {
        "tokens_per_s_per_user": derive(est.tokens_per_s_per_user, "tokens/s", "1000 / tpot_ms",
                                        {"tpot_ms": (est.tpot_ms, "ms")}),
        "tokens_per_s_total": derive(est.tokens_per_s_total, "tokens/s",
                                     "replicas x batch x output_tokens / (ttft + (output_tokens - 1) x tpot)",
                                     {"replicas": (est.replicas, ""), "batch": (p.batch, "sequences"),
                                      "output_tokens": (p.output_tokens, "tokens"), "ttft_ms": (est.ttft_ms, "ms"),
                                      "tpot_ms": (est.tpot_ms, "ms")},
                                     ["static batches: the next batch starts when the last one finishes",
                                      f"replicas = gpus / (tp x pp) = {p.gpus} / {cfg.tp * cfg.pp}"]),
        "cost_per_million_tokens_usd": derive(est.cost_per_million_tokens_usd, "USD per 1M output tokens",
                                              "gpus x price_per_gpu_hour / 3600 / tokens_per_s_total x 1e6",
                                              {"gpus": (p.gpus, "GPUs"), "price_per_gpu_hour": (p.price_per_gpu_hour, "USD/h"),
                                               "tokens_per_s_total": (est.tokens_per_s_total, "tokens/s")},
                                              ["$3 per GPU-hour is an example rental price, not a quote"]),
        "mfu": derive(est.mfu, "fraction", "model FLOPs of the batch / (e2e time x GPUs x peak FLOP/s)",
                      {"peak_flops_per_s": (cfg.shard.math_flops_per_s, "FLOP/s"), "gpus": (cfg.tp * cfg.pp, "GPUs"),
                       "e2e_ms": (est.e2e_latency_ms, "ms")}),
        "bandwidth_utilization": derive(est.bandwidth_utilization, "fraction",
                                        "HBM bytes per decode step / (tpot x GPUs x peak bandwidth)",
                                        {"bytes_per_step": (ph.decode.hbm_bytes * ph.micro_batches, "B"),
                                         "tpot_ms": (est.tpot_ms, "ms"), **_gpu_inputs(g, "hbm_bandwidth_tb_s")}),
    }


def _memory_derivations(cfg: EngineConfig, p: ServingParams, mem: MemoryBreakdown, fit: int) -> dict[str, Derivation]:
    g, s = cfg.gpu, cfg.shard
    ctx = p.prompt_tokens + p.output_tokens
    return {
        "weights_gb": derive(mem.weights_gb, "GB per GPU", "(quantized params x bytes/param + 16-bit params x 2) / (tp x pp)",
                             {"bytes_per_param": (s.wbytes, "B"), "tp": (cfg.tp, ""), "pp": (cfg.pp, "")},
                             ["INT4 stores one FP16 scale per 128 weights (4.125 bits)"]),
        "kv_cache_gb": derive(mem.kv_cache_gb, "GB per GPU",
                              "batch x (prompt + output) x 2 x layers/pp x kv_heads/tp x head_dim x kv bytes",
                              {"batch": (p.batch, "sequences"), "context": (ctx, "tokens"),
                               "kv_bytes_per_token_per_gpu": (s.kv_bytes_per_token_stage, "B"),
                               "kv_precision": (cfg.kv_precision, "")},
                              ["every sequence holds its full context at the end of the answer",
                               "when tp > kv_heads each GPU keeps a copy of one KV head"]),
        "spare_gb": derive(mem.spare_gb, "GB per GPU", "capacity - weights - kv_cache - activations - reserve",
                           {**_gpu_inputs(g, "hbm_capacity_gb"), "weights_gb": (mem.weights_gb, "GB"),
                            "kv_cache_gb": (mem.kv_cache_gb, "GB"), "activations_gb": (mem.activations_gb, "GB"),
                            "reserve_gb": (mem.reserve_gb, "GB")},
                           [f"reserve = {cfg.efficiency.runtime_reserve_fraction:.0%} of capacity for CUDA context, "
                            "NCCL/cuBLAS workspaces and fragmentation (vLLM gpu_memory_utilization=0.9)"]),
        "max_batch": derive(fit, "sequences", "largest batch with spare_gb >= 0 at this context",
                            {"context": (ctx, "tokens"), "kv_bytes_per_token_per_gpu": (s.kv_bytes_per_token_stage, "B")}),
    }


# ---- calibration --------------------------------------------------------------------------------

METRICS = {"tokens_per_s_total": "tokens_per_s_total", "ttft_ms": "ttft_ms", "tpot_ms": "tpot_ms",
           "e2e_latency_ms": "e2e_latency_ms"}


def reference_params(ref: catalog.Reference) -> ServingParams:
    """ServingParams reproducing a published measurement's conditions.

    When the engine chose the batch (ref.batch is None) we use the largest batch that fits in our
    memory model at that context, capped at the engine's limit (ref.max_batch).
    """
    base = ServingParams(model=ref.model, gpu=ref.gpu, gpus=ref.gpus, tp=ref.tp, pp=ref.pp,
                         precision=ref.precision, kv_precision=ref.kv_precision, batch=ref.batch or 1,
                         prompt_tokens=ref.prompt_tokens, output_tokens=ref.output_tokens)
    if ref.batch is not None:
        return base
    cfg, _ = resolve(base)
    fit = max_batch(cfg, ref.prompt_tokens + ref.output_tokens)
    return ServingParams(**{**base.__dict__, "batch": max(1, min(fit, ref.max_batch or MAX_BATCH))})


def predict(ref: catalog.Reference) -> tuple[float, ServingEstimate]:
    """The model's value for a reference's metric, and the estimate it came from."""
    if ref.metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}; got {ref.metric!r}")
    est = estimate(reference_params(ref))
    return float(getattr(est, METRICS[ref.metric])), est
