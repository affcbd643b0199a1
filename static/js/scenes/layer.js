// scenes/layer.js: chapter 3: one layer of the demo model: Q/K/V, the attention heads (grouped by KV head), the MLP.

import { svg, h, clear, root } from '../lib/svg.js';
import { num, plural } from '../lib/format.js';
import { mathDetails } from '../lib/math.js';
import { sceneStyles, sceneRoot, readoutRow, readout, still } from '../lib/scene-kit.js';
import { fitted } from '../lib/fit.js';
import { rows as unpacked } from '../lib/packed.js';
import { colours, rowsImage, legendScale, variantFor, modelWords, modelNote, followModelSelect } from './embeddings-strips.js';
import { measuredBars, measuredWho } from './measured-panels.js';
import { drawAttention, groupOf, tokenText } from './layer-attention.js';

const VARIANTS = {
  wide: { name: 'wide', W: 820, label: 74 },
  narrow: { name: 'narrow', W: 360, label: 40 },
};
const SECTIONS = ['qkv', 'attn', 'mlp']; // the steps: each adds one part of the layer
let view = null;
let ctx = null;

export function mount(stage, context) {
  ctx = context;
  sceneStyles('embeddings'); // the shared strip and key styles
  const wrap = sceneRoot(stage, 'layer', 'ly-scene');
  view = {
    stage, wrap, sel: null, data: null, timer: 0, animated: false, shown: SECTIONS.length,
    readouts: readoutRow(wrap),
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
  view.unfollow = followModelSelect(ctx, () => view?.data);
}

export function unmount() {
  if (!view) return;
  clearTimeout(view.timer);
  view.ro.disconnect();
  view.unfollow();
  view = null;
}

export function update(data, params = {}) {
  if (!view) return;
  const fresh = !view.data || data.prompt !== view.data.prompt;
  view.data = data;
  // looking from: the last token for a new prompt (where a prompt's point usually shows); kept across layers and heads
  if (fresh || view.sel === null || view.sel >= data.num_tokens) view.sel = data.num_tokens ? data.num_tokens - 1 : null;
  view.head = Math.min(data.model.n_heads - 1, Math.max(0, Math.round(params.head ?? view.head ?? 0)));
  narrowControl('layer', data.model.n_layers - 1);
  narrowControl('head', data.model.n_heads - 1);
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
      text: `${measuredWho(m)} on ${m.measured_on} (${m.cpu.name}): ${m.new_tokens} new tokens after a ${m.prompt_tokens}-token ` +
        `prompt, keeping each layer’s keys and values vs recomputing the whole prefix for every token. Time per token:`,
      bars: [{ label: 'with KV cache', value: m.cached_ms_per_token, cls: 'cached' },
        { label: 'recompute', value: m.recompute_ms_per_token, cls: 'recompute' }],
      after: `${num(m.speedup_x, 2)}× faster with the cache${m.same_tokens ? ', and the same tokens either way' : ''}.`,
    }), () => view);
  }
  clearTimeout(view.timer); // a newer answer lands mid-animation: show it whole
  // a slide frame fits its type to what it shows (html.fit hides later sections): reveal at once there, or the
  // type would resize at every step; steps stay available (step=, arrow keys)
  const animate = !view.animated && !still(ctx) && !fitted();
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

/** A slider's top end follows the model drawn (its layers, its heads): the form was rendered for any model. */
function narrowControl(name, max) {
  const el = document.getElementById(`ctl-${name}`);
  if (el && el.type === 'range' && Number(el.max) !== max) el.max = String(max);
}

// ---- readouts, note, chips --------------------------------------------------------------------

function drawReadouts(d) {
  const m = d.model;
  clear(view.readouts);
  readout(view.readouts, 'Layer', `${d.layer}`, `of ${m.n_layers}, counting from 0`);
  readout(view.readouts, 'Attention heads', num(m.n_heads), `query · ${m.n_kv_heads} key/value`);
  readout(view.readouts, 'MLP stretch', `×${num(m.ffn_dim / m.dim, 2)}`, `${num(m.dim)} → ${num(m.ffn_dim)} → ${num(m.dim)} numbers`);
  view.selReadout = readout(view.readouts, 'Looking from', '', '', { cls: 'ly-from' });
}

function drawNote(d) {
  clear(view.note);
  modelNote(view.note, d.model);
  view.note.append(`Layer ${d.layer} (counting from 0) of ${modelWords(d.model)} reading ${plural(d.num_tokens, 'token')}; ` +
    'every coloured pixel is one real number. ');
  legendScale(view.note, 'scaled per block');
}

