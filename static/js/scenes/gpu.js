// scenes/gpu.js: chapter 4: the GPU package (HBM stacks, L2, SMs with tensor cores) and one decode step streaming through it.

import { h, clear } from '../lib/svg.js';
import { swatches } from '../lib/legend.js';
import { num, bytes, duration, fixed, pct } from '../lib/format.js';
import { mathDetails } from '../lib/math.js';
import { loop } from '../lib/tween.js';
import { sceneLifecycle, readout, widthClass, still } from '../lib/scene-kit.js';
import { drawPackage, route, along } from './gpu-package.js';

// Three drawings, px-for-px at about the width each is drawn for (the viewBox matches it): a full-width stage
// (slides, presenter), the tour's stage beside its narration and controls, and a phone.
const VARIANTS = {
  wide: { name: 'wide', W: 960, H: 540, pad: 12, gap: 12, stackW: 92, stackH: 62, band: 30, label: true, tile: 15, travelMs: 1900 },
  mid: { name: 'mid', W: 660, H: 430, pad: 10, gap: 10, stackW: 76, stackH: 54, band: 28, label: true, tile: 15, travelMs: 1800 },
  narrow: { name: 'narrow', W: 360, H: 440, pad: 6, gap: 7, stackW: 42, stackH: 40, band: 20, label: false, tile: 10, travelMs: 1700 },
};
const WIDTHS = { narrow: 500, mid: 840 }; // stage width (px) under which the phone, then the tour-stage drawing is used
const POOL = 96; // travelling tiles drawn at most at once (fixed set of SVG elements, moved every frame)
const HOT_MS = 260; // an SM's on-chip memory glows this long after a tile lands

let view = null;

export const { mount, update, unmount } = sceneLifecycle({
  slug: 'gpu',
  cls: 'gpu-scene',
  bind: (v) => { view = v; },
  build: (wrap) => ({
    note: h('p', { class: 'gpu-note' }, wrap),
    figure: h('div', { class: 'gpu-figure' }, wrap),
    budget: h('div', { class: 'gpu-budget' }, wrap),
    clock: h('div', { class: 'gpu-clock' }, wrap),
    legend: h('div', { class: 'legend gpu-legend' }, wrap),
    math: h('div', { class: 'gpu-math', 'data-secondary': '' }, wrap),
    key: '', variant: null, drawing: null, timer: null, paused: false,
  }),
  ready() {
    buildClock();
    view.ro = new ResizeObserver(() => {
      if (view && view.data && variantFor() !== view.variant) draw(view.data);
      if (view) fitBudgetLabels();
    });
    view.ro.observe(view.stage);
  },
  draws: [drawReadouts, drawNote, drawBudget, drawLegend, drawMath, draw],
  stop: stopMotion,
});

const variantFor = () => widthClass(view.stage, WIDTHS);

function draw(d) {
  const variant = variantFor();
  const key = `${d.gpu.id}|${variant}`;
  if (key !== view.key) {
    view.key = key;
    view.variant = variant;
    view.drawing = drawPackage(view.figure, d, VARIANTS[variant], POOL);
  }
  startMotion(d);
}

// ---- readouts, note, legend, math ------------------------------------------------------------

function splitUnit(text) {
  const i = text.lastIndexOf(' ');
  return [text.slice(0, i), text.slice(i + 1)];
}

function drawReadouts(d) {
  const s = d.stream;
  clear(view.readouts);
  const [value, unit] = splitUnit(bytes(s.bytes_per_step));
  readout(view.readouts, 'Read per step', value, `${unit} per GPU`,
    { title: `weights ${bytes(s.weight_bytes_per_step)} + KV cache ${bytes(s.kv_bytes_per_step)}` });
  readout(view.readouts, 'One decode step', ...splitUnit(duration(s.step_ms)), `${s.bound}-bound`);
  readout(view.readouts, 'Average rate', fixed(s.effective_tb_s, 2), `TB/s of ${num(s.peak_tb_s)}`); // short: a phone's tile never splits it
  readout(view.readouts, 'Tokens per second', num(s.tokens_per_s), d.batch === 1 ? 'one chat' : `${num(d.batch)} chats`);
}

function drawNote(d) {
  const m = d.memory;
  clear(view.note);
  const per = d.tp === 1 ? 'One GPU holds the whole model.'
    : `Figures are per GPU: the model is split over ${d.tp} GPUs (tensor parallelism), so each streams 1/${d.tp} of every layer.`;
  h('span', { text: `${d.model.name} on an ${d.gpu.name}. ${per}` }, view.note);
  if (!m.fits) {
    const who = d.tp === 1 ? 'the GPU' : 'each GPU';
    h('strong', { class: 'gpu-warn', text: ` It does not fit: ${who} would need ${num(m.shortfall_gb)} GB more ` +
      `than its ${num(m.capacity_gb)} GB, so no real server runs it this way.` }, view.note);
  }
}

