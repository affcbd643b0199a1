"""Waiting for the page instead of the clock: the controller counts its draws in <html data-rendered="n">
and fires `inside-llm:rendered` on document after each (static/js/lib/controller.js)."""

from __future__ import annotations

import re

RENDERS = "() => Number(document.documentElement.dataset.rendered || 0)"


def renders(page_or_frame) -> int:
    """How many times the stage has drawn so far (0 before the first draw)."""
    return page_or_frame.evaluate(RENDERS)


def rendered(page_or_frame, after: int = 0, timeout: float = 90_000) -> int:
    """Wait until the stage has drawn more than `after` times; returns the new count."""
    page_or_frame.wait_for_function(f"(n) => ({RENDERS})() > n", arg=after, timeout=timeout)
    return renders(page_or_frame)


def open_page(page, url: str) -> int:
    """Go to url and wait for the stage's first draw."""
    page.goto(url)
    return rendered(page)


def change(page, action, timeout: float = 90_000) -> int:
    """Run action() (move a control) and wait for the draw it causes."""
    n = renders(page)
    action()
    return rendered(page, n, timeout)


def settled(page_or_frame, expr: str) -> float:
    """The value of expr once it stops moving (five equal readings, a frame apart): a fit search or a tween has
    ended. For waits on a drawing that eases to its final state, not on the clock."""
    page_or_frame.wait_for_function(f"""() => new Promise((ok) => {{ const f = {expr};
      let last = f(), same = 0; const tick = () => {{ const v = f(); same = v === last ? same + 1 : 0; last = v;
      if (same >= 5) ok(true); else requestAnimationFrame(tick); }}; requestAnimationFrame(tick); }})""")
    return page_or_frame.evaluate(expr)


def watch_console(pg):
    """Collect console errors and uncaught exceptions in pg.console_errors; a test that expects some
    (a deliberate 422, a refused frame) lists patterns in pg.allowed_errors."""
    pg.console_errors, pg.allowed_errors = [], []
    pg.on("console", lambda m: pg.console_errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.console_errors.append(str(e)))
    return pg


def unexpected_errors(pg) -> list[str]:
    return [e for e in pg.console_errors if not any(re.search(p, e) for p in pg.allowed_errors)]
