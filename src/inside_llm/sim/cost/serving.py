"""The dials (chapter 11): a whole server's latency, throughput, memory and cost from a few inputs.

Scenario: the GPUs form `replicas = gpus / (tp * pp)` identical replicas. Each runs batches of
`batch` requests, each with `prompt_tokens` in and `output_tokens` out, from prefill to the last
token (static batching: the next batch starts when this one ends). Then

    ttft   = prefill of the whole batch's prompts (one pass; with pp, micro-batches pipelined)
    tpot   = mean decode step over the answer; the cache grows from P to P+O tokens, and since
             the decode step is linear in context length the mean equals the step at P + O/2
    e2e    = ttft + (O - 1) * tpot
    tokens_per_s_total = replicas * batch * O / e2e                      (static batches)
    cost_per_million   = gpus * price_per_gpu_hour / 3600 / tokens_per_s_total * 1e6

Continuous batching (chapter 7) keeps all `batch` seats busy: in steady state every step decodes
`batch` sequences and, since batch / O requests finish per step, prefills batch / O new prompts
(chunked prefill rides along): step = step_time(batch * P / O prefill tokens, batch decodes at the
mean context P + O/2), and tokens_per_s_continuous = replicas * batch / step. `throughput_mode`
says which one `tokens_per_s_total` and the cost show.

Pipeline parallelism: a batch is split into m = min(pp, batch) micro-batches as evenly as possible
(sizes differ by at most one); prefill may use one micro-batch per prompt when that finishes sooner.
A setup that does not fit in memory still gets its figures computed, but `fits` is False and the
API moves them under `hypothetical`.

Every headline number comes with a Derivation in `math` (formula, inputs with units and
sources, assumptions).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from ..core.derivation import Derivation, derive
from ..core.errors import SimError, words
from ..core.result import about, as_json
from ..hardware import catalog
from ..hardware.hardware import GPU, math_rate, number_format
from ..model.models import ModelSpec, kv_formula
from . import engines
from .costmodel import (
    Efficiency,
    EngineConfig,
    MemoryBreakdown,
    StepTime,
    cross_node_sends,
    max_batch,
    memory_per_gpu,
    nodes_spanned,
    overhead_text,
    step_time,
)

MAX_GPUS = 144  # two GB200 NVL72 racks, or 18 eight-GPU nodes
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
    throughput_mode: str = "static"  # "static" | "continuous": which batching tokens_per_s_total assumes
    engine: str = "auto"  # engine profile (sim/cost/engines.py): auto = the best published engine for the GPU


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
    tokens_per_s_static: float = 0.0
    tokens_per_s_continuous: float = 0.0
    throughput_mode: str = "static"
    nodes: NodeFacts | None = None
    engine_profile: str = ""  # the engine profile that priced the figures, in words
    math: dict[str, Derivation] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.memory.fits

    def to_dict(self) -> dict[str, Any]:
        """As `result.as_json`, plus `fits` and the figures the dials show only for a setup that fits.

        When the setup does not fit, the time, rate and cost figures are None at the top level and
        appear only under `hypothetical` (with the reason): they describe a server that cannot run.
        """
        d = as_json(self)
        d["fits"] = self.fits
        d["hypothetical"] = None
        if not self.fits:
            d["hypothetical"] = {
                "reason": f"does not fit: each GPU is {self.memory.shortfall_gb:,.1f} GB short, "
                "so these figures describe a server that cannot run",
                **{k: d[k] for k in HYPOTHETICAL_FIELDS},
            }
            d.update({k: None for k in HYPOTHETICAL_FIELDS})
        return d


# figures that only mean something when the setup fits in memory
HYPOTHETICAL_FIELDS = (
    "ttft_ms",
    "tpot_ms",
    "e2e_latency_ms",
    "tokens_per_s_per_user",
    "tokens_per_s_total",
    "tokens_per_s_static",
    "tokens_per_s_continuous",
    "cost_per_million_tokens_usd",
    "mfu",
    "bandwidth_utilization",
)
THROUGHPUT_MODES = ("static", "continuous")


def _check(name: str, what: str, value: float, lo: float, hi: float) -> None:
    if not lo <= value <= hi:
        raise SimError(name, f"{what} must be between {words(lo)} and {words(hi)}, not {value!r}.")


def resolve(p: ServingParams) -> tuple[EngineConfig, int]:
    """Validate the dials and build the replica's EngineConfig; returns (config, replicas)."""
    m = catalog.model(p.model) if isinstance(p.model, str) else p.model
    g = catalog.gpu(p.gpu) if isinstance(p.gpu, str) else p.gpu
    _check("gpus", "The GPU count", p.gpus, 1, MAX_GPUS)
    _check("batch", "The batch", p.batch, 1, MAX_BATCH)
    _check("prompt_tokens", "The prompt length (tokens)", p.prompt_tokens, 1, MAX_TOKENS)
    _check("output_tokens", "The answer length (tokens)", p.output_tokens, 1, MAX_TOKENS)
    _check("price_per_gpu_hour", "The price per GPU-hour (USD)", p.price_per_gpu_hour, 0, 1000)
    if p.throughput_mode not in THROUGHPUT_MODES:
        raise SimError(
            "throughput_mode",
            f"The throughput mode must be {' or '.join(THROUGHPUT_MODES)}, not {p.throughput_mode!r}.",
        )
    if p.prompt_tokens + p.output_tokens > m.max_position_embeddings:
        raise SimError(
            "prompt_tokens",
            f"The prompt and the answer together must fit {m.name}'s context window of "
            f"{m.max_position_embeddings:,} tokens; {p.prompt_tokens:,} + {p.output_tokens:,} = "
            f"{p.prompt_tokens + p.output_tokens:,} do not.",
            also=("output_tokens",),
        )
    if p.tp < 1 or p.pp < 1 or p.gpus % (p.tp * p.pp):
        raise SimError(
            "tp",
            f"Pipeline stages × tensor parallel must divide the GPU count ({p.gpus}); {p.pp} × {p.tp} does not.",
            also=("pp", "gpus"),
        )
    eff = engines.profile(p.engine, g).efficiency()
    cfg = EngineConfig(m, g, p.tp, p.pp, p.precision, p.kv_precision, eff)
    return cfg, p.gpus // (p.tp * p.pp)


