// scenes/embeddings.js: chapter 2: the prompt's real embedding rows rise floor by floor through the demo model.

import { svg, h, clear, root } from '../lib/svg.js';
import { swatches } from '../lib/legend.js';
import { num, pct, plural } from '../lib/format.js';
import { mathDetails } from '../lib/math.js';
import { sceneRoot, readoutRow, readout, still } from '../lib/scene-kit.js';
import { fitted } from '../lib/fit.js';
import { rows } from '../lib/packed.js';
import { lensRows, lensLadder, fillLens, drawLensList } from './embeddings-lens.js';
import { colours, vectorImage, pieceLabel, PIECE_KEY, legendScale, variantFor, drawToScale, modelWords,
  modelNote } from './embeddings-strips.js';
import { measuredBars, measuredWho } from './measured-panels.js';

const VARIANTS = {
  // maxCols: at most api/embeddings.py DRAWN_COLUMNS (the server sends the vectors and the lens of the last 20 tokens)
  wide: { name: 'wide', W: 860, label: 92, lens: 190, maxCols: 20, maxCell: 7, maxTile: 84 },
  narrow: { name: 'narrow', W: 360, label: 30, lens: 0, maxCols: 9, maxCell: 5, maxTile: 64 },
};
const RISE_MS = 300; // between floors while the vectors rise
let view = null;
let ctx = null;

export function mount(stage, context) {
  ctx = context;
  const wrap = sceneRoot(stage, 'embeddings', 'emb-scene');
  view = {
    stage, wrap, timer: 0, shown: 0, animated: false, sel: null, data: null, variant: null, measured: null,
    readouts: readoutRow(wrap),
    note: h('p', { class: 'emb-note' }, wrap),
    figure: h('div', { class: 'emb-figure' }, wrap),
    legend: h('div', { class: 'legend emb-legend' }, wrap),
    lens: h('div', { class: 'emb-lens', 'aria-live': 'polite', 'data-secondary': '' }, wrap),
    lower: h('div', { class: 'emb-lower' }, wrap),
    math: h('div', { class: 'emb-math', 'data-secondary': '' }, wrap),
  };
  view.scale = h('section', { class: 'emb-real', 'aria-label': 'The real thing, to scale' }, view.lower);
  view.meas = h('section', { class: 'strip-measured', 'aria-label': 'Measured on this server', 'data-secondary': '' }, view.lower);
  const stale = () => variantFor(stage) !== view.variant || fitted() !== view.dense;
  view.ro = new ResizeObserver(() => { if (view?.data?.num_tokens && stale()) draw(); });
  view.ro.observe(stage);
}

export function unmount() {
  if (!view) return;
  clearTimeout(view.timer);
  view.ro.disconnect();
  view = null;
}

export function update(data, params = {}) {
  if (!view) return;
  view.data = data;
  view.perFloor = params.colours !== 'shared';
  // the selected token: kept while it exists; an empty prompt (no tokens) clears it
  if (view.sel === null || view.sel < 0 || view.sel >= data.num_tokens) view.sel = data.num_tokens ? data.num_tokens - 1 : null;
  if (!data.num_tokens) return drawEmpty();
  drawReadouts(data);
  drawNote(data);
  drawLegend();
  draw();
  drawToScale(view.scale, data);
  drawMath(data);
  loadMeasured();
  clearTimeout(view.timer); // a newer answer lands mid-animation: show it whole
  const animate = !view.animated && !still(ctx);
  view.animated = true;
  if (animate) rise(0); else reveal(numSteps(data) - 1);
}

/** Step 0: the tokens alone; step k: floors 0..k-1 (the embedding first); the last step shows every floor. */
export function numSteps(data) { return drawnCount(data) + 1; }

const drawnCount = (d) => d.floors.filter((f) => f.drawn !== false).length;

export function showStep(i) {
  if (!view) return;
  clearTimeout(view.timer);
  reveal(i);
}

