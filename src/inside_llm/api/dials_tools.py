"""Chapter 11 inverted and swept: GET /api/dials/sweep and GET /api/dials/solve (the dials' own fields, plus the ask).

Thin wrappers over `sim.cost.solve`: a sweep is the dials' estimate at each value of one input (batch, prompt length,
GPUs, precision) with the first value that does not fit (the memory knee); a solve answers "largest batch within
the limits", "longest context at this batch" or "fewest GPUs for N users" and names the binding constraint.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import BaseModel, Field

from ..sim.cost import serving, solve, table
from .dials import DialsParams, serving_params

router = APIRouter(tags=["11 · dials"])
FIGURES = ("ttft_ms", "tpot_ms", "tokens_per_s_per_user", "tokens_per_s_total", "cost_per_million_tokens_usd")


class SweepParams(DialsParams):
    x: Literal[solve.SWEEP_AXES] = Field(  # type: ignore[valid-type]
        "batch",
        description="The input swept (no unit): batch (1-4,096 sequences), prompt_tokens (128 tokens to the "
        "window), gpus (1-16 replicas of tp x pp), precision (bf16, fp8, int8, int4, nvfp4).",
    )


class SweepPoint(BaseModel):
    x: int | str
    fits: bool
    spare_gb: float = Field(description="Spare memory per GPU (GB; negative when it does not fit).")
    ttft_ms: float | None
    tpot_ms: float | None
    tokens_per_s_per_user: float | None
    tokens_per_s_total: float | None
    cost_per_million_tokens_usd: float | None


class SweepResponse(BaseModel):
    x: str
    current: int | str = Field(description="The dials' own value of x (the marked point).")
    points: list[SweepPoint]
    knee: int | str | None = Field(description="The first x that does not fit in memory (null: all fit).")


CSV = {200: {"content": {"text/csv": {"schema": {"type": "string"}}}}}


def _csv(rows: list[dict[str, Any]], name: str) -> Response:
    headers = {"content-disposition": f'attachment; filename="{name}.csv"'}
    return Response(table.to_csv(rows), media_type="text/csv", headers=headers)


@router.get("/api/dials/sweep", response_model=SweepResponse, responses=CSV)
def get_sweep(p: Annotated[SweepParams, Query()]) -> Any:
    """The dials' figures at each value of one input, the rest as set; figures are null where it does not fit.
    `format=csv`: one row per point (the columns of /api/dials?format=csv)."""
    sp = serving_params(p)
    if p.format == "csv":
        return _csv([table.estimate_row(q) for _, q in solve.sweep(sp, p.x)], "sweep")
    points = []
    for x, q in solve.sweep(sp, p.x):
        d = serving.estimate(q).to_dict()
        points.append(SweepPoint(x=x, fits=d["fits"], spare_gb=d["memory"]["spare_gb"], **{k: d[k] for k in FIGURES}))
    knee = next((pt.x for pt in points if not pt.fits), None)
    return SweepResponse(x=p.x, current=getattr(sp, p.x), points=points, knee=knee)


class SolveParams(DialsParams):
    ask: Literal[solve.ASKS] = Field(  # type: ignore[valid-type]
        "batch",
        description="What to find (no unit): batch (the largest within the limits), context (the longest prompt "
        "that fits at this batch), gpus (the fewest GPUs for `users`).",
    )
    max_ttft_ms: float = Field(
        0, ge=0, le=3_600_000, description="Time-to-first-token limit (ms; 0-3,600,000; 0 = none)."
    )
    min_tokens_per_s_per_user: float = Field(
        0, ge=0, le=100_000, description="Tokens/s each user must get at least (tokens/s; 0-100,000; 0 = none)."
    )
    users: int = Field(
        100,
        ge=1,
        le=serving.MAX_GPUS * serving.MAX_BATCH,
        description=f"ask=gpus: concurrent users (requests; 1-{serving.MAX_GPUS * serving.MAX_BATCH:,}).",
    )
    within: Literal["any", "dials"] = Field(
        "any",
        description="any: every setup the API takes; dials: only what chapter 11's controls can show (a GPU "
        "count on its menu, a prompt within its slider), so an adopted answer survives in a link.",
    )


@cache
def dials_limits() -> tuple[tuple[int, ...], int]:
    """Chapter 11's GPU menu and its prompt slider's end (scenes/11-dials.toml), for `within=dials`."""
    from ..scenes import scene_by_slug

    controls = {c.name: c for c in scene_by_slug("dials").controls}
    counts = tuple(sorted(int(v) for v, _ in controls["gpus"].options))
    return counts, int(controls["prompt_tokens"].max)


class SolveResponse(BaseModel):
    ask: str
    feasible: bool
    value: int | None
    binding: str = Field(description="The constraint that stops it (or that fails even at the smallest setup).")
    text: str
    adopt: dict[str, Any] | None = Field(description="The dials' fields to set to adopt the answer (null: none).")
    figures: dict[str, Any] | None = Field(description="The adopted setup's figures (as GET /api/dials).")


@router.get("/api/dials/solve", response_model=SolveResponse, responses=CSV)
def get_solve(p: Annotated[SolveParams, Query()]) -> Any:
    """The dials inverted: the answer, the binding constraint in words, and the fields to adopt it.
    `format=csv`: the adopted setup's row (only the header when the ask is infeasible)."""
    sp = serving_params(p)
    ttft = p.max_ttft_ms or None
    tps = p.min_tokens_per_s_per_user or None
    counts, max_prompt = dials_limits() if p.within == "dials" else (None, None)
    if p.ask == "batch":
        s = solve.largest_batch(sp, ttft, tps)
    elif p.ask == "context":
        s = solve.longest_context(sp, max_prompt)
    else:
        s = solve.fewest_gpus(sp, p.users, ttft, tps, counts)
    if p.format == "csv":
        return _csv([table.estimate_row(s.params)] if s.params is not None else [], "solve")
    adopt = figures = None
    if s.params is not None:
        adopt = {k: getattr(s.params, k) for k in ("gpus", "tp", "pp", "batch", "prompt_tokens")}
        d = serving.estimate(s.params).to_dict()
        figures = {k: d[k] for k in FIGURES} | {"spare_gb": d["memory"]["spare_gb"], "fits": d["fits"]}
    return SolveResponse(
        ask=s.ask, feasible=s.feasible, value=s.value, binding=s.binding, text=s.text, adopt=adopt, figures=figures
    )
