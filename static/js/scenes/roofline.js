// scenes/roofline.js: chapter 5: a log-log roofline with prefill and decode on it; batch moves the decode point up the slope.

import { svg, h, clear, root } from '../lib/svg.js';
import { swatches } from '../lib/legend.js';
import { num, pct } from '../lib/format.js';
import { log } from '../lib/scale.js';
import { mathDetails } from '../lib/math.js';
import { tween, lerp } from '../lib/tween.js';
import { sceneStyles } from '../lib/style.js';

const VARIANTS = {
  wide: { name: 'wide', W: 900, H: 470, m: { l: 64, r: 18, t: 18, b: 52 }, r: 8, short: false },
  narrow: { name: 'narrow', W: 360, H: 380, m: { l: 44, r: 10, t: 14, b: 44 }, r: 6.5, short: true },
};
const NARROW_BELOW = 620; // stage width (px) under which the phone chart is used
const X_DOMAIN = [0.5, 1e6]; // FLOP/byte: decode at batch 1 (~1) to prefill of many long prompts
const LABELLED_BATCHES = [8, 64, 512]; // batch 1 sits under the decode point's own label
const TWEEN_MS = 450;

let view = null;
let ctx = null;

export function mount(stage, context) {
  ctx = context;
  sceneStyles('roofline');
  clear(stage);
  const wrap = h('div', { class: 'roofline-scene' }, stage);
  view = {
    stage,
    readouts: h('div', { class: 'readouts', 'aria-live': 'polite' }, wrap),
    note: h('p', { class: 'roofline-note' }, wrap),
    figure: h('div', { class: 'roofline-figure' }, wrap),
    legend: h('div', { class: 'legend roofline-legend' }, wrap),
    math: h('div', { class: 'roofline-math' }, wrap),
    key: '', chart: null, data: null, anim: null, shown: null,
  };
  view.ro = new ResizeObserver(() => {
    if (view && view.data && variantFor() !== view.variant) draw(view.data);
  });
  view.ro.observe(stage);
}

export function unmount() {
  if (!view) return;
  if (view.anim) view.anim.cancel();
  view.ro.disconnect();
  view = null;
}

export function update(data) {
  if (!view) return;
  view.data = data;
  drawReadouts(data);
  drawNote(data);
  drawLegend(data);
  drawMath(data);
  draw(data);
}

function variantFor() {
  return view.stage.clientWidth && view.stage.clientWidth < NARROW_BELOW ? 'narrow' : 'wide';
}

// ---- readouts, note, legend, math ------------------------------------------------------------

function readout(parent, label, value, unit, cls = '') {
  const r = h('div', { class: `readout ${cls}` }, parent);
  h('span', { class: 'label', text: label }, r);
  const v = h('span', { class: 'value', text: value }, r);
  if (unit) h('span', { class: 'unit', text: unit }, v);
}

const tflops = (x) => num(x / 1e12, 3);
const share = (f) => pct(f, f < 0.1 ? 2 : 1);

function drawReadouts(d) {
  const dec = d.decode, rf = d.roof;
  clear(view.readouts);
  readout(view.readouts, 'Decode intensity', num(dec.arithmetic_intensity, 3), `FLOP/byte · ridge ${num(rf.ridge_flops_per_byte)}`);
  readout(view.readouts, 'Decode attains', tflops(dec.attained_flops_per_s), `of ${tflops(rf.peak_flops_per_s)} TFLOP/s`);
  readout(view.readouts, 'Math used', share(dec.share_of_peak), 'of peak', 'share');
  readout(view.readouts, 'Roof that binds', d.binding_roof === 'memory' ? 'Memory' : 'Compute',
    d.binding_roof === 'memory' ? 'bandwidth' : 'peak math', `binds-${d.binding_roof}`);
}

function drawNote(d) {
  const p = d.prefill, cv = d.decode_curve;
  clear(view.note);
  const per = d.tp === 1 ? 'on one GPU' : `per GPU of ${d.tp} sharing the model (tensor parallel)`;
  h('span', { text: `${d.model.name} on an ${d.gpu.name}, ${per}. Prefill of ${num(p.batch)} × ` +
    `${num(p.context_tokens)}-token prompt${p.batch === 1 ? '' : 's'} uses ${pct(p.share_of_peak, 0)} of the math; ` +
    `each decode step then adds one token per chat and uses ${share(d.decode.share_of_peak)}.` }, view.note);
  if (d.batch > cv.max_batch) {
    h('strong', { class: 'roofline-warn', text: cv.max_batch ? ` Only ${num(cv.max_batch)} chats of this length fit ` +
      'in memory; the point shows the math, not a server you could run.' : ' Not even one chat fits in memory ' +
      'here; the points show the math only.' }, view.note);
  }
}

