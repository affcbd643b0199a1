// scenes/layer.js: chapter 3: one layer of the demo model: Q/K/V, the attention heads (grouped by KV head), the MLP.

import { svg, h, clear, root } from '../lib/svg.js';
import { num, pct, plural } from '../lib/format.js';
import { mathDetails } from '../lib/math.js';
import { sceneStyles } from '../lib/style.js';
import { fitted } from '../lib/fit.js';
import { colours, rowsImage, tokenLabel, readout, measuredBars, legendScale, variantFor } from './embeddings-strips.js';

const VARIANTS = {
  wide: { name: 'wide', W: 1000, label: 74, heatMax: 170, perRow: 8 },
  narrow: { name: 'narrow', W: 360, label: 14, heatMax: 120, perRow: 4 },
};
const SECTIONS = ['qkv', 'attn', 'mlp']; // the steps: each adds one part of the layer
let view = null;
let ctx = null;

export function mount(stage, context) {
  ctx = context;
  sceneStyles('embeddings'); // the shared strip, key and bar styles
  sceneStyles('layer');
  clear(stage);
  const wrap = h('div', { class: 'ly-scene' }, stage);
  view = {
    stage, sel: null, data: null, timer: 0, animated: false, shown: SECTIONS.length,
    readouts: h('div', { class: 'readouts', 'aria-live': 'polite' }, wrap),
    note: h('p', { class: 'ly-note' }, wrap),
    chips: h('div', { class: 'chips ly-chips', role: 'group', 'aria-label': 'Tokens: hover or focus one to look from it' }, wrap),
  };
  for (const k of SECTIONS) view[k] = h('section', { class: `ly-section ly-${k}` }, wrap);
  view.lower = h('div', { class: 'emb-lower', 'data-secondary': '' }, wrap); // a slide keeps the layer itself
  view.meas = h('section', { class: 'strip-measured', 'aria-label': 'Measured on this server' }, view.lower);
  view.math = h('div', { class: 'strip-math-grid' }, view.lower);
  const stale = () => variantFor(stage) !== view.variant || fitted() !== view.geo?.dense;
  view.ro = new ResizeObserver(() => { if (view?.data?.num_tokens && stale()) draw(); });
  view.ro.observe(stage);
}

export function unmount() {
  if (!view) return;
  clearTimeout(view.timer);
  view.ro.disconnect();
  view = null;
}

export function update(data) {
  if (!view) return;
  view.data = data;
  // the selected token: kept while it exists; an empty prompt (no tokens) clears it
  if (view.sel === null || view.sel < 0 || view.sel >= data.num_tokens) view.sel = data.num_tokens ? data.num_tokens - 1 : null;
  if (!data.num_tokens) {
    for (const k of ['readouts', 'chips', ...SECTIONS]) clear(view[k]);
    view.heat = null;
    clear(view.note).append('Type a prompt to open this layer.');
    return;
  }
  drawReadouts(data);
  drawNote(data);
  draw();
  drawMath(data);
  if (!view.measuredShown) {
    view.measuredShown = true;
    measuredBars(ctx, view.meas, '/api/layer/measured', 'Measured: the KV cache on this server', (m) => ({
      text: `The demo model on ${m.measured_on} (${m.cpu.name}): ${m.new_tokens} new tokens after a ${m.prompt_tokens}-token ` +
        `prompt, keeping each layer’s keys and values vs recomputing the whole prefix for every token. Time per token:`,
      bars: [{ label: 'with KV cache', value: m.cached_ms_per_token, cls: 'cached' },
        { label: 'recompute', value: m.recompute_ms_per_token, cls: 'recompute' }],
      after: `${num(m.speedup_x, 2)}× faster with the cache${m.same_tokens ? ', and the same tokens either way' : ''}.`,
    }), () => view);
  }
  clearTimeout(view.timer); // a newer answer lands mid-animation: show it whole
  const animate = !view.animated && ctx.options.autoplay === '1' && !ctx.reducedMotion;
  view.animated = true;
  if (animate) play(1); else reveal(SECTIONS.length);
}

export function numSteps() { return SECTIONS.length; }

