// scenes/quantization.js: chapter 8: a real weight tile losing bits, the model-size bars, and a two-needle perplexity meter.

import { svg, h, clear } from '../lib/svg.js';
import { swatches } from '../lib/legend.js';
import { num, fixed, pct, usd, plural } from '../lib/format.js';
import { mathDetails } from '../lib/math.js';
import { tween } from '../lib/tween.js';
import { sceneLifecycle, readout, widthClass, redrawOnWidth } from '../lib/scene-kit.js';
import { createMeter, LABEL, signed } from './quantization-meter.js';
import { servedNow } from './measured-panels.js';

const VARIANTS = {
  wide: { name: 'wide', cw: 4.6, ch: 15, gapX: 7, gapY: 5, font: 11.5 },
  narrow: { name: 'narrow', cw: 2.5, ch: 12, gapX: 4, gapY: 4, font: 10 },
};
const WIDTHS = { narrow: 640 }; // stage width (px) under which the phone tile is drawn
const TILE_FORMAT = { bf16: 'bf16', fp8: 'fp8', int8: 'int8', int4: 'int4', nvfp4: 'nvfp4', mxfp4: 'mxfp4' };
const MATH_KEYS = [['weights_gb', 'Model size'], ['gpus_needed', 'GPUs needed'], ['tokens_per_s_per_user', 'Tokens/s per chat'],
  ['tokens_per_s_per_user_same_gpus', 'Tokens/s per chat, same GPUs'],
  ['cost_per_million_tokens_usd', 'Cost per million tokens'], ['demo_perplexity', 'Demo perplexity']];

let view = null;

export const { mount, update, unmount } = sceneLifecycle({
  slug: 'quantization',
  cls: 'q-scene',
  bind: (v) => { view = v; },
  build: (wrap) => ({
    top: h('div', { class: 'q-row' }, wrap),
    meterRow: h('div', { class: 'q-row q-meter-row' }, wrap),
    served: h('section', { class: 'q-served', 'data-secondary': '' }, wrap), // this server, now (measured-panels.js)
    table: h('div', { class: 'q-published', 'data-secondary': '' }, wrap),
    math: h('div', { class: 'q-math', 'data-secondary': '' }, wrap),
    tile: null, bits: 16, pick: null, anim: [],
  }),
  ready(v) {
    v.tilePanel = h('section', { class: 'q-panel q-tile', 'aria-label': 'Weight tile' }, v.top);
    v.sizePanel = h('section', { class: 'q-panel q-sizes', 'aria-label': 'Model size by format' }, v.top);
    v.meter = createMeter(h('section', { class: 'q-panel q-gauge', 'aria-label': 'Perplexity meter' }, v.meterRow),
      // a phone-sized slide keeps the gauge; the cards that name its needles go (they are in the full page)
      h('section', { class: 'q-panel q-needles', 'data-narrow-secondary': '' }, v.meterRow));
    v.ro = redrawOnWidth(v.stage, WIDTHS, () => view?.data && view.variant, () => { view.tile = null; drawTile(view.data); });
  },
  draws: [drawReadouts, drawTile, drawSizes, (d) => view.meter.update(d), drawServed, drawPublished, drawMath],
  stop(v) {
    v.anim.forEach((a) => a.cancel());
    v.meter.stop();
  },
});

/** Once: the CPU measurement is the process's (measured-panels.js), not the params'. */
function drawServed(data) {
  if (view.servedShown || !data.real?.served || view.ctx.embed) return;
  view.servedShown = true;
  const v = view;
  servedNow(view.served, view.ctx, () => view === v, data.real.served);
}

const variantFor = () => widthClass(view.stage, WIDTHS);

// ---- readouts ------------------------------------------------------------------------------------

