"""Chapter 6, KV cache: GET /api/kv-cache -> paging vs reserved regions on one request trace, frame by frame.

Every policy reports run-level metrics over every step; the two drawn ones (paged and the chosen
reservation policy) also carry their frames (slot counts, in columns) and residencies (who held which
pages or region from which step to which: the stage derives any step's residents from them; block
tables travel as page strings, two base-64 digits per page). The
chosen model only sizes a token's keys and values in bytes (`kv_per_token`); the pool is in tokens.
GET /api/kv-cache/measured -> the served model's own cache on this server: bytes per token by formula and
weighed, beside Llama 3.1 70B's, and decoding with the cache vs recomputing the prefix, timed once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Annotated, Literal

import numpy as np
from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from ..sim.core.derivation import derive
from ..sim.core.errors import SimError
from ..sim.core.result import as_json
from ..sim.hardware import catalog
from ..sim.measure import cpu_measure
from ..sim.model.models import kv_bytes_per_token
from ..sim.serve.kvpolicies import KVFrames, KVPolicyRun, KVResult, Residencies, simulate_kv
from . import measured as ms
from .common import MAX_REQUESTS, Workload, seed_field
from .measured import Measured, MeasuredHeader

router = APIRouter(tags=["6 · kv-cache"])

CAPACITY_TOKENS = 16_384  # the drawn cache: 32 rows of 512 token slots
MAX_SEQ_LEN = 2048
MAX_FRAMES = 120
KV_BYTES_PER_VALUE = 2  # BF16
DEFAULT_MODEL = "llama-3.1-70b"
Reservation = Literal["contiguous", "pow2", "oracle"]
ModelId = Literal[tuple(m for m in catalog.models() if not m.startswith("demo-"))]  # type: ignore[valid-type]
RESERVATIONS = ("contiguous", "pow2", "oracle")


class KVCacheParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)  # hashable: responses are cached per params
    block_size: int = Field(16, ge=8, le=128, description="Tokens per KV page (slots): 8, 16, 32, 64 or 128.")
    workload: Workload = Field(
        "sharegpt",
        description="Request lengths: sharegpt (161 in / 338 out tokens "
        "on average), alpaca (19 / 58) or fixed (161 / 338).",
    )
    requests: int = Field(
        300,
        ge=1,
        le=MAX_REQUESTS,
        description=f"Requests in the trace, all queued at step 0 (requests; 1-{MAX_REQUESTS:,}).",
    )
    seed: int = seed_field("the request lengths")
    compare: Reservation = Field(
        "contiguous",
        description="Reservation policy drawn beside paging: contiguous (max_seq_len per request), pow2 or oracle.",
    )
    model: ModelId = Field(
        DEFAULT_MODEL,
        description="Catalog model whose shape sizes one token's keys and "
        "values in bytes (BF16); the simulation itself is in tokens.",
    )

    @field_validator("block_size")
    @classmethod
    def _power_of_two(cls, v: int) -> int:
        """Pages tile the drawn 512-slot rows exactly, as engines' block sizes do."""
        if v & (v - 1):
            raise SimError(
                "block_size", f"The block size must be a power of two (8, 16, 32, 64 or 128 tokens), not {v}."
            )
        return v


@dataclass
class KVCacheResponse(KVResult):
    capacity_slots: int = CAPACITY_TOKENS
    max_seq_len: int = MAX_SEQ_LEN
    drawn: list[str] = field(default_factory=list)  # policies whose frames and residencies are included
    kv_per_token: dict = field(default_factory=dict)  # the chosen model's bytes per token, with the math


RESPONSE = TypeAdapter(KVCacheResponse)
NO_FRAMES = KVFrames(*([] for _ in range(12)))
NO_RESIDENCIES = Residencies([], [], [], [])


