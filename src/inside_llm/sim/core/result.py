"""A simulation's result is a dataclass whose fields say what they mean; it has one form.

`about(description, digits=..., exclude_if=...)` declares a field with its description and, for its
JSON form, the decimal places a float keeps or when the field is left out. The dataclass is itself
the API's response model: pydantic reads a stdlib dataclass as it is and takes `description` and
`exclude_if` from each field's metadata (so /docs shows the description, and the response leaves the
field out just as `as_json` does), which keeps `sim/` free of web imports and makes a new metric one
new field here.

`as_json(result)` is the one conversion to plain data: fields in order; nested results, lists,
tuples and dicts converted; a float rounded where its field gives `digits`; a field left out where
its `exclude_if(value)` is true. A router hands the response this dict (and a sim's plain-dict
results embed it), so the rounding is the same everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, field, fields, is_dataclass
from functools import cache
from typing import Any


def about(
    description: str,
    *,
    digits: int | None = None,
    exclude_if: Callable[[Any], bool] | None = None,
    default: Any = MISSING,
) -> Any:
    """A dataclass field with its description (and how its JSON form is written: `digits`, `exclude_if`)."""
    meta: dict[str, Any] = {"description": description}
    if digits is not None:
        meta["digits"] = digits
    if exclude_if is not None:
        meta["exclude_if"] = exclude_if
    return field(default=default, metadata=meta)


_SCALARS = frozenset({int, float, str, bool, type(None)})


@cache
def _plan(cls: type) -> tuple[tuple[str, Callable[[Any], bool] | None, int | None], ...] | None:
    """A dataclass's fields as (name, exclude_if, digits), read once per class; None for any other type."""
    if not is_dataclass(cls):
        return None
    return tuple((f.name, f.metadata.get("exclude_if"), f.metadata.get("digits")) for f in fields(cls))


def as_json(value: Any) -> Any:
    """A result as plain data: dataclasses as dicts of their fields, as their fields' metadata says."""
    t = type(value)
    if t in _SCALARS:
        return value
    plan = _plan(t)
    if plan is not None:
        out = {}
        for name, exclude_if, digits in plan:
            v = as_json(getattr(value, name))
            if exclude_if is not None and exclude_if(v):
                continue
            out[name] = round(v, digits) if digits is not None and isinstance(v, float) else v
        return out
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    return value