/**
 * Why the average rate is below the peak, on the stage: one step's time, added up. Only the first part moves
 * bytes at the datasheet rate; the rest is HBM below peak, math the reads wait for, all-reduces and launches.
 */
function drawBudget(d) {
  const s = d.stream, b = clear(view.budget);
  const others = d.tp - 1;
  const parts = [
    ['reading', s.ideal_ms, `reading ${bytes(s.bytes_per_step)} at the full ${fixed(s.peak_tb_s, 2)} TB/s`],
    ['below-peak', s.memory_ms - s.ideal_ms, `HBM reaches ~${pct(s.hbm_efficiency, 0)} of its peak in real kernels` +
      (d.gpu.engine_profile ? ` (${d.gpu.engine_profile})` : '')],
    ['math', s.kernel_ms - s.memory_ms, 'math the reads wait for'],
    ['comm', s.comm_ms, `all-reduces with the ${others} other GPU${others === 1 ? '' : 's'}: HBM idle`],
    ['overhead', s.overhead_ms, `kernel launches and per-step work (${s.overhead_note}): HBM idle`],
  ].filter(([, ms]) => ms > s.step_ms * 0.005);
  const head = h('p', { class: 'gpu-budget-head' }, b);
  h('strong', { text: `Why ${fixed(s.effective_tb_s, 2)} of ${fixed(s.peak_tb_s, 2)} TB/s? ` }, head);
  head.append(`${bytes(s.bytes_per_step)} ÷ ${duration(s.step_ms)} = ${fixed(s.effective_tb_s, 2)} TB/s on average ` +
    `(${pct(s.bandwidth_share, 0)} of peak): HBM streams at full speed for only ${duration(s.ideal_ms)} of the step.`);
  const bar = h('div', { class: 'gpu-budget-bar', role: 'img', 'aria-label': `One ${duration(s.step_ms)} step: ` +
    parts.map(([, ms, text]) => `${duration(ms)} ${text}`).join('; ') }, b);
  const key = h('div', { class: 'gpu-budget-key' }, b);
  for (const [cls, ms, text] of parts) {
    const seg = h('span', { class: `seg ${cls}`, title: `${duration(ms)}: ${text}` }, bar);
    seg.style.width = `${(ms / s.step_ms) * 100}%`;
    h('b', { text: duration(ms) }, seg);
    const k = h('span', { class: 'item' }, key);
    h('i', { class: `seg ${cls}` }, k);
    k.append(`${duration(ms)} ${text}`);
  }
  fitBudgetLabels();
}

/** Show a segment's duration inside it only where it fits. */
function fitBudgetLabels() {
  for (const b of view.budget.querySelectorAll('.seg > b')) {
    b.hidden = false;
    b.hidden = b.offsetWidth + 8 > b.parentElement.clientWidth;
  }
}

function drawLegend(d) {
  const L = d.layout;
  const core = L.matrix_unit || 'tensor core';
  swatches(view.legend, [
    ['sw-weights', `weights (each tile ≈ ${bytes(d.stream.tile_bytes)})`],
    d.stream.kv_tiles > 0 && ['sw-kv', 'KV cache'],
    ['sw-memory', L.hbm_stacks ? `${L.memory_type} stack: memory` : `${L.memory_type}: memory`],
    ['sw-compute', `${core} (${L.tensor_cores_per_sm} per ${L.sm_label})`],
    ['sw-smem', `${L.sm_label} on-chip memory (glows as weights land)`],
    d.package.hbm_inactive_sites && ['sw-idle', 'unused HBM site'],
  ]);
}

function drawMath(d) {
  clear(view.math);
  const grid = h('div', { class: 'gpu-math-grid' }, view.math);
  grid.appendChild(mathDetails(d.math.bytes_per_step, 'Bytes per step: how?'));
  grid.appendChild(mathDetails(d.math.step_ms, 'Step time: how?'));
  grid.appendChild(mathDetails(d.math.effective_tb_s, 'Average rate: how?'));
  const src = h('details', { class: 'math' }, grid);
  h('summary', { text: 'Where the drawing comes from' }, src);
  const ul = h('ul', {}, src);
  for (const [field, text] of Object.entries(d.layout.sources)) h('li', { text: `${field}: ${text}` }, ul);
  h('li', { text: `package: ${d.package.source}` }, ul);
  h('li', { text: `grouping: ${d.layout.grouping_note}` }, ul);
}

// ---- motion ---------------------------------------------------------------------------------

function isKV(n, s) {
  const i = n % s.tiles_per_step;
  return Math.floor(((i + 1) * s.kv_tiles) / s.tiles_per_step) > Math.floor((i * s.kv_tiles) / s.tiles_per_step);
}

