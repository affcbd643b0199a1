"""A stand-in scene module with animation steps, served in place of a real one through Playwright routing.

The step contract (docs/scene-contract.md) is tested against this module, whose steps are known;
it records what tour.js asks of it. The real chapters' steps are checked in test_embed.py.
"""

from __future__ import annotations

NUM_STEPS = 4

SOURCE = (
    """
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
"""
    % NUM_STEPS
)


def use_stepping_scene(page, slug: str = "tokens") -> None:
    """Serve the stepping module as static/js/scenes/<slug>.js for this page (and its frames)."""
    page.route(
        f"**/static/js/scenes/{slug}.js",
        lambda route: route.fulfill(status=200, body=SOURCE, content_type="text/javascript"),
    )
