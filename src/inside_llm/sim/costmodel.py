"""Roofline timing of one engine step, and memory per GPU.

One engine step pushes some prefill tokens and some decode tokens (one per running sequence)
through every layer once. On each GPU of a tensor-parallel group, per step:

    gemm_s      = max(GEMM FLOPs / (peak * gemm_compute),   weight bytes / (HBM * hbm))
    attention_s = max(attn FLOPs / (BF16 peak * attention_compute), KV bytes / (HBM * hbm))
    comm_s      = 2 all-reduces per layer (after attention, after MLP) when tp > 1
                  + (pp - 1) point-to-point activation sends between pipeline stages
    overhead_s  = layers * per_layer_overhead + step_overhead
    seconds     = gemm_s + attention_s + comm_s + overhead_s

GEMMs and attention are separate kernels, so each gets its own roofline max() and the two add;
all-reduces sit on the critical path (not overlapped). With pipeline parallelism the step is one
micro-batch's trip through all stages; `serving` keeps min(pp, batch) micro-batches in flight.
Every factor is named in `Efficiency` and calibrated in tests/sim/test_calibration.py against
data/references.toml (docs/calibration.md shows predicted vs measured).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from .hardware import ACTIVATION_BYTES, GPU, kv_bytes_per_value, math_rate, weight_bytes_per_param
from .models import ModelSpec, expected_experts_touched, param_counts

GB = 1e9  # memory figures are decimal gigabytes, like the vendors' "80 GB"
LOGIT_BYTES = 4.0  # FP32 logits


@dataclass(frozen=True)
class Efficiency:
    """Named efficiency factors: what fraction of a datasheet peak real kernels reach, and fixed costs."""

    # Fraction of dense tensor peak reached by the model's GEMMs, by math path. Calibrated on prefill
    # (TTFT at 2k tokens) and large-batch throughput references.
    gemm_compute_bf16: float = 0.62
    gemm_compute_fp8: float = 0.45
    gemm_compute_int8: float = 0.45
    # Fraction of BF16 peak reached by attention math (FlashAttention-2/3: 35-75% on H100).
    attention_compute: float = 0.5
    # Fraction of peak HBM bandwidth reached when streaming weights / KV (decode).
    hbm: float = 0.75
    # Kernel launches, norms, rotary, activation and sampling kernels: per layer, per step.
    per_layer_overhead_s: float = 25e-6
    # Scheduler, sampling, host round trip: once per engine step.
    step_overhead_s: float = 1.0e-3
    # Fixed latency of one tensor-parallel all-reduce (small-message regime).
    allreduce_latency_s: float = 10e-6
    # Achievable all-reduce bus bandwidth / one-direction link rate: NCCL 370 of 450 GB/s on H100.
    allreduce_busbw_fraction: float = 370 / 450
    # Fixed latency of one pipeline-stage activation send.
    pp_send_latency_s: float = 10e-6
    # Memory kept back for CUDA context, NCCL/cuBLAS workspaces, CUDA graphs and fragmentation
    # (vLLM's default gpu_memory_utilization = 0.9 leaves 10%).
    runtime_reserve_fraction: float = 0.10
    # Prefill is chunked into at most this many tokens per step (sizes the activation buffers).
    prefill_chunk_tokens: int = 8192

    def gemm(self, math_path: str) -> float:
        """GEMM efficiency for a math path ("bf16", "fp8" or "int8")."""
        return {"fp8": self.gemm_compute_fp8, "int8": self.gemm_compute_int8}.get(math_path, self.gemm_compute_bf16)


DEFAULT_EFFICIENCY = Efficiency()


@dataclass(frozen=True)
class EngineConfig:
    """A model sharded over tp x pp GPUs of one kind, with weight and KV precisions."""

    model: ModelSpec
    gpu: GPU
    tp: int = 1
    pp: int = 1
    precision: str = "bf16"
    kv_precision: str = "bf16"
    efficiency: Efficiency = DEFAULT_EFFICIENCY

    def __post_init__(self) -> None:
        m = self.model
        if not 1 <= self.tp <= 64:
            raise ValueError(f"tp must be between 1 and 64; got {self.tp}")
        if not 1 <= self.pp <= m.num_hidden_layers:
            raise ValueError(f"pp must be between 1 and num_hidden_layers={m.num_hidden_layers}; got {self.pp}")
        if m.num_attention_heads % self.tp:
            raise ValueError(f"tp must divide num_attention_heads={m.num_attention_heads}; got tp={self.tp}")
        kv = m.num_key_value_heads
        if kv % self.tp and self.tp % kv:
            raise ValueError(f"tp must divide num_key_value_heads={kv} or be a multiple of it "
                             f"(then KV heads are replicated); got tp={self.tp}")
        weight_bytes_per_param(self.precision)  # validates the names
        kv_bytes_per_value(self.kv_precision)

    @cached_property
    def shard(self) -> Shard:
        return Shard.of(self)


@dataclass(frozen=True)
class Shard:
    """Per-GPU sizes of a sharded model (all layers of one tensor-parallel column)."""

    layers: int
    layers_per_stage: int
    kv_heads_per_gpu: int  # >= 1: when tp > kv_heads each GPU keeps a replica of its head
    layer_dense_params: float  # attention + router + norms, per GPU
    expert_params: float  # one expert's MLP, per GPU (== the MLP for a dense model)
    lm_head_params: float  # per GPU (vocab-parallel); the tied embedding when tied
    weight_bytes: float  # everything stored, per GPU, with tp*pp sharding
    wbytes: float  # bytes per quantized weight
    kv_bytes_per_token: float  # per GPU, all layers (what one step reads per cached token)
    kv_bytes_per_token_stage: float  # per GPU, this stage's layers (what its memory holds)
    math_flops_per_s: float  # GEMM peak for the precision
    math: str
    bf16_flops_per_s: float

    @classmethod
    def of(cls, cfg: EngineConfig) -> Shard:
        m, tp, pp = cfg.model, cfg.tp, cfg.pp
        pc = param_counts(m)
        wb = weight_bytes_per_param(cfg.precision)
        kv_heads = max(1, m.num_key_value_heads // tp)
        layer_dense = (pc.attention_per_layer + pc.router_per_layer + pc.norms_per_layer) / tp
        lm_head = (pc.lm_head or pc.embedding) / tp
        quantized = pc.layers * (pc.attention_per_layer + pc.mlp_per_layer + pc.router_per_layer)
        sixteen_bit = pc.total - quantized  # embedding, lm_head and norms stay 16-bit
        weight_bytes = (quantized * wb + sixteen_bit * 2.0) / (tp * pp)
        rate = math_rate(cfg.gpu, cfg.precision)
        per_layer_kv = 2.0 * kv_heads * m.head_dim * kv_bytes_per_value(cfg.kv_precision)
        stage_layers = math.ceil(m.num_hidden_layers / pp)
        return cls(m.num_hidden_layers, stage_layers, kv_heads, layer_dense, pc.expert_per_layer / tp,
                   lm_head, weight_bytes, wb, per_layer_kv * m.num_hidden_layers, per_layer_kv * stage_layers,
                   rate.flops_per_s, rate.math, cfg.gpu.bf16_dense_tflops * 1e12)


@dataclass(frozen=True)
class StepTime:
    """Time of one engine step (one micro-batch through every layer), with its parts.

    flops and hbm_bytes are totals over the tp GPUs of one pipeline column; the *_s parts are
    seconds on the critical path. bound says which roof the step's kernels mostly sat under.
    """

    seconds: float
    compute_s: float  # time the FLOPs need at the calibrated rates (GEMM + attention)
    memory_s: float  # time the HBM bytes need at the calibrated bandwidth
    comm_s: float
    overhead_s: float
    gemm_s: float
    attention_s: float
    flops: float
    hbm_bytes: float
    bound: str  # "compute" | "memory"
    tokens: int


def allreduce_s(cfg: EngineConfig, message_bytes: float) -> float:
    """One ring all-reduce over tp GPUs: latency + 2(tp-1)/tp * bytes / achievable bus bandwidth."""
    if cfg.tp == 1:
        return 0.0
    eff = cfg.efficiency
    busbw = cfg.gpu.link_one_direction_bytes_per_s * eff.allreduce_busbw_fraction
    return eff.allreduce_latency_s + 2.0 * (cfg.tp - 1) / cfg.tp * message_bytes / busbw


def step_time(cfg: EngineConfig, num_prefill_tokens: int = 0, num_decode_seqs: int = 0,
              decode_context_tokens_total: int = 0, *, num_prefill_seqs: int | None = None,
              prefill_attention_keys: int | None = None) -> StepTime:
    """Seconds for one engine step on a replica (see module docstring for the formula).

    num_prefill_tokens: prompt tokens processed this step (all prefilling sequences together).
    num_decode_seqs: running sequences that each produce one token this step.
    decode_context_tokens_total: sum over decoding sequences of the keys each attends to (its length).
    num_prefill_seqs: prompts whose last token is sampled this step (default: 1 if any prefill).
    prefill_attention_keys: sum over prompt tokens of keys attended; default treats the prefill
        tokens as one fresh prompt, n(n+1)/2 (use models.prefill_attention_keys for several).
    """
    if min(num_prefill_tokens, num_decode_seqs, decode_context_tokens_total) < 0:
        raise ValueError("token counts must be >= 0")
    s, eff, m = cfg.shard, cfg.efficiency, cfg.model
    n_tok = num_prefill_tokens + num_decode_seqs
    n_seqs = num_prefill_seqs if num_prefill_seqs is not None else (1 if num_prefill_tokens else 0)
    sampled = n_seqs + num_decode_seqs
    if prefill_attention_keys is None:
        prefill_attention_keys = num_prefill_tokens * (num_prefill_tokens + 1) // 2
    active = s.layer_dense_params + s.expert_params * m.num_experts_per_tok
    touched = expected_experts_touched(m, n_tok) if m.is_moe else 1.0
    gemm_flops = 2.0 * (n_tok * active * s.layers + sampled * s.lm_head_params)
    gemm_bytes = s.layers * (s.layer_dense_params + s.expert_params * touched) * s.wbytes
    gemm_bytes += 2.0 * s.lm_head_params if sampled else 0.0
    keys = prefill_attention_keys + decode_context_tokens_total
    attn_flops = 4.0 * (m.q_dim / cfg.tp) * s.layers * keys
    attn_bytes = s.kv_bytes_per_token * (decode_context_tokens_total + num_prefill_tokens)
    bw = cfg.gpu.hbm_bytes_per_s * eff.hbm
    gc, gm = gemm_flops / (s.math_flops_per_s * eff.gemm(s.math)), gemm_bytes / bw
    ac, am = attn_flops / (s.bf16_flops_per_s * eff.attention_compute), attn_bytes / bw
    comm = 2 * s.layers * allreduce_s(cfg, n_tok * m.hidden_size * ACTIVATION_BYTES) if n_tok else 0.0
    comm += (cfg.pp - 1) * (eff.pp_send_latency_s + n_tok * m.hidden_size * ACTIVATION_BYTES
                            / cfg.gpu.link_one_direction_bytes_per_s)
    overhead = s.layers * eff.per_layer_overhead_s + eff.step_overhead_s
    gemm_s, attention_s = max(gc, gm), max(ac, am)
    compute_limited = (gemm_s if gc >= gm else 0.0) + (attention_s if ac >= am else 0.0)
    bound = "compute" if compute_limited > (gemm_s + attention_s) / 2 else "memory"
    return StepTime(gemm_s + attention_s + comm + overhead, gc + ac, gm + am, comm, overhead, gemm_s,
                    attention_s, cfg.tp * (gemm_flops + attn_flops), cfg.tp * (gemm_bytes + attn_bytes),
                    bound, n_tok)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Memory per GPU in GB (1e9 bytes). fits: everything fits; shortfall_gb = how much is missing."""

    capacity_gb: float
    weights_gb: float
    kv_cache_gb: float
    activations_gb: float
    reserve_gb: float
    spare_gb: float
    fits: bool
    shortfall_gb: float

    def to_dict(self) -> dict[str, float | bool]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def activation_bytes(cfg: EngineConfig, batch: int, context_tokens: int) -> float:
    """Peak activation buffers per GPU: one prefill chunk's hidden/QKV/MLP tensors + FP32 logits.

    Per chunk token: residual + normed input (2*hidden) + QKV (q_dim + 2*kv_dim)/tp + gate and up
    (2*intermediate/tp), in BF16; plus one row of logits (vocab/tp, FP32) per running sequence.
    """
    m, tp = cfg.model, cfg.tp
    chunk = min(batch * context_tokens, cfg.efficiency.prefill_chunk_tokens)
    per_token = 2 * m.hidden_size + (m.q_dim + 2 * m.kv_dim) / tp + 2 * m.intermediate_size / tp
    return chunk * per_token * ACTIVATION_BYTES + batch * m.vocab_size / tp * LOGIT_BYTES


