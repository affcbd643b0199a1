"""Waiting for the page instead of the clock: the controller counts its draws in <html data-rendered="n">
and fires `inside-llm:rendered` on document after each (static/js/lib/controller.js)."""

from __future__ import annotations

import math
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


def set_range(page, selector: str, value) -> None:
    """Move a slider (or any input) as a hand does: set its value and fire `input`."""
    page.locator(selector).evaluate(
        "(el, v) => { el.value = v; el.dispatchEvent(new Event('input', { bubbles: true })); }", str(value)
    )


def retype(page, selector: str, text: str, delay: float = 10) -> None:
    """Clear a text box and type text into it key by key (delay ms apart), as a visitor does."""
    box = page.locator(selector)
    box.fill("")
    box.type(text, delay=delay)


def refetch(page, endpoint: str, expect: str, action) -> None:
    """Run action() (change a control) and wait for the response of `endpoint` whose URL holds `expect`
    (a query part such as "seats=24")."""
    with page.expect_response(lambda r: endpoint in r.url and expect in r.url):
        action()


def measured_bars(page, panel: str, bar: str, at_least: int, timeout: float) -> str:
    """Wait until a scene's own panel of CPU timings (chapters 7 and 9) has drawn at least `at_least` bars
    (`bar`), or says 'Not measured'; returns the panel's text. (The shared panels of scenes/measured-panels.js
    are awaited with measured_panel, below.)"""
    page.wait_for_function(
        "([panel, bar, n]) => document.querySelectorAll(bar).length >= n || "
        "document.querySelector(panel)?.textContent.includes('Not measured')",
        arg=[panel, bar, at_least],
        timeout=timeout,
    )
    return page.locator(panel).inner_text()


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


def measured_panel(page, timeout: float = 120_000):
    """Wait for a "Measured on this server" panel (scenes/measured-panels.js) to finish: it says
    data-measured="shown" or "unavailable" once the server's CPU has answered. Returns its locator."""
    sel = '[data-measured="shown"], [data-measured="unavailable"]'
    page.wait_for_selector(sel, timeout=timeout)
    return page.locator(sel)


def js_num(x: float, sig: int = 3) -> str:
    """format.js num(x, sig): significant digits, integers whole, thousands separated, no trailing zeros
    (Intl rounds half away from zero: 176.5 -> "177")."""
    from decimal import ROUND_HALF_UP, Decimal

    if abs(x) >= 10 ** (sig - 1) or float(x).is_integer():
        digits = 0
    else:
        digits = min(6, max(0, sig - 1 - math.floor(math.log10(abs(x) or 1))))
    text = f"{Decimal(repr(x)).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP):,}"
    return text.rstrip("0").rstrip(".") if "." in text else text


AXE_RULES = {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}  # WCAG 2.1 A and AA


def serious_violations(page, context=None) -> list[str]:
    """axe-core's serious and critical WCAG 2.1 A/AA violations on the page (or inside `context`, a selector),
    each as "rule (impact): first targets"; [] when there are none."""
    from axe_playwright_python.sync_playwright import Axe

    options = {"resultTypes": ["violations"], "runOnly": AXE_RULES}
    result = Axe().run(page, context=context, options=options) if context else Axe().run(page, options=options)
    return [
        f"{v['id']} ({v['impact']}): {[n['target'] for n in v['nodes'][:3]]}"
        for v in result.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]
