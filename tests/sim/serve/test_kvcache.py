"""KV-cache paging: the block pool's bookkeeping, and the guide's waste claim reproduced by the sim."""

from functools import cache

import numpy as np
import pytest

from inside_llm.sim.serve.kv import BlockPool, ContiguousAllocator, KVCacheManager, reservation_slots
from inside_llm.sim.serve.kvpolicies import KVRun, frame_cells, residents_at
from inside_llm.sim.serve.kvpolicies import simulate_kv as simulate_kv_typed
from inside_llm.sim.serve.workloads import make_trace


def as_rows(result):
    """The typed result as plain dicts, each frame a row with its residents (from the residencies)."""
    out = {"frame_every": result.frame_every, "policies": []}
    for pol in result.policies:
        d = {k: v for k, v in vars(pol).items() if k not in ("frames", "residencies") and v is not None}
        cols = vars(pol.frames)
        d["frames"] = [dict(zip(cols, values)) for values in zip(*cols.values())]
        for f in d["frames"]:
            f["residents"] = residents_at(pol, result.num_final_tokens, f["step"])
        d["typed"] = pol
        out["policies"].append(d)
    return out


def simulate_kv(**kw):
    return as_rows(simulate_kv_typed(**kw))


@cache
def sim(**kw):
    return simulate_kv(**kw)


def by_name(result):
    return {p["name"]: p for p in result["policies"]}


# -- block pool and manager ------------------------------------------------------------------
def test_block_pool_free_queue_and_ref_counts():
    pool = BlockPool(4)
    got = pool.get_new_blocks(3)
    assert [b.block_id for b in got] == [0, 1, 2] and all(b.ref_cnt == 1 for b in got)
    assert pool.num_free_blocks == 1 and pool.get_new_blocks(2) is None and pool.num_free_blocks == 1
    pool.free_blocks(got)
    assert pool.num_free_blocks == 4 and all(b.ref_cnt == 0 for b in got)
    assert list(pool.free_block_queue) == [3, 2, 1, 0]  # freed tail first, behind the never-used block


def test_manager_allocate_grows_table_and_returns_none_when_full():
    kv = KVCacheManager(BlockPool(5), block_size=4)
    assert len(kv.allocate(7, 6)) == 2 and kv.block_table(7) == [0, 1]
    assert kv.block_fill(7) == [4, 2]
    assert kv.allocate(7, 8) == [] and kv.block_fill(7) == [4, 4]  # fits the same pages
    assert len(kv.allocate(7, 9)) == 1 and kv.block_table(7) == [0, 1, 2]
    assert kv.allocate(8, 9) is None and kv.block_table(8) == [] and kv.pool.num_free_blocks == 2
    assert kv.free(7) == 3 and kv.pool.num_free_blocks == 5
    assert kv.allocate(8, 20) is not None and sorted(kv.block_table(8)) == [0, 1, 2, 3, 4]


def test_contiguous_first_fit_coalesces_and_counts_external_fragmentation():
    mem = ContiguousAllocator(10)
    assert [mem.allocate(r, 3) for r in range(3)] == [0, 3, 6]
    mem.free(0), mem.free(2)
    assert mem.holes == [[0, 3], [6, 4]] and mem.largest_hole == 4
    assert mem.allocate(9, 5) is None and mem.unusable_slots(5) == 7  # 7 free slots, none usable
    mem.free(1)
    assert mem.holes == [[0, 10]] and mem.allocate(9, 10) == 0


def test_reservation_slots():
    assert reservation_slots("contiguous", 300, 2048) == 2048
    assert reservation_slots("pow2", 300, 2048) == 512 and reservation_slots("pow2", 512, 2048) == 512
    assert reservation_slots("pow2", 2000, 2048) == 2048 and reservation_slots("oracle", 300, 2048) == 300


# -- the guide's claim, reproduced ------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_without_paging_60_to_80_percent_wasted_with_16_token_pages_about_4(seed):
    pols = by_name(sim(seed=seed))
    assert 0.60 <= pols["contiguous"]["waste_fraction"] <= 0.80
    assert pols["paged"]["waste_fraction"] <= 0.04
    assert (
        pols["contiguous"]["waste_fraction"]
        > pols["pow2"]["waste_fraction"]
        > pols["oracle"]["waste_fraction"]
        > pols["paged"]["waste_fraction"]
    )
    assert pols["paged"]["max_concurrent_requests"] > 2 * pols["contiguous"]["max_concurrent_requests"]