export function onKey(ev) {
  if (!view?.data || !['ArrowLeft', 'ArrowRight'].includes(ev.key) || !ev.target.closest?.('.emb-token')) return false;
  const first = view.tower?.L.first ?? 0; // the drawn columns: the tokens before them have no chip
  select(Math.max(first, Math.min(view.data.num_tokens - 1, view.sel + (ev.key === 'ArrowRight' ? 1 : -1))), true);
  return true;
}

function drawEmpty() {
  for (const k of ['readouts', 'legend', 'lens', 'math']) clear(view[k]);
  view.tower = null;
  clear(view.note).append('Type a prompt: its tokens will rise through the model here.');
  clear(view.figure);
}

function rise(k) {
  reveal(k);
  if (k < drawnCount(view.data)) view.timer = setTimeout(() => view && rise(k + 1), k === 0 ? 150 : RISE_MS);
}

function reveal(k) {
  view.shown = k;
  if (!view.tower) return;
  view.tower.floors.forEach((g, f) => g.classList.toggle('shown', f < k));
}

// ---- readouts and note -----------------------------------------------------------------------

function drawReadouts(d) {
  clear(view.readouts);
  const m = d.model;
  readout(view.readouts, 'Tokens', num(d.num_tokens), d.num_fallback_pieces ? `tokens · ${plural(d.num_fallback_pieces, 'piece')} in bytes` : 'tokens');
  const real = d.real_model.name.replace(/^Llama [\d.]+ /, '');
  const who = m.served === 'smollm2' ? 'SmolLM2' : 'toy';
  // the served model is named in the note under the readouts; the unit only gives the big model's figure
  const title = `${who}; ${d.real_model.name}`;
  readout(view.readouts, 'Numbers per token', num(m.dim), `(${real}: ${num(d.real_model.hidden_size)})`, { title });
  readout(view.readouts, 'Layers', num(m.n_layers), `(${real}: ${num(d.real_model.num_layers)})`, { title });
  // both next tokens side by side when they differ: the bare text this tower reads, and the chat question (ch 9, 11)
  const c = d.chat_next_token, both = c && c.id !== d.next_token.id;
  readout(view.readouts, both ? 'Next token, bare text' : 'Next token', pieceLabel(d.next_token), both ? pct(d.next_token.p, 0)
    : `${pct(d.next_token.p, 0)} likely`, { cls: 'emb-next' });
  if (both) readout(view.readouts, 'As a chat', pieceLabel(c), pct(c.p, 0), { cls: 'emb-next emb-chat-next' });
}

/** The tower reads the bare words; asked as a chat question (chapters 9 and 11) the answer may start otherwise. */
function chatNote(d) {
  const c = d.chat_next_token;
  if (!c || c.id === d.next_token.id) return '';
  return `Read as bare text, as this tower reads it, the model's next token is “${pieceLabel(d.next_token)}”` +
    `${d.next_token.text === '<|im_end|>' ? ' (it would end its turn here)' : ''}; asked as a chat question, inside its ` +
    `chat template as chapters 9 and 11 ask it, its answer starts with “${pieceLabel(c)}” (${pct(c.p, 0)}). `;
}

function drawNote(d) {
  const m = d.model;
  clear(view.note);
  modelNote(view.note, m);
  view.note.append(chatNote(d));
  view.note.append(`${cap(modelWords(m))} swaps each token for its ${num(m.dim)}-number embedding row; each small square below is one ` +
    'number, the row wrapped into a block. ');
  const drawn = d.floors.filter((f) => f.drawn !== false);
  if (drawn.length < d.floors.length) {
    view.note.append(`Drawn: ${drawn.length} of the ${d.floors.length} floors (the embedding and layers ` +
      `${drawn.slice(1).map((f) => f.after_layer).join(', ')}); ⋮ marks layers passed over. `);
  }
  legendScale(view.note, view.perFloor
    ? 'each floor scaled to its own range, given at its left: compare patterns between floors, not strength'
    : `one scale for every floor: full colour = ±${num(d.shared_scale, 3)}, so growth shows`);
}

const cap = (t) => t[0].toUpperCase() + t.slice(1);

