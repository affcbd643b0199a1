"""Chapter 2, embeddings: GET /api/embeddings -> the prompt's real embedding rows rising through the demo model.

For each token: its embedding row (the model's table row for its id), the residual stream after every
layer, how much each layer changed it (relative norm of the layer's update) and the logit lens (final
norm + tied head applied to that floor: the top-3 next-token guesses). Beside it, the real scale from
the catalog (Llama 3.1 70B). A pure function of the URL; the CPU timings live at
GET /api/embeddings/measured (measured once per process) so this response stays cacheable by ETag.
Also mounts GET /api/generate (extra_routers), which is not a chapter of its own.
"""

from __future__ import annotations

import json
import threading
from functools import lru_cache
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..sim import catalog
from ..sim.derivation import derive, math_dict
from ..sim.transformer_ops import log_softmax
from .generate import check_prompt, demo_model, generate_router, model_info, piece_text, prompt_tokens, sig

router = APIRouter(tags=["2 · embeddings"])
measured_router = APIRouter(tags=["2 · embeddings"])
extra_routers = [measured_router, generate_router]

MAX_PROMPT_TOKENS = 64  # the stage draws a column per token; longer prompts would not be readable
MAX_PROMPT_CHARS = 1000
DEFAULT_PROMPT = "To be, or not to be, that is the"
SCALE_MODEL = "llama-3.1-70b"
TOP_K = 3
SCALE_QUANTILE = 0.98  # colour scale of a floor: +-this quantile of |value| (a few outliers saturate)


class PromptParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(DEFAULT_PROMPT, max_length=MAX_PROMPT_CHARS, description=(
        f"Text the demo model reads (characters; at most {MAX_PROMPT_CHARS:,}, and at most {MAX_PROMPT_TOKENS} "
        "demo-model tokens; empty gives an empty picture)."))

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, v: str) -> str:
        return check_prompt(v, MAX_PROMPT_TOKENS, min_tokens=0)


class Guess(BaseModel):
    id: int = Field(description="Demo-model id of the guessed next token.")
    text: str | None = Field(description="The piece as text; null for a partial UTF-8 byte.")
    bytes: str | None = Field(None, description="The piece's bytes in hex when text is null.")
    p: float = Field(description="Probability (0-1) after softmax over the whole vocabulary.")


class Floor(BaseModel):
    after_layer: int = Field(description="0 = the embedding rows (before any layer); l = after layer l (1-based).")
    vectors: list[list[float]] = Field(description="[tokens][dim] the residual stream here (4 significant digits).")
    scale: float = Field(description=f"Colour scale: +-{SCALE_QUANTILE:.0%} quantile of |value| on this floor.")
    norm: list[float] = Field(description="[tokens] L2 norm of each vector.")
    change: list[float] | None = Field(description="[tokens] ||out - in|| / ||in||: how much this layer changed each "
                                       "token's vector (null for the embedding floor).")
    lens: list[list[Guess]] = Field(description=f"[tokens][{TOP_K}] logit lens: the likeliest next tokens if the model "
                                    "stopped here (final RMSNorm + tied head).")


class EmbeddingsResponse(BaseModel):
    prompt: str
    model: dict = Field(description="The demo model served (name, dim, n_layers, heads, ...).")
    num_tokens: int
    num_pieces: int
    num_fallback_pieces: int = Field(description="cl100k pieces outside the demo vocabulary, spelled byte by byte.")
    pieces: list[dict] = Field(description="Chapter 1's cl100k_base pieces: id, text, bytes, in_vocab.")
    tokens: list[dict] = Field(description="The model's tokens: index, id, cl100k_id, text, bytes, piece, fallback.")
    floors: list[Floor] = Field(description="n_layers + 1 floors, bottom (embedding rows) to top.")
    next_token: Guess | None = Field(description="The model's actual prediction after the last token (argmax); "
                                     "null for an empty prompt.")
    real_model: dict = Field(description="The real thing from the catalog: name, hidden_size, num_layers, source.")
    math: dict


