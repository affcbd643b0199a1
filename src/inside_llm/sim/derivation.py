"""Show-the-math: every headline number travels with how it was made.

A Derivation is a value, its unit, the formula as text, the inputs (each with its own unit and,
where it comes from outside, a source), the assumptions and the sources. Responses carry them
in a `math` dict keyed by the headline field's name, and the page can open any of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Input:
    """One named input of a formula: value with unit, optional source for outside figures."""

    name: str
    value: float | int | str
    unit: str = ""
    source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "value": self.value, "unit": self.unit}
        if self.source:
            d["source"] = self.source
        return d


@dataclass(frozen=True)
class Derivation:
    """A computed number with its formula, inputs, assumptions and sources."""

    value: float | int
    unit: str
    formula: str
    inputs: tuple[Input, ...] = ()
    assumptions: tuple[str, ...] = ()
    sources: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "unit": self.unit,
            "formula": self.formula,
            "inputs": [i.to_dict() for i in self.inputs],
            "assumptions": list(self.assumptions),
            "sources": list(self.sources),
        }


def derive(
    value: float | int,
    unit: str,
    formula: str,
    inputs: dict[str, tuple] | None = None,
    assumptions: list[str] | tuple[str, ...] = (),
    sources: list[str] | tuple[str, ...] = (),
) -> Derivation:
    """Shorthand: inputs as {name: (value, unit)} or {name: (value, unit, source)}."""
    ins = tuple(Input(k, *v) for k, v in (inputs or {}).items())
    return Derivation(value, unit, formula, ins, tuple(assumptions), tuple(sources))


def math_dict(**derivations: Derivation) -> dict[str, dict[str, Any]]:
    """The `math` block of a response: {field_name: derivation}."""
    return {k: d.to_dict() for k, d in derivations.items()}