function drawReadouts(d) {
  const r = clear(view.readouts);
  const gpu = d.gpu_name.replace(/^(NVIDIA|AMD) /, '');
  readout(r, 'Model size', num(d.weights_gb), `GB · ${pct(d.size_ratio, 0)} of 16-bit`);
  const servers = d.gpus_needed > 8 ? ` · ${Math.ceil(d.gpus_needed / 8)} servers of 8` : '';
  readout(r, 'GPUs needed', d.gpus_needed === null ? 'over 64' : num(d.gpus_needed), `× ${gpu}${servers}`);
  readout(r, 'Per chat', d.tokens_per_s_per_user === null ? '–' : num(d.tokens_per_s_per_user), `tok/s on ${plural(d.gpus_needed || 0, 'GPU')}`);
  if (d.same_gpus) {
    readout(r, `Same ${plural(d.same_gpus, 'GPU')} as BF16`, num(d.tokens_per_s_per_user_same_gpus),
      `tok/s · ${fixed(d.speedup_same_gpus, 1)}×`);
  }
  readout(r, 'Cost', d.cost_per_million_tokens_usd === null ? '–' : usd(d.cost_per_million_tokens_usd), 'per 1M tokens');
}

// ---- the tile ------------------------------------------------------------------------------------

function fieldOf(fields, i) {
  let at = 0;
  for (const [name, n] of fields) { if (i < at + n) return name; at += n; }
  return 'pad';
}

function buildTile(d, v) {
  const host = clear(view.tilePanel);
  h('h3', { text: 'Real weights, every bit' }, host);
  h('p', { class: 'q-sub', text: `Top-left 8 × 8 of ${d.tile.model_name}'s first query matrix (${d.tile.matrix_shape.join(' × ')}; ${d.tile.stored_as}). ` +
    'Each weight is a strip of its stored bits (filled = 1); point at one, or use the arrow keys, to read it.' }, host);
  const n = d.tile.shape[0];
  const W = n * (16 * v.cw + v.gapX), H = n * (v.ch + v.gapY) + v.ch + 10;
  const s = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: `q-tile-svg ${v.name}`, width: '100%', role: 'group', // holds focusable weights
    'aria-label': 'Bits of an 8 by 8 tile of weights' }, host);
  const ghost = svg('rect', { x: -2, y: -3, width: W - v.gapX + 4, height: n * (v.ch + v.gapY) + 1, rx: 4, class: 'ghost' }, s);
  // what the empty part of the dashed box means, written in it (it read as blank space)
  const ghostLbl = svg('text', { y: (n * (v.ch + v.gapY)) / 2 + 4, 'text-anchor': 'middle', class: 'q-ghost-label' }, s);
  const cells = [], hits = [];
  for (let r = 0; r < n; r++) for (let c = 0; c < n; c++) {
    const y = r * (v.ch + v.gapY);
    const row = [];
    for (let b = 0; b < 16; b++) row.push(svg('rect', { y, width: v.cw - 0.6, height: v.ch, class: 'bit' }, s));
    // a named image each; the first is in the tab order, the arrow keys move among them
    const hit = svg('rect', { y: y - 1, height: v.ch + 2, class: 'hit', tabindex: r + c === 0 ? 0 : -1, role: 'img',
      'data-r': r, 'data-c': c, 'aria-label': `weight row ${r + 1} column ${c + 1}` }, s);
    cells.push(row); hits.push(hit);
  }
  const scaleY = n * (v.ch + v.gapY) + 8;
  const scales = [...Array(n).keys()].map(() => svg('rect', { y: scaleY, height: v.ch * 0.6, rx: 2, class: 'bit scale on' }, s));
  const scaleLbl = h('p', { class: 'q-scale-lbl' }, host);
  const detail = h('p', { class: 'q-detail', 'aria-live': 'polite' }, host);
  const legend = h('div', { class: 'legend q-bit-legend' }, host);
  s.addEventListener('pointerover', (e) => pickFrom(e.target));
  s.addEventListener('focusin', (e) => pickFrom(e.target));
  s.addEventListener('keydown', (e) => {
    const step = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] }[e.key];
    if (!step || !view.pick) return;
    e.preventDefault();
    e.stopPropagation();
    const r = Math.min(n - 1, Math.max(0, view.pick[0] + step[0])), c = Math.min(n - 1, Math.max(0, view.pick[1] + step[1]));
    view.tile.hits[r * n + c].focus();
  });
  view.tile = { s, cells, hits, scales, scaleLbl, detail, legend, ghost, ghostLbl, W, v, n };
}

