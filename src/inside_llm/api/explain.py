"""Explain my launch command: GET /api/explain?cmd=...&gpu=... -> where each GiB goes and what the engine prints.

A thin wrapper over `sim.cost.launch.explain` (the parser, the engines' memory rules and the golden logs live there).
A command the parser cannot read is a 422 on field `cmd` whose message names the word and its character.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from ..sim.cost import launch
from ..sim.hardware import catalog
from .common import GpuId

router = APIRouter(tags=["11 · dials"])
ModelOrAuto = Literal[("auto", *catalog.models())]  # type: ignore[valid-type]


class ExplainParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cmd: str = Field(
        min_length=1,
        max_length=launch.MAX_COMMAND_CHARS,
        description="The launch command: `vllm serve <model> ...`, `llama-server ...` or "
        f"`python -m sglang.launch_server ...` (1-{launch.MAX_COMMAND_CHARS:,} characters; backslash "
        "line continuations allowed).",
    )
    gpu: GpuId = Field(catalog.DEFAULT_GPU, description="Catalog GPU id: the GPU the command runs on.")
    model: ModelOrAuto = Field(
        "auto",
        description="Catalog model id the command runs, or `auto` (no unit): read it from the command's model name.",
    )


class SegmentOut(BaseModel):
    key: Literal["weights", "activations", "runtime", "kv", "reserved", "free"]
    label: str
    gib: float = Field(description="GiB per GPU (2^30 bytes, as the engines print them).")
    note: str


class SuggestionOut(BaseModel):
    goal: str
    change: str = Field(description="The flags to add or change.")
    effect: str


class ExplainResponse(BaseModel):
    engine: Literal["vllm", "llama.cpp", "sglang"]
    command: str = Field(description="The command as read, one word after another.")
    model: str | None = Field(description="The catalog model it runs (null: not recognised, memory not drawn).")
    model_name: str
    gpu: str
    gpu_name: str
    gpus: int = Field(description="GPUs one copy of the server uses (tp x pp).")
    settings: dict[str, Any] = Field(description="Every setting that decides memory, as the engine will use it.")
    from_command: list[str] = Field(description="The settings the command set; the rest are the engine's defaults.")
    ignored: list[str] = Field(description="Flags read but not modelled (they do not change memory here).")
    capacity_gib: float = Field(description="CUDA-visible memory per GPU (GiB).")
    capacity_note: str
    memory: list[SegmentOut] = Field(description="One GPU's memory, part by part; adds up to capacity_gib.")
    fits: bool = Field(description="Whether the engine starts with this command on this GPU.")
    verdict: str
    log_lines: list[str] = Field(description="The start-up lines the engine will print, predicted.")
    facts: dict[str, Any] = Field(description="The predicted figures by name (kv_tokens, max_concurrency, ...).")
    suggestions: list[SuggestionOut] = Field(description="Flags to change for a goal, each with its effect.")
    assumptions: list[str]


@router.get("/api/explain", response_model=ExplainResponse)
def get_explain(p: Annotated[ExplainParams, Query()]) -> ExplainResponse:
    """Paste a launch command: one GPU's memory (weights, activation peak, KV pool, headroom), the start-up
    lines vLLM / llama.cpp / SGLang will print, and the flags to change for a goal."""
    return ExplainResponse(**launch.explain(p.cmd, p.gpu, None if p.model == "auto" else p.model).to_dict())
