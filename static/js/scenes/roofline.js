// scenes/roofline.js: chapter 5: a log-log roofline with prefill and decode on it; batch moves the decode point up the slope.

import { svg, h, clear, root } from '../lib/svg.js';
import { swatches } from '../lib/legend.js';
import { num, pct } from '../lib/format.js';
import { log } from '../lib/scale.js';
import { mathDetails } from '../lib/math.js';
import { tween, lerp } from '../lib/tween.js';
import { sceneLifecycle, readout, widthClass, redrawOnWidth } from '../lib/scene-kit.js';
import { obstacles, placeLabels } from './roofline-labels.js';
import { drawReuse } from './roofline-reuse.js';
import { bindDrag } from './roofline-drag.js';
import { cpuRoofline } from './measured-panels.js';

const VARIANTS = {
  wide: { name: 'wide', W: 900, H: 470, m: { l: 64, r: 18, t: 18, b: 52 }, r: 8, short: false },
  mid: { name: 'mid', W: 660, H: 410, m: { l: 58, r: 14, t: 16, b: 48 }, r: 7.5, short: false },
  narrow: { name: 'narrow', W: 360, H: 380, m: { l: 44, r: 10, t: 14, b: 44 }, r: 6.5, short: true },
};
// stage width (px) under which the phone chart is used, then the tour-stage chart (beside narration and controls)
const WIDTHS = { narrow: 500, mid: 840 };
const X_DOMAIN = [0.5, 1e6]; // FLOP/byte: decode at batch 1 (~1) to prefill of many long prompts
const LABELLED_BATCHES = [8, 64, 512]; // shown where they fit; the selected batch is named by the point's label
const TWEEN_MS = 450;

let view = null;

export const { mount, update, unmount } = sceneLifecycle({
  slug: 'roofline',
  cls: 'roofline-scene',
  bind: (v) => { view = v; },
  build: (wrap) => ({
    note: h('p', { class: 'roofline-note' }, wrap),
    hint: h('p', { class: 'kbd-hint roofline-hint', 'data-secondary': '', text: 'Drag a dot along its dotted path, or focus it and press\u00a0←\u00a0→: ' +
      'decode moves with the number of chats, prefill with the prompt length.' }, wrap),
    figure: h('div', { class: 'roofline-figure' }, wrap),
    legend: h('div', { class: 'legend roofline-legend' }, wrap),
    reuseHead: h('p', { class: 'roofline-reuse-head', 'data-narrow-secondary': '' }, wrap),
    reuse: h('div', { class: 'roofline-reuse', 'data-narrow-secondary': '' }, wrap),
    measured: h('section', { class: 'roofline-measured', 'aria-label': 'Measured on this server', 'data-secondary': '' }, wrap),
    math: h('div', { class: 'roofline-math', 'data-secondary': '' }, wrap),
    key: '', chart: null, anim: null, shown: null,
  }),
  ready(v) {
    // this CPU's own roofs, measured on the server: fetched beside the chart, never before it (a slide keeps the chart)
    if (!v.ctx.embed) v.cpu = cpuRoofline(v.measured, v.ctx, () => view);
    v.ro = redrawOnWidth(v.stage, WIDTHS, () => view?.data && view.variant, () => draw(view.data));
  },
  draws: [drawReadouts, drawNote, drawLegend, drawMath, draw, drawReuseBlock],
  stop(v) {
    if (v.anim) v.anim.cancel();
    if (v.cpu) v.cpu.stop();
  },
});

function drawReuseBlock(d) {
  clear(view.reuseHead);
  h('strong', { text: 'Why prefill keeps the math busy: ' }, view.reuseHead);
  view.reuseHead.append('each weight is fetched from memory once per step and used by every token in that step.');
  view.reuseDrawing = drawReuse(view.reuse, d, view.variant);
}

const variantFor = () => widthClass(view.stage, WIDTHS);

// ---- readouts, note, legend, math ------------------------------------------------------------

const tflops = (x) => num(x / 1e12, 3);
const share = (f) => pct(f, f < 0.1 ? 2 : 1);

