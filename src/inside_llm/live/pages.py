"""The live engine's physical pages: every chat's keys and values in one float32 pool of fixed-size pages.

The block tables, free queue and prefix cache are the serving core's (`sim/serve/kv.py`: BlockPool and
KVCacheManager, the classes chapters 6 and 7 simulate with); this module holds only what the numpy model reads
and writes, page by page. A page found in the prefix cache holds keys and values another chat's forward pass
wrote for the same tokens at the same positions, so a chat that finds it reads it as its own.
"""

from __future__ import annotations

import numpy as np

from inside_llm.sim.model.transformer import DemoModel
from inside_llm.sim.serve.kv import BlockPool, KVCacheManager, num_blocks_for


class OutOfPages(Exception):
    """The pool has no free page for a sequence's next tokens."""


class PagedKVStore:
    """The physical pages of every sequence's keys and values, and the bookkeeping of who holds which.

    k[layer], v[layer]: [num_blocks, Hkv, block_size, hd] float32; page b holds block_size consecutive
    positions of one sequence (or of a prefix several share). np.zeros maps memory lazily, so untouched pages
    cost no RAM. manager: the core's KVCacheManager over `num_requests` request ids, registering a page in the
    prefix cache only once its keys are written (cache_on_allocate=False).
    """

    def __init__(self, model: DemoModel, num_blocks: int, block_size: int, num_requests: int = 0):
        c = model.config
        shape = (num_blocks, c.n_kv_heads, block_size, c.head_dim)
        self.k = [np.zeros(shape, np.float32) for _ in range(c.n_layers)]
        self.v = [np.zeros(shape, np.float32) for _ in range(c.n_layers)]
        self.block_size = block_size
        self.pool = BlockPool(num_blocks)
        self.manager = KVCacheManager(self.pool, block_size, num_requests, cache_on_allocate=False)
        self.bytes_per_token = 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4  # K and V, every layer, float32


class PagedKV:
    """One sequence's keys and values: its block table in a PagedKVStore. Same interface as KVCache.
    num_tokens: the position of its next token (the live engine sets it to the tokens computed before a step)."""

    def __init__(self, store: PagedKVStore, seq_id: int):
        self.store, self.seq_id, self.num_tokens = store, seq_id, 0

    def reserve(self, num_tokens: int) -> None:
        """Pages for num_tokens positions (already there when the scheduler planned the step); OutOfPages,
        allocating nothing, if the pool has too few."""
        if self.store.manager.allocate(self.seq_id, num_tokens) is None:
            raise OutOfPages(f"sequence {self.seq_id} needs pages for {num_tokens} tokens")

    def release(self) -> int:
        """Give every page back to the pool; returns how many."""
        self.num_tokens = 0
        return self.store.manager.free(self.seq_id)

    def _slots(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """(page id, slot in page) of positions start..end-1."""
        table = np.asarray(self.store.manager.block_table(self.seq_id))
        pos = np.arange(start, end)
        return table[pos // self.store.block_size], pos % self.store.block_size

    def write(self, layer: int, start: int, k: np.ndarray, v: np.ndarray) -> None:
        """Scatter k, v [Hkv, T, hd] into the pages that hold positions start..start+T-1."""
        pages, slots = self._slots(start, start + k.shape[1])
        self.store.k[layer][pages, :, slots] = k.transpose(1, 0, 2)  # [T, Hkv, hd] at (page, slot)
        self.store.v[layer][pages, :, slots] = v.transpose(1, 0, 2)

    def pages(self, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(k, v [num_blocks, Hkv, block_size, hd] of every page, this sequence's page table, block_size): the
        served model's attention reads its keys in place (sim/model/q8.attend_one) instead of a gathered copy."""
        table = np.asarray(self.store.manager.block_table(self.seq_id), np.int64)
        return self.store.k[layer], self.store.v[layer], table, self.store.block_size

    def read(self, layer: int, lo: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """Gather keys and values [Hkv, end-lo, hd] of positions lo..end-1 from this sequence's pages."""
        bs = self.store.block_size
        table = self.store.manager.block_table(self.seq_id)[lo // bs : num_blocks_for(end, bs)]
        first = (lo // bs) * bs

        def gather(pages: np.ndarray) -> np.ndarray:
            g = pages[table]  # [n, Hkv, bs, hd]
            g = g.transpose(1, 0, 2, 3).reshape(g.shape[1], -1, g.shape[3])  # [Hkv, n*bs, hd]
            return g[:, lo - first : end - first]

        return gather(self.store.k[layer]), gather(self.store.v[layer])


def prefix_hashes(ids: list[int], block_size: int) -> list[int]:
    """Chained hashes of the full pages of ids that a new chat may find cached (vLLM's hash_block_tokens: page
    i's hash covers its tokens and page i-1's hash, so equal hashes mean equal prefixes). Only pages before the
    last token: a chat must compute at least its last prompt token, whose logits give its first answer."""
    out, parent = [], -1
    for i in range((len(ids) - 1) // block_size):
        parent = hash((parent, tuple(ids[i * block_size : (i + 1) * block_size])))
        out.append(parent)
    return out
