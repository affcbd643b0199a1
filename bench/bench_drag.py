"""Chapter 7 under a moving hand, in headless Chromium (Debian's /usr/bin/chromium via Playwright): the seats slider
dragged across its whole range in one second (an input event every ~33 ms, 1 -> 64 seats), then the time from the
last input event until the lanes and the readouts show 64 seats. Five drags, each at an arrival rate the server has
never seen (so every URL is new and the per-URL memo cannot help). Also counts the requests the page sent and the
most it ever had in flight at once (the scene's fetcher keeps that at one).

Target: the median drag settles <= 300 ms after the last input.

run() -> rows; `python bench/bench_drag.py` prints them.
"""

from __future__ import annotations

import statistics

from _server import serve

from inside_llm.headless import launch

DRAGS = 5
EVENTS = 31  # one per animation frame at ~30 fps for one second
SEATS = [round(1 + 63 * k / (EVENTS - 1)) for k in range(EVENTS)]

DRAG_JS = """async ({ seats, ms }) => {
  const el = document.querySelector('#ctl-seats');
  const wait = (t) => new Promise((r) => setTimeout(r, t));
  const t0 = performance.now();
  for (let k = 0; k < seats.length; k++) {
    const due = t0 + (k * ms) / (seats.length - 1);
    if (performance.now() < due) await wait(due - performance.now());
    el.value = String(seats[k]);
    el.dispatchEvent(new Event('input', { bubbles: true }));
  }
  const last = performance.now();
  const target = seats[seats.length - 1];
  const done = () => document.querySelectorAll('.bt-panel[data-policy=static] .bt-lane').length === target &&
    document.querySelector('.bt-engine')?.textContent.includes(`all ${target} seats`) &&
    !document.querySelector('#stage')?.hasAttribute('aria-busy');
  while (!done()) await new Promise((r) => requestAnimationFrame(r));
  return performance.now() - last;
}"""

COUNT_JS = """() => {
  window.__bench = { sent: 0, open: 0, maxOpen: 0 };
  const orig = window.fetch;
  window.fetch = async (...args) => {
    const url = String(args[0]);
    if (!url.includes('/api/batching?')) return orig(...args);
    const b = window.__bench; b.sent++; b.open++; b.maxOpen = Math.max(b.maxOpen, b.open);
    try { return await orig(...args); } finally { b.open--; }
  };
}"""


def run() -> list[dict]:
    from playwright.sync_api import sync_playwright

    settle, sent, max_open = [], [], []
    with serve(workers=1) as (base, _), sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        for k in range(DRAGS):
            rate = 3.25 + 0.5 * k  # never seen: a new URL for every seat count
            page.goto(f"{base}/tour/batching?rate={rate}&seats=1&step=0")
            page.wait_for_function("() => Number(document.documentElement.dataset.rendered || 0) > 0", timeout=120_000)
            page.evaluate(COUNT_JS)
            settle.append(page.evaluate(DRAG_JS, {"seats": SEATS, "ms": 1000}))
            stats = page.evaluate("() => window.__bench")
            sent.append(stats["sent"])
            max_open.append(stats["maxOpen"])
        browser.close()
    return [
        {
            "name": "ch7 seats drag 1->64 in 1 s: settle after last input",
            "value": round(statistics.median(settle), 1),
            "p99": round(max(settle), 1),
            "unit": "ms",
            "note": f"median of {DRAGS} drags ({EVENTS} input events each, never-seen rates); p99 column: the slowest; "
            "target <= 300 ms",
        },
        {
            "name": "ch7 seats drag: requests sent per drag",
            "value": statistics.median(sent),
            "unit": "requests",
            "note": f"{EVENTS} input events; most in flight at once: {max(max_open)}",
        },
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
