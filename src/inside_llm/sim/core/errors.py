"""SimError: how a simulation refuses its inputs.

`field` names the parameter as the API spells it (the page puts the message next to that control),
`message` says what is wrong in words a visitor understands and names the bound, e.g. "Pipeline
stages × tensor parallel must divide the GPU count (8); 3 × 2 does not." `also` lists the other
parameters a limit joins. The web app turns it into a 422; nothing here knows about the web.
"""

from __future__ import annotations


class SimError(ValueError):
    """A simulation's inputs are out of its bounds (a ValueError, so plain Python callers may catch that)."""

    def __init__(self, field: str, message: str, also: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.field, self.message = field, message
        self.fields = (field, *(f for f in also if f != field))


def words(n: float) -> str:
    """A bound as a visitor reads it: 131,072 or 0.5 (no trailing .0, thousands separated)."""
    return f"{int(n):,}" if float(n).is_integer() else f"{n:g}"
