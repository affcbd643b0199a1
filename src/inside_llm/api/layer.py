"""Chapter 3, layer: GET /api/layer -> what one layer of a model computes for the prompt.

`model=smollm2` (the default) opens a layer of SmolLM2-135M-Instruct when its file is on this server;
without it, and for `model=toy`, the toy model trained here serves and the response says so.

Each token's Query, Key and Value (after rotary positions), every attention head's real weights
(lower-triangular: a token only looks back; query heads grouped by the KV head they share), and the
MLP: its input, the stretched SwiGLU activations silu(gate) * up (ffn_dim wide) and what it adds back
(dim wide). The activations travel packed as text (api/packed.py: one base-64 digit per number, within 1/32 of
each block's colour scale); the model runs only up to the layer opened. A pure function of the URL; the KV
cache timing is at GET /api/layer/measured.
"""

from __future__ import annotations

import json
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field, ValidationInfo, field_validator

from ..model_work import WORK, Kept
from ..sim.core.derivation import derive, math_dict
from ..sim.core.errors import SimError
from ..sim.hardware import catalog
from ..sim.model.transformer import LayerTrace
from ..sim.model.transformer_ops import rms_norm
from . import measured
from .common import BUSY, Math, counted
from .demo_model import (
    SCALE_MODEL,
    PromptParams,
    model_tokens,
    served_info,
    served_model,
    served_name,
    sig,
)
from .measured import Measured
from .packed import Packed, pack

router = APIRouter(tags=["3 · layer"])


def _slider_max() -> int:
    """The layer slider's end in scenes/03-layer.toml: SmolLM2's last layer, the deepest model this tour serves
    (a test checks it against the model file when present). One public bound whether or not the file is here;
    each request is then checked against the model that serves it."""
    from ..scenes import scene_by_slug

    return int(next(c.max for c in scene_by_slug("layer").controls if c.name == "layer"))


MAX_LAYER = _slider_max()


class LayerParams(PromptParams):
    layer: int = Field(
        0,
        ge=0,
        le=MAX_LAYER,
        description=f"Which layer to open (0-based: 0-{MAX_LAYER} layers, "
        "and at most the last layer of the model that serves: a 422 says which).",
    )

    @field_validator("layer", mode="before")
    @classmethod
    def _whole(cls, v):
        if isinstance(v, bool):  # JSON true/false is not a layer number (a query string never holds a bool)
            raise SimError("layer", f"The layer must be a whole number, 0 to {MAX_LAYER}.")
        return v

    @field_validator("layer")
    @classmethod
    def _layer(cls, v: int, info: ValidationInfo) -> int:
        s = served_model(info.data.get("model", "smollm2"))
        n = s.model.config.n_layers
        if v >= n:
            who = served_name(s)
            raise SimError(
                "layer", f"{who[:1].upper()}{who[1:]} has {n} layers: the layer must be 0 to {n - 1}, not {v}."
            )
        return v


class Head(BaseModel):
    head: int
    kv_head: int = Field(description="The KV head whose keys and values this query head reads.")
    weights: list[list[float]] = Field(
        description="Lower triangle of the [T, T] attention weights: row i holds "
        "query token i's weights on keys 0..i (they sum to 1)."
    )


class LayerResponse(BaseModel):
    prompt: str
    layer: int
    model: dict
    num_tokens: int
    tokens: list[dict] = Field(description="The model's tokens: index, id, cl100k_id, text, bytes, piece, fallback.")
    groups: list[dict] = Field(description="Grouped-query attention: for each KV head, the query heads sharing it.")
    qkv: dict[str, Packed | float | list[list[float]]] = Field(
        description="q [T][H*hd], k and v [T][Hkv*hd] (head after head; after RoPE for q, k; packed, unit = "
        "the block's colour scale / 16), their per-head L2 norms q_norm [T][H], k_norm/v_norm [T][Hkv], and "
        "colour scales q_scale, k_scale, v_scale."
    )
    heads: list[Head]
    mlp: dict[str, Packed | float] = Field(
        description="input [T][dim] (after RMSNorm), hidden [T][ffn_dim] = silu(gate) * up, "
        "out [T][dim] (what the MLP adds), each packed (unit = its colour scale / 16), and the colour scales."
    )
    residual: dict = Field(description="L2 norms [T]: stream in, attention's update, MLP's update, stream out.")
    math: Math


