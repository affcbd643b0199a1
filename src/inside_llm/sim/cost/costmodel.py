"""Roofline timing of one engine step, and memory per GPU.

One engine step pushes some prefill tokens and some decode tokens (one per running sequence)
through every layer once. On each GPU of a tensor-parallel group, per step:

    gemm_s      = max(GEMM FLOPs / (peak * gemm_compute),   weight bytes / (HBM * hbm))
    attention_s = max(attn FLOPs / (BF16 peak * attention_compute), KV bytes / (HBM * hbm))
    comm_s      = 2 all-reduces per layer (after attention, after MLP) when tp > 1
                  + (pp - 1) point-to-point activation sends between pipeline stages
    overhead_s  = layers * per_layer_overhead + step_overhead [+ prefill_pass_overhead if prompts]
    seconds     = gemm_s + attention_s + comm_s + overhead_s

Beyond one node (GPU.node_gpus, 8 on an HGX board, 72 on a GB200 NVL72 rack) the network is two-tier:
a tensor-parallel group of g GPUs per node x n nodes all-reduces hierarchically (NCCL's tree/ring
across nodes): reduce-scatter and all-gather inside each node over NVLink, 2(g-1)/g * M / NVLink busbw,
plus an all-reduce of each GPU's 1/g shard across the n nodes over its own NIC,
2(n-1)/n * (M/g) / scale-out busbw. A pipeline hand-off whose two stages sit on different nodes goes
over the NIC too.

GEMMs and attention are separate kernels, so each gets its own roofline max() and the two add;
all-reduces sit on the critical path (not overlapped). With pipeline parallelism the step is one
micro-batch's trip through all stages; `serving` keeps min(pp, batch) micro-batches in flight.
Every factor is named in `Efficiency` and calibrated in tests/sim/cost/test_calibration.py against
data/references.toml (docs/calibration.md shows predicted vs measured).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from ..core.errors import SimError
from ..core.result import about
from ..hardware.hardware import (
    ACTIVATION_BYTES,
    GPU,
    kv_bytes_per_value,
    math_rate,
    number_format,
    weight_bytes_per_param,
)
from ..model.models import ModelSpec, expected_experts_touched, param_counts

GB = 1e9  # memory figures are decimal gigabytes, like the vendors' "80 GB"
LOGIT_BYTES = 4.0  # FP32 logits


@dataclass(frozen=True)
class Efficiency:
    """Named efficiency factors: what fraction of a datasheet peak real kernels reach, and fixed costs."""

    # Fraction of dense tensor peak reached by the model's GEMMs, by math path. Calibrated on prefill
    # (TTFT at 2k tokens) and large-batch throughput references.
    gemm_compute_bf16: float = 0.62
    gemm_compute_fp8: float = 0.5
    gemm_compute_int8: float = 0.45
    gemm_compute_fp4: float = 0.38
    # Routed-expert GEMMs in FP8/FP4 reach this share of the dense GEMM efficiency: each expert sees a
    # small, ragged slice of the tokens, and routing adds permute/un-permute kernels. Calibrated on
    # Mixtral 8x7B FP8 prefill and max-throughput rows on H100/H200; Mixtral in FP16 on A100 runs at
    # the dense efficiency (same references), so BF16/FP16 expert GEMMs are not discounted.
    moe_expert_compute: float = 0.35
    # Fine-grained MoE (routed experts narrower than fine_moe_width: Qwen3 768, DeepSeek 2,048, gpt-oss 2,880
    # wide, 128-256 of them): each expert's grouped-GEMM slice sees ~20 tokens at full load, so its weights
    # stream at fine_moe_stream of the HBM efficiency and its FLOPs run at fine_moe_compute of the expert
    # efficiency, whatever the math path (gpt-oss's MXFP4 weights with BF16 math included). Fitted on
    # TensorRT-LLM 2025 max-load rows of Qwen3 30B-A3B and gpt-oss-120b (docs/calibration.md).
    fine_moe_width: int = 4096
    # Routing and expert-dispatch cost of a MoE layer an engine pays beyond the GEMMs: fixed per MoE layer per
    # step, and per routed token per MoE layer. 0 in the base (TensorRT-LLM) fit; engine profiles set them
    # (vLLM and SGLang on DeepSeek-R1, early 2025: DSTACK-R1 rows).
    moe_layer_overhead_s: float = 0.0
    moe_token_layer_s: float = 0.0
    fine_moe_stream: float = 0.57
    fine_moe_compute: float = 0.37
    # How a kernel near the ridge combines its compute and memory times: (c^p + m^p)^(1/p); a pure
    # roofline is p = infinity (max). Loads and math do not overlap perfectly near the ridge, which
    # short prefills (a few hundred tokens) sit on.
    roofline_blend: float = 2.0
    # Fraction of BF16 peak reached by attention math (FlashAttention-2/3: 35-75% on H100).
    attention_compute: float = 0.5
    # Fraction of peak HBM bandwidth reached when streaming weights / KV (decode).
    hbm: float = 0.75
    # Weight-only 4-bit GEMMs (INT4 AWQ/GPTQ, or FP4 on a GPU without FP4 tensor cores) unpack and
    # scale every weight in the inner loop: they stream at this share of the HBM efficiency. Calibrated
    # on batch-1 decode of Llama 2 7B and Llama 3 8B, BF16 vs INT4 weight-only, on one A100 (torchao).
    weight_only_4bit_stream: float = 0.75
    # Kernel launches, norms, rotary, activation and sampling kernels: per layer, per step.
    per_layer_overhead_s: float = 25e-6
    # Scheduler, sampling, host round trip: once per engine step.
    step_overhead_s: float = 1.0e-3
    # Fixed latency of one tensor-parallel all-reduce (small-message regime).
    allreduce_latency_s: float = 10e-6
    # The same at given tensor-parallel widths where an engine profile measured it ((tp, seconds), ascending);
    # a width between two entries takes the lower one's, below the first allreduce_latency_s.
    allreduce_latency_by_tp: tuple[tuple[int, float], ...] = ()
    # Achievable all-reduce bus bandwidth / one-direction link rate: NCCL 370 of 450 GB/s on H100.
    allreduce_busbw_fraction: float = 370 / 450
    # Fixed latency of one pipeline-stage activation send.
    pp_send_latency_s: float = 10e-6
    # Scale-out (InfiniBand / RoCE) all-reduce: achievable bus bandwidth / NIC line rate, and the
    # extra latency of a network hop. NCCL reaches ~90% of a 400 Gb/s NIC's 50 GB/s at large messages
    # (nccl-tests busBw ~ 45 GB/s per NIC); a network round trip costs several microseconds more than NVLink.
    scaleout_busbw_fraction: float = 0.9
    scaleout_latency_s: float = 20e-6
    # Fixed cost of a prefill pass (context-phase setup: input preparation, attention metadata,
    # first-token sampling): calibrated on batch-1 TTFTs of 128-token prompts (docs/calibration.md).
    prefill_pass_overhead_s: float = 2.5e-3
    # Memory kept back for CUDA context, NCCL/cuBLAS workspaces, CUDA graphs and fragmentation
    # (vLLM's default gpu_memory_utilization = 0.9 leaves 10%).
    runtime_reserve_fraction: float = 0.10
    # Prefill is chunked into at most this many tokens per step (sizes the activation buffers).
    prefill_chunk_tokens: int = 8192
    # Which engine profile (data/engines.toml, sim/cost/engines.py) these factors are; the base fit is TensorRT-LLM's.
    profile: str = "tensorrt-llm"

    def allreduce_latency(self, tp: int) -> float:
        """Fixed latency of one all-reduce over `tp` GPUs (see allreduce_latency_by_tp)."""
        out = self.allreduce_latency_s
        for width, s in self.allreduce_latency_by_tp:
            if tp >= width:
                out = s
        return out

    def gemm(self, math_path: str) -> float:
        """GEMM efficiency for a math path ("bf16", "fp8", "int8" or "fp4")."""
        return {"fp8": self.gemm_compute_fp8, "int8": self.gemm_compute_int8, "fp4": self.gemm_compute_fp4}.get(
            math_path, self.gemm_compute_bf16
        )


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
            raise SimError("tp", f"Tensor parallel (tp) must be between 1 and 64 GPUs, not {self.tp}.")
        if not 1 <= self.pp <= m.num_hidden_layers:
            raise SimError(
                "pp",
                f"Pipeline stages (pp) must be between 1 and {m.name}'s {m.num_hidden_layers} layers, not {self.pp}.",
            )
        if m.num_attention_heads % self.tp:
            raise SimError(
                "tp",
                f"Tensor parallel (tp) must divide {m.name}'s {m.num_attention_heads} query heads "
                f"(num_attention_heads); {self.tp} does not.",
            )
        kv = m.num_key_value_heads
        if kv % self.tp and self.tp % kv:
            raise SimError(
                "tp",
                f"Tensor parallel (tp) must divide {m.name}'s {kv} key/value heads "
                f"(num_key_value_heads) or be a multiple of them; {self.tp} is neither.",
            )
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
    layer_dense_params: float  # attention + router + norms + always-on MLP (shared experts), per GPU
    expert_params: float  # one expert's MLP, per GPU (== the MLP for a dense model)
    lm_head_params: float  # per GPU (vocab-parallel); the tied embedding when tied
    weight_bytes: float  # what the fullest GPU stores: its stage's layers, + embedding (first) / lm_head (last)
    wbytes: float  # bytes per quantized weight
    kv_bytes_per_token: float  # per GPU, all full-attention layers (what one step reads per cached token)
    kv_bytes_per_token_stage: float  # per GPU, this stage's full-attention layers (what its memory holds)
    math_flops_per_s: float  # GEMM peak for the precision
    math: str
    bf16_flops_per_s: float
    moe_layer_fraction: float = 1.0  # share of layers with routed experts
    window_kv_bytes_per_token: float = 0.0  # per GPU, all sliding-window layers (each holds <= window tokens)
    window_kv_bytes_per_token_stage: float = 0.0
    stage_weight_bytes: tuple[float, ...] = ()  # per GPU of each pipeline stage
    weight_only_4bit: bool = False  # 4-bit weights dequantised to BF16 for the math (W4A16)
    dense_wbytes: float = 0.0  # per attention/router/shared-MLP weight (0: wbytes; 2 if only experts are quantized)

    @classmethod
    def of(cls, cfg: EngineConfig) -> Shard:
        m, tp, pp = cfg.model, cfg.tp, cfg.pp
        pc = param_counts(m)
        wb = weight_bytes_per_param(cfg.precision)
        # a checkpoint that quantizes only its routed experts (gpt-oss in MXFP4) keeps the rest 16-bit
        dwb = 2.0 if m.is_moe and m.expert_only_precision and cfg.precision == m.expert_only_precision else wb
        kv_heads = max(1, m.num_key_value_heads // tp)
        layer_dense = (
            pc.attention_per_layer + pc.router_per_layer + pc.norms_per_layer + pc.always_on_mlp_per_layer
        ) / tp
        lm_head = (pc.lm_head or pc.embedding) / tp
        routed = pc.mlp_per_layer - pc.always_on_mlp_per_layer if m.is_moe else pc.mlp_per_layer
        per_layer_bytes = (
            routed * wb
            + (pc.attention_per_layer + pc.always_on_mlp_per_layer + pc.router_per_layer) * dwb
            + pc.norms_per_layer * 2.0
        ) / tp
        # stage s holds its layers; the first also the embedding, the last the lm_head (a tied model's
        # last stage keeps its own copy of the table when pp > 1) and the final norm, all 16-bit
        base, extra = divmod(m.num_hidden_layers, pp)
        stages = []
        for st in range(pp):
            b = (base + (1 if st < extra else 0)) * per_layer_bytes
            if st == 0:
                b += pc.embedding * 2.0 / tp
            if st == pp - 1:
                b += (pc.lm_head if (pc.lm_head or pp == 1) else pc.embedding) * 2.0 / tp + pc.final_norm * 2.0 / tp
            stages.append(b)
        rate = math_rate(cfg.gpu, cfg.precision)
        kvb = kv_bytes_per_value(cfg.kv_precision)
        per_layer_kv = m.kv_values_per_token_layer(tp) * kvb
        stage_layers = math.ceil(m.num_hidden_layers / pp)
        full, win = m.full_attention_layers, m.num_hidden_layers - m.full_attention_layers
        full_stage = math.ceil(full / pp)
        win_stage = math.ceil(win / pp)
        return cls(
            layers=m.num_hidden_layers,
            layers_per_stage=stage_layers,
            kv_heads_per_gpu=kv_heads,
            layer_dense_params=layer_dense,
            expert_params=pc.expert_per_layer / tp,
            lm_head_params=lm_head,
            weight_bytes=max(stages),
            wbytes=wb,
            kv_bytes_per_token=per_layer_kv * full,
            kv_bytes_per_token_stage=per_layer_kv * full_stage,
            math_flops_per_s=rate.flops_per_s,
            math=rate.math,
            bf16_flops_per_s=cfg.gpu.bf16_dense_tflops * 1e12,
            moe_layer_fraction=pc.moe_layer_fraction,
            window_kv_bytes_per_token=per_layer_kv * win,
            window_kv_bytes_per_token_stage=per_layer_kv * win_stage,
            stage_weight_bytes=tuple(stages),
            weight_only_4bit=number_format(cfg.precision).bits == 4 and rate.math == "bf16",
            dense_wbytes=dwb,
        )

    def kv_bytes(self, model: ModelSpec, sequences: float, context_tokens: float, *, stage: bool = True) -> float:
        """KV bytes per GPU for `sequences` of `context_tokens` each (sliding-window layers capped)."""
        full = self.kv_bytes_per_token_stage if stage else self.kv_bytes_per_token
        win = self.window_kv_bytes_per_token_stage if stage else self.window_kv_bytes_per_token
        windowed = min(context_tokens, model.sliding_window) if model.sliding_window else 0
        return sequences * (context_tokens * full + windowed * win)


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


def nodes_spanned(gpu: GPU, gpus: int) -> int:
    """Nodes (NVLink domains) that `gpus` consecutive GPUs occupy."""
    return math.ceil(gpus / gpu.node_gpus)


def allreduce_s(cfg: EngineConfig, message_bytes: float) -> float:
    """One all-reduce over the tp GPUs (see the module docstring).

    Inside one node: ring, latency + 2(tp-1)/tp * bytes / NVLink busbw. Across n nodes of g GPUs:
    hierarchical, 2(g-1)/g * bytes / NVLink busbw + 2(n-1)/n * bytes/g / scale-out busbw, plus a
    network latency.
    """
    if cfg.tp == 1:
        return 0.0
    eff, gpu = cfg.efficiency, cfg.gpu
    busbw = gpu.link_one_direction_bytes_per_s * eff.allreduce_busbw_fraction
    n = nodes_spanned(gpu, cfg.tp)
    if n == 1:
        return eff.allreduce_latency(cfg.tp) + 2.0 * (cfg.tp - 1) / cfg.tp * message_bytes / busbw
    g = math.ceil(cfg.tp / n)
    net = gpu.scaleout_bytes_per_s * eff.scaleout_busbw_fraction
    intra = 2.0 * (g - 1) / g * message_bytes / busbw if g > 1 else 0.0
    inter = 2.0 * (n - 1) / n * (message_bytes / g) / net
    return eff.allreduce_latency(cfg.tp) + eff.scaleout_latency_s + intra + inter


def cross_node_sends(cfg: EngineConfig) -> int:
    """Pipeline hand-offs (of pp - 1) whose two stages sit on different nodes (stage s on GPUs s*tp...)."""
    k = cfg.gpu.node_gpus
    return sum(1 for s in range(cfg.pp - 1) if (s * cfg.tp) // k != ((s + 1) * cfg.tp) // k)


def pp_send_s(cfg: EngineConfig, activation_bytes: float) -> float:
    """All pipeline hand-offs of one micro-batch: NVLink inside a node, the NIC between nodes."""
    eff, gpu = cfg.efficiency, cfg.gpu
    cross = cross_node_sends(cfg)
    local = cfg.pp - 1 - cross
    return local * (eff.pp_send_latency_s + activation_bytes / gpu.link_one_direction_bytes_per_s) + cross * (
        eff.pp_send_latency_s
        + eff.scaleout_latency_s
        + activation_bytes / (gpu.scaleout_bytes_per_s * eff.scaleout_busbw_fraction)
    )


def _blend(compute_s: float, memory_s: float, p: float) -> float:
    """Roofline time of one kernel: max(c, m) when p is infinite, else (c^p + m^p)^(1/p)."""
    if math.isinf(p) or not compute_s or not memory_s:
        return max(compute_s, memory_s)
    hi = max(compute_s, memory_s)
    return hi * ((compute_s / hi) ** p + (memory_s / hi) ** p) ** (1.0 / p)


def step_time(
    cfg: EngineConfig,
    num_prefill_tokens: int = 0,
    num_decode_seqs: int = 0,
    decode_context_tokens_total: int = 0,
    *,
    num_prefill_seqs: int | None = None,
    prefill_attention_keys: int | None = None,
) -> StepTime:
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
    moe = s.moe_layer_fraction if m.is_moe else 1.0
    active = s.layer_dense_params + s.expert_params * m.num_experts_per_tok * moe
    touched = expected_experts_touched(m, n_tok) if m.is_moe else 1.0
    gemm_flops = 2.0 * (n_tok * active * s.layers + sampled * s.lm_head_params)
    expert_flops = 2.0 * n_tok * s.expert_params * m.num_experts_per_tok * moe * s.layers if m.is_moe else 0.0
    dense_bytes = s.layers * s.layer_dense_params * (s.dense_wbytes or s.wbytes)
    expert_bytes = s.layers * s.expert_params * touched * moe * s.wbytes
    gemm_bytes = dense_bytes + expert_bytes + (2.0 * s.lm_head_params if sampled else 0.0)
    keys = prefill_attention_keys + decode_context_tokens_total
    if m.sliding_window and m.full_attention_layers < m.num_hidden_layers:
        # windowed layers attend to at most `sliding_window` keys per query
        w_layers = m.num_hidden_layers - m.full_attention_layers
        q_tokens = n_tok
        w_keys = min(keys, q_tokens * m.sliding_window)
        layer_keys = m.full_attention_layers * keys + w_layers * w_keys
    else:
        layer_keys = s.layers * keys
    attn_flops = 4.0 * (m.attention_width / cfg.tp) * layer_keys
    seqs = max(1, num_decode_seqs + n_seqs)
    attn_bytes = s.kv_bytes(m, seqs, (decode_context_tokens_total + num_prefill_tokens) / seqs, stage=False)
    bw = cfg.gpu.hbm_bytes_per_s * eff.hbm
    rate = s.math_flops_per_s * eff.gemm(s.math)
    moe_eff = eff.moe_expert_compute if s.math in ("fp8", "fp4") else 1.0
    fine = m.is_moe and m.expert_width < eff.fine_moe_width
    if fine:
        moe_eff *= eff.fine_moe_compute
    gc = (gemm_flops - expert_flops) / rate + expert_flops / (rate * moe_eff)
    # 4-bit weights unpacked to BF16 inside the GEMM (W4A16) stream more slowly than plain BF16 weights
    lm_head_bytes = 2.0 * s.lm_head_params if sampled else 0.0
    stream = eff.weight_only_4bit_stream if s.weight_only_4bit else 1.0
    if fine or (s.dense_wbytes and s.dense_wbytes != s.wbytes):  # experts and the rest stream differently
        expert_stream = stream * (eff.fine_moe_stream if fine else 1.0)
        dense_stream = stream if s.dense_wbytes == s.wbytes else 1.0  # 16-bit attention streams at the plain rate
        gm = expert_bytes / (bw * expert_stream) + dense_bytes / (bw * dense_stream) + lm_head_bytes / bw
    else:
        gm = (gemm_bytes - lm_head_bytes) / (bw * stream) + lm_head_bytes / bw
    ac, am = attn_flops / (s.bf16_flops_per_s * eff.attention_compute), attn_bytes / bw
    comm = 2 * s.layers * allreduce_s(cfg, n_tok * m.hidden_size * ACTIVATION_BYTES) if n_tok else 0.0
    comm += pp_send_s(cfg, n_tok * m.hidden_size * ACTIVATION_BYTES) if cfg.pp > 1 else 0.0
    overhead = s.layers * eff.per_layer_overhead_s + eff.step_overhead_s
    if m.is_moe and (eff.moe_layer_overhead_s or eff.moe_token_layer_s):
        overhead += s.layers * moe * (eff.moe_layer_overhead_s + n_tok * eff.moe_token_layer_s)
    # a pure prefill pass pays its setup; in a mixed step (continuous batching) it hides behind the decodes
    overhead += eff.prefill_pass_overhead_s if num_prefill_tokens and not num_decode_seqs else 0.0
    gemm_s, attention_s = _blend(gc, gm, eff.roofline_blend), _blend(ac, am, eff.roofline_blend)
    compute_limited = (gemm_s if gc >= gm else 0.0) + (attention_s if ac >= am else 0.0)
    bound = "compute" if compute_limited > (gemm_s + attention_s) / 2 else "memory"
    return StepTime(
        gemm_s + attention_s + comm + overhead,
        gc + ac,
        gm + am,
        comm,
        overhead,
        gemm_s,
        attention_s,
        cfg.tp * (gemm_flops + attn_flops),
        cfg.tp * (gemm_bytes + attn_bytes),
        bound,
        n_tok,
    )


def overhead_text(cfg: EngineConfig, *, prefill_pass: bool = False) -> str:
    """Where a step's fixed overhead comes from, in words (its parts and their calibration)."""
    eff, layers = cfg.efficiency, cfg.shard.layers_per_stage * cfg.pp
    parts = f"{layers} layers x {eff.per_layer_overhead_s * 1e6:g} µs + {eff.step_overhead_s * 1e3:g} ms per step"
    if prefill_pass:
        parts += f" + {eff.prefill_pass_overhead_s * 1e3:g} ms prefill setup"
    text = (
        f"{parts}: kernel launches, norms, sampling and the scheduler, fitted on published low-batch decode "
        "latencies (NIM 1.8's one-user inter-token latency, Llama 3.3 70B FP8 on 2 x H100; vLLM at batch 8 on H200)"
    )
    base = DEFAULT_EFFICIENCY
    if (eff.step_overhead_s, eff.per_layer_overhead_s) != (base.step_overhead_s, base.per_layer_overhead_s):
        text += f"; the {eff.profile} engine profile replaces a part with its own fit (docs/calibration.md)"
    return text


@dataclass(frozen=True)
class MemoryBreakdown:
    """Per GPU, decimal GB (1e9 bytes). weights + kv_cache + activations + reserve + spare = capacity.
    In JSON (`result.as_json`) each figure keeps 3 decimals."""

    capacity_gb: float = about("The GPU's memory capacity.", digits=3)
    weights_gb: float = about("This GPU's share of the weights.", digits=3)
    kv_cache_gb: float = about("KV cache of the batch's sequences at their context, this GPU's share.", digits=3)
    activations_gb: float = about(
        "Peak activation buffers: one prefill chunk, plus a row of logits per sequence.", digits=3
    )
    reserve_gb: float = about(
        "Kept back for CUDA context, workspaces and fragmentation (as vLLM's gpu_memory_utilization).", digits=3
    )
    spare_gb: float = about("Negative when the configuration does not fit.", digits=3)
    fits: bool = about("Everything fits: spare_gb >= 0.")
    shortfall_gb: float = about("How much more memory each GPU would need (0 when it fits).", digits=3)


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
    kv = s.kv_bytes(cfg.model, batch, context_tokens) / GB
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
