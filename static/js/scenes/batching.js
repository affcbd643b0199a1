// scenes/batching.js: chapter 7: seats as lanes over time, static above continuous, one clock; readouts; CPU panel.

import { svg, h, clear, setAttrs } from '../lib/svg.js';
import { swatches } from '../lib/legend.js';
import { num, fixed, plural } from '../lib/format.js';
import { loop } from '../lib/tween.js';
import { sceneStyles } from '../lib/style.js';
import { fitted } from '../lib/fit.js';
import { twoRunBeats, beatAt } from '../lib/beats.js';
import { TITLES, drawPanels, loadMeasured } from './batching-panels.js';

const PLAY_MS = 16000; // one pass of the clock from 0 to the last finish
const HOLD_MS = 2000; // rest on the finished picture before looping
const QUEUE_COLS = 4;
const QUEUE_ROWS = 6;
const NUM_COLOURS = 6;
let view = null;
let ctx = null;
let uid = 0;

export function mount(stage, context) {
  ctx = context;
  sceneStyles('batching');
  const css = document.querySelector('link[data-scene-css="batching"]');
  if (css && !css.sheet) css.addEventListener('load', () => { if (view && view.data) layout(); }, { once: true });
  clear(stage);
  const wrap = h('div', { class: 'bt-scene' }, stage);
  const bar = h('div', { class: 'bt-transport' }, wrap);
  view = {
    wrap, data: null, t: 0, clock: null, id: `bt${++uid}`,
    play: h('button', { class: 'btn bt-play', type: 'button', 'aria-pressed': 'false' }, bar),
    scrub: h('input', { type: 'range', min: 0, max: 1000, value: 0, step: 1, 'aria-label': 'Time on the shared clock' }, bar),
    clockText: h('output', { class: 'bt-clock' }, bar),
    chart: h('div', { class: 'bt-chart' }, wrap),
    legend: h('div', { class: 'legend bt-legend' }, wrap),
    readouts: h('div', { class: 'bt-readouts', 'aria-live': 'polite' }, wrap),
    // a slide keeps the lanes and the table; the page adds the engine, the math and the CPU measurement
    engine: h('p', { class: 'bt-engine', 'data-secondary': '' }, wrap),
    math: h('div', { class: 'bt-math', 'data-secondary': '' }, wrap),
    measured: h('section', { class: 'bt-measured', 'aria-label': 'Measured on this server', 'data-secondary': '' }, wrap),
  };
  view.play.addEventListener('click', () => (view.clock ? pause() : play()));
  view.scrub.addEventListener('input', () => { pause(); setTime((Number(view.scrub.value) / 1000) * view.data.horizon_s); });
  legend();
  view.ro = new ResizeObserver(() => {
    const w = Math.round(view.chart.clientWidth);
    if (view.data && w && w !== view.seenWidth && !(fixedWidth() && view.width === FIXED_W)) layout();
  });
  view.ro.observe(view.chart);
  if (!ctx.embed) loadMeasured(view.measured, ctx.fetchJSON, () => view);
}

export function unmount() {
  if (!view) return;
  pause();
  view.ro.disconnect();
  view = null;
}

export function update(data) {
  if (!view) return;
  view.data = data;
  view.policies = data.policies;
  layout();
  drawPanels(view, data);
  const still = ctx.reducedMotion || ctx.options.autoplay === '0';
  pause();
  setTime(still ? data.horizon_s : 0);
  if (!still) play();
}

/**
 * The chart is drawn px for px (viewBox width = its width on screen), except in a wide fitted frame (embed or
 * presenter on a screen): there a fixed viewBox scales with the frame like the text around it, so fit.js
 * shrinks picture and words together instead of squeezing the words.
 */
const FIXED_W = 900;
const fixedWidth = () => fitted() && innerWidth >= 640;

/** Scene contract: a dozen instants of the shared clock, most before the first policy finishes (the scrubber reaches any). */
function beats(data) {
  const ends = data.policies.map((p) => Math.max(0, ...p.seat_spans.map((s) => s.end_s)));
  return twoRunBeats(Math.min(...ends), data.horizon_s);
}

export function numSteps(data) {
  return beats(data).length;
}

export function showStep(i) {
  if (!view || !view.data) return;
  pause();
  setTime(beatAt(beats(view.data), i));
}

// ---- clock ---------------------------------------------------------------------------------
function play() {
  if (!view || view.clock) return;
  const t0 = view.t >= view.data.horizon_s ? 0 : view.t / view.data.horizon_s;
  view.play.textContent = '❚❚ Pause';
  view.play.setAttribute('aria-pressed', 'true');
  view.clock = loop((ms) => {
    const u = (t0 * PLAY_MS + ms) % (PLAY_MS + HOLD_MS);
    setTime(Math.min(1, u / PLAY_MS) * view.data.horizon_s);
  });
}

