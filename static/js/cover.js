// cover.js: the cover at `/`: the server board (chapter 10's drawing, its pictures only), the question box
// whose text every chapter link carries, and the theme toggle.

import { createController } from './lib/controller.js';
import { toQuery } from './lib/api.js';
import { applyTheme, bindThemeToggle } from './lib/theme.js';

const page = JSON.parse(document.getElementById('page-state').textContent);
const els = { stage: document.getElementById('stage'), status: document.getElementById('stage-status'), form: null, fact: null };
let ctl = createController(page, els);
const box = document.getElementById('q');

/** Every chapter link starts the tour with the question typed so far. */
function threadLinks() {
  const q = box.value.trim();
  for (const a of document.querySelectorAll('a[data-step]')) a.href = a.href.split('?')[0] + (q ? `?${toQuery({ q })}` : '');
}

box.addEventListener('input', threadLinks);
document.querySelector('.skip-link')?.addEventListener('click', (ev) => { ev.preventDefault(); box.focus(); });
bindThemeToggle(document.getElementById('theme-toggle'), () => ctl.redraw());
applyTheme(page.options.theme);
threadLinks();
ctl.start();
addEventListener('pagehide', () => { ctl.destroy(); });
addEventListener('pageshow', (ev) => {
  if (!ev.persisted) return;
  ctl = createController(page, els);
  ctl.start();
});