function drawLegend() {
  const d = view.data, bottom = d.floors[0].lens;
  const echo = d.tokens.filter((t, i) => bottom[i] && bottom[i][0].id === t.id).length;
  const known = bottom.filter(Boolean).length;
  swatches(view.legend, [
    ['sw-change', 'bar under a block: how much that layer changed the token’s numbers (length of the change ÷ length before; a full bar = 100% or more)'],
    ['sw-guess', 'word above a block: the model’s likeliest next token if it stopped on that floor (grey: under 10% sure)'],
    ['sw-piece', PIECE_KEY],
    echo > 0 && ['sw-guess', `on the embedding floor ${echo} of ${known} guesses just repeat the token itself: the output head ` +
      'is the embedding table read backwards (weight tying), so a row points back at its own token'],
    d.num_fallback_pieces > 0 && ['sw-fallback', 'dashed chip: a piece outside the toy vocabulary, spelled byte by byte'],
  ]);
}

// ---- the tower -------------------------------------------------------------------------------

/** Column pitch and tile shape: each vector wraps into R rows of C numbers (C: the divisor of dim nearest
 * above its square root, the same for every prompt), cells as large as the column allows. */
function layout(d, v) {
  const T = d.num_tokens, nT = Math.min(T, v.maxCols), first = T - nT, dim = d.model.dim;
  const area = v.W - v.label - (v.lens ? v.lens + 16 : 0);
  const colW = area / nT, tileMax = colW * 0.84;
  const C = Array.from({ length: dim }, (_, k) => k + 1).find((c) => dim % c === 0 && c * c >= dim);
  const maxTile = fitted() ? 34 : v.maxTile; // a slide frame (embed, presenter) is short: smaller blocks
  const R = dim / C, cell = Math.min(v.maxCell, tileMax / C, maxTile / R);
  const gap = Math.max(1, Math.round((colW - C * cell) / cell));
  const tileW = C * cell, tileH = R * cell, pitch = (C + gap) * cell;
  const guess = pitch >= 34;
  const guessH = guess ? 15 : 4;
  const floorH = guessH + tileH + 3 + 3 + 12 + 6;
  return { T, nT, first, R, C, cell, gap, tileW, tileH, pitch, guess, guessH, floorH,
    x0: v.label + (area - nT * pitch + gap * cell) / 2 };
}

function draw() {
  const d = view.data, v = VARIANTS[(view.variant = variantFor(view.stage))];
  view.dense = fitted();
  view.wrap.classList.toggle('wide', v.name === 'wide');
  const L = layout(d, v), chipH = 30;
  const drawn = d.floors.map((fl, f) => f).filter((f) => d.floors[f].drawn !== false);
  const gaps = drawn.map((f, k) => (k ? f - drawn[k - 1] - 1 : 0)); // layers passed over below each drawn floor
  const gapH = 16, nF = drawn.length, H = 18 + nF * L.floorH + gaps.filter(Boolean).length * gapH + chipH + 8;
  const fig = clear(view.figure);
  const s = root(fig, v.W, H, `${plural(d.num_tokens, 'token')} as ${d.model.dim}-number vectors rising through ${d.model.n_layers} ` +
    `layers of ${d.model.name}; the model's next-token guess after the last layer: ${pieceLabel(d.next_token)}.`);
  s.classList.add('emb-svg', `emb-${v.name}`);
  s.setAttribute('role', 'group'); // it holds the token chips (buttons): a group, not one image
  const pal = colours();
  const xOf = (i) => L.x0 + (i - L.first) * L.pitch;
  const ys = [];  // top of each drawn floor's band, top floor first
  let y = 18;
  for (let k = nF - 1; k >= 0; k--) {
    ys[k] = y;
    y += L.floorH;
    if (gaps[k]) { folded(s, v, y, gaps[k], drawn[k - 1] + 1, drawn[k] - 1); y += gapH; }
  }
  const selRect = svg('rect', { class: 'emb-sel', y: 14, width: L.tileW + 8, height: H - 18, rx: 6 }, s);
  const floors = [];
  drawn.forEach((f, k) => { floors[f] = drawFloor(s, d, d.floors[f], f, L, v, pal, xOf, ys[k]); });
  const chips = drawChips(s, d, L, xOf, H - chipH - 4, chipH);
  if (v.lens) {
    svg('line', { x1: v.W - v.lens - 8, x2: v.W - v.lens - 8, y1: 14, y2: H - chipH - 10, class: 'emb-divider' }, s);
    view.lensHead = svg('text', { x: v.W - v.lens, y: 10, class: 'emb-small emb-lens-head' }, s);
  }
  const ladder = v.lens && drawn.length < d.floors.length ? lensLadder(s, d, v, 18, H - chipH - 12) : null;
  view.tower = { s, L, v, floors: floors.filter(Boolean), byFloor: floors, chips, selRect, xOf, ladder };
  if (L.first > 0) {
    svg('text', { x: v.W / 2, y: 11, 'text-anchor': 'middle', class: 'emb-small',
      text: `showing the last ${L.nT} of ${d.num_tokens} tokens` }, s);
  }
  reveal(view.shown);
  select(view.sel, false, true);
}

