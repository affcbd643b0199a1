"""KV-cache memory, the one KV manager of the serving core: vLLM's paged block pool, and the
reservation schemes that came before it, behind one interface.

The interface the scheduler sees (both managers): `allocate(request_id, num_tokens)` grows the request's
memory to hold `num_tokens` tokens in total and returns what it newly took (a list, [] if nothing was
needed) or None, taking nothing, when memory is short; `free(request_id)` gives it all back;
`num_slots(request_id)` is the token slots it holds; `layout(request_id)` is where they are (the block
table, or the region); `unusable_slots(next_request_id)` is the free memory the next request cannot use.

Vocabulary follows vLLM (vllm/v1/core/block_pool.py, kv_cache_manager.py):
- a `Block` is one physical page of `block_size` token slots (block_id, ref_cnt, num_tokens);
- the `BlockPool` owns every block and a free queue (FIFO: the least recently freed block is
  handed out first); `num_free_blocks` is what admission looks at;
- the `KVCacheManager` keeps one block table per request (logical block index -> physical block
  id). `allocate(request_id, num_tokens)` grows the table to cover `num_tokens` tokens and returns
  the new blocks, or None, allocating nothing, when the pool has too few free blocks.
- `ContiguousAllocator` is the pre-paging scheme (Orca, FasterTransformer): each request gets one
  contiguous region of slots, first fit over an address-ordered list of holes, so free memory can
  be split into holes too small for the next request (external fragmentation).
Units: tokens == slots; one slot holds one token's keys and values for every layer.
- Prefix caching, as vLLM does it (vllm/v1/core/block_pool.py, kv_cache_utils.py): a full page can carry
  a `block_hash`, chained with its parent's (hash of the page's tokens and the hash of the page before),
  so equal hashes mean equal prefixes. `BlockPool.cached_block_hash_to_block` maps hashes to pages; a
  page whose last user leaves keeps its hash and sits in the free queue as *evictable*; a new request
  whose leading hashes are cached takes those pages (ref_cnt += 1, out of the free queue if they were
  there) instead of computing them; a page handed out from the free queue loses its hash (evicted), and
  the free queue is least recently freed first, so eviction is LRU. The caller gives each request's
  hashes (`set_block_hashes`); `cached_prefix_tokens` is vLLM's get_computed_blocks. A request with no
  hashes behaves exactly as without caching.
- `ReservedManager` puts ContiguousAllocator behind the same interface: at its first allocation a request
  reserves a region sized by a reservation policy (`reservation_slots`: contiguous = max_seq_len,
  pow2 = next power of two of the final length, oracle = exactly the final length).

The scheduler over these managers is serve/scheduler.py; chapter 6's simulation is sim/serve/kvpolicies.py.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from inside_llm.sim.serve.workloads import check_int


def num_blocks_for(num_tokens, block_size: int):
    """Blocks needed to hold num_tokens tokens: ceil(num_tokens / block_size) (ints or numpy arrays)."""
    return -(-num_tokens // block_size)


def check_pool(capacity_field: str, capacity_tokens: int, block_size: int, max_seq_len: int, max_capacity: int) -> None:
    """ValueError naming the parameter and its bound unless the pool is sound: blocks of 1-256 tokens,
    sequences of 16-32,768 tokens, and a capacity (the parameter capacity_field) of at most max_capacity
    tokens that holds the longest sequence in whole blocks."""
    check_int("block_size", block_size, 1, 256)
    check_int("max_seq_len", max_seq_len, 16, 32_768)
    check_int(capacity_field, capacity_tokens, max_seq_len, max_capacity)
    if (capacity_tokens // block_size) * block_size < max_seq_len:
        raise ValueError(
            f"{capacity_field} must hold max_seq_len={max_seq_len} tokens in whole "
            f"blocks of {block_size}, got {capacity_tokens}"
        )


@dataclass(slots=True)
class Block:
    """One physical page: its id, how many block tables hold it, and its prefix hash once it is full and
    cached (None otherwise). (How full it is follows from the tokens its requests hold: block_fill.)"""

    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None


class BlockPool:
    """All `num_blocks` blocks, the free queue and the prefix cache. Invariants: a block is in the free queue
    iff ref_cnt == 0; a block is in cached_block_hash_to_block iff it has a block_hash (in use, or free and
    evictable)."""

    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.blocks: list[Block | None] = [None] * num_blocks  # made when first handed out
        # block ids, least recently freed first; an OrderedDict so a cache hit can take one from the middle
        self.free_block_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.cached_block_hash_to_block: dict[int, Block] = {}
        self.num_evictions = 0  # cached pages handed out again (their hash dropped)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_queue)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free_block_queue)

    def get_new_blocks(self, num_blocks: int) -> list[Block] | None:
        """Pop `num_blocks` blocks from the head of the free queue (ref_cnt -> 1), or None if too few."""
        if num_blocks > len(self.free_block_queue):
            return None
        popitem, blocks = self.free_block_queue.popitem, self.blocks
        out = []
        for _ in range(num_blocks):
            i = popitem(last=False)[0]
            block = blocks[i]
            if block is None:
                block = blocks[i] = Block(i, 1)
            else:
                block.ref_cnt = 1
                if block.block_hash is not None:  # evict: the least recently freed cached page goes first
                    del self.cached_block_hash_to_block[block.block_hash]
                    block.block_hash = None
                    self.num_evictions += 1
            out.append(block)
        return out

    def get_cached_block(self, block_hash: int) -> Block | None:
        return self.cached_block_hash_to_block.get(block_hash)

    def touch(self, blocks: list[Block]) -> None:
        """A new user of cached blocks: ref_cnt += 1, and out of the free queue if nobody held them."""
        for block in blocks:
            if block.ref_cnt == 0:
                del self.free_block_queue[block.block_id]
            block.ref_cnt += 1

    def cache_block(self, block: Block, block_hash: int) -> None:
        """Register a full block under its hash (a page already cached under that hash stays the one found)."""
        if block.block_hash is None and block_hash not in self.cached_block_hash_to_block:
            block.block_hash = block_hash
            self.cached_block_hash_to_block[block_hash] = block

    def reset_prefix_cache(self) -> None:
        """Forget every page's hash (vLLM's reset_prefix_cache): after a failed step, whose pages may hold
        half-written keys, nothing cached may be found again."""
        for block in self.cached_block_hash_to_block.values():
            block.block_hash = None
        self.cached_block_hash_to_block.clear()

    @property
    def num_cached_blocks(self) -> int:
        return len(self.cached_block_hash_to_block)

    def free_blocks(self, blocks: list[Block]) -> None:
        """Drop one reference from each block; blocks reaching ref_cnt 0 go to the free queue's tail.

        Like vLLM, a request's blocks are freed tail first, so its last (least shareable) page is
        reused first.
        """
        for block in reversed(blocks):
            block.ref_cnt -= 1
            if block.ref_cnt == 0:  # a cached block keeps its hash: evictable, reusable until handed out
                self.free_block_queue[block.block_id] = None


class PagePool:
    """BlockPool's fast path for runs without prefix caching: a page is only its id (no Block, no ref count,
    no hash), and the free queue a list read from a moving head, so a batch's pages are taken in one slice.
    The same order as BlockPool's queue (least recently freed first; a table freed tail first), so the same
    pages go to the same requests. KVCacheManager over a PagePool keeps block tables of page ids."""

    cached_block_hash_to_block: dict = {}  # never written: nothing is cached  # noqa: RUF012
    num_evictions = 0

    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.queue, self.head = list(range(num_blocks)), 0  # free page ids: queue[head:]

    @property
    def num_free_blocks(self) -> int:
        return len(self.queue) - self.head

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.queue) + self.head

    def get_new_blocks(self, num_blocks: int) -> list[int] | None:
        """The first num_blocks free page ids, or None if too few."""
        head, queue = self.head, self.queue
        if num_blocks > len(queue) - head:
            return None
        out = queue[head : head + num_blocks]
        self.head = head + num_blocks
        if self.head > self.num_blocks:  # drop the taken ids now and then: the list stays short
            del queue[: self.head]
            self.head = 0
        return out

    def free_blocks(self, blocks: list[int]) -> None:
        """Pages back to the free queue's tail, the table's last page first (as BlockPool)."""
        self.queue.extend(reversed(blocks))


class PageCount:
    """The pool counted only (no page ids, no tables): chapter 7's simulation, which draws no page, on its
    fast path. KVCacheManager over a PageCount keeps each request's page count (`held`) and nothing else."""

    cached_block_hash_to_block: dict = {}  # noqa: RUF012  # never written: nothing is cached
    num_evictions = 0

    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = self.num_free_blocks = num_blocks

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks


