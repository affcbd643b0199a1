// scenes/kv-cache.js: chapter 6: the KV cache as a grid of token slots, reserved regions beside pages, one clock.

import { h, clear, cssVar } from '../lib/svg.js';
import { num, pct, plural } from '../lib/format.js';
import { mathDetails } from '../lib/math.js';
import { loop } from '../lib/tween.js';
import { sceneStyles } from '../lib/style.js';
import { twoRunBeats, beatAt } from '../lib/beats.js';

const ROW_SLOTS = 512; // token slots per drawn row: a 2,048-token region is four rows
const MS_PER_FRAME = 160;
const HOLD_FRAMES = 10; // the clock rests on the last frame this long before it loops
const NUM_COLOURS = 8;
const NAMES = {
  paged: 'Paged', contiguous: 'Full-length region', pow2: 'Power-of-two region', oracle: 'Exact-length region',
};
let view = null;
let ctx = null;

export function mount(stage, context) {
  ctx = context;
  sceneStyles('kv-cache');
  const css = document.querySelector('link[data-scene-css="kv-cache"]');
  if (css && !css.sheet) css.addEventListener('load', () => { if (view && view.data) showFrame(view.index); }, { once: true });
  clear(stage);
  const wrap = h('div', { class: 'kv-scene' }, stage);
  const bar = h('div', { class: 'kv-transport' }, wrap);
  view = {
    wrap, data: null, index: 0, clock: null, selected: null, panels: [],
    play: h('button', { class: 'btn kv-play', type: 'button', 'aria-pressed': 'false' }, bar),
    scrub: h('input', { type: 'range', min: 0, max: 0, value: 0, step: 1, 'aria-label': 'Step of the simulation' }, bar),
    clockText: h('output', { class: 'kv-clock', 'aria-live': 'off' }, bar),
    grids: h('div', { class: 'kv-panels' }, wrap),
    legend: h('div', { class: 'legend kv-legend' }, wrap),
    bt: h('section', { class: 'kv-bt', 'aria-label': 'Block table' }, wrap),
    summary: h('div', { class: 'kv-summary' }, wrap),
  };
  view.play.addEventListener('click', () => (view.clock ? pause() : play()));
  view.scrub.addEventListener('input', () => { pause(); showFrame(Number(view.scrub.value)); });
  for (const side of ['left', 'right']) view.panels.push(makePanel(side));
  buildLegend();
  buildBlockTable();
  const ro = new ResizeObserver(() => { if (view && view.data) drawGrids(); });
  ro.observe(view.grids);
  view.ro = ro;
  view.themeWatch = new MutationObserver(() => { if (view && view.data) showFrame(view.index); });
  view.themeWatch.observe(document.documentElement, { attributes: true, attributeFilter: ['data-theme', 'class'] });
}

export function unmount() {
  if (!view) return;
  pause();
  view.ro.disconnect();
  view.themeWatch.disconnect();
  view = null;
}

export function update(data, params) {
  if (!view) return;
  const pols = Object.fromEntries(data.policies.map((p) => [p.name, p]));
  view.data = data;
  view.drawn = [pols[params.compare] || pols.contiguous, pols.paged];
  view.numFrames = Math.max(...view.drawn.map((p) => p.frames.length));
  view.scrub.max = String(view.numFrames - 1);
  readColours();
  view.drawn.forEach((p, i) => setupPanel(view.panels[i], p));
  fillRequestPicker();
  drawSummary(data, pols);
  const still = ctx.reducedMotion || ctx.options.autoplay === '0';
  pause();
  showFrame(still ? snapshotIndex() : 0);
  if (!still) play();
}

function readColours() {
  const cs = getComputedStyle(view.wrap);
  view.colours = Array.from({ length: NUM_COLOURS }, (_, i) => cs.getPropertyValue(`--kvr-${i}`).trim() || cssVar('--c-kv'));
  view.waste = cssVar('--c-waste');
  view.panelColour = cssVar('--panel');
  view.freeColour = cssVar('--panel-2');
  view.ink = cssVar('--ink');
}