@lru_cache(maxsize=16)
def kv_per_token(model_id: str) -> dict:
    m = catalog.model(model_id)
    b = int(kv_bytes_per_token(m, KV_BYTES_PER_VALUE))
    per = {"bytes_per_value": (KV_BYTES_PER_VALUE, "bytes (BF16)")}
    if m.is_mla:  # multi-head latent attention: one compressed latent + a rotary key per layer
        math = derive(
            b,
            "bytes per token",
            "layers x (latent + rotary key) x bytes per value",
            {
                "layers": (m.num_hidden_layers, "layers"),
                "latent": (m.kv_lora_rank, "values"),
                "rotary_key": (m.qk_rope_head_dim, "values"),
                **per,
            },
            [
                "latent attention caches one small latent per token and layer, shared by all heads, "
                "instead of K and V for every head"
            ],
            ["model config (data/models.toml)"],
        )
    else:
        full = m.full_attention_layers
        notes = ["grouped-query attention: only the KV heads are cached, not every query head"]
        if full < m.num_hidden_layers:
            notes.append(
                f"{m.num_hidden_layers - full} sliding-window layers keep at most {m.sliding_window} "
                "tokens each, so they do not grow with the chat"
            )
        math = derive(
            b,
            "bytes per token",
            "2 (K and V) x full-attention layers x KV heads x head dim x bytes per value",
            {
                "layers": (full, "layers"),
                "kv_heads": (m.num_key_value_heads, "heads"),
                "head_dim": (m.head_dim, "values"),
                **per,
            },
            notes,
            ["model config (data/models.toml)"],
        )
    return {
        "model": m.name,
        "model_id": model_id,
        "bytes": b,
        "layers": m.num_hidden_layers,
        "kv_heads": m.num_key_value_heads,
        "head_dim": m.head_dim,
        "bytes_per_value": KV_BYTES_PER_VALUE,
        "math": as_json(math),
    }


def simulate(p: KVCacheParams) -> KVResult:
    """simulate_kv for every policy on one clock. The reservation policies run first (cheap); their
    frame stride is then given to the paged run, which saves it the adaptive stride's extra frames.
    If paging ran past the frames that stride allows, everything reruns with a common stride."""
    common = dict(
        block_size=p.block_size,
        workload=p.workload,
        num_requests=p.requests,
        seed=p.seed,
        capacity_tokens=CAPACITY_TOKENS,
        max_seq_len=MAX_SEQ_LEN,
        max_frames=MAX_FRAMES,
    )
    result = simulate_kv(**common, policies=RESERVATIONS)
    paged = simulate_kv(**common, frame_every=result.frame_every, policies=("paged",)).policies[0]
    if paged.num_steps > MAX_FRAMES * result.frame_every:
        return simulate_kv(**common, policies=("paged",) + RESERVATIONS)
    result.policies.insert(0, paged)
    return result


PAGE_DIGITS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"  # static/js/scenes/kv-cache.js


def page_strings(tables: list[list[int]]) -> list[str]:
    """Each block table as two base-64 digits per page id, high digit first (Residencies.block_pages)."""
    ids = np.fromiter((b for t in tables for b in t), dtype=np.int64)
    if len(ids) and ids.max() >= 64 * 64:
        raise ValueError("page ids must be below 4,096 for two base-64 digits")
    digits = np.frombuffer(PAGE_DIGITS, dtype=np.uint8)
    chars = np.empty(2 * len(ids), dtype=np.uint8)
    chars[0::2], chars[1::2] = digits[ids >> 6], digits[ids & 63]
    text = chars.tobytes().decode("ascii")
    ends = np.cumsum([2 * len(t) for t in tables]).tolist()
    return [text[a:b] for a, b in zip([0, *ends[:-1]], ends)]


def wire(pol: KVPolicyRun) -> KVPolicyRun:
    """A drawn policy as sent: paged block tables as page strings."""
    res = pol.residencies
    if res.block_table is None:
        return pol
    return replace(pol, residencies=replace(res, block_table=None, block_pages=page_strings(res.block_table)))


