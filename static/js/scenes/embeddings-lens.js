// scenes/embeddings-lens.js: chapter 2's logit lens beside the tower: top 3 per drawn floor, or a ladder of every
// floor for the last token; and the same as a list.

import { svg, h, clear } from '../lib/svg.js';
import { pct } from '../lib/format.js';
import { pieceLabel } from './embeddings-strips.js';

/** Three text rows with probability bars beside a floor: the selected token's top-3 guesses there. */
export function lensRows(g, v, y) {
  const x = v.W - v.lens;
  return [0, 1, 2].map((k) => {
    const yy = y + k * 14 + 9;
    const bar = svg('rect', { x, y: yy - 9, height: 12, rx: 2, width: 1, class: 'emb-lens-bar' }, g);
    const text = svg('text', { x: x + 4, y: yy, class: 'emb-lens-text' }, g);
    return { bar, text };
  });
}

/**
 * Every floor's top guess for a token the lens reached on all floors (the last one), one row per floor from the
 * top layer down: where the model's answer appears. Drawn floors' rows are bold.
 */
export function lensLadder(s, d, v, y0, y1) {
  const g = svg('g', { class: 'emb-ladder' }, s), n = d.floors.length, rowH = (y1 - y0) / n, x = v.W - v.lens;
  const rows = [...d.floors].reverse().map((fl, k) => {
    const y = y0 + k * rowH, mid = y + rowH / 2 + 4;
    const row = svg('g', { class: `emb-ladder-row${fl.drawn ? ' drawn' : ''}`, 'data-floor': fl.after_layer }, g);
    svg('text', { x, y: mid, class: 'emb-ladder-floor', text: fl.after_layer === 0 ? 'emb' : `L${fl.after_layer}` }, row);
    const bar = svg('rect', { x: x + 30, y: mid - 10, height: 13, rx: 2, width: 1, class: 'emb-lens-bar' }, row);
    const text = svg('text', { x: x + 33, y: mid, class: 'emb-lens-text' }, row);
    return { fl, bar, text };
  });
  return { g, rows, w: v.lens - 30 };
}

/** The lens column for token i: every floor's top guess (the ladder) when the lens reached it on every floor,
 * else the top 3 beside each drawn floor. */
export function fillLens(tower, head, d, i, who) {
  const { ladder, byFloor, v } = tower;
  const every = ladder && d.floors.every((fl) => fl.lens[i]); // the lens reached this token on every floor
  head.textContent = every ? `if it stopped on each floor, after ${who}:` : `if it stopped here, after ${who}:`;
  if (ladder) ladder.g.style.display = every ? '' : 'none';
  d.floors.forEach((fl, f) => byFloor[f]?.lensRows.forEach((r, k) => {
    const gs = fl.lens[i]?.[k];
    r.text.style.display = r.bar.style.display = every || !gs ? 'none' : '';
    if (!gs || every) return;
    r.text.textContent = `${pieceLabel(gs)}  ${pct(gs.p, 0)}`;
    r.bar.setAttribute('width', Math.max(1, gs.p * v.lens).toFixed(1));
  }));
  if (every) {
    ladder.rows.forEach(({ fl, bar, text }) => {
      const gs = fl.lens[i][0];
      text.textContent = `${pieceLabel(gs)}  ${pct(gs.p, 0)}`;
      bar.setAttribute('width', Math.max(1, gs.p * ladder.w).toFixed(1));
    });
  }
}

/** The same, as a list (read aloud; the phone drawing shows it): every floor the lens reached, top 3 each. */
export function drawLensList(box, d, i, who) {
  clear(box);
  h('p', { class: 'emb-lens-title', text: `After ${who}, the next token would be… (floor by floor, top 3)` }, box);
  const ol = h('ol', { class: 'emb-lens-list' }, box);
  [...d.floors].reverse().filter((fl) => fl.lens[i]).forEach((fl) => {
    const li = h('li', {}, ol);
    h('span', { class: 'emb-lens-floor', text: fl.after_layer === 0 ? 'embedding' : `layer ${fl.after_layer}` }, li);
    const gs = h('span', { class: 'emb-lens-guesses' }, li);
    for (const g of fl.lens[i]) {
      const one = h('b', { text: `${pieceLabel(g)} ` }, gs);
      h('span', { text: pct(g.p, 0) }, one);
    }
    if (fl.change) h('span', { class: 'emb-lens-change', text: `changed ${pct(fl.change[i], 0)}` }, li);
  });
}
