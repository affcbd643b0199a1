"""Where the site's files live: inside the wheel (`_site/`) or at the top of a source checkout."""

from __future__ import annotations

from functools import cache
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


@cache
def site_dir() -> Path:
    """Folder holding scenes/, templates/ and static/ (wheel install first, then source tree)."""
    for root in (PACKAGE_DIR / "_site", PACKAGE_DIR.parents[1]):
        if (root / "scenes").is_dir() and (root / "templates").is_dir():
            return root
    raise RuntimeError("scenes/ and templates/ not found beside the package or in the source tree")


def scenes_dir() -> Path:
    return site_dir() / "scenes"


def templates_dir() -> Path:
    return site_dir() / "templates"


def static_dir() -> Path:
    return site_dir() / "static"
