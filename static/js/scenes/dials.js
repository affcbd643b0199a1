// scenes/dials.js: chapter 11: the whole server's TTFT, tokens/s, cost and spare memory, its memory, roof and a chat.

import { h, clear } from '../lib/svg.js';
import { num, pct, bytes, duration, usd, plural } from '../lib/format.js';
import { mathDetails } from '../lib/math.js';
import { tween, lerp } from '../lib/tween.js';
import { sceneRoot, readoutRow, readout } from '../lib/scene-kit.js';
import { createMemoryBar, createCurve } from './dials-memory.js';
import { createChat } from './dials-chat.js';
import { createExplain } from './dials-explain.js';
import { createDownload } from './dials-download.js';
import { createSweep } from './dials-sweep.js';
import { createPin } from './dials-pin.js';
import { whenAttached } from '../lib/attached.js';

const minus = (s) => s.replace(/^-/, '−');
const ms = (v) => (v < 1000 ? [num(v, 3), 'ms'] : [num(v / 1000, 3), 's']);
const PRECISION = { bf16: 'BF16', fp16: 'FP16', fp8: 'FP8', int8: 'INT8', int4: 'INT4', nvfp4: 'NVFP4', mxfp4: 'MXFP4' };
// a setup that does not fit has no figures: its cards show none, and the would-be figures sit under `hypothetical`,
// which each card's line names as such ("if it fit: 214 s (hypothetical)")
const fig = (d, k) => (d[k] ?? (d.hypothetical ? d.hypothetical[k] : 0));
const real = (d, k) => (d.hypothetical ? null : fig(d, k));

const READOUTS = [
  { key: 'ttft_ms', label: 'Time to first token', value: (d) => real(d, 'ttft_ms'), would: (d) => fig(d, 'ttft_ms'), fmt: ms, math: ['ttft_ms'],
    sub: (d) => `prefill of ${plural(d.params.batch, 'prompt')} × ${num(d.params.prompt_tokens)} tokens` },
  { key: 'tokens_per_s_per_user', label: 'Tokens/s per user', value: (d) => real(d, 'tokens_per_s_per_user'), would: (d) => fig(d, 'tokens_per_s_per_user'),
    fmt: (v) => [num(v, 3), 'tokens/s'], math: ['tokens_per_s_per_user', 'tpot_ms'],
    sub: (d) => `a new token every ${duration(fig(d, 'tpot_ms'))}` },
  { key: 'tokens_per_s_total', label: 'Tokens/s, all GPUs', value: (d) => real(d, 'tokens_per_s_total'), would: (d) => fig(d, 'tokens_per_s_total'),
    fmt: (v) => [num(v, 3), 'tokens/s'], math: ['tokens_per_s_total'],
    sub: (d) => `${plural(d.params.batch, 'chat')} × ${plural(d.replicas, 'replica')}, ` +
      `${d.throughput_mode === 'continuous' ? 'continuous batching' : 'static batches'}` },
  { key: 'cost_per_million_tokens_usd', label: 'Cost per million tokens', value: (d) => real(d, 'cost_per_million_tokens_usd'), would: (d) => fig(d, 'cost_per_million_tokens_usd'),
    fmt: (v) => [usd(v), ''], math: ['cost_per_million_tokens_usd'],
    sub: (d) => `output tokens, at ${plural(d.params.gpus, 'GPU')} × ${usd(d.params.price_per_gpu_hour)} an hour` },
  { key: 'spare_gb', label: 'Spare memory per GPU', value: (d) => d.memory.spare_gb,
    fmt: (v) => [minus(num(v, 3)), 'GB'], math: ['spare_gb', 'weights_gb', 'kv_cache_gb', 'max_batch'],
    sub: (d) => (d.memory.fits ? `of ${num(d.memory.capacity_gb, 3)} GB` : 'does not fit') },
];
const ROOF_MATH = ['bandwidth_utilization', 'mfu'];

let view = null;
let ctx = null;

