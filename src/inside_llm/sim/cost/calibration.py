"""Calibration against published measurements: in-sample error, and a leave-one-source-out refit.

In-sample: the shipped factors (costmodel.Efficiency + the engine profiles) predict every reference in
data/references.toml; the error is predicted / measured - 1.

Leave-one-source-out: for each source (the key before the first comma of a reference's `source`,
e.g. TRTLLM-0.9 or OCI-MI300X), the free factors below are refitted on the in-scope rows of all the
OTHER sources, and that source's rows are predicted with the refit. A source is one publisher's table
or post, so its rows share an engine build, a machine and a method: holding all of them out at once
is the figure a reader can expect on a source the model has never seen.

The refit is coordinate descent on the factors' logarithms minimising the mean |log(predicted /
measured)| over the training rows, started from the shipped values, steps shrinking each pass
(deterministic; no randomness). A profile whose rows are all held out keeps its shipped values only
through the base factors it scales: its own factors cannot be refitted without rows, so they reset to
the base (scale 1, no replacement), the honest out-of-sample case for an engine never measured.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache

from ..hardware import catalog
from . import engines, serving
from .costmodel import DEFAULT_EFFICIENCY, Efficiency, EngineConfig

# (profile id or "base", field): the factors a refit may move. Base: the fitted efficiencies and fixed
# costs of costmodel.Efficiency. Profiles: their scales and fixed costs (sim/cost/engines.py).
FREE: tuple[tuple[str, str], ...] = (
    ("base", "gemm_compute_bf16"),
    ("base", "gemm_compute_fp8"),
    ("base", "gemm_compute_fp4"),
    ("base", "moe_expert_compute"),
    ("base", "fine_moe_stream"),
    ("base", "fine_moe_compute"),
    ("base", "hbm"),
    ("base", "weight_only_4bit_stream"),
    ("base", "per_layer_overhead_s"),
    ("base", "step_overhead_s"),
    ("base", "prefill_pass_overhead_s"),
    ("base", "allreduce_latency_s"),
    ("vllm-cuda", "step_overhead_s"),
    ("vllm-rocm", "compute_scale"),
    ("vllm-rocm", "hbm_scale"),
    ("vllm-rocm", "step_overhead_s"),
    ("vllm-cuda", "moe_layer_overhead_s"),
    ("vllm-cuda", "moe_token_layer_s"),
    ("vllm-rocm", "moe_layer_overhead_s"),
    ("vllm-rocm", "moe_token_layer_s"),
    ("sglang-cuda", "compute_scale"),
    ("sglang-cuda", "moe_layer_overhead_s"),
    ("sglang-cuda", "moe_token_layer_s"),
    ("sglang-rocm", "compute_scale"),
    ("sglang-rocm", "hbm_scale"),
    ("sglang-rocm", "moe_layer_overhead_s"),
    ("sglang-rocm", "moe_token_layer_s"),
)
STEPS = (1.5, 1.2, 1.07)  # multiplicative steps, coarse to fine
HELD_OUT_STEPS = (1.25, 1.08)  # the leave-one-source-out refits start from the shipped values
PASSES = 4  # passes over the factors per step size (fewer when none improves)
MAX_SCALE = 1.25  # the most a profile may scale an efficiency up
FRACTIONS = ("gemm", "hbm", "moe", "weight_only", "fine")  # base factors that are shares of a peak


def is_fine_grained(ref: catalog.Reference) -> bool:
    """A fine-grained MoE model (routed experts narrower than Efficiency.fine_moe_width)."""
    m = catalog.model(ref.model)
    return m.is_moe and m.expert_width < DEFAULT_EFFICIENCY.fine_moe_width


def source_key(ref: catalog.Reference) -> str:
    """The publisher's table or post a reference comes from: its source text up to the first comma."""
    return ref.source.split(",")[0].split(":")[0].strip()


@dataclass(frozen=True)
class _Prepared:
    ref: catalog.Reference
    params: serving.ServingParams
    profile: str
    cfg: EngineConfig
    replicas: int


@cache
def _prepared() -> tuple[_Prepared, ...]:
    out = []
    for r in catalog.references():
        p = serving.reference_params(r)
        cfg, replicas = serving.resolve(p)
        out.append(_Prepared(r, p, cfg.efficiency.profile, cfg, replicas))
    return tuple(out)


def shipped() -> dict[tuple[str, str], float]:
    """The free factors' shipped values (base efficiency and profiles)."""
    out = {}
    for owner, name in FREE:
        if owner == "base":
            out[(owner, name)] = getattr(DEFAULT_EFFICIENCY, name)
        else:
            v = getattr(engines.profiles()[owner], name)
            out[(owner, name)] = v if v is not None else _unset(owner, name)
    return out


