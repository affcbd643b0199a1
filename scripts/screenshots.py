"""Screenshot scenes in headless Chromium at desktop and phone width, light and dark.

    python scripts/screenshots.py [slug ...] [--out out/screens] [--dark] [--query 'batch=8']

Starts the server on a free loopback port, saves PNGs, stops the server. Needs Debian's chromium
(/usr/bin/chromium) and the `playwright` Python package (no browser download).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from inside_llm.headless import launch

SIZES = {"desktop": (1440, 900), "phone": (390, 844)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "inside_llm", "serve", "--port", str(port), "--log-level", "warning"]
    )
    for _ in range(600):  # up to a minute: a loaded machine loads the model slowly
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not start")


def main() -> None:
    from playwright.sync_api import sync_playwright

    ap = argparse.ArgumentParser()
    ap.add_argument("slugs", nargs="*", default=["tokens"])
    ap.add_argument("--out", default="out/screens")
    ap.add_argument("--dark", action="store_true", help="also take dark-theme shots")
    ap.add_argument("--query", default="", help="query string appended to each page URL")
    ap.add_argument("--embed", action="store_true", help="shoot /embed/<slug> instead of /tour/<slug>")
    ap.add_argument("--wait-ms", type=int, default=1200)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = start_server(port)
    try:
        with sync_playwright() as p:
            browser = launch(p)
            for slug in args.slugs:
                for theme in ["light", "dark"] if args.dark else ["light"]:
                    for name, (w, hgt) in SIZES.items():
                        page = browser.new_page(viewport={"width": w, "height": hgt}, color_scheme=theme)
                        errors: list[str] = []
                        page.on(
                            "console", lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None
                        )
                        kind = "embed" if args.embed else "tour"
                        page.goto(f"http://127.0.0.1:{port}/{kind}/{slug}?{args.query}")
                        page.wait_for_timeout(args.wait_ms)
                        path = out / f"{slug}-{kind}-{name}-{theme}.png"
                        page.screenshot(path=str(path), full_page=True)
                        print(path, "errors:" if errors else "", *errors)
                        page.close()
            browser.close()
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