def memory_per_gpu(cfg: EngineConfig, batch: int, context_tokens: int) -> MemoryBreakdown:
    """Weights + KV cache for `batch` sequences of `context_tokens` + activations + reserve, per GPU."""
    if batch < 0 or context_tokens < 0:
        raise ValueError("batch and context_tokens must be >= 0")
    s = cfg.shard
    capacity = float(cfg.gpu.hbm_capacity_gb)
    weights = s.weight_bytes / GB
    kv = batch * context_tokens * s.kv_bytes_per_token_stage / GB
    act = activation_bytes(cfg, batch, context_tokens) / GB
    reserve = capacity * cfg.efficiency.runtime_reserve_fraction
    spare = capacity - weights - kv - act - reserve
    return MemoryBreakdown(capacity, weights, kv, act, reserve, spare, spare >= 0, max(0.0, -spare))


def max_batch(cfg: EngineConfig, context_tokens: int, limit: int = 1 << 20) -> int:
    """Largest batch of `context_tokens`-long sequences whose memory fits (0 if even one does not)."""
    lo, hi = 0, limit
    while lo < hi:  # invariant: lo fits (or is 0)
        mid = (lo + hi + 1) // 2
        if memory_per_gpu(cfg, mid, context_tokens).fits:
            lo = mid
        else:
            hi = mid - 1
    return lo
