// scenes/kv-cache-grid.js: chapter 6's canvas: cache memory as 512-slot rows of page cells, one policy's frame.
//
// `opts` for every call: { blockSize, capacitySlots, look, selected } where look holds the resolved theme colours
// { colours: [one per request colour], waste, panel, free, ink, mono } and selected is a request id or null.
// A resident is { al, n }: al = { request_id, num_final_tokens, block_table | start_slot + num_slots }, n its tokens.

import { fitted } from '../lib/fit.js';

export const ROW_SLOTS = 512; // token slots per drawn row: a 2,048-token region is four rows

/** Cell size and canvas size for a canvas of the current width. */
function geometry(canvas, opts) {
  const bs = opts.blockSize;
  const cols = ROW_SLOTS / bs;
  const rows = opts.capacitySlots / ROW_SLOTS;
  const w = Math.max(120, canvas.clientWidth);
  const cellW = w / cols;
  // a fitted frame (embed, presenter) is short: a flatter grid leaves the block table and the table room
  const aspect = fitted() ? 0.4 : 0.62;
  const rowH = Math.max(4, (w * aspect) / rows); // not rounded: the height stays proportional to the width
  return { bs, cols, rows, w, cellW, rowH, h: rowH * rows, slotW: w / ROW_SLOTS };
}

function sizeCanvas(canvas, g) {
  const dpr = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(g.w * dpr) || canvas.height !== Math.round(g.h * dpr)) {
    canvas.width = Math.round(g.w * dpr);
    canvas.height = Math.round(g.h * dpr);
    // the layout height follows the width at once (CSS aspect ratio), before the canvas is redrawn: a frame
    // that fits itself to its window (fit.js) measures the final height while it searches, and settles
    canvas.style.aspectRatio = `${g.w} / ${g.h}`;
  }
  const c = canvas.getContext('2d');
  c.setTransform(dpr, 0, 0, dpr, 0, 0);
  return c;
}

/**
 * Paint one policy's residents at a step (null: the run is over) on its canvas. Returns a Map from physical page
 * cell to the request that holds it (for clicks), or null when the cache is empty.
 */
export function paintGrid(canvas, policy, residents, opts) {
  const g = geometry(canvas, opts);
  const c = sizeCanvas(canvas, g);
  c.clearRect(0, 0, g.w, g.h);
  c.fillStyle = opts.look.free;
  for (let r = 0; r < g.rows; r++) {
    for (let k = 0; k < g.cols; k++) c.fillRect(k * g.cellW + 0.5, r * g.rowH + 1, g.cellW - 1, g.rowH - 2);
  }
  if (!residents) return null;
  const { selected, look } = opts;
  const cells = new Map();
  const paint = { c, g, look, cells };
  for (const { al, n } of residents) {
    c.globalAlpha = selected === null || selected === al.request_id ? 1 : 0.28;
    if (policy.layout === 'paged') drawPages(paint, al, n);
    else drawRegion(paint, al, n);
  }
  c.globalAlpha = 1;
  if (selected !== null) outlineSelected(paint, policy, residents, selected);
  return cells;
}

/** The page cell under a pointer event on the canvas. */
export function cellAt(canvas, opts, e) {
  const g = geometry(canvas, opts);
  const r = canvas.getBoundingClientRect();
  const col = Math.floor((e.clientX - r.left) / g.cellW);
  const row = Math.floor((e.clientY - r.top) / g.rowH);
  return row * g.cols + col;
}

/** Paint slots [a, b) of the flat slot space (wrapping rows) with the current fill style. */
function spanRects(c, g, a, b, inset = 1) {
  for (let s = a; s < b;) {
    const row = Math.floor(s / ROW_SLOTS);
    const end = Math.min(b, (row + 1) * ROW_SLOTS);
    c.fillRect((s % ROW_SLOTS) * g.slotW, row * g.rowH + inset, (end - s) * g.slotW, g.rowH - 2 * inset);
    s = end;
  }
}

export const colourOf = (look, id) => look.colours[id % look.colours.length];

