// scenes/dials-memory.js: chapter 11's memory bar (one GPU: weights, KV cache, buffers, reserve, spare) and TPOT curve.

import { h, svg, root, clear } from '../lib/svg.js';
import { num, duration, plural } from '../lib/format.js';
import { log, linear } from '../lib/scale.js';
import { tween, lerp } from '../lib/tween.js';

const PARTS = [
  ['weights_gb', 'Weights', 'weights'],
  ['kv_cache_gb', 'KV cache', 'kv'],
  ['activations_gb', 'Activations', 'act'],
  ['reserve_gb', 'Runtime reserve', 'reserve'],
];
const CHAR_EM = 0.62; // average width of a bold label character, in em of the bar's label type
const gb = (x) => `${num(x, 3)} GB`;

/** The per-GPU memory bar. Segments are fixed elements whose widths change (CSS transitions). */
export function createMemoryBar(parent) {
  const box = h('section', { class: 'dials-card dials-mem', 'aria-labelledby': 'dials-mem-title' }, parent);
  const head = h('div', { class: 'card-head' }, box);
  h('h3', { id: 'dials-mem-title', text: 'Memory per GPU' }, head);
  const verdict = h('p', { class: 'mem-verdict', 'aria-live': 'polite' }, box);
  const bar = h('div', { class: 'membar', role: 'img' }, box);
  const segs = PARTS.map(([key, label, cls]) => {
    const el = h('div', { class: `seg ${cls}`, title: label }, bar);
    return { key, label, el, text: h('span', {}, el) };
  });
  const over = h('div', { class: 'seg over', title: 'beyond the GPU memory' }, bar);
  const cap = h('div', { class: 'cap' }, bar);
  const capText = h('span', {}, cap);
  const legend = h('ul', { class: 'mem-legend' }, box);
  const items = [...PARTS, ['spare_gb', 'Spare', 'spare']].map(([key, label, cls]) => {
    const li = h('li', {}, legend);
    h('i', { class: cls }, li);
    h('span', { text: `${label} ` }, li);
    return { key, b: h('b', {}, li) };
  });
  const note = h('p', { class: 'mem-note' }, box);

  /** How many label characters a segment of w% can show (its final width, not the transitioning one). */
  function labelRoom() {
    const px = bar.clientWidth, em = parseFloat(getComputedStyle(segs[0].text).fontSize) || 12;
    return (w) => Math.floor(((w / 100) * px - em * 1.4) / (em * CHAR_EM));
  }

  /** Each segment shows its label and size, or just its name, or nothing, whichever fits. */
  function relabel() {
    const room = labelRoom();
    for (const s of segs) {
      if (s.pct === undefined) continue;
      const fits = (t) => t.length <= room(s.pct);
      s.text.textContent = fits(s.full) ? s.full : fits(s.label) ? s.label : '';
    }
  }
  const resize = typeof ResizeObserver === 'function' ? new ResizeObserver(relabel) : null;
  if (resize) resize.observe(bar);

  function update(d) {
    const m = d.memory;
    const used = m.weights_gb + m.kv_cache_gb + m.activations_gb + m.reserve_gb;
    const scale = Math.max(m.capacity_gb, used);
    let x = 0;
    for (const s of segs) {
      s.pct = (100 * m[s.key]) / scale;
      s.el.style.left = `${x}%`;
      s.el.style.width = `${s.pct}%`;
      s.full = `${s.label} ${gb(m[s.key])}`;
      s.el.title = `${s.label}: ${gb(m[s.key])}`;
      x += s.pct;
    }
    relabel();
    const capPct = (100 * m.capacity_gb) / scale;
    over.style.left = `${capPct}%`;
    over.style.width = `${100 - capPct}%`;
    cap.style.left = `${capPct}%`;
    capText.textContent = `${gb(m.capacity_gb)} on the GPU`;
    box.classList.toggle('no-fit', !m.fits);
    for (const it of items) it.b.textContent = it.key === 'spare_gb' && !m.fits ? 'none' : gb(m[it.key]);
    verdict.textContent = m.fits
      ? `Fits: ${gb(m.spare_gb)} of ${gb(m.capacity_gb)} spare on each GPU.`
      : `Does not fit: each GPU would need ${gb(used)}, ${gb(m.shortfall_gb)} more than its ${gb(m.capacity_gb)}.`;
    bar.setAttribute('aria-label', `Memory per GPU: ${PARTS.map(([k, l]) => `${l} ${gb(m[k])}`).join(', ')}; ` +
      `capacity ${gb(m.capacity_gb)}; ${m.fits ? `spare ${gb(m.spare_gb)}` : `short by ${gb(m.shortfall_gb)}`}`);
    note.textContent = noteText(d);
  }
  return { update, destroy: () => resize && resize.disconnect() };
}