export function showStep(i) {
  if (!view) return;
  clearTimeout(view.timer);
  reveal(i + 1);
}

export function onKey(ev) {
  if (!view?.data || !['ArrowLeft', 'ArrowRight'].includes(ev.key) || !ev.target.closest?.('.ly-chip')) return false;
  const i = Math.max(0, Math.min(view.data.num_tokens - 1, view.sel + (ev.key === 'ArrowRight' ? 1 : -1)));
  view.chipEls[i].focus();
  return true;
}

function play(k) {
  reveal(k);
  if (k < SECTIONS.length) view.timer = setTimeout(() => view && play(k + 1), 700);
}

function reveal(k) {
  view.shown = k;
  SECTIONS.forEach((s, i) => view[s].classList.toggle('shown', i < k));
}

// ---- readouts, note, chips --------------------------------------------------------------------

function drawReadouts(d) {
  const m = d.model;
  clear(view.readouts);
  readout(view.readouts, 'Layer', `${d.layer + 1} of ${m.n_layers}`, `index ${d.layer}`);
  readout(view.readouts, 'Attention heads', num(m.n_heads), `query · ${m.n_kv_heads} key/value`);
  readout(view.readouts, 'MLP stretch', `×${num(m.ffn_dim / m.dim, 2)}`, `${num(m.dim)} → ${num(m.ffn_dim)} → ${num(m.dim)} numbers`);
  view.selReadout = readout(view.readouts, 'Looking from', '', '', 'ly-from');
}

function drawNote(d) {
  clear(view.note);
  view.note.append(`Layer ${d.layer + 1} of our demo model (“${d.model.name}”) reading ${plural(d.num_tokens, 'token')}; ` +
    'every coloured pixel is one real number. ');
  legendScale(view.note, 'scaled per block');
}

function drawChips(d) {
  clear(view.chips);
  view.chipEls = d.tokens.map((t, i) => {
    const c = h('button', { type: 'button', class: `chip ly-chip${t.fallback ? ' partial' : ''}`, 'aria-pressed': 'false',
      'aria-label': `token ${i + 1}: ${t.text === null ? `byte ${t.bytes}` : JSON.stringify(t.text)}` }, view.chips);
    c.textContent = t.text === null ? t.bytes : tokenLabel(t.text);
    c.style.background = `var(--chip-${i % 6})`;
    c.addEventListener('focus', () => select(i, true));
    c.addEventListener('pointerenter', () => select(i, false));
    return c;
  });
}

// ---- the three sections -----------------------------------------------------------------------

function draw() {
  const d = view.data, v = VARIANTS[(view.variant = variantFor(view.stage))];
  const pal = colours();
  const dense = fitted(); // a slide frame (embed, presenter) is short: thinner rows
  const budget = dense ? 70 : v.name === 'wide' ? 190 : 150; // SVG units per block of T rows
  const rowH = Math.max(2.5, Math.min(dense ? 6 : v.name === 'wide' ? 11 : 8, budget / d.num_tokens));
  view.geo = { v, rowH, dense };
  drawChips(d);
  view.qkvFig = drawQKV(d, v, pal, rowH);
  view.heat = drawHeads(d, v, pal);
  view.attends = drawAttends(d);
  view.mlpFig = drawMLP(d, v, pal, rowH);
  select(view.sel, false, true);
}

function heading(box, title, sub) {
  clear(box);
  const hd = h('h3', { class: 'ly-h', text: title }, box);
  if (sub) h('span', { class: 'ly-sub', text: ` ${sub}` }, hd);
}

/** Row labels and a highlight bar across a block of T rows starting at y. */
function rowsFrame(s, d, v, y, rowH) {
  if (rowH >= 8 && v.name === 'wide') {
    d.tokens.forEach((t, i) => svg('text', { x: v.label - 6, y: y + (i + 0.5) * rowH + 3.5, 'text-anchor': 'end', class: 'ly-row-label',
      text: t.text === null ? t.bytes.slice(0, 5) : tokenLabel(t.text).slice(0, 9) }, s));
  }
  return svg('rect', { x: v.label - 3, width: v.W - v.label + 3, height: rowH, class: 'ly-row-sel', y }, s);
}

