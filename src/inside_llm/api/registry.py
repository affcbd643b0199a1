"""The eleven chapters, in tour order, and where each one's router lives.

A chapter's router is the module `inside_llm.api.<slug with _ for ->`, exposing `router`
(an APIRouter serving GET /api/<slug>) and `facts() -> dict[str, str]` (the figures its scene's
fact sentence quotes). A chapter whose module does not exist yet is served as "being built".
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


@cache
def chapter_facts(slug: str) -> dict[str, str]:
    """Formatted figures for the scene's fact sentence ({} when the chapter is not built)."""
    mod = chapter_module(slug)
    return dict(mod.facts()) if mod is not None and hasattr(mod, "facts") else {}