function drawReadouts(d) {
  const dec = d.decode, rf = d.roof;
  clear(view.readouts);
  readout(view.readouts, 'Decode intensity', num(dec.arithmetic_intensity, 3), `FLOP/byte · ridge ${num(rf.ridge_flops_per_byte)}`);
  readout(view.readouts, 'Decode attains', tflops(dec.attained_flops_per_s), `of ${tflops(rf.peak_flops_per_s)} TFLOP/s`);
  readout(view.readouts, 'Math used', share(dec.share_of_peak), 'of peak', { cls: 'share' });
  readout(view.readouts, 'Roof that binds', d.binding_roof === 'memory' ? 'Memory' : 'Compute',
    d.binding_roof === 'memory' ? 'bandwidth' : 'peak math', { cls: `binds-${d.binding_roof}` });
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
    ['sw-curve prefill', `prefill of ${num(d.prefill_curve.prompt_tokens[0])} … ${num(d.prefill_curve.prompt_tokens.at(-1))}-token prompts`],
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
  // The frame, roofs and the two draggable dots stay while batch and prompt change (a drag keeps its pointer).
  const key = `${variant}|${d.gpu.id}|${d.roof.precision}|${d.model.id}|${d.tp}`;
  if (key !== view.key) {
    view.key = key;
    view.variant = variant;
    view.chart = drawChart(d, VARIANTS[variant]);
    view.shown = null;
  }
  drawCurves(view.chart, d);
  movePoints(d);
}

function drawChart(d, v) {
  const fig = clear(view.figure);
  const s = root(fig, v.W, v.H, `Roofline of the ${d.gpu.name} at ${d.roof.precision.toUpperCase()}: memory slope ` +
    `${num(d.roof.bandwidth_bytes_per_s / 1e12)} TB/s, compute roof ${tflops(d.roof.peak_flops_per_s)} TFLOP/s, ridge ` +
    `${num(d.roof.ridge_flops_per_byte)} FLOP/byte; prefill and decode points for ${d.model.name}.`);
  s.classList.add('roofline-svg', `roofline-${v.name}`);
  s.setAttribute('role', 'group'); // it holds the two points (sliders): a group, not one image
  const box = { x0: v.m.l, x1: v.W - v.m.r, y0: v.H - v.m.b, y1: v.m.t };
  const x = log(X_DOMAIN, [box.x0, box.x1]), y = log(yDomain(d), [box.y0, box.y1]);
  const c = { v, s, x, y, box };
  drawAxes(c, d);
  drawRoofs(c, d);
  c.curves = svg('g', { class: 'rf-curves' }, s);
  c.pgap = svg('line', { class: 'rf-gap' }, s);
  c.gap = svg('line', { class: 'rf-gap' }, s);
  c.labels = svg('g', { class: 'rf-labels' }, s);
  c.pdot = svg('circle', { r: v.r, class: 'rf-point prefill', tabindex: 0, role: 'slider',
    'aria-label': 'Prefill point: drag or use arrow keys to change the prompt length' }, s);
  c.dot = svg('circle', { r: v.r + 1.5, class: 'rf-point decode', tabindex: 0, role: 'slider',
    'aria-label': 'Decode point: drag or use arrow keys to change the batch', 'aria-valuemin': 1, 'aria-valuemax': 1024 }, s);
  c.plabel = svg('text', { class: 'rf-label prefill' }, c.labels);
  c.label = svg('text', { class: 'rf-label rf-decode-label' }, c.labels);
  const param = (name, values, pts) => ({ values, pts, now: () => view.data?.[name],
    set: (v) => { if (view.data && v !== view.data[name]) view.ctx.setParam(name, v); } });
  bindDrag(c, c.dot, param('batch', () => view.data.decode_curve.batch, () => c.curve));
  bindDrag(c, c.pdot, param('prompt_tokens', () => view.data.prefill_curve.prompt_tokens, () => c.pcurve));
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
  c.ridgeLabel = svg('text', { class: 'rf-small rf-ridge-label',
    text: v.short ? `ridge ${num(ridge)}` : `ridge · ${num(ridge)} FLOP/byte` }, s);
  c.ridge = [x(ridge), y(peak)];
  c.roofPts = pts;
  // Slope label, rotated to the slope as drawn.
  const a = (Math.atan2(pts[1][1] - pts[0][1], pts[1][0] - pts[0][0]) * 180) / Math.PI;
  const at = v.short ? 0.12 : 0.3;
  const lx = lerp(pts[0][0], pts[1][0], at), ly = lerp(pts[0][1], pts[1][1], at) - 8;
  const mem = svg('text', { x: lx, y: ly, transform: `rotate(${a.toFixed(2)} ${lx} ${ly})`, class: 'rf-label rf-roof-label memory',
    text: `${v.short ? 'memory' : 'memory roof'} · ${num(bw / 1e12)} TB/s` }, s);
  const comp = svg('text', { x: box.x1 - 6, y: y(peak) - 8, 'text-anchor': 'end', class: 'rf-label rf-roof-label compute',
    text: `${v.short ? 'compute' : 'compute roof'} · ${tflops(peak)} TFLOP/s` }, s);
  c.roofLabels = { mem, comp, lx, ly, angle: (a * Math.PI) / 180 };
}