function drawLegend(d) {
  swatches(view.legend, [
    ['sw-memory', `memory roof: ${num(d.roof.bandwidth_bytes_per_s / 1e12)} TB/s`],
    ['sw-compute', `compute roof: ${tflops(d.roof.peak_flops_per_s)} TFLOP/s ${d.roof.math.toUpperCase()} dense`],
    ['sw-curve', 'decode at batch 1 … 1,024'],
    ['sw-gap', 'gap to the ideal roof: kernel efficiency, launches, all-reduces'],
    d.decode_curve.fits.some((f) => !f) && ['sw-nofit', 'batch does not fit in memory'],
  ]);
}

function drawMath(d) {
  clear(view.math);
  const grid = h('div', { class: 'roofline-math-grid' }, view.math);
  const add = (key, label) => grid.appendChild(mathDetails(d.math[key], label));
  add('decode_arithmetic_intensity', 'Decode intensity: how?');
  add('decode_attained_flops_per_s', 'Attained FLOP/s: how?');
  add('decode_share_of_peak', 'Math used: how?');
  add('decode_roof', 'Which roof binds: how?');
  add('ridge_flops_per_byte', 'Ridge point: how?');
  add('prefill_share_of_peak', 'Prefill math used: how?');
}

// ---- the chart ------------------------------------------------------------------------------

function yDomain(d) {
  const low = Math.min(...d.decode_curve.attained_flops_per_s, X_DOMAIN[0] * d.roof.bandwidth_bytes_per_s) / 3;
  return [Math.pow(10, Math.floor(Math.log10(low))), d.roof.peak_flops_per_s * 3];
}

const tickX = (v) => (v >= 1e6 ? `${v / 1e6}M` : v >= 1e3 ? `${v / 1e3}k` : String(v));
const tickY = (v) => (v >= 1e12 ? num(v / 1e12) : String(v / 1e12));

function draw(d) {
  const variant = variantFor();
  const key = `${variant}|${d.gpu.id}|${d.roof.precision}|${d.model.id}|${d.prompt_tokens}|${d.tp}`;
  if (key !== view.key) {
    view.key = key;
    view.variant = variant;
    view.chart = drawChart(d, VARIANTS[variant]);
    view.shown = null;
  }
  moveDecode(d);
}

function drawChart(d, v) {
  const fig = clear(view.figure);
  const s = root(fig, v.W, v.H, `Roofline of the ${d.gpu.name} at ${d.roof.precision.toUpperCase()}: memory slope ` +
    `${num(d.roof.bandwidth_bytes_per_s / 1e12)} TB/s, compute roof ${tflops(d.roof.peak_flops_per_s)} TFLOP/s, ridge ` +
    `${num(d.roof.ridge_flops_per_byte)} FLOP/byte; prefill and decode points for ${d.model.name}.`);
  s.classList.add('roofline-svg', `roofline-${v.name}`);
  const box = { x0: v.m.l, x1: v.W - v.m.r, y0: v.H - v.m.b, y1: v.m.t };
  const x = log(X_DOMAIN, [box.x0, box.x1]), y = log(yDomain(d), [box.y0, box.y1]);
  const c = { v, s, x, y, box };
  drawAxes(c, d);
  drawRoofs(c, d);
  drawCurve(c, d);
  drawPrefill(c, d);
  c.gap = svg('line', { class: 'rf-gap' }, s);
  c.dot = svg('circle', { r: v.r + 1.5, class: 'rf-point decode', tabindex: 0, role: 'slider',
    'aria-label': 'Decode point: drag or use arrow keys to change the batch', 'aria-valuemin': 1, 'aria-valuemax': 1024 }, s);
  c.label = svg('text', { class: 'rf-label rf-decode-label' }, s);
  bindDrag(c);
  return c;
}