/** Slot ranges inside an allocation of A slots holding n tokens of a request that will reach L. */
function parts(n, A, L) {
  const fill = Math.min(n, A);
  const reach = Math.min(A, L);
  return [[0, fill, 'used'], [fill, reach, 'reserved'], [reach, A, 'internal']];
}

function fillFor({ c, look }, kind, colour) {
  c.fillStyle = kind === 'used' ? colour : kind === 'reserved' ? hatch(c, colour, look.panel) : look.waste;
}

function drawPages(p, al, n) {
  const { c, g, cells } = p;
  const bs = g.bs;
  const pages = Math.ceil(n / bs);
  const colour = colourOf(p.look, al.request_id);
  for (let j = 0; j < pages; j++) {
    const b = al.block_table[j];
    const x = (b % g.cols) * g.cellW + 0.5;
    const y = Math.floor(b / g.cols) * g.rowH + 1;
    cells.set(b, al.request_id);
    for (const [lo, hi, kind] of parts(n - j * bs, bs, al.num_final_tokens - j * bs)) {
      if (hi <= lo) continue;
      fillFor(p, kind, colour);
      c.fillRect(x + (lo / bs) * (g.cellW - 1), y, ((hi - lo) / bs) * (g.cellW - 1), g.rowH - 2);
    }
  }
}

function drawRegion(p, al, n) {
  const { c, g, cells } = p;
  const colour = colourOf(p.look, al.request_id);
  const s0 = al.start_slot;
  for (const [lo, hi, kind] of parts(n, al.num_slots, al.num_final_tokens)) {
    if (hi <= lo) continue;
    fillFor(p, kind, colour);
    spanRects(c, g, s0 + lo, s0 + hi);
  }
  const bs = g.bs;
  for (let cell = Math.floor(s0 / bs); cell < Math.ceil((s0 + al.num_slots) / bs); cell++) {
    if (!cells.has(cell)) cells.set(cell, al.request_id);
  }
  c.save();
  c.globalAlpha = 1;
  c.strokeStyle = p.look.panel;
  c.lineWidth = 2.5;
  c.stroke(regionOutline(g, s0, s0 + al.num_slots));
  c.restore();
}

/** The outline of slots [a, b) wrapped over rows: a staircase polygon (a rectangle within one row). */
function regionOutline(g, a, b) {
  const x = (s) => (s % ROW_SLOTS) * g.slotW;
  const r0 = Math.floor(a / ROW_SLOTS);
  const r1 = Math.floor((b - 1) / ROW_SLOTS);
  const xa = x(a);
  const xb = x(b - 1) + g.slotW;
  const y = (r) => r * g.rowH;
  const path = new Path2D();
  if (r0 === r1) {
    path.rect(xa, y(r0), xb - xa, g.rowH);
    return path;
  }
  path.moveTo(xa, y(r0));
  path.lineTo(g.w, y(r0));
  path.lineTo(g.w, y(r1));
  path.lineTo(xb, y(r1));
  path.lineTo(xb, y(r1 + 1));
  path.lineTo(0, y(r1 + 1));
  path.lineTo(0, y(r0 + 1));
  path.lineTo(xa, y(r0 + 1));
  path.closePath();
  return path;
}

/** Outline the selected request's region, or its pages numbered in block-table order. */
function outlineSelected({ c, g, look, cells }, policy, residents, id) {
  c.strokeStyle = look.ink;
  c.lineWidth = 1.5;
  const res = residents.find((r) => r.al.request_id === id);
  if (policy.layout !== 'paged') {
    if (res) c.stroke(regionOutline(g, res.al.start_slot, res.al.start_slot + res.al.num_slots));
    return;
  }
  for (const [cell, owner] of cells) {
    if (owner !== id) continue;
    c.strokeRect((cell % g.cols) * g.cellW + 0.5, Math.floor(cell / g.cols) * g.rowH + 1, g.cellW - 1, g.rowH - 2);
  }
  if (g.cellW < 14 || g.rowH < 11 || !res) return;
  const al = res.al;
  c.fillStyle = look.ink;
  c.font = `600 ${Math.min(11, g.rowH - 3)}px ${look.mono || 'monospace'}`;
  c.textAlign = 'center';
  c.textBaseline = 'middle';
  al.block_table.slice(0, Math.ceil(res.n / g.bs)).forEach((b, j) => {
    c.fillText(String(j), (b % g.cols + 0.5) * g.cellW, (Math.floor(b / g.cols) + 0.5) * g.rowH + 0.5);
  });
}

