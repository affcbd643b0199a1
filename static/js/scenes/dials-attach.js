// scenes/dials-attach.js: chapter 11's "That server: your question": when the tour's operator attached a serving
// engine (`inside-llm serve --attach NAME=URL`), the visitor's question goes through it, and its measured time to
// first token and inter-token time sit beside the dials' prediction for the setup the dials show, with the error.
//
// The page names the server by the operator's name only (a picker when several are attached), never an address:
// POST /api/attach/{name}/chat carries the question, an answer length and the dials' model, GPU, GPU count,
// sharding and precision (the cost model's inputs). The tour's server relays the question to that server's
// /v1/chat/completions and streams the answer back as server-sent events, read here from fetch's body; it measures
// the answer as it passes (so the browser's own network is not in the figures) and prices the setup for this one
// question (batch 1) at the lengths the server counted. When the operator also allowed measure runs
// (`--attach-measure`), a small load run (POST /api/attach/{name}/measure, then its progress polled) ends in the
// table `inside-llm measure` prints. No server attached, an offline copy, or an embed: nothing of this appears.

import { h, clear } from '../lib/svg.js';
import { formatDetail, toQuery } from '../lib/api.js';
import { num, duration } from '../lib/format.js';
import { sceneStyles } from '../lib/scene-kit.js';

const SETUP_KEYS = ['model', 'gpu', 'gpus', 'tp', 'pp', 'precision', 'kv_precision', 'engine'];
const CHAT_MAX_TOKENS = 128; // as the chat box: a chat UI's default, capped by the dials' answer length
const POLL_MS = 500;
const PRECISION = { bf16: 'BF16', fp16: 'FP16', fp8: 'FP8', int8: 'INT8', int4: 'INT4', nvfp4: 'NVFP4', mxfp4: 'MXFP4' };
const RUN_FIELDS = [ // the measure run's inputs: [body key, label, default, max]
  ['requests', 'Requests', 16, 256], ['concurrency', 'At a time', 4, 64],
  ['prompt_tokens', 'Prompt (words)', 128, 4096], ['output_tokens', 'Answer (tokens)', 64, 1024],
];

/** Signed error in percent, "+12%" or "−44%" (the cost model's miss: (measured − predicted) / predicted). */
function errText(e) {
  if (e === null || e === undefined) return '—';
  const mag = Math.abs(e) < 9.95 ? num(Math.abs(e), 2) : num(Math.round(Math.abs(e)), 9);
  return `${e >= 0 ? '+' : '−'}${mag}%`;
}

const ms = (v) => (v === null || v === undefined ? '—' : duration(v));

/**
 * The card after `after` (the dials' grid) for `list`, GET /api/attach's answer naming at least one server
 * (lib/attached.js whenAttached asks, and loads this module only then). opts: { question() → the chat
 * box's question, after }. Returns { update(dials data), destroy() }.
 */
export function createAttached(parent, ctx, opts, list) {
  const a = { ctx, opts, parent, el: null, name: null, data: null, ctrl: null, timer: 0, gone: false, allowed: [],
    last: null, lastRun: null, seq: 0 };
  begin(a, list);
  return { update: (d) => update(a, d), destroy: () => destroy(a), card: () => a.el };
}

/** New dials: the setup line, and the predictions beside what was measured re-priced for the setup they show now. */
function update(a, d) {
  a.data = d;
  if (!a.el) return;
  setupLine(a);
  reprice(a);
}

function begin(a, list) {
  sceneStyles('dials-attach');
  a.allowed = list.measure || [];
  build(a, list.servers);
  pick(a, list.servers[0].name);
}

function destroy(a) {
  a.gone = true;
  if (a.ctrl) a.ctrl.abort();
  clearTimeout(a.timer);
}