function pickFrom(t) {
  if (!t || !t.classList || !t.classList.contains('hit')) return;
  view.pick = [Number(t.dataset.r), Number(t.dataset.c)];
  describe(view.data);
}

function tileFormat(d) {
  return d.tile.precisions.find((p) => p.precision === TILE_FORMAT[d.precision]);
}

function drawTile(d) {
  const variant = variantFor();
  if (!view.tile || view.variant !== variant) { view.variant = variant; buildTile(d, VARIANTS[variant]); }
  const f = tileFormat(d);
  const t = view.tile;
  t.cells.forEach((row, k) => {
    const bits = f.bits[Math.floor(k / t.n)][k % t.n];
    row.forEach((rect, i) => {
      const field = fieldOf(f.fields, i);
      rect.setAttribute('class', `bit ${field}${bits[i] === '1' ? ' on' : ''}`);
    });
  });
  t.scales.forEach((rect) => { rect.style.display = f.scales ? '' : 'none'; });
  const fields = f.fields.map(([name]) => name).concat(f.scales ? ['scale'] : []);
  swatches(t.legend, [...fields.map((name) => [name, { code: 'integer code', scale: 'shared scale' }[name] || name]),
    ['ghost', 'the same tile at 16 bits']]);
  t.scaleLbl.textContent = !f.scales ? 'No scale: each number stands alone.'
    : f.precision === 'fp8' ? `▲ one fp32 scale per column of ${d.tile.matrix_shape[0]} weights`
      : f.precision === 'nvfp4' ? `▲ one FP8 E4M3 scale per ${f.block} weights of a column, times one FP32 scale for the matrix ` +
        `(${fixed(f.bits_per_weight, 4)} bits each)`
      : f.precision === 'mxfp4' ? `▲ one power-of-two (E8M0) scale per ${f.block} weights of a column (${fixed(f.bits_per_weight, 3)} bits each)`
      : `▲ one fp16 scale per ${d.tile.group_size} weights of a column (+${fixed(16 / d.tile.group_size, 3)} bits each)`;
  const from = view.bits, to = f.code_bits;
  view.anim.forEach((a) => a.cancel());
  view.anim = [tween(from === to ? 0 : 700, (u) => layoutBits(from + (to - from) * u))];
  view.bits = to;
  if (!view.pick) view.pick = largest(d.tile.original);
  describe(d);
}

function layoutBits(bits) {
  const t = view.tile, v = t.v;
  const stride = bits * v.cw + v.gapX;
  t.cells.forEach((row, k) => {
    const x0 = (k % t.n) * stride;
    row.forEach((rect, i) => {
      rect.setAttribute('x', x0 + i * v.cw);
      rect.style.opacity = i < bits - 0.5 ? '' : String(Math.max(0, bits - i));
      rect.style.visibility = i < Math.ceil(bits) ? 'visible' : 'hidden';
    });
    t.hits[k].setAttribute('x', x0);
    t.hits[k].setAttribute('width', Math.max(0, bits * v.cw));
  });
  t.scales.forEach((rect, c) => { rect.setAttribute('x', c * stride); rect.setAttribute('width', Math.max(0, bits * v.cw)); });
  t.ghost.style.visibility = bits > 15.5 ? 'hidden' : 'visible';
  const used = t.n * stride, free = t.W - used;
  t.ghostLbl.style.visibility = free > 0.3 * t.W ? 'visible' : 'hidden';
  t.ghostLbl.setAttribute('x', used + free / 2);
  t.ghostLbl.textContent = `at 16 bits the same ${t.n * t.n} weights fill the whole box (${fixed(16 / bits, 1)}× the bits)`;
  // the sentence fits the empty part: about 0.55 em per character
  const size = Math.min(v.ch * 1.1, (0.92 * free) / (0.55 * t.ghostLbl.textContent.length));
  t.ghostLbl.setAttribute('font-size', size.toFixed(1));
  // drawn under 8 px (a phone) nobody reads it: the legend's dashed swatch says the same
  const px = size * ((t.s.clientWidth || t.W) / t.W);
  if (px < 8) t.ghostLbl.style.visibility = 'hidden';
}