function pause() {
  if (!view) return;
  if (view.clock) view.clock.stop();
  view.clock = null;
  view.play.textContent = '▶ Play';
  view.play.setAttribute('aria-pressed', 'false');
}

function setTime(t) {
  view.t = t;
  const d = view.data;
  view.scrub.value = String(Math.round((1000 * t) / d.horizon_s));
  view.clockText.textContent = `${fixed(t, 1)} s of ${fixed(d.horizon_s, 1)} s`;
  const x = view.x(t);
  setAttrs(view.cursor, { x1: x, x2: x });
  setAttrs(view.cursorText, { x, text: `${fixed(t, 1)} s` });
  view.panels.forEach((p) => drawAt(p, t, x));
}

/** The frame in progress at time t (frames are sorted by time), or null once the policy is done. */
function frameAt(policy, t) {
  if (t > policy.makespan_s + policy.frames[0].time_s) return null;
  let lo = 0, hi = policy.frames.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (policy.frames[mid].time_s <= t) lo = mid; else hi = mid - 1;
  }
  return policy.frames[lo];
}

function drawAt(panel, t, x) {
  setAttrs(panel.clip, { width: Math.max(0, x - view.x0) });
  const f = frameAt(panel.policy, t);
  const i = f ? panel.policy.frames.indexOf(f) : -1;
  if (i === panel.shown) return;
  panel.shown = i;
  const p = panel.policy;
  const waiting = f ? f.num_waiting : 0;
  const ids = f ? f.waiting_request_ids : [];
  panel.squares.forEach((sq, k) => {
    sq.style.display = k < Math.min(waiting, ids.length) ? '' : 'none';
    if (k < ids.length) sq.setAttribute('fill', colour(ids[k]));
  });
  const more = waiting - Math.min(waiting, panel.squares.length);
  panel.more.textContent = more > 0 ? `+${num(more)}` : '';
  panel.qLabel.textContent = `${num(waiting)} waiting`;
  panel.status.textContent = f
    ? `${num(f.num_occupied_seats)} of ${num(view.data.params.seats)} seats busy · ` +
      `${num(f.num_finished)} of ${num(view.data.params.requests)} done · ${plural(f.num_tokens_produced_total, 'token')}`
    : `all ${num(view.data.params.requests)} done at ${fixed(p.makespan_s + p.frames[0].time_s, 1)} s`;
}

function colour(id) {
  return `var(--bqr-${id % NUM_COLOURS})`;
}

// ---- layout: built once per data and per width; the clock only moves attributes ------------
function layout() {
  const d = view.data;
  view.seenWidth = Math.round(view.chart.clientWidth);
  const width = fixedWidth() ? FIXED_W : Math.max(320, view.seenWidth || FIXED_W);
  view.width = width;
  const narrow = width < 560;
  const seats = d.params.seats;
  // a fitted frame (embed, presenter) is short: thinner lanes leave the table room at a readable size
  const budget = fitted() ? 110 : 220;
  const laneH = Math.max(3, Math.min(14, budget / seats));
  const lanesH = laneH * seats;
  const qW = narrow ? 62 : 104;
  view.x0 = qW + 14;
  const x1 = width - 8;
  const titleH = 40;
  const panelH = titleH + lanesH + 20;
  const height = 18 + panelH * 2 + 26;
  view.x = (t) => view.x0 + ((x1 - view.x0) * t) / d.horizon_s;
  clear(view.chart);
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, width: '100%', role: 'img', class: 'bt-svg',
    'aria-label': `Seats over time for static (top) and continuous (bottom) batching: ${seats} lanes each, ` +
      'one coloured bar per request from the step it is seated to its last token' }, view.chart);
  const defs = svg('defs', {}, root);
  const pat = svg('pattern', { id: `${view.id}-idle`, width: 5, height: 5, patternUnits: 'userSpaceOnUse',
    patternTransform: 'rotate(45)' }, defs);
  svg('rect', { width: 5, height: 5, class: 'bt-idle-bg' }, pat);
  svg('line', { x1: 0, y1: 0, x2: 0, y2: 5, class: 'bt-idle-line' }, pat);
  view.panels = d.policies.map((p, k) => panel(root, defs, p, 18 + k * panelH, { titleH, lanesH, laneH, qW, x1, narrow }));
  axis(root, 18 + panelH * 2 - 6, x1);
  view.cursor = svg('line', { y1: 14, y2: 18 + panelH * 2 - 14, class: 'bt-cursor' }, root);
  view.cursorText = svg('text', { y: 11, class: 'bt-cursor-text', 'text-anchor': 'middle' }, root);
  setTime(view.t || 0);
}

