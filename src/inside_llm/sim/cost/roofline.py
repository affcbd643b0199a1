"""Chapter 5: the roofline of one GPU, with prefill and decode placed on it.

A roofline plots attainable FLOP/s against arithmetic intensity (FLOPs per byte of HBM traffic):
    attainable(I) = min(peak FLOP/s, I * bandwidth);  ridge = peak / bandwidth   [FLOP/byte]
Left of the ridge the slanted memory roof binds, right of it the flat compute roof.

Points come from the cost model, per GPU of a tensor-parallel group: FLOPs and HBM bytes of one
engine step, intensity = FLOPs / bytes, attained = FLOPs / step seconds (real efficiencies and
overheads included), share_of_peak = attained / peak. Decoding one chat reads every weight for
two FLOPs per weight, so its intensity is about 1 FLOP/byte (BF16) against an H100 ridge near 295:
a fraction of a percent of the math is used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ..core.derivation import Derivation, derive
from ..core.errors import SimError
from ..core.result import about
from ..hardware import catalog
from ..hardware.hardware import GPU, math_rate
from ..model.models import ModelSpec
from . import engines
from .costmodel import EngineConfig, max_batch, step_time

MAX_BATCH = 1024  # chats decoded together: the decode curve runs 1 .. MAX_BATCH
DEFAULT_BATCHES = tuple(2**i for i in range(11))  # 1 .. 1024
DEFAULT_PROMPTS = tuple(2**i for i in range(7, 13))  # 128 .. 4096 prompt tokens, the slider's stops
ROOF_INTENSITY_RANGE = (0.1, 1e5)  # FLOP/byte, the chart's x axis


@dataclass(frozen=True)
class Roof:
    """The GPU's two roofs at this precision. Units: FLOP/s, bytes/s, FLOP/byte."""

    gpu_id: str = about("Catalog GPU id.")
    precision: str = about("Weight precision the roofs are for.")
    math: str = about("Tensor path the GEMMs run on (an FP8 model on A100 runs BF16 math).")
    peak_flops_per_s: float = about("The compute roof: dense FLOP/s of that tensor path (datasheet).")
    bandwidth_bytes_per_s: float = about("The memory roof's slope: peak HBM bytes/s (datasheet).")
    ridge_flops_per_byte: float = about("peak / bandwidth: the intensity where the two roofs meet (FLOP/byte).")
    peak_source: str = about("Where the peak comes from.")
    bandwidth_source: str = about("Where the bandwidth comes from.")

    def attainable(self, intensity: np.ndarray | float) -> np.ndarray | float:
        """min(peak, intensity * bandwidth): the roof at a given FLOP/byte."""
        return np.minimum(self.peak_flops_per_s, np.asarray(intensity) * self.bandwidth_bytes_per_s)


def roof(gpu: GPU, precision: str = "bf16") -> Roof:
    """Peak dense FLOP/s for the precision's math path, peak HBM bandwidth and their ratio."""
    rate = math_rate(gpu, precision)
    bw = gpu.hbm_bytes_per_s
    return Roof(
        gpu.id,
        precision,
        rate.math,
        rate.flops_per_s,
        bw,
        rate.flops_per_s / bw,
        gpu.source(rate.field),
        gpu.source("hbm_bandwidth_tb_s"),
    )


@dataclass(frozen=True)
class RooflinePoint:
    """One engine step on one GPU: FLOPs, HBM bytes, intensity, attained and ideal FLOP/s."""

    phase: Literal["prefill", "decode"] = about("prefill: `batch` prompts of `context_tokens`; decode: one step.")
    batch: int = about("Sequences in the step (prefill: prompts).")
    context_tokens: int = about("Tokens of context per sequence (prefill: the prompt).")
    flops: float = about("FLOPs of the step on this GPU.")
    hbm_bytes: float = about("HBM bytes the step moves on this GPU (weights and KV cache).")
    arithmetic_intensity: float = about("FLOP/byte.")
    seconds: float = about("Step time (cost model, overheads included), s.")
    attained_flops_per_s: float = about("FLOPs / step seconds (cost model, overheads included).")
    roof_flops_per_s: float = about("The ideal roof at this intensity (no efficiencies, no overheads).")
    share_of_peak: float = about("attained / peak: the share of the chip's math used.")
    roof_share_of_peak: float = about("roof / peak: the share the ideal roof allows at this intensity.")
    bound: Literal["memory", "compute"] = about("The roof the step sits under (cost model).")