function drawQKV(d, v, pal, rowH) {
  const m = d.model, q = d.qkv, T = d.num_tokens;
  heading(view.qkv, 'Each token makes a Query, a Key and a Value', '(what am I looking for? what do I offer? what do I share?)');
  const widths = [m.n_heads, m.n_kv_heads, m.n_kv_heads].map((n) => n * (m.head_dim + 1) - 1);
  const gap = v.name === 'wide' ? 18 : 8, unit = (v.W - v.label - 2 * gap) / (widths[0] + widths[1] + widths[2]);
  const top = 30, H = top + T * rowH + 6;
  const s = root(view.qkv, v.W, H, `Queries, keys and values of ${plural(T, 'token')} in layer ${d.layer + 1}.`);
  s.classList.add('ly-svg');
  let x = v.label;
  const blocks = [['Query', q.q, q.q_scale, m.n_heads, 'q'], ['Key', q.k, q.k_scale, m.n_kv_heads, 'k'], ['Value', q.v, q.v_scale, m.n_kv_heads, 'v']];
  blocks.forEach(([name, rows, scale, heads, cls], b) => {
    const w = widths[b] * unit;
    svg('text', { x, y: 12, class: `ly-block-title ${cls}`, text: v.name === 'wide' ? `${name} · ${heads} × ${m.head_dim}` : name }, s);
    for (let hh = 0; hh < heads; hh++) {
      const hx = x + hh * (m.head_dim + 1) * unit, group = cls === 'q' ? Math.floor(hh / (m.n_heads / m.n_kv_heads)) : hh;
      svg('rect', { x: hx, y: 18, width: m.head_dim * unit, height: 4, rx: 1, class: `ly-group g${group % 4}` }, s);
    }
    svg('image', { x, y: top, width: w, height: T * rowH, preserveAspectRatio: 'none', class: 'strip-img',
      href: rowsImage(rows, scale, pal, m.head_dim) }, s);
    x += w + gap;
  });
  const g = m.n_heads / m.n_kv_heads;
  h('p', { class: 'ly-caption', text: `Rows: tokens. Each query head reads the key/value head marked in the same shade ` +
    `above: ${g} query heads share each of the ${m.n_kv_heads} key/value heads (grouped-query attention), ` +
    `so the cache keeps ${m.n_kv_heads} keys and values per token instead of ${m.n_heads}.` }, view.qkv);
  return { s, sel: rowsFrame(s, d, v, top, rowH), top };
}

function drawHeads(d, v, pal) {
  const m = d.model, T = d.num_tokens, g = m.n_heads / m.n_kv_heads;
  heading(view.attn, 'Attention heads match queries to keys', '(row: the token looking · column: the token it looks at)');
  const perRow = Math.min(m.n_heads, v.perRow), pad = 10;
  const size = Math.min(v.heatMax, (v.W - (perRow - 1) * pad - 2 * (m.n_kv_heads > 1 ? 8 : 0)) / perRow - 8);
  const cell = size / T, nRows = Math.ceil(m.n_heads / perRow), rowH = size + 44;
  const s = root(view.attn, v.W, nRows * rowH + 4, `${m.n_heads} attention heads in ${m.n_kv_heads} groups sharing a key/value head.`);
  s.classList.add('ly-svg');
  const pos = (hh) => ({ x: 4 + (hh % perRow) * (size + pad + 8), y: Math.floor(hh / perRow) * rowH + 34 });
  d.groups.forEach((grp) => {
    const a = pos(grp.query_heads[0]), b = pos(grp.query_heads[grp.query_heads.length - 1]);
    svg('rect', { x: a.x - 4, y: a.y - 30, width: b.x - a.x + size + 8, height: size + 38, rx: 8, class: 'ly-group-box' }, s);
    const boxW = b.x - a.x + size;
    svg('text', { x: a.x, y: a.y - 17, class: 'ly-group-label', text: boxW >= 250
      ? `KV head ${grp.kv_head} · shared by query heads ${grp.query_heads[0]}–${grp.query_heads[g - 1]}`
      : boxW >= 150 ? `KV head ${grp.kv_head} · heads ${grp.query_heads[0]}–${grp.query_heads[g - 1]}` : `KV ${grp.kv_head}` }, s);
  });
  const rows = d.heads.map((hd) => {
    const { x, y } = pos(hd.head);
    svg('text', { x, y: y - 4, class: 'ly-small', text: `head ${hd.head}` }, s);
    svg('path', { d: `M${x},${y}H${x + size}V${y + size}Z`, class: 'ly-future' }, s);
    const full = hd.weights.map((r) => r.concat(Array(T - r.length).fill(NaN)));
    svg('image', { x, y, width: size, height: size, preserveAspectRatio: 'none', class: 'strip-img', href: heatImage(full, pal) }, s);
    const hit = svg('rect', { x, y, width: size, height: size, class: 'ly-hit' }, s);
    hit.addEventListener('pointermove', (e) => {
      const r = hit.getBoundingClientRect();
      select(Math.min(T - 1, Math.max(0, Math.floor(((e.clientY - r.top) / r.height) * T))), false);
    });
    return svg('rect', { x, width: size, height: cell, class: 'ly-heat-sel' }, s);
  });
  return { rows, pos, cell };
}

