"""One computation per state, seen from the page: moving one control on any chapter (and on /dials) issues exactly
one API request, the chapter's own, whose answer carries "the number" (`facts`) too (issue 24)."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest
from pagekit import open_page, rendered, renders

from inside_llm.api.registry import CHAPTER_SLUGS

pytestmark = pytest.mark.browser

# the control each page moves, and where it moves to (a value inside the scene's range, not its default)
MOVES = {
    "tokens": ("encoding", "llama3"),
    "embeddings": ("prompt", "The cat sat on the"),
    "layer": ("layer", "2"),
    "gpu": ("gpu", "h200"),
    "roofline": ("batch", "6"),  # a log2 slider: its position, 2^6 = 64 chats
    "kv-cache": ("block_size", "32"),
    "batching": ("rate", "16"),
    "quantization": ("precision", "fp8"),
    "speculative": ("gamma", "2"),
    "parallelism": ("tp", "4"),
    "dials": ("batch", "6"),  # a log2 slider: its position, 2^6 = 64 chats
}

# Requests not counted, by name, because they are not a function of the control moved: the live engine panel's
# snapshot and feed ("This server, now": /api/engine, /api/engine/feed) and the attached servers' panel
# (/api/attach...) follow the server's own clock, whatever the visitor moves.
NOT_OF_THE_CONTROL = ("/api/engine", "/api/attach")
# Nor the wall-clock panels (/api/<slug>/measured): timings of this CPU, not pure functions of the URL, taken in
# their own bounded queue (chapter 9's for a new gamma takes seconds); the drawn state never waits for them, so
# they cannot travel in the chapter's (cacheable, ETagged) answer.
MEASURED = "/measured"


def api_requests(page) -> list[str]:
    """The list page.on('request') fills with the path and query of every /api/ request the page issues."""
    seen: list[str] = []

    def note(req):
        u = urlparse(req.url)
        if u.path.startswith("/api/") and not u.path.startswith(NOT_OF_THE_CONTROL) and MEASURED not in u.path:
            seen.append(f"{u.path}?{u.query}")

    page.on("request", note)
    return seen


def move(page, name: str, value: str) -> None:
    """Set a control as a hand does, in one step: its value, then the event its kind listens to."""
    page.locator(f'[name="{name}"]').first.evaluate(
        """(el, v) => { el.value = v;
          el.dispatchEvent(new Event(el.tagName === 'SELECT' ? 'change' : 'input', { bubbles: true })); }""",
        value,
    )


def settle(page) -> None:
    """Two animation frames after the draw: a request a scene starts while or just after drawing is issued by then."""
    page.evaluate("() => new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(ok)))")


def moved(page, url: str, name: str, value: str) -> list[str]:
    """Open url, wait for its first draw and anything it asks for after it, move one control, and return the API
    requests issued between the move and the draw it causes."""
    open_page(page, url)
    settle(page)
    page.wait_for_load_state("networkidle")
    seen = api_requests(page)
    n = renders(page)
    move(page, name, value)
    rendered(page, n)
    settle(page)
    return list(seen)


@pytest.mark.parametrize("slug", CHAPTER_SLUGS)
def test_moving_one_control_issues_one_request(page, base_url, slug):
    name, value = MOVES[slug]
    seen = moved(page, f"{base_url}/tour/{slug}", name, value)
    assert len(seen) == 1 and seen[0].startswith(f"/api/{slug}?"), seen
    assert page.locator(".fact").first.is_visible(), "the number is shown from the one answer"


def test_the_dials_page_issues_one_request_per_move(page, base_url):
    seen = moved(page, f"{base_url}/dials", *MOVES["dials"])
    assert len(seen) == 1 and seen[0].startswith("/api/dials?"), seen


def test_the_fact_follows_the_answer_it_came_with(page, base_url):
    """The fact box is refilled from the chapter's own answer: moved, it quotes the moved figure."""
    seen = moved(page, f"{base_url}/tour/roofline", *MOVES["roofline"])
    assert seen and "batch=64" in seen[0]
    assert "64 chats" in page.locator(".fact .fact-text").inner_text()
