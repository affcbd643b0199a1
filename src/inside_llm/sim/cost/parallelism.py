"""Eight GPUs, one model (chapter 10): tensor and pipeline parallelism on one HGX-style server.

GPU g of the node belongs to replica g // (tp*pp), pipeline stage (g % (tp*pp)) // tp and tensor
rank g % tp (tensor ranks adjacent, as Megatron-LM orders them). All traffic crosses the NVSwitch
fabric, so any pair of GPUs talks at the full per-GPU NVLink rate.

Tensor parallel (Megatron-LM): every layer's matrices are cut tp ways (attention by heads, the MLP
by columns then rows), so each GPU holds 1/tp of every layer. Two all-reduces per layer (after the
attention output projection and after the MLP down projection) sum the partial results; each is
a message of M = tokens x hidden x 2 bytes (BF16 activations). A ring all-reduce has every GPU send
2(n-1)/n x M bytes, so it takes latency + 2(n-1)/n x M / busbw, where busbw is NCCL's measured bus
bandwidth (370 GB/s on HGX H100) rather than the 450 GB/s one-direction line rate (900 both ways).

Pipeline parallel (GPipe): the layers are cut into pp runs of consecutive layers, one per stage;
each micro-batch's activations (tokens x hidden x 2 bytes) go from stage to stage. m micro-batches
through pp stages take m + pp - 1 slots, each stage busy for m of them:
    bubble = (pp - 1) / (m + pp - 1)
Decoding in steady state, a micro-batch comes back every max(pp, m) slots, so stages idle
1 - m / max(pp, m) of the time.

Timing is the dials' own (serving.pipeline_times with the visitor's m): the batch is cut into m
micro-batches as evenly as possible, a stage slot is one micro-batch's step / pp,
ttft = (sum of prefill steps + (pp - 1) x the largest) / pp, tpot = max(largest decode step, sum / pp);
with m equal micro-batches these are step x (pp + m - 1) / pp and step x max(pp, m) / pp.
`nodes` says whether the split stays inside one NVLink domain (it always does on one 8-GPU node).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..core.derivation import Derivation, derive
from ..core.errors import SimError
from ..core.result import about, as_json
from ..hardware import catalog
from ..hardware.hardware import ACTIVATION_BYTES, weight_bytes_per_param
from ..model.models import kv_formula, param_counts
from . import serving
from .costmodel import GB, EngineConfig, StepTime, allreduce_s, memory_per_gpu, overhead_text

MAX_NODE_GPUS = 8  # one HGX baseboard
MAX_MICRO_BATCHES = 64
MAX_BATCH = 256
MAX_PROMPT_TOKENS = 32_768
MAX_OUTPUT_TOKENS = 4096
ALLREDUCES_PER_LAYER = 2  # after attention (o_proj) and after the MLP (down_proj)


@dataclass(frozen=True)
class ParallelParams:
    """A split of one model over the GPUs of one node; micro_batches only matter when pp > 1."""

    model: str = catalog.DEFAULT_MODEL
    gpu: str = catalog.DEFAULT_GPU
    precision: str = "bf16"
    gpus: int = 8
    tp: int = 8
    pp: int = 1
    micro_batches: int = 8
    batch: int = 16
    prompt_tokens: int = 1024
    output_tokens: int = 256

    def serving_params(self) -> serving.ServingParams:
        """The same server as the dials describe it (everything but the micro-batches)."""
        return serving.params_from(self)


def _check(p: ParallelParams) -> tuple[EngineConfig, catalog.NodeSpec]:
    """Validate (ValueError names the field and bound) and build one replica's EngineConfig."""
    node = catalog.node(p.gpu)
    if node is None:
        raise SimError(
            "gpu",
            f"The GPU must be one sold on an 8-GPU NVLink baseboard ({', '.join(catalog.nodes())}), not {p.gpu!r}.",
        )
    bounds = {
        "gpus": ("The GPU count", p.gpus, MAX_NODE_GPUS),
        "micro_batches": ("Micro-batches", p.micro_batches, MAX_MICRO_BATCHES),
        "batch": ("The batch", p.batch, MAX_BATCH),
        "prompt_tokens": ("The prompt length (tokens)", p.prompt_tokens, MAX_PROMPT_TOKENS),
        "output_tokens": ("The answer length (tokens)", p.output_tokens, MAX_OUTPUT_TOKENS),
    }
    for name, (what, value, hi) in bounds.items():
        if not 1 <= value <= hi:
            raise SimError(name, f"{what} must be between 1 and {hi:,}, not {value!r}.")
    if p.micro_batches > p.batch:
        raise SimError(
            "micro_batches",
            f"Micro-batches must be at most the batch ({p.batch}): each needs at least "
            f"one chat; {p.micro_batches} is too many.",
            also=("batch",),
        )
    cfg, _ = serving.resolve(p.serving_params())
    return cfg, node


