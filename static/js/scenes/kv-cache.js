// scenes/kv-cache.js: chapter 6: one chat's keys and values growing token by token, then the whole cache as a grid
// of token slots, reserved regions beside pages, on one clock of engine steps.

import { h, clear, cssVar } from '../lib/svg.js';
import { swatches } from '../lib/legend.js';
import { num, pct, plural, bytes } from '../lib/format.js';
import { mathDetails } from '../lib/math.js';
import { sceneRoot, readout, transport, still } from '../lib/scene-kit.js';
import { twoRunBeats, beatAt } from '../lib/beats.js';
import { paintGrid, paintChat, cellAt, colourOf } from './kv-cache-grid.js';
import { livePanel } from './engine-live.js';
import { kvMeasured } from './measured-panels.js';
import { toQuery } from '../lib/api.js';

// The clock: the first INTRO_STEPS steps go token by token (the chat above grows one token at a time), then the
// picture zooms out to the pool and runs FAST_STEPS_PER_S; it rests HOLD_MS on the end before it loops.
const INTRO_STEPS = 40;
const INTRO_STEPS_PER_S = 6;
const FAST_STEPS_PER_S = 240;
const HOLD_MS = 2000;
const NUM_COLOURS = 10;
const NAMES = {
  paged: 'Paged', contiguous: 'Full-length region', pow2: 'Power-of-two region', oracle: 'Exact-length region',
};
let view = null;
let ctx = null;

export function mount(stage, context) {
  ctx = context;
  const wrap = sceneRoot(stage, 'kv-cache', 'kv-scene', () => { if (view && view.data) drawStep(view.step); });
  const playback = transport(h('div', { class: 'kv-transport' }, wrap), {
    button: { class: 'btn kv-play' },
    scrub: { 'aria-label': 'Step of the simulation' },
    clock: { class: 'kv-clock', 'aria-live': 'off' },
    onPlay: run,
    onSeek: drawStep,
    // readouts are announced when the clock stands still, not at every step of the animation
    hush: () => view.wrap.querySelectorAll('[data-live]'),
  });
  view = {
    wrap, data: null, step: 0, selected: null, panels: [], transport: playback, scrub: playback.scrub, clockText: playback.clock,
    chat: h('section', { class: 'kv-chat', 'aria-label': "One chat's keys and values" }, wrap),
    grids: h('div', { class: 'kv-panels' }, wrap),
    legend: h('div', { class: 'legend kv-legend' }, wrap),
    bt: h('section', { class: 'kv-bt', 'aria-label': 'Block table', 'data-narrow-secondary': '' }, wrap),
    summary: h('div', { class: 'kv-summary', 'data-narrow-secondary': '' }, wrap),
    measured: h('section', { class: 'kv-measured', 'aria-label': 'Measured on this server', 'data-secondary': '' }, wrap),
  };
  // the served model's own cache, weighed and timed on the server: fetched beside the simulation, never before it
  if (!ctx.embed) kvMeasured(view.measured, ctx, () => view);
  buildChat();
  askQuestionSize();
  for (const side of ['left', 'right']) view.panels.push(makePanel(side));
  buildLegend();
  // the real engine's pool beside the simulated one (engine-live.js); a slide keeps the simulation only
  if (!ctx.embed) {
    view.live = livePanel(wrap, { kind: 'pages', palette: '--kvr-', colours: NUM_COLOURS, fetchJSON: ctx.fetchJSON });
    wrap.insertBefore(view.live.el, view.bt); // under the simulated grids and their legend
  }
  buildBlockTable();
  const ro = new ResizeObserver(() => { if (view && view.data) drawStep(view.step); });
  ro.observe(view.grids);
  view.ro = ro;
  view.themeWatch = new MutationObserver(() => { if (view && view.data) drawStep(view.step); });
  view.themeWatch.observe(document.documentElement, { attributes: true, attributeFilter: ['data-theme', 'class'] });
}

export function unmount() {
  if (!view) return;
  view.transport.pause();
  view.ro.disconnect();
  view.themeWatch.disconnect();
  if (view.live) view.live.stop();
  view = null;
}

export function update(data, params) {
  if (!view) return;
  const pols = Object.fromEntries(data.policies.map((p) => [p.name, p]));
  view.data = data;
  view.drawn = [pols[params.compare] || pols.contiguous, pols.paged];
  view.lastStep = Math.max(...view.drawn.map((p) => p.num_steps - 1));
  view.scrub.max = String(view.lastStep);
  readColours();
  view.drawn.forEach((p, i) => setupPanel(view.panels[i], p));
  fillRequestPicker();
  drawSummary(data, pols);
  view.transport.restart(still(ctx), () => drawStep(snapshotStep()), () => drawStep(0));
}

