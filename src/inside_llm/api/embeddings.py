"""Chapter 2, embeddings: GET /api/embeddings -> the prompt's real embedding rows rising through a model.

`model=smollm2` (the default) reads the prompt with SmolLM2-135M-Instruct when its file is on this
server; without it, and for `model=toy`, the toy model trained here serves, and the response says which
served and why (`model.served`, `model.note`). For each drawn floor (every floor of the toy; a handful of
SmolLM2's 31, listed in `drawn_floors`): the vectors of the last DRAWN_COLUMNS tokens (the most columns the stage
draws), packed as text (api/packed.py: one base-64 digit per number, within 1/32 of the floor's colour scale).
For every floor: each vector's length, how much the layer changed it, and the logit lens (final norm + tied head
applied there: the top-3 next-token guesses) for the drawn columns on drawn floors and for the last token on all.
Beside it, the real scale from the catalog (Llama 3.1 70B). A pure function of the URL; the CPU timings live at
GET /api/embeddings/measured (measured once per process) so this response stays cacheable by ETag.
"""

from __future__ import annotations

import json
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field

from ..model_work import WORK, Kept
from ..sim.core.derivation import derive, math_dict
from ..sim.hardware import catalog
from ..sim.model.lens import colour_scale, drawn_floors, layer_change, logit_lens
from ..sim.model.transformer import KVCache
from . import measured
from .common import BUSY, Math, counted
from .demo_model import (
    SCALE_MODEL,
    PromptParams,
    model_tokens,
    piece_text,
    served_info,
    served_model,
    served_name,
    sig,
)
from .measured import Measured
from .packed import Packed, pack

router = APIRouter(tags=["2 · embeddings"])

TOP_K = 3
DRAWN_COLUMNS = 20  # the most token columns the stage draws (static/js/scenes/embeddings.js VARIANTS maxCols):
# drawn floors carry the vectors and the lens of the last this-many tokens
SCALE_QUANTILE = 0.98  # colour scale: +-this quantile of |value| (a few outliers saturate)


class Guess(BaseModel):
    id: int = Field(description="Model id of the guessed next token.")
    text: str | None = Field(description="The piece as text; null for a piece that is only part of a UTF-8 character.")
    bytes: str | None = Field(None, description="The piece's bytes in hex when text is null.")
    p: float = Field(description="Probability (0-1) after softmax over the whole vocabulary.")


class Floor(BaseModel):
    after_layer: int = Field(description="0 = the embedding rows (before any layer); l = after layer l (1-based).")
    drawn: bool = Field(description="Whether this floor is drawn (its vectors are sent).")
    vectors: Packed | None = Field(
        description=f"[columns][dim] the residual stream of the last min(tokens, {DRAWN_COLUMNS}) tokens (the "
        "columns the stage draws), packed (unit = this floor's colour scale / 16, so within 1/32 of it); null on "
        "a floor that is not drawn or for an empty prompt."
    )
    scale: float = Field(
        description=f"This floor's own colour scale: the {SCALE_QUANTILE:.0%} quantile of |value| in "
        "each token's vector, median over the tokens (one outsized token saturates)."
    )
    norm: list[float] = Field(description="[tokens] L2 norm of each vector.")
    change: list[float] | None = Field(
        description="[tokens] ||out - in|| / ||in||: how much this layer changed each "
        "token's vector (null for the embedding floor)."
    )
    lens: list[list[Guess] | None] = Field(
        description=f"[tokens] each token's top {TOP_K} logit-lens guesses (the "
        "likeliest next tokens if the model stopped here: final RMSNorm + tied head); "
        f"computed for the last {DRAWN_COLUMNS} tokens on drawn floors (the most columns "
        "the stage draws) and the last token on the others; null elsewhere."
    )