function build(a, servers) {
  const el = h('section', { class: 'dials-card dials-attach', 'aria-labelledby': 'dials-attach-title', 'data-state': 'idle' });
  const after = a.opts.after;
  (after && after.parentNode ? after.parentNode : a.parent).insertBefore(el, after ? after.nextSibling : null);
  a.el = el;
  const head = h('div', { class: 'card-head' }, el);
  h('h3', { id: 'dials-attach-title', text: 'That server: your question' }, head);
  if (servers.length > 1) {
    const label = h('label', { class: 'da-pick' }, head);
    label.append('Server ');
    const select = h('select', {}, label);
    for (const s of servers) h('option', { value: s.name, text: s.name }, select);
    select.addEventListener('change', () => pick(a, select.value));
  }
  a.setup = h('p', { class: 'card-note da-setup' }, el);
  const form = h('form', { class: 'da-ask' }, el);
  a.send = h('button', { class: 'btn primary', type: 'submit' }, form);
  a.sendNote = h('span', { class: 'da-send-note' }, form);
  form.addEventListener('submit', (ev) => { ev.preventDefault(); ask(a); });
  a.answer = h('p', { class: 'bubble bot da-answer', hidden: true }, el);
  const table = h('table', { class: 'da-table' }, el);
  h('caption', { class: 'visually-hidden', text: 'The attached server\'s answer, measured, beside the dials\' prediction' }, table);
  const hr = h('tr', {}, h('thead', {}, table));
  for (const t of ['', 'Predicted', 'Measured', 'Error']) h('th', { scope: 'col', text: t }, hr);
  hr.firstChild.textContent = 'This question';
  const body = h('tbody', {}, table);
  a.rows = {};
  for (const [key, label] of [['ttft', 'Time to first token'], ['itl', 'Inter-token time']]) {
    const tr = h('tr', { 'data-key': key }, body);
    h('th', { scope: 'row', text: label }, tr);
    a.rows[key] = { pred: h('td', { class: 'pred', text: '—' }, tr), meas: h('td', { class: 'meas', text: '—' }, tr),
      err: h('td', { class: 'err', text: '—' }, tr) };
  }
  a.foot = h('p', { class: 'card-note da-foot', role: 'status' }, el);
  a.run = runBlock(a, el);
}

function pick(a, name) {
  a.name = name;
  a.el.dataset.name = name;
  a.send.textContent = `Send the question through ${name}`;
  if (a.ctrl) a.ctrl.abort();
  a.el.dataset.state = 'idle';
  a.answer.hidden = true;
  for (const r of Object.values(a.rows)) for (const td of Object.values(r)) { td.textContent = '—'; td.className = td.className.split(' ')[0]; }
  a.last = null;
  a.lastRun = null;
  a.foot.textContent = `Measured at this tour's server as ${name}'s answer passes through it; predicted by the dials' ` +
    'cost model for the setup above, this one question alone.';
  setupLine(a);
  if (a.run) showRunBlock(a);
}

function setup(a) {
  const p = a.ctx.params || {};
  return Object.fromEntries(SETUP_KEYS.filter((k) => p[k] !== undefined).map((k) => [k, p[k]]));
}

function custom(a) {
  const p = a.ctx.params || {};
  return p.model === 'custom' || p.gpu === 'custom';
}

/** What the dials say the server runs on, in words; a custom model or GPU cannot be priced by name here. */
function setupLine(a) {
  const d = a.data, p = a.ctx.params || {};
  if (!a.el || !d) return;
  const what = `${d.model.id === 'custom' ? 'a custom model' : d.model.name} on ${num(p.gpus)} × ${d.gpu.name}, ` +
    `tensor ${p.tp} × pipeline ${p.pp}, ${PRECISION[p.precision] || p.precision} weights`;
  a.setup.textContent = `Ask ${a.name || 'the attached server'} (attached by this tour's operator) the question in the ` +
    `chat box. Say what it runs on with the dials: now ${what}.`;
  const blocked = custom(a);
  a.send.setAttribute('aria-disabled', String(blocked));
  a.sendNote.textContent = blocked ? 'Pick a catalog model and GPU on the dials to compare: a custom one is not priced here.' : '';
  if (a.run) a.run.start.setAttribute('aria-disabled', String(blocked || a.run.going));
}

// ---- one question ----------------------------------------------------------------------------------------

