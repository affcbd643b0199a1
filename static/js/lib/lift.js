// lift.js: chapter 4 opens by lifting one GPU out of the server, the 8-GPU board of the cover and of
// chapter 10 (in outline): the other GPUs and the switches fade while GPU 0 grows to fill the stage, where
// the chip's own drawing waits. Skipped for reduced motion, slides and frozen steps.

import { h } from './svg.js';

const DURATION_MS = 1100;

/** Play the lift over `stage` (position: relative); resolves when the overlay is gone. */
export function liftFromServer(stage) {
  const overlay = h('div', { class: 'lift', 'aria-hidden': 'true' }, stage);
  const board = h('div', { class: 'lift-board' }, overlay);
  const gpus = [];
  for (let i = 0; i < 8; i++) {
    if (i === 4) for (let s = 0; s < 4; s++) h('div', { class: 'lift-switch', text: 'NVSwitch' }, board);
    gpus.push(h('div', { class: 'lift-gpu', text: `GPU ${i}` }, board));
  }
  return new Promise((done) => {
    requestAnimationFrame(() => {
      const o = overlay.getBoundingClientRect(), g = gpus[0].getBoundingClientRect();
      // GPU 0 grows to fill the part of the stage in view (a tall stage on a phone runs past the screen)
      const seen = Math.max(g.height * 2, Math.min(o.height, innerHeight - Math.max(o.top, 0) - 140));
      const s = Math.min(o.width / g.width, seen / g.height) * 0.9;
      const x = o.left + (o.width - g.width * s) / 2 - g.left, y = o.top + (seen - g.height * s) / 2 - g.top;
      gpus[0].style.transform = `translate(${x}px, ${y}px) scale(${s})`;
      overlay.classList.add('go');
      setTimeout(() => { overlay.remove(); done(); }, DURATION_MS);
    });
  });
}
