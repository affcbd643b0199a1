"""A simulation's result is a dataclass whose fields say what they mean; it has one form.

`about(description, digits=...)` declares a field with its description and, for a float, the decimal
places its JSON form keeps. The dataclass is itself the API's response model: pydantic reads a
stdlib dataclass as it is and takes `description` from each field's metadata (so /docs shows it),
which keeps `sim/` free of web imports and makes a new metric one new field here.

`as_json(result)` is the one conversion to plain data: fields in order, nested results, lists, tuples
and dicts converted, a float rounded where its field gives `digits`. A router hands the response this
dict (or the sim's other plain dicts embed it), so the rounding is the same everywhere.
"""

from __future__ import annotations

from dataclasses import MISSING, field, fields, is_dataclass
from typing import Any


def about(description: str, *, digits: int | None = None, default: Any = MISSING) -> Any:
    """A dataclass field with its description (and the decimal places `as_json` rounds a float to)."""
    meta: dict[str, Any] = {"description": description}
    if digits is not None:
        meta["digits"] = digits
    return field(default=default, metadata=meta)


def as_json(value: Any) -> Any:
    """A result as plain data: dataclasses as dicts of their fields, floats rounded where a field says."""
    if is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in fields(value):
            v = as_json(getattr(value, f.name))
            digits = f.metadata.get("digits")
            out[f.name] = round(v, digits) if digits is not None and isinstance(v, float) else v
        return out
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    return value