class KVCacheManager:
    """Per-request block tables over one BlockPool. Tokens are laid out in order: token t of a
    request lives in logical block t // block_size, slot t % block_size. With num_requests (request ids
    0 .. num_requests - 1), `held` counts each request's blocks in a numpy column for allocate_all.

    cache_on_allocate=False (the live engine, whose pages hold real keys and values): a page is registered
    only when the caller says its tokens are computed (`cache_full_blocks(request_id, num_computed)`, after
    the forward pass that wrote them), so no request can find a page that a step has not written yet (a
    request preempted before its step ran would otherwise leave hashed pages of garbage behind)."""

    def __init__(
        self,
        pool: BlockPool | PagePool | PageCount,
        block_size: int,
        num_requests: int = 0,
        cache_on_allocate: bool = True,
    ):
        self.pool, self.cache_on_allocate = pool, cache_on_allocate
        self.counts_only = isinstance(pool, PageCount)  # no tables: `held` is each request's page count
        self.plain = self.counts_only or isinstance(pool, PagePool)  # pages are ids (or counts): no prefix caching
        if self.counts_only and not num_requests:
            raise ValueError("a PageCount pool counts pages in columns: give num_requests")
        self.block_size = block_size
        self.req_to_blocks: dict[int, list[Block]] = {}
        self.num_tokens_of: dict[int, int] = {}  # tokens each request's table was last grown to hold
        self.tokens = np.zeros(num_requests, dtype=np.int64)  # the same, as a column (with num_requests)
        self.held = np.zeros(num_requests, dtype=np.int64)
        self.block_hashes: dict[int, list[int]] = {}  # prefix caching: each request's full-page hashes
        self.num_query_tokens = self.num_hit_tokens = 0  # prefix-cache lookups at admission, in tokens

    def set_block_hashes(self, request_id: int, block_hashes: list[int]) -> None:
        """The chained hashes of request_id's leading full pages (the pages that may be shared)."""
        if self.plain:
            raise ValueError("prefix caching needs a BlockPool (a PagePool's or PageCount's pages carry no hash)")
        self.block_hashes[request_id] = block_hashes

    def cached_blocks(self, request_id: int) -> list[Block]:
        """The longest run of request_id's leading pages already in the cache (vLLM's get_computed_blocks)."""
        out, get = [], self.pool.cached_block_hash_to_block.get
        for h in self.block_hashes.get(request_id, ()):
            block = get(h)
            if block is None:
                break
            out.append(block)
        return out

    def cached_prefix_tokens(self, request_id: int) -> int:
        """Tokens of request_id a new allocation would find computed already (0 without hashes)."""
        return len(self.cached_blocks(request_id)) * self.block_size if request_id in self.block_hashes else 0

    def allocate_cached(self, request_id: int, num_tokens: int) -> int | None:
        """allocate() for a request that holds nothing yet, reusing its cached leading pages: the tokens
        found computed (a multiple of block_size), or None, taking nothing, if memory is short. Counts
        the lookup (num_query_tokens: its hashed tokens; num_hit_tokens: those found)."""
        hits = self.cached_blocks(request_id)
        bs = self.block_size
        new = -(-num_tokens // bs) - len(hits)
        evictable = sum(1 for b in hits if b.ref_cnt == 0)  # leave the free queue when taken
        if new + evictable > self.pool.num_free_blocks:
            return None
        self.pool.touch(hits)
        table = self.req_to_blocks[request_id] = list(hits)
        self.num_query_tokens += len(self.block_hashes.get(request_id, ())) * bs
        self.num_hit_tokens += len(hits) * bs
        if new > 0:
            table += self.pool.get_new_blocks(new)
        self.num_tokens_of[request_id] = num_tokens
        if len(self.tokens):
            self.tokens[request_id] = num_tokens
        if len(self.held):
            self.held[request_id] = len(table)
        self.cache_full_blocks(request_id)
        return len(hits) * bs

    def allocate(self, request_id: int, num_tokens: int) -> list[Block] | None:
        """Grow request_id's block table to hold `num_tokens` tokens in total (not new tokens).

        Returns the newly allocated blocks ([] if the table already covers them), or None if the
        pool lacks free blocks; then nothing is allocated, as in vLLM's allocate_slots.
        """
        bs = self.block_size
        if self.counts_only:  # pages are counted, not named: [None] per new page
            need = -(-num_tokens // bs) - int(self.held[request_id])
            if need > self.pool.num_free_blocks:
                return None
            self.tokens[request_id] = num_tokens
            if need <= 0:
                return []
            self.pool.num_free_blocks -= need
            self.held[request_id] += need
            return [None] * need
        table = self.req_to_blocks.get(request_id)
        if table is None:
            table = self.req_to_blocks[request_id] = []
        elif num_tokens <= len(table) * bs:  # fast path: the last page has room
            self.num_tokens_of[request_id] = num_tokens
            if len(self.tokens):
                self.tokens[request_id] = num_tokens
            if request_id in self.block_hashes:
                self.cache_full_blocks(request_id)
            return []
        need = -(-num_tokens // bs) - len(table)  # num_blocks_for, inlined: the scheduler's hottest call
        new = self.pool.get_new_blocks(need) if need > 0 else []
        if new is None:
            if not table:
                del self.req_to_blocks[request_id]
            return None
        self.num_tokens_of[request_id] = num_tokens
        if len(self.tokens):
            self.tokens[request_id] = num_tokens
        if new:
            table += new
            if len(self.held):
                self.held[request_id] = len(table)
        if request_id in self.block_hashes:
            self.cache_full_blocks(request_id)
        return new

    def cache_full_blocks(self, request_id: int, num_computed: int | None = None) -> None:
        """Register request_id's pages that are full (within the tokens it holds) and hashed. As in vLLM's
        allocate_slots, a page is cached when it is allocated for tokens computed in this step; with
        cache_on_allocate=False only when called with num_computed, the tokens whose keys are written."""
        if num_computed is None:
            if not self.cache_on_allocate:
                return
            num_computed = self.num_tokens_held(request_id)
        hashes, table = self.block_hashes.get(request_id, ()), self.req_to_blocks.get(request_id, ())
        full = min(len(hashes), len(table), num_computed // self.block_size)
        for i in range(full):
            self.pool.cache_block(table[i], hashes[i])

    def free(self, request_id: int) -> int:
        """Return all of request_id's blocks to the pool; the number of blocks freed."""
        if self.counts_only:
            n = int(self.held[request_id])
            self.pool.num_free_blocks += n
            self.held[request_id] = self.tokens[request_id] = 0
            return n
        table = self.req_to_blocks.pop(request_id, [])
        self.num_tokens_of.pop(request_id, None)
        if len(self.tokens):
            self.tokens[request_id] = 0
        self.pool.free_blocks(table)
        if len(self.held):
            self.held[request_id] = 0
        return len(table)

    def num_tokens_held(self, request_id: int) -> int:
        """Tokens request_id's table was last grown to hold (allocate_all writes only the column)."""
        return int(self.tokens[request_id]) if len(self.tokens) else self.num_tokens_of.get(request_id, 0)

    def block_fill(self, request_id: int) -> list[int]:
        """Tokens held in each block of request_id's table, in order (all full but the last)."""
        n, bs = self.num_tokens_held(request_id), self.block_size
        return [min(bs, n - i * bs) for i in range(self.num_slots(request_id) // bs)]

    def blocks_needed(self, request_ids: np.ndarray, num_tokens: np.ndarray) -> np.ndarray:
        """New pages each of request_ids needs so its table holds num_tokens (0 where it does already)."""
        return np.maximum(-(-num_tokens // self.block_size) - self.held[request_ids], 0)

    def fits(self, request_id: int, num_tokens: int) -> bool:
        """Would allocate(request_id, num_tokens) succeed for a request that holds nothing (no cache hits)?"""
        return -(-num_tokens // self.block_size) <= self.pool.num_free_blocks

    def hold(self, request_ids: np.ndarray, num_tokens: np.ndarray) -> None:
        """allocate() for requests whose tables cover num_tokens already (blocks_needed == 0)."""
        self.tokens[request_ids] = num_tokens
        if self.block_hashes:
            for rid in request_ids.tolist():
                if rid in self.block_hashes:
                    self.cache_full_blocks(rid)

    def allocate_all(self, request_ids: np.ndarray, num_tokens: np.ndarray) -> bool:
        """allocate() for every request of request_ids at once (num_tokens: the total each must hold), if
        the free blocks cover all of them; else take nothing and return False. The scheduler's batch path
        (needs num_requests): counted in numpy over `held`, the new blocks taken in one call and dealt to
        the requests that cross a page boundary, in order."""
        extra = -(-num_tokens // self.block_size) - self.held[request_ids]  # blocks_needed, before the max
        grow = (extra > 0).nonzero()[0]
        if not len(grow):
            self.tokens[request_ids] = num_tokens
            return True
        needs = extra[grow]
        total = int(np.add.reduce(needs))
        if total > self.pool.num_free_blocks:
            return False
        self.tokens[request_ids] = num_tokens
        rows = request_ids[grow]
        if self.counts_only:
            self.pool.num_free_blocks -= total
            self.held[rows] += needs
            return True
        new = self.pool.get_new_blocks(total)  # one call for the whole batch, then dealt out in order
        tables, hashed, at = self.req_to_blocks, self.block_hashes, 0
        for rid, k in zip(rows.tolist(), needs.tolist()):
            tables[rid] += new[at : at + k]  # running requests: their tables exist
            at += k
            if rid in hashed:
                self.cache_full_blocks(rid)
        self.held[rows] += needs
        return True

    def max_decode_steps(self, request_ids: np.ndarray, num_tokens: np.ndarray, k_max: int) -> int:
        """Largest k <= k_max such that each request of request_ids can hold num_tokens + k tokens at once
        (k = 1 must already fit: the scheduler allocated it)."""
        bs, free = self.block_size, self.pool.num_free_blocks
        if free >= len(request_ids) * (k_max // bs + 1):
            return k_max  # each request needs at most k_max // block_size + 1 new pages: they are free
        n, room = len(request_ids), self.held[request_ids] * bs - num_tokens  # free slots in each one's pages
        if n and 0 < room.min() and room.max() <= bs:
            # request i takes its j-th new page at k = room_i + (j - 1) * bs + 1, and the j-th pages of all
            # requests come before any (j+1)-th: the free pages run out at the (free + 1)-th of these
            q, r = divmod(free, n)
            return min(k_max, int(np.partition(room, r)[r]) + q * bs)
        room = free + int(self.held[request_ids].sum())  # the pages they hold, and the free ones

        def fits(k: int) -> bool:
            return int(np.sum(num_blocks_for(num_tokens + k, bs))) <= room

        if fits(k_max):
            return k_max  # the usual case: memory is not the limit
        lo, hi = 1, k_max
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def unusable_slots(self, next_request_id: int | None) -> int:
        """Free slots no request can use: none, every free page fits any request (the slots after the last
        whole page are the caller's: they are not in the pool)."""
        return 0

    def layout(self, request_id: int) -> list[int]:
        return self.block_table(request_id)

    def block_table(self, request_id: int) -> list[int]:
        """Logical block index -> physical block id for request_id ([] if it holds none)."""
        if self.counts_only:
            raise ValueError("a PageCount pool names no pages: use a PagePool for block tables")
        table = self.req_to_blocks.get(request_id, [])
        return list(table) if self.plain else [b.block_id for b in table]

    def num_slots(self, request_id: int) -> int:
        """Token slots allocated to request_id: len(block table) * block_size."""
        if self.counts_only:
            return int(self.held[request_id]) * self.block_size
        return len(self.req_to_blocks.get(request_id, ())) * self.block_size


def reservation_slots(policy: str, final_len: int, max_seq_len: int) -> int:
    """Slots a reservation policy sets aside for a request whose final length is final_len tokens."""
    if policy == "contiguous":
        return max_seq_len
    if policy == "pow2":
        return min(1 << (final_len - 1).bit_length(), max_seq_len)
    return final_len  # oracle


class ReservedManager:
    """One contiguous region per request, reserved at its first allocation and sized by a reservation
    policy from the request's final length (Orca, FasterTransformer); KVCacheManager's interface over a
    ContiguousAllocator. num_final_tokens[request_id]: prompt + output, the length it grows to."""

    def __init__(self, policy: str, capacity: int, max_seq_len: int, num_final_tokens: list[int]):
        self.allocator = ContiguousAllocator(capacity)
        self.region_slots = [reservation_slots(policy, n, max_seq_len) for n in num_final_tokens]

    def allocate(self, request_id: int, num_tokens: int) -> list[tuple[int, int]] | None:
        """[] if the region already covers num_tokens; [(start, num_slots)] when it is reserved now; None if
        no hole is large enough (or the region is smaller than num_tokens)."""
        region = self.allocator.regions.get(request_id)
        if region is not None:
            return [] if num_tokens <= region[1] else None
        size = self.region_slots[request_id]
        if num_tokens > size or (start := self.allocator.allocate(request_id, size)) is None:
            return None
        return [(start, size)]

    def free(self, request_id: int) -> int:
        return self.allocator.free(request_id) if request_id in self.allocator.regions else 0

    def num_slots(self, request_id: int) -> int:
        region = self.allocator.regions.get(request_id)
        return region[1] if region else 0

    def layout(self, request_id: int) -> tuple[int, int]:
        """(start slot, num_slots) of request_id's region."""
        return self.allocator.regions[request_id]

    def unusable_slots(self, next_request_id: int | None) -> int:
        """External fragmentation: free slots in holes too small for the next request's region."""
        if next_request_id is None:
            return 0
        return self.allocator.unusable_slots(self.region_slots[next_request_id])


class ContiguousAllocator:
    """Pre-paging KV memory: one contiguous region [start, start + num_slots) per request.

    Holes are kept address-ordered and coalesced on free; allocation is first fit.
    Invariant: regions and holes tile [0, capacity) without overlap.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.holes: list[list[int]] = [[0, capacity]]  # [start, size], sorted by start
        self.regions: dict[int, tuple[int, int]] = {}  # request_id -> (start, num_slots)

    @property
    def num_free_slots(self) -> int:
        return sum(size for _, size in self.holes)

    @property
    def largest_hole(self) -> int:
        return max((size for _, size in self.holes), default=0)

    def allocate(self, request_id: int, num_slots: int) -> int | None:
        """First-fit a region of num_slots; its start slot, or None if no hole is large enough."""
        for hole in self.holes:
            if hole[1] >= num_slots:
                start = hole[0]
                hole[0] += num_slots
                hole[1] -= num_slots
                if hole[1] == 0:
                    self.holes.remove(hole)
                self.regions[request_id] = (start, num_slots)
                return start
        return None

    def free(self, request_id: int) -> int:
        """Release request_id's region, merging it with adjacent holes; the slots freed."""
        start, size = self.regions.pop(request_id)
        holes = self.holes
        i = next((k for k, h in enumerate(holes) if h[0] > start), len(holes))
        holes.insert(i, [start, size])
        if i + 1 < len(holes) and start + size == holes[i + 1][0]:  # merge with the next hole
            holes[i][1] += holes.pop(i + 1)[1]
        if i > 0 and holes[i - 1][0] + holes[i - 1][1] == start:  # merge with the previous hole
            holes[i - 1][1] += holes.pop(i)[1]
        return size

    def unusable_slots(self, num_slots: int) -> int:
        """External fragmentation for a request needing num_slots: free slots in holes too small."""
        return sum(size for _, size in self.holes if size < num_slots)