function panel(root, defs, policy, y0, g) {
  const pan = { policy, shown: null };
  const top = y0 + g.titleH;
  svg('text', { x: 0, y: y0 + 14, class: 'bt-title', text: TITLES[policy.name] }, root);
  pan.status = svg('text', { x: g.narrow ? 0 : g.x1, y: y0 + (g.narrow ? 30 : 14), class: 'bt-status',
    'text-anchor': g.narrow ? 'start' : 'end' }, root);
  const clipId = `${view.id}-clip-${policy.name}`;
  pan.clip = svg('rect', { x: view.x0, y: top - 1, width: 0, height: g.lanesH + 2 }, svg('clipPath', { id: clipId }, defs));
  const group = svg('g', { 'data-policy': policy.name }, root);
  const gap = g.laneH >= 6 ? 1 : 0.5;
  for (let seat = 0; seat < view.data.params.seats; seat++) {
    svg('rect', { x: view.x0, y: top + seat * g.laneH + gap / 2, width: g.x1 - view.x0, height: g.laneH - gap,
      class: 'bt-lane' }, group);
  }
  const clipped = svg('g', { 'clip-path': `url(#${clipId})` }, group);
  for (const [a, b] of busyIntervals(policy.seat_spans)) {
    for (let seat = 0; seat < view.data.params.seats; seat++) {
      svg('rect', { x: view.x(a), y: top + seat * g.laneH + gap / 2, width: Math.max(0.5, view.x(b) - view.x(a)),
        height: g.laneH - gap, fill: `url(#${view.id}-idle)` }, clipped);
    }
  }
  const frag = document.createDocumentFragment();
  for (const s of policy.seat_spans) {
    const x = view.x(s.start_s);
    svg('rect', { x: x + 0.4, y: top + s.seat * g.laneH + gap / 2, width: Math.max(0.8, view.x(s.end_s) - x - 0.8),
      height: g.laneH - gap, rx: Math.min(2, g.laneH / 4), fill: colour(s.request_id) }, frag);
  }
  clipped.appendChild(frag);
  queue(root, pan, top, g);
  return pan;
}

/** Times when the engine holds at least one request: empty seats then are idle, drawn hatched. */
function busyIntervals(spans) {
  const sorted = [...spans].sort((a, b) => a.start_s - b.start_s);
  const out = [];
  for (const s of sorted) {
    const last = out[out.length - 1];
    if (last && s.start_s <= last[1]) last[1] = Math.max(last[1], s.end_s);
    else out.push([s.start_s, s.end_s]);
  }
  return out;
}

function queue(root, pan, top, g) {
  // above the squares: the waiting count (top line) and the "+N more" line, 30 units together
  const size = Math.min(16, (g.qW - (QUEUE_COLS - 1) * 3) / QUEUE_COLS, (g.lanesH - 30 - (QUEUE_ROWS - 1) * 3) / QUEUE_ROWS);
  const bottom = top + g.lanesH;
  pan.squares = [];
  for (let k = 0; k < QUEUE_COLS * QUEUE_ROWS; k++) {
    const col = k % QUEUE_COLS, row = Math.floor(k / QUEUE_COLS);
    pan.squares.push(svg('rect', { x: g.qW - (col + 1) * (size + 3) + 3, y: bottom - (row + 1) * (size + 3) + 3,
      width: size, height: size, rx: 2, class: 'bt-waiting' }, root));
  }
  pan.qLabel = svg('text', { x: g.qW, y: top + 10, class: 'bt-qlabel', 'text-anchor': 'end' }, root);
  pan.more = svg('text', { x: g.qW, y: bottom - QUEUE_ROWS * (size + 3) - 2, class: 'bt-qmore', 'text-anchor': 'end' }, root);
}

function niceStep(span, n) {
  const raw = span / n;
  const p = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw) || raw;
}

function axis(root, y, x1) {
  const d = view.data;
  svg('line', { x1: view.x0, x2: x1, y1: y - 8, y2: y - 8, class: 'bt-axis' }, root);
  const step = niceStep(d.horizon_s, view.width < 560 ? 4 : 8);
  for (let t = 0; t <= d.horizon_s + 1e-9; t += step) {
    svg('line', { x1: view.x(t), x2: view.x(t), y1: y - 8, y2: y - 4, class: 'bt-axis' }, root);
    svg('text', { x: view.x(t), y: y + 8, class: 'bt-tick', 'text-anchor': 'middle', text: `${num(t)} s` }, root);
  }
}

function legend() {
  swatches(view.legend, [
    ['req', 'a request in its seat, from its first step to its last token (one colour per request)'],
    ['idle', 'seat empty while the engine runs'],
    ['wait', 'waiting request'],
  ]);
}
