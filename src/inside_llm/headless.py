"""Debian's Chromium, headless, as the browser tests, the benchmarks and scripts/screenshots.py launch it through
Playwright (no browser download). INSIDE_LLM_CHROMIUM names another binary."""

from __future__ import annotations

import os

CHROMIUM = os.environ.get("INSIDE_LLM_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def launch(playwright):
    """A headless Chromium browser from a started Playwright (`with sync_playwright() as p: launch(p)`)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)


# An init script (page.add_init_script) that keeps the page's cumulative layout shift in window.__cls as browsers
# report it: shifts without recent input grouped in session windows (a gap under 1 s, 5 s at most), the largest
# window's sum. window.__shifts keeps each shift as [ms, value, what moved], for a failure message. The browser
# tests (tests/browser/test_layout_shift.py) and `make bench` (suite pages) both read it.
LAYOUT_SHIFT_JS = """window.__cls = 0; window.__shifts = [];
(() => { let win = 0, first = -1, last = -1;
new PerformanceObserver((list) => { for (const e of list.getEntries()) if (!e.hadRecentInput) {
  if (first < 0 || e.startTime - last >= 1000 || e.startTime - first >= 5000) { win = 0; first = e.startTime; }
  win += e.value; last = e.startTime; window.__cls = Math.max(window.__cls, win);
  window.__shifts.push([Math.round(e.startTime), +e.value.toFixed(4), (e.sources || []).map((s) => {
    const n = s.node; if (!n || !n.getAttribute) return n ? n.nodeName : '?';
    return `${n.nodeName.toLowerCase()}.${(n.getAttribute('class') || '').trim().replace(/\\s+/g, '.')}`; })]);
} }).observe({type: 'layout-shift', buffered: true}); })();"""