/** The theme's colours, resolved for the canvas (cheap; read again at every draw, so a theme switch follows). */
function readColours() {
  const cs = getComputedStyle(view.wrap);
  view.look = {
    colours: Array.from({ length: NUM_COLOURS }, (_, i) => cs.getPropertyValue(`--kvr-${i}`).trim() || cssVar('--c-kv')),
    waste: cssVar('--c-waste'), panel: cssVar('--panel'), free: cssVar('--panel-2'), ink: cssVar('--ink'),
    mono: cssVar('--mono'),
  };
}

/** Scene contract: a dozen beats (steps), most while both drawn policies are busy (the scrubber reaches every step). */
function beats(data) {
  const pols = data.policies.filter((p) => data.drawn.includes(p.name));
  return twoRunBeats(Math.min(...pols.map((p) => p.num_steps - 1)), Math.max(...pols.map((p) => p.num_steps - 1)), true);
}

export function numSteps(data) {
  return beats(data).length;
}

export function showStep(i) {
  if (!view || !view.data) return;
  view.transport.pause();
  drawStep(beatAt(beats(view.data), i));
}

/** A step where both policies are still busy: halfway through the paged run. */
function snapshotStep() {
  return Math.floor((view.drawn[1].num_steps - 1) / 2);
}

// ---- transport -----------------------------------------------------------------------------
/** Steps reached after `ms` of playing from step 0: slow for the intro, then fast. */
function stepAfter(ms) {
  const introMs = (1000 * INTRO_STEPS) / INTRO_STEPS_PER_S;
  if (ms <= introMs) return Math.floor((ms * INTRO_STEPS_PER_S) / 1000);
  return INTRO_STEPS + Math.floor(((ms - introMs) * FAST_STEPS_PER_S) / 1000);
}

function msFor(step) {
  if (step <= INTRO_STEPS) return (1000 * step) / INTRO_STEPS_PER_S;
  return (1000 * INTRO_STEPS) / INTRO_STEPS_PER_S + (1000 * (step - INTRO_STEPS)) / FAST_STEPS_PER_S;
}

/** Play from the step on screen (from step 0 once at the end): slow through the intro, then fast, then a rest. */
function run() {
  if (!view || !view.data) return null;
  const start = view.step >= view.lastStep ? 0 : msFor(view.step);
  const total = msFor(view.lastStep) + HOLD_MS;
  return (ms) => {
    const s = Math.min(view.lastStep, stepAfter((start + ms) % total));
    if (s !== view.step) drawStep(s);
  };
}

function drawStep(s) {
  readColours();
  view.step = Math.max(0, Math.min(Math.round(s), view.lastStep));
  view.scrub.value = String(view.step);
  view.clockText.textContent = `step ${num(view.step)} of ${num(view.lastStep)} · one step = one new token per chat in memory`;
  view.wrap.dataset.step = String(view.step);
  view.wrap.dataset.phase = view.step < INTRO_STEPS ? 'one-chat' : 'pool';
  view.panels.forEach((panel) => drawPanel(panel));
  drawChat();
  drawBlockTable();
}

// ---- who is in memory at a step: from the policy's residencies -----------------------------------
// block tables come as strings, two base-64 digits per page id (api/kv_cache.py PAGE_DIGITS)
const PAGE_DIGITS = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const DIGIT = new Int16Array(128).fill(-1);
for (let i = 0; i < 64; i++) DIGIT[PAGE_DIGITS.charCodeAt(i)] = i;

function pagesOf(text) {
  const out = new Array(text.length / 2);
  for (let j = 0; j < out.length; j++) out[j] = DIGIT[text.charCodeAt(2 * j)] * 64 + DIGIT[text.charCodeAt(2 * j + 1)];
  return out;
}

/** Residents at step s, in admission order: [{ al, n }] (al: request id, final tokens, pages or region). */
function residentsAt(policy, s) {
  if (s > policy.num_steps - 1) return null;
  const st = policy.residencies, out = [];
  if (st.block_pages && !st.block_table) st.block_table = st.block_pages.map(pagesOf); // once per response
  for (let k = 0; k < st.request_id.length; k++) {
    if (st.first_step[k] > s || st.last_step[k] < s) continue;
    const id = st.request_id[k];
    const al = { request_id: id, num_final_tokens: view.data.num_final_tokens[id] };
    if (st.block_table) al.block_table = st.block_table[k];
    else { al.start_slot = st.start_slot[k]; al.num_slots = st.num_slots[k]; }
    out.push({ al, n: st.first_num_tokens[k] + s - st.first_step[k] });
  }
  return out;
}