/** Attention weights as pixels: 0 -> the panel, 1 -> --c-tokens (a square root lifts the small ones); NaN -> transparent. */
function heatImage(rows, pal) {
  const c = document.createElement('canvas');
  c.width = c.height = rows.length;
  const g = c.getContext('2d'), img = g.createImageData(rows.length, rows.length);
  rows.forEach((r, i) => r.forEach((w, j) => {
    if (Number.isNaN(w)) return;
    const o = (i * rows.length + j) * 4, t = Math.sqrt(Math.min(1, w));
    for (let k = 0; k < 3; k++) img.data[o + k] = pal.zero[k] + (pal.pos[k] - pal.zero[k]) * t;
    img.data[o + 3] = 255;
  }));
  g.putImageData(img, 0, 0);
  return c.toDataURL('image/png');
}

function drawAttends(d) {
  const box = h('div', { class: 'ly-attends', 'aria-live': 'polite', 'data-narrow-secondary': '' }, view.attn);
  const title = h('p', { class: 'ly-attends-title' }, box);
  const grid = h('div', { class: 'ly-attends-grid' }, box);
  const rows = d.heads.map((hd) => {
    const first = hd.head > 0 && d.heads[hd.head - 1].kv_head !== hd.kv_head;
    h('span', { class: `ly-attends-head${first ? ' kv-start' : ''}`, text: `head ${hd.head} · kv ${hd.kv_head}` }, grid);
    const line = h('span', { class: `ly-attends-line${first ? ' kv-start' : ''}` }, grid);
    return d.tokens.map((t) => h('span', { class: 'ly-att', text: t.text === null ? t.bytes : tokenLabel(t.text) }, line));
  });
  return { title, rows };
}