class EmbeddingsResponse(BaseModel):
    prompt: str
    model: dict = Field(description="The model that serves (name, dim, n_layers, heads, ...; requested, served, note).")
    num_tokens: int
    num_pieces: int
    num_fallback_pieces: int = Field(description="cl100k pieces outside the toy vocabulary, spelled byte by byte.")
    pieces: list[dict] = Field(
        description="Chapter 1's cl100k_base pieces (toy model only): id, text, bytes, in_vocab."
    )
    tokens: list[dict] = Field(description="The model's tokens: index, id, cl100k_id, text, bytes, piece, fallback.")
    floors: list[Floor] = Field(description="n_layers + 1 floors, bottom (embedding rows) to top.")
    drawn_floors: list[int] = Field(description="The floors drawn (after_layer values), bottom to top.")
    shared_scale: float = Field(description="One colour scale for every drawn floor: the largest of their own scales.")
    next_token: Guess | None = Field(
        description="The model's actual prediction after the last token (argmax); null for an empty prompt."
    )
    chat_next_token: Guess | None = Field(
        None,
        description="SmolLM2 only: its first answer token when the prompt is asked as a chat question, in its chat "
        "template (as chapters 9 and 11 ask it); next_token reads the bare text, after which it may end the turn.",
    )
    real_model: dict = Field(description="The real thing from the catalog: name, hidden_size, num_layers, source.")
    math: Math


def _guess(m, i: int, p: float) -> dict:
    text = piece_text(m.piece(i))
    return {
        "id": i,
        "text": text,
        "bytes": None if text is not None else m.piece(i).hex(" ").upper(),
        "p": float(f"{p:.4g}"),
    }


_CHAT_PREFIX: dict = {}  # id(model) -> (model, the chat template's ids before the question, their KVCache)


def _chat_prefix(m) -> tuple[list[int], KVCache]:
    """The chat template's tokens that come before any question (the system turn and the user's marker), read
    through the model once per model: every chat question continues from their keys and values."""
    got = _CHAT_PREFIX.get(id(m))
    if got is None or got[0] is not m:
        a, b = m.chat_ids("a"), m.chat_ids("b")
        ids = a[: next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)]
        cache = KVCache(m.config, capacity=max(1, len(ids)))
        if ids:
            m.forward(ids, cache, upto=m.config.n_layers)
        got = _CHAT_PREFIX[id(m)] = (m, ids, cache)
    return got[1], got[2]


def _chat_sequence(m, prompt: str) -> tuple[KVCache, list[int]]:
    """The prompt asked as a chat question in the model's template, as (cache, ids still to read): continuing
    from the template's prefix (read once) when the question's tokens start with it, else the whole template."""
    ids = m.chat_ids(prompt)
    pre, kept = _chat_prefix(m)
    n = len(pre)
    if not (0 < n < len(ids) and ids[:n] == pre):
        return KVCache(m.config, capacity=len(ids)), ids
    cache = KVCache(m.config, capacity=len(ids))
    for layer in range(m.config.n_layers):
        cache.k[layer][:, :n], cache.v[layer][:, :n] = kept.k[layer][:, :n], kept.v[layer][:, :n]
    cache.num_tokens = n
    return cache, ids[n:]


def _floor(m, l: int, x: np.ndarray, change: np.ndarray | None, drawn: bool, lens: list) -> dict:
    scale = float(f"{colour_scale(x, SCALE_QUANTILE):.3g}")
    return {
        "after_layer": l,
        "drawn": drawn,
        "vectors": pack(x[-DRAWN_COLUMNS:], scale) if drawn else None,
        "scale": scale,
        "norm": sig(np.linalg.norm(x, axis=-1)),
        "change": None if change is None else sig(change),
        "lens": lens,
    }