def _unset(owner: str, name: str) -> float:
    """A profile factor left at the base: scale 1, or the base's fixed cost."""
    return 1.0 if name.endswith("_scale") else getattr(DEFAULT_EFFICIENCY, name)


def efficiencies(values: Mapping[tuple[str, str], float]) -> dict[str, Efficiency]:
    """The Efficiency of every profile for a set of free-factor values."""
    base = replace(DEFAULT_EFFICIENCY, **{n: v for (o, n), v in values.items() if o == "base"})
    out = {}
    for pid, prof in engines.profiles().items():
        mine = {n: v for (o, n), v in values.items() if o == pid}
        out[pid] = replace(prof, **mine).efficiency(base) if mine else prof.efficiency(base)
    return out


def _value(pr: _Prepared, eff: Efficiency) -> float:
    cfg = replace(pr.cfg, efficiency=eff)
    cfg.__dict__["shard"] = pr.cfg.shard  # the shard's sizes do not depend on the efficiency factors
    return serving.metric_value(pr.params, pr.ref.metric, cfg=cfg, replicas=pr.replicas)


def _loss(rows: Sequence[_Prepared], effs: Mapping[str, Efficiency]) -> float:
    return statistics.fmean(abs(math.log(_value(pr, effs[pr.profile]) / pr.ref.measured)) for pr in rows)


def refit(
    rows: Sequence[_Prepared],
    start: Mapping[tuple[str, str], float],
    only: Iterable[tuple[str, str]] | None = None,
    steps: Sequence[float] = STEPS,
) -> dict[tuple[str, str], float]:
    """Coordinate descent from `start` on the free factors that the rows can see (see module docstring);
    `only` restricts it to some of them."""
    values = dict(start)
    seen = {pr.profile for pr in rows}
    free = [k for k in (FREE if only is None else only) if k[0] == "base" or k[0] in seen]
    if not any(is_fine_grained(pr.ref) for pr in rows):  # no fine-grained MoE row to fit the term on
        values.update({("base", "fine_moe_stream"): 1.0, ("base", "fine_moe_compute"): 1.0})
        free = [k for k in free if not k[1].startswith("fine_moe")]
    for k in FREE if only is None else ():  # a profile with no training rows falls back to the base
        if k[0] != "base" and k[0] not in seen:
            values[k] = _unset(*k)
    best = _loss(rows, efficiencies(values))
    for step in steps:
        for _ in range(PASSES):
            improved = False
            for k in free:
                for f in (step, 1 / step):
                    trial = {**values, k: values[k] * f}
                    if k[1].startswith(FRACTIONS) and k[0] == "base" and trial[k] > 1.0:
                        continue  # an efficiency stays a fraction of peak
                    if k[1].endswith("_scale") and trial[k] > MAX_SCALE:
                        continue  # a profile's kernels stay within reach of the base fit's
                    loss = _loss(rows, efficiencies(trial))
                    if loss < best - 1e-9:
                        best, values, improved = loss, trial, True
                        break
            if not improved:
                break
    return values


@dataclass(frozen=True)
class Row:
    ref: catalog.Reference
    source: str
    predicted: float  # shipped factors
    error: float
    held_out_predicted: float  # factors refitted without this row's source
    held_out_error: float


@cache
def table() -> tuple[Row, ...]:
    """Every reference with its in-sample and leave-one-source-out predictions."""
    prepared = _prepared()
    start = shipped()
    shipped_effs = efficiencies(start)
    scoped = [pr for pr in prepared if pr.ref.in_scope]
    held: dict[str, dict[str, Efficiency]] = {}
    for src in sorted({source_key(pr.ref) for pr in prepared}):
        train = [pr for pr in scoped if source_key(pr.ref) != src]
        held[src] = efficiencies(refit(train, start, steps=HELD_OUT_STEPS))
    rows = []
    for pr in prepared:
        src = source_key(pr.ref)
        p = _value(pr, shipped_effs[pr.profile])
        h = _value(pr, held[src][pr.profile])
        rows.append(Row(pr.ref, src, p, p / pr.ref.measured - 1, h, h / pr.ref.measured - 1))
    return tuple(rows)


def medians(rows: Iterable[Row] | None = None) -> tuple[float, float]:
    """(in-sample, leave-one-source-out) median |error| over the in-scope rows."""
    scoped = [r for r in (table() if rows is None else rows) if r.ref.in_scope]
    return statistics.median(abs(r.error) for r in scoped), statistics.median(abs(r.held_out_error) for r in scoped)