function noteText(d) {
  const ctx = d.params.prompt_tokens + d.params.output_tokens;
  const chats = `${plural(d.max_batch, 'chat')} of ${num(ctx)} tokens`;
  if (!d.memory.fits && d.max_batch === 0) {
    return 'Not even one chat fits: the weights alone outgrow the GPU. Split the model over more GPUs ' +
      '(tensor or pipeline parallel) or store it in fewer bits.';
  }
  if (!d.memory.fits) return `At most ${chats} fit; lower the batch or shorten the chats.`;
  return `Room for up to ${chats} at once (the largest batch that fits).`;
}

// ---- TPOT as the context grows -------------------------------------------------------------------

const H = 210, M = { l: 46, r: 14, t: 16, b: 40 };
const W_MIN = 300, W_MAX = 760; // viewBox width follows the card in 16ths of an em: 11-unit text stays 11/16 em
const Y_TICKS = 4;

function niceCeil(x) {
  const p = 10 ** Math.floor(Math.log10(x || 1));
  return [1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10].map((f) => f * p).find((v) => v >= x) || 10 * p;
}

/** Two significant digits: 96,602 -> 97,000. */
function round2(x) {
  const p = 10 ** Math.max(0, Math.floor(Math.log10(x)) - 1);
  return Math.round(x / p) * p;
}

function shortTokens(x) {
  if (x >= 1048576) return `${num(x / 1048576, 3)}M`;
  return x >= 1024 ? `${num(x / 1024, 3)}k` : String(x);
}

