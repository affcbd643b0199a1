// scenes/embeddings-strips.js: vectors as colour strips (one pixel per number), keys, measured bars; chapters 2 and 3.

import { svg, h, clear, cssVar, root } from '../lib/svg.js';
import { num } from '../lib/format.js';
import { widthClass } from '../lib/scene-kit.js';

export const NEG = '#e8743b'; // negative values: a warm hue; positive values use --c-tokens (activations)
const WIDTHS = { narrow: 620 }; // stage width (px) under which the phone drawing is used

export const variantFor = (stage) => widthClass(stage, WIDTHS);

function rgb(hex) {
  const m = /^#?([0-9a-f]{6})$/i.exec(hex.trim());
  if (m) return [0, 2, 4].map((i) => parseInt(m[1].slice(i, i + 2), 16));
  const c = /rgba?\(([^)]+)\)/.exec(hex);
  return c ? c[1].split(',').slice(0, 3).map(Number) : [128, 128, 128];
}

/** The diverging scale's colours from the theme: zero = the panel, + = --c-tokens, - = NEG. */
export function colours() {
  return { pos: rgb(cssVar('--c-tokens') || '#3b7bf0'), neg: rgb(NEG), zero: rgb(cssVar('--panel') || '#ffffff') };
}

/** Fill rgba at byte offset o of a pixel buffer for value x on a ±scale diverging scale. */
function paint(px, o, x, scale, pal) {
  const t = Math.min(1, Math.abs(x) / (scale || 1)) ** 0.8;
  const c = x >= 0 ? pal.pos : pal.neg;
  for (let k = 0; k < 3; k++) px[o + k] = pal.zero[k] + (c[k] - pal.zero[k]) * t;
  px[o + 3] = 255;
}

/** A data URL: vectors side by side, each wrapped into an R x C block (row-major), gap transparent columns apart. */
export function vectorImage(vectors, R, C, gap, scale, pal) {
  const W = vectors.length * (C + gap) - gap;
  return image(W, R, (px) => vectors.forEach((vec, j) => {
    for (let n = 0; n < vec.length; n++) paint(px, ((Math.floor(n / C) * W) + j * (C + gap) + (n % C)) * 4, vec[n], scale, pal);
  }));
}

/** A data URL: one row of pixels per vector (rows[T][n]); `gapEvery` inserts a transparent column every k numbers. */
export function rowsImage(rows, scale, pal, gapEvery = 0) {
  const n = rows[0].length, extra = gapEvery ? Math.floor((n - 1) / gapEvery) : 0, W = n + extra;
  return image(W, rows.length, (px) => rows.forEach((vec, r) => {
    for (let k = 0; k < n; k++) paint(px, (r * W + k + (gapEvery ? Math.floor(k / gapEvery) : 0)) * 4, vec[k], scale, pal);
  }));
}

function image(W, H, fill) {
  const canvas = document.createElement('canvas');
  canvas.width = W;
  canvas.height = H;
  const g = canvas.getContext('2d');
  const img = g.createImageData(W, H);
  fill(img.data);
  g.putImageData(img, 0, 0);
  return canvas.toDataURL('image/png');
}

/**
 * A token or guess {text, bytes} as it reads in a small label: spaces as ·, newlines as ↵; a piece that is only
 * part of a character (text null) shows what of it decodes, then its leftover raw bytes in hex as ‹F0 9F›.
 */
export function pieceLabel(p) {
  if (p.text !== null && p.text !== undefined) return tokenLabel(p.text);
  const raw = Uint8Array.from((p.bytes || '').split(' ').filter(Boolean), (x) => parseInt(x, 16));
  let n = raw.length;
  for (; n > 0; n--) {
    try { new TextDecoder('utf-8', { fatal: true }).decode(raw.subarray(0, n)); break; } catch { /* shorter */ }
  }
  const head = n ? tokenLabel(new TextDecoder().decode(raw.subarray(0, n))) : '';
  return `${head}‹${[...raw.subarray(n)].map((b) => b.toString(16).toUpperCase().padStart(2, '0')).join(' ')}›`;
}