function drawChips(d) {
  clear(view.chips);
  view.chipEls = d.tokens.map((t, i) => {
    const c = h('button', { type: 'button', class: `chip ly-chip${t.fallback ? ' partial' : ''}`, 'aria-pressed': 'false',
      'aria-label': `token ${i + 1}: ${t.text === null ? `byte ${t.bytes}` : JSON.stringify(t.text)}` }, view.chips);
    c.textContent = tokenText(t);
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
  const rowH = Math.max(2.5, Math.min(dense ? 6 : v.name === 'wide' ? 14 : 9, budget / d.num_tokens));
  view.geo = { v, rowH, dense };
  drawChips(d);
  view.qkvFig = drawQKV(d, v, pal, rowH, view.head);
  view.heat = drawAttention(view.attn, d, dense ? (v.name === 'wide' ? 'dense' : 'narrowDense') : v.name, pal, view.head, {
    row: (i) => select(i, false),
    head: (hh) => pickHead(hh),
  });
  view.mlpFig = drawMLP(d, v, pal, rowH);
  select(view.sel, false, true);
}

/** Open head hh large: through the `head` control when the scene has one (so the URL keeps it). */
function pickHead(hh) {
  if (hh === view.head) return;
  if (ctx.params && 'head' in ctx.params) ctx.setParam('head', hh);
  else { view.head = hh; draw(); }
  view.attn.querySelector(`.ly-thumb[data-head="${hh}"]`)?.focus();
  ctx.announce(`Head ${hh} drawn large`);
}

function heading(box, title, sub) {
  clear(box);
  const hd = h('h2', { class: 'ly-h', text: title }, box);
  if (sub) h('span', { class: 'ly-sub', text: ` ${sub}` }, hd);
}

/** Row labels (the tokens) and a highlight bar across a block of T rows starting at y. */
function rowsFrame(s, d, v, y, rowH) {
  const font = Math.min(11, rowH * 0.95);
  if (font >= 5.5) {
    d.tokens.forEach((t, i) => svg('text', { x: v.label - 6, y: y + (i + 0.5) * rowH + font * 0.35, 'text-anchor': 'end', class: 'ly-row-label',
      'font-size': font.toFixed(1), text: clip(tokenText(t), v.name === 'wide' ? 10 : 6) }, s));
  }
  return svg('rect', { x: v.label - 3, width: v.W - v.label + 3, height: rowH, class: 'ly-row-sel', y }, s);
}

const clip = (text, n) => (text.length > n ? `${text.slice(0, n - 1)}…` : text);

/** Q, K and V of every token: rows are tokens, columns the numbers, head after head; the drawn head's
 * query columns and its key/value head's columns are outlined. */
function drawQKV(d, v, pal, rowH, head) {
  const m = d.model, q = d.qkv, T = d.num_tokens, grp = groupOf(d, head), hd = m.head_dim;
  heading(view.qkv, 'Each token makes a Query, a Key and a Value', '(what am I looking for? what do I offer? what do I share?)');
  const widths = [m.n_heads, m.n_kv_heads, m.n_kv_heads].map((n) => n * (hd + 1) - 1);
  const gap = v.name === 'wide' ? 18 : 8, unit = (v.W - v.label - 2 * gap) / (widths[0] + widths[1] + widths[2]);
  const top = 44, H = top + T * rowH + 20;
  const s = root(view.qkv, v.W, H, `Queries, keys and values of ${plural(T, 'token')} in layer ${d.layer}: one row per ` +
    `token, ${hd} numbers per head; query head ${head} reads key/value head ${grp.kv_head}.`);
  s.classList.add('ly-svg');
  let x = v.label;
  const blocks = [['Query', unpacked(q.q), q.q_scale, m.n_heads, 'q'], ['Key', unpacked(q.k), q.k_scale, m.n_kv_heads, 'k'],
    ['Value', unpacked(q.v), q.v_scale, m.n_kv_heads, 'v']];
  const g = m.n_heads / m.n_kv_heads;
  blocks.forEach(([name, rows, scale, heads, cls], b) => {
    const w = widths[b] * unit, segW = hd * unit;
    const titles = [`${name} · ${heads} heads × ${hd} = ${num(heads * hd)} numbers`, `${name} · ${heads} × ${hd}`, name];
    svg('text', { x, y: 12, class: `ly-block-title ${cls}`, text: titles.find((t) => t.length * 7.2 < w) || name }, s);
    for (let hh = 0; hh < heads; hh++) {
      const hx = x + hh * (hd + 1) * unit, group = cls === 'q' ? Math.floor(hh / g) : hh;
      const mine = cls === 'q' ? hh === head : hh === grp.kv_head;
      svg('rect', { x: hx, y: 30, width: segW, height: 5, rx: 1, class: `ly-group g${group % 4}` }, s);
      if (segW >= 9) svg('text', { x: hx + segW / 2, y: 26, 'text-anchor': 'middle', class: `ly-head-no${mine ? ' sel' : ''}`, text: String(hh) }, s);
      if (mine) svg('rect', { x: hx - 1.5, y: top - 3, width: segW + 3, height: T * rowH + 6, rx: 2, class: 'ly-head-sel' }, s);
    }
    svg('image', { x, y: top, width: w, height: T * rowH, preserveAspectRatio: 'none', class: 'strip-img',
      href: rowsImage(rows, scale, pal, hd) }, s);
    x += w + gap;
  });
  svg('text', { x: v.label, y: H - 4, class: 'ly-small', text: v.name === 'wide'
    ? `rows: the ${plural(T, 'token')} · columns: their numbers, ${hd} per head (head numbers above; outlined: head ${head} and the key/value head it reads)`
    : `rows: tokens · columns: ${hd} numbers per head` }, s);
  h('p', { class: 'ly-caption', 'data-secondary': '', text: `Query head ${head} compares its ${hd} numbers with key head ${grp.kv_head}’s and mixes value head ` +
    `${grp.kv_head}’s. ${g} query heads share each of the ${m.n_kv_heads} key/value heads (grouped-query attention; same colour bar = same group), ` +
    `so the cache keeps ${m.n_kv_heads} keys and values per token instead of ${m.n_heads}.` }, view.qkv);
  return { s, sel: rowsFrame(s, d, v, top, rowH), top };
}

function drawMLP(d, v, pal, qkvRowH) {
  const rowH = Math.max(2, Math.min(qkvRowH, (view.geo.dense ? 50 : 110) / d.num_tokens)); // three blocks: keep each short
  const m = d.model, T = d.num_tokens, mlp = d.mlp, wide = v.W - v.label, narrowW = (wide * m.dim) / m.ffn_dim;
  heading(view.mlp, `Then the MLP stretches each vector to ${num(m.ffn_dim)} numbers and squeezes it back to ${num(m.dim)}`);
  const bh = T * rowH, link = view.geo.dense ? 22 : v.name === 'wide' ? 40 : 30, y1 = 16, y2 = y1 + bh + link + 14, y3 = y2 + bh + link + 14;
  const s = root(view.mlp, v.W, y3 + bh + 6, `The MLP of layer ${d.layer}: ${m.dim} numbers in, ${m.ffn_dim} in the middle, ${m.dim} out.`);
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
    svg('image', { x, y, width: w, height: bh, preserveAspectRatio: 'none', class: 'strip-img', href: rowsImage(unpacked(rows), scale, pal) }, s);
  };
  block(nx, y1, narrowW, mlp.input, mlp.input_scale, `in: RMSNorm(x) · ${m.dim}`);
  block(v.label, y2, wide, mlp.hidden, mlp.hidden_scale, `silu(gate) × up · ${num(m.ffn_dim)} wide`);
  block(nx, y3, narrowW, mlp.out, mlp.out_scale, `out · ${m.dim}, added to the token’s vector`);
  const sels = [y1, y2, y3].map((y, k) => svg('rect', { x: k === 1 ? v.label : nx, width: k === 1 ? wide : narrowW, height: rowH, class: 'ly-row-sel', y }, s));
  return { sels, ys: [y1, y2, y3], rowH };
}

// ---- the selected token ---------------------------------------------------------------------

function select(i, announce, force = false) {
  if (!view?.heat || (i === view.sel && !announce && !force)) return; // pointermove within one row: nothing to do
  view.sel = i;
  const d = view.data, { rowH } = view.geo, who = tokenText(d.tokens[i]);
  view.chipEls.forEach((c, j) => { c.classList.toggle('selected', j === i); c.setAttribute('aria-pressed', String(j === i)); });
  view.qkvFig.sel.setAttribute('y', (view.qkvFig.top + i * rowH).toFixed(1));
  view.mlpFig.sels.forEach((r, k) => r.setAttribute('y', (view.mlpFig.ys[k] + i * view.mlpFig.rowH).toFixed(1)));
  view.heat.select(i);
  const v = view.selReadout.querySelector('.value');
  v.textContent = `“${who}”`;
  h('span', { class: 'unit', text: `token ${i + 1} of ${d.num_tokens}` }, v);
  if (announce) {
    const w = d.heads[view.head].weights[i], top = w.indexOf(Math.max(...w));
    ctx.announce(`${who}: head ${view.head} looks most at ${tokenText(d.tokens[top])}, ${Math.round(w[top] * 100)}%`);
  }
}

function drawMath(d) {
  clear(view.math);
  view.math.appendChild(mathDetails(d.math.attention, 'Attention weights: how?'));
  view.math.appendChild(mathDetails(d.math.kv_numbers_per_token, 'Key/value numbers cached per token: how?'));
  view.math.appendChild(mathDetails(d.math.mlp_stretch, 'How much wider is the MLP?'));
}