export function mount(stage, context) {
  ctx = context;
  const wrap = sceneRoot(stage, 'dials', 'dials');
  const grid = h('div', { class: 'dials-grid' }, wrap); // CSS grid areas: the chat beside the readouts or the roof
  const configLine = h('p', { class: 'dials-config' }, grid);
  const config = h('span', { class: 'config-text' }, configLine);
  const tiles = readoutRow(grid, 'dials-readouts');
  const mathPanel = h('div', { class: 'dials-math', hidden: true, id: 'dials-math' }, grid);
  view = { wrap, config, mathPanel, open: null, data: null, params: null, anim: null,
    readouts: READOUTS.map((r) => readoutTile(tiles, r)) };
  // compare (not in an embed, nor offline: A is priced by GET /api/dials): the pin sits at the end of the config line
  if (!ctx.embed && !offlinePage()) {
    view.pin = createPin(ctx, pinChanged);
    view.pinBar = pinBar(configLine);
    view.pin.fromURL(location.search, ctx.params); // a shared link's A: asked for now, drawn when it arrives
    showPin();
  }
  const body = h('div', { class: 'dials-body' }, grid); // display: contents: its cards are the grid's
  view.mem = createMemoryBar(body);
  view.roof = roofCard(body);
  view.curve = createCurve(body);
  view.chat = createChat(body, ctx);
  // an attached server (the operator's --attach): the question through it, measured beside the prediction
  if (!ctx.embed && !offlinePage()) {
    view.attach = whenAttached(ctx.fetchJSON, () => import('./dials-attach.js'), (m, list) => {
      const card = m.createAttached(wrap, ctx, { question: () => view.chat.question(), after: grid }, list);
      if (view.data) card.update(view.data); // the dials drawn before the card arrived
      return card;
    });
  }
  if (!ctx.embed) view.byo = byoPanel(wrap);
  if (!ctx.embed) view.download = createDownload(wrap);
  if (!ctx.embed) view.sweep = createSweep(wrap, ctx, view.pin);
  if (!ctx.embed) view.explain = createExplain(wrap, ctx, () => ctx.params.gpu);
}

/** An offline bundle (file:// or any static host) has no API to price A with. */
function offlinePage() {
  if (typeof location !== 'undefined' && location.protocol === 'file:') return true;
  const st = typeof document !== 'undefined' && document.getElementById('page-state');
  try { return !!(st && JSON.parse(st.textContent).offline); } catch { return false; }
}

export function unmount() {
  if (!view) return;
  view.chat.destroy();
  if (view.attach) { view.attach.stop(); view.attach.current()?.destroy(); }
  view.curve.cancel();
  view.mem.destroy();
  if (view.anim) view.anim.cancel();
  view = null;
}

export function update(data, params) {
  if (!view) return;
  const prev = view.params, prevData = view.data;
  view.data = data;
  view.params = params;
  view.config.textContent = configText(data);
  tweenReadouts(data);
  view.mem.update(data);
  updateRoof(data);
  view.curve.update(data);
  view.chat.update(data);
  view.attach?.current()?.update(data);
  if (view.explain) view.explain.update();
  if (view.download) view.download.update(params, view.pin ? view.pin.params : null);
  if (view.sweep) view.sweep.update(params);
  if (view.pin) showPin();
  if (view.open) showMath(view.open);
  if (prev) startCustomFrom(prev, prevData, params);
}

// ---- readouts ----------------------------------------------------------------------------------

/** A readout tile whose digits glide (.n, aria-hidden) while its final text waits for screen readers. */
function readoutTile(parent, r) {
  const el = readout(parent, r.label, '');
  el.dataset.key = r.key;
  const value = el.querySelector('.value');
  const n = h('span', { class: 'n', 'aria-hidden': 'true' }, value);
  const unit = h('span', { class: 'unit', 'aria-hidden': 'true' }, value);
  const said = h('span', { class: 'visually-hidden' }, value);
  const sub = h('span', { class: 'sub' }, el);
  const vs = h('span', { class: 'vs' }, el); // A beside B: shown (its line reserved) while a setup is pinned
  const btn = h('button', { type: 'button', class: 'math-btn', text: 'show the math', 'aria-expanded': 'false',
    'aria-controls': 'dials-math', 'aria-label': `Show the math: ${r.label}` }, el);
  btn.addEventListener('click', () => toggleMath(r.key, r.math));
  return { r, el, n, unit, said, sub, vs, btn, shown: null };
}

const NONE = ['—', 'does not fit'];

function writeReadout(o, v) {
  const [text, unit] = v === null ? NONE : o.r.fmt(v);
  o.n.textContent = text;
  o.unit.textContent = unit;
}

