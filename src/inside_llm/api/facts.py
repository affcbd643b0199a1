"""A chapter's "number" (its fact sentence) travels inside its own answer: one computation per drawn state.

A chapter module's `facts(p) -> dict[str, str]` formats the figures its scene's fact sentence quotes, for the
chapter's parameter model p. It reads the same result the chapter's endpoint computed for p (each chapter keeps
its result per params: an lru_cache, `common.per_params`, or model_work's Kept), so filling the sentence runs no
simulation again. `attach(slug, module)` (called by registry.py for every chapter) makes GET and POST
/api/<slug> answer `facts: {text, values}` beside the chapter's own fields, so a page asks once per state; the
response model in /docs shows the field. GET /api/facts/<slug> (web/facts.py) serves the same for other users.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import typing
from types import ModuleType
from typing import Annotated, Any

from fastapi import APIRouter, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field, create_model
from starlette.concurrency import run_in_threadpool

from ..scenes import Scene, scene_by_slug


class Facts(BaseModel):
    """A chapter's "the number": its scene's fact sentence filled for the parameters of this answer."""

    text: str = Field(description="The scene's fact sentence with every figure filled in.")
    values: dict[str, str] = Field(description="Each placeholder's formatted figure.")


FACTS_FIELD = "The scene's fact sentence for the same parameters, from this same result (no second request)."


def params_model(module: ModuleType) -> type[BaseModel] | None:
    """The parameter model a chapter's `facts(p)` takes (the class of its default), or None."""
    fn = getattr(module, "facts", None)
    if fn is None:
        return None
    hints = typing.get_type_hints(fn)
    first = next(iter(inspect.signature(fn).parameters), None)
    kinds = typing.get_args(hints[first]) or (hints[first],) if first else ()
    return next((k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)), None)


def fact_text(scene: Scene, values: dict[str, str]) -> str | None:
    try:
        return scene.fact.format_map(values)
    except KeyError:
        return None


def facts_of(module: ModuleType, scene: Scene, p: BaseModel | None = None) -> Facts:
    """The chapter's fact for params p (its defaults when None)."""
    values = dict(module.facts(p) if p is not None else module.facts())
    return Facts(text=fact_text(scene, values) or "", values=values)


def _json(f: Facts) -> bytes:
    return json.dumps(f.model_dump(), ensure_ascii=False, separators=(",", ":")).encode()


def _with_facts_type(base: Any) -> Any:
    """The chapter's response model with a `facts` field (same name, so /docs reads as before, plus the field)."""
    ann = Annotated[Facts | None, Field(description=FACTS_FIELD)]
    if isinstance(base, type) and issubclass(base, BaseModel):
        return create_model(base.__name__, __base__=base, __module__=base.__module__, facts=(ann, None))
    if dataclasses.is_dataclass(base):
        frozen = base.__dataclass_params__.frozen  # type: ignore[attr-defined]
        t = dataclasses.make_dataclass(
            base.__name__, [("facts", ann, dataclasses.field(default=None))], bases=(base,), frozen=frozen
        )
        t.__module__, t.__doc__ = base.__module__, base.__doc__
        return t
    return base


def _attach_to(result: Any, f: Facts) -> Any:
    """The route's answer with `facts` added: JSON bytes spliced before their closing brace, a model or dict
    extended. Anything else (a CSV download) is returned as it was."""
    if isinstance(result, Response):
        body = bytes(result.body)
        if result.media_type != "application/json" or not body.endswith(b"}") or body == b"{}":
            return result
        headers = {k: v for k, v in result.headers.items() if k.lower() != "content-length"}
        out = body[:-1] + b',"facts":' + _json(f) + b"}"
        return Response(out, status_code=result.status_code, media_type=result.media_type, headers=headers)
    if isinstance(result, BaseModel):
        return {**dict(result), "facts": f}
    if isinstance(result, dict):
        return {**result, "facts": f}
    return result


def _wrap(endpoint: Any, module: ModuleType, scene: Scene, model: type[BaseModel]) -> Any:
    def add(result: Any, kwargs: dict) -> Any:
        p = next((v for v in kwargs.values() if isinstance(v, model)), None)
        return _attach_to(result, facts_of(module, scene, p))

    if inspect.iscoroutinefunction(endpoint):  # facts may wait on a model job's kept result: not on the loop

        @functools.wraps(endpoint)
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await run_in_threadpool(add, await endpoint(*args, **kwargs), kwargs)
    else:

        @functools.wraps(endpoint)
        def call(*args: Any, **kwargs: Any) -> Any:
            return add(endpoint(*args, **kwargs), kwargs)

    call.__signature__ = inspect.signature(endpoint, eval_str=True)  # type: ignore[attr-defined]
    return call


ROUTE_FIELDS = (
    "response_model status_code tags dependencies summary description response_description responses deprecated "
    "methods operation_id response_model_include response_model_exclude response_model_by_alias "
    "response_model_exclude_unset response_model_exclude_defaults response_model_exclude_none include_in_schema "
    "response_class name callbacks openapi_extra generate_unique_id_function"
).split()


def attach(slug: str, module: ModuleType) -> None:
    """Make the chapter's GET (and POST) /api/<slug> carry `facts` (once, at import; a chapter without a fact
    sentence or without `facts(p)` is left as it is)."""
    scene, model = scene_by_slug(slug), params_model(module)
    router: APIRouter = module.router
    if scene is None or not scene.fact or model is None:
        return
    for i, route in enumerate(router.routes):
        if not isinstance(route, APIRoute) or route.path != f"/api/{slug}":
            continue
        kw = {k: getattr(route, k) for k in ROUTE_FIELDS}
        kw["response_model"] = _with_facts_type(route.response_model)
        kw["description"] = route.description or None
        router.routes[i] = APIRoute(route.path, _wrap(route.endpoint, module, scene, model), **kw)
