"""The tour in headless Chromium (Debian's /usr/bin/chromium via Playwright) against a live server:

- page weight: bytes of HTML + JS + CSS each tour page loads (uncompressed bodies), and of the whole tour
  (every distinct file once, as a browser with a warm cache would fetch them), plus the JSON it fetches;
- first render: navigation start to the stage drawn with its data (stage has content, no aria-busy);
  median of LOADS fresh contexts per scene;
- long animation frames (> 50 ms) while the scene animates for ANIMATE_S seconds after its first render
  (PerformanceObserver 'long-animation-frame'; 'longtask' where LoAF is missing). Aim: none.

run() -> rows; `python bench/bench_pages.py` prints them. Figures only: nothing passes or fails.
"""

from __future__ import annotations

import statistics

from _server import serve

from inside_llm.api.registry import CHAPTER_SLUGS
from inside_llm.headless import launch

LOADS = 3
ANIMATE_S = 5.0
LONG_MS = 50

OBSERVE = (
    """
window.__long = [];
const kind = PerformanceObserver.supportedEntryTypes.includes('long-animation-frame') ? 'long-animation-frame'
                                                                                      : 'longtask';
window.__longKind = kind;
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) if (e.duration > %d) window.__long.push([e.startTime, e.duration]);
}).observe({type: kind, buffered: true});
"""
    % LONG_MS
)

DRAWN = """() => {
  const s = document.querySelector('#stage');
  if (!s || !s.children.length || s.hasAttribute('aria-busy')) return false;
  return performance.now();
}"""

KINDS = {"document": "html", "script": "js", "stylesheet": "css", "fetch": "json", "xhr": "json"}


def _load(browser, url: str) -> dict:
    ctx = browser.new_context(viewport={"width": 1280, "height": 860})
    page = ctx.new_page()
    page.add_init_script(OBSERVE)
    sizes: dict[str, tuple[str, int]] = {}

    def on_response(resp):
        kind = KINDS.get(resp.request.resource_type)
        if kind:
            try:
                sizes[resp.url] = (kind, len(resp.body()))
            except Exception:  # a body the browser already dropped (redirects, aborted fetches)
                pass

    page.on("response", on_response)
    page.goto(url, wait_until="domcontentloaded")
    first_ms = page.wait_for_function(DRAWN, polling="raf", timeout=60_000).json_value()
    page.wait_for_timeout(ANIMATE_S * 1e3)
    long_frames = page.evaluate("window.__long")
    kind = page.evaluate("window.__longKind")
    page.wait_for_load_state("networkidle")
    ctx.close()
    after = [d for t, d in long_frames if t >= first_ms]
    return {
        "first_ms": first_ms,
        "sizes": sizes,
        "long_after": after,
        "long_before": [d for t, d in long_frames if t < first_ms],
        "kind": kind,
    }


def run() -> list[dict]:
    from playwright.sync_api import sync_playwright

    rows, tour_files = [], {}
    with serve(workers=1) as (base, _), sync_playwright() as p:
        browser = launch(p)
        pages = [(slug, f"{base}/tour/{slug}") for slug in CHAPTER_SLUGS] + [("dials-page", f"{base}/dials")]
        for slug, url in pages:
            loads = [_load(browser, url) for _ in range(LOADS)]
            last = loads[-1]
            tour_files.update(last["sizes"])
            by_kind = {k: sum(n for kk, n in last["sizes"].values() if kk == k) for k in ("html", "js", "css", "json")}
            weight = by_kind["html"] + by_kind["js"] + by_kind["css"]
            firsts = [ld["first_ms"] for ld in loads]
            rows.append(
                {
                    "name": f"first_render_{slug}",
                    "value": round(statistics.median(firsts), 1),
                    "p99": round(max(firsts), 1),
                    "unit": "ms",
                    "note": f"median of {LOADS} fresh loads (p99 column: the slowest)",
                }
            )
            rows.append(
                {
                    "name": f"page_weight_{slug}",
                    "value": weight,
                    "unit": "B",
                    "note": f"html {by_kind['html']:,} + js {by_kind['js']:,} + css {by_kind['css']:,}; "
                    f"json fetched {by_kind['json']:,}",
                }
            )
            longs = [d for ld in loads for d in ld["long_after"]]
            during_load = sum(len(ld["long_before"]) for ld in loads)
            rows.append(
                {
                    "name": f"long_frames_{slug}",
                    "value": len(longs),
                    "unit": "frames",
                    "note": f"> {LONG_MS} ms in {LOADS} x {ANIMATE_S:g} s of animation after first render "
                    f"({last['kind']}); longest {max(longs, default=0):.0f} ms; {during_load} more "
                    "while loading",
                }
            )
        browser.close()
    total = {k: sum(n for kk, n in tour_files.values() if kk == k) for k in ("html", "js", "css")}
    rows.append(
        {
            "name": "page_weight_whole_tour",
            "value": sum(total.values()),
            "unit": "B",
            "note": f"every distinct file of the {len(pages)} pages once: html {total['html']:,} + "
            f"js {total['js']:,} + css {total['css']:,}",
        }
    )
    return rows


if __name__ == "__main__":
    for r in run():
        print(f"{r['name']:<32} {r['value']:>12,} {r['unit']:<6} {r['note']}")