def _lens(m, x: np.ndarray) -> list[list[dict]]:
    """Top-TOP_K next-token guesses [T][k] for residual rows x [T, dim]."""
    p = np.exp(log_softmax(m.head(x)))  # [T, V]
    top = np.argsort(-p, axis=-1, kind="stable")[:, :TOP_K]
    return [[_guess(m, int(i), p[t, i]) for i in row] for t, row in enumerate(top)]


def _guess(m, i: int, p: float) -> dict:
    text = piece_text(m.piece(i))
    return {"id": i, "text": text, "bytes": None if text is not None else m.piece(i).hex(" ").upper(),
            "p": float(f"{p:.4g}")}


def layer_change(resid_in: np.ndarray, resid_out: np.ndarray) -> np.ndarray:
    """[T] ||out - in|| / ||in|| per token: the size of a layer's update relative to what came in."""
    return np.linalg.norm(resid_out - resid_in, axis=-1) / np.linalg.norm(resid_in, axis=-1)


def _floor(m, l: int, x: np.ndarray, change: np.ndarray | None) -> dict:
    return {"after_layer": l, "vectors": sig(x), "scale": float(f"{np.quantile(np.abs(x), SCALE_QUANTILE):.3g}"),
            "norm": sig(np.linalg.norm(x, axis=-1)), "change": None if change is None else sig(change),
            "lens": _lens(m, x)}


def real_model() -> dict:
    r = catalog.model(SCALE_MODEL)
    return {"id": r.id, "name": r.name, "hidden_size": r.hidden_size, "num_layers": r.num_hidden_layers,
            "source": r.source}


def _math(m, floors: list[dict], real: dict) -> dict:
    """Show-the-math for the headline numbers (the per-token ones only when there are tokens)."""
    c, src = m.config, real["source"]
    changes = [v for f in floors[1:] for v in f["change"]]
    out = math_dict(
        real_numbers_per_token=derive(real["hidden_size"], "numbers/token", "hidden_size (the residual stream's width)",
                                      {"hidden_size": (real["hidden_size"], "numbers", src)}, sources=[src]),
        width_ratio=derive(round(real["hidden_size"] / c.dim, 1), "x", "real hidden_size / demo dim",
                           {"hidden_size": (real["hidden_size"], "numbers", src), "dim": (c.dim, "numbers")}),
        depth_ratio=derive(round(real["num_layers"] / c.n_layers, 1), "x", "real num_layers / demo n_layers",
                           {"num_layers": (real["num_layers"], "layers", src), "n_layers": (c.n_layers, "layers")}))
    if not changes:
        return out
    return out | math_dict(
        layer_change=derive(float(f"{np.mean(changes):.4g}"), "", "change = ||x_out - x_in|| / ||x_in|| per token "
                            "and layer (x = residual stream); the value is the mean over tokens and layers",
                            {"tokens": (len(floors[0]["norm"]), "tokens"), "layers": (c.n_layers, "layers")}),
        logit_lens=derive(floors[-1]["lens"][-1][0]["p"], "probability",
                          "p = softmax(RMSNorm_final(x_l) @ W_embed^T) on floor l; the value is the top guess "
                          "after the last layer, i.e. the model's real prediction",
                          {"vocab_size": (c.vocab_size, "tokens")},
                          ["the output head is tied to the embedding table (weight tying)"],
                          ["nostalgebraist, 'interpreting GPT: the logit lens' (LessWrong, 2020)"]))