def test_waste_matches_closed_form_whatever_the_schedule():
    """Each request holds prompt+1 .. prompt+output tokens over its resident steps, so the integrals
    do not depend on admission order or preemptions: check them against a direct sum."""
    trace = make_trace("sharegpt", 300, 0, None, 2048)
    p, o = trace.num_prompt_tokens, trace.num_output_tokens
    used = sum(int(np.sum(np.arange(pi + 1, pi + oi + 1))) for pi, oi in zip(p, o))
    paged = sum(int(np.sum(-(-np.arange(pi + 1, pi + oi + 1) // 16) * 16)) for pi, oi in zip(p, o))
    pols = by_name(sim(seed=0))
    assert pols["paged"]["num_preemptions"] > 0  # the identity holds through preemptions too
    assert pols["paged"]["waste_fraction"] == pytest.approx(1 - used / paged, abs=1e-6)
    assert pols["contiguous"]["waste_fraction"] == pytest.approx(1 - used / (2048 * o.sum()), abs=1e-6)


def test_every_request_finishes_and_breakdown_adds_up():
    for pol in sim(seed=0)["policies"]:
        assert pol["num_finished_requests"] == 300
        b = pol["breakdown"]
        assert b["used"] + b["reserved"] + b["internal_fragmentation"] + b["free"] == pytest.approx(1)
        assert 0 <= b["external_fragmentation"] <= b["free"] + 1e-9


# -- frames: exactly what the stage draws ------------------------------------------------------
def test_frames_are_consistent_pictures_of_memory():
    result = sim(seed=0)
    every = result["frame_every"]
    for pol in result["policies"]:
        assert 0 < len(pol["frames"]) <= 120
        for fr in pol["frames"]:
            assert fr["step"] % every == 0
            total = fr["used_slots"] + fr["reserved_slots"] + fr["internal_fragmentation_slots"] + fr["free_slots"]
            assert total == pol["capacity_slots"]
            assert fr["used_slots"] == sum(r["num_tokens"] for r in fr["residents"])
            check_layout(pol, fr)


def check_layout(pol, fr):
    owned = []
    for r in fr["residents"]:
        assert 1 <= r["num_tokens"] <= r["num_final_tokens"]
        if pol["layout"] == "paged":
            assert len(r["block_table"]) == -(-r["num_tokens"] // pol["block_size"])
            owned += r["block_table"]
        else:
            owned += range(r["start_slot"], r["start_slot"] + r["num_slots"])
            assert r["num_slots"] >= r["num_final_tokens"]
    assert len(owned) == len(set(owned))  # no page or slot has two owners
    limit = pol.get("num_blocks", pol["capacity_slots"])
    assert all(0 <= x < limit for x in owned)


def test_frame_cells_expand_residents_into_the_drawn_grid():
    for pol in sim(seed=0)["policies"]:
        fr = pol["frames"][3]
        grid = frame_cells(pol["typed"], fr["residents"])
        assert sum(grid["num_filled"]) == fr["used_slots"]
        owned = {r for r in grid["owner"] if r is not None}
        assert owned == {r["request_id"] for r in fr["residents"]}
        if pol["layout"] == "paged":
            assert len(grid["owner"]) == pol["num_blocks"]
            assert sum(o is not None for o in grid["owner"]) * 16 == pol["capacity_slots"] - fr["free_slots"]


def test_frame_every_is_honoured_and_frames_are_downsampled_but_metrics_are_not():
    full = by_name(sim(seed=0))["paged"]
    sparse = by_name(simulate_kv(seed=0, frame_every=7, max_frames=5, policies=("paged",)))["paged"]
    assert [f["step"] for f in sparse["frames"]] == [0, 7, 14, 21, 28]
    assert sparse["waste_fraction"] == full["waste_fraction"] and sparse["num_steps"] == full["num_steps"]


def test_deterministic_per_seed():
    assert simulate_kv_typed(seed=5, num_requests=60) == simulate_kv_typed(seed=5, num_requests=60)
    assert simulate_kv_typed(seed=5, num_requests=60) != simulate_kv_typed(seed=6, num_requests=60)


def test_block_size_trades_waste():
    wastes = [
        by_name(simulate_kv(block_size=b, num_requests=100, policies=("paged",)))["paged"]["waste_fraction"]
        for b in (8, 16, 32, 64)
    ]
    assert wastes == sorted(wastes) and wastes[0] < 0.01


def test_small_memory_forces_preemption_and_everyone_still_finishes():
    run = KVRun("paged", make_trace("sharegpt", 80, 0, None, 2048), 2048, 16).run()
    assert run.num_preemptions > 0 and run.num_finished == 80 and run.max_resident >= 1
    stays = run.residencies
    assert len(stays) == 80 + run.num_preemptions
    assert all(first <= last for _, first, last, _, _ in stays)


def test_residencies_give_the_residents_of_any_step_not_only_frames():
    """Stepping every step (frame_every=1) and reading residents from the residencies of a sparse run agree."""
    dense = simulate_kv(seed=2, num_requests=60, capacity_tokens=4096, frame_every=1, max_frames=1000)
    sparse = simulate_kv_typed(seed=2, num_requests=60, capacity_tokens=4096, frame_every=64, max_frames=100)
    for pol, typed in zip(dense["policies"], sparse.policies):
        assert typed.num_preemptions == pol["num_preemptions"]
        for f in pol["frames"][::7]:
            assert residents_at(typed, sparse.num_final_tokens, f["step"]) == f["residents"]
            assert sum(r["num_tokens"] for r in f["residents"]) == f["used_slots"]


@pytest.mark.parametrize(
    "kw, name",
    [
        ({"block_size": 0}, "block_size"),
        ({"block_size": 257}, "block_size"),
        ({"num_requests": 10_001}, "num_requests"),
        ({"num_requests": 0}, "num_requests"),
        ({"capacity_tokens": 1000}, "capacity_tokens"),
        ({"capacity_tokens": 2100, "block_size": 200}, "capacity_tokens"),
        ({"max_frames": 0}, "max_frames"),
        ({"frame_every": 0}, "frame_every"),
        ({"workload": "nope"}, "workload"),
        ({"policies": ("buddy",)}, "policies"),
        ({"max_seq_len": 8}, "max_seq_len"),
    ],
)
def test_bounds_name_the_parameter(kw, name):
    with pytest.raises(ValueError, match=name):
        simulate_kv(**kw)


@pytest.mark.parametrize("workload", ["sharegpt", "fixed"])
def test_max_concurrent_requests_is_the_peak_seen_in_frames(workload):
    """Counted also when admission stops because the head of the queue does not fit."""
    for p in simulate_kv(workload=workload, num_requests=100, max_frames=1000, frame_every=1)["policies"]:
        assert p["max_concurrent_requests"] == max(f["num_resident_requests"] for f in p["frames"]), p["name"]
