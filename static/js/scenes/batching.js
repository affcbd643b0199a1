// scenes/batching.js: chapter 7: seats as lanes over time, static above continuous, one clock; readouts; CPU panel.

import { svg, h, clear, setAttrs } from '../lib/svg.js';
import { swatches } from '../lib/legend.js';
import { num, fixed, plural } from '../lib/format.js';
import { sceneRoot, transport, still } from '../lib/scene-kit.js';
import { fitted } from '../lib/fit.js';
import { twoRunBeats, beatAt } from '../lib/beats.js';
import { TITLES, drawPanels, loadMeasured } from './batching-panels.js';
import { livePanel } from './engine-live.js';

const PLAY_MS = 16000; // one pass of the clock from 0 to the last finish
const HOLD_MS = 2000; // rest on the finished picture before looping
const QUEUE_COLS = 4;
const QUEUE_ROWS = 6;
const QUEUE_GAP = 3;
const QUEUE_HEAD = 30; // above the squares: the waiting count and the "+N more" line
const MIN_SQUARE = 6;
const NUM_COLOURS = 6;
let view = null;
let ctx = null;
let uid = 0;

export function mount(stage, context) {
  ctx = context;
  const wrap = sceneRoot(stage, 'batching', 'bt-scene', () => { if (view && view.data) layout(); });
  const playback = transport(h('div', { class: 'bt-transport' }, wrap), {
    button: { class: 'btn bt-play' },
    scrub: { max: 1000, 'aria-label': 'Time on the shared clock' },
    clock: { class: 'bt-clock' },
    onPlay: run,
    onSeek: (v) => setTime((v / 1000) * view.data.horizon_s),
  });
  view = {
    wrap, data: null, t: 0, id: `bt${++uid}`, transport: playback, scrub: playback.scrub, clockText: playback.clock,
    chart: h('div', { class: 'bt-chart' }, wrap),
    legend: h('div', { class: 'legend bt-legend' }, wrap),
    follow: h('p', { class: 'bt-follow', 'aria-live': 'polite' }, wrap),
    readouts: h('div', { class: 'bt-readouts', 'aria-live': 'polite' }, wrap),
    // a slide keeps the lanes and the table; the page adds the engine, the math and the CPU measurement
    live: null, // "This server, now": the real engine's seats and queue (engine-live.js), below
    engine: h('p', { class: 'bt-engine', 'data-secondary': '' }, wrap),
    math: h('div', { class: 'bt-math', 'data-secondary': '' }, wrap),
    measured: h('section', { class: 'bt-measured', 'aria-label': 'Measured on this server', 'data-secondary': '' }, wrap),
  };
  legend();
  view.ro = new ResizeObserver(() => {
    const w = Math.round(view.chart.clientWidth);
    if (view.data && w && w !== view.seenWidth && !(fixedWidth() && view.width === FIXED_W)) layout();
  });
  view.ro.observe(view.chart);
  if (!ctx.embed) loadMeasured(view.measured, ctx.fetchJSON, () => view);
  // a slide keeps the simulation: the live engine is for the page (and opens no feed in an embed)
  if (!ctx.embed) {
    view.live = livePanel(wrap, { kind: 'lanes', palette: '--bqr-', colours: NUM_COLOURS, fetchJSON: ctx.fetchJSON });
    wrap.insertBefore(view.live.el, view.engine);
  }
}

export function unmount() {
  if (!view) return;
  view.transport.pause();
  view.ro.disconnect();
  if (view.live) view.live.stop();
  view = null;
}

export function update(data) {
  if (!view) return;
  view.data = data;
  view.policies = data.policies;
  for (const p of data.policies) {
    p.spans = rows(p.seat_spans);
    p.doneAt = Math.max(...p.seat_spans.end_s); // its last finish, on the shared clock
  }
  view.followed = followedRequest(data);
  layout();
  drawPanels(view, data);
  view.transport.restart(still(ctx), () => setTime(data.horizon_s), () => setTime(0));
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
  const ends = data.policies.map((p) => p.doneAt ?? Math.max(...p.seat_spans.end_s));
  return twoRunBeats(Math.min(...ends), data.horizon_s);
}

export function numSteps(data) {
  return beats(data).length;
}

export function showStep(i) {
  if (!view || !view.data) return;
  view.transport.pause();
  setTime(beatAt(beats(view.data), i));
}