/** The sampled frame at or before step s (slot counts), as an object, or null after the run. */
function frameAt(policy, s) {
  if (s > policy.num_steps - 1) return null;
  const f = policy.frames;
  const i = Math.min(Math.floor(s / view.data.frame_every), f.step.length - 1);
  return Object.fromEntries(Object.keys(f).map((k) => [k, f[k][i]]));
}

// ---- one chat, zoomed in -------------------------------------------------------------------
function buildChat() {
  const head = h('header', {}, view.chat);
  view.chatTitle = h('h3', {}, head);
  view.chatText = h('p', { class: 'kv-chat-text', 'aria-live': 'polite', 'data-live': '' }, view.chat);
  view.chatQuestion = h('p', { class: 'kv-sub kv-chat-question', hidden: '' }, view.chat);
  view.chatCanvas = h('canvas', { class: 'kv-chat-grid', role: 'img', 'data-narrow-secondary': '' }, view.chat);
  view.chatMath = h('p', { class: 'kv-sub kv-chat-math', 'data-secondary': '' }, view.chat);
}

/**
 * The visitor's question (ctx.question, the tour's thread) as the model on this server reads it: its token count
 * in SmolLM2's chat template (or Llama 3's tokens, without the real model), so drawChat can say what its own
 * keys and values weigh in the chosen model. Offline, or on any error, the line stays hidden.
 */
async function askQuestionSize() {
  const q = (ctx.question || '').trim();
  if (!q) return;
  const ask = (encoding) => ctx.fetchJSON(`/api/tokens?${toQuery({ text: q, encoding })}`);
  try {
    const r = await ask('smollm2').catch(() => ask('llama3'));
    if (!view) return;
    view.question = r.chat && r.encoding === 'smollm2'
      ? { text: q, tokens: r.chat.num_tokens, reader: "SmolLM2's chat template, as the model on this server reads it" }
      : { text: q, tokens: r.num_tokens, reader: "Llama 3's tokenizer" };
    if (view.data) drawChat();
  } catch { /* no tokens endpoint here: the line stays hidden */ }
}

/**
 * The chat followed in the zoomed strip and the block table: the selected one; else, while it is in memory, the
 * first chat admitted at step 0 that stays through the token-by-token intro; else the oldest chat in memory.
 */
function chatId() {
  if (view.selected !== null) return view.selected;
  const paged = view.drawn[1], st = paged.residencies;
  const residents = residentsAt(paged, view.step) || [];
  const intro = st.request_id.find((_, k) => st.first_step[k] === 0 && st.last_step[k] >= INTRO_STEPS);
  if (intro !== undefined && (view.step < INTRO_STEPS || residents.some((r) => r.al.request_id === intro))) return intro;
  return residents.length ? residents[0].al.request_id : st.request_id[0];
}

function drawChat() {
  const d = view.data, k = d.kv_per_token, paged = view.drawn[1], q = view.question;
  view.chatMath.textContent = `Every new token appends one key and one value vector in each layer: 2 × ` +
    `${num(k.layers)} layers × ${num(k.kv_heads)} KV heads × ${num(k.head_dim)} values × ${k.bytes_per_value} bytes = ` +
    `${num(k.bytes)} bytes. Below, the whole cache: ${num(d.capacity_slots)} token slots, ` +
    `${bytes(d.capacity_slots * k.bytes)} for this model.`;
  view.chatQuestion.hidden = !q;
  if (q) {
    const shown = q.text.length > 60 ? `${q.text.slice(0, 57)}…` : q.text;
    view.chatQuestion.dataset.tokens = String(q.tokens);
    view.chatQuestion.textContent = `Your question, “${shown}”, is ${plural(q.tokens, 'token')} (${q.reader}): ` +
      `in ${k.model} its keys and values take ${num(q.tokens)} × ${bytes(k.bytes)} = ${bytes(q.tokens * k.bytes)} ` +
      `before the first word of the answer, and every answer token adds ${bytes(k.bytes)} more.`;
  }
  if (q && view.selected === null) { drawQuestionChat(q, k, paged.block_size); return; }
  const id = chatId();
  const final = d.num_final_tokens[id];
  const r = (residentsAt(paged, view.step) || []).find((x) => x.al.request_id === id);
  const st = paged.residencies;
  const stays = st.request_id.map((x, i) => i).filter((i) => st.request_id[i] === id);
  const done = stays.length && view.step > st.last_step[stays[stays.length - 1]];
  const n = r ? r.n : done ? final : 0;
  const colour = colourOf(view.look, id);
  paintChat(view.chatCanvas, n, final, paged.block_size, view.look, colour);
  view.chatTitle.textContent = `One chat, zoomed in: request #${id}`;
  view.chat.dataset.follows = 'request';
  const where = r ? `in memory, ${plural(Math.ceil(n / paged.block_size), 'page')} of ${paged.block_size} tokens`
    : done ? 'finished; its pages are free again' : 'waiting for memory (in the queue, or preempted)';
  view.chatText.textContent = `${num(n)} of ${num(final)} tokens × ${bytes(k.bytes)} per token = ` +
    `${bytes(n * k.bytes)} of keys and values (${k.model}, BF16) · ${where}`;
  view.chatCanvas.setAttribute('aria-label', `Request #${id}: ${num(n)} tokens cached, each one key and one value column`);
}