/** The TPOT-vs-context chart: fixed SVG nodes whose attributes are tweened between answers. */
export function createCurve(parent) {
  const box = h('section', { class: 'dials-card dials-curve', 'aria-labelledby': 'dials-curve-title', 'data-narrow-secondary': '' }, parent);
  const head = h('div', { class: 'card-head' }, box);
  h('h3', { id: 'dials-curve-title', text: 'Each token gets slower as the chat grows' }, head);
  let W = 560;
  const s = root(box, W, H, 'Time per output token against context length');
  const band = svg('rect', { class: 'nofit', y: M.t, height: H - M.t - M.b }, s);
  const grid = svg('g', { class: 'grid' }, s);
  const yTicks = Array.from({ length: Y_TICKS + 1 }, () => ({
    line: svg('line', { x1: M.l }, grid),
    text: svg('text', { x: M.l - 6, 'text-anchor': 'end', dy: '0.32em' }, grid),
  }));
  const xAxis = svg('g', { class: 'xaxis' }, s);
  const xLabel = svg('text', { class: 'axis-label', y: H - 4, 'text-anchor': 'middle',
    text: 'context per chat, tokens (log scale)' }, s);
  svg('text', { class: 'axis-label', x: M.l + 6, y: M.t + 4, text: 'ms per output token' }, s);
  const line = svg('path', { class: 'tpot-line' }, s);
  const guide = svg('line', { class: 'marker-guide' }, s);
  const dot = svg('circle', { class: 'marker', r: 5 }, s);
  const dotText = svg('text', { class: 'marker-label' }, s);
  const bandNote = h('p', { class: 'curve-nofit' }, box);
  const caption = h('p', { class: 'card-note' }, box);
  let shown = null, anim = null, xsKey = '', last = null;

  /** Fit the viewBox to the card's CSS width; returns true when it changed. */
  function fitWidth() {
    const em = parseFloat(getComputedStyle(s).fontSize) || 16;
    const css = s.getBoundingClientRect().width;
    const w = Math.round(Math.min(W_MAX, Math.max(W_MIN, css ? (css * 16) / em : W)));
    if (w === W && s.getAttribute('data-w')) return false;
    W = w;
    s.setAttribute('data-w', w);
    s.setAttribute('viewBox', `0 0 ${W} ${H}`);
    yTicks.forEach((t) => t.line.setAttribute('x2', W - M.r));
    xLabel.setAttribute('x', (M.l + W - M.r) / 2);
    xsKey = '';
    return true;
  }
  const resize = typeof ResizeObserver === 'function' ? new ResizeObserver(() => {
    if (last && fitWidth()) { drawX(last.c.context_tokens); frame(last.c, shown.ys, shown.ymax, shown.mean, shown.tpot); }
  }) : null;
  if (resize) resize.observe(box);

  function drawX(xs) {
    const key = `${xs[0]}-${xs[xs.length - 1]}`;
    if (key === xsKey) return;
    xsKey = key;
    clear(xAxis);
    const x = log([xs[0], xs[xs.length - 1]], [M.l, W - M.r], 2);
    for (let v = xs[0]; v <= xs[xs.length - 1]; v *= 4) {
      svg('line', { x1: x(v), x2: x(v), y1: H - M.b, y2: H - M.b + 4 }, xAxis);
      svg('text', { x: x(v), y: H - M.b + 16, 'text-anchor': 'middle', text: shortTokens(v) }, xAxis);
    }
  }

  /** Marker label beside the dot, on whichever side has room (estimated 6.6 px per 12px-bold character). */
  function placeLabel(mx, my) {
    const est = dotText.textContent.length * 6.6, lo = M.l + 2, hi = W - M.r;
    let x = mx + 9, anchor = 'start';
    if (x + est > hi) { x = mx - 9; anchor = 'end'; }
    if (anchor === 'end' && x - est < lo) { x = Math.min(hi - est / 2, Math.max(lo + est / 2, mx)); anchor = 'middle'; }
    dotText.setAttribute('x', x);
    dotText.setAttribute('y', Math.max(M.t + 10, my - (anchor === 'middle' ? 12 : 9)));
    dotText.setAttribute('text-anchor', anchor);
  }

  function frame(c, ys, ymax, mean, tpot) {
    last = { c };
    const xs = c.context_tokens;
    const x = log([xs[0], xs[xs.length - 1]], [M.l, W - M.r], 2);
    const y = linear([0, ymax], [H - M.b, M.t]);
    line.setAttribute('d', xs.map((v, i) => `${i ? 'L' : 'M'}${x(v).toFixed(1)},${y(ys[i]).toFixed(1)}`).join(''));
    yTicks.forEach((t, i) => {
      const v = (ymax * i) / Y_TICKS;
      t.line.setAttribute('y1', y(v));
      t.line.setAttribute('y2', y(v));
      t.text.setAttribute('y', y(v));
      t.text.textContent = num(v, 3);
    });
    const first = c.fits.indexOf(false);
    band.setAttribute('display', first < 0 ? 'none' : 'inline');
    if (first >= 0) {
      const x0 = first === 0 ? M.l : (x(xs[first - 1]) + x(xs[first])) / 2;
      band.setAttribute('x', x0);
      band.setAttribute('width', W - M.r - x0);
    }
    const mx = x(Math.min(Math.max(mean, xs[0]), xs[xs.length - 1])), my = y(tpot);
    dot.setAttribute('cx', mx);
    dot.setAttribute('cy', my);
    guide.setAttribute('x1', mx);
    guide.setAttribute('x2', mx);
    guide.setAttribute('y1', my);
    guide.setAttribute('y2', H - M.b);
    placeLabel(mx, my);
  }

  function update(d) {
    const c = d.tpot_curve;
    fitWidth();
    drawX(c.context_tokens);
    const target = { ys: c.tpot_ms, ymax: niceCeil(Math.max(...c.tpot_ms) * 1.05), mean: c.mean_context_tokens,
      tpot: d.tpot_ms ?? d.hypothetical.tpot_ms };
    dotText.textContent = `${W < 440 ? '' : 'this answer: '}${duration(d.tpot_ms ?? d.hypothetical.tpot_ms)} per token`;
    const n = d.params.batch, first = c.fits.indexOf(false);
    const who = n === 1 ? 'one chat does' : `${num(n)} chats do`;
    bandNote.hidden = first < 0;
    bandNote.textContent = first === 0 ? `Shaded: ${who} not fit in memory at any length.`
      : `Shaded: from about ${num(round2(c.context_tokens[first]))} tokens each, ${who} not fit in memory.`;
    caption.textContent = `Every decode step rereads each chat's whole KV cache, so the time per token climbs ` +
      `with context. Read at the answer's mean context, ${num(c.mean_context_tokens)} tokens.`;
    if (anim) anim.cancel();
    const from = shown && shown.ys.length === target.ys.length ? shown : target;
    anim = tween(from === target ? 0 : 300, (t) => {
      const cur = { ys: target.ys.map((v, i) => lerp(from.ys[i], v, t)), ymax: lerp(from.ymax, target.ymax, t),
        mean: Math.exp(lerp(Math.log(from.mean), Math.log(target.mean), t)), tpot: lerp(from.tpot, target.tpot, t) };
      shown = cur;
      frame(c, cur.ys, cur.ymax, cur.mean, cur.tpot);
    });
  }

  function cancel() {
    if (anim) anim.cancel();
    if (resize) resize.disconnect();
  }
  return { update, cancel };
}
