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