/**
 * The visitor's own chat, drawn large: the question's tokens fill pages of the chosen size at once (the prefill),
 * then the answer appends one token a step through the intro (INTRO_STEPS tokens, the length the intro shows).
 */
function drawQuestionChat(q, k, blockSize) {
  const answer = Math.min(view.step, INTRO_STEPS), n = q.tokens + answer, final = q.tokens + INTRO_STEPS;
  paintChat(view.chatCanvas, n, final, blockSize, view.look, cssVar('--c-kv'), { tokens: q.tokens, colour: cssVar('--c-tokens') });
  view.chatTitle.textContent = 'Your chat, zoomed in';
  view.chat.dataset.follows = 'question';
  view.chat.dataset.tokens = String(n);
  const pages = Math.ceil(n / blockSize);
  view.chatText.textContent = `${num(q.tokens)} question + ${num(answer)} answer tokens = ${num(n)} tokens × ` +
    `${bytes(k.bytes)} per token = ${bytes(n * k.bytes)} of keys and values (${k.model}, BF16) · ` +
    `${plural(pages, 'page')} of ${blockSize} tokens, the last ${n % blockSize ? `${n % blockSize} of ${blockSize} full` : 'full'}`;
  view.chatCanvas.setAttribute('aria-label', `Your chat: ${num(q.tokens)} question tokens and ${num(answer)} answer tokens cached, ` +
    `in ${plural(pages, 'page')} of ${blockSize}`);
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
    note: h('p', { class: 'kv-sub kv-note', 'data-narrow-secondary': '' }, el),
  };
  panel.wasteAvg = readout(panel.readouts, 'Waste so far', '').querySelector('.value');
  panel.wasteNow = readout(panel.readouts, 'This step', '').querySelector('.value');
  panel.wasteNow.classList.add('small');
  // the figure "the number" quotes: waste averaged over the whole run (the live figure converges to it by the end)
  panel.wasteRun = readout(panel.readouts, 'Whole run', '').querySelector('.value');
  panel.wasteRun.classList.add('small');
  panel.segs = ['used', 'reserved', 'internal', 'external'].map((k) => h('span', { class: `seg ${k}` }, panel.meter));
  panel.canvas.addEventListener('click', (e) => pickAt(panel, e));
  return panel;
}

function setupPanel(panel, policy) {
  panel.policy = policy;
  panel.el.dataset.policy = policy.name;
  panel.title.textContent = policy.layout === 'paged' ? `Paged · ${policy.block_size}-token pages` : NAMES[policy.name];
  panel.sub.textContent = `Reserves ${policy.reservation}.`;
  panel.note.textContent = policy.layout === 'paged'
    ? 'Preempted: when a growing chat needs a page and none is free, the newest chat in memory is evicted. ' +
      'Its pages are freed for the others, and it waits at the front of the queue to compute its keys and values again.'
    : 'A chat is admitted only when one free region is long enough for its whole reservation; nobody is evicted.';
}

