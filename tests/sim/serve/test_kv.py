"""Prefix caching in the core's KV manager (serve/kv.py), as vLLM does it: pages shared by requests with the
same leading hashes, counted once, freed when the last user leaves, kept as evictable and evicted least
recently freed first; and in the scheduler: nothing changes when no prefix is shared."""

import numpy as np
import pytest

from inside_llm.sim.serve.clocks import SimpleStepCost
from inside_llm.sim.serve.kv import BlockPool, KVCacheManager, PageCount, PagePool
from inside_llm.sim.serve.records import policy_run
from inside_llm.sim.serve.simulate import batching_run, prefix_block_hashes, simulate_batching, with_system_prompt
from inside_llm.sim.serve.workloads import make_trace

H = prefix_block_hashes(8, 4)  # a system prompt of 2 full pages of 4 tokens


def manager(num_blocks=8):
    """Requests 0-4 begin with the system prompt; 5-9 have no hashes."""
    kv = KVCacheManager(BlockPool(num_blocks), 4, 10)
    for rid in range(5):
        kv.set_block_hashes(rid, H)
    return kv


def test_hashes_chain_so_equal_hashes_mean_equal_prefixes():
    assert len(H) == 2 and H[0] != H[1] and prefix_block_hashes(8, 4) == H
    assert prefix_block_hashes(12, 4)[:2] == H and prefix_block_hashes(3, 4) == []


def test_shared_pages_are_counted_once():
    kv = manager()
    assert kv.allocate_cached(0, 10) == 0  # the first finds nothing: 3 pages, its 2 prefix pages cached
    assert kv.pool.num_cached_blocks == 2 and kv.pool.num_used_blocks == 3
    assert kv.cached_prefix_tokens(1) == 8
    assert kv.allocate_cached(1, 11) == 8  # the second shares 2 pages and takes 1 of its own
    assert kv.block_table(1)[:2] == kv.block_table(0)[:2] and kv.block_table(1)[2] != kv.block_table(0)[2]
    assert kv.pool.num_used_blocks == 4  # 3 + 1, not 6
    assert [b.ref_cnt for b in kv.req_to_blocks[1]] == [2, 2, 1]
    assert (kv.num_query_tokens, kv.num_hit_tokens) == (16, 8)


def test_shared_pages_are_freed_when_the_last_user_leaves_and_stay_cached():
    kv = manager()
    kv.allocate_cached(0, 10)
    kv.allocate_cached(1, 10)
    shared = kv.block_table(0)[:2]
    kv.free(0)
    assert kv.pool.num_used_blocks == 3 and not set(shared) & set(kv.pool.free_block_queue)
    kv.free(1)
    assert kv.pool.num_free_blocks == 8 and set(shared) <= set(kv.pool.free_block_queue)
    assert kv.pool.num_cached_blocks == 2  # evictable: free, yet still found
    assert kv.allocate_cached(2, 9) == 8 and kv.block_table(2)[:2] == shared  # taken back out of the free queue
    assert kv.pool.num_free_blocks == 5 and not set(shared) & set(kv.pool.free_block_queue)


def test_evictable_pages_are_evicted_least_recently_freed_first_under_pressure():
    """A request's pages are freed tail first (as vLLM), so its first prefix page is evicted last."""
    kv = manager(num_blocks=4)
    kv.allocate_cached(0, 9)  # pages 0, 1 (the cached prefix) and 2
    kv.free(0)
    assert list(kv.pool.free_block_queue) == [3, 2, 1, 0]
    assert kv.allocate(5, 12) is not None and kv.block_table(5) == [3, 2, 1]  # a request with no hashes
    assert kv.pool.num_evictions == 1 and kv.pool.num_cached_blocks == 1  # page 1 lost its hash
    assert kv.cached_prefix_tokens(1) == 4  # the chain still finds page 0
    assert kv.allocate(6, 4) is not None and kv.pool.num_evictions == 2 and kv.cached_prefix_tokens(1) == 0


def test_admission_counts_evictable_hits_against_free_pages():
    """A hit on a free cached page takes it out of the free queue, so it counts against the free pages."""
    kv = manager(num_blocks=4)
    kv.allocate_cached(0, 8)
    kv.free(0)
    assert kv.allocate(7, 8) is not None  # 2 uncached pages in use: 2 free, both cached
    assert kv.allocate_cached(1, 13) is None  # needs its 2 cached pages + 2 new: only 2 are free
    assert kv.pool.num_free_blocks == 2 and kv.block_table(1) == [] and kv.num_query_tokens == 8
    assert kv.allocate_cached(1, 8) == 8  # its 2 cached pages alone fit
    assert kv.pool.num_free_blocks == 0


def trace_with_prompt(share, n=60, seed=3, rate=8.0):
    return with_system_prompt(make_trace("sharegpt", n, seed, rate), share, 256)


