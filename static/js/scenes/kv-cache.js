// scenes/kv-cache.js: chapter 6: the KV cache as a grid of token slots, reserved regions beside pages, one clock.

import { h, clear, cssVar } from '../lib/svg.js';
import { swatches } from '../lib/legend.js';
import { num, pct, plural } from '../lib/format.js';
import { mathDetails } from '../lib/math.js';
import { loop } from '../lib/tween.js';
import { sceneStyles } from '../lib/style.js';
import { twoRunBeats, beatAt } from '../lib/beats.js';
import { paintGrid, cellAt } from './kv-cache-grid.js';

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
    bt: h('section', { class: 'kv-bt', 'aria-label': 'Block table', 'data-narrow-secondary': '' }, wrap),
    summary: h('div', { class: 'kv-summary', 'data-narrow-secondary': '' }, wrap),
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

/** The theme's colours, resolved for the canvas (cheap; read again at every frame, so a theme switch follows). */
function readColours() {
  const cs = getComputedStyle(view.wrap);
  view.look = {
    colours: Array.from({ length: NUM_COLOURS }, (_, i) => cs.getPropertyValue(`--kvr-${i}`).trim() || cssVar('--c-kv')),
    waste: cssVar('--c-waste'), panel: cssVar('--panel'), free: cssVar('--panel-2'), ink: cssVar('--ink'),
    mono: cssVar('--mono'),
  };
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
  readColours();
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

// ---- the grid (drawn by kv-cache-grid.js) -------------------------------------------------------
function gridOpts() {
  return { blockSize: view.drawn[1].block_size, capacitySlots: view.data.capacity_slots, look: view.look, selected: view.selected };
}

function drawGrid(panel, f) {
  panel.cells = paintGrid(panel.canvas, panel.policy, f, gridOpts());
  panel.canvas.setAttribute('aria-label', f
    ? `${panel.title.textContent}: ${plural(f.num_resident_requests, 'request')} hold ${num(f.used_slots)} token slots; ` +
      `${pct(f.waste_fraction, 1)} of allocated slots hold no token`
    : `${panel.title.textContent}: ${num(view.data.capacity_slots)} slots free`);
}

function pickAt(panel, e) {
  if (!panel.cells) return;
  const owner = panel.cells.get(cellAt(panel.canvas, gridOpts(), e));
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
  swatches(view.legend, [
    ['used', 'keys and values of a token (one colour per request)'],
    ['reserved', 'reserved, not written yet'],
    ['internal', 'reserved, never used (internal fragmentation)'],
    ['free', 'free'],
  ]);
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
  h('p', { class: 'kv-sub', 'data-secondary': '', text: `${num(t.num_requests)} requests, all waiting at step 0: on average ` +
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
  const math = h('div', { class: 'kv-math', 'data-secondary': '' }, view.summary);
  for (const p of view.drawn) math.appendChild(mathDetails(p.math.waste_fraction, `How is ${p.name} waste computed?`));
  const src = h('p', { class: 'kbd-hint', text: `Reference: ${d.reference.source}.`, 'data-secondary': '' }, view.summary);
  src.title = 'The figure the simulation is checked against';
}
