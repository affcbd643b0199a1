"""Scene files: scenes/NN-<slug>.toml hold a chapter's title, narration, fact, controls and presets.

Narration and facts are our words; any figure in a fact is a `{placeholder}` filled from the
chapter's simulation, so no number is typed into the page.
"""

from __future__ import annotations

import re
import string
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .paths import scenes_dir

CONTROL_KINDS = ("range", "select", "toggle", "text", "textarea", "number")
FILE_RE = re.compile(r"^(\d\d)-([a-z0-9-]+)\.toml$")


def singular_unit(unit: str) -> str:
    """ "chats" -> "chat", "GPUs" -> "GPU"; a unit that is not one plain plural word ("requests/s", "USD") stays.
    The same rule as lib/format.js `unitFor`."""
    return unit[:-1] if re.fullmatch(r"[A-Za-z]+s", unit) else unit


@dataclass(frozen=True)
class Control:
    """One control: its query name, label, kind and bounds (unit shown beside the value)."""

    name: str
    label: str
    kind: str
    default: Any
    min: float | None = None
    max: float | None = None
    step: float | None = None
    unit: str = ""
    options: tuple = ()  # for select: ((value, label), ...)
    help: str = ""
    api: bool = True  # False: drawing-only, not sent to the endpoint
    scale: str = "linear"  # range controls: linear | log2 (slider moves in powers of two)
    main: bool = False  # the chapter's main control: first in the rail, kept on a phone's bottom bar
    question: bool = False  # text filled from the visitor's question (`q` in the URL), which it also sets

    def unit_for(self, value: Any) -> str:
        """The unit beside `value`: a plain plural word loses its s at exactly 1 ("1 GPU", "2 GPUs")."""
        return singular_unit(self.unit) if value == 1 else self.unit


@dataclass(frozen=True)
class Scene:
    number: int
    slug: str
    title: str
    short: str
    hook: str
    narration: tuple[str, ...]
    fact: str
    controls: tuple[Control, ...] = ()
    presets: tuple[dict, ...] = field(default=())
    # [[resolve]] rules: lib/resolve.js moves controls to a valid combination
    resolve: tuple[dict, ...] = field(default=())

    def defaults(self) -> dict[str, Any]:
        return {c.name: c.default for c in self.controls}

    def main_control(self) -> Control | None:
        """The control marked `main = true`, else the first one."""
        return next((c for c in self.controls if c.main), self.controls[0] if self.controls else None)

    def controls_main_first(self) -> tuple[Control, ...]:
        m = self.main_control()
        return (m, *(c for c in self.controls if c is not m)) if m else ()

    def fact_fields(self) -> list[str]:
        return [f for _, f, _, _ in string.Formatter().parse(self.fact) if f]


def _control(raw: dict) -> Control:
    opts = tuple(
        (o["value"], o.get("label", str(o["value"]))) if isinstance(o, dict) else (o, str(o))
        for o in raw.get("options", ())
    )
    c = Control(**{**raw, "options": opts})
    if c.kind not in CONTROL_KINDS:
        raise ValueError(f"control {c.name}: kind {c.kind!r} not in {CONTROL_KINDS}")
    return c


def _scene(path) -> Scene:
    number, slug = FILE_RE.match(path.name).groups()
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    narration = tuple(p.strip() for p in raw["narration"].strip().split("\n\n") if p.strip())
    return Scene(
        number=int(number),
        slug=slug,
        title=raw["title"],
        short=raw["short"],
        hook=raw["hook"],
        narration=narration,
        fact=raw["fact"].strip(),
        controls=tuple(_control(c) for c in raw.get("controls", ())),
        presets=tuple(raw.get("presets", ())),
        resolve=tuple(raw.get("resolve", ())),
    )


@lru_cache(maxsize=1)
def load_scenes() -> tuple[Scene, ...]:
    """All scenes in tour order."""
    files = sorted(p for p in scenes_dir().iterdir() if FILE_RE.match(p.name))
    return tuple(_scene(p) for p in files)


def scene_by_slug(slug: str) -> Scene | None:
    return next((s for s in load_scenes() if s.slug == slug), None)