/** A canvas pattern: the request's colour, lighter, with diagonal stripes (reserved, not yet written). */
function hatch(c, colour, background) {
  const key = `${colour}|${background}`;
  c.hatches = c.hatches || new Map();
  if (!c.hatches.has(key)) c.hatches.set(key, c.createPattern(hatchTile(colour, background), 'repeat'));
  return c.hatches.get(key);
}

function hatchTile(colour, background) {
  const t = document.createElement('canvas');
  t.width = t.height = 6;
  const c = t.getContext('2d');
  c.fillStyle = background;
  c.fillRect(0, 0, 6, 6);
  c.globalAlpha = 0.35;
  c.fillStyle = colour;
  c.fillRect(0, 0, 6, 6);
  c.globalAlpha = 0.9;
  c.strokeStyle = colour;
  c.lineWidth = 1.2;
  c.beginPath();
  c.moveTo(-1, 7); c.lineTo(7, -1);
  c.stroke();
  return t;
}

/**
 * One chat's cache, zoomed in: a column per token (its keys on top, its values below), grouped in pages of
 * blockSize tokens, wrapping over lines. Tokens [0, n) are written; the newest is outlined. Returns the height.
 */
/** The largest slot (2 to 14 logical px) that draws a chat of `tokens` in at most six lines of pages. */
function chatSlot(tokens, blockSize, L) {
  for (let slot = 14; slot > 2; slot--) {
    const gap = Math.max(4, slot), perLine = Math.max(1, Math.floor((L + gap) / (blockSize * slot + gap)));
    if (Math.ceil(Math.ceil(tokens / blockSize) / perLine) <= 6) return slot;
  }
  return 2;
}

export function paintChat(canvas, n, finalTokens, blockSize, look, colour, prompt = null) {
  // laid out on a fixed logical width (phone or desktop, chosen by the window, which a fit does not change) and
  // scaled to the canvas: the height stays proportional to the width, so a fitted frame settles (fit.js)
  const L = window.innerWidth < 700 ? 400 : 1000;
  const w = Math.max(200, canvas.clientWidth);
  const k = w / L;
  const slot = chatSlot(finalTokens, blockSize, L);
  const gap = Math.max(4, slot); // pages sit apart, so a page reads as one block
  const pageW = blockSize * slot + gap;
  const perLine = Math.max(1, Math.floor((L + gap) / pageW));
  const lines = Math.max(1, Math.ceil(Math.ceil(finalTokens / blockSize) / perLine));
  const lineH = 2 * slot + gap + 4;
  const g = { w, h: lines * lineH * k };
  const c = sizeCanvas(canvas, g);
  c.clearRect(0, 0, g.w, g.h);
  c.scale(k, k);
  for (let t = 0; t < finalTokens; t++) {
    const page = Math.floor(t / blockSize);
    const x = (page % perLine) * pageW + (t % blockSize) * slot;
    const y = Math.floor(page / perLine) * lineH;
    const written = t < n;
    // the visitor's chat: the question's tokens in the question's colour, the answer's in the chat's
    c.fillStyle = !written ? look.free : prompt !== null && t < prompt.tokens ? prompt.colour : colour;
    c.fillRect(x + 0.5, y, slot - 1, slot - 1); // K
    c.globalAlpha = written ? 0.6 : 1;
    c.fillRect(x + 0.5, y + slot, slot - 1, slot - 1); // V
    c.globalAlpha = 1;
    if (t === n - 1) {
      c.strokeStyle = look.ink;
      c.lineWidth = 1.5;
      c.strokeRect(x, y - 0.5, slot, 2 * slot);
    }
  }
  return g.h;
}
