"""Kept only for the live engine (engine.py), which has not moved onto the serving core yet: the paged
KV manager is serve/kv.py's, and this module owns nothing."""

from inside_llm.sim.serve.kv import BlockPool, KVCacheManager, num_blocks_for

__all__ = ["BlockPool", "KVCacheManager", "num_blocks_for"]