/** Scene contract: a dozen beats, most while both drawn policies are busy (the scrubber reaches every frame). */
function beats(data) {
  const lengths = data.policies.map((p) => p.frames.length).filter((n) => n > 0);
  return twoRunBeats(Math.min(...lengths) - 1, Math.max(...lengths) - 1, true);
}

export function numSteps(data) {
  return beats(data).length;
}

export function showStep(i) {
  if (!view || !view.data) return;
  pause();
  showFrame(beatAt(beats(view.data), i));
}

/** A frame where both policies are still busy: halfway through the paged run. */
function snapshotIndex() {
  return Math.floor((view.drawn[1].frames.length - 1) / 2);
}

// ---- transport -----------------------------------------------------------------------------
function play() {
  if (!view || view.clock) return;
  const start = view.index >= view.numFrames - 1 ? 0 : view.index;
  view.play.textContent = '❚❚ Pause';
  view.play.setAttribute('aria-pressed', 'true');
  live(false);
  view.clock = loop((ms) => {
    const i = (start + Math.floor(ms / MS_PER_FRAME)) % (view.numFrames + HOLD_FRAMES);
    const j = Math.min(i, view.numFrames - 1);
    if (j !== view.index) showFrame(j);
  });
}

function pause() {
  if (!view) return;
  if (view.clock) view.clock.stop();
  view.clock = null;
  view.play.textContent = '▶ Play';
  view.play.setAttribute('aria-pressed', 'false');
  live(true);
}

/** Readouts are announced when the clock stands still, not at every frame of the animation. */
function live(on) {
  view.wrap.querySelectorAll('[data-live]').forEach((el) => el.setAttribute('aria-live', on ? 'polite' : 'off'));
}

function showFrame(i) {
  readColours(); // cheap, and follows a theme switch
  view.index = Math.max(0, Math.min(i, view.numFrames - 1));
  view.scrub.value = String(view.index);
  const step = view.index * view.data.frame_every;
  view.clockText.textContent = `step ${num(step)} · frame ${view.index + 1} of ${view.numFrames}`;
  view.panels.forEach((panel) => drawPanelFrame(panel));
  drawBlockTable();
}

// ---- one policy's panel: title, waste meter, grid, counts ------------------------------------
function makePanel(side) {
  const el = h('section', { class: `kv-panel kv-${side}` }, view.grids);
  const head = h('header', {}, el);
  const panel = {
    el, title: h('h3', {}, head), sub: h('p', { class: 'kv-sub' }, head),
    readouts: h('div', { class: 'kv-waste', 'aria-live': 'polite', 'data-live': '' }, el),
    meter: h('div', { class: 'kv-meter', role: 'img' }, el),
    canvas: h('canvas', { class: 'kv-grid', role: 'img' }, el),
    counts: h('p', { class: 'kv-counts' }, el),
  };
  const big = h('div', { class: 'readout' }, panel.readouts);
  h('span', { class: 'label', text: 'Waste so far' }, big);
  panel.wasteAvg = h('span', { class: 'value' }, big);
  const now = h('div', { class: 'readout' }, panel.readouts);
  h('span', { class: 'label', text: 'This step' }, now);
  panel.wasteNow = h('span', { class: 'value small' }, now);
  panel.segs = ['used', 'reserved', 'internal', 'external'].map((k) => h('span', { class: `seg ${k}` }, panel.meter));
  panel.canvas.addEventListener('click', (e) => pickAt(panel, e));
  return panel;
}

function setupPanel(panel, policy) {
  panel.policy = policy;
  panel.el.dataset.policy = policy.name;
  panel.title.textContent = policy.layout === 'paged' ? `Paged · ${policy.block_size}-token pages` : NAMES[policy.name];
  panel.sub.textContent = `Reserves ${policy.reservation}.`;
  const last = policy.frames[policy.frames.length - 1];
  panel.doneStep = policy.num_steps;
  panel.lastFrame = last;
}