/** A band standing for the layers between two drawn floors: ⋮ and which layers. */
function folded(s, v, y, n, from, to) {
  svg('text', { x: v.name === 'wide' ? 0 : 2, y: y + 11, class: 'emb-small emb-folded',
    text: `⋮ ${n === 1 ? `layer ${from}` : `layers ${from}–${to}`} (not drawn)` }, s);
}

function drawFloor(s, d, fl, f, L, v, pal, xOf, y) {
  const g = svg('g', { class: 'emb-floor', 'data-floor': fl.after_layer }, s);
  const ty = y + L.guessH, mid = ty + L.tileH / 2;
  const scale = view.perFloor ? fl.scale : d.shared_scale;
  if (v.name === 'wide') {
    svg('text', { x: 0, y: mid - 2, class: 'emb-floor-label', text: f === 0 ? 'Embedding' : `Layer ${fl.after_layer}` }, g);
    if (view.perFloor) svg('text', { x: 0, y: mid + 12, class: 'emb-small', text: `colour ±${num(fl.scale, 2)}` }, g);
  } else {
    svg('text', { x: 0, y: mid + 4, class: 'emb-floor-label', text: f === 0 ? 'emb' : `L${fl.after_layer}` }, g);
  }
  const idx = Array.from({ length: L.nT }, (_, j) => L.first + j);
  const vecs = rows(fl.vectors, d.num_tokens - (fl.vectors?.rows ?? 0)); // the last tokens' vectors, decoded once
  svg('image', { x: xOf(L.first), y: ty, width: (L.nT * (L.C + L.gap) - L.gap) * L.cell, height: L.tileH, preserveAspectRatio: 'none',
    href: vectorImage(idx.map((i) => vecs[i]), L.R, L.C, L.gap, scale, pal), class: 'strip-img' }, g);
  for (const i of idx) {
    const x = xOf(i);
    if (L.guess && fl.lens[i]) {
      const gs = fl.lens[i][0];
      svg('text', { x: x + L.tileW / 2, y: ty - 4, 'text-anchor': 'middle', class: `emb-guess${gs.p < 0.1 ? ' unsure' : ''}`,
        text: clip(pieceLabel(gs), L.pitch / 7) }, g);
    }
    if (fl.change) changeBar(g, x, ty + L.tileH + 3, L.tileW, fl.change[i]);
    svg('rect', { x, y: ty, width: L.tileW, height: L.tileH, class: 'emb-hit', 'data-i': i }, g);
  }
  g.addEventListener('pointerover', (e) => { const i = e.target.dataset?.i; if (i !== undefined) select(Number(i), false); });
  if (v.lens) g.lensRows = lensRows(g, v, ty);
  return g;
}

