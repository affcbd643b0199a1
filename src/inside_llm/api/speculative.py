"""Chapter 9, speculative: GET /api/speculative -> Leviathan et al.'s speed-up for alpha, gamma, c, and a real run.

The analytic half is sim.decoding.speculative.analytic. The demo half runs the demo transformers on this
server: the draft proposes gamma tokens, the target checks them in one pass; the tokens, the frames
and the greedy check are pure functions of the URL (cached, ETag-able). Wall-clock figures vary run
to run, so they live at GET /api/speculative/measured (measured once per process per prompt, gamma
and max_tokens).
Cost per new prompt: the demo is replayed from one greedy answer per (prompt, max_tokens) whatever gamma
(sim/decoding/speculative_demo.answer: its prefill, one pass per token, one check pass; the real model writes at most
16 tokens), so changing gamma, alpha or c costs no model pass.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

import anyio
from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationInfo, field_validator

from .. import modelfile
from ..model_work import WORK, Kept
from ..sim.core.result import about
from ..sim.decoding import speculative as sp
from ..sim.decoding import speculative_demo as demo
from ..sim.model.transformer import DemoModel
from .common import BUSY, Math
from .measured import Measured, MeasuredHeader, cpu_info

router = APIRouter(tags=["9 · speculative"])

MAX_ALPHA = 0.99
MAX_GAMMA = 10
MAX_PROMPT_CHARS = 4000
DEFAULT_MAX_TOKENS = 24


@lru_cache(maxsize=4)
def _real_setup(model: DemoModel) -> demo.Setup:
    return demo.real_setup(model)


@lru_cache(maxsize=1)
def _toy_setup() -> demo.Setup:
    return demo.toy_setup()


def setup_for(model: str) -> demo.Setup:
    """smollm2 (the real chat model, drafted by prompt lookup), toy (the demo transformers), or auto (smollm2
    once its file is fetched, else toy). ValueError (a 422 on `model`) if smollm2 is asked for and not installed."""
    if model in ("auto", "smollm2"):
        real = modelfile.served_smollm()
        if real is not None:
            return _real_setup(real)
        if model == "smollm2":
            raise ValueError(
                f"model smollm2 is not installed on this server ({modelfile.HOW_TO_FETCH}); model=toy works without it"
            )
    return _toy_setup()


class DemoParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)  # hashable: responses are cached per params
    model: Literal["auto", "smollm2", "toy"] = Field(
        "auto",
        description="Target: smollm2 (the real chat model, "
        "drafted by prompt lookup), toy (the demo transformers, the "
        "small one drafting), or auto: smollm2 when installed, else toy.",
    )
    gamma: int = Field(4, ge=1, le=MAX_GAMMA, description=f"Draft tokens proposed per check (tokens; 1-{MAX_GAMMA}).")
    prompt: str = Field(
        "",
        max_length=MAX_PROMPT_CHARS,
        description=f"Text for the target (at most {MAX_PROMPT_CHARS:,} characters and "
        f"{demo.MAX_PROMPT_TOKENS} tokens); empty: the model's example where the draft is usually right.",
    )
    max_tokens: int = Field(
        DEFAULT_MAX_TOKENS,
        ge=1,
        le=demo.MAX_NEW_TOKENS,
        description=f"New tokens the demo writes (tokens; 1-{demo.MAX_NEW_TOKENS}); the real model writes at most "
        f"{demo.REAL_MAX_NEW_TOKENS} of them (each costs one of its decode steps on this CPU; demo.num_tokens says).",
    )

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        setup_for(v)  # ValueError naming `model` when smollm2 is asked for and not installed
        return v

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, v: str, info: ValidationInfo) -> str:
        if "model" in info.data:  # else `model` already failed
            setup = setup_for(info.data["model"])
            demo.encode_prompt(v if v.strip() else setup.examples[0], setup)  # ValueError names `prompt`
        return v

    def text(self) -> str:
        """The prompt the target reads: the visitor's, or the model's usually-right example."""
        return self.prompt if self.prompt.strip() else setup_for(self.model).examples[0]

    def demo_key(self) -> DemoParams:
        return DemoParams(model=self.model, prompt=self.prompt, gamma=self.gamma, max_tokens=self.max_tokens)


class SpeculativeParams(DemoParams):
    alpha: float = Field(
        0.8,
        ge=0.0,
        le=MAX_ALPHA,
        description=f"Acceptance rate: chance the target keeps a draft token (probability; 0-{MAX_ALPHA}).",
    )
    cost_ratio: float = Field(
        0.1,
        gt=0.0,
        le=1.0,
        description="Draft pass time / target pass time (ratio; "
        "over 0, at most 1). 0.1: a draft a tenth the target's size.",
    )


class Tok(BaseModel):
    id: int = Field(description="demo model token id")
    text: str


class DemoFrame(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    pass_: int = Field(alias="pass", description="target pass number (1 = the prompt's prefill)")
    kind: Literal["prefill", "replacement", "bonus", "plain"]
    start: int = Field(description="output tokens written before this pass")
    proposed: list[Tok]
    num_accepted: int
    num_drafted: int = Field(
        description="draft passes this step: a model draft's guesses after its first miss are drafted but never "
        "judged, so they are counted here and not listed in proposed"
    )
    accepted: list[Tok] = Field(description="the kept prefix of proposed")
    rejected: Tok | None = Field(description="the first draft the target disagreed with")
    replacement: Tok | None = Field(description="the target's own token in place of the rejected draft")
    bonus: Tok | None = Field(description="when every draft is kept, the target's next token, free")
    target_token: Tok = Field(
        description="the target's own token ending the pass (replacement, bonus, or prefill/plain: its next token)"
    )
    emitted: list[Tok] = Field(description="tokens this pass adds to the output: accepted + replacement or bonus")


class DemoOut(BaseModel):
    target_model: dict[str, Any]
    draft_model: dict[str, Any]
    same_model: bool = Field(description="true while the main demo model is not installed: draft checks itself")
    prompt_tokens: list[Tok]
    output_text: str
    output_tokens: list[Tok]
    greedy_output_ids: list[int] = Field(description="the target's own greedy output, one pass per token")
    matches_greedy: bool = Field(
        description="one pass of the target over its whole answer: its top token at every position is the one written"
    )
    check: dict[str, Any] = Field(description="the exact-output check: positions, how many agree, in words")
    num_tokens: int
    max_new_tokens: int = Field(description="the most tokens this target writes here (the real model: fewer)")
    num_target_passes: int
    num_draft_passes: int
    num_proposed: int = Field(description="draft tokens drafted (judged or not)")
    num_accepted: int
    num_rejected: int
    acceptance_rate: float = Field(description="accepted / drafted tokens")
    alpha_estimate: float = Field(description="accepted / (accepted + first rejections): Leviathan's alpha")
    tokens_per_target_pass: float
    weights_cost_ratio: float = Field(description="draft / target parameters: c on a memory-bound GPU")
    predicted_speedup_memory_bound: float = Field(
        description="Theorem 3.8 at the measured alpha and weights_cost_ratio"
    )
    draft_choice: dict | None = Field(
        None,
        description="why this draft: prompt lookup against early exits on the "
        "real model's two examples, measured offline (demo/smollm2_drafts.json)",
    )
    gpu_time: dict = Field(
        description="this run's GPU time in big-model passes (plain vs speculative, per pass), "
        "a pass costing its weight reads; speedup = plain / speculative"
    )
    frames: list[DemoFrame]
    drafts: list[dict[str, Any]] = Field(
        description="the same prompt and gamma drafted three ways: this run's draft first, then the target "
        "drafting for itself with its first fifth and first four fifths of its layers (early exit, read through "
        "its own head); each with its steps (drafted, kept, missed, tokens), acceptance, alpha, c, GPU time in "
        "big-model passes and speedup = num_tokens / GPU time"
    )
    measured_speedup: float | None = Field(
        description=(
            "greedy wall time / speculative wall time of the demo models on this server's CPU (x; the one wall-clock "
            "figure here: measured once per server process for these settings, so it can differ between servers)"
        )
    )
    measured_url: str = Field(
        description="the full measurement on this CPU (cost ratio, verification cost, "
        "predicted_speedup at the measured alpha and c, rounds)"
    )
    math: Math


@dataclass(frozen=True)
class SpeculativeResponse(sp.Analytic):
    """The analytic numbers (sim.decoding.speculative.Analytic), a real draft-and-verify run, and two example prompts."""

    demo: DemoOut = about("A real draft-and-verify run of the demo models on the prompt.")
    example_prompts: dict[str, str] = about(
        "usually_right: the default, a run the draft mostly guesses; often_wrong: one where it mostly misses"
    )


RESPONSE = TypeAdapter(SpeculativeResponse)


def measured_url(p: DemoParams) -> str:
    q = {"gamma": p.gamma, "prompt": p.prompt, "max_tokens": p.max_tokens} | (
        {"model": p.model} if p.model != "auto" else {}
    )
    return "/api/speculative/measured?" + urlencode(q)


DEMOS = Kept(64)  # demo runs by (target and draft, prompt, gamma, max_tokens)


def _demo_job(setup: demo.Setup, prompt: str, gamma: int, max_tokens: int) -> tuple[tuple, Callable[[], dict]]:
    """(key, job) of one demo run: seconds of the real model, so a model job (model_work.WORK), kept."""
    return (__name__, setup, prompt, gamma, max_tokens), lambda: demo.run_demo(prompt, gamma, max_tokens, setup)


def _demo(setup: demo.Setup, prompt: str, gamma: int, max_tokens: int) -> dict:
    """One run per (target and draft, prompt, gamma, max_tokens); this thread waits for it."""
    return WORK.call(*_demo_job(setup, prompt, gamma, max_tokens), DEMOS)


def demo_view(p: DemoParams, setup: demo.Setup) -> dict:
    return {**_demo(setup, p.text(), p.gamma, p.max_tokens), "measured_url": measured_url(p), "measured_speedup": None}


@lru_cache(maxsize=64)
def speculative_response(p: SpeculativeParams, setup: demo.Setup) -> SpeculativeResponse:
    """The response for one parameter set and target, without wall-clock figures (pure)."""
    a = sp.analytic(p.alpha, p.gamma, p.cost_ratio)
    good, bad = setup.examples
    fields = {**vars(a), "demo": demo_view(p, setup), "example_prompts": {"usually_right": good, "often_wrong": bad}}
    return RESPONSE.validate_python(fields)


def speculative_json(p: SpeculativeParams) -> bytes:
    """The body: the pure response, with demo.measured_speedup filled once /measured has measured these
    settings in this process (null before: this endpoint never waits for a wall-clock measurement)."""
    setup = setup_for(p.model)
    resp = speculative_response(p, setup)
    done = _measured_done.get((setup.name, p.demo_key()))
    if done is not None:
        resp = replace(resp, demo=resp.demo.model_copy(update={"measured_speedup": done}))
    return RESPONSE.dump_json(resp, by_alias=True)


@router.get("/api/speculative", response_model=SpeculativeResponse, responses=BUSY)
async def get_speculative(request: Request, p: Annotated[SpeculativeParams, Query()]) -> Response:
    """Tokens per target pass and speed-up for alpha, gamma, c (with the curve over gamma), and a real
    draft-and-verify run of the demo models whose output equals the target's greedy output."""
    setup = await anyio.to_thread.run_sync(setup_for, p.model)
    await WORK.run(*_demo_job(setup, p.text(), p.gamma, p.max_tokens), DEMOS, request.receive)  # awaited here
    return Response(content=await anyio.to_thread.run_sync(speculative_json, p), media_type="application/json")