def bubble_fraction(pp: int, micro_batches: int) -> float:
    """GPipe fill-and-drain idle share: (pp - 1) / (m + pp - 1); 0 without a pipeline."""
    if pp < 1 or micro_batches < 1:
        raise ValueError("pp and micro_batches must be >= 1")
    return (pp - 1) / (micro_batches + pp - 1)


def stage_layers(num_layers: int, pp: int) -> list[tuple[int, int]]:
    """(first, last) layer numbers, 1-based and inclusive, of each stage; earlier stages take the extra."""
    base, extra = divmod(num_layers, pp)
    out, first = [], 1
    for s in range(pp):
        n = base + (1 if s < extra else 0)
        out.append((first, first + n - 1))
        first += n
    return out


def gpu_map(gpus: int, tp: int, pp: int) -> list[dict[str, int]]:
    """Where each GPU sits: replica, pipeline stage, tensor rank."""
    per = tp * pp
    return [{"gpu": g, "replica": g // per, "stage": (g % per) // tp, "rank": g % tp} for g in range(gpus)]


def timeline(pp: int, micro_batches: int, phase: str) -> dict[str, Any]:
    """Stage-by-slot schedule. prefill: one GPipe pass (fill and drain). decode: two steady-state rounds.

    cells: [{stage, slot, micro_batch}] for busy slots; every other (stage, slot) is idle.
    """
    m = micro_batches
    if phase == "prefill":
        slots = m + pp - 1
        cells = [{"stage": s, "slot": s + j, "micro_batch": j} for s in range(pp) for j in range(m)]
        return {"phase": phase, "slots": slots, "cells": cells, "idle_fraction": bubble_fraction(pp, m)}
    cycle = max(pp, m)
    slots = 2 * cycle
    cells = [
        {"stage": s, "slot": t, "micro_batch": (t - s) % cycle}
        for s in range(pp)
        for t in range(slots)
        if (t - s) % cycle < m
    ]
    return {"phase": phase, "slots": slots, "cells": cells, "idle_fraction": 1 - m / cycle}


def _allreduce(cfg: EngineConfig, node: catalog.NodeSpec, tokens: int) -> dict[str, float]:
    """One layer's tensor-parallel traffic for a step of `tokens` tokens (zeros when tp = 1)."""
    n, hidden = cfg.tp, cfg.model.hidden_size
    message = tokens * hidden * ACTIVATION_BYTES if n > 1 else 0.0
    ring = 2 * (n - 1) / n * message  # bytes each GPU sends per all-reduce
    line = node.nvlink_one_direction_gb_s * 1e9
    busbw = cfg.gpu.link_one_direction_bytes_per_s * cfg.efficiency.allreduce_busbw_fraction
    one = allreduce_s(cfg, message)
    return {
        "tokens": tokens,
        "message_bytes": message,
        "allreduce_bytes_per_layer": ALLREDUCES_PER_LAYER * message,
        "sent_bytes_per_gpu_per_layer": ALLREDUCES_PER_LAYER * ring,
        "allreduce_ms": one * 1e3,
        "allreduce_ms_line_rate": ring / line * 1e3,
        "allreduce_ms_per_layer": ALLREDUCES_PER_LAYER * one * 1e3,
        "allreduce_ms_per_step": ALLREDUCES_PER_LAYER * cfg.model.num_hidden_layers * one * 1e3,
        "busbw_gb_s": busbw / 1e9,
        "line_rate_gb_s": line / 1e9,
    }


def _phase(cfg: EngineConfig, node: catalog.NodeSpec, st: StepTime, m: int, phase: str) -> dict[str, Any]:
    """One phase (prefill or decode) of one micro-batch: step parts, TP and PP traffic, timeline."""
    act = st.tokens * cfg.model.hidden_size * ACTIVATION_BYTES
    send = cfg.efficiency.pp_send_latency_s + act / cfg.gpu.link_one_direction_bytes_per_s
    return {
        "tokens": st.tokens,
        "step_ms": st.seconds * 1e3,
        "slot_ms": st.seconds / cfg.pp * 1e3,
        "gemm_ms": st.gemm_s * 1e3,
        "attention_ms": st.attention_s * 1e3,
        "comm_ms": st.comm_s * 1e3,
        "overhead_ms": st.overhead_s * 1e3,
        "overhead_note": overhead_text(cfg, prefill_pass=phase == "prefill"),
        "bound": st.bound,
        "tensor": _allreduce(cfg, node, st.tokens),
        "pipeline": {
            "activation_bytes_per_send": act if cfg.pp > 1 else 0.0,
            "sends_per_step": cfg.pp - 1,
            "send_ms": send * 1e3 if cfg.pp > 1 else 0.0,
        },
        "timeline": timeline(cfg.pp, m, phase),
    }


def _steps(cfg: EngineConfig, p: ParallelParams, m: int) -> serving._Phases:
    """Prefill and mean decode of one batch in m uneven micro-batches (the dials' own timing)."""
    return serving.pipeline_times(cfg, p.serving_params(), m)


@dataclass(frozen=True)
class ParallelismResult:
    """Everything chapter 10 draws: the split, memory per GPU, NVLink traffic, bubbles and the speed."""

    model: str = about("Catalog model id.")
    model_name: str = about("The model's name.")
    gpu: str = about("Catalog GPU id.")
    gpu_name: str = about("The GPU's name.")
    precision: str = about("Weight format.")
    gpus: int = about("GPUs used.")
    tp: int = about("Tensor-parallel GPUs per replica.")
    pp: int = about("Pipeline stages per replica.")
    replicas: int = about("Copies of the model: gpus / (tp x pp).")
    micro_batches: int = about("Micro-batches used (1 when pp = 1).")
    batch: int = about("Chats per replica (sequences).")
    prompt_tokens: int = about("Prompt length (tokens).")
    output_tokens: int = about("Answer length (tokens).")
    num_layers: int = about("The model's layers.")
    hidden_size: int = about("Numbers per token between layers.")
    stages: list[dict] = about(
        "Per pipeline stage: stage, first_layer, last_layer (1-based, inclusive), num_layers, weights_gb (per GPU: "
        "the first stage also holds the embedding, the last the lm_head)."
    )
    gpu_map: list[dict] = about("Per GPU: gpu, replica, stage and tensor rank.")
    model_weights_gb: float = about("The whole model's weights, GB.")
    capacity_gb: float = about("The GPU's memory, GB.")
    weights_gb: float = about("Weights per GPU of the fullest stage, GB (each stage's own in `stages`).")
    kv_cache_gb: float = about("KV cache per GPU at the end of every answer, GB.")
    activations_gb: float = about("Peak activation buffers per GPU, GB.")
    reserve_gb: float = about("Kept back by the runtime per GPU, GB.")
    spare_gb: float = about("Memory left per GPU, GB (negative when the split does not fit).")
    fits: bool = about("Weights, KV cache, activations and reserve fit in each GPU's memory.")
    shortfall_gb: float = about("How much more memory each GPU would need, GB (0 when it fits).")
    single_gpu: dict = about("The same model and batch on one GPU: weights_gb, kv_cache_gb, fits, shortfall_gb.")
    allreduce_bytes_per_layer: float = about("TP: bytes all-reduced per layer in one prefill micro-batch.")
    bubble_fraction: float = about("PP: (pp - 1) / (micro_batches + pp - 1).")
    ttft_ms: float = about("Time to first token: the batch's prefill through the pipeline (ms).")
    tpot_ms: float = about("Time per output token: a decode round of the pipeline (ms).")
    tokens_per_s_per_user: float = about("1 / tpot: output tokens per second each chat sees.")
    tokens_per_s_total: float = about("replicas x batch / tpot: output tokens per second of all replicas.")
    prefill: dict = about(
        "One prefill micro-batch: its step's parts (ms), tensor all-reduce and pipeline traffic, and the timeline."
    )
    decode: dict = about("One decode step of a micro-batch, as `prefill`.")
    node: dict = about("The 8-GPU NVLink server: NVSwitch chips, links and bandwidths, with sources.")
    nodes: dict = about(
        "Where the split sits: NVLink domains (nodes) and whether a replica spans "
        "them (never on one 8-GPU server): gpus_per_node, nodes, spans_nodes, text."
    )
    layer: dict = about(
        "One layer's weights as tensor parallelism cuts them: attention and MLP params "
        "and bytes, and slice_bytes each of the tp GPUs holds (sim.cost.parallelism.layer_weights)."
    )
    math: dict[str, Derivation] = about("Show-the-math: each headline field's name -> how it was computed.")


def parallelism(p: ParallelParams = ParallelParams()) -> dict[str, Any]:
    """Everything chapter 10 draws (ParallelismResult), JSON-ready (see module docstring); ValueError names a bad
    field."""
    cfg, node = _check(p)
    m = p.micro_batches if p.pp > 1 else 1
    ph = _steps(cfg, p, m)
    prefill, decode, ttft_s, tpot_s = ph.prefill, ph.decode, ph.ttft_s, ph.tpot_s
    replicas = p.gpus // (p.tp * p.pp)
    ctx = p.prompt_tokens + p.output_tokens
    mem = memory_per_gpu(cfg, p.batch, ctx)
    whole = EngineConfig(cfg.model, cfg.gpu, 1, 1, cfg.precision, cfg.kv_precision)
    one = memory_per_gpu(whole, p.batch, ctx)
    phases = {"prefill": _phase(cfg, node, prefill, m, "prefill"), "decode": _phase(cfg, node, decode, m, "decode")}
    result = ParallelismResult(
        model=p.model,
        model_name=cfg.model.name,
        gpu=p.gpu,
        gpu_name=cfg.gpu.name,
        precision=p.precision,
        gpus=p.gpus,
        tp=p.tp,
        pp=p.pp,
        replicas=replicas,
        micro_batches=m,
        batch=p.batch,
        prompt_tokens=p.prompt_tokens,
        output_tokens=p.output_tokens,
        num_layers=cfg.model.num_hidden_layers,
        hidden_size=cfg.model.hidden_size,
        stages=[
            {
                "stage": s,
                "first_layer": a,
                "last_layer": b,
                "num_layers": b - a + 1,
                "weights_gb": round(cfg.shard.stage_weight_bytes[s] / GB, 3),
            }
            for s, (a, b) in enumerate(stage_layers(cfg.model.num_hidden_layers, p.pp))
        ],
        gpu_map=gpu_map(p.gpus, p.tp, p.pp),
        model_weights_gb=whole.shard.weight_bytes / GB,
        **as_json(mem),  # rounded as the dials round it
        single_gpu={
            "weights_gb": one.weights_gb,
            "kv_cache_gb": one.kv_cache_gb,
            "fits": one.fits,
            "shortfall_gb": one.shortfall_gb,
        },
        allreduce_bytes_per_layer=phases["prefill"]["tensor"]["allreduce_bytes_per_layer"],
        bubble_fraction=bubble_fraction(p.pp, m),
        ttft_ms=ttft_s * 1e3,
        tpot_ms=tpot_s * 1e3,
        tokens_per_s_per_user=1.0 / tpot_s,
        tokens_per_s_total=replicas * p.batch / tpot_s,
        prefill=phases["prefill"],
        decode=phases["decode"],
        node=_node_dict(node),
        nodes=as_json(serving.node_facts(cfg, p.gpus)),
        layer=layer_weights(cfg),
        math={},
    )
    return as_json(replace(result, math=_derivations(cfg, node, p, result)))


def layer_weights(cfg: EngineConfig) -> dict[str, Any]:
    """One transformer layer's weight matrices as tensor parallelism cuts them: attention by heads (Q, K, V
    column slices, O row slices) and the MLP by its intermediate columns (gate/up columns, down rows), so each
    of the tp GPUs holds 1/tp of both and both end in an all-reduce (Megatron-LM)."""
    m, wb = cfg.model, weight_bytes_per_param(cfg.precision)
    c = param_counts(m)
    attention, mlp = c.attention_per_layer, c.mlp_per_layer
    return {
        "hidden_size": m.hidden_size,
        "intermediate_size": m.intermediate_size,
        "q_dim": m.q_dim,
        "kv_dim": m.kv_dim,
        "num_experts": m.num_local_experts if m.is_moe else 1,
        "attention_params": attention,
        "mlp_params": mlp,
        "bytes_per_param": wb,
        "attention_bytes": attention * wb,
        "mlp_bytes": mlp * wb,
        "layer_bytes": (attention + mlp) * wb,
        "slice_bytes": (attention + mlp) * wb / cfg.tp,
    }


def _node_dict(node: catalog.NodeSpec) -> dict[str, Any]:
    keys = (
        "name",
        "gpus",
        "nvswitch_chips",
        "nvswitch_generation",
        "nvlink_links_per_gpu",
        "nvlink_bandwidth_gb_s",
        "nvlink_one_direction_gb_s",
        "allreduce_bus_bandwidth_gb_s",
    )
    return {**{k: getattr(node, k) for k in keys}, "sources": dict(node.sources)}


def _derivations(
    cfg: EngineConfig, node: catalog.NodeSpec, p: ParallelParams, o: ParallelismResult
) -> dict[str, Derivation]:
    pre, src = o.prefill, node.sources
    tpar = pre["tensor"]
    busbw_src = src.get("allreduce_bus_bandwidth_gb_s") or "cost model: allreduce_busbw_fraction x line rate"
    return {
        "weights_gb": derive(
            o.weights_gb,
            "GB per GPU",
            "(quantized params x bytes/param + 16-bit params x 2) / (tp x pp)",
            {"model_weights_gb": (o.model_weights_gb, "GB"), "tp": (p.tp, "GPUs"), "pp": (p.pp, "GPUs")},
            ["embedding and lm_head stay 16-bit"],
        ),
        "kv_cache_gb": derive(
            o.kv_cache_gb,
            "GB per GPU",
            kv_formula(cfg.model)[0],
            {
                "batch": (p.batch, "sequences"),
                "context": (p.prompt_tokens + p.output_tokens, "tokens"),
                "kv_bytes_per_token_per_gpu": (cfg.shard.kv_bytes_per_token_stage, "B"),
            },
            kv_formula(cfg.model)[1],
        ),
        "allreduce_bytes_per_layer": derive(
            tpar["allreduce_bytes_per_layer"],
            "B",
            "2 all-reduces x tokens x hidden x 2 bytes (BF16)",
            {
                "tokens": (tpar["tokens"], "tokens in one prefill micro-batch"),
                "hidden": (cfg.model.hidden_size, ""),
                "tp": (p.tp, "GPUs"),
            },
            [
                "Megatron-LM tensor parallelism: one all-reduce after attention, one after the MLP",
                "a ring all-reduce sends 2(tp-1)/tp of the message from every GPU",
            ],
            ["Shoeybi et al., Megatron-LM, arXiv:1909.08053, Section 3"],
        ),
        "allreduce_ms": derive(
            tpar["allreduce_ms"],
            "ms",
            "latency + 2(tp-1)/tp x message_bytes / busbw",
            {
                "message_bytes": (tpar["message_bytes"], "B"),
                "busbw": (tpar["busbw_gb_s"], "GB/s", busbw_src),
                "line_rate": (tpar["line_rate_gb_s"], "GB/s", src.get("nvlink_one_direction_gb_s")),
                "latency": (cfg.efficiency.allreduce_latency_s * 1e6, "us"),
            },
            [f"at the line rate it would take {tpar['allreduce_ms_line_rate']:.3g} ms"],
        ),
        "bubble_fraction": derive(
            o.bubble_fraction,
            "fraction",
            "(pp - 1) / (micro_batches + pp - 1)",
            {"pp": (p.pp, "stages"), "micro_batches": (o.micro_batches, "")},
            ["forward pass only (inference): each stage idles while the pipeline fills and drains"],
            ["Huang et al., GPipe, arXiv:1811.06965, Section 2.2"],
        ),
        "ttft_ms": derive(
            o.ttft_ms,
            "ms",
            "(sum of micro-batch prefill steps + (pp - 1) x the largest) / pp",
            {
                "prefill_step_ms": (pre["step_ms"], "ms"),
                "comm_ms": (pre["comm_ms"], "ms"),
                "pp": (p.pp, ""),
                "micro_batches": (o.micro_batches, ""),
            },
            ["roofline step time from the cost model, all-reduces on the critical path"],
        ),
        "tokens_per_s_per_user": derive(
            o.tokens_per_s_per_user,
            "tokens/s",
            "1 / max(largest micro-batch decode step, sum of steps / pp)",
            {
                "decode_step_ms": (o.decode["step_ms"], "ms"),
                "pp": (p.pp, ""),
                "micro_batches": (o.micro_batches, ""),
            },
            ["decode step at the mean context prompt + output / 2"],
        ),
    }
