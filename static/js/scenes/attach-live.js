// scenes/attach-live.js: "That server, now": a serving engine the tour's operator attached (`inside-llm serve
// --attach NAME=URL`: vLLM, SGLang, llama.cpp, TGI, NIM), as the tour's server last read its /metrics (GET
// /api/attach/{name}, once a second while the panel is on screen), drawn right after "This server, now" in the same
// vocabulary: chapter 7 ('lanes') its running and waiting requests over the last seconds, chapter 6 ('pages') its
// KV cache as a pool of cells filled to the fraction in use. Each figure names the metric it came from, in that
// engine's own names; where the engine publishes no such figure the panel says so, in the server's words. A
// target that is down, slow or garbled shows what went wrong (and its last reading, marked stale). The page never
// names a URL: it picks a server by the name the operator gave it. No server attached, or an offline copy: no panel.

import { svg, h, clear } from '../lib/svg.js';
import { fetchJSON } from '../lib/api.js';
import { num, fixed, pct } from '../lib/format.js';
import { sceneStyles } from '../lib/scene-kit.js';

const POLL_MS = 1000;
const WINDOW_S = 30; // lanes: the last WINDOW_S seconds
const CELLS = 128; // pages: the pool drawn as this many cells

/**
 * The panel after `opts.after` (an element of `parent`) for `list`, GET /api/attach's answer naming at least one
 * server (lib/attached.js whenAttached asks, and loads this module only then). opts: { kind: 'lanes' | 'pages', after, fetchJSON: the page's (offline-aware) GET }. Returns { stop() }.
 */
export function thatServerPanel(parent, opts, list) {
  const p = { opts, parent, el: null, name: null, timer: 0, shown: false, stopped: false, history: [], view: null };
  begin(p, list);
  return { stop: () => stop(p), panel: () => p.el };
}

function begin(p, list) {
  sceneStyles('attach-live');
  build(p, list.servers);
  p.io = new IntersectionObserver((entries) => {
    p.shown = entries.some((e) => e.isIntersecting);
    if (p.shown) poll(p); else clearTimeout(p.timer);
  });
  p.io.observe(p.el);
  show(p, list.servers[0]);
}

function build(p, servers) {
  const el = h('section', { class: `ta ta-${p.opts.kind}`, 'aria-label': 'That server, now', 'data-secondary': '',
    'data-state': 'waiting' });
  const after = p.opts.after;
  (after && after.parentNode ? after.parentNode : p.parent).insertBefore(el, after ? after.nextSibling : null);
  p.el = el;
  const head = h('header', { class: 'ta-head' }, el);
  h('h3', { text: 'That server, now' }, head);
  p.name = servers[0].name;
  if (servers.length > 1) {
    const label = h('label', { class: 'ta-pick' }, head);
    label.append('Server ');
    const select = h('select', { 'aria-label': 'Attached server' }, label);
    for (const s of servers) h('option', { value: s.name, text: s.name }, select);
    select.addEventListener('change', () => {
      p.name = select.value;
      p.history = [];
      poll(p, true);
    });
  }
  p.sub = h('p', { class: 'ta-sub' }, el);
  p.status = h('p', { class: 'ta-status', role: 'status' }, el);
  p.picture = h('div', { class: 'ta-picture' }, el);
  p.readouts = h('p', { class: 'ta-readouts' }, el);
  p.metrics = h('p', { class: 'ta-metrics' }, el);
  p.ro = new ResizeObserver(() => { if (p.view) draw(p); });
  p.ro.observe(p.picture);
}

async function poll(p, now = false) {
  clearTimeout(p.timer);
  if (p.stopped || (!p.shown && !now)) return;
  const name = p.name;
  try {
    const v = await fetchJSON(`/api/attach/${encodeURIComponent(name)}`);
    if (!p.stopped && name === p.name) show(p, v);
  } catch (err) {
    if (!p.stopped) p.status.textContent = `The tour’s server did not answer about ${name}: ${err.message}`;
  }
  if (!p.stopped && p.shown) p.timer = setTimeout(() => poll(p), POLL_MS);
}

function stop(p) {
  p.stopped = true;
  clearTimeout(p.timer);
  if (p.io) p.io.disconnect();
  if (p.ro) p.ro.disconnect();
}

