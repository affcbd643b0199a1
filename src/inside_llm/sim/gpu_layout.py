"""Chapter 4: what is on a GPU package, and how fast one decode step streams the weights through it.

`layout(gpu)` gives the drawing's facts, all from the catalog (each with its source): dies, the grid
of SMs grouped by GPC (or by die/XCD where GPCs are not published), tensor cores per SM, the L2,
and the HBM stacks around the die with their share of capacity and bandwidth.

`decode_stream(cfg, batch, context)` gives, per GPU, the bytes one decode step reads (weights and
KV cache) and the time the cost model gives for it, so the scene can animate weights travelling
HBM -> L2 -> SMs at a stated slow-motion factor.
"""

from __future__ import annotations

from typing import Any

from .costmodel import EngineConfig, step_time
from .hardware import GPU

LAYOUT_FIELDS = ("sm_count", "gpc_count", "tensor_cores_per_sm", "l2_cache_mb", "hbm_stacks",
                 "hbm_capacity_gb", "hbm_bandwidth_tb_s", "memory_type", "die_count")


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
        "sm_label": "CU" if gpu.vendor == "AMD" else "SM",
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
        "grouping_note": ("per-GPC SM counts are not published for shipping parts; SMs are spread evenly"
                          if gpu.gpc_count else f"SMs drawn per {group_kind}"),
        "sources": {f: gpu.source(f) for f in LAYOUT_FIELDS if gpu.source(f)},
    }


def decode_stream(cfg: EngineConfig, batch: int = 1, context_tokens: int = 1024) -> dict[str, Any]:
    """Bytes one decode step reads on one GPU and how long it takes (cost model, efficiencies included)."""
    if batch < 1 or context_tokens < 1:
        raise ValueError("batch and context_tokens must be >= 1")
    st = step_time(cfg, num_decode_seqs=batch, decode_context_tokens_total=batch * context_tokens)
    nbytes = st.hbm_bytes / cfg.tp
    kv = cfg.shard.kv_bytes_per_token * batch * context_tokens
    return {
        "bytes_per_step": nbytes,
        "weight_bytes_per_step": nbytes - kv,
        "kv_bytes_per_step": kv,
        "step_ms": st.seconds * 1e3,
        "memory_ms": st.memory_s * 1e3,
        "effective_tb_s": nbytes / st.seconds / 1e12,
        "peak_tb_s": cfg.gpu.hbm_bandwidth_tb_s,
        "tokens_per_s": batch / st.seconds,
        "bound": st.bound,
    }