async function ask(a) {
  if (custom(a)) return;
  if (a.ctrl) a.ctrl.abort();
  const ctrl = new AbortController();
  a.ctrl = ctrl;
  const want = Math.min(CHAT_MAX_TOKENS, (a.data && a.data.params && a.data.params.output_tokens) || CHAT_MAX_TOKENS);
  const body = { prompt: a.opts.question(), max_tokens: want, ...setup(a) };
  a.el.dataset.state = 'asking';
  clear(a.answer);
  a.answer.hidden = false;
  a.answer.textContent = '…';
  a.foot.textContent = `Asking ${a.name}…`;
  let res;
  try {
    res = await fetch(`/api/attach/${encodeURIComponent(a.name)}/chat`, { method: 'POST', signal: ctrl.signal,
      body: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
  } catch (err) {
    if (err.name !== 'AbortError') fail(a, 'this tour\'s server did not answer');
    return;
  }
  if (!res.ok) {
    const j = await res.json().catch(() => ({}));
    fail(a, formatDetail(res.status, j.detail));
    return;
  }
  let started = false;
  try {
    await readEvents(res.body, (event, data) => {
      if (ctrl.signal.aborted) return;
      if (event === 'start') { a.model = data.model; a.foot.textContent = `${a.name} (${data.model}) is answering…`; }
      if (event === 'token') {
        if (!started) { clear(a.answer); started = true; }
        h('span', { class: 'tok', text: data.text }, a.answer);
      }
      if (event === 'done') done(a, data);
      if (event === 'error') fail(a, data.detail);
    });
  } catch (err) {
    if (err.name !== 'AbortError') fail(a, 'the answer\'s stream broke off');
  }
}

/** Server-sent events from a fetch body: onEvent(name, data) per event. */
async function readEvents(stream, onEvent) {
  const reader = stream.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      let name = 'message', data = '';
      for (const line of block.split('\n')) {
        if (line.startsWith('event: ')) name = line.slice(7);
        else if (line.startsWith('data: ')) data += line.slice(6);
      }
      if (data) onEvent(name, JSON.parse(data));
    }
  }
}

function fail(a, msg) {
  a.el.dataset.state = 'error';
  if (a.answer.textContent === '…') a.answer.hidden = true;
  a.foot.textContent = `No measurement: ${msg}`;
}

function done(a, d) {
  a.last = d;
  d.shownFor = d.setup;
  a.lastNames = names(a);
  a.el.dataset.state = 'done';
  showChat(a, d.predicted, d.setup);
  reprice(a); // the dials may have moved while it answered
  if (a.ctx.announce) a.ctx.announce(`${a.name} answered: first token after ${ms(d.ttft_ms)}.`);
}

/** The dials' model and GPU names for the setup now on them (the ids when the dials have not answered yet). */
function names(a) {
  const p = a.ctx.params || {}, d = a.data;
  return { model: d ? d.model.name : p.model, gpu: d ? d.gpu.name : p.gpu };
}

const err = (m, q) => (m === null || m === undefined || !q ? null : (100 * (m - q)) / q);

/** The last answer's measured figures beside prediction p (for setup s), with the error. */
function showChat(a, p, s) {
  const d = a.last;
  p = p || {};
  const set = (key, pred, meas) => {
    const r = a.rows[key], e = err(meas, pred);
    r.pred.textContent = ms(pred);
    r.meas.textContent = ms(meas);
    r.err.textContent = errText(e);
    r.err.className = `err ${e === null ? '' : e > 0 ? 'slower' : 'faster'}`.trim();
    r.meas.dataset.value = meas ?? '';
    r.pred.dataset.value = pred ?? '';
    r.err.dataset.value = e ?? '';
  };
  set('ttft', p.ttft_ms, d.ttft_ms);
  set('itl', p.itl_ms, d.itl_ms);
  s = s || {};
  const n = a.lastNames || {};
  const lengths = `${num(d.prompt_tokens ?? 0)} tokens in, ${num(d.output_tokens)} out`;
  const priced = p.ttft_ms !== undefined
    ? ` Predicted for ${n.model} on ${num(s.gpus)} × ${n.gpu} (tensor ${s.tp} × pipeline ${s.pp}, ` +
      `${PRECISION[s.precision] || s.precision}), this question alone (batch 1), ${lengths}, as ${p.engine_profile}.` +
      (p.fits === false ? ' This setup does not fit in memory, so the prediction is what it would do if it could run.' : '')
    : ` ${d.no_prediction || 'No prediction for this setup.'}`;
  a.foot.textContent = `${a.name} (${d.model}) wrote ${num(d.output_tokens)} tokens, measured at this tour's server ` +
    `as they passed.${priced} Error: (measured − predicted) / predicted.`;
}