/** Legend words for ‹..› and ·, shared by chapters 2 and 3. */
export const PIECE_KEY = '· is a space (·the = “ the”); a piece without · joins the word before it; ‹F0 9F› = raw bytes, ' +
  'part of a character (an emoji, say) that the vocabulary spells in several pieces';

export const guessLabel = pieceLabel;

/** A token piece as it reads in a small label: spaces as ·, newlines as ↵. */
export function tokenLabel(text) {
  if (text === null || text === undefined) return '�';
  return text.replace(/[ \u00a0]/g, '·').replace(/\n/g, '↵').replace(/\t/g, '→') || '∅';
}

/** The served model in a few words, from the response. */
export function modelWords(m) {
  return m.served === 'smollm2' ? `SmolLM2-135M-Instruct (${num(m.num_params / 1e6, 3)} M parameters, a real chat model)`
    : `our toy model (“${m.name}”, ${num(m.num_params / 1e6, 2)} M parameters, trained here on Shakespeare)`;
}

/** A line saying why the toy model serves when SmolLM2 was asked for (its file is not on this server). */
export function modelNote(before, m) {
  before.parentNode.querySelector(':scope > .model-note')?.remove();
  if (m.note) before.before(h('p', { class: 'model-note', role: 'status', text: m.note }));
}

/**
 * Keep the layer and head sliders inside the model the visitor switches to: on a change of the model select,
 * clamp them to that model's counts (from the last response's `choices`) before the new request goes out.
 */
export function followModelSelect(ctx, getData) {
  const sel = document.getElementById('ctl-model');
  if (!sel) return () => {};
  const onChange = () => {
    const c = getData()?.model?.choices?.[sel.value];
    if (!c) return;
    for (const [name, n] of [['layer', c.n_layers], ['head', c.n_heads]]) {
      const el = document.getElementById(`ctl-${name}`);
      if (!el || !(name in ctx.params)) continue;
      if (el.type === 'range') el.max = String(n - 1);
      if (ctx.params[name] > n - 1) ctx.setParam(name, n - 1);
    }
  };
  sel.addEventListener('change', onChange);
  return () => sel.removeEventListener('change', onChange);
}

/** The colour key: a gradient from -scale through 0 to +scale, with a short caption. */
export function legendScale(parent, caption) {
  const k = h('span', { class: 'strip-key' }, parent);
  h('span', { class: 'strip-key-end', text: '−' }, k);
  h('i', { class: 'strip-key-bar', 'aria-hidden': 'true' }, k);
  h('span', { class: 'strip-key-end', text: '+' }, k);
  k.append(' orange negative, blank ≈ 0, blue positive');
  parent.append(` (${caption})`);
  return k;
}

/** The real model and the demo as two rectangles to the same scale (width: numbers per token, height: layers). */
export function drawToScale(box, d) {
  clear(box);
  const r = d.real_model, m = d.model, W = 420, H = 150, bw = 400, bh = 110;
  const who = m.served === 'smollm2' ? 'SmolLM2' : 'our toy model';
  h('h2', { text: `To scale: ${r.name} vs ${who}` }, box);
  const s = root(box, W, H, `${r.name}: ${r.hidden_size} numbers per token and ${r.num_layers} layers; the demo model: ` +
    `${m.dim} numbers and ${m.n_layers} layers, drawn to the same scale.`);
  svg('rect', { x: 10, y: 10, width: bw, height: bh, class: 'emb-real-big' }, s);
  const dw = Math.max(1.5, (bw * m.dim) / r.hidden_size), dh = Math.max(1.5, (bh * m.n_layers) / r.num_layers);
  svg('rect', { x: 10, y: 10 + bh - dh, width: dw, height: dh, class: 'emb-real-demo' }, s);
  svg('text', { x: 10 + bw / 2, y: 10 + bh / 2, 'text-anchor': 'middle', class: 'emb-real-label',
    text: `${num(r.hidden_size)} numbers × ${r.num_layers} layers` }, s);
  svg('text', { x: 10 + dw + 6, y: 10 + bh - 3, class: 'emb-small', text: `← ${who}: ${num(m.dim)} × ${m.n_layers}` }, s);
  svg('text', { x: 10, y: H - 8, class: 'emb-small',
    text: `${num(d.math.width_ratio.value)}× wider and ${num(d.math.depth_ratio.value)}× taller` }, s);
}
