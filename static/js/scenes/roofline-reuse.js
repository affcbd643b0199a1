// scenes/roofline-reuse.js: chapter 5's "one fetch, many tokens" picture. One weight tile is read from HBM once per
// step and multiplied with every token in that step: all the prompt's tokens in prefill, one token per chat in
// decode. Its fan of uses is the arithmetic intensity the chart plots.

import { svg, clear, root } from '../lib/svg.js';
import { num } from '../lib/format.js';

const LAYOUT = {
  wide: { W: 900, rowH: 66, head: 130, tile: 28, tok: 9, gapTok: 3, perRow: 24, rows: 2, textW: 310 },
  mid: { W: 660, rowH: 64, head: 106, tile: 26, tok: 9, gapTok: 3, perRow: 12, rows: 2, textW: 270, fan: 50 },
  narrow: { W: 360, rowH: 100, head: 0, tile: 24, tok: 8, gapTok: 3, perRow: 18, rows: 2, textW: 0 },
};

/** Draw both rows into host; returns {rows: [{phase, tokens, drawn}]} for tests and announcements. */
export function drawReuse(host, d, variant) {
  const L = LAYOUT[variant] || LAYOUT.wide, narrow = variant === 'narrow';
  const rows = [
    { phase: 'Prefill', tokens: d.prefill.batch * d.prefill.context_tokens, ai: d.prefill.arithmetic_intensity, bound: d.prefill.bound,
      what: d.prefill.batch === 1 ? 'the whole prompt' : `${num(d.prefill.batch)} prompts × ${num(d.prefill.context_tokens)}` },
    { phase: 'Decode', tokens: d.decode.batch, ai: d.decode.arithmetic_intensity, bound: d.decode.bound,
      what: d.decode.batch === 1 ? 'one new token' : 'one new token per chat' },
  ];
  const H = rows.length * L.rowH + 6;
  const s = root(clear(host), L.W, H, rows.map((r) => `${r.phase}: one fetch of a weight serves ${num(r.tokens)} ` +
    `token${r.tokens === 1 ? '' : 's'}, ${num(r.ai, 3)} FLOP per byte`).join('. '));
  s.classList.add('rf-reuse-svg', narrow ? 'rf-reuse-narrow' : 'rf-reuse-wide');
  const out = [];
  rows.forEach((r, i) => out.push(drawRow(s, L, r, i * L.rowH + 4, narrow)));
  return { rows: out };
}

function drawRow(s, L, r, y0, narrow) {
  const g = svg('g', { class: `rf-reuse-row ${r.phase.toLowerCase()}` }, s);
  let ty = y0 + (narrow ? 34 : L.rowH / 2 - L.tile / 2), tx = narrow ? 4 : L.head;
  if (narrow) {
    svg('text', { x: 4, y: y0 + 14, class: 'rf-reuse-phase', text: r.phase }, g);
    svg('text', { x: 66, y: y0 + 14, class: 'rf-reuse-small', text: `1 fetch → ${num(r.tokens)} token${r.tokens === 1 ? '' : 's'} → ${num(r.ai, 3)} FLOP/byte` }, g);
  } else {
    svg('text', { x: 0, y: y0 + L.rowH / 2 - 4, class: 'rf-reuse-phase', text: r.phase }, g);
    svg('text', { x: 0, y: y0 + L.rowH / 2 + 13, class: 'rf-reuse-small', text: `${r.bound}-bound` }, g);
  }
  svg('rect', { x: tx, y: ty, width: L.tile, height: L.tile, rx: 4, class: 'rf-reuse-tile' }, g);
  svg('text', { x: tx + L.tile / 2, y: ty + L.tile / 2 + 4, 'text-anchor': 'middle', class: 'rf-reuse-w', text: 'W' }, g);
  const cap = L.perRow * L.rows;
  const drawn = Math.min(r.tokens, r.tokens > cap ? cap - 1 : cap);
  const gx = tx + L.tile + (L.fan || (narrow ? 40 : 56)), step = L.tok + L.gapTok;
  const rowsUsed = Math.ceil(Math.max(drawn, 1) / L.perRow);
  const gy = ty + L.tile / 2 - (rowsUsed * step - L.gapTok) / 2;
  const fan = svg('g', { class: 'rf-reuse-fan' }, g);
  const toks = svg('g', {}, g);
  for (let k = 0; k < drawn; k++) {
    const x = gx + (k % L.perRow) * step, y = gy + Math.floor(k / L.perRow) * step;
    svg('line', { x1: tx + L.tile, y1: ty + L.tile / 2, x2: x, y2: y + L.tok / 2 }, fan);
    svg('rect', { x, y, width: L.tok, height: L.tok, rx: 2, class: 'rf-reuse-token' }, toks);
  }
  const endX = gx + Math.min(drawn, L.perRow) * step + 4;
  if (drawn < r.tokens) {
    svg('text', { x: endX, y: gy + step + 3, class: 'rf-reuse-more', text: `+${num(r.tokens - drawn)}` }, g);
  }
  if (!narrow) {
    const x = L.W - L.textW;
    svg('text', { x, y: y0 + L.rowH / 2 - 4, class: 'rf-reuse-text', text: `1 fetch → ${num(r.tokens)} token${r.tokens === 1 ? '' : 's'}` }, g);
    svg('text', { x, y: y0 + L.rowH / 2 + 13, class: 'rf-reuse-small', text: `(${r.what}) · ${num(r.ai, 3)} FLOP per byte` }, g);
  } else {
    svg('text', { x: 4, y: ty + L.tile + 22 + (rowsUsed > 1 ? 6 : 0), class: 'rf-reuse-small muted', text: r.what }, g);
  }
  return { phase: r.phase, tokens: r.tokens, drawn };
}