// ---- clock ---------------------------------------------------------------------------------
/** Play from where the clock stands (from 0 once it is at the end): one pass in PLAY_MS, a rest, and again. */
function run() {
  if (!view || !view.data) return null;
  const t0 = view.t >= view.data.horizon_s ? 0 : view.t / view.data.horizon_s;
  return (ms) => {
    const u = (t0 * PLAY_MS + ms) % (PLAY_MS + HOLD_MS);
    setTime(Math.min(1, u / PLAY_MS) * view.data.horizon_s);
  };
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

/** Columns ({name: [values]}) as rows ([{name: value}]). */
function rows(columns) {
  const names = Object.keys(columns);
  return columns[names[0]].map((_, i) => Object.fromEntries(names.map((n) => [n, columns[n][i]])));
}

/** Index of the frame in progress at time t (frames are sorted by time), or -1 once the policy is done. */
function frameAt(policy, t) {
  const times = policy.frames.time_s;
  if (t > policy.doneAt) return -1;
  let lo = 0, hi = times.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (times[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

/** The first `n` waiting request ids at frame i: preempted ones at the front, then arrivals in order. */
function waitingIds(f, i, n) {
  const ids = f.waiting_preempted_ids[i].slice(0, n);
  for (let id = f.waiting_first_new_id[i]; ids.length < Math.min(n, f.num_waiting[i]); id++) ids.push(id);
  return ids;
}

function drawAt(panel, t, x) {
  setAttrs(panel.clip, { width: Math.max(0, x - view.x0) });
  const i = frameAt(panel.policy, t);
  if (i === panel.shown) return;
  panel.shown = i;
  const p = panel.policy, f = p.frames;
  const waiting = i >= 0 ? f.num_waiting[i] : 0;
  const ids = i >= 0 ? waitingIds(f, i, panel.squares.length) : [];
  panel.squares.forEach((sq, k) => {
    sq.style.display = k < ids.length ? '' : 'none';
    if (k < ids.length) {
      sq.setAttribute('fill', colour(ids[k]));
      sq.classList.toggle('bt-followed', ids[k] === view.followed);
    }
  });
  const more = waiting - ids.length;
  panel.more.textContent = more > 0 ? `+${num(more)}` : '';
  panel.qLabel.textContent = `${num(waiting)} waiting`;
  panel.status.textContent = i >= 0
    ? `${num(f.num_occupied_seats[i])} of ${num(view.data.params.seats)} seats busy · ` +
      `${num(f.num_finished[i])} of ${num(view.data.params.requests)} done · ${plural(f.num_tokens_produced_total[i], 'token')}`
    : `all ${num(view.data.params.requests)} done at ${fixed(p.doneAt, 1)} s`;
  panel.el.dataset.waiting = String(waiting);
}

/**
 * The chat to follow through both policies: the first one that has to queue under continuous batching (so its
 * slip into a freed seat is on screen), else the first whose stay is longest under static batching.
 */
function followedRequest(d) {
  const cont = d.policies.find((p) => p.name === 'continuous');
  const arrivals = d.requests.arrival_s;
  if (cont) {
    const firstStart = new Map();
    for (const s of cont.spans) if (!firstStart.has(s.request_id)) firstStart.set(s.request_id, s.start_s);
    const step = d.engine.decode_step_ms_all_seats / 1e3;
    for (const wait of [1, 3 * step]) { // a wait you can see on the lanes, else any real wait
      const queued = [...firstStart].filter(([id, start]) => start - arrivals[id] > wait).map(([id]) => id);
      if (queued.length) return Math.min(...queued);
    }
  }
  return 0;
}

function followText(d) {
  const id = view.followed;
  const parts = d.policies.map((p) => {
    const mine = p.spans.filter((s) => s.request_id === id);
    const wait = mine.length ? mine[0].start_s - d.requests.arrival_s[id] : 0;
    return `under ${TITLES[p.name].toLowerCase()} it waits ${fixed(wait, 1)} s, its last token at ${fixed(p.requests.finish_s[id], 1)} s`;
  });
  const each = parts.join('; ');
  return `Following chat #${id} (outlined; arrives at ${fixed(d.requests.arrival_s[id], 1)} s, ` +
    `${num(d.requests.num_prompt_tokens[id])}-token prompt, ${num(d.requests.num_output_tokens[id])}-token answer). ` +
    `${each[0].toUpperCase()}${each.slice(1)}.`;
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
  // few seats: lanes grow (up to 32) and the panel keeps the queue's height, so its squares stay >= MIN_SQUARE
  const queueH = QUEUE_HEAD + QUEUE_ROWS * (MIN_SQUARE + QUEUE_GAP);
  const laneH = Math.max(3, Math.min(14, budget / seats), Math.min(32, queueH / seats));
  const qW = narrow ? 62 : 104;
  const lanesH = Math.max(laneH * seats, queueH);
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
  view.follow.textContent = followText(d);
  setTime(view.t || 0);
}

function panel(root, defs, policy, y0, g) {
  const pan = { policy, shown: null, el: svg('g', { class: 'bt-panel', 'data-policy': policy.name }, root) };
  const top = y0 + g.titleH;
  svg('text', { x: 0, y: y0 + 14, class: 'bt-title', text: TITLES[policy.name] }, root);
  pan.status = svg('text', { x: g.narrow ? 0 : g.x1, y: y0 + (g.narrow ? 30 : 14), class: 'bt-status',
    'text-anchor': g.narrow ? 'start' : 'end' }, root);
  const clipId = `${view.id}-clip-${policy.name}`;
  pan.clip = svg('rect', { x: view.x0, y: top - 1, width: 0, height: g.lanesH + 2 }, svg('clipPath', { id: clipId }, defs));
  const group = svg('g', { class: 'bt-lanes' }, pan.el);
  const gap = g.laneH >= 6 ? 1 : 0.5;
  for (let seat = 0; seat < view.data.params.seats; seat++) {
    svg('rect', { x: view.x0, y: top + seat * g.laneH + gap / 2, width: g.x1 - view.x0, height: g.laneH - gap,
      class: 'bt-lane' }, group);
  }
  const clipped = svg('g', { 'clip-path': `url(#${clipId})` }, group);
  for (const [a, b] of busyIntervals(policy.spans)) {
    for (let seat = 0; seat < view.data.params.seats; seat++) {
      svg('rect', { x: view.x(a), y: top + seat * g.laneH + gap / 2, width: Math.max(0.5, view.x(b) - view.x(a)),
        height: g.laneH - gap, fill: `url(#${view.id}-idle)` }, clipped);
    }
  }
  const frag = document.createDocumentFragment();
  for (const s of policy.spans) {
    const x = view.x(s.start_s);
    const followed = s.request_id === view.followed;
    svg('rect', { x: x + 0.4, y: top + s.seat * g.laneH + gap / 2, width: Math.max(0.8, view.x(s.end_s) - x - 0.8),
      height: g.laneH - gap, rx: Math.min(2, g.laneH / 4), fill: colour(s.request_id),
      class: followed ? 'bt-span bt-followed' : 'bt-span', 'data-request': s.request_id }, frag);
  }
  clipped.appendChild(frag);
  const arrival = view.x(view.data.requests.arrival_s[view.followed]);
  svg('line', { x1: arrival, x2: arrival, y1: top - 4, y2: top + g.lanesH, class: 'bt-arrival' }, pan.el);
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
  const gap = QUEUE_GAP;
  const size = Math.max(MIN_SQUARE, Math.min(16, (g.qW - (QUEUE_COLS - 1) * gap) / QUEUE_COLS,
    (g.lanesH - QUEUE_HEAD - (QUEUE_ROWS - 1) * gap) / QUEUE_ROWS));
  const bottom = top + g.lanesH;
  pan.squares = [];
  for (let k = 0; k < QUEUE_COLS * QUEUE_ROWS; k++) {
    const col = k % QUEUE_COLS, row = Math.floor(k / QUEUE_COLS);
    pan.squares.push(svg('rect', { x: g.qW - (col + 1) * (size + gap) + gap, y: bottom - (row + 1) * (size + gap) + gap,
      width: size, height: size, rx: 2, class: 'bt-waiting' }, pan.el));
  }
  pan.qLabel = svg('text', { x: g.qW, y: top + 10, class: 'bt-qlabel', 'text-anchor': 'end' }, pan.el);
  pan.more = svg('text', { x: g.qW, y: bottom - QUEUE_ROWS * (size + gap) - 2, class: 'bt-qmore', 'text-anchor': 'end' }, pan.el);
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
    ['followed', 'the chat followed through both policies (dashed line: its arrival)'],
  ]);
}