@lru_cache(maxsize=64)
def embeddings_json(prompt: str) -> bytes:
    m = demo_model()
    ids, pieces, rows = prompt_tokens(m, prompt)
    if ids:
        fw = m.forward(ids, intermediates=True)
        floors = [_floor(m, 0, fw.embeddings, None)]
        floors += [_floor(m, i + 1, t.resid_out, layer_change(t.resid_in, t.resid_out)) for i, t in enumerate(fw.layers)]
    else:  # an empty prompt (e.g. while the box is cleared): empty floors, nothing to predict from
        floors = [{"after_layer": i, "vectors": [], "scale": 0.0, "norm": [], "change": [] if i else None, "lens": []}
                  for i in range(m.config.n_layers + 1)]
    real = real_model()
    return EmbeddingsResponse(
        prompt=prompt, model=model_info(m), num_tokens=len(ids), num_pieces=len(pieces),
        num_fallback_pieces=sum(not p["in_vocab"] for p in pieces), pieces=pieces, tokens=rows, floors=floors,
        next_token=floors[-1]["lens"][-1][0] if ids else None, real_model=real, math=_math(m, floors, real)).model_dump_json().encode()


@router.get("/api/embeddings", response_model=EmbeddingsResponse)
def get_embeddings(p: Annotated[PromptParams, Query()]) -> Response:
    """The prompt's embedding rows and the residual stream after each layer of the demo model, with the logit lens."""
    return Response(content=embeddings_json(p.prompt), media_type="application/json")


def facts(p: PromptParams | None = None) -> dict[str, str]:
    p = p or PromptParams()
    real, c = real_model(), demo_model().config
    num_tokens = json.loads(embeddings_json(p.prompt))["num_tokens"]
    return {"num_tokens": f"{num_tokens:,} token{'' if num_tokens == 1 else 's'}", "num_numbers": f"{num_tokens * c.dim:,}", "model_name": real["name"], "hidden_size": f"{real['hidden_size']:,}", "num_layers": str(real["num_layers"]),
            "demo_dim": f"{c.dim:,}", "demo_layers": str(c.n_layers)}


# ---- measured on this server's CPU: prefill vs decode time per token ---------------------------
_lock = threading.Lock()
ROUNDS = 3


@lru_cache(maxsize=1)
def _measure() -> bytes:
    from ..sim import demo_timing
    from .batching import cpu_info

    m = demo_model()
    try:
        prompt = demo_timing.default_prompt_ids(m, 64)
        m.forward(prompt)  # warm up
        runs = [demo_timing.time_prefill_decode(m, prompt, num_decode_tokens=32, repeats=3) for _ in range(ROUNDS)]
    except Exception as e:  # say so rather than fail the page
        return _json({"available": False, "reason": f"the measurement failed ({type(e).__name__})", "cpu": cpu_info()})
    prefill = min(r["prefill_ms_per_token"] for r in runs)  # a busy neighbour on the CPU only ever slows a round
    decode = min(r["decode_ms_per_token"] for r in runs)
    out = {"prompt_tokens": runs[0]["prompt_tokens"], "decode_tokens": runs[0]["decode_tokens"],
           "prefill_ms_per_token": prefill, "decode_ms_per_token": decode, "prefill_tokens_per_s": 1e3 / prefill,
           "decode_tokens_per_s": 1e3 / decode, "decode_over_prefill_time_per_token": decode / prefill}
    return _json({"available": True, "measured_on": "this server's CPU", "cpu": cpu_info(), "model": model_info(m),
                  **{k: v if isinstance(v, int) else float(f"{v:.4g}") for k, v in out.items()}, "rounds": ROUNDS,
                  "note": f"Wall-clock time in numpy, measured once when this server process first answered this URL "
                          f"(each figure: the fastest of {ROUNDS} rounds, each the median of 3 runs): a 64-token prompt in "
                          "one forward pass (prefill), then 32 tokens one at a time with the KV cache (decode). Prefill "
                          "shares each weight read across the prompt's tokens; decode does not."})


def _json(d: dict) -> bytes:
    return json.dumps(d, separators=(",", ":")).encode()


@measured_router.get("/api/embeddings/measured")
def get_measured() -> Response:
    """Prefill vs decode time per token of the demo model on this server's CPU (measured once per process)."""
    with _lock:
        body = _measure()
    return Response(content=body, media_type="application/json")