function drawPanelFrame(panel) {
  const p = panel.policy;
  const f = p.frames[view.index];
  const cap = view.data.capacity_slots;
  const done = !f;
  const fr = f || { used_slots: 0, reserved_slots: 0, internal_fragmentation_slots: 0, external_fragmentation_slots: 0 };
  panel.wasteAvg.textContent = pct(done ? p.waste_fraction : f.waste_fraction_to_date, 1);
  panel.wasteNow.textContent = done ? 'done' : pct(f.waste_fraction, 1);
  const parts = [fr.used_slots, fr.reserved_slots, fr.internal_fragmentation_slots, fr.external_fragmentation_slots];
  parts.forEach((v, k) => { panel.segs[k].style.width = `${(100 * v) / cap}%`; });
  panel.meter.setAttribute('aria-label', `Of ${num(cap)} slots: ${num(parts[0])} hold tokens, ${num(parts[1])} reserved ` +
    `for later tokens, ${num(parts[2])} never used, ${num(parts[3])} free but too fragmented`);
  panel.counts.textContent = done
    ? `All ${plural(p.num_finished_requests, 'request')} finished by step ${num(p.num_steps)}.`
    : `${num(f.num_resident_requests)} in memory · ${num(f.num_waiting_requests)} waiting · ` +
      `${num(f.num_finished_requests)} finished${p.layout === 'paged' ? ` · ${num(f.num_preemptions_total)} preempted so far` : ''}`;
  drawGrid(panel, f);
}

function drawGrids() {
  view.panels.forEach((panel) => drawGrid(panel, panel.policy.frames[view.index]));
}

// ---- the grid: 512-slot rows, cells of block_size slots --------------------------------------
function geometry(panel) {
  const bs = view.drawn[1].block_size;
  const cols = ROW_SLOTS / bs;
  const rows = view.data.capacity_slots / ROW_SLOTS;
  const w = Math.max(120, panel.canvas.clientWidth);
  const cellW = w / cols;
  const rowH = Math.max(4, Math.round((w * 0.62) / rows));
  return { bs, cols, rows, w, cellW, rowH, h: rowH * rows, slotW: w / ROW_SLOTS };
}

function sizeCanvas(canvas, g) {
  const dpr = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(g.w * dpr) || canvas.height !== Math.round(g.h * dpr)) {
    canvas.width = Math.round(g.w * dpr);
    canvas.height = Math.round(g.h * dpr);
    canvas.style.height = `${g.h}px`;
  }
  const c = canvas.getContext('2d');
  c.setTransform(dpr, 0, 0, dpr, 0, 0);
  return c;
}

/** Paint slots [a, b) of the flat slot space (wrapping rows) with the current fill style. */
function spanRects(c, g, a, b, inset = 1) {
  for (let s = a; s < b;) {
    const row = Math.floor(s / ROW_SLOTS);
    const end = Math.min(b, (row + 1) * ROW_SLOTS);
    c.fillRect((s % ROW_SLOTS) * g.slotW, row * g.rowH + inset, (end - s) * g.slotW, g.rowH - 2 * inset);
    s = end;
  }
}

function colourOf(id) {
  return view.colours[id % NUM_COLOURS];
}

function drawGrid(panel, f) {
  const g = geometry(panel);
  const c = sizeCanvas(panel.canvas, g);
  c.clearRect(0, 0, g.w, g.h);
  c.fillStyle = view.freeColour;
  for (let r = 0; r < g.rows; r++) {
    for (let k = 0; k < g.cols; k++) c.fillRect(k * g.cellW + 0.5, r * g.rowH + 1, g.cellW - 1, g.rowH - 2);
  }
  panel.cells = null;
  if (!f) return labelGrid(panel, `${num(g.rows * ROW_SLOTS)} slots free`);
  const sel = view.selected;
  panel.cells = new Map();
  for (const [a, n] of f.residents) {
    const al = panel.policy.allocations[a];
    c.globalAlpha = sel === null || sel === al.request_id ? 1 : 0.28;
    if (panel.policy.layout === 'paged') drawPages(c, g, panel, al, n);
    else drawRegion(c, g, panel, al, n);
  }
  c.globalAlpha = 1;
  if (sel !== null) outlineSelected(c, g, panel, f, sel);
  panel.canvas.setAttribute('aria-label', `${panel.title.textContent}: ${plural(f.num_resident_requests, 'request')} hold ` +
    `${num(f.used_slots)} token slots; ${pct(f.waste_fraction, 1)} of allocated slots hold no token`);
}

