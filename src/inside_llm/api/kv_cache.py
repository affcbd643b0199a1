"""Chapter 6, KV cache: GET /api/kv-cache -> paging vs reserved regions on one request trace, frame by frame.

Every policy reports run-level metrics over every step; the two drawn ones (paged and the chosen
reservation policy) also carry down-sampled frames. Frames are compact: each allocation (a
request's block table, or its reserved region) is listed once per policy, and a frame's residents
are [allocation index, num_tokens] pairs (paged: the request holds the first ceil(num_tokens /
block_size) pages of its allocation's block table).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..sim.kvcache import simulate_kv

router = APIRouter(tags=["6 · kv-cache"])

MAX_REQUESTS = 1000
CAPACITY_TOKENS = 16_384  # the drawn cache: 32 rows of 512 token slots
MAX_SEQ_LEN = 2048
MAX_FRAMES = 120
Workload = Literal["sharegpt", "alpaca", "fixed"]
Reservation = Literal["contiguous", "pow2", "oracle"]
RESERVATIONS = ("contiguous", "pow2", "oracle")
FRAME_KEYS = ("step", "num_resident_requests", "num_waiting_requests", "num_finished_requests",
              "num_preemptions_total", "used_slots", "reserved_slots", "internal_fragmentation_slots",
              "external_fragmentation_slots", "free_slots", "waste_fraction", "waste_fraction_to_date")


class KVCacheParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)  # hashable: responses are cached per params
    block_size: int = Field(16, ge=8, le=128, description="Tokens per KV page (slots): 8, 16, 32, 64 or 128.")
    workload: Workload = Field("sharegpt", description="Request lengths: sharegpt (161 in / 338 out tokens "
                                                       "on average), alpaca (19 / 58) or fixed (161 / 338).")
    requests: int = Field(300, ge=1, le=MAX_REQUESTS,
                          description=f"Requests in the trace, all queued at step 0 (requests; 1-{MAX_REQUESTS:,}).")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seed of the request lengths (no unit; 0-2147483647).")
    compare: Reservation = Field("contiguous", description="Reservation policy drawn beside paging: contiguous "
                                                           "(max_seq_len per request), pow2 or oracle.")

    @field_validator("block_size")
    @classmethod
    def _power_of_two(cls, v: int) -> int:
        """Pages tile the drawn 512-slot rows exactly, as engines' block sizes do."""
        if v & (v - 1):
            raise ValueError(f"block_size must be a power of two (8, 16, 32, 64 or 128), got {v}")
        return v


class Allocation(BaseModel):
    request_id: int
    num_final_tokens: int = Field(description="prompt + output tokens when the request finishes")
    block_table: list[int] | None = Field(None, description="paged: physical page per logical page, in order")
    start_slot: int | None = Field(None, description="reserved region: first slot")
    num_slots: int | None = Field(None, description="reserved region: slots reserved")


class KVFrame(BaseModel):
    step: int
    num_resident_requests: int
    num_waiting_requests: int
    num_finished_requests: int
    num_preemptions_total: int
    used_slots: int = Field(description="slots holding a token's keys and values")
    reserved_slots: int = Field(description="allocated slots their request will fill later")
    internal_fragmentation_slots: int = Field(description="allocated slots their request will never fill")
    external_fragmentation_slots: int = Field(description="free slots in holes too small for the next request")
    free_slots: int
    waste_fraction: float = Field(description="1 - used / allocated at this step")
    waste_fraction_to_date: float = Field(description="time-averaged waste from step 0 to this step")
    residents: list[tuple[int, int]] = Field(description="[allocation index, num_tokens] per request in memory")


class KVPolicy(BaseModel):
    name: str
    layout: Literal["paged", "contiguous"]
    reservation: str
    drawn: bool = Field(description="true when this policy's frames are included")
    waste_fraction: float = Field(description="time-averaged share of allocated KV memory not holding tokens")
    max_concurrent_requests: int
    mean_concurrent_requests: float
    num_steps: int = Field(description="steps until the last request finished")
    num_preemptions: int
    num_finished_requests: int
    breakdown: dict[str, float] = Field(description="time-averaged shares of capacity")
    block_size: int | None = None
    num_blocks: int | None = None
    math: dict
    allocations: list[Allocation]
    frames: list[KVFrame]


class KVCacheResponse(BaseModel):
    params: dict
    capacity_slots: int
    max_seq_len: int
    frame_every: int = Field(description="steps between frames (one clock for every drawn policy)")
    trace: dict
    reference: dict
    policies: list[KVPolicy]