def _floors(
    m, xs: list[np.ndarray], changes: list, drawn: list[int], chat: np.ndarray
) -> tuple[list[dict], dict | None]:
    """Every floor; the logit lens for the last DRAWN_COLUMNS tokens on drawn floors and for the last token on
    the others, in one pass through the output head (the largest matrix: reading it once per floor would dominate);
    chat [0 or 1, dim], the chat question's last row after the last layer, rides along: its top guess is
    chat_next_token."""
    T = len(xs[0])
    rows = [range(max(0, T - DRAWN_COLUMNS), T) if f in drawn else range(T - 1, T) for f in range(len(xs))]
    ids, p = logit_lens(m, np.concatenate([x[list(r)] for x, r in zip(xs, rows, strict=True)] + [chat]), TOP_K)
    chat_guess = _guess(m, int(ids[-1][0]), float(p[-1][0])) if len(chat) else None
    out, n = [], 0
    for f, (x, c, r) in enumerate(zip(xs, changes, rows, strict=True)):
        lens: list = [None] * T
        for t in r:
            lens[t] = [_guess(m, int(i), float(q)) for i, q in zip(ids[n], p[n], strict=True)]
            n += 1
        out.append(_floor(m, f, x, c, f in drawn, lens))
    return out, chat_guess


def real_model() -> dict:
    r = catalog.model(SCALE_MODEL)
    return {
        "id": r.id,
        "name": r.name,
        "hidden_size": r.hidden_size,
        "num_layers": r.num_hidden_layers,
        "source": r.source,
    }


def _math(m, floors: list[dict], real: dict) -> dict:
    """Show-the-math for the headline numbers (the per-token ones only when there are tokens)."""
    c, src = m.config, real["source"]
    changes = [v for f in floors[1:] for v in f["change"]]
    out = math_dict(
        real_numbers_per_token=derive(
            real["hidden_size"],
            "numbers/token",
            "hidden_size (the residual stream's width)",
            {"hidden_size": (real["hidden_size"], "numbers", src)},
            sources=[src],
        ),
        width_ratio=derive(
            round(real["hidden_size"] / c.dim, 1),
            "x",
            "real hidden_size / demo dim",
            {"hidden_size": (real["hidden_size"], "numbers", src), "dim": (c.dim, "numbers")},
        ),
        depth_ratio=derive(
            round(real["num_layers"] / c.n_layers, 1),
            "x",
            "real num_layers / demo n_layers",
            {"num_layers": (real["num_layers"], "layers", src), "n_layers": (c.n_layers, "layers")},
        ),
    )
    if not changes:
        return out
    return out | math_dict(
        layer_change=derive(
            float(f"{np.mean(changes):.4g}"),
            "",
            "change = ||x_out - x_in|| / ||x_in|| per token "
            "and layer (x = residual stream); the value is the mean over tokens and layers",
            {"tokens": (len(floors[0]["norm"]), "tokens"), "layers": (c.n_layers, "layers")},
        ),
        logit_lens=derive(
            floors[-1]["lens"][-1][0]["p"],
            "probability",
            "p = softmax(RMSNorm_final(x_l) @ W_embed^T) on floor l; the value is the top guess "
            "after the last layer, i.e. the model's real prediction",
            {"vocab_size": (c.vocab_size, "tokens")},
            ["the output head is tied to the embedding table (weight tying)"],
            ["nostalgebraist, 'interpreting GPT: the logit lens' (LessWrong, 2020)"],
        ),
    )


KEPT = Kept(64)  # bodies by (prompt, model asked for, model that serves)


def _key(prompt: str, model: str) -> tuple:
    return (__name__, prompt, model, served_model(model).served)  # kept per model that actually serves


def embeddings_json(prompt: str, model: str = "smollm2") -> bytes:
    """The body (a model job: model_work.WORK; this thread waits for it)."""
    return WORK.call(_key(prompt, model), lambda: _embeddings_json(prompt, model), KEPT)