function labelGrid(panel, text) {
  panel.canvas.setAttribute('aria-label', `${panel.title.textContent}: ${text}`);
}

/** Slot ranges inside an allocation of A slots holding n tokens of a request that will reach L. */
function parts(n, A, L) {
  const fill = Math.min(n, A);
  const reach = Math.min(A, L);
  return [[0, fill, 'used'], [fill, reach, 'reserved'], [reach, A, 'internal']];
}

function paint(c, kind, colour) {
  c.fillStyle = kind === 'used' ? colour : kind === 'reserved' ? hatch(c, colour) : view.waste;
}

function drawPages(c, g, panel, al, n) {
  const bs = g.bs;
  const pages = Math.ceil(n / bs);
  const colour = colourOf(al.request_id);
  for (let j = 0; j < pages; j++) {
    const b = al.block_table[j];
    const x = (b % g.cols) * g.cellW + 0.5;
    const y = Math.floor(b / g.cols) * g.rowH + 1;
    panel.cells.set(b, al.request_id);
    for (const [lo, hi, kind] of parts(n - j * bs, bs, al.num_final_tokens - j * bs)) {
      if (hi <= lo) continue;
      paint(c, kind, colour);
      c.fillRect(x + (lo / bs) * (g.cellW - 1), y, ((hi - lo) / bs) * (g.cellW - 1), g.rowH - 2);
    }
  }
}

function drawRegion(c, g, panel, al, n) {
  const colour = colourOf(al.request_id);
  const s0 = al.start_slot;
  for (const [lo, hi, kind] of parts(n, al.num_slots, al.num_final_tokens)) {
    if (hi <= lo) continue;
    paint(c, kind, colour);
    spanRects(c, g, s0 + lo, s0 + hi);
  }
  const bs = g.bs;
  for (let cell = Math.floor(s0 / bs); cell < Math.ceil((s0 + al.num_slots) / bs); cell++) {
    if (!panel.cells.has(cell)) panel.cells.set(cell, al.request_id);
  }
  c.save();
  c.globalAlpha = 1;
  c.strokeStyle = view.panelColour;
  c.lineWidth = 2.5;
  c.stroke(regionOutline(g, s0, s0 + al.num_slots));
  c.restore();
}

/** The outline of slots [a, b) wrapped over rows: a staircase polygon (a rectangle within one row). */
function regionOutline(g, a, b) {
  const x = (s) => (s % ROW_SLOTS) * g.slotW;
  const r0 = Math.floor(a / ROW_SLOTS);
  const r1 = Math.floor((b - 1) / ROW_SLOTS);
  const xa = x(a);
  const xb = x(b - 1) + g.slotW;
  const y = (r) => r * g.rowH;
  const path = new Path2D();
  if (r0 === r1) {
    path.rect(xa, y(r0), xb - xa, g.rowH);
    return path;
  }
  path.moveTo(xa, y(r0));
  path.lineTo(g.w, y(r0));
  path.lineTo(g.w, y(r1));
  path.lineTo(xb, y(r1));
  path.lineTo(xb, y(r1 + 1));
  path.lineTo(0, y(r1 + 1));
  path.lineTo(0, y(r0 + 1));
  path.lineTo(xa, y(r0 + 1));
  path.closePath();
  return path;
}

function outlineSelected(c, g, panel, f, id) {
  c.strokeStyle = view.ink;
  c.lineWidth = 1.5;
  if (panel.policy.layout !== 'paged') {
    const hit = f.residents.find(([a]) => panel.policy.allocations[a].request_id === id);
    if (hit) {
      const al = panel.policy.allocations[hit[0]];
      c.stroke(regionOutline(g, al.start_slot, al.start_slot + al.num_slots));
    }
    return;
  }
  for (const [cell, owner] of panel.cells) {
    if (owner !== id) continue;
    c.strokeRect((cell % g.cols) * g.cellW + 0.5, Math.floor(cell / g.cols) * g.rowH + 1, g.cellW - 1, g.rowH - 2);
  }
  if (g.cellW < 14 || g.rowH < 11) return;
  const res = f.residents.find(([a]) => panel.policy.allocations[a].request_id === id);
  if (!res) return;
  const al = panel.policy.allocations[res[0]];
  c.fillStyle = view.ink;
  c.font = `600 ${Math.min(11, g.rowH - 3)}px ${cssVar('--mono') || 'monospace'}`;
  c.textAlign = 'center';
  c.textBaseline = 'middle';
  al.block_table.slice(0, Math.ceil(res[1] / g.bs)).forEach((b, j) => {
    c.fillText(String(j), (b % g.cols + 0.5) * g.cellW, (Math.floor(b / g.cols) + 0.5) * g.rowH + 0.5);
  });
}

