"""The dials' figures as one flat row, and rows as CSV: what `/api/dials?format=csv`, the CLI and the notebook write.

A row is the inputs (`serving.params_dict`), `fits`, the headline figures and the memory per GPU, in that order
(COLUMNS). A setup that does not fit has no time, rate or cost figures (empty cells), as in the JSON.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from typing import Any

from . import serving

PARAM_COLUMNS = tuple(serving.ServingParams.__dataclass_fields__)
FIGURE_COLUMNS = (
    "fits",
    *serving.HYPOTHETICAL_FIELDS,  # the time, rate and cost figures (empty when the setup does not fit)
    "max_batch",
    "bound",
    "prefill_bound",
    "replicas",
)
MEMORY_COLUMNS = (
    "capacity_gb",
    "weights_gb",
    "kv_cache_gb",
    "activations_gb",
    "reserve_gb",
    "spare_gb",
    "shortfall_gb",
)
COLUMNS = (*PARAM_COLUMNS, *FIGURE_COLUMNS, *(f"memory_{k}" for k in MEMORY_COLUMNS))


def row(params: Mapping[str, Any], figures: Mapping[str, Any]) -> dict[str, Any]:
    """One flat row from the params (as `serving.params_dict`) and an estimate's `to_dict()` (or the API's JSON)."""
    out: dict[str, Any] = {k: params.get(k) for k in PARAM_COLUMNS}
    out.update({k: figures.get(k) for k in FIGURE_COLUMNS})
    memory = figures.get("memory") or {}
    out.update({f"memory_{k}": memory.get(k) for k in MEMORY_COLUMNS})
    return out


def estimate_row(p: serving.ServingParams) -> dict[str, Any]:
    """Estimate p and flatten it (SimError names a bad field)."""
    return row(serving.params_dict(p), serving.estimate(p).to_dict())


def to_csv(rows: Iterable[Mapping[str, Any]], columns: tuple[str, ...] = COLUMNS) -> str:
    """RFC 4180 CSV with a header; None is an empty cell, booleans are true/false."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n")
    w.writerow(columns)
    for r in rows:
        w.writerow(["" if r.get(c) is None else str(r[c]).lower() if isinstance(r[c], bool) else r[c] for c in columns])
    return buf.getvalue()