const FS = { wide: { label: 13, small: 11 }, mid: { label: 13, small: 11 }, narrow: { label: 11, small: 10 } };

/** The dotted paths the two points move along, with their (optional) stop labels. */
function drawCurves(c, d) {
  const { x, y } = c, cv = d.decode_curve, pc = d.prefill_curve;
  clear(c.curves);
  const path = (pts, cls) => svg('polyline', { points: pts.map((p) => p.map((n) => n.toFixed(1)).join(',')).join(' '), class: cls }, c.curves);
  c.curve = cv.batch.map((b, i) => [x(cv.arithmetic_intensity[i]), y(cv.attained_flops_per_s[i])]);
  c.pcurve = pc.prompt_tokens.map((n, i) => [x(Math.min(pc.arithmetic_intensity[i], X_DOMAIN[1])), y(pc.attained_flops_per_s[i])]);
  path(c.curve, 'rf-curve');
  path(c.pcurve, 'rf-curve prefill');
  c.stops = [];
  cv.batch.forEach((b, i) => {
    svg('circle', { cx: c.curve[i][0], cy: c.curve[i][1], r: 3, class: cv.fits[i] ? 'rf-curve-dot' : 'rf-curve-dot nofit' }, c.curves);
    if (LABELLED_BATCHES.includes(b) && b !== d.batch) {
      c.stops.push({ el: svg('text', { class: 'rf-small rf-batch', text: `batch ${num(b)}` }, c.curves), at: c.curve[i] });
    }
  });
  pc.prompt_tokens.forEach((n, i) => {
    svg('circle', { cx: c.pcurve[i][0], cy: c.pcurve[i][1], r: 3, class: 'rf-curve-dot prefill' }, c.curves);
    const end = i === 0 || i === pc.prompt_tokens.length - 1;
    if (end && n !== d.prompt_tokens) {
      c.stops.push({ el: svg('text', { class: 'rf-small rf-prompt', text: `${num(n)} tokens` }, c.curves), at: c.pcurve[i] });
    }
  });
}

/** Put both points (and their gaps to the roof) at data coordinates, then place every label around them. */
function placePoints(c, d, dec, pre) {
  const { x, y, v } = c, rf = d.roof;
  const roofAt = (ai) => Math.min(rf.peak_flops_per_s, ai * rf.bandwidth_bytes_per_s);
  const put = (dot, gap, [ai, fl], r) => {
    const px = x(Math.min(ai, X_DOMAIN[1])), py = y(fl);
    dot.setAttribute('cx', px.toFixed(1));
    dot.setAttribute('cy', py.toFixed(1));
    gap.setAttribute('x1', px.toFixed(1));
    gap.setAttribute('x2', px.toFixed(1));
    gap.setAttribute('y1', (py - r - 2).toFixed(1));
    gap.setAttribute('y2', y(roofAt(ai)).toFixed(1));
    return [px, py];
  };
  const dp = put(c.dot, c.gap, dec, v.r + 1.5), pp = put(c.pdot, c.pgap, pre, v.r);
  placeAll(c, dp, pp);
}