/** Numbers glide from what is on screen to the new answer (geometric when both are positive). */
function tweenReadouts(d) {
  if (view.anim) view.anim.cancel();
  const to = view.readouts.map((o) => o.r.value(d));
  const from = view.readouts.map((o, i) => (o.shown === null ? to[i] : o.shown));
  view.readouts.forEach((o, i) => {
    const [text, unit] = to[i] === null ? NONE : o.r.fmt(to[i]);
    o.said.textContent = `${text} ${unit}`;
    o.sub.textContent = to[i] === null ? `${o.r.fmt(o.r.would(d)).join(' ').trim()} (hypothetical)` : o.r.sub(d); // after CSS's "if it fit: "
    o.el.dataset.hypothetical = String(to[i] === null);
  });
  view.readouts.forEach((o, i) => o.el.classList.toggle(i === 4 ? 'bad' : 'moot', !d.memory.fits));
  view.anim = tween(350, (t) => view.readouts.forEach((o, i) => {
    const a = from[i], b = to[i];
    if (b === null || a === null) { o.shown = b; writeReadout(o, b); return; } // no figure: no glide
    o.shown = a > 0 && b > 0 ? Math.exp(lerp(Math.log(a), Math.log(b), t)) : lerp(a, b, t);
    writeReadout(o, t === 1 ? b : o.shown);
  }));
}

function configText(d) {
  const m = d.model, p = d.params;
  const size = m.is_moe ? `${num(m.params_b, 3)} B parameters, ${num(m.active_params_b, 3)} B active`
    : `${num(m.params_b, 3)} B parameters`;
  return `${m.id === 'custom' ? 'Custom model' : m.name} (${size}) on ${num(p.gpus)} × ${d.gpu.name}: ` +
    `tensor ${p.tp} × pipeline ${p.pp} per replica, ${plural(d.replicas, 'replica')}; ` +
    `${PRECISION[p.precision]} weights, ${PRECISION[p.kv_precision]} KV cache; ` +
    `${plural(p.batch, 'chat')} at once, ${num(p.prompt_tokens)} tokens in, ${num(p.output_tokens)} out.` +
    (d.nodes && d.nodes.spans_nodes ? ` Spans nodes: ${d.nodes.text}.` : '') +
    (d.engine_profile ? ` Priced as ${d.engine_profile}.` : '');
}

// ---- show the math -----------------------------------------------------------------------------

function toggleMath(key, keys) {
  view.open = view.open && view.open.key === key ? null : { key, keys };
  for (const o of [...view.readouts, view.roof]) o.btn.setAttribute('aria-expanded', String(!!view.open && o.r.key === view.open.key));
  if (!view.open) { view.mathPanel.hidden = true; return; }
  showMath(view.open);
}

const TITLES = { ttft_ms: 'Time to first token', tpot_ms: 'Time per output token', tokens_per_s_per_user:
  'Tokens/s per user', tokens_per_s_total: 'Tokens/s, all GPUs', cost_per_million_tokens_usd: 'Cost per million output tokens',
  spare_gb: 'Spare memory per GPU', weights_gb: 'Weights per GPU', kv_cache_gb: 'KV cache per GPU',
  max_batch: 'Largest batch that fits', bandwidth_utilization: 'HBM bandwidth in use', mfu: 'Math in use (MFU)' };

function showMath({ keys }) {
  const p = clear(view.mathPanel);
  p.hidden = false;
  const close = h('button', { type: 'button', class: 'btn close', text: 'Close', 'aria-label': 'Close the math' }, p);
  close.addEventListener('click', () => toggleMath(view.open.key));
  for (const k of keys) {
    const det = mathDetails(view.data.math[k], `${TITLES[k]}: how it is computed`);
    det.open = true;
    p.appendChild(det);
  }
}

// ---- which roof binds ----------------------------------------------------------------------------

function meter(parent, label, cls) {
  const row = h('div', { class: `roof-meter ${cls}` }, parent);
  h('span', { class: 'meter-label', text: label }, row);
  const track = h('span', { class: 'track' }, row);
  const fill = h('span', {}, track);
  const val = h('b', {}, row);
  return { fill, val, set(f) { fill.style.width = `${Math.min(100, f * 100)}%`; val.textContent = pct(f); } };
}

