"""Show-the-math: every headline number travels with how it was made.

A Derivation is a value, its unit, the formula as text, the inputs (each with its own unit and,
where it comes from outside, a source), the assumptions and the sources. Responses carry them
in a `math` dict keyed by the headline field's name, and the page can open any of them. The
dataclass is the response model too (`api/common.Math`); `result.as_json` writes it as plain data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .result import about, as_json


def _missing(source: str | None) -> bool:
    return not source


@dataclass(frozen=True)
class DerivationInput:
    """One named input of a formula."""

    name: str = about("Its name in the formula.")
    value: float | int | str = about("Its value, in `unit`.")
    unit: str = about("Its unit (empty when it has none).", default="")
    source: str | None = about(
        "Where an outside figure comes from (absent for computed ones).", default=None, exclude_if=_missing
    )


@dataclass(frozen=True)
class Derivation:
    """How a headline number was made: its value and unit, the formula, the inputs with their units and
    sources, the assumptions and the sources."""

    value: float | int = about("The number, as the response gives it.")
    unit: str = about("Its unit.")
    formula: str = about("How it is computed, in words and symbols.")
    inputs: tuple[DerivationInput, ...] = about("The formula's inputs.")
    assumptions: tuple[str, ...] = about("What the formula takes as given.")
    sources: tuple[str, ...] = about("Published sources of the method or the figures.")


def derive(
    value: float | int,
    unit: str,
    formula: str,
    inputs: dict[str, tuple] | None = None,
    assumptions: list[str] | tuple[str, ...] = (),
    sources: list[str] | tuple[str, ...] = (),
) -> Derivation:
    """Shorthand: inputs as {name: (value, unit)} or {name: (value, unit, source)}."""
    ins = tuple(DerivationInput(k, *v) for k, v in (inputs or {}).items())
    return Derivation(value, unit, formula, ins, tuple(assumptions), tuple(sources))


def math_dict(**derivations: Derivation) -> dict[str, dict[str, Any]]:
    """The `math` block of a response as plain data: {field_name: derivation}."""
    return as_json(derivations)