def test_no_shared_prefix_runs_exactly_as_without_a_cache():
    trace, sharing = trace_with_prompt(0.5)
    plain = batching_run("continuous", trace, 8, SimpleStepCost(), 400, 16, 2048)
    nobody = batching_run(
        "continuous", trace, 8, SimpleStepCost(), 400, 16, 2048, sharing=np.zeros_like(sharing), prefix_tokens=256
    )
    assert list(plain.steps.durations) == list(nobody.steps.durations)
    assert policy_run(plain.steps, 100.0, 1000) == policy_run(nobody.steps, 100.0, 1000)  # frames, spans, metrics
    assert nobody.steps.prefix_query_tokens == 0
    assert simulate_batching(num_requests=30, seed=4) == simulate_batching(num_requests=30, seed=4, shared_prefix=0.0)


def test_shared_system_prompt_prefills_less_and_the_first_token_comes_sooner_with_the_same_answers():
    trace, sharing = trace_with_prompt(1.0)
    args = ("continuous", trace, 8, SimpleStepCost(), 4096, 16, 2048)
    cold = batching_run(*args)
    warm = batching_run(*args, sharing=sharing, prefix_tokens=256)
    assert warm.output.tolist() == cold.output.tolist() == trace.num_output_tokens.tolist()
    prefill = lambda s: sum(r.num_prefill_tokens * r.num_steps for r in s.steps.records)  # noqa: E731
    assert prefill(warm) <= prefill(cold) - 59 * 256  # every admission but the first skips 16 pages
    ttft = lambda s: np.median(s.first_token_s - s.arrival_s)  # noqa: E731
    assert ttft(warm) < ttft(cold)
    assert warm.steps.prefix_hit_tokens == 59 * 256 and warm.steps.prefix_query_tokens == 60 * 256


def test_under_memory_pressure_cached_pages_are_evicted_and_everyone_finishes():
    trace, sharing = trace_with_prompt(0.5, n=80, rate=30.0)
    s = batching_run("continuous", trace, 16, SimpleStepCost(), 160, 16, 2048, sharing=sharing, prefix_tokens=256)
    assert s.num_preemptions > 0 and s.steps.num_prefix_evictions > 0
    assert s.output.tolist() == trace.num_output_tokens.tolist()
    assert s.kv.pool.num_free_blocks == s.kv.pool.num_blocks  # cached pages left are all evictable
    assert s.steps.prefix_hit_tokens > 0
    slow = batching_run(
        "continuous", trace, 16, SimpleStepCost(), 160, 16, 2048, False, sharing=sharing, prefix_tokens=256
    )
    assert list(slow.steps.durations) == list(s.steps.durations)  # the decode fast-forward holds with a cache


def test_page_pool_and_page_count_are_the_block_pools_fast_paths():
    """PagePool (page ids only, no prefix caching) deals the same tables as BlockPool after any sequence of
    growths, batch growths and frees; PageCount (counts only) the same counts."""
    rng = np.random.default_rng(0)
    managers = [KVCacheManager(pool(64), 4, 12) for pool in (BlockPool, PagePool, PageCount)]
    held = np.zeros(12, dtype=np.int64)
    for _ in range(400):
        rid, op = int(rng.integers(12)), rng.random()
        if op < 0.2:
            outs = [kv.free(rid) for kv in managers]
            held[rid] = 0
        elif op < 0.6:
            n = int(held[rid] + rng.integers(1, 9))
            outs = [kv.allocate(rid, n) is None for kv in managers]
            held[rid] = held[rid] if outs[0] else n
        else:
            ids = np.flatnonzero(held)
            n = held[ids] + rng.integers(0, 6, len(ids))
            outs = [kv.allocate_all(ids, n) for kv in managers]
            held[ids] = n if outs[0] else held[ids]
        assert outs[0] == outs[1] == outs[2]
        assert [managers[0].block_table(r) for r in range(12)] == [managers[1].block_table(r) for r in range(12)]
        assert len({kv.pool.num_free_blocks for kv in managers}) == 1
        assert [managers[0].num_slots(r) for r in range(12)] == [managers[2].num_slots(r) for r in range(12)]
        assert [managers[0].block_fill(r) for r in range(12)] == [managers[2].block_fill(r) for r in range(12)]
    for kv in managers[1:]:
        with pytest.raises(ValueError, match="BlockPool"):
            kv.set_block_hashes(0, H)
    with pytest.raises(ValueError, match="names no pages"):
        managers[2].block_table(0)


def test_max_decode_steps_is_the_largest_k_that_fits():
    """The closed form (the j-th new pages of all requests come before any (j+1)-th) against counting."""
    rng = np.random.default_rng(1)
    for _ in range(300):
        bs, n = int(rng.choice([1, 4, 16])), int(rng.integers(1, 8))
        kv = KVCacheManager(PagePool(int(rng.integers(n * 3, n * 12))), bs, n)
        ids, tokens = np.arange(n), rng.integers(0, 40, n)
        if any(kv.allocate(r, t + 1) is None for r, t in zip(ids.tolist(), tokens.tolist())):
            continue
        k_max = int(rng.integers(1, 200))
        got = kv.max_decode_steps(ids, tokens, k_max)
        fits = [int(np.sum(kv.blocks_needed(ids, tokens + k))) <= kv.pool.num_free_blocks for k in range(1, k_max + 1)]
        assert got == (fits.index(False) if False in fits else k_max), (bs, n, tokens, k_max)