function roofCard(parent) {
  const box = h('section', { class: 'dials-card dials-roof', 'aria-labelledby': 'dials-roof-title', 'data-narrow-secondary': '' }, parent);
  const head = h('div', { class: 'card-head' }, box);
  h('h3', { id: 'dials-roof-title', text: 'Which roof binds' }, head);
  const btn = h('button', { type: 'button', class: 'math-btn', text: 'show the math', 'aria-expanded': 'false',
    'aria-controls': 'dials-math', 'aria-label': 'Show the math: bandwidth and math in use' }, head);
  const o = { r: { key: 'roof' }, btn };
  btn.addEventListener('click', () => toggleMath('roof', ROOF_MATH));
  const verdict = h('p', { class: 'roof-verdict' }, box);
  o.pill = h('b', { class: 'pill' }, verdict);
  o.text = h('span', {}, verdict);
  o.bw = meter(box, 'HBM bandwidth in use, decoding', 'bw');
  o.mfu = meter(box, 'Math in use (MFU), whole answer', 'mfu');
  o.prefill = h('p', { class: 'card-note' }, box);
  return o;
}

function updateRoof(d) {
  const o = view.roof;
  const step = (d.math.tpot_ms.inputs || []).find((i) => i.name === 'bytes_per_step');
  const memory = d.bound === 'memory';
  o.pill.className = `pill ${memory ? 'memory' : 'compute'}`;
  o.pill.textContent = memory ? 'Memory-bound' : 'Compute-bound';
  const gpus = d.params.tp * d.params.pp;
  const where = gpus > 1 ? ` across ${plural(gpus, 'GPU')}` : '';
  const per = step ? `reads ${bytes(step.value)} of weights and KV cache${where}` : 'reads every weight';
  const kvHeavy = d.memory.kv_cache_gb > d.memory.weights_gb;
  const writes = `to write just ${plural(d.params.batch, 'token')} (one per chat)`;
  o.text.textContent = !memory
    ? ` The batch is big enough that the tensor cores, not memory, set the pace of each decode step (it ${per}).`
    : kvHeavy
      ? ` Each decode step ${per} ${writes}, and most of it is the chats' KV cache, which grows with every chat and every token. More chats no longer come for free: a smaller KV cache (FP8) or shorter chats do help.`
      : ` Each decode step ${per} ${writes}, so the math units mostly wait. A bigger batch spreads the same weight reads over more tokens.`;
  o.bw.set(fig(d, 'bandwidth_utilization'));
  o.mfu.set(fig(d, 'mfu'));
  o.prefill.textContent = `Prefill, the prompts' pass before the first token, is ${d.prefill_bound}-bound.`;
}

// ---- bring your own model ----------------------------------------------------------------------

/** Switching the model (or GPU) select to custom starts from the one that was on screen. */
function startCustomFrom(prev, d, params) {
  const copy = (fields) => Object.entries(fields).forEach(([k, v]) => { if (ctx.params[k] !== v) ctx.setParam(k, v); });
  if (prev.model !== 'custom' && params.model === 'custom' && !view.byoPending && d.model.id !== 'custom') {
    copy(d.model.dials_params);
  }
  if (prev.gpu !== 'custom' && params.gpu === 'custom' && d.gpu.id !== 'custom') copy(d.gpu.dials_params);
  view.byoPending = false;
}

function byoPanel(parent) {
  const box = h('details', { class: 'dials-byo' }, parent);
  h('summary', { text: 'Bring your own model: paste a Hugging Face config.json' }, box);
  const form = h('form', {}, box);
  const area = h('textarea', { rows: 6, spellcheck: 'false', 'aria-label': 'config.json',
    placeholder: '{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, ...}' }, form);
  h('button', { type: 'submit', class: 'btn primary', text: 'Use this model' }, form);
  const out = h('p', { class: 'card-note', role: 'status' }, box);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    let cfg;
    try { cfg = JSON.parse(area.value); } catch (err) { out.textContent = `Not valid JSON: ${err.message}`; return; }
    try {
      const m = await ctx.fetchJSON('/api/catalog/models', { body: cfg });
      out.textContent = `${m.name}: ${num(m.params_b, 3)} B parameters${m.is_moe ? ` (${num(m.active_params_b, 3)} B active)` : ''}, ` +
        `${bytes(m.kv_bytes_per_token)} of KV cache per token at BF16. Now on the dials as the custom model.`;
      view.byoPending = true;
      for (const [k, v] of Object.entries(m.dials_params)) ctx.setParam(k, v);
    } catch (err) {
      out.textContent = `Could not use it: ${err.message}`;
    }
  });
  return box;
}

// ---- compare: A (pinned) beside B (the dials now) ---------------------------------------------------

/** The URL's part the scene keeps (tour.js asks after each draw): the pinned A against the dials' B. */
export function urlParams() {
  return view && view.pin && view.params ? view.pin.query(view.params) : {};
}

