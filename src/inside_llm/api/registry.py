"""Every API router, registered here and nowhere else: the eleven chapters in tour order, then the
endpoints that are not chapters (the catalogs, the launch-command explainer, the model's token stream, the
engine that serves it, the same engine's OpenAI-compatible /v1 and Prometheus /metrics, the oEmbed
provider, GET /oembed, and the servers the operator attached, GET /api/attach).

A chapter module serves GET /api/<slug> (and, for some, GET /api/<slug>/measured) on its `router`,
and has `facts(p) -> dict[str, str]`: the figures its scene's fact sentence quotes, for the chapter's
parameter model p, read from the result its endpoint computed for p. `facts.attach` (below, for every
chapter) makes /api/<slug> carry them as `facts: {text, values}` in the same answer; GET /api/facts/<slug>
(web/facts.py) serves them alone.
"""

from __future__ import annotations

from types import MappingProxyType

from fastapi import APIRouter

from . import (
    attach,
    batching,
    catalog,
    dials,
    dials_tools,
    embeddings,
    engine,
    explain,
    facts,
    generate,
    gpu,
    kv_cache,
    layer,
    oembed,
    parallelism,
    quantization,
    roofline,
    speculative,
    tokens,
    v1,
)

CHAPTERS = MappingProxyType(
    {
        "tokens": tokens,
        "embeddings": embeddings,
        "layer": layer,
        "gpu": gpu,
        "roofline": roofline,
        "kv-cache": kv_cache,
        "batching": batching,
        "quantization": quantization,
        "speculative": speculative,
        "parallelism": parallelism,
        "dials": dials,
    }
)
CHAPTER_SLUGS = tuple(CHAPTERS)
for _slug, _module in CHAPTERS.items():
    facts.attach(_slug, _module)  # "the number" travels inside each chapter's answer
ROUTERS: tuple[APIRouter, ...] = (
    *(m.router for m in CHAPTERS.values()),
    catalog.router,
    dials_tools.router,
    explain.router,
    generate.router,
    engine.router,
    v1.router,
    oembed.router,
    attach.router,
)
