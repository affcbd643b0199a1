"""A stand-in scene module with animation steps, served in place of a real one through Playwright routing.

No chapter implemented numSteps/showStep when the slides features landed, so the step contract
(docs/scene-contract.md) is tested against this module; it records what tour.js asks of it.
"""

from __future__ import annotations

from inside_llm.api.registry import CHAPTER_SLUGS, chapter_module
from inside_llm.paths import static_dir

NUM_STEPS = 4

SOURCE = """
// stepping scene (test double): records mount options, updates and shown steps on window.__stepping.
let stage = null;
const log = (window.__stepping = window.__stepping || { mounts: [], updates: 0, shown: [] });
export function mount(el, ctx) {
  stage = el;
  el.replaceChildren();
  const d = document.createElement('div');
  d.id = 'stepping';
  d.style.cssText = 'font-size: 2rem; padding: 1rem';
  el.appendChild(d);
  log.mounts.push({ autoplay: ctx.options.autoplay, embed: ctx.embed });
}
export function update(data, params) {
  log.updates += 1;
  stage.querySelector('#stepping').textContent = `tokens ${data.num_tokens}`;
}
export function numSteps(data) { return %d; }
export function showStep(i) {
  log.shown.push(i);
  stage.querySelector('#stepping').textContent = `step ${i}`;
}
export function unmount() { stage = null; }
""" % NUM_STEPS


def use_stepping_scene(page, slug: str = "tokens") -> None:
    """Serve the stepping module as static/js/scenes/<slug>.js for this page (and its frames)."""
    page.route(f"**/static/js/scenes/{slug}.js",
               lambda route: route.fulfill(status=200, body=SOURCE, content_type="text/javascript"))


def live_chapters() -> list[str]:
    """Chapters with both an endpoint and a stage module: the slides features must work on each."""
    js = static_dir() / "js" / "scenes"
    return [s for s in CHAPTER_SLUGS if chapter_module(s) is not None and (js / f"{s}.js").is_file()]