// ---- one reading --------------------------------------------------------------------------------------------
const value = (f) => (f && f.value !== null && f.value !== undefined ? f.value : null);

function show(p, v) {
  p.view = v;
  const r = v.reading;
  const d = p.el.dataset;
  d.name = v.name;
  d.state = v.status === 'ok' ? 'live' : (r ? 'stale' : v.status === 'waiting' ? 'waiting' : 'failing');
  d.status = v.status;
  if (r) {
    const t = performance.now() / 1000;
    const last = p.history[p.history.length - 1];
    if (v.status === 'ok' && (!last || t - last.t > 0.2)) {
      p.history.push({ t, running: value(r.running) || 0, waiting: value(r.waiting) || 0 });
    }
    p.history = p.history.filter((g) => t - g.t <= WINDOW_S);
    p.now = t;
    Object.assign(d, { engine: r.engine, running: value(r.running) ?? '', waiting: value(r.waiting) ?? '',
      kv: value(r.kv_usage) ?? '' });
  }
  const models = r ? (r.models.length ? r.models : r.served_models || []) : [];
  p.sub.textContent = r
    ? `${v.name}: ${r.engine_name}${models.length ? `, serving ${models.join(', ')}` : ''}` +
      `${r.build ? ` (build ${r.build})` : ''}. Its own /metrics` +
      `${r.engine === 'llama.cpp' ? ', /slots and /props' : ''}, read by this tour’s server once a second and ` +
      'mapped onto the figures this chapter draws.'
    : `${v.name}: not read yet.`;
  p.status.textContent = statusWords(v);
  draw(p);
}

function statusWords(v) {
  if (v.status === 'ok') return '';
  if (v.status === 'waiting') return 'Waiting for its first reading.';
  const retry = v.retry_in_s ? ` Next try in ${num(v.retry_in_s)} s.` : '';
  const stale = v.stale ? ` Showing its last good reading, from ${num(v.last_ok_s_ago)} s ago.` : '';
  return `Not reading it now (${v.status}): ${v.error}${retry}${stale}`;
}

function draw(p) {
  const r = p.view.reading;
  clear(p.picture);
  clear(p.metrics);
  p.readouts.textContent = '';
  if (!r) return;
  if (p.opts.kind === 'lanes') drawLanes(p, r);
  else drawPool(p, r);
  names(p, r);
}

const ms = (f) => (value(f) === null ? '–' : `${num(1e3 * value(f))} ms`);

// ---- chapter 7: running and waiting over the last seconds -----------------------------------------------------
function drawLanes(p, r) {
  const width = Math.max(280, Math.round(p.picture.clientWidth) || 600);
  const height = 96, top = 6, bottom = height - 22;
  const peak = Math.max(1, ...p.history.map((g) => g.running + g.waiting));
  const x = (t) => width - 8 - ((width - 16) * (p.now - t)) / WINDOW_S;
  const y = (n) => bottom - ((bottom - top) * n) / peak;
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, width: '100%', class: 'ta-svg', role: 'img',
    'aria-label': `${p.view.name}: ${num(value(r.running) || 0)} requests running, ${num(value(r.waiting) || 0)} ` +
      `waiting; the last ${WINDOW_S} seconds` }, p.picture);
  // each reading holds from when it was taken until the next one (a step chart), the newest until now
  p.history.forEach((g, k) => {
    const next = k + 1 < p.history.length ? p.history[k + 1].t : p.now;
    const xa = Math.max(8, x(g.t)), bar = Math.max(1.5, x(next) - xa - 0.5);
    svg('rect', { x: xa, y: y(g.running), width: bar, height: bottom - y(g.running), class: 'ta-running' }, root);
    if (g.waiting) {
      svg('rect', { x: xa, y: y(g.running + g.waiting), width: bar, height: y(g.running) - y(g.running + g.waiting),
        class: 'ta-waiting' }, root);
    }
  });
  svg('line', { x1: 8, x2: width - 8, y1: bottom + 2, y2: bottom + 2, class: 'bt-axis ta-axis' }, root);
  svg('text', { x: 8, y: bottom + 16, class: 'ta-tick', text: `${WINDOW_S} s ago` }, root);
  svg('text', { x: width - 8, y: bottom + 16, class: 'ta-tick', 'text-anchor': 'end', text: 'now' }, root);
  svg('text', { x: 10, y: top + 10, class: 'ta-tick', text: `peak ${num(peak)} requests` }, root);
  p.readouts.textContent = `${num(value(r.running) ?? 0)} running (dark) · ${num(value(r.waiting) ?? 0)} waiting ` +
    `(pale) · ${value(r.generation_tokens_per_s) === null ? '–' : num(value(r.generation_tokens_per_s))} tokens/s ` +
    `written · time to first token p50 ${ms(r.ttft_p50_s)}, p95 ${ms(r.ttft_p95_s)} · between tokens p50 ` +
    `${ms(r.itl_p50_s)}, p95 ${ms(r.itl_p95_s)}${slotWords(r)}.`;
}

