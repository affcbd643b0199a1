"""Chapter 4: what is on a GPU package, and how fast one decode step streams the weights through it.

`layout(gpu)` gives the drawing's facts, all from the catalog (each with its source): dies, the grid
of SMs grouped by GPC (or by die/XCD where GPCs are not published), tensor cores per SM, the L2,
and the HBM stacks around the die with their share of capacity and bandwidth.

`decode_stream(cfg, batch, context)` gives, per GPU, the bytes one decode step reads (weights and
KV cache) and the time the cost model gives for it, so the scene can animate weights travelling
HBM -> L2 -> SMs at a stated slow-motion factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from ..core.derivation import Derivation, derive
from ..core.result import about
from ..hardware.hardware import GPU
from .costmodel import EngineConfig, overhead_text, step_time

LAYOUT_FIELDS = (
    "sm_count",
    "compute_unit",
    "matrix_unit",
    "gpc_count",
    "tensor_cores_per_sm",
    "l2_cache_mb",
    "hbm_stacks",
    "hbm_capacity_gb",
    "hbm_bandwidth_tb_s",
    "memory_type",
    "die_count",
)


def _split(total: int, groups: int) -> list[int]:
    """total items into `groups` nearly equal groups (larger first): 132 SMs / 8 GPCs -> 4 x 17, 4 x 16."""
    base, extra = divmod(total, groups)
    return [base + 1 if i < extra else base for i in range(groups)]


def layout(gpu: GPU) -> dict[str, Any]:
    """Facts needed to draw the package. SM grouping is illustrative where vendors publish only totals."""
    groups = gpu.gpc_count or gpu.die_count or 1
    group_kind = "GPC" if gpu.gpc_count else ("XCD" if gpu.vendor == "AMD" else "die")
    stacks = gpu.hbm_stacks
    return {
        "gpu": gpu.id,
        "name": gpu.name,
        "die_count": gpu.die_count,
        "sm_count": gpu.sm_count,
        "sm_label": gpu.unit_abbr,
        "sm_name": gpu.unit_name,
        "matrix_unit": gpu.matrix_unit_name,
        "sm_groups": _split(gpu.sm_count, groups) if gpu.sm_count else [],
        "sm_group_kind": group_kind,
        "tensor_cores_per_sm": gpu.tensor_cores_per_sm,
        "tensor_cores_total": gpu.sm_count * gpu.tensor_cores_per_sm,
        "l2_cache_mb": gpu.l2_cache_mb,
        "infinity_cache_mb": gpu.infinity_cache_mb,
        "memory_type": gpu.memory_type,
        "hbm_stacks": stacks,
        "hbm_capacity_gb": gpu.hbm_capacity_gb,
        "hbm_gb_per_stack": gpu.hbm_capacity_gb / stacks if stacks else None,
        "hbm_bandwidth_tb_s": gpu.hbm_bandwidth_tb_s,
        "hbm_tb_s_per_stack": gpu.hbm_bandwidth_tb_s / stacks if stacks else None,
        "grouping_note": (
            "per-GPC SM counts are not published for shipping parts; SMs are spread evenly"
            if gpu.gpc_count
            else f"SMs drawn per {group_kind}"
        ),
        "sources": {f: gpu.source(f) for f in LAYOUT_FIELDS if gpu.source(f)},
    }


@dataclass(frozen=True)
class DecodeStream:
    """One decode step on one GPU: the bytes it reads from HBM and where its time goes (cost model)."""

    bytes_per_step: float = about("HBM bytes one GPU reads per decode step (weights + KV cache).")
    weight_bytes_per_step: float = about("Of those, the weights of this GPU's shard.")
    kv_bytes_per_step: float = about("Of those, the KV cache of every sequence at its context.")
    step_ms: float = about("Real time of one decode step (cost model), ms.")
    memory_ms: float = about("Time the bytes alone need at the calibrated bandwidth, ms.")
    effective_tb_s: float = about("bytes_per_step / step time: the average rate over the step, TB/s.")
    peak_tb_s: float = about("The datasheet's HBM bandwidth, TB/s.")
    bandwidth_share: float = about("effective_tb_s / peak_tb_s: how busy HBM is over the whole step.")
    # Where the step's time goes (they add up to step_ms): the bytes at the datasheet peak, the rest of the
    # kernels' time (HBM below peak, or math longer than the reads), all-reduces, launches.
    ideal_ms: float = about("bytes_per_step at the datasheet peak bandwidth, ms: the step if HBM never paused.")
    kernel_ms: float = about(
        "The kernels' time (each the longer of its reads and its math), ms; the part over memory_ms is math the "
        "reads wait for."
    )
    comm_ms: float = about("All-reduces with the other tensor-parallel GPUs in the step, ms (HBM idle).")
    overhead_ms: float = about("Kernel launches and per-step work in the step, ms (HBM idle).")
    overhead_note: str = about(
        "Where overhead_ms comes from: its parts and their calibration (costmodel.overhead_text)."
    )
    hbm_efficiency: float = about("Share of the peak bandwidth a streaming kernel reaches (calibrated).")
    tokens_per_s: float = about("Tokens per second of the whole batch (one per chat per step).")
    bound: Literal["memory", "compute"] = about("The roof the step sits under (cost model).")


def decode_stream(cfg: EngineConfig, batch: int = 1, context_tokens: int = 1024) -> DecodeStream:
    """Bytes one decode step reads on one GPU and how long it takes (cost model, efficiencies included)."""
    if batch < 1 or context_tokens < 1:
        raise ValueError("batch and context_tokens must be >= 1")
    st = step_time(cfg, num_decode_seqs=batch, decode_context_tokens_total=batch * context_tokens)
    nbytes = st.hbm_bytes / cfg.tp
    kv = cfg.shard.kv_bytes_per_token * batch * context_tokens
    effective_tb_s = nbytes / st.seconds / 1e12
    return DecodeStream(
        bytes_per_step=nbytes,
        weight_bytes_per_step=nbytes - kv,
        kv_bytes_per_step=kv,
        step_ms=st.seconds * 1e3,
        memory_ms=st.memory_s * 1e3,
        effective_tb_s=effective_tb_s,
        peak_tb_s=cfg.gpu.hbm_bandwidth_tb_s,
        bandwidth_share=effective_tb_s / cfg.gpu.hbm_bandwidth_tb_s,
        ideal_ms=nbytes / cfg.gpu.hbm_bytes_per_s * 1e3,
        kernel_ms=(st.gemm_s + st.attention_s) * 1e3,
        comm_ms=st.comm_s * 1e3,
        overhead_ms=st.overhead_s * 1e3,
        overhead_note=overhead_text(cfg),
        hbm_efficiency=cfg.efficiency.hbm,
        tokens_per_s=batch / st.seconds,
        bound=st.bound,
    )


# Package geometry the catalog does not hold: how many HBM sites the package has, which edges the
# memory sits on, and how the L2 is split. Placement is drawn from public package photos and block
# diagrams; `source` says which. A GPU not listed (a custom one) gets a plain default (PLAIN_PACKAGE).
_HOPPER_PKG = (
    "Hopper whitepaper (GTC22): the full GH100 has six HBM stack sites, three on each side of the die; "
    "the L2 cache is split into two partitions, each serving the GPCs attached to it"
)
PACKAGES: dict[str, dict[str, Any]] = {
    "h100-sxm": {"hbm_sites": 6, "hbm_placement": "sides", "l2_partitions": 2, "io_dies": 0, "source": _HOPPER_PKG},
    "h100-pcie": {"hbm_sites": 6, "hbm_placement": "sides", "l2_partitions": 2, "io_dies": 0, "source": _HOPPER_PKG},
    "h200": {
        "hbm_sites": 6,
        "hbm_placement": "sides",
        "l2_partitions": 2,
        "io_dies": 0,
        "source": _HOPPER_PKG + "; H200 populates all six sites with HBM3e",
    },
    "a100-80gb": {
        "hbm_sites": 6,
        "hbm_placement": "sides",
        "l2_partitions": 2,
        "io_dies": 0,
        "source": "NVIDIA Ampere GA100 whitepaper: six HBM2 sites beside the die (five active on A100); "
        "the L2 cache is divided into two partitions",
    },
    "b200": {
        "hbm_sites": 8,
        "hbm_placement": "top-bottom",
        "l2_partitions": 2,
        "io_dies": 0,
        "source": "NVIDIA Blackwell die diagram (NVIDIA Developer Blog, as described by Cornell CVW "
        "'Blackwell Chip Diagram'): two dies side by side, HBM3e memory controllers on the top "
        "and bottom edges; each die has its own half of the L2",
    },
    "mi300x": {
        "hbm_sites": 8,
        "hbm_placement": "sides",
        "l2_partitions": 8,
        "io_dies": 4,
        "source": "AMD CDNA 3 whitepaper: eight XCDs on four I/O dies (each I/O die carries two XCDs and a "
        "quarter of the Infinity Cache), four HBM3 stacks on each side; 4 MB L2 inside each XCD",
    },
    "l40s": {
        "hbm_sites": 0,
        "hbm_placement": "board",
        "l2_partitions": 1,
        "io_dies": 0,
        "source": "NVIDIA L40S datasheet: GDDR6 memory chips on the board around the package, no HBM",
    },
}
PLAIN_PACKAGE = {
    "hbm_placement": "sides",
    "io_dies": 0,
    "source": "custom GPU: generic drawing (stacks split over two sides, one L2 block per die)",
}


def package(gpu: GPU) -> dict[str, Any]:
    """Where memory sits and how the L2 splits. Invariant: hbm_sites >= hbm_stacks (inactive sites drawn empty)."""
    pkg = dict(
        PACKAGES.get(gpu.id) or {**PLAIN_PACKAGE, "hbm_sites": gpu.hbm_stacks, "l2_partitions": max(1, gpu.die_count)}
    )
    if gpu.hbm_stacks == 0:
        pkg["hbm_placement"] = "board"
    pkg["hbm_sites"] = max(pkg["hbm_sites"], gpu.hbm_stacks)
    pkg["hbm_inactive_sites"] = pkg["hbm_sites"] - gpu.hbm_stacks
    pkg["l2_mb_per_partition"] = gpu.l2_cache_mb / pkg["l2_partitions"]
    return pkg


def slow_motion(step_s: float, target_s: float = 4.0) -> dict[str, float]:
    """A 1-2-5 slow-motion factor that shows one step in about target_s seconds (factor >= 1)."""
    if step_s <= 0 or target_s <= 0:
        raise ValueError("step_s and target_s must be > 0")
    want = target_s / step_s
    ladder = [m * 10**e for e in range(0, 10) for m in (1, 2, 5)]
    factor = min(ladder, key=lambda f: abs(math.log(f / want)))
    return {"factor": float(factor), "screen_step_s": step_s * factor}


def decode_stream_math(cfg: EngineConfig, batch: int = 1, context_tokens: int = 1024) -> dict[str, Derivation]:
    """Show-the-math for decode_stream's headline numbers (bytes, time and rate per GPU)."""
    d = decode_stream(cfg, batch, context_tokens)
    st = step_time(cfg, num_decode_seqs=batch, decode_context_tokens_total=batch * context_tokens)
    s, g = cfg.shard, cfg.gpu
    per_gpu = [f"per GPU: tensor parallelism over {cfg.tp} GPUs gives each GPU 1/{cfg.tp} of every layer"]
    return {
        "bytes_per_step": derive(
            d.bytes_per_step,
            "bytes",
            "weights read once + KV cache (batch x context x KV bytes/token), per GPU",
            {
                "weight_bytes": (d.weight_bytes_per_step, "bytes"),
                "batch": (batch, "sequences"),
                "context_tokens": (context_tokens, "tokens"),
                "kv_bytes_per_token": (s.kv_bytes_per_token, "bytes"),
                "bytes_per_weight": (s.wbytes, "bytes", f"precision {cfg.precision}"),
            },
            per_gpu
            + [
                "every weight of the GPU's shard is read from HBM once per decode step",
                "MoE: only the experts the batch routes to are read",
            ],
        ),
        "step_ms": derive(
            d.step_ms,
            "ms",
            "max(math, HBM) per kernel + all-reduces + launch/step overheads (cost model)",
            {
                "memory_ms": (
                    st.memory_s * 1e3,
                    "ms",
                    f"bytes / ({g.hbm_bandwidth_tb_s} TB/s x hbm efficiency {cfg.efficiency.hbm})",
                ),
                "compute_ms": (st.compute_s * 1e3, "ms"),
                "comm_ms": (st.comm_s * 1e3, "ms"),
                "overhead_ms": (st.overhead_s * 1e3, "ms"),
            },
            per_gpu + ["efficiency factors calibrated against published measurements (docs/calibration.md)"],
        ),
        "effective_tb_s": derive(
            d.effective_tb_s,
            "TB/s",
            "bytes per step / step time",
            {
                "bytes_per_step": (d.bytes_per_step, "bytes"),
                "step_ms": (d.step_ms, "ms"),
                "peak_tb_s": (g.hbm_bandwidth_tb_s, "TB/s", g.source("hbm_bandwidth_tb_s")),
            },
            ["the average over the whole step: launches, all-reduces and sampling leave HBM idle part of the time"],
        ),
    }