@lru_cache(maxsize=64)
def kv_cache_json(p: KVCacheParams) -> bytes:
    """The response body for one parameter set (pure: same params, same bytes)."""
    drawn = ["paged", p.compare]
    result = simulate(p)
    policies = [
        wire(pol) if pol.name in drawn else replace(pol, frames=NO_FRAMES, residencies=NO_RESIDENCIES)
        for pol in result.policies
    ]
    fields = {
        **vars(result),
        "params": p.model_dump(),
        "policies": policies,
        "drawn": drawn,
        "kv_per_token": kv_per_token(p.model),
    }
    return RESPONSE.dump_json(KVCacheResponse(**fields), exclude_none=True)


@router.get("/api/kv-cache", response_model=KVCacheResponse, response_model_exclude_none=True)
def get_kv_cache(p: Annotated[KVCacheParams, Query()]) -> Response:
    """Paged vs reserved-region KV memory on one seeded trace: waste, requests in memory, frames."""
    return Response(content=kv_cache_json(p), media_type="application/json")


COMPARE_WORDS = {
    "contiguous": "a full-length region per chat",
    "pow2": "a power-of-two region per chat",
    "oracle": "exactly each chat's final length",
}


def facts(p: KVCacheParams | None = None) -> dict[str, str]:
    """Waste of the compared reservation and of paging, on the chosen trace."""
    p = p or KVCacheParams()
    import json

    pols = {pol["name"]: pol for pol in json.loads(kv_cache_json(p))["policies"]}
    return {
        "num_requests": f"{p.requests:,}",
        "compare_words": COMPARE_WORDS[p.compare],
        "compare_waste_pct": f"{pols[p.compare]['waste_fraction']:.0%}",
        "paged_waste_pct": f"{pols['paged']['waste_fraction']:.1%}",
        "block_size": str(pols["paged"]["block_size"]),
    }


# ---- measured on this server's CPU: the served model's own cache ----------------------------
MEASURED_CACHE_TOKENS = 16  # tokens read before the cache's bytes are counted
SCALE_MODEL = "llama-3.1-70b"


class KVBytesPerToken(BaseModel):
    """One token's keys and values: 2 (K and V) x layers x key/value heads x head size x bytes per value."""

    model: str
    precision: Literal["float32", "bf16"]
    layers: int
    key_value_heads: int
    head_size: int
    bytes_per_value: int
    bytes_per_token: int
    source: str = Field(description="Where the shape comes from.")


class CacheVsRecompute(BaseModel):
    """Per new token after the prompt: one token through the model with the cache vs the whole prefix again."""

    prompt_tokens: int
    new_tokens: int
    cached_milliseconds_per_token: float
    recompute_milliseconds_per_token: float
    cached_tokens_per_second: float
    recompute_tokens_per_second: float
    speedup: float = Field(description="recompute time / cached time (x).")
    same_tokens: bool = Field(description="Recomputing predicts the same greedy tokens as the cache did.")
    rounds: int = Field(description="Rounds timed; the fastest is kept.")


class KVCacheMeasuredResponse(MeasuredHeader):
    model: dict | None = Field(
        None, description="The model measured: SmolLM2 when its file is here, else the toy (served, note say which)."
    )
    served_as_stored: KVBytesPerToken | None = Field(
        None, description="The served model's bytes per token at float32, as its cache is held on this server."
    )
    served_bf16: KVBytesPerToken | None = Field(None, description="The same shape at BF16, as a GPU server keeps it.")
    large_model: KVBytesPerToken | None = Field(None, description="Llama 3.1 70B at BF16, from the catalog.")
    large_over_served: float | None = Field(
        None, description="Large model's bytes per token / served model's, both BF16."
    )
    measured_cache_tokens: int | None = Field(None, description="Tokens read before the cache was weighed.")
    measured_cache_bytes: int | None = Field(None, description="Bytes the cache's buffers held for those tokens.")
    measured_bytes_per_token: float | None = Field(None, description="measured_cache_bytes / measured_cache_tokens.")
    matches_formula: bool | None = Field(None, description="The measured bytes per token equal served_as_stored's.")
    decode: CacheVsRecompute | None = None
    note: str = (
        "Bytes per token from each model's own shape; the cache's bytes weighed after reading "
        f"{MEASURED_CACHE_TOKENS} tokens; decode timed in numpy, once when this server process first needed it "
        "(the fastest of a few rounds, so a busy neighbour on the CPU counts least)."
    )