/** How much the layer changed this vector, ||out - in|| / ||in||: the bar is full at 100% (or more). */
function changeBar(g, x, y, w, c) {
  svg('rect', { x, y, width: w, height: 3, rx: 1.5, class: 'emb-bar-track' }, g);
  svg('rect', { x, y, width: w * Math.min(1, c), height: 3, rx: 1.5, class: 'emb-bar' }, g);
}

function drawChips(s, d, L, xOf, y, hgt) {
  const out = [];
  for (let i = L.first; i < d.num_tokens; i++) {
    const t = d.tokens[i], x = xOf(i);
    const g = svg('g', { class: `emb-token${t.fallback ? ' fallback' : ''}`, tabindex: 0, role: 'button', 'data-i': i,
      'aria-label': `token ${i + 1}: ${t.text === null ? `bytes ${t.bytes}` : JSON.stringify(t.text)}, id ${t.id}${t.fallback ? ' (byte fallback)' : ''}` }, s);
    svg('rect', { x: x - 2, y, width: L.tileW + 4, height: hgt - 4, rx: 5, class: 'emb-chip' }, g);
    svg('text', { x: x + L.tileW / 2, y: y + hgt / 2 + 2, 'text-anchor': 'middle', class: 'emb-chip-text',
      text: clip(pieceLabel(t), (L.tileW + 4) / 6.6) }, g);
    g.addEventListener('focus', () => select(i, true));
    g.addEventListener('pointerover', () => select(i, false));
    g.addEventListener('click', () => select(i, true));
    out[i] = g;
  }
  return out;
}


function clip(text, n) {
  const k = Math.max(1, Math.floor(n));
  return text.length > k ? `${text.slice(0, Math.max(1, k - 1))}…` : text;
}

// ---- the selected token: its column and what each floor would predict ------------------------

function select(i, announce, force = false) {
  if (!view?.tower || (i === view.sel && !announce && !force)) return;
  view.sel = i;
  const { selRect, xOf, L, chips, v } = view.tower;
  selRect.setAttribute('x', (xOf(Math.max(i, L.first)) - 4).toFixed(1));
  chips.forEach((c, j) => c && c.classList.toggle('selected', j === i));
  const d = view.data, t = d.tokens[i];
  const who = pieceLabel(t);
  if (v.lens) fillLens(view.tower, view.lensHead, d, i, who);
  drawLensList(view.lens, d, i, who);
  if (announce) ctx.announce(`After ${who}: the model would say ${pieceLabel(d.floors[d.floors.length - 1].lens[i][0])} next`);
}

// ---- the real thing to scale, the CPU measurement, the math ---------------------------------

async function loadMeasured() {
  if (view.measuredShown) return;
  view.measuredShown = true;
  await measuredBars(ctx, view.meas, '/api/embeddings/measured', 'Measured: prefill vs decode on this server', (m) => ({
    text: `${measuredWho(m)} on ${m.measured_on} (${m.cpu.name}): a ${m.prompt_tokens}-token prompt in one pass, then ` +
      `${m.decode_tokens} tokens one at a time. Time per token:`,
    bars: [{ label: 'prefill', value: m.prefill_ms_per_token, cls: 'prefill' }, { label: 'decode', value: m.decode_ms_per_token, cls: 'decode' }],
    after: `Decode spends ${num(m.decode_over_prefill_time_per_token, 2)}× as long per token: it rereads every weight for one token.`,
  }), () => view);
}

function drawMath(d) {
  clear(view.math);
  const grid = h('div', { class: 'strip-math-grid' }, view.math);
  if (d.math.layer_change) grid.appendChild(mathDetails(d.math.layer_change, 'Layer change: how?'));
  if (d.math.logit_lens) grid.appendChild(mathDetails(d.math.logit_lens, 'Next-token guesses: how?'));
  grid.appendChild(mathDetails(d.math.real_numbers_per_token, `${d.real_model.name}: where from?`));
  grid.appendChild(mathDetails(d.math.width_ratio, 'How much wider?'));
  grid.appendChild(mathDetails(d.math.depth_ratio, 'How much taller?'));
}
