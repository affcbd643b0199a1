"""The eleven chapters, in tour order, and where each one's router lives.

A chapter's router is the module `inside_llm.api.<slug with _ for ->`, exposing `router`
(an APIRouter serving GET /api/<slug>) and `facts(p) -> dict[str, str]` (the figures its scene's
fact sentence quotes, for the chapter's parameter model p; served by web/facts.py). A chapter whose module does not exist yet is served as "being built".
"""

from __future__ import annotations

import importlib
from functools import cache
from types import ModuleType

CHAPTER_SLUGS = ("tokens", "embeddings", "layer", "gpu", "roofline", "kv-cache", "batching",
                 "quantization", "speculative", "parallelism", "dials")


def module_name(slug: str) -> str:
    return "inside_llm.api." + slug.replace("-", "_")


@cache
def chapter_module(slug: str) -> ModuleType | None:
    """The chapter's router module, or None while the chapter is being built."""
    try:
        return importlib.import_module(module_name(slug))
    except ModuleNotFoundError as e:
        if e.name != module_name(slug):
            raise
        return None

