"""The CSP forbids inline script: no `on<event>=` attributes and no `javascript:` URLs in any page we serve or export.

Today's Chromium reports an inline handler as a console error at page load (an older one stayed silent), so a
handler that slips in breaks every browser test on a fresh machine. This scans the sources and the output.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from inside_llm.export import export_bundle
from inside_llm.paths import static_dir, templates_dir
from inside_llm.scenes import load_scenes

# An attribute named on<letters> followed by '=', inside markup (a quote or a space before it), or a javascript: URL.
INLINE = re.compile(r"""(?:\s|["'])on[a-z]+\s*=\s*["'{]|javascript:""", re.IGNORECASE)


def offenders(text: str) -> list[str]:
    return [text[max(0, m.start() - 40) : m.end() + 20] for m in INLINE.finditer(text)]


def test_the_pattern_catches_what_it_must():
    assert offenders('<form id="c" onsubmit="return false">')
    assert offenders("<a href='javascript:void(0)'>")
    assert offenders('<button ONCLICK="go()">')
    assert not offenders('<form id="c" aria-label="Controls">')
    assert not offenders("s.onload = () => resolve();"), "a property set from a module is not an inline handler"


@pytest.mark.parametrize("path", sorted(templates_dir().glob("*.html")), ids=lambda p: p.name)
def test_templates_have_no_inline_handlers(path: Path):
    assert offenders(path.read_text()) == []


@pytest.mark.parametrize("path", sorted((static_dir() / "js").rglob("*.js")), ids=lambda p: p.name)
def test_markup_written_by_scripts_has_no_inline_handlers(path: Path):
    strings = re.findall(r"`[^`]*`|'[^'\n]*'|\"[^\"\n]*\"", path.read_text())
    assert [s for s in strings if offenders(s)] == []


def test_served_pages_have_no_inline_handlers(client):
    urls = ["/", "/dials", "/docs"] + [f"/{kind}/{s.slug}" for s in load_scenes() for kind in ("tour", "embed")]
    for url in urls:
        r = client.get(url)
        assert r.status_code == 200, url
        assert offenders(r.text) == [], url


def test_exported_pages_have_no_inline_handlers(tmp_path):
    assert export_bundle(tmp_path, ["tokens", "dials"]) == 0
    pages = sorted(tmp_path.rglob("*.html"))
    assert len(pages) >= 5
    for page in pages:
        assert offenders(page.read_text()) == [], page.name