def point(cfg: EngineConfig, phase: str, batch: int, context_tokens: int, peak: Roof) -> RooflinePoint:
    """Prefill of `batch` prompts of `context_tokens`, or one decode step at that context."""
    if phase == "prefill":
        st = step_time(
            cfg,
            num_prefill_tokens=batch * context_tokens,
            num_prefill_seqs=batch,
            prefill_attention_keys=batch * context_tokens * (context_tokens + 1) // 2,
        )
    elif phase == "decode":
        st = step_time(cfg, num_decode_seqs=batch, decode_context_tokens_total=batch * context_tokens)
    else:
        raise ValueError(f"phase must be 'prefill' or 'decode'; got {phase!r}")
    flops, nbytes = st.flops / cfg.tp, st.hbm_bytes / cfg.tp
    intensity = flops / nbytes
    attained = flops / st.seconds
    ideal = float(peak.attainable(intensity))
    return RooflinePoint(
        phase,
        batch,
        context_tokens,
        flops,
        nbytes,
        intensity,
        st.seconds,
        attained,
        ideal,
        attained / peak.peak_flops_per_s,
        ideal / peak.peak_flops_per_s,
        st.bound,
    )


@dataclass(frozen=True)
class RooflineResult:
    roof: Roof
    prefill: RooflinePoint
    decode: RooflinePoint
    decode_curve: dict[str, list]
    roof_curve: dict[str, list]
    math: dict[str, Derivation] = field(default_factory=dict)
    prefill_curve: dict[str, list] = field(default_factory=dict)


def decode_curve(
    cfg: EngineConfig, context_tokens: int, peak: Roof, batches: tuple[int, ...] = DEFAULT_BATCHES
) -> dict[str, list]:
    """The decode point as batch grows: it climbs the memory slope towards the ridge."""
    fit = max_batch(cfg, context_tokens)
    pts = [point(cfg, "decode", b, context_tokens, peak) for b in batches]
    return {
        "batch": list(batches),
        "arithmetic_intensity": [p.arithmetic_intensity for p in pts],
        "attained_flops_per_s": [p.attained_flops_per_s for p in pts],
        "share_of_peak": [p.share_of_peak for p in pts],
        "step_ms": [p.seconds * 1e3 for p in pts],
        "tokens_per_s": [b / p.seconds for b, p in zip(batches, pts)],
        "fits": [b <= fit for b in batches],
        "max_batch": fit,
    }


def prefill_curve(
    cfg: EngineConfig, batch: int, peak: Roof, prompts: tuple[int, ...] = DEFAULT_PROMPTS
) -> dict[str, list]:
    """The prefill point as the prompt grows: each weight fetched serves batch x prompt tokens, so it
    slides up the memory slope and over the ridge. Prompts longer than the model's window are left out."""
    prompts = tuple(n for n in prompts if n <= cfg.model.max_position_embeddings)
    pts = [point(cfg, "prefill", batch, n, peak) for n in prompts]
    return {
        "prompt_tokens": list(prompts),
        "tokens_per_step": [batch * n for n in prompts],
        "arithmetic_intensity": [p.arithmetic_intensity for p in pts],
        "attained_flops_per_s": [p.attained_flops_per_s for p in pts],
        "share_of_peak": [p.share_of_peak for p in pts],
    }


def roof_curve(peak: Roof, n: int = 49) -> dict[str, list]:
    """Log-spaced points of the roof for drawing, plus the ridge corner."""
    x = np.logspace(np.log10(ROOF_INTENSITY_RANGE[0]), np.log10(ROOF_INTENSITY_RANGE[1]), n)
    return {
        "arithmetic_intensity": x.tolist(),
        "attainable_flops_per_s": peak.attainable(x).tolist(),
        "ridge": [peak.ridge_flops_per_byte, peak.peak_flops_per_s],
    }


def roofline(
    model: str | ModelSpec = catalog.DEFAULT_MODEL,
    gpu: str | GPU = catalog.DEFAULT_GPU,
    precision: str = "bf16",
    kv_precision: str = "bf16",
    batch: int = 1,
    context_tokens: int = 1024,
    tp: int = 8,
    batches: tuple[int, ...] = DEFAULT_BATCHES,
) -> RooflineResult:
    """Chapter 5 data: roofs, prefill and decode points, the decode curve over batch, derivations."""
    m = catalog.model(model) if isinstance(model, str) else model
    g = catalog.gpu(gpu) if isinstance(gpu, str) else gpu
    if not 1 <= batch <= MAX_BATCH:
        raise SimError("batch", f"The batch must be between 1 and {MAX_BATCH:,} chats, not {batch:,}.")
    if not 1 <= context_tokens <= m.max_position_embeddings:
        raise SimError(
            "prompt_tokens",
            f"The prompt length must be between 1 and {m.max_position_embeddings:,} "
            f"tokens, the context window of {m.name}, not {context_tokens:,}.",
        )
    eff = engines.profile("auto", g).efficiency()  # the best published engine for the GPU's vendor
    cfg = EngineConfig(m, g, tp=tp, precision=precision, kv_precision=kv_precision, efficiency=eff)
    peak = roof(g, precision)
    pre = point(cfg, "prefill", batch, context_tokens, peak)
    dec = point(cfg, "decode", batch, context_tokens, peak)
    return RooflineResult(
        peak,
        pre,
        dec,
        decode_curve(cfg, context_tokens, peak, batches),
        roof_curve(peak),
        _derivations(cfg, peak, dec),
        prefill_curve(cfg, batch, peak),
    )