function drawAxes(c, d) {
  const { s, x, y, box, v } = c;
  const g = svg('g', { class: 'rf-axes' }, s);
  for (const t of x.ticks()) {
    svg('line', { x1: x(t), x2: x(t), y1: box.y0, y2: box.y1, class: 'rf-grid' }, g);
    svg('text', { x: x(t), y: box.y0 + 15, 'text-anchor': 'middle', class: 'rf-tick', text: tickX(t) }, g);
  }
  for (const t of y.ticks()) {
    svg('line', { x1: box.x0, x2: box.x1, y1: y(t), y2: y(t), class: 'rf-grid' }, g);
    svg('text', { x: box.x0 - 6, y: y(t) + 4, 'text-anchor': 'end', class: 'rf-tick', text: tickY(t) }, g);
  }
  svg('rect', { x: box.x0, y: box.y1, width: box.x1 - box.x0, height: box.y0 - box.y1, class: 'rf-frame' }, g);
  svg('text', { x: (box.x0 + box.x1) / 2, y: v.H - 8, 'text-anchor': 'middle', class: 'rf-axis-title',
    text: v.short ? 'Arithmetic intensity (FLOP/byte, log)' : 'Arithmetic intensity: FLOPs per byte read from HBM (log scale)' }, g);
  const ty = (box.y0 + box.y1) / 2;
  svg('text', { x: 12, y: ty, 'text-anchor': 'middle', class: 'rf-axis-title', transform: `rotate(-90 12 ${ty})`,
    text: v.short ? 'TFLOP/s per GPU (log)' : 'Math done: TFLOP/s per GPU (log scale)' }, g);
}

function drawRoofs(c, d) {
  const { s, x, y, box, v } = c, rf = d.roof;
  const ridge = rf.ridge_flops_per_byte, peak = rf.peak_flops_per_s, bw = rf.bandwidth_bytes_per_s;
  const x0 = X_DOMAIN[0], x1 = X_DOMAIN[1];
  const pts = [[x(x0), y(x0 * bw)], [x(ridge), y(peak)], [x(x1), y(peak)]];
  svg('path', { d: `M${pts.map((p) => p.join(',')).join('L')}L${box.x1},${box.y0}L${box.x0},${box.y0}Z`, class: 'rf-under' }, s);
  svg('line', { x1: x(ridge), x2: x(ridge), y1: y(peak), y2: box.y0, class: 'rf-ridge' }, s);
  svg('line', { x1: pts[0][0], y1: pts[0][1], x2: pts[1][0], y2: pts[1][1], class: 'rf-roof memory' }, s);
  svg('line', { x1: pts[1][0], y1: pts[1][1], x2: pts[2][0], y2: pts[2][1], class: 'rf-roof compute' }, s);
  svg('circle', { cx: x(ridge), cy: y(peak), r: 4, class: 'rf-ridge-dot' }, s);
  svg('text', { x: x(ridge) - 8, y: y(peak) - 8, 'text-anchor': 'end', class: 'rf-small rf-ridge-label',
    text: v.short ? `ridge ${num(ridge)}` : `ridge · ${num(ridge)} FLOP/byte` }, s);
  // Slope label, rotated to the slope as drawn.
  const a = (Math.atan2(pts[1][1] - pts[0][1], pts[1][0] - pts[0][0]) * 180) / Math.PI;
  const at = v.short ? 0.12 : 0.3;
  const lx = lerp(pts[0][0], pts[1][0], at), ly = lerp(pts[0][1], pts[1][1], at) - 8;
  svg('text', { x: lx, y: ly, transform: `rotate(${a.toFixed(2)} ${lx} ${ly})`, class: 'rf-label rf-roof-label memory',
    text: `${v.short ? 'memory' : 'memory roof'} · ${num(bw / 1e12)} TB/s` }, s);
  svg('text', { x: box.x1 - 6, y: y(peak) - 8, 'text-anchor': 'end', class: 'rf-label rf-roof-label compute',
    text: `${v.short ? 'compute' : 'compute roof'} · ${tflops(peak)} TFLOP/s` }, s);
}

/** Label beside a point: to the right when it fits inside the plot, else to the left. */
function sideLabel(c, el, px, py, dy) {
  const w = el.textContent.length * (c.v.short ? 6.2 : 7.4);
  const right = px + 12 + w < c.box.x1;
  el.setAttribute('x', (px + (right ? 12 : -12)).toFixed(1));
  el.setAttribute('y', (py + dy).toFixed(1));
  el.setAttribute('text-anchor', right ? 'start' : 'end');
}

function drawCurve(c, d) {
  const { s, x, y } = c, cv = d.decode_curve;
  c.batchLabels = {};
  const pts = cv.batch.map((b, i) => [x(cv.arithmetic_intensity[i]), y(cv.attained_flops_per_s[i])]);
  svg('polyline', { points: pts.map((p) => p.map((n) => n.toFixed(1)).join(',')).join(' '), class: 'rf-curve' }, s);
  cv.batch.forEach((b, i) => {
    svg('circle', { cx: pts[i][0], cy: pts[i][1], r: 3, class: cv.fits[i] ? 'rf-curve-dot' : 'rf-curve-dot nofit' }, s);
    if (LABELLED_BATCHES.includes(b)) {
      c.batchLabels[b] = svg('text', { x: pts[i][0] + 6, y: pts[i][1] + 15, class: 'rf-small rf-batch',
        text: `batch ${num(b)}` }, s);
    }
  });
  c.curve = pts;
}