function drawMLP(d, v, pal, rowH) {
  const m = d.model, T = d.num_tokens, mlp = d.mlp, wide = v.W - v.label, narrowW = (wide * m.dim) / m.ffn_dim;
  heading(view.mlp, `Then the MLP stretches each vector to ${num(m.ffn_dim)} numbers and squeezes it back to ${num(m.dim)}`);
  const bh = T * rowH, link = v.name === 'wide' ? 40 : 30, y1 = 16, y2 = y1 + bh + link + 14, y3 = y2 + bh + link + 14;
  const s = root(view.mlp, v.W, y3 + bh + 6, `The MLP of layer ${d.layer + 1}: ${m.dim} numbers in, ${m.ffn_dim} in the middle, ${m.dim} out.`);
  s.classList.add('ly-svg');
  const cx = v.label + wide / 2, nx = cx - narrowW / 2;
  const trap = (ya, wa, yb, wb, label) => {
    svg('path', { d: `M${cx - wa / 2},${ya}L${cx + wa / 2},${ya}L${cx + wb / 2},${yb}L${cx - wb / 2},${yb}Z`, class: 'ly-weights' }, s);
    svg('text', { x: cx, y: (ya + yb) / 2 + 4, 'text-anchor': 'middle', class: 'ly-weights-label', text: label }, s);
  };
  trap(y1 + bh + 2, narrowW, y2 - 14, wide, `× W1 (gate) and W3 (up): ${num(m.dim)} → ${num(m.ffn_dim)}`);
  trap(y2 + bh + 2, wide, y3 - 14, narrowW, `× W2 (down): ${num(m.ffn_dim)} → ${num(m.dim)}`);
  const block = (x, y, w, rows, scale, label) => {
    svg('text', { x, y: y - 4, class: 'ly-small', text: label }, s);
    svg('image', { x, y, width: w, height: bh, preserveAspectRatio: 'none', class: 'strip-img', href: rowsImage(rows, scale, pal) }, s);
  };
  block(nx, y1, narrowW, mlp.input, mlp.input_scale, `in: RMSNorm(x) · ${m.dim}`);
  block(v.label, y2, wide, mlp.hidden, mlp.hidden_scale, `silu(gate) × up · ${num(m.ffn_dim)} wide`);
  block(nx, y3, narrowW, mlp.out, mlp.out_scale, `out · ${m.dim}, added to the token’s vector`);
  const sels = [y1, y2, y3].map((y, k) => svg('rect', { x: k === 1 ? v.label : nx, width: k === 1 ? wide : narrowW, height: rowH, class: 'ly-row-sel', y }, s));
  return { sels, ys: [y1, y2, y3] };
}

// ---- the selected token ---------------------------------------------------------------------

function select(i, announce, force = false) {
  if (!view?.heat || (i === view.sel && !announce && !force)) return; // pointermove within one row: nothing to do
  view.sel = i;
  const d = view.data, { rowH } = view.geo, t = d.tokens[i];
  const who = t.text === null ? `byte ${t.bytes}` : tokenLabel(t.text);
  view.chipEls.forEach((c, j) => { c.classList.toggle('selected', j === i); c.setAttribute('aria-pressed', String(j === i)); });
  view.qkvFig.sel.setAttribute('y', (view.qkvFig.top + i * rowH).toFixed(1));
  view.mlpFig.sels.forEach((r, k) => r.setAttribute('y', (view.mlpFig.ys[k] + i * rowH).toFixed(1)));
  view.heat.rows.forEach((r, hh) => r.setAttribute('y', (view.heat.pos(hh).y + i * view.heat.cell).toFixed(1)));
  view.attends.title.textContent = `What ${who} (token ${i + 1}) attends to in each head: darker = more weight; later tokens are out of sight.`;
  d.heads.forEach((hd, hh) => view.attends.rows[hh].forEach((el, j) => {
    const w = j <= i ? hd.weights[i][j] : null;
    el.classList.toggle('future', w === null);
    el.style.background = w === null ? '' : `color-mix(in srgb, var(--c-tokens) ${Math.round(100 * Math.sqrt(w))}%, var(--panel))`;
    el.style.color = w !== null && w > 0.35 ? '#fff' : '';
    el.title = w === null ? 'after this token: masked' : `${pct(w, 1)} of head ${hd.head}’s attention`;
  }));
  const v = view.selReadout.querySelector('.value');
  v.textContent = who;
  h('span', { class: 'unit', text: `token ${i + 1} of ${d.num_tokens}` }, v);
  if (announce) {
    const top = d.heads.map((hd) => hd.weights[i].indexOf(Math.max(...hd.weights[i])));
    ctx.announce(`${who}: head 0 looks most at ${tokenLabel(d.tokens[top[0]].text || d.tokens[top[0]].bytes)}`);
  }
}

function drawMath(d) {
  clear(view.math);
  view.math.appendChild(mathDetails(d.math.attention, 'Attention weights: how?'));
  view.math.appendChild(mathDetails(d.math.kv_numbers_per_token, 'Key/value numbers cached per token: how?'));
  view.math.appendChild(mathDetails(d.math.mlp_stretch, 'How much wider is the MLP?'));
}
