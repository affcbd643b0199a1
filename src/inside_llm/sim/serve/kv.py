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
- `ReservedManager` puts ContiguousAllocator behind the same interface: at its first allocation a request
  reserves a region sized by a reservation policy (`reservation_slots`: contiguous = max_seq_len,
  pow2 = next power of two of the final length, oracle = exactly the final length).

The scheduler over these managers is serve/scheduler.py; chapter 6's simulation is sim/kvpolicies.py.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from inside_llm.sim.workloads import check_int


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
    """One physical page: its id and how many block tables hold it. (How full it is follows from the
    tokens its requests hold: KVCacheManager.block_fill.)"""

    block_id: int
    ref_cnt: int = 0


class BlockPool:
    """All `num_blocks` blocks and the free queue. Invariant: a block is in the free queue iff ref_cnt == 0."""

    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.blocks: list[Block | None] = [None] * num_blocks  # made when first handed out
        self.free_block_queue: deque[int] = deque(range(num_blocks))

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
        popleft, blocks = self.free_block_queue.popleft, self.blocks
        out = []
        for _ in range(num_blocks):
            i = popleft()
            block = blocks[i]
            if block is None:
                block = blocks[i] = Block(i, 1)
            else:
                block.ref_cnt = 1
            out.append(block)
        return out

    def free_blocks(self, blocks: list[Block]) -> None:
        """Drop one reference from each block; blocks reaching ref_cnt 0 go to the free queue's tail.

        Like vLLM, a request's blocks are freed tail first, so its last (least shareable) page is
        reused first.
        """
        for block in reversed(blocks):
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                self.free_block_queue.append(block.block_id)


class KVCacheManager:
    """Per-request block tables over one BlockPool. Tokens are laid out in order: token t of a
    request lives in logical block t // block_size, slot t % block_size. With num_requests (request ids
    0 .. num_requests - 1), `held` counts each request's blocks in a numpy column for allocate_all."""

    def __init__(self, pool: BlockPool, block_size: int, num_requests: int = 0):
        self.pool = pool
        self.block_size = block_size
        self.req_to_blocks: dict[int, list[Block]] = {}
        self.num_tokens_of: dict[int, int] = {}  # tokens each request's table was last grown to hold
        self.held = np.zeros(num_requests, dtype=np.int64)

    def allocate(self, request_id: int, num_tokens: int) -> list[Block] | None:
        """Grow request_id's block table to hold `num_tokens` tokens in total (not new tokens).

        Returns the newly allocated blocks ([] if the table already covers them), or None if the
        pool lacks free blocks; then nothing is allocated, as in vLLM's allocate_slots.
        """
        bs = self.block_size
        table = self.req_to_blocks.get(request_id)
        if table is None:
            table = self.req_to_blocks[request_id] = []
        elif num_tokens <= len(table) * bs:  # fast path: the last page has room
            self.num_tokens_of[request_id] = num_tokens
            return []
        need = -(-num_tokens // bs) - len(table)  # num_blocks_for, inlined: the scheduler's hottest call
        new = self.pool.get_new_blocks(need) if need > 0 else []
        if new is None:
            if not table:
                del self.req_to_blocks[request_id]
            return None
        self.num_tokens_of[request_id] = num_tokens
        if new:
            table += new
            if len(self.held):
                self.held[request_id] = len(table)
        return new

    def free(self, request_id: int) -> int:
        """Return all of request_id's blocks to the pool; the number of blocks freed."""
        table = self.req_to_blocks.pop(request_id, [])
        self.num_tokens_of.pop(request_id, None)
        self.pool.free_blocks(table)
        if len(self.held):
            self.held[request_id] = 0
        return len(table)

    def block_fill(self, request_id: int) -> list[int]:
        """Tokens held in each block of request_id's table, in order (all full but the last)."""
        n, bs = self.num_tokens_of.get(request_id, 0), self.block_size
        return [min(bs, n - i * bs) for i in range(len(self.req_to_blocks.get(request_id, ())))]

    def allocate_all(self, request_ids: np.ndarray, num_tokens: np.ndarray) -> bool:
        """allocate() for every request of request_ids at once (num_tokens: the total each must hold), if
        the free blocks cover all of them; else take nothing and return False. The scheduler's batch path:
        counted in numpy over `held` (needs num_requests), and only the requests that cross a page boundary
        are handed blocks one by one."""
        extra = np.maximum(-(-num_tokens // self.block_size) - self.held[request_ids], 0)
        if int(extra.sum()) > self.pool.num_free_blocks:
            return False
        grow = np.flatnonzero(extra)
        for rid, n in zip(request_ids[grow].tolist(), num_tokens[grow].tolist()):
            self.allocate(rid, n)
        return True

    def unusable_slots(self, next_request_id: int | None) -> int:
        """Free slots no request can use: none, every free page fits any request (the slots after the last
        whole page are the caller's: they are not in the pool)."""
        return 0

    def layout(self, request_id: int) -> list[int]:
        return self.block_table(request_id)

    def block_table(self, request_id: int) -> list[int]:
        """Logical block index -> physical block id for request_id ([] if it holds none)."""
        return [b.block_id for b in self.req_to_blocks.get(request_id, [])]

    def num_slots(self, request_id: int) -> int:
        """Token slots allocated to request_id: len(block table) * block_size."""
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