/** The cost model for the dials' setup now (GET /api/dials, continuous batching) at this batch and these lengths. */
async function price(a, batch, prompt, output) {
  const q = toQuery({ ...setup(a), batch, prompt_tokens: Math.max(1, Math.round(prompt)),
    output_tokens: Math.max(1, Math.round(output)), throughput_mode: 'continuous' });
  const d = await a.ctx.fetchJSON(`/api/dials?${q}`);
  const f = (k) => d[k] ?? (d.hypothetical ? d.hypothetical[k] : null);
  return { ttft_ms: f('ttft_ms'), itl_ms: f('tpot_ms'), tpot_ms: f('tpot_ms'), tokens_per_s_total: f('tokens_per_s_total'),
    fits: d.memory.fits, engine_profile: d.engine_profile, batch };
}

const sameSetup = (x, y) => SETUP_KEYS.every((k) => x && y && String(x[k]) === String(y[k]));

/** Dials moved after a measurement: its prediction follows them (latest answer wins); a custom setup has none. */
function reprice(a) {
  const now = setup(a), seq = ++a.seq;
  const stale = (x) => x && !sameSetup(x.shownFor, now);
  if (a.last && stale(a.last)) {
    a.last.shownFor = now;
    if (custom(a) || !a.last.prompt_tokens) showChat(a, null, now);
    else price(a, 1, a.last.prompt_tokens, a.last.output_tokens).then((p) => {
      if (seq === a.seq && a.last) { a.lastNames = names(a); showChat(a, p, now); }
    }, () => {});
  }
  if (a.lastRun && stale(a.lastRun)) {
    const s = a.lastRun.summary;
    a.lastRun.shownFor = now;
    if (custom(a) || !s.finished) runTable(a, s, null);
    else price(a, s.concurrency, s.prompt_tokens_mean || 1, s.output_tokens_mean || 1).then((p) => {
      if (seq === a.seq && a.lastRun) runTable(a, s, p);
    }, () => {});
  }
}

// ---- a measure run (the operator's --attach-measure) --------------------------------------------------------

function runBlock(a, el) {
  const box = h('div', { class: 'da-run', hidden: true }, el);
  h('h4', { text: 'Measure it under load' }, box);
  const form = h('form', { class: 'da-run-form' }, box);
  const inputs = {};
  for (const [key, label, value, max] of RUN_FIELDS) {
    const l = h('label', {}, form);
    h('span', { text: label }, l);
    inputs[key] = h('input', { type: 'number', min: 1, max, step: 1, value: String(value), name: key }, l);
  }
  const start = h('button', { class: 'btn', type: 'submit', text: 'Start the run' }, form);
  const bar = h('div', { class: 'da-progress', hidden: true }, box);
  const progress = h('progress', { max: 1, value: 0, 'aria-label': 'Requests ended' }, bar);
  const count = h('span', { class: 'da-count' }, bar);
  const table = h('table', { class: 'da-run-table', hidden: true }, box);
  h('caption', { class: 'visually-hidden', text: 'The measure run beside the cost model\'s prediction' }, table);
  const hr = h('tr', {}, h('thead', {}, table));
  ['', 'Mean', 'Median', 'p95', 'Predicted', 'Error'].forEach((t, i) => h('th', { scope: 'col', text: t, class: i === 1 || i === 3 ? 'extra' : '' }, hr));
  const tbody = h('tbody', {}, table);
  const note = h('p', { class: 'card-note da-run-note', role: 'status' }, box);
  const r = { box, form, inputs, start, bar, progress, count, table, tbody, note, going: false };
  form.addEventListener('submit', (ev) => { ev.preventDefault(); startRun(a); });
  return r;
}

function showRunBlock(a) {
  const r = a.run;
  clearTimeout(a.timer);
  r.box.hidden = !a.allowed.includes(a.name);
  r.bar.hidden = true;
  r.table.hidden = true;
  r.note.textContent = '';
  if (!r.box.hidden) poll(a); // a run already going (or done) against this server shows itself
}

async function startRun(a) {
  const r = a.run;
  if (r.going || custom(a)) return;
  const body = { ...setup(a) };
  for (const [key] of RUN_FIELDS) body[key] = Number(r.inputs[key].value);
  try {
    const job = await a.ctx.fetchJSON(`/api/attach/${encodeURIComponent(a.name)}/measure`, { body });
    showJob(a, job);
  } catch (err) {
    r.note.textContent = `Not started: ${err.message}`;
  }
}