const LOWER_BETTER = new Set(['ttft_ms', 'cost_per_million_tokens_usd']);
const SHORT = { model: 'model', gpu: 'GPU', gpus: 'GPUs', tp: 'tensor', pp: 'pipeline', precision: 'weights',
  kv_precision: 'KV cache', batch: 'batch', prompt_tokens: 'prompt', output_tokens: 'answer',
  price_per_gpu_hour: '$/GPU-hour', throughput_mode: 'tokens/s counts', engine: 'engine' };

function pinBar(parent) {
  const bar = h('span', { class: 'pin-bar' }, parent);
  const note = h('span', { class: 'pin-note', id: 'dials-pin-note', role: 'status' }, bar);
  const btn = h('button', { type: 'button', class: 'pin-btn', id: 'dials-pin', text: 'Pin as A to compare' }, bar);
  btn.addEventListener('click', () => (view.pin.params ? view.pin.clear() : view.pin.set(ctx.params)));
  return { btn, note };
}

function pinChanged() {
  if (!view) return;
  showPin();
  if (view.sweep) view.sweep.refresh();
  if (view.download && view.params) view.download.update(view.params, view.pin.params);
  if (view.params) document.dispatchEvent(new CustomEvent('inside-llm:url')); // tour.js writes `a` into the address
}

/** How A differs from B, in a few words: "A: batch 16 (B 64), weights fp8 (B bf16)". */
function differences(a, b) {
  const keys = Object.keys(b).filter((k) => String(a[k]) !== String(b[k]));
  if (!keys.length) return 'Pinned as A: change a dial to compare.';
  const v = (k, x) => (PRECISION[x] && k.endsWith('precision') ? PRECISION[x] : x);
  const said = keys.slice(0, 4).map((k) => `${SHORT[k] || k} ${v(k, a[k])} (B ${v(k, b[k])})`);
  return `Pinned A: ${said.join(', ')}${keys.length > 4 ? `, and ${keys.length - 4} more` : ''}.`;
}

/** One card's A line: A's figure and B's difference from it (+/− %, or GB for spare memory). */
function vsLine(o, a, b) {
  if (!a) return { text: 'A …', cls: '', va: null, vb: null };
  const va = o.r.value(a), vb = o.r.value(b);
  const [t, u] = va === null ? ['does not fit', ''] : o.r.fmt(va);
  // the card's unit, said where it may differ from the card's (s or ms); GB is said once, by the difference
  const sa = u === 'tokens/s' || u === 'GB' ? t : `${t} ${u}`.trim();
  if (va === null || vb === null) return { text: `A ${sa}`, cls: '', va, vb };
  const gb = o.r.key === 'spare_gb';
  const x = gb ? vb - va : va === 0 ? 0 : vb / va - 1;
  const same = gb ? Math.abs(x) < 0.005 : Math.abs(x) < 0.0005;
  const d = same ? 'same' : `${x > 0 ? '+' : '−'}${gb ? `${num(Math.abs(x), 3)} GB` : `${num(Math.abs(100 * x), 2)}%`}`;
  const better = LOWER_BETTER.has(o.r.key) ? x < 0 : x > 0;
  const title = `${o.r.label}: A (pinned) ${o.r.fmt(va).join(' ').trim()}, B (the dials now) ${o.r.fmt(vb).join(' ').trim()}` +
    `${same ? ', the same' : `: B is ${d.slice(1)} ${x > 0 ? 'more' : 'less'}`}${same ? '' : better ? ', better' : ', worse'}.`;
  return { text: `A ${sa} · B ${d}`, cls: same ? '' : better ? 'better' : 'worse', va, vb, title };
}

function showPin() {
  const p = view.pin, bar = view.pinBar;
  const on = !!p.params;
  view.wrap.classList.toggle('pinned', on);
  bar.btn.textContent = on ? 'Unpin A' : 'Pin as A to compare';
  bar.btn.setAttribute('aria-pressed', String(on));
  bar.note.textContent = on && view.params ? differences(p.params, view.params) : p.error;
  bar.note.classList.toggle('problem', !on && !!p.error);
  for (const o of view.readouts) {
    const line = on && view.data ? vsLine(o, p.data, view.data) : { text: '', cls: '', va: null, vb: null };
    o.vs.textContent = line.text;
    o.vs.title = line.title || '';
    o.vs.className = `vs ${line.cls}`.trim();
    o.vs.dataset.a = line.va === null ? '' : String(line.va);
    o.vs.dataset.b = line.vb === null ? '' : String(line.vb);
  }
}