function placeAll(c, dp, pp) {
  const fs = FS[c.v.name], obs = obstacles();
  const { box } = c;
  obs.line([c.roofPts[0], c.roofPts[1]], 3, 4);
  obs.line([c.roofPts[1], c.roofPts[2]], 3, 4);
  obs.line([c.ridge, [c.ridge[0], box.y0]], 1, 2);
  obs.line(c.curve, 1, 2);
  obs.line(c.pcurve, 1, 2);
  for (const p of [...c.curve, ...c.pcurve]) obs.point(p[0], p[1], 3.5, 2);
  obs.point(dp[0], dp[1], c.v.r + 3, 8);
  obs.point(pp[0], pp[1], c.v.r + 2, 8);
  obs.point(c.ridge[0], c.ridge[1], 5, 8);
  const rl = c.roofLabels, mw = rl.mem.getComputedTextLength ? rl.mem.getComputedTextLength() : 0;
  obs.line([[rl.lx, rl.ly - fs.label * 0.35], [rl.lx + Math.cos(rl.angle) * mw, rl.ly - fs.label * 0.35 + Math.sin(rl.angle) * mw]], 60, fs.label + 2);
  const cb = rl.comp.getBBox ? rl.comp.getBBox() : null;
  if (cb && cb.width) obs.box({ x0: cb.x - 2, x1: cb.x + cb.width + 2, y0: cb.y - 2, y1: cb.y + cb.height + 2 }, 60);
  const bounds = { x0: box.x0 + 2, x1: box.x1 - 2, y0: box.y1 + 2, y1: box.y0 - 2 };
  const point = (el, [px, py], gap, spots, extra = {}) => ({ el, x: px, y: py, fs: fs.label, gap, spots, ...extra });
  placeLabels([
    point(c.label, dp, c.v.r + 8, ['r', 'br', 'b', 'bl', 'l', 'tr', 'tl', 't']),
    point(c.plabel, pp, c.v.r + 7, ['br', 'r', 'b', 'bl', 'l', 'tr', 't', 'tl']),
    { el: c.ridgeLabel, x: c.ridge[0], y: c.ridge[1], fs: fs.small, gap: 9, spots: ['tl', 'l', 'bl', 'br'] },
    ...c.stops.map((st) => ({ el: st.el, x: st.at[0], y: st.at[1], fs: fs.small, gap: 7, spots: ['br', 'bl', 'tl', 'r', 'l'], optional: true, tolerance: 80 })),
  ], obs, bounds);
}

function movePoints(d) {
  const c = view.chart, dec = d.decode, pre = d.prefill;
  const to = { dec: [dec.arithmetic_intensity, dec.attained_flops_per_s], pre: [pre.arithmetic_intensity, pre.attained_flops_per_s] };
  const from = view.shown || to;
  c.dot.setAttribute('class', `rf-point decode bound-${d.binding_roof}`);
  c.pdot.setAttribute('class', `rf-point prefill bound-${pre.bound}`);
  c.dot.setAttribute('aria-valuenow', String(d.batch));
  c.dot.setAttribute('aria-valuetext', `batch ${d.batch}: ${share(dec.share_of_peak)} of peak math`);
  const prompts = d.prefill_curve.prompt_tokens;
  c.pdot.setAttribute('aria-valuemin', String(prompts[0]));
  c.pdot.setAttribute('aria-valuemax', String(prompts.at(-1)));
  c.pdot.setAttribute('aria-valuenow', String(d.prompt_tokens));
  c.pdot.setAttribute('aria-valuetext', `${d.prompt_tokens}-token prompt${d.batch > 1 ? `s × ${d.batch}` : ''}: ${pct(pre.share_of_peak, 0)} of peak math`);
  c.label.textContent = c.v.short ? `decode ${share(dec.share_of_peak)}`
    : `decode · batch ${num(d.batch)} · ${share(dec.share_of_peak)} of peak`;
  c.plabel.textContent = c.v.short ? `prefill ${pct(pre.share_of_peak, 0)}`
    : `prefill · ${num(d.prompt_tokens)} tokens${d.batch > 1 ? ` × ${num(d.batch)}` : ''} · ${pct(pre.share_of_peak, 0)} of peak`;
  if (view.anim) view.anim.cancel();
  const same = from.dec === to.dec && from.pre === to.pre;
  const mix = (a, b, t) => [Math.exp(lerp(Math.log(a[0]), Math.log(b[0]), t)), Math.exp(lerp(Math.log(a[1]), Math.log(b[1]), t))];
  view.anim = tween(same ? 0 : TWEEN_MS, (t) => {
    view.shown = t >= 1 ? to : { dec: mix(from.dec, to.dec, t), pre: mix(from.pre, to.pre, t) };
    placePoints(c, d, view.shown.dec, view.shown.pre);
  });
}