function drawPrefill(c, d) {
  const { s, x, y, v } = c, p = d.prefill;
  const px = x(Math.min(p.arithmetic_intensity, X_DOMAIN[1])), py = y(p.attained_flops_per_s);
  svg('line', { x1: px, x2: px, y1: py, y2: y(p.roof_flops_per_s), class: 'rf-gap' }, s);
  svg('circle', { cx: px, cy: py, r: v.r, class: `rf-point prefill bound-${p.bound}` }, s);
  const label = svg('text', { class: 'rf-label prefill',
    text: v.short ? `prefill ${pct(p.share_of_peak, 0)}` : `prefill · ${pct(p.share_of_peak, 0)} of peak` }, s);
  sideLabel(c, label, px, py, 18);
}

/** Put the decode point (and its gap to the roof) at data coordinates (intensity, flops). */
function placeDecode(c, d, ai, fl) {
  const { x, y, v } = c, rf = d.roof;
  const px = x(ai), py = y(fl), roof = Math.min(rf.peak_flops_per_s, ai * rf.bandwidth_bytes_per_s);
  c.dot.setAttribute('cx', px.toFixed(1));
  c.dot.setAttribute('cy', py.toFixed(1));
  c.gap.setAttribute('x1', px.toFixed(1));
  c.gap.setAttribute('x2', px.toFixed(1));
  c.gap.setAttribute('y1', (py - v.r - 2).toFixed(1));
  c.gap.setAttribute('y2', y(roof).toFixed(1));
  sideLabel(c, c.label, px, py, 22);
}

function moveDecode(d) {
  const c = view.chart, dec = d.decode;
  const to = [dec.arithmetic_intensity, dec.attained_flops_per_s];
  const from = view.shown || to;
  c.dot.setAttribute('class', `rf-point decode bound-${d.binding_roof}`);
  for (const [b, el] of Object.entries(c.batchLabels)) el.setAttribute('visibility', Number(b) === d.batch ? 'hidden' : 'visible');
  c.dot.setAttribute('aria-valuenow', String(d.batch));
  c.dot.setAttribute('aria-valuetext', `batch ${d.batch}: ${share(dec.share_of_peak)} of peak math`);
  c.label.textContent = c.v.short ? `decode ${share(dec.share_of_peak)}`
    : `decode · batch ${num(d.batch)} · ${share(dec.share_of_peak)} of peak`;
  if (view.anim) view.anim.cancel();
  view.anim = tween(from === to ? 0 : TWEEN_MS, (t) => {
    const ai = Math.exp(lerp(Math.log(from[0]), Math.log(to[0]), t));
    const fl = Math.exp(lerp(Math.log(from[1]), Math.log(to[1]), t));
    view.shown = [ai, fl];
    placeDecode(c, d, ai, fl);
  });
}

// ---- drag the decode point along the curve (or use arrow keys) ------------------------------

function nearestBatch(c, px, py) {
  let best = 0, bestD = Infinity;
  c.curve.forEach(([cx, cy], i) => {
    const dd = (cx - px) ** 2 + (cy - py) ** 2;
    if (dd < bestD) { bestD = dd; best = i; }
  });
  return view.data.decode_curve.batch[best];
}

function toSvg(c, ev) {
  const r = c.s.getBoundingClientRect();
  return [((ev.clientX - r.left) / r.width) * c.v.W, ((ev.clientY - r.top) / r.height) * c.v.H];
}

function bindDrag(c) {
  let dragging = false;
  const pick = (ev) => {
    const b = nearestBatch(c, ...toSvg(c, ev));
    if (view.data && b !== view.data.batch) ctx.setParam('batch', b);
  };
  c.dot.addEventListener('pointerdown', (ev) => { dragging = true; c.dot.setPointerCapture(ev.pointerId); ev.preventDefault(); });
  c.dot.addEventListener('pointermove', (ev) => { if (dragging) pick(ev); });
  c.dot.addEventListener('pointerup', () => { dragging = false; });
  c.dot.addEventListener('keydown', (ev) => {
    const delta = { ArrowRight: 1, ArrowUp: 1, ArrowLeft: -1, ArrowDown: -1 }[ev.key];
    if (!delta || !view.data) return;
    ev.preventDefault();
    ev.stopPropagation();
    const b = Math.round(2 ** Math.min(10, Math.max(0, Math.round(Math.log2(view.data.batch)) + delta)));
    if (b !== view.data.batch) ctx.setParam('batch', b);
  });
}