function drawPanel(panel) {
  const p = panel.policy;
  const f = frameAt(p, view.step);
  const cap = view.data.capacity_slots;
  const fr = f || { used_slots: 0, reserved_slots: 0, internal_fragmentation_slots: 0, external_fragmentation_slots: 0 };
  panel.wasteAvg.textContent = pct(f ? f.waste_fraction_to_date : p.waste_fraction, 1);
  panel.wasteNow.textContent = f ? pct(f.waste_fraction, 1) : 'done';
  panel.wasteRun.textContent = pct(p.waste_fraction, 1);
  const parts = [fr.used_slots, fr.reserved_slots, fr.internal_fragmentation_slots, fr.external_fragmentation_slots];
  parts.forEach((v, k) => { panel.segs[k].style.width = `${(100 * v) / cap}%`; });
  panel.meter.setAttribute('aria-label', `Of ${num(cap)} slots: ${num(parts[0])} hold tokens, ${num(parts[1])} reserved ` +
    `for later tokens, ${num(parts[2])} never used, ${num(parts[3])} free but too fragmented`);
  panel.counts.textContent = f
    ? `${num(f.num_resident_requests)} in memory · ${num(f.num_waiting_requests)} waiting · ` +
      `${num(f.num_finished_requests)} finished${p.layout === 'paged' ? ` · ${num(f.num_preemptions_total)} preempted so far` : ''}`
    : `All ${plural(p.num_finished_requests, 'request')} finished by step ${num(p.num_steps)}.`;
  const res = residentsAt(p, view.step);
  panel.cells = paintGrid(panel.canvas, p, res, gridOpts());
  panel.canvas.dataset.residents = String(res ? res.length : 0);
  panel.canvas.setAttribute('aria-label', res
    ? `${panel.title.textContent}: ${plural(res.length, 'request')} hold ${num(res.reduce((a, r) => a + r.n, 0))} token slots`
    : `${panel.title.textContent}: ${num(cap)} slots free`);
}

// ---- the grid (drawn by kv-cache-grid.js) -------------------------------------------------------
function gridOpts() {
  return { blockSize: view.drawn[1].block_size, capacitySlots: view.data.capacity_slots, look: view.look, selected: view.selected };
}

function pickAt(panel, e) {
  if (!panel.cells) return;
  const owner = panel.cells.get(cellAt(panel.canvas, gridOpts(), e));
  select(owner === undefined ? null : owner);
}

function select(id) {
  view.selected = id;
  view.picker.value = id === null ? '' : String(id);
  drawStep(view.step);
}

// ---- legend, block table, summary ------------------------------------------------------------
function buildLegend() {
  swatches(view.legend, [
    ['used', 'keys and values of a token (one colour per request; ten colours in turn)'],
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
  const ids = [...new Set(view.drawn[1].residencies.request_id)].sort((a, b) => a - b);
  for (const id of ids) h('option', { value: id, text: `#${id}` }, view.picker);
  if (view.selected !== null && !ids.includes(view.selected)) view.selected = null;
  view.picker.value = view.selected === null ? '' : String(view.selected);
  const maxPages = view.data.max_seq_len / view.drawn[1].block_size;
  while (view.btBoxes.length < maxPages) {
    const li = h('li', {}, view.btPages);
    view.btBoxes.push({ li, phys: h('b', {}, li), fill: h('i', {}, li) });
  }
}

function residentOf(policy, id) {
  return (residentsAt(policy, view.step) || []).find((r) => r.al.request_id === id) || null;
}

function drawBlockTable() {
  const paged = view.drawn[1];
  const bs = paged.block_size;
  const id = chatId();
  const r = residentOf(paged, id);
  const pages = r ? Math.ceil(r.n / bs) : 0;
  view.btBoxes.forEach((b, j) => {
    b.li.hidden = j >= pages;
    if (j >= pages) return;
    b.phys.textContent = String(r.al.block_table[j]);
    b.fill.style.width = `${(100 * Math.min(bs, r.n - j * bs)) / bs}%`;
  });
  if (!r) view.btText.textContent = `Request #${id} is not in paged memory at this step (waiting, preempted or finished).`;
  else {
    view.btText.textContent = `Request #${id}${view.selected === null ? ' (in memory longest)' : ''}: ` +
      `${num(r.n)} of ${num(r.al.num_final_tokens)} tokens in ${plural(pages, 'page')} of ${bs}. ` +
      'Logical page (position in the list) → physical page (number):';
  }
  view.btPages.setAttribute('aria-label', r ? `Physical pages: ${r.al.block_table.slice(0, pages).join(', ')}` : 'none');
  drawRegionNote(id);
}

function drawRegionNote(id) {
  const other = view.drawn[0];
  const r = residentOf(other, id);
  if (!r) {
    view.btRegion.textContent = `${NAMES[other.name]}: request #${id} is not in memory at this step.`;
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
    const tr = h('tr', { class: d.drawn.includes(p.name) ? 'drawn' : '' }, body);
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
  math.appendChild(mathDetails(d.kv_per_token.math, `How many bytes does one token take in ${d.kv_per_token.model}?`));
  for (const p of view.drawn) math.appendChild(mathDetails(p.math.waste_fraction, `How is ${p.name} waste computed?`));
  const src = h('p', { class: 'kbd-hint', text: `Reference: ${d.reference.source}.`, 'data-secondary': '' }, view.summary);
  src.title = 'The figure the simulation is checked against';
}