def _derivations(cfg: EngineConfig, peak: Roof, dec: RooflinePoint) -> dict[str, Derivation]:
    g = cfg.gpu
    return {
        "ridge_flops_per_byte": derive(
            peak.ridge_flops_per_byte,
            "FLOP/byte",
            "peak FLOP/s / HBM bytes/s",
            {
                "peak_flops_per_s": (peak.peak_flops_per_s, "FLOP/s", peak.peak_source),
                "hbm_bandwidth": (peak.bandwidth_bytes_per_s, "bytes/s", peak.bandwidth_source),
            },
        ),
        "decode_arithmetic_intensity": derive(
            dec.arithmetic_intensity,
            "FLOP/byte",
            "decode-step FLOPs / HBM bytes read (weights + KV cache), per GPU",
            {"flops": (dec.flops, "FLOP"), "hbm_bytes": (dec.hbm_bytes, "bytes"), "batch": (dec.batch, "sequences")},
            ["each weight is read once per step and used for 2 FLOPs per sequence"],
        ),
        "decode_share_of_peak": derive(
            dec.share_of_peak,
            "fraction",
            "(decode FLOPs / step seconds) / peak FLOP/s",
            {
                "flops": (dec.flops, "FLOP"),
                "step_ms": (dec.seconds * 1e3, "ms"),
                "peak_flops_per_s": (peak.peak_flops_per_s, "FLOP/s", peak.peak_source),
                "gpu": (g.id, ""),
                "tp": (cfg.tp, "GPUs"),
            },
            ["step time from the calibrated cost model (docs/calibration.md)"],
        ),
    }


def point_math(res: RooflineResult, tp: int) -> dict[str, Derivation]:
    """Show-the-math for the points' other headline numbers: attained FLOP/s, prefill share, the binding roof."""
    pk, dec, pre = res.roof, res.decode, res.prefill
    peak_in = (pk.peak_flops_per_s, "FLOP/s", pk.peak_source)
    per_gpu = f"per GPU of a {tp}-way tensor-parallel group"
    binds = "compute" if dec.arithmetic_intensity >= pk.ridge_flops_per_byte else "memory"
    return {
        "decode_attained_flops_per_s": derive(
            dec.attained_flops_per_s,
            "FLOP/s",
            "decode-step FLOPs / step seconds",
            {"flops": (dec.flops, "FLOP"), "step_ms": (dec.seconds * 1e3, "ms"), "batch": (dec.batch, "sequences")},
            [per_gpu, "step time from the calibrated cost model"],
        ),
        "decode_roof": derive(
            min(pk.peak_flops_per_s, dec.arithmetic_intensity * pk.bandwidth_bytes_per_s),
            "FLOP/s",
            f"min(peak, intensity x bandwidth): the {binds} roof binds "
            f"(intensity {'>=' if binds == 'compute' else '<'} ridge)",
            {
                "arithmetic_intensity": (dec.arithmetic_intensity, "FLOP/byte"),
                "ridge_flops_per_byte": (pk.ridge_flops_per_byte, "FLOP/byte"),
                "hbm_bandwidth": (pk.bandwidth_bytes_per_s, "bytes/s", pk.bandwidth_source),
                "peak_flops_per_s": peak_in,
            },
            ["the ideal roof: datasheet peaks, no efficiency factors or overheads"],
        ),
        "prefill_arithmetic_intensity": derive(
            pre.arithmetic_intensity,
            "FLOP/byte",
            "prefill FLOPs / HBM bytes read (weights once + KV written), per GPU",
            {
                "flops": (pre.flops, "FLOP"),
                "hbm_bytes": (pre.hbm_bytes, "bytes"),
                "prompt_tokens": (pre.batch * pre.context_tokens, "tokens"),
            },
            ["each weight is read once and used for 2 FLOPs per prompt token"],
        ),
        "prefill_share_of_peak": derive(
            pre.share_of_peak,
            "fraction",
            "(prefill FLOPs / prefill seconds) / peak FLOP/s",
            {"flops": (pre.flops, "FLOP"), "prefill_ms": (pre.seconds * 1e3, "ms"), "peak_flops_per_s": peak_in},
            [per_gpu, "step time from the calibrated cost model"],
        ),
    }