async function poll(a) {
  const name = a.name;
  let job;
  try {
    job = await a.ctx.fetchJSON(`/api/attach/${encodeURIComponent(name)}/measure`);
  } catch (err) {
    if (!a.gone && name === a.name) a.run.note.textContent = `Cannot read the run: ${err.message}`;
    return;
  }
  if (!a.gone && name === a.name) showJob(a, job);
}

function showJob(a, job) {
  const r = a.run;
  clearTimeout(a.timer);
  r.box.dataset.state = job.state;
  r.box.dataset.progress = String(job.progress);
  r.going = job.state === 'starting' || job.state === 'running';
  r.start.setAttribute('aria-disabled', String(r.going || custom(a)));
  if (job.state === 'none') return;
  r.bar.hidden = false;
  r.progress.value = job.progress;
  r.count.textContent = `${num(job.ended)} of ${num(job.requests)} requests ended` +
    (job.state === 'done' ? `, ${num(job.finished)} with an answer` : job.state === 'failed' ? '' : '…');
  if (r.going) {
    a.lastRun = null;
    r.table.hidden = true; // the last run's table goes; this one's comes when it ends
    r.note.textContent = `Running ${num(job.requests)} requests against ${a.name}, ${num(job.concurrency)} at a time…`;
    a.timer = setTimeout(() => poll(a), POLL_MS);
    return;
  }
  if (job.state === 'failed') { r.note.textContent = `The run failed: ${job.error}`; return; }
  a.lastRun = { summary: job.summary, shownFor: job.setup };
  runTable(a, job.summary, job.summary.predicted);
  reprice(a); // the dials may show another setup than the run was priced for
}

/** The run's table: measured (mean, median, p95) beside prediction p, the error against the median. */
function runTable(a, s, p) {
  const r = a.run;
  clear(r.tbody);
  r.table.hidden = false;
  p = p || {};
  const m = s.measured;
  const med = (x) => (x && typeof x === 'object' ? x.median : x);
  const e = { ttft_ms: err(med(m.ttft_ms), p.ttft_ms), tpot_ms: err(med(m.tpot_ms), p.tpot_ms),
    output_tokens_per_s: err(m.output_tokens_per_s, p.tokens_per_s_total) };
  const rate = (v) => (v === null || v === undefined ? '—' : `${num(v, 3)}/s`);
  const rows = [
    ['Time to first token', m.ttft_ms, p.ttft_ms, e.ttft_ms, ms],
    ['Time per output token', m.tpot_ms, p.tpot_ms, e.tpot_ms, ms],
    ['Output tokens/s', m.output_tokens_per_s, p.tokens_per_s_total, e.output_tokens_per_s, rate],
  ];
  for (const [label, meas, pred, err, f] of rows) {
    const tr = h('tr', {}, r.tbody);
    h('th', { scope: 'row', text: label }, tr);
    const stats = meas && typeof meas === 'object' ? [meas.mean, meas.median, meas.p95] : [null, meas, null];
    stats.forEach((v, i) => h('td', { class: i === 1 ? 'median' : 'extra', text: v === null || v === undefined ? '—' : f(v) }, tr));
    h('td', { class: 'pred', text: pred === null || pred === undefined ? '—' : f(pred) }, tr);
    h('td', { class: 'err', text: errText(err), 'data-value': err ?? '' }, tr);
  }
  const unfinished = s.unfinished ? `; ${num(s.unfinished)} not finished (stopped at the time cap)` : '';
  const failed = Object.entries(s.failed || {}).map(([why, n]) => `${n} × ${why}`).join(', ');
  r.note.textContent = `${num(s.finished)} of ${num(s.requests)} requests finished, ${num(s.concurrency)} at a time, ` +
    `in ${num(s.wall_s, 3)} s${failed ? `; failed: ${failed}` : ''}${unfinished}; ` +
    `${num(s.prompt_tokens_mean ?? 0, 3)} tokens in and ${num(s.output_tokens_mean ?? 0, 3)} out per request as ` +
    `${a.name} counted them. Predicted for the dials' setup at batch ${num(s.concurrency)} (continuous batching)` +
    `${p.engine_profile ? `, as ${p.engine_profile}` : ': none for a custom model or GPU'}; the error compares the median.`;
}