function pickAt(panel, e) {
  if (!panel.cells) return;
  const g = geometry(panel);
  const r = panel.canvas.getBoundingClientRect();
  const col = Math.floor((e.clientX - r.left) / g.cellW);
  const row = Math.floor((e.clientY - r.top) / g.rowH);
  const owner = panel.cells.get(row * g.cols + col);
  select(owner === undefined ? null : owner);
}

function select(id) {
  view.selected = id;
  view.picker.value = id === null ? '' : String(id);
  drawGrids();
  drawBlockTable();
}

// ---- legend, block table, summary ------------------------------------------------------------
function buildLegend() {
  const item = (cls, text) => {
    const s = h('span', {}, view.legend);
    h('i', { class: cls }, s);
    s.append(text);
  };
  item('used', 'keys and values of a token (one colour per request)');
  item('reserved', 'reserved, not written yet');
  item('internal', 'reserved, never used (internal fragmentation)');
  item('free', 'free');
}

/** A canvas pattern: the request's colour, lighter, with diagonal stripes (reserved, not yet written). */
function hatch(c, colour) {
  const key = `${colour}|${view.panelColour}`;
  c.hatches = c.hatches || new Map();
  if (!c.hatches.has(key)) c.hatches.set(key, c.createPattern(hatchTile(colour), 'repeat'));
  return c.hatches.get(key);
}

function hatchTile(colour) {
  const t = document.createElement('canvas');
  t.width = t.height = 6;
  const c = t.getContext('2d');
  c.fillStyle = view.panelColour;
  c.fillRect(0, 0, 6, 6);
  c.globalAlpha = 0.35;
  c.fillStyle = colour;
  c.fillRect(0, 0, 6, 6);
  c.globalAlpha = 0.9;
  c.strokeStyle = colour;
  c.lineWidth = 1.2;
  c.beginPath();
  c.moveTo(-1, 7); c.lineTo(7, -1);
  c.stroke();
  return t;
}

function buildBlockTable() {
  const head = h('header', {}, view.bt);
  h('h3', { text: 'Block table' }, head);
  const lab = h('label', { class: 'kv-pick' }, head);
  lab.append('Request ');
  view.picker = h('select', { 'aria-label': 'Request whose block table is shown' }, lab);
  view.picker.addEventListener('change', () => select(view.picker.value === '' ? null : Number(view.picker.value)));
  view.btText = h('p', { class: 'kv-bt-text', 'aria-live': 'polite', 'data-live': '' }, view.bt);
  view.btPages = h('ol', { class: 'kv-bt-pages' }, view.bt);
  view.btRegion = h('p', { class: 'kv-bt-text kv-bt-region' }, view.bt);
  view.btBoxes = [];
}

function fillRequestPicker() {
  clear(view.picker);
  h('option', { value: '', text: 'oldest in memory' }, view.picker);
  const ids = [...new Set(view.drawn[1].allocations.map((a) => a.request_id))].sort((a, b) => a - b);
  for (const id of ids) h('option', { value: id, text: `#${id}` }, view.picker);
  if (view.selected !== null && !ids.includes(view.selected)) view.selected = null;
  view.picker.value = view.selected === null ? '' : String(view.selected);
  const maxPages = view.data.max_seq_len / view.drawn[1].block_size;
  while (view.btBoxes.length < maxPages) {
    const li = h('li', {}, view.btPages);
    view.btBoxes.push({ li, phys: h('b', {}, li), fill: h('i', {}, li) });
  }
}

function resident(policy, id) {
  const f = policy.frames[view.index];
  if (!f) return null;
  const hit = id === null ? f.residents[0] : f.residents.find(([a]) => policy.allocations[a].request_id === id);
  return hit ? { al: policy.allocations[hit[0]], n: hit[1] } : null;
}