// llama.cpp: its fixed slots (GET /props, /slots); nothing for engines without slots
function slotWords(r) {
  if (!r.slots_total || value(r.slots_total) === null) return '';
  const busy = value(r.slots_busy);
  const ctx = value(r.context_tokens);
  return ` · ${busy === null ? '–' : num(busy)} of ${num(value(r.slots_total))} slots busy` +
    `${ctx === null ? '' : `, ${num(ctx)} tokens of context each`}`;
}

// ---- chapter 6: the KV pool, filled to the fraction in use --------------------------------------------------
function drawPool(p, r) {
  const kv = value(r.kv_usage);
  if (kv === null) {
    p.readouts.textContent = `No KV-cache usage from this engine: ${r.kv_usage.note}`;
  } else {
    const width = Math.max(260, Math.round(p.picture.clientWidth) || 600);
    const cols = width >= 560 ? 32 : 16;
    const cell = width / cols, cellH = Math.max(10, Math.min(cell, 18));
    const rows = Math.ceil(CELLS / cols);
    const used = Math.round(Math.min(1, Math.max(0, kv)) * CELLS);
    const what = (r.kv_usage.metric || '').startsWith('GET /slots')
      ? 'of its slots’ context held in their KV cells' : 'of its KV cache in use';
    const root = svg('svg', { viewBox: `0 0 ${width} ${rows * cellH}`, width: '100%', class: 'ta-svg', role: 'img',
      'aria-label': `${p.view.name}: ${pct(kv)} ${what}` }, p.picture);
    for (let b = 0; b < CELLS; b++) {
      svg('rect', { x: (b % cols) * cell + 0.5, y: Math.floor(b / cols) * cellH + 0.5, width: cell - 1,
        height: cellH - 1, rx: 1.5, class: b < used ? 'ta-used' : 'ta-free' }, root);
    }
    p.readouts.textContent = `${pct(kv)} ${what} (each cell is 1/${CELLS} of the pool) · ` +
      `${num(value(r.running) ?? 0)} requests running, ${num(value(r.waiting) ?? 0)} waiting · prefix-cache hit rate ` +
      `${value(r.prefix_cache_hit_rate) === null ? '–' : pct(value(r.prefix_cache_hit_rate))} · ` +
      `${value(r.preemptions) === null ? 'no preemption count' : `${fixed(value(r.preemptions), 0)} preempted so far`}.`;
  }
}

// ---- each figure's metric, or why it is missing ---------------------------------------------------------------
function names(p, r) {
  const rows = p.opts.kind === 'lanes'
    ? [['running', r.running], ['waiting', r.waiting], ['tokens/s written', r.generation_tokens_per_s],
        ['time to first token', r.ttft_p50_s], ['between tokens', r.itl_p50_s]]
    : [['KV usage', r.kv_usage], ['prefix-cache hit rate', r.prefix_cache_hit_rate], ['preempted', r.preemptions]];
  if (p.opts.kind === 'lanes' && r.slots_total && value(r.slots_total) !== null) {
    rows.push(['slots', r.slots_total], ['slots busy', r.slots_busy]);
  }
  p.metrics.append('Where each figure comes from: ');
  rows.forEach(([what, f], k) => {
    if (k) p.metrics.append(' · ');
    p.metrics.append(`${what} = `);
    if (f.metric) h('code', { text: f.metric, class: 'ta-metric' }, p.metrics);
    else p.metrics.append('none');
    if (value(f) === null || what === 'KV usage') p.metrics.append(` (${f.note.replace(/\.$/, '')})`);
  });
  p.metrics.append('.');
}