function largest(m) {
  let best = [0, 0];
  m.forEach((row, r) => row.forEach((x, c) => { if (Math.abs(x) > Math.abs(m[best[0]][best[1]])) best = [r, c]; }));
  return best;
}

function describe(d) {
  const [r, c] = view.pick;
  const f = tileFormat(d);
  const w = d.tile.original[r][c], q = f.values[r][c], bits = f.bits[r][c];
  const groups = [];
  let at = 0;
  for (const [, n] of f.fields) { groups.push(bits.slice(at, at + n)); at += n; }
  const scale = f.scales ? ` × scale ${num(f.scales[c], 3)}` : '';
  const code = f.fields[0][0] === 'code' ? ` (code ${parseInt(bits, 2) >= 2 ** (bits.length - 1) ? parseInt(bits, 2) - 2 ** bits.length : parseInt(bits, 2)})`
    : f.block ? ` (E2M1 ${num(q / f.scales[c], 2)})` : '';
  view.tile.detail.textContent = `Weight [${r + 1}, ${c + 1}] = ${num(w, 4)} → stored as ${groups.join(' ')}${code}${scale} = ${num(q, 4)}` +
    ` (error ${signed((q - w) / (Math.abs(w) || 1), 1)}). Matrix RMS error ${pct(f.error.relative_rms, 2)}.`;
  view.tile.hits.forEach((hit, k) => {
    hit.classList.toggle('picked', k === r * view.tile.n + c);
    hit.setAttribute('tabindex', k === r * view.tile.n + c ? 0 : -1);
  });
}

// ---- model size bars -----------------------------------------------------------------------------

function drawSizes(d) {
  const host = clear(view.sizePanel);
  h('h3', { text: `${d.model_name}: the whole model` }, host);
  h('p', { class: 'q-sub', text: `Bars to scale; each tick is one ${d.gpu_name.replace(/^(NVIDIA|AMD) /, '')} (${num(d.gpu_capacity_gb)} GB). ` +
    `GPUs needed: the fewest (a power of two) holding weights, the KV cache of ${plural(d.batch, 'chat')} and a 10% reserve; ` +
    'speed and cost on those GPUs.' }, host);
  const biggest = Math.max(...d.rows.map((r) => r.weights_gb));
  const ticks = Math.ceil(biggest / d.gpu_capacity_gb);
  const max = ticks <= 12 ? ticks * d.gpu_capacity_gb : biggest;
  for (const row of d.rows) {
    const on = row.precision === d.precision;
    const div = h('div', { class: `q-size${on ? ' on' : ''}`, 'aria-current': on ? 'true' : null }, host);
    const head = h('div', { class: 'q-size-head' }, div);
    h('b', { text: LABEL[row.precision] }, head);
    h('span', { text: `${num(row.weights_gb)} GB · ${Number(row.bits_per_weight.toFixed(3))} bits/weight` }, head);
    const track = h('div', { class: 'q-track' }, div);
    const bar = h('span', { class: 'q-bar' }, track);
    bar.style.width = `${(row.weights_gb / max) * 100}%`;
    for (let k = 1; k <= Math.min(ticks, 12); k++) {
      const tick = h('i', { class: 'q-tick' }, track);
      tick.style.left = `${Math.min(100, ((k * d.gpu_capacity_gb) / max) * 100)}%`;
    }
    const gpus = row.gpus_needed === null ? 'over 64 GPUs' : `${plural(row.gpus_needed, 'GPU')}` +
      (row.gpus_needed > 8 ? ` (${Math.ceil(row.gpus_needed / 8)} servers)` : '');
    h('p', { class: 'q-size-foot', text: `${gpus} · ${row.tokens_per_s_per_user ? `${num(row.tokens_per_s_per_user)} tok/s per chat` : '–'}` +
      ` · ${row.cost_per_million_tokens_usd ? `${usd(row.cost_per_million_tokens_usd)} per 1M tokens` : '–'}` }, div);
  }
  drawSameGpus(host, d);
}