function drawBlockTable() {
  const paged = view.drawn[1];
  const bs = paged.block_size;
  const r = resident(paged, view.selected);
  const id = view.selected !== null ? view.selected : r ? r.al.request_id : null;
  const pages = r ? Math.ceil(r.n / bs) : 0;
  view.btBoxes.forEach((b, j) => {
    b.li.hidden = j >= pages;
    if (j >= pages) return;
    b.phys.textContent = String(r.al.block_table[j]);
    b.fill.style.width = `${(100 * Math.min(bs, r.n - j * bs)) / bs}%`;
  });
  if (id === null) view.btText.textContent = 'No request is in memory at this step.';
  else if (!r) view.btText.textContent = `Request #${id} is not in paged memory at this step (waiting, or finished).`;
  else {
    view.btText.textContent = `Request #${id}${view.selected === null ? ' (the oldest in memory)' : ''}: ` +
      `${num(r.n)} of ${num(r.al.num_final_tokens)} tokens in ${plural(pages, 'page')} of ${bs}. ` +
      'Logical page (position in the list) → physical page (number):';
  }
  view.btPages.setAttribute('aria-label', r ? `Physical pages: ${r.al.block_table.slice(0, pages).join(', ')}` : 'none');
  drawRegionNote(id);
}

function drawRegionNote(id) {
  const other = view.drawn[0];
  const r = id === null ? null : resident(other, id);
  if (!r) {
    view.btRegion.textContent = id === null ? '' : `${NAMES[other.name]}: request #${id} is not in memory at this step.`;
    return;
  }
  const { al, n } = r;
  const never = Math.max(0, al.num_slots - al.num_final_tokens);
  view.btRegion.textContent = `${NAMES[other.name]}: one region, slots ${num(al.start_slot)}–` +
    `${num(al.start_slot + al.num_slots - 1)} (${num(al.num_slots)} reserved); ${num(n)} hold tokens now, ` +
    `${num(Math.min(al.num_slots, al.num_final_tokens))} ever will, ${num(never)} never will.`;
}

function drawSummary(d, pols) {
  clear(view.summary);
  const t = d.trace;
  h('p', { class: 'kv-sub', text: `${num(t.num_requests)} requests, all waiting at step 0: on average ` +
    `${num(t.prompt_tokens_mean)} prompt + ${num(t.output_tokens_mean)} answer tokens, each chat at most ` +
    `${num(d.max_seq_len)} tokens. Cache: ` +
    `${num(d.capacity_slots)} token slots. One step = one new token per request in memory.` }, view.summary);
  const table = h('table', { class: 'kv-table' }, view.summary);
  const head = h('tr', {}, h('thead', {}, table));
  for (const c of ['Policy', 'Waste (time-averaged)', 'Requests in memory (peak / mean)', 'Steps to finish', 'Preemptions']) {
    h('th', { text: c, scope: 'col' }, head);
  }
  const body = h('tbody', {}, table);
  for (const p of d.policies) {
    const tr = h('tr', { class: p.drawn ? 'drawn' : '' }, body);
    h('th', { scope: 'row', text: p.layout === 'paged' ? `Paged (${p.block_size}-token pages)` : NAMES[p.name] }, tr);
    const w = h('td', {}, tr);
    const bar = h('span', { class: 'kv-minibar' }, w);
    h('i', {}, bar).style.width = `${100 * p.waste_fraction}%`;
    w.append(pct(p.waste_fraction, 1));
    h('td', { text: `${num(p.max_concurrent_requests)} / ${num(p.mean_concurrent_requests)}` }, tr);
    h('td', { text: num(p.num_steps) }, tr);
    h('td', { text: num(p.num_preemptions) }, tr);
  }
  const math = h('div', { class: 'kv-math' }, view.summary);
  for (const p of view.drawn) math.appendChild(mathDetails(p.math.waste_fraction, `How is ${p.name} waste computed?`));
  const src = h('p', { class: 'kbd-hint', text: `Reference: ${d.reference.source}.` }, view.summary);
  src.title = 'The figure the simulation is checked against';
}
