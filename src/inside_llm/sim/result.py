"""A simulation's result is a dataclass whose fields say what they mean; it has one form.

`about(description, digits=..., omit_empty=...)` declares a field with its description and, for its
JSON form, the decimal places a float keeps or that an empty value is left out. The dataclass is
itself the API's response model: pydantic reads a stdlib dataclass as it is and takes `description`
from each field's metadata (so /docs shows it), which keeps `sim/` free of web imports and makes a
new metric one new field here.

`as_json(result)` is the one conversion to plain data: fields in order; nested results, lists,
tuples and dicts converted; a float rounded where its field gives `digits`; an empty value left out
where its field says `omit_empty`. A router hands the response this dict (and a sim's plain-dict
results embed it), so the rounding is the same everywhere.
"""

from __future__ import annotations

from dataclasses import MISSING, field, fields, is_dataclass
from typing import Any


def about(description: str, *, digits: int | None = None, omit_empty: bool = False, default: Any = MISSING) -> Any:
    """A dataclass field with its description (and how `as_json` writes it: `digits`, `omit_empty`)."""
    meta: dict[str, Any] = {"description": description}
    if digits is not None:
        meta["digits"] = digits
    if omit_empty:
        meta["omit_empty"] = True
    return field(default=default, metadata=meta)


def as_json(value: Any) -> Any:
    """A result as plain data: dataclasses as dicts of their fields, as their fields' metadata says."""
    if is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in fields(value):
            v = as_json(getattr(value, f.name))
            if f.metadata.get("omit_empty") and not v:
                continue
            digits = f.metadata.get("digits")
            out[f.name] = round(v, digits) if digits is not None and isinstance(v, float) else v
        return out
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    return value