def facts(p: SpeculativeParams | None = None) -> dict[str, str]:
    """The chosen settings' analytic numbers (the default: a draft a tenth the cost, accepted 80% of the time)."""
    p = p or SpeculativeParams()
    a = sp.analytic(p.alpha, p.gamma, p.cost_ratio)
    return {
        "alpha": f"{p.alpha:.0%}",
        "gamma": str(p.gamma),
        "cost_ratio": f"{p.cost_ratio:.0%}",
        "tokens_per_pass": f"{a.expected_tokens_per_pass:.1f}",
        "speedup": f"{a.speedup:.1f}",
    }


# ---- wall clock on this CPU: measured once per process per (prompt, gamma, max_tokens) ----------


class MeasuredResponse(MeasuredHeader):
    gamma: int
    max_tokens: int
    num_tokens: int | None = Field(
        None, description=f"tokens each run wrote (the real model: at most {demo.REAL_MAX_NEW_TOKENS})"
    )
    target_model: str | None = None
    draft_model: str | None = None
    rounds: int = 0
    matches_greedy: bool | None = None
    acceptance_rate: float | None = None
    alpha_estimate: float | None = None
    greedy_wall_s: float | None = None
    speculative_wall_s: float | None = None
    decode_step_s: float | None = Field(None, description="one target decode step (s; median, fastest round)")
    measured_cost_ratio: float | None = Field(None, description="one draft pass / one target decode step (medians)")
    verify_cost_steps: float | None = Field(None, description="one (gamma+1)-token target pass / one decode step")
    measured_speedup: float | None = None
    predicted_speedup: float | None = Field(None, description="Theorem 3.8 at the measured alpha and cost ratio")
    predicted_speedup_with_verify_cost: float | None = None
    math: Math = {}
    note: str = (
        "Wall-clock time on this server's CPU, measured once when this server process first answered this "
        "URL: the target alone (one pass per token) against draft-then-verify, both decoding from one prefill "
        "of the prompt; every figure is the fastest of the rounds (one for the real model). On a CPU a (gamma+1)-token verification costs more than one decode step (the extra "
        "tokens cost extra arithmetic), so the measured speed-up can fall below the prediction; on a "
        "memory-bound GPU it costs about one."
    )