/** Place every in-flight tile for time ms (screen time since the first step began). */
function frame(ms) {
  const dr = view.drawing, s = view.data.stream, v = VARIANTS[view.variant];
  const stepMs = s.screen_step_s * 1000, per = stepMs / s.tiles_per_step;
  const last = Math.floor(ms / per), first = Math.max(0, Math.ceil((ms - v.travelMs) / per));
  let used = 0;
  const landed = new Set();
  for (let n = first; n <= last && used < dr.pool.length; n++) {
    const t = (ms - n * per) / v.travelMs;
    const r = route(dr.g, n);
    const [x, y] = along(r.pts, Math.min(1, t));
    const slot = dr.pool[used++];
    slot.el.setAttribute('transform', `translate(${x.toFixed(1)} ${y.toFixed(1)})`);
    const kv = isKV(n, s);
    if (kv !== slot.kv) { slot.kv = kv; slot.el.setAttribute('class', kv ? 'tile kv' : 'tile'); }
    if (!slot.shown) { slot.shown = true; slot.el.setAttribute('visibility', 'visible'); }
    if (t > 1 - HOT_MS / v.travelMs) landed.add(r.sm);
  }
  for (let i = used; i < dr.pool.length && dr.pool[i].shown; i++) {
    dr.pool[i].shown = false;
    dr.pool[i].el.setAttribute('visibility', 'hidden');
  }
  glow(dr, landed);
  tickClock(ms, stepMs, s);
}

function glow(dr, landed) {
  for (const i of dr.hot.keys()) if (!landed.has(i)) { dr.smMem[i].classList.remove('hot'); dr.hot.delete(i); }
  for (const i of landed) if (!dr.hot.has(i)) { dr.smMem[i].classList.add('hot'); dr.hot.set(i, true); }
}

function startMotion(d) {
  stopMotion();
  const s = d.stream;
  view.clock.speed.textContent = `Slowed ${num(s.slow_motion)}×: one ${duration(s.step_ms)} step lasts ` +
    `${fixed(s.screen_step_s, 1)} s on screen.`;
  view.figure.classList.toggle('still', still(view.ctx) || view.paused);
  if (still(view.ctx) || view.paused) {
    frame(s.screen_step_s * 1000 * (view.paused ? view.pausedAt : 0.5));
    if (!view.paused) showWholeStep(s);
    return;
  }
  const offset = view.pausedAt ? view.pausedAt * s.screen_step_s * 1000 : 0;
  view.pausedAt = 0;
  view.timer = loop((ms) => { view.elapsed = ms + offset; frame(view.elapsed); });
}

function stopMotion() {
  if (view && view.timer) { view.timer.stop(); view.timer = null; }
}

// ---- the step clock under the drawing -------------------------------------------------------

function buildClock() {
  const c = view.clock;
  const row = h('div', { class: 'gpu-clock-row' }, c);
  c.pause = h('button', { class: 'btn gpu-pause', type: 'button', 'aria-pressed': 'false', text: 'Pause' }, row);
  c.pause.addEventListener('click', togglePause);
  const bar = h('div', { class: 'gpu-bar', role: 'img', 'aria-label': 'progress of one decode step' }, row);
  c.fill = h('span', {}, bar);
  c.status = h('span', { class: 'gpu-clock-text' }, row);
  c.speed = h('p', { class: 'gpu-speed' }, c);
  c.lastText = -1;
  if (still(view.ctx)) c.pause.hidden = true;
}

function togglePause() {
  if (!view || !view.data) return;
  const s = view.data.stream, stepMs = s.screen_step_s * 1000;
  view.paused = !view.paused;
  view.clock.pause.textContent = view.paused ? 'Play' : 'Pause';
  view.clock.pause.setAttribute('aria-pressed', String(view.paused));
  if (view.paused) view.pausedAt = ((view.elapsed || 0) % stepMs) / stepMs;
  startMotion(view.data);
}

function tickClock(ms, stepMs, s) {
  const c = view.clock, f = (ms % stepMs) / stepMs;
  c.fill.style.transform = `scaleX(${f.toFixed(4)})`;
  const tenth = Math.floor(ms / 100);
  if (tenth === c.lastText && !view.paused) return;
  c.lastText = tenth;
  const step = Math.floor(ms / stepMs) + 1;
  c.status.textContent = `Step ${step}: ${fixed(f * s.step_ms, 1)} of ${fixed(s.step_ms, 1)} ms · ` +
    `${bytes(f * s.bytes_per_step)} of ${bytes(s.bytes_per_step)} read`;
}

function showWholeStep(s) {
  view.clock.fill.style.transform = 'scaleX(1)';
  view.clock.status.textContent = `One step: ${bytes(s.bytes_per_step)} read in ${duration(s.step_ms)} ` +
    `(${pct(s.bandwidth_share, 0)} of peak bandwidth on average)`;
}