/** Tokens/s per chat of every format on one GPU count (the count the largest format needs): fewer bytes read per step. */
function drawSameGpus(host, d) {
  if (!d.same_gpus) return;
  const box = h('div', { class: 'q-same', 'data-secondary': '', 'aria-label': `Speed on the same ${d.same_gpus} GPUs` }, host);
  const bf = d.rows[0];
  h('h4', { text: `Reads faster: every format on the same ${plural(d.same_gpus, 'GPU')}` }, box);
  h('p', { class: 'q-sub', text: `The count ${LABEL[bf.precision]} needs, so the GPUs are equal and only the bytes read per step differ.` }, box);
  const max = Math.max(...d.rows.map((r) => r.tokens_per_s_per_user_same_gpus || 0));
  for (const row of d.rows) {
    const on = row.precision === d.precision;
    const line = h('div', { class: `q-speed${on ? ' on' : ''}`, 'data-precision': row.precision }, box);
    h('b', { text: LABEL[row.precision] }, line);
    const track = h('span', { class: 'q-speed-track' }, line);
    const bar = h('span', { class: 'q-speed-bar' }, track);
    bar.style.width = `${((row.tokens_per_s_per_user_same_gpus || 0) / max) * 100}%`;
    h('span', { class: 'q-speed-val', text: `${num(row.tokens_per_s_per_user_same_gpus)} tok/s · ${fixed(row.speedup_same_gpus, 1)}×` }, line);
  }
}

// ---- published table and math --------------------------------------------------------------------

function drawPublished(d) {
  const host = clear(view.table);
  const box = h('details', { class: 'q-table-box' }, host);
  h('summary', { text: 'What the published tables say (WikiText-2 perplexity, lower is better)' }, box);
  h('p', { class: 'q-sub', text: 'Compare a row only with the 16-bit row of its own table: settings differ between papers. ' +
    'The often-quoted 3.85 for a 4-bit 65B model is not in these tables; they give 3.84 (GPTQ) and 3.92 (plain rounding) with one scale per row.' }, box);
  const t = h('table', { class: 'q-table' }, box);
  const head = h('tr', {}, h('thead', {}, t));
  for (const c of ['Model', 'Format', 'Method', 'Group', 'Perplexity', 'Its 16-bit', 'Change', 'Source']) h('th', { text: c }, head);
  const body = h('tbody', {}, t);
  for (const r of d.published) {
    const tr = h('tr', { class: r.precision === d.precision || (d.precision === 'bf16' && r.precision === 'fp16') ? 'on' : '' }, body);
    h('td', { text: r.model }, tr);
    h('td', { text: LABEL[r.precision] || r.precision }, tr);
    h('td', { text: r.method }, tr);
    h('td', { text: r.group_size ? String(r.group_size) : 'row' }, tr);
    h('td', { class: 'num', text: fixed(r.perplexity, 2) }, tr);
    h('td', { class: 'num', text: r.precision === 'fp16' ? '–' : fixed(r.baseline, 2), title: r.baseline_source || '' }, tr);
    h('td', { class: 'num', text: r.precision === 'fp16' ? 'baseline' : signed(r.relative_change) }, tr);
    const s = h('td', {}, tr);
    h('a', { href: r.url, text: r.source.split(',').slice(0, 2).join(','), title: r.source, rel: 'noopener', target: '_blank' }, s);
    if (r.estimate) h('span', { class: 'badge', text: 'estimate' }, s);
  }
}

function drawMath(d) {
  const m = clear(view.math);
  for (const [k, label] of MATH_KEYS) if (d.math[k]) m.appendChild(mathDetails(d.math[k], label));
}