def _embeddings_json(prompt: str, model: str) -> bytes:
    s = served_model(model)
    m = s.model
    ids, pieces, rows = model_tokens(s, prompt)
    drawn = drawn_floors(m.config.n_layers)
    chat = None
    if ids:
        # the prompt and (SmolLM2) the same words as a chat question through the layers in one pass, one read of
        # the weights; no head: the lens below applies it to both
        batch = [(KVCache(m.config, capacity=len(ids)), ids)]
        if hasattr(m, "chat_ids"):
            batch.append(_chat_sequence(m, prompt))
        every = m.residuals(batch)  # [embedding rows, after layer 1, ...], [N, dim] each
        T = len(ids)
        xs = [x[:T] for x in every]
        changes = [None] + [layer_change(a, b) for a, b in zip(xs, xs[1:], strict=False)]
        floors, chat = _floors(m, xs, changes, drawn, every[-1][-1:] if len(batch) > 1 else every[-1][:0])
        shared = max(f["scale"] for f in floors if f["drawn"])
    else:  # an empty prompt (e.g. while the box is cleared): empty floors, nothing to predict from
        floors = [
            {
                "after_layer": i,
                "drawn": i in drawn,
                "vectors": None,
                "scale": 0.0,
                "norm": [],
                "change": [] if i else None,
                "lens": [],
            }
            for i in range(m.config.n_layers + 1)
        ]
        shared = 0.0
    real = real_model()
    return (
        EmbeddingsResponse(
            prompt=prompt,
            model=served_info(s),
            num_tokens=len(ids),
            num_pieces=len(pieces),
            num_fallback_pieces=sum(not p["in_vocab"] for p in pieces),
            pieces=pieces,
            tokens=rows,
            floors=floors,
            drawn_floors=drawn,
            shared_scale=shared,
            next_token=floors[-1]["lens"][-1][0] if ids else None,
            chat_next_token=chat,
            real_model=real,
            math=_math(m, floors, real),
        )
        .model_dump_json()
        .encode()
    )


@router.get("/api/embeddings", response_model=EmbeddingsResponse, responses=BUSY)
async def get_embeddings(request: Request, p: Annotated[PromptParams, Query()]) -> Response:
    """The prompt's embedding rows and the residual stream after each layer of the model, with the logit lens."""
    fn = lambda: _embeddings_json(p.prompt, p.model)  # noqa: E731
    body = await WORK.run(_key(p.prompt, p.model), fn, KEPT, request.receive)
    return Response(content=body, media_type="application/json")


def facts(p: PromptParams | None = None) -> dict[str, str]:
    p = p or PromptParams()
    s = served_model(p.model)
    real, c = real_model(), s.model.config
    num_tokens = json.loads(embeddings_json(p.prompt, p.model))["num_tokens"]
    return {
        "num_tokens": counted(num_tokens, "token"),
        "num_numbers": f"{num_tokens * c.dim:,}",
        "served_name": served_name(s),
        "model_name": real["name"],
        "hidden_size": f"{real['hidden_size']:,}",
        "num_layers": str(real["num_layers"]),
        "demo_dim": f"{c.dim:,}",
        "demo_layers": str(c.n_layers),
    }


# ---- measured on this server's CPU: prefill vs decode time per token ---------------------------


def _measure(served: str) -> dict:
    s = measured.served()
    r = measured.prefill_decode(s)  # the same measurement chapter 5 places under this CPU's roofs
    keys = ("prefill_ms_per_token", "decode_ms_per_token", "prefill_tokens_per_s", "decode_tokens_per_s")
    return {
        **measured.served_header(s),
        "prompt_tokens": r["prompt_tokens"],
        "decode_tokens": r["decode_tokens"],
        **{k: measured.sig4(r[k]) for k in (*keys, "decode_over_prefill_time_per_token")},
        "rounds": r["rounds"],
        "note": f"Wall-clock time in numpy, measured once when this server process first needed it (each "
        f"figure: the fastest of {r['rounds']} rounds): a {r['prompt_tokens']}-token prompt in one forward pass "
        f"(prefill), then {r['decode_tokens']} tokens one at a time with the KV cache (decode). Prefill shares "
        "each weight read across the prompt's tokens; decode does not.",
    }


MEASURED = Measured(_measure, keys=2)


@router.get("/api/embeddings/measured", responses=BUSY)
async def get_measured(request: Request) -> Response:
    """Prefill vs decode time per token of the served model (SmolLM2, else the toy) on this server's CPU."""
    return await MEASURED.respond(request, (await measured.served_async()).served)