def _measure(setup: demo.Setup, p: DemoParams) -> dict:
    m = demo.measure_demo(p.text(), p.gamma, p.max_tokens, setup.measure_rounds, setup)
    return MeasuredResponse(
        available=True,
        target_model=setup.target.name,
        draft_model=setup.draft_info["name"],
        cpu=cpu_info(),
        gamma=p.gamma,
        max_tokens=p.max_tokens,
        **m,
    ).model_dump()


def _unavailable(reason: str, setup: demo.Setup, p: DemoParams) -> dict:
    return MeasuredResponse(
        available=False, reason=reason, cpu=cpu_info(), gamma=p.gamma, max_tokens=p.max_tokens
    ).model_dump()


MEASURED = Measured(_measure, keys=16, on_failure=_unavailable)


_measured_done: dict[tuple[str, DemoParams], float | None] = {}
_done_lock = threading.Lock()


def _note_measured(setup: demo.Setup, p: DemoParams, body: bytes) -> bytes:
    """Remember the measured speed-up, so GET /api/speculative shows it from now on."""
    with _done_lock:
        _measured_done[(setup.name, p.demo_key())] = json.loads(body).get("measured_speedup")
        while len(_measured_done) > 64:  # bounded like the measurement's cache
            _measured_done.pop(next(iter(_measured_done)))
    return body


def measured_json(p: DemoParams) -> bytes:
    """The measurement for this target and draft and these settings (made once per process; this thread
    waits for the model job)."""
    setup = setup_for(p.model)
    return _note_measured(setup, p, MEASURED.json(setup, p.demo_key()))


@router.get("/api/speculative/measured", response_model=MeasuredResponse, responses=BUSY)
async def get_measured(request: Request, p: Annotated[DemoParams, Query()]) -> Response:
    """Greedy vs speculative wall time of the target and its draft on this server's CPU, beside the prediction."""
    setup = await anyio.to_thread.run_sync(setup_for, p.model)
    body = await MEASURED.json_async(request, setup, p.demo_key())
    return Response(content=_note_measured(setup, p, body), media_type="application/json")