def _scale(x: np.ndarray) -> float:
    """Colour scale: +-98th percentile of |x| (a few outliers saturate); 0 when there is nothing."""
    if x.size == 0:
        return 0.0
    return float(f"{np.quantile(np.abs(x), 0.98):.3g}")


def _norm(x: np.ndarray) -> list:
    return sig(np.linalg.norm(x, axis=-1))


def _math(m, T: int) -> dict:
    c = m.config
    g = c.n_heads // c.n_kv_heads
    return math_dict(
        attention=derive(
            c.head_dim,
            "numbers/head",
            "w[h, i, j] = softmax_j(q_h,i . k_g(h),j / sqrt(head_dim)) "
            "over j <= i (causal); g(h) = h // (n_heads / n_kv_heads)",
            {"head_dim": (c.head_dim, "numbers"), "tokens": (T, "tokens")},
            ["rotary position embeddings rotate q and k before the dot product"],
        ),
        kv_numbers_per_token=derive(
            2 * c.n_kv_heads * c.head_dim,
            "numbers/token/layer",
            "2 * n_kv_heads * head_dim",
            {"n_kv_heads": (c.n_kv_heads, "heads"), "head_dim": (c.head_dim, "numbers")},
            [
                f"without grouping it would be 2 * n_heads * head_dim = {2 * c.n_heads * c.head_dim}; "
                f"{g} query heads share each KV head"
            ],
        ),
        mlp_stretch=derive(
            round(c.ffn_dim / c.dim, 2),
            "x",
            "ffn_dim / dim; out = (silu(x W1) * (x W3)) W2",
            {"dim": (c.dim, "numbers"), "ffn_dim": (c.ffn_dim, "numbers")},
        ),
    )


KEPT = Kept(64)  # bodies by (prompt, layer, model asked for, model that serves)


def _key(prompt: str, layer: int, model: str) -> tuple:
    return (__name__, prompt, layer, model, served_model(model).served)  # kept per model that actually serves


def layer_json(prompt: str, layer: int, model: str = "smollm2") -> bytes:
    """The body (a model job: model_work.WORK; this thread waits for it)."""
    return WORK.call(_key(prompt, layer, model), lambda: _layer_json(prompt, layer, model), KEPT)