def _kv_unavailable(reason: str, *key) -> dict:
    return KVCacheMeasuredResponse(available=False, reason=reason, cpu=ms.cpu_info()).model_dump()


def _measure_kv(served: str) -> dict:
    s = ms.served()
    c = s.model.config
    name = ms.served_model_info(s)["display_name"]
    source = "the model file's own metadata" if s.served == "smollm2" else "the toy model's config (demo/)"

    def served_kv(precision: str, size: int) -> KVBytesPerToken:
        return KVBytesPerToken(
            model=name,
            precision=precision,
            layers=c.n_layers,
            key_value_heads=c.n_kv_heads,
            head_size=c.head_dim,
            bytes_per_value=size,
            bytes_per_token=cpu_measure.kv_values_per_token(s.model) * size,
            source=source,
        )

    big = catalog.model(SCALE_MODEL)
    large = KVBytesPerToken(
        model=big.name,
        precision="bf16",
        layers=big.full_attention_layers,
        key_value_heads=big.num_key_value_heads,
        head_size=big.head_dim,
        bytes_per_value=KV_BYTES_PER_VALUE,
        bytes_per_token=int(kv_bytes_per_token(big, KV_BYTES_PER_VALUE)),
        source=big.source,
    )
    stored, bf16 = served_kv("float32", 4), served_kv("bf16", KV_BYTES_PER_VALUE)
    held = cpu_measure.cache_bytes_held(s.model, ms.prompt_ids(s)[:MEASURED_CACHE_TOKENS])
    t = ms.cache_vs_recompute(s)  # the same measurement chapter 3 shows
    return KVCacheMeasuredResponse(
        available=True,
        cpu=ms.cpu_info(),
        model=ms.served_model_info(s),
        served_as_stored=stored,
        served_bf16=bf16,
        large_model=large,
        large_over_served=ms.sig4(large.bytes_per_token / bf16.bytes_per_token),
        measured_cache_tokens=MEASURED_CACHE_TOKENS,
        measured_cache_bytes=held,
        measured_bytes_per_token=held / MEASURED_CACHE_TOKENS,
        matches_formula=held == stored.bytes_per_token * MEASURED_CACHE_TOKENS,
        decode=CacheVsRecompute(
            prompt_tokens=t["prompt_tokens"],
            new_tokens=t["new_tokens"],
            cached_milliseconds_per_token=ms.sig4(t["cached_ms_per_token"]),
            recompute_milliseconds_per_token=ms.sig4(t["recompute_ms_per_token"]),
            cached_tokens_per_second=ms.sig4(t["cached_tokens_per_s"]),
            recompute_tokens_per_second=ms.sig4(t["recompute_tokens_per_s"]),
            speedup=ms.sig4(t["speedup_x"]),
            same_tokens=t["same_tokens"],
            rounds=t["rounds"],
        ),
    ).model_dump()


MEASURED = Measured(_measure_kv, keys=2, on_failure=_kv_unavailable)


@router.get("/api/kv-cache/measured", response_model=KVCacheMeasuredResponse)
async def get_measured(request: Request) -> Response:
    """The served model's KV bytes per token (formula and weighed) beside Llama 3.1 70B's, and decoding with
    the cache vs recomputing the prefix on this server's CPU (measured once per process)."""
    return await MEASURED.respond(request, (await ms.served_async()).served)