@dataclass(frozen=True)
class _Phases:
    prefill: StepTime  # the largest prefill micro-batch's step
    decode: StepTime  # the largest decode micro-batch's step
    micro_batches: int  # decode micro-batches in flight
    ttft_s: float
    tpot_s: float
    e2e_s: float
    prefill_micro_batches: int = 1
    decode_sizes: tuple[int, ...] = (1,)
    decode_steps: tuple[StepTime, ...] = ()  # one per decode_sizes entry (estimate reuses them)
    prefill_steps: tuple[StepTime, ...] = ()  # one per micro-batch of the chosen prefill split


def split(batch: int, parts: int) -> tuple[int, ...]:
    """`batch` sequences in `parts` micro-batches as even as possible, largest first (sizes differ by <= 1)."""
    q, r = divmod(batch, parts)
    return tuple(q + 1 if i < r else q for i in range(parts))


def _prefill(cfg: EngineConfig, P: int, n: int) -> StepTime:
    return step_time(cfg, num_prefill_tokens=n * P, num_prefill_seqs=n, prefill_attention_keys=n * P * (P + 1) // 2)


def _pipelined(steps: list[float], pp: int) -> float:
    """GPipe fill and drain of micro-batches (largest first): stage slot = step / pp.

    The last stage finishes after the first micro-batch's pp - 1 slots of fill plus every micro-batch's
    own slot; a larger micro-batch ahead holds up the ones behind it, hence the max.
    """
    return (sum(steps) + (pp - 1) * max(steps)) / pp


def _phases(cfg: EngineConfig, p: ServingParams, micro_batches: int | None = None) -> _Phases:
    """Prefill and mean decode step of one batch, micro-batched over the pipeline stages.

    Decode: m = min(pp, batch) uneven micro-batches; a sequence waits for its micro-batch's trip
    through all stages, and a stage serves all m in turn: tpot = max(largest step, sum of steps / pp).
    Prefill: the faster of m micro-batches or one per prompt (more, smaller micro-batches shrink the
    fill-and-drain bubble at the price of re-reading each stage's weights). `micro_batches` fixes m
    for both phases instead (chapter 10 lets the visitor choose it).
    """
    P, O, pp = p.prompt_tokens, p.output_tokens, cfg.pp
    m_b = min(pp, p.batch) if micro_batches is None else min(micro_batches, p.batch)
    sizes = split(p.batch, m_b)
    ctx = P + O / 2
    decodes = {n: step_time(cfg, num_decode_seqs=n, decode_context_tokens_total=round(n * ctx)) for n in set(sizes)}
    tpot = max(max(decodes[n].seconds for n in sizes), sum(decodes[n].seconds for n in sizes) / pp)
    best: tuple[float, int, tuple[StepTime, ...]] | None = None
    options = (
        {m_b} if pp == 1 or micro_batches else {m_b, p.batch} | {k * pp for k in (2, 4, 8, 16) if k * pp < p.batch}
    )
    for m in sorted(options):
        psizes = split(p.batch, m)
        steps = {n: _prefill(cfg, P, n) for n in set(psizes)}
        t = _pipelined([steps[n].seconds for n in psizes], pp) if pp > 1 else steps[psizes[0]].seconds
        if best is None or t < best[0]:
            best = (t, m, tuple(steps[n] for n in psizes))
    ttft, m_p, psteps = best
    return _Phases(
        psteps[0],
        decodes[sizes[0]],
        m_b,
        ttft,
        tpot,
        ttft + (O - 1) * tpot,
        m_p,
        sizes,
        tuple(decodes[n] for n in sizes),
        psteps,
    )


def pipeline_times(cfg: EngineConfig, p: ServingParams, micro_batches: int | None = None) -> _Phases:
    """TTFT, TPOT and the largest micro-batch's steps (see _phases); public for chapter 10."""
    return _phases(cfg, p, micro_batches)


def continuous_step(cfg: EngineConfig, p: ServingParams) -> StepTime:
    """One steady-state step of continuous batching with all `batch` seats busy (see module docstring)."""
    P, O, b = p.prompt_tokens, p.output_tokens, p.batch
    arrivals = b / O  # requests finishing, hence admitted, per step
    prefill_tokens = round(arrivals * P)
    return step_time(
        cfg,
        num_prefill_tokens=prefill_tokens,
        num_decode_seqs=b,
        decode_context_tokens_total=round(b * (P + O / 2)),
        num_prefill_seqs=math.ceil(arrivals) if prefill_tokens else 0,
        prefill_attention_keys=round(arrivals * P * (P + 1) / 2),
    )


@dataclass(frozen=True)
class NodeFacts:
    """Where the setup sits: NVLink domains (nodes) and what crosses the scale-out network."""

    gpus_per_node: int = about("GPUs in one NVLink domain (8 on an HGX board; 72 on GB200 NVL72).")
    nodes: int = about("Nodes the server's GPUs occupy.")
    nodes_per_replica: int = about("Nodes one replica's tp x pp GPUs occupy.")
    spans_nodes: bool = about("True when one replica's GPUs sit in more than one NVLink domain.")
    tensor_nodes: int = about("Nodes one tensor-parallel group spans (its all-reduces cross them).")
    cross_node_pipeline_sends: int = about("Pipeline hand-offs (of pp - 1) between stages on different nodes.")
    scaleout_bandwidth_gb_s: float = about("Scale-out network per GPU, one direction (GB/s).")
    text: str = about("The same in a sentence.")


def node_facts(cfg: EngineConfig, gpus: int) -> NodeFacts:
    """Where the setup sits: nodes in all, per replica, and which traffic crosses the scale-out network."""
    g = cfg.gpu
    per_replica = cfg.tp * cfg.pp
    tp_nodes = nodes_spanned(g, cfg.tp)
    cross = cross_node_sends(cfg)
    spans = nodes_spanned(g, per_replica) > 1
    if not spans:
        text = (
            f"one replica fits in one {g.node_gpus}-GPU NVLink domain: all its traffic stays on "
            f"{g.interconnect_bandwidth_gb_s:,.0f} GB/s links"
        )
    else:
        parts = []
        if tp_nodes > 1:
            parts.append(f"tensor all-reduces cross {tp_nodes} nodes")
        if cross:
            parts.append(f"{cross} of {cfg.pp - 1} pipeline hand-offs cross nodes")
        text = (
            f"one replica spans {nodes_spanned(g, per_replica)} nodes of {g.node_gpus} GPUs: "
            f"{' and '.join(parts)} over the {g.scaleout_bandwidth_gb_s * 8:,.0f} Gb/s network per GPU"
        )
    return NodeFacts(
        gpus_per_node=g.node_gpus,
        nodes=nodes_spanned(g, gpus),
        nodes_per_replica=nodes_spanned(g, per_replica),
        spans_nodes=spans,
        tensor_nodes=tp_nodes,
        cross_node_pipeline_sends=cross,
        scaleout_bandwidth_gb_s=g.scaleout_bandwidth_gb_s,
        text=text,
    )


def estimate(p: ServingParams = ServingParams()) -> ServingEstimate:
    """The dials estimate (see module docstring). ValueError names a bad field and its bound."""
    return estimate_resolved(p)[0]


def estimate_resolved(p: ServingParams = ServingParams()) -> tuple[ServingEstimate, EngineConfig]:
    """`estimate(p)` and the EngineConfig it resolved (the API reuses it rather than resolving again)."""
    cfg, replicas = resolve(p)
    ph = _phases(cfg, p)
    O = p.output_tokens
    tps_static = replicas * p.batch * O / ph.e2e_s
    tps_cont = replicas * p.batch / continuous_step(cfg, p).seconds
    tps_total = tps_cont if p.throughput_mode == "continuous" else tps_static
    cost = p.gpus * p.price_per_gpu_hour / 3600.0 / tps_total * 1e6
    mem = memory_per_gpu(cfg, p.batch, p.prompt_tokens + O)
    fit = max_batch(cfg, p.prompt_tokens + O)
    peak = math_rate(cfg.gpu, cfg.precision).flops_per_s
    n_gpu = cfg.tp * cfg.pp
    # the steps _phases already priced: one per prefill micro-batch and one per decode micro-batch
    prefill_flops = sum(s.flops for s in ph.prefill_steps)
    decode_flops = sum(s.flops for s in ph.decode_steps)
    decode_bytes = sum(s.hbm_bytes for s in ph.decode_steps)
    mfu = (prefill_flops + (O - 1) * decode_flops) / (ph.e2e_s * n_gpu * peak)
    bw_util = decode_bytes / (ph.tpot_s * n_gpu * cfg.gpu.hbm_bytes_per_s)
    est = ServingEstimate(
        ttft_ms=ph.ttft_s * 1e3,
        tpot_ms=ph.tpot_s * 1e3,
        e2e_latency_ms=ph.e2e_s * 1e3,
        tokens_per_s_per_user=1.0 / ph.tpot_s,
        tokens_per_s_total=tps_total,
        cost_per_million_tokens_usd=cost,
        memory=mem,
        max_batch=fit,
        bound=ph.decode.bound,
        prefill_bound=ph.prefill.bound,
        mfu=mfu,
        bandwidth_utilization=bw_util,
        replicas=replicas,
        tokens_per_s_static=tps_static,
        tokens_per_s_continuous=tps_cont,
        throughput_mode=p.throughput_mode,
        nodes=node_facts(cfg, p.gpus),
        engine_profile=engines.profiles()[cfg.efficiency.profile].label(),
    )
    return replace(est, math=_derivations(cfg, p, est, ph)), cfg  # the derivations quote the figures above


def params_from(source: Any, **overrides: Any) -> ServingParams:
    """ServingParams from anything that carries the dials' inputs under their names (a query's params, the
    CLI's arguments, chapter 10's params, a published reference): each field it has is taken, the others
    keep their defaults, and `overrides` win over both. One list of the inputs: ServingParams' fields."""
    given = {f.name: getattr(source, f.name) for f in fields(ServingParams) if hasattr(source, f.name)}
    return ServingParams(**{**given, **overrides})


def params_dict(p: ServingParams) -> dict[str, Any]:
    """The params as plain data (custom model/GPU reduced to their ids)."""
    d = asdict(p) if isinstance(p.model, str) and isinstance(p.gpu, str) else dict(p.__dict__)
    d["model"] = p.model if isinstance(p.model, str) else p.model.id
    d["gpu"] = p.gpu if isinstance(p.gpu, str) else p.gpu.id
    return d


# ---- show the math ------------------------------------------------------------------------------


def _gpu_inputs(g: GPU, *names: str) -> dict[str, tuple]:
    units = {
        "hbm_bandwidth_tb_s": "TB/s",
        "hbm_capacity_gb": "GB",
        "bf16_dense_tflops": "TFLOP/s",
        "fp8_dense_tflops": "TFLOP/s",
        "int8_dense_tops": "TOP/s",
        "interconnect_bandwidth_gb_s": "GB/s",
    }
    return {f"{g.id}.{n}": (getattr(g, n), units.get(n, ""), g.source(n) or None) for n in names}


def _step_assumptions(cfg: EngineConfig) -> list[str]:
    e = cfg.efficiency
    rate = math_rate(cfg.gpu, cfg.precision)
    prof = engines.profiles()[e.profile]
    fine = cfg.model.is_moe and cfg.model.expert_width < e.fine_moe_width
    return [
        f"engine profile {prof.id}: {prof.label()}, {prof.versions}; "
        + "; ".join(prof.factor_lines())
        + f" (fitted on {prof.sources.get('fit', 'no rows')}; docs/calibration.md)",
        *(
            [
                f"fine-grained MoE ({cfg.model.num_local_experts} experts {cfg.model.expert_width:,} wide): expert "
                f"weights stream at {e.fine_moe_stream:.0%} of the HBM efficiency and expert GEMMs run at "
                f"{e.fine_moe_compute:.0%} of the expert efficiency (fitted on TensorRT-LLM 2025 Qwen3 30B-A3B and "
                "gpt-oss-120b rows)"
            ]
            if fine
            else []
        ),
        f"GEMM math: {rate.note}"
        if rate.math == "bf16" and cfg.precision not in ("bf16", "fp16", "int4")
        else f"GEMM math in {rate.math.upper()} ({rate.field} of {cfg.gpu.name})",
        f"GEMMs reach {e.gemm(cfg.shard.math):.0%} of {cfg.shard.math} peak; attention {e.attention_compute:.0%}"
        f" of BF16 peak; HBM streams at {e.hbm:.0%} of peak (calibrated, docs/calibration.md)",
        f"per-step overhead {overhead_text(cfg)}; tensor-parallel all-reduces on the critical path",
        "embedding and lm_head stay 16-bit; activations BF16",
        node_facts(cfg, cfg.tp * cfg.pp).text,
    ]


def _derivations(cfg: EngineConfig, p: ServingParams, est: ServingEstimate, ph: _Phases) -> dict[str, Derivation]:
    """The `math` block: one Derivation per headline number."""
    return {
        **_time_derivations(cfg, p, est, ph),
        **_rate_derivations(cfg, p, est, ph),
        **_memory_derivations(cfg, p, est.memory, est.max_batch),
    }


def _time_derivations(cfg: EngineConfig, p: ServingParams, est: ServingEstimate, ph: _Phases) -> dict[str, Derivation]:
    g, m = cfg.gpu, cfg.model
    step = _step_assumptions(cfg)
    common = {
        "model": (m.id, "", m.source or None),
        "gpu": (g.id, ""),
        "tp": (cfg.tp, "GPUs"),
        "pp": (cfg.pp, "GPUs"),
        "precision": (cfg.precision, ""),
        "batch": (p.batch, "sequences"),
    }
    pf = ph.prefill
    return {
        "ttft_ms": derive(
            est.ttft_ms,
            "ms",
            "ttft = gemm + attention + all-reduce + overhead for the prefill of "
            "batch x prompt_tokens (each part a roofline max of FLOPs/rate and bytes/bandwidth)",
            {
                **common,
                "prompt_tokens": (p.prompt_tokens, "tokens"),
                "prefill_flops": (pf.flops, "FLOP"),
                "gemm_ms": (pf.gemm_s * 1e3, "ms"),
                "attention_ms": (pf.attention_s * 1e3, "ms"),
                "comm_ms": (pf.comm_s * 1e3, "ms"),
                "overhead_ms": (pf.overhead_s * 1e3, "ms"),
                **_gpu_inputs(g, "bf16_dense_tflops", "hbm_bandwidth_tb_s", "interconnect_bandwidth_gb_s"),
            },
            step + ["the whole batch's prompts are prefilled in one pass before the first token"],
        ),
        "tpot_ms": derive(
            est.tpot_ms,
            "ms",
            "tpot = decode step at mean context P + O/2 = max(weight bytes, GEMM "
            "FLOPs) + max(KV bytes, attention FLOPs) + all-reduces + overhead",
            {
                **common,
                "mean_context": (p.prompt_tokens + p.output_tokens / 2, "tokens"),
                "bytes_per_step": (ph.decode.hbm_bytes * ph.micro_batches, "B"),
                "gemm_ms": (ph.decode.gemm_s * 1e3, "ms"),
                "attention_ms": (ph.decode.attention_s * 1e3, "ms"),
                "comm_ms": (ph.decode.comm_s * 1e3, "ms"),
                "overhead_ms": (ph.decode.overhead_s * 1e3, "ms"),
                **_gpu_inputs(g, "hbm_bandwidth_tb_s"),
            },
            step
            + ["decode step time is linear in context, so the mean over the answer is the step at the mean context"],
        ),
    }


def _rate_derivations(cfg: EngineConfig, p: ServingParams, est: ServingEstimate, ph: _Phases) -> dict[str, Derivation]:
    g = cfg.gpu
    return {
        "tokens_per_s_per_user": derive(
            est.tokens_per_s_per_user, "tokens/s", "1000 / tpot_ms", {"tpot_ms": (est.tpot_ms, "ms")}
        ),
        "tokens_per_s_total": _throughput_derivation(cfg, p, est),
        "cost_per_million_tokens_usd": derive(
            est.cost_per_million_tokens_usd,
            "USD per 1M output tokens",
            "gpus x price_per_gpu_hour / 3600 / tokens_per_s_total x 1e6",
            {
                "gpus": (p.gpus, "GPUs"),
                "price_per_gpu_hour": (p.price_per_gpu_hour, "USD/h"),
                "tokens_per_s_total": (est.tokens_per_s_total, "tokens/s"),
            },
            ["$3 per GPU-hour is an example rental price, not a quote"],
        ),
        "mfu": derive(
            est.mfu,
            "fraction",
            "model FLOPs of the batch / (e2e time x GPUs x peak FLOP/s)",
            {
                "peak_flops_per_s": (cfg.shard.math_flops_per_s, "FLOP/s"),
                "gpus": (cfg.tp * cfg.pp, "GPUs"),
                "e2e_ms": (est.e2e_latency_ms, "ms"),
            },
        ),
        "bandwidth_utilization": derive(
            est.bandwidth_utilization,
            "fraction",
            "HBM bytes per decode step / (tpot x GPUs x peak bandwidth)",
            {
                "bytes_per_step": (ph.decode.hbm_bytes * ph.micro_batches, "B"),
                "tpot_ms": (est.tpot_ms, "ms"),
                **_gpu_inputs(g, "hbm_bandwidth_tb_s"),
            },
        ),
    }


def _throughput_derivation(cfg: EngineConfig, p: ServingParams, est: ServingEstimate) -> Derivation:
    reps = f"replicas = gpus / (tp x pp) = {p.gpus} / {cfg.tp * cfg.pp}"
    other = (
        f"static batches would give {est.tokens_per_s_static:,.0f} tokens/s"
        if est.throughput_mode == "continuous"
        else f"continuous batching would give {est.tokens_per_s_continuous:,.0f} tokens/s"
    )
    if est.throughput_mode == "continuous":
        step = continuous_step(cfg, p)
        return derive(
            est.tokens_per_s_total,
            "tokens/s",
            "replicas x batch / steady-state step",
            {
                "replicas": (est.replicas, ""),
                "batch": (p.batch, "seats"),
                "prefill_tokens_per_step": (p.batch * p.prompt_tokens / p.output_tokens, "tokens"),
                "step_ms": (step.seconds * 1e3, "ms"),
            },
            [
                "continuous batching (shown): every seat is refilled as a chat ends, so each step decodes "
                "the whole batch and prefills batch / output_tokens new prompts alongside",
                reps,
                other,
            ],
        )
    return derive(
        est.tokens_per_s_total,
        "tokens/s",
        "replicas x batch x output_tokens / (ttft + (output_tokens - 1) x tpot)",
        {
            "replicas": (est.replicas, ""),
            "batch": (p.batch, "sequences"),
            "output_tokens": (p.output_tokens, "tokens"),
            "ttft_ms": (est.ttft_ms, "ms"),
            "tpot_ms": (est.tpot_ms, "ms"),
        },
        ["static batches (shown): the next batch starts when the last one finishes", reps, other],
    )


def _memory_derivations(cfg: EngineConfig, p: ServingParams, mem: MemoryBreakdown, fit: int) -> dict[str, Derivation]:
    g, s = cfg.gpu, cfg.shard
    ctx = p.prompt_tokens + p.output_tokens
    kv_text = kv_formula(cfg.model, per="batch x (prompt + output) x ")
    return {
        "weights_gb": derive(
            mem.weights_gb,
            "GB per GPU",
            "(quantized params x bytes/param + 16-bit params x 2) / (tp x pp)",
            {"bytes_per_param": (s.wbytes, "B"), "tp": (cfg.tp, ""), "pp": (cfg.pp, "")},
            [
                f"{cfg.precision.upper()}: {number_format(cfg.precision).note} = "
                f"{number_format(cfg.precision).bits_per_value:g} bits per weight",
                "embedding and lm_head stay 16-bit; pipeline stages: the first also holds the "
                "embedding, the last the lm_head (the fullest GPU is shown)",
                *(
                    [f"{cfg.model.name}'s checkpoint quantizes only the routed experts: attention and router stay BF16"]
                    if s.dense_wbytes != s.wbytes
                    else []
                ),
            ],
        ),
        "kv_cache_gb": derive(
            mem.kv_cache_gb,
            "GB per GPU",
            kv_text[0],
            {
                "batch": (p.batch, "sequences"),
                "context": (ctx, "tokens"),
                "kv_bytes_per_token_per_gpu": (s.kv_bytes_per_token_stage, "B"),
                "kv_precision": (cfg.kv_precision, ""),
            },
            ["every sequence holds its full context at the end of the answer", *kv_text[1]],
        ),
        "spare_gb": derive(
            mem.spare_gb,
            "GB per GPU",
            "capacity - weights - kv_cache - activations - reserve",
            {
                **_gpu_inputs(g, "hbm_capacity_gb"),
                "weights_gb": (mem.weights_gb, "GB"),
                "kv_cache_gb": (mem.kv_cache_gb, "GB"),
                "activations_gb": (mem.activations_gb, "GB"),
                "reserve_gb": (mem.reserve_gb, "GB"),
            },
            [
                f"reserve = {cfg.efficiency.runtime_reserve_fraction:.0%} of capacity for CUDA context, "
                "NCCL/cuBLAS workspaces and fragmentation (vLLM gpu_memory_utilization=0.9)"
            ],
        ),
        "max_batch": derive(
            fit,
            "sequences",
            "largest batch with spare_gb >= 0 at this context",
            {"context": (ctx, "tokens"), "kv_bytes_per_token_per_gpu": (s.kv_bytes_per_token_stage, "B")},
        ),
    }


# ---- calibration --------------------------------------------------------------------------------

METRICS = {
    "tokens_per_s_total": "tokens_per_s_total",
    "ttft_ms": "ttft_ms",
    "tpot_ms": "tpot_ms",
    "e2e_latency_ms": "e2e_latency_ms",
}


def reference_params(ref: catalog.Reference) -> ServingParams:
    """ServingParams reproducing a published measurement's conditions.

    When the engine chose the batch (ref.batch is None) we use the largest batch that fits in our
    memory model at that context, capped at the engine's limit (ref.max_batch).
    """
    base = params_from(
        ref,
        batch=ref.batch or 1,
        throughput_mode="continuous" if ref.batching == "continuous" else "static",
        engine=engines.engine_of(ref.engine),
    )
    if ref.batch is not None:
        return base
    cfg, _ = resolve(base)
    fit = max_batch(cfg, ref.prompt_tokens + ref.output_tokens)
    return replace(base, batch=max(1, min(fit, ref.max_batch or MAX_BATCH)))


def metric_value(
    p: ServingParams,
    metric: str,
    efficiency: Efficiency | None = None,
    *,
    cfg: EngineConfig | None = None,
    replicas: int = 1,
) -> float:
    """One figure of `estimate(p)`, with other efficiency factors or an already resolved config (the
    calibration's refits; no derivations)."""
    if cfg is None:
        cfg, replicas = resolve(p)
        if efficiency is not None:
            cfg = replace(cfg, efficiency=efficiency)
    if metric == "tokens_per_s_total" and p.throughput_mode == "continuous":
        return replicas * p.batch / continuous_step(cfg, p).seconds
    ph = _phases(cfg, p)
    return {
        "ttft_ms": ph.ttft_s * 1e3,
        "tpot_ms": ph.tpot_s * 1e3,
        "e2e_latency_ms": ph.e2e_s * 1e3,
        "tokens_per_s_total": replicas * p.batch * p.output_tokens / ph.e2e_s,
    }[metric]


def predict(ref: catalog.Reference) -> tuple[float, ServingEstimate]:
    """The model's value for a reference's metric, and the estimate it came from."""
    if ref.metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}; got {ref.metric!r}")
    est = estimate(reference_params(ref))
    return float(getattr(est, METRICS[ref.metric])), est