def _layer_json(prompt: str, layer: int, model: str) -> bytes:
    s = served_model(model)
    m = s.model
    c = m.config
    ids, _, rows = model_tokens(s, prompt)
    T = len(ids)
    tr = m.forward(ids, intermediates=True, upto=layer + 1).layers[layer] if T else _empty_trace(m)
    q, k, v = (a.transpose(1, 0, 2) for a in (tr.q, tr.k, tr.v))  # [T, heads, hd]
    g = c.n_heads // c.n_kv_heads
    heads = [
        {"head": h, "kv_head": h // g, "weights": [sig(tr.attn[h, i, : i + 1]) for i in range(T)]}
        for h in range(c.n_heads)
    ]
    mlp_in = rms_norm(tr.resid_mid, m.layers[layer].mlp_norm, c.norm_eps)  # [T, dim]
    q, k, v = (a.reshape(T, a.shape[1] * a.shape[2]) for a in (q, k, v))  # [T, heads * hd]: head after head
    sc = {n: _scale(a) for n, a in (("q", q), ("k", k), ("v", v), ("input", mlp_in), ("hidden", tr.mlp_hidden))}
    sc["out"] = _scale(tr.mlp_out)
    return (
        LayerResponse(
            prompt=prompt,
            layer=layer,
            model=served_info(s),
            num_tokens=T,
            tokens=rows,
            groups=[{"kv_head": j, "query_heads": list(range(j * g, (j + 1) * g))} for j in range(c.n_kv_heads)],
            qkv={
                **{n: pack(a, sc[n]) for n, a in (("q", q), ("k", k), ("v", v))},
                "q_norm": _norm(q.reshape(T, c.n_heads, c.head_dim)),
                "k_norm": _norm(k.reshape(T, c.n_kv_heads, c.head_dim)),
                "v_norm": _norm(v.reshape(T, c.n_kv_heads, c.head_dim)),
                "q_scale": sc["q"],
                "k_scale": sc["k"],
                "v_scale": sc["v"],
            },
            heads=heads,
            mlp={
                "input": pack(mlp_in, sc["input"]),
                "hidden": pack(tr.mlp_hidden, sc["hidden"]),
                "out": pack(tr.mlp_out, sc["out"]),
                "input_scale": sc["input"],
                "hidden_scale": sc["hidden"],
                "out_scale": sc["out"],
            },
            residual={
                "in_norm": _norm(tr.resid_in),
                "attn_out_norm": _norm(tr.attn_out),
                "mlp_out_norm": _norm(tr.mlp_out),
                "out_norm": _norm(tr.resid_out),
            },
            math=_math(m, T),
        )
        .model_dump_json()
        .encode()
    )


def _empty_trace(m) -> LayerTrace:
    """What a layer computes for no tokens: every array with a 0-long token axis (an empty prompt)."""
    c = m.config
    z = lambda *shape: np.zeros(shape, np.float32)  # noqa: E731
    return LayerTrace(
        z(0, c.dim),
        z(c.n_heads, 0, c.head_dim),
        z(c.n_kv_heads, 0, c.head_dim),
        z(c.n_kv_heads, 0, c.head_dim),
        z(c.n_heads, 0, 0),
        z(0, c.dim),
        z(0, c.dim),
        z(0, c.ffn_dim),
        z(0, c.ffn_dim),
        z(0, c.ffn_dim),
        z(0, c.dim),
        z(0, c.dim),
    )


@router.get("/api/layer", response_model=LayerResponse, responses=BUSY)
async def get_layer(request: Request, p: Annotated[LayerParams, Query()]) -> Response:
    """Q, K, V, the attention heads' weights and the MLP's activations of one demo-model layer for the prompt."""
    fn = lambda: _layer_json(p.prompt, p.layer, p.model)  # noqa: E731
    body = await WORK.run(_key(p.prompt, p.layer, p.model), fn, KEPT, request.receive)
    return Response(content=body, media_type="application/json")


def facts(p: LayerParams | None = None) -> dict[str, str]:
    p = p or LayerParams()
    r, d = catalog.model(SCALE_MODEL), json.loads(layer_json(p.prompt, p.layer, p.model))
    return {
        "layer": str(p.layer),
        "served_name": served_name(served_model(p.model)),
        "demo_layers": str(d["model"]["n_layers"]),
        "num_tokens": counted(d["num_tokens"], "token"),
        "demo_heads": str(d["model"]["n_heads"]),
        "demo_kv_heads": str(d["model"]["n_kv_heads"]),
        "model_name": r.name,
        "num_heads": str(r.num_attention_heads),
        "num_kv_heads": str(r.num_key_value_heads),
        "hidden_size": f"{r.hidden_size:,}",
        "ffn_dim": f"{r.intermediate_size:,}",
    }


# ---- measured on this server's CPU: decoding with the KV cache vs recomputing the prefix --------


def _measure(served: str) -> dict:
    s = measured.served()
    r = measured.cache_vs_recompute(s)  # the same measurement chapter 6 shows
    keys = ("cached_ms_per_token", "recompute_ms_per_token", "cached_tokens_per_s", "recompute_tokens_per_s")
    return {
        **measured.served_header(s),
        "prompt_tokens": r["prompt_tokens"],
        "new_tokens": r["new_tokens"],
        **{k: measured.sig4(r[k]) for k in (*keys, "speedup_x")},
        "same_tokens": r["same_tokens"],
        "rounds": r["rounds"],
        "note": f"Wall-clock time in numpy, measured once when this server process first needed it (each "
        f"figure: the fastest of {r['rounds']} rounds): after a {r['prompt_tokens']}-token prompt, each of "
        f"{r['new_tokens']} greedy tokens either runs one token through the model, reading every layer's kept "
        "keys and values (cached), or reruns the whole prefix (recompute).",
    }


MEASURED = Measured(_measure, keys=2)


@router.get("/api/layer/measured", responses=BUSY)
async def get_measured(request: Request) -> Response:
    """Decode time per token with the KV cache vs recomputing the prefix, for the served model on this CPU."""
    return await MEASURED.respond(request, (await measured.served_async()).served)