def _allocation_index(r: dict, paged: bool, allocs: list[dict], by_request: dict[int, list[int]]) -> int:
    """The allocation a resident belongs to: paged, any allocation of the request whose block table
    agrees with this one on their common prefix (extended when this one is longer); else its region."""
    mine = by_request.setdefault(r["request_id"], [])
    for a in mine:
        al = allocs[a]
        if paged:
            t, bt = r["block_table"], al["block_table"]
            n = min(len(t), len(bt))
            if t[:n] == bt[:n]:
                if len(t) > len(bt):
                    al["block_table"] = list(t)
                return a
        elif (al["start_slot"], al["num_slots"]) == (r["start_slot"], r["num_slots"]):
            return a
    al = {"request_id": r["request_id"], "num_final_tokens": r["num_final_tokens"]}
    if paged:
        al["block_table"] = list(r["block_table"])
    else:
        al["start_slot"], al["num_slots"] = r["start_slot"], r["num_slots"]
    allocs.append(al)
    mine.append(len(allocs) - 1)
    return len(allocs) - 1


def compact_frames(policy: dict) -> tuple[list[dict], list[dict]]:
    """(allocations, frames) for one policy: each block table or region listed once."""
    paged = policy["layout"] == "paged"
    allocs: list[dict] = []
    by_request: dict[int, list[int]] = {}
    frames = []
    for f in policy["frames"]:
        res = [(_allocation_index(r, paged, allocs, by_request), r["num_tokens"]) for r in f["residents"]]
        frames.append({**{k: f[k] for k in FRAME_KEYS}, "residents": res})
    return allocs, frames


def simulate(p: KVCacheParams) -> dict:
    """simulate_kv for every policy on one clock. The reservation policies run first (cheap); their
    frame stride is then given to the paged run, which saves it the adaptive stride's extra frames.
    If paging ran past the frames that stride allows, everything reruns with a common stride."""
    common = dict(block_size=p.block_size, workload=p.workload, num_requests=p.requests, seed=p.seed,
                  capacity_tokens=CAPACITY_TOKENS, max_seq_len=MAX_SEQ_LEN, max_frames=MAX_FRAMES)
    result = simulate_kv(**common, policies=RESERVATIONS)
    paged = simulate_kv(**common, frame_every=result["frame_every"], policies=("paged",))["policies"][0]
    if paged["num_steps"] > MAX_FRAMES * result["frame_every"]:
        return simulate_kv(**common, policies=("paged",) + RESERVATIONS)
    result["policies"].insert(0, paged)
    return result


@lru_cache(maxsize=64)
def kv_cache_json(p: KVCacheParams) -> bytes:
    """The response body for one parameter set (pure: same params, same bytes)."""
    drawn = ("paged", p.compare)
    result = simulate(p)
    policies = []
    for pol in result["policies"]:
        allocs, frames = compact_frames(pol) if pol["name"] in drawn else ([], [])
        policies.append({**{k: v for k, v in pol.items() if k not in ("frames", "capacity_slots")},
                         "drawn": pol["name"] in drawn, "allocations": allocs, "frames": frames})
    resp = KVCacheResponse(params=p.model_dump(), capacity_slots=CAPACITY_TOKENS, max_seq_len=MAX_SEQ_LEN,
                           frame_every=result["frame_every"], trace=result["trace"],
                           reference=result["reference"], policies=policies)
    return resp.model_dump_json(exclude_none=True).encode()


@router.get("/api/kv-cache", response_model=KVCacheResponse, response_model_exclude_none=True)
def get_kv_cache(p: Annotated[KVCacheParams, Query()]) -> Response:
    """Paged vs reserved-region KV memory on one seeded trace: waste, requests in memory, frames."""
    return Response(content=kv_cache_json(p), media_type="application/json")


COMPARE_WORDS = {"contiguous": "a full-length region per chat", "pow2": "a power-of-two region per chat",
                 "oracle": "exactly each chat's final length"}


def facts(p: KVCacheParams | None = None) -> dict[str, str]:
    """Waste of the compared reservation and of paging, on the chosen trace."""
    p = p or KVCacheParams()
    import json

    pols = {pol["name"]: pol for pol in json.loads(kv_cache_json(p))["policies"]}
    return {"num_requests": f"{p.requests:,}", "compare_words": COMPARE_WORDS[p.compare],
            "compare_waste_pct": f"{pols[p.compare]['waste_fraction']:.0%}",
            "paged_waste_pct": f"{pols['paged']['waste_fraction']:.1%}",
            "block_size": str(pols["paged"]["block_size"])}
