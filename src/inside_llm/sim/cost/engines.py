"""Engine profiles: which serving engine on which vendor's software stack priced a figure.

Every efficiency in `costmodel.Efficiency` was first fitted on NVIDIA engines (TensorRT-LLM above all).
The same GPU runs slower under another engine or another vendor's stack (kernels, all-reduce library,
scheduler), so each profile in data/engines.toml scales or replaces a few factors:

    compute_scale   x every GEMM and attention efficiency (gemm_compute_*, attention_compute)
    hbm_scale       x the HBM streaming efficiency
    step_overhead_s, per_layer_overhead_s, allreduce_latency_s, allreduce_latency_by_tp,
    moe_layer_overhead_s, moe_token_layer_s
                    replace the base value (fixed costs per step, per layer, per all-reduce, and the
                    MoE routing/dispatch cost per MoE layer and per routed token)

each with the references it was fitted on. `profile(engine, gpu)` picks one: "auto" is the best
published engine for that GPU's vendor (the profile with `default = true`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from types import MappingProxyType
from typing import Any

from ..core.errors import SimError
from ..hardware.catalog import DATA_DIR
from ..hardware.hardware import GPU
from .costmodel import DEFAULT_EFFICIENCY, Efficiency

ENGINES = ("auto", "tensorrt-llm", "vllm", "sglang")
ENGINE_NAMES = {"tensorrt-llm": "TensorRT-LLM", "vllm": "vLLM", "sglang": "SGLang"}
_SCALED = ("gemm_compute_bf16", "gemm_compute_fp8", "gemm_compute_int8", "gemm_compute_fp4", "attention_compute")
_REPLACED = (
    "step_overhead_s",
    "per_layer_overhead_s",
    "allreduce_latency_s",
    "prefill_pass_overhead_s",
    "moe_layer_overhead_s",
    "moe_token_layer_s",
)


@dataclass(frozen=True)
class EngineProfile:
    """One engine on one vendor's stack, and how its factors differ from the base (TensorRT-LLM) fit."""

    id: str
    engine: str  # "tensorrt-llm" | "vllm" | "sglang"
    vendor: str  # "NVIDIA" | "AMD"
    name: str
    stack: str  # "CUDA" | "ROCm"
    versions: str
    default: bool = False  # the best published engine for this vendor
    compute_scale: float = 1.0
    hbm_scale: float = 1.0
    step_overhead_s: float | None = None
    per_layer_overhead_s: float | None = None
    allreduce_latency_s: float | None = None
    prefill_pass_overhead_s: float | None = None
    moe_layer_overhead_s: float | None = None
    moe_token_layer_s: float | None = None
    allreduce_latency_by_tp: Mapping[str, float] = field(default_factory=dict)
    note: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)

    def efficiency(self, base: Efficiency = DEFAULT_EFFICIENCY) -> Efficiency:
        """The base factors with this profile's scales and replacements applied."""
        changes: dict[str, Any] = {k: getattr(base, k) * self.compute_scale for k in _SCALED}
        changes["hbm"] = base.hbm * self.hbm_scale
        for k in _REPLACED:
            if getattr(self, k) is not None:
                changes[k] = getattr(self, k)
        if self.allreduce_latency_by_tp:
            changes["allreduce_latency_by_tp"] = tuple(
                sorted((int(k), v) for k, v in self.allreduce_latency_by_tp.items())
            )
        return replace(base, **changes, profile=self.id)

    def label(self) -> str:
        """'vLLM on ROCm (AMD)' - how the dials and chapters name the profile."""
        return f"{self.name} on {self.stack} ({self.vendor})"

    def factor_lines(self, base: Efficiency = DEFAULT_EFFICIENCY) -> list[str]:
        """The factors this profile changes, in words (their source: `sources['fit']`)."""
        eff, out = self.efficiency(base), []
        if self.compute_scale != 1.0:
            out.append(
                f"GEMM and attention efficiency x {self.compute_scale:g} (GEMMs "
                f"{eff.gemm_compute_bf16:.0%} of BF16 peak, {eff.gemm_compute_fp8:.0%} of FP8)"
            )
        if self.hbm_scale != 1.0:
            out.append(f"HBM efficiency x {self.hbm_scale:g} ({eff.hbm:.0%} of peak)")
        for k in _REPLACED:
            if getattr(self, k) is not None:
                out.append(f"{k} = {getattr(self, k) * 1e6:g} us")
        for tp, s in sorted((int(k), v) for k, v in self.allreduce_latency_by_tp.items()):
            out.append(f"all-reduce latency at TP{tp} = {s * 1e6:g} us")
        if not out:
            out.append("the base factors (fitted on this engine's rows)")
        return out


@cache
def profiles() -> Mapping[str, EngineProfile]:
    """All profiles by id (data/engines.toml)."""
    with (DATA_DIR / "engines.toml").open("rb") as fh:
        rows = tomllib.load(fh)
    return MappingProxyType(
        {
            pid: EngineProfile(
                id=pid,
                **{
                    **row,
                    "sources": MappingProxyType(dict(row.get("sources", {}))),
                    "allreduce_latency_by_tp": MappingProxyType(dict(row.get("allreduce_latency_by_tp", {}))),
                },
            )
            for pid, row in rows.items()
        }
    )


def _vendor(gpu: GPU) -> str:
    return "AMD" if gpu.vendor == "AMD" else "NVIDIA"


def profile(engine: str, gpu: GPU) -> EngineProfile:
    """The profile for an engine on this GPU's vendor stack; SimError names `engine` when there is none."""
    if engine not in ENGINES:
        raise SimError("engine", f"engine must be one of {', '.join(ENGINES)}, not {engine!r}.")
    vendor = _vendor(gpu)
    mine = [p for p in profiles().values() if p.vendor == vendor]
    if engine == "auto":
        return next(p for p in mine if p.default)
    for p in mine:
        if p.engine == engine:
            return p
    have = ", ".join(ENGINE_NAMES[p.engine] for p in mine)
    raise SimError(
        "engine",
        f"No published measurements of {ENGINE_NAMES[engine]} on {vendor} GPUs price this figure; "
        f"for {gpu.name} choose {have} (or auto).",
    )


def engine_of(engine_text: str) -> str:
    """A reference's engine family from its `engine` text ('vLLM 0.9.1 (ROCm ...)' -> 'vllm')."""
    t = engine_text.lower()
    if t.startswith("vllm"):
        return "vllm"
    if t.startswith("sglang"):
        return "sglang"
    return "auto"  # TensorRT-LLM, NIM, torchao: the base fit
