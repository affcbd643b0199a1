"""GET /api/facts/<slug>: a chapter's "the number" sentence alone, for the same parameters as its stage.

The pages do not ask for it: each chapter's own answer carries the same `facts` (api/facts.py). It stays for
other users of the API. It validates exactly like the chapter endpoint (the chapter's own parameter model) and
reads the result the chapter keeps for those params, so it runs no simulation the chapter has run already.
"""

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from ..api import facts as chapter_facts
from ..api.facts import fact_text
from ..api.registry import CHAPTER_SLUGS, CHAPTERS
from ..scenes import scene_by_slug

router = APIRouter(tags=["facts"])
__all__ = ["FactsResponse", "fact_text", "facts_for", "json_body", "params_model", "router"]


class FactsResponse(BaseModel):
    slug: str
    text: str = Field(description="The scene's fact sentence with every figure filled in.")
    values: dict[str, str] = Field(description="Each placeholder's formatted figure.")


def params_model(slug: str) -> type[BaseModel] | None:
    """The parameter model a chapter's `facts(p)` takes (the class of its default), or None."""
    return chapter_facts.params_model(CHAPTERS[slug])


def facts_for(slug: str, p: BaseModel | None = None) -> dict[str, str]:
    """The chapter's formatted figures for params p (its defaults when None); {} when it has no facts()."""
    fn = getattr(CHAPTERS[slug], "facts", None)
    if fn is None:
        return {}
    return dict(fn(p) if p is not None else fn())


JSON_TYPES = {int: ("int_type", (int, float)), float: ("float_type", (int, float)), bool: ("bool_type", (bool,))}


def json_body(model: type[BaseModel]) -> type[BaseModel]:
    """The chapter's parameter model for a JSON body: the same fields, bounds and checks, and each number or
    true/false must arrive as one (the lax model, right for a query where all is text, reads false as 0 and
    "3" as 3). A whole number may arrive as 3.0, as JSON Schema's integer allows."""
    typed = {name: JSON_TYPES[f.annotation] for name, f in model.model_fields.items() if f.annotation in JSON_TYPES}

    def _as_json_says(cls: type, v: Any, info: ValidationInfo) -> Any:
        error, accepted = typed[info.field_name]
        if not isinstance(v, accepted) or (bool not in accepted and isinstance(v, bool)):
            raise PydanticCustomError(error, "Input is not of the JSON type the schema says")
        return v

    if not typed:
        return model
    return type(
        f"{model.__name__}Body",
        (model,),
        {"__doc__": model.__doc__, "_as_json_says": field_validator(*typed, mode="before")(_as_json_says)},
    )


def _route(slug: str, model: type[BaseModel]) -> Any:
    scene = scene_by_slug(slug)

    def get_facts(p: Annotated[model, Query()]) -> FactsResponse:  # type: ignore[valid-type]
        values = facts_for(slug, p)
        return FactsResponse(slug=slug, text=fact_text(scene, values) or "", values=values)

    def post_facts(p: json_body(model)) -> FactsResponse:  # type: ignore[valid-type]
        """The same, with the parameters as a JSON body (for long text)."""
        return get_facts(p)

    get_facts.__doc__ = (
        f"Chapter {scene.number}'s fact sentence ({scene.title}) for the same parameters as /api/{slug}, whose "
        "answer carries the same as `facts`."
    )
    return get_facts, post_facts


for _slug in CHAPTER_SLUGS:
    _model = params_model(_slug)
    if _model is not None and scene_by_slug(_slug) is not None:
        _get, _post = _route(_slug, _model)
        for _fn, _method in ((_get, "GET"), (_post, "POST")):
            router.add_api_route(
                f"/api/facts/{_slug}",
                _fn,
                methods=[_method],
                response_model=FactsResponse,
                name=f"facts_{_slug.replace('-', '_')}_{_method.lower()}",
            )
