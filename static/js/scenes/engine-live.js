// scenes/engine-live.js: "This server, now": the tour's own serving engine (GET /api/engine and its feed), drawn
// beside a chapter's simulation in the simulation's own vocabulary. Chapter 7 draws seats as lanes over the last
// seconds with the queue stacked at their left ('lanes'); chapter 6 draws the pool of key/value pages, each chat's
// pages in its colour ('pages'). "Load it" starts a few demo chats (POST /api/engine/demo) so that a lone visitor
// can watch batching happen. Only progress is shown, never a chat's text (the API carries none). Under the picture,
// each drawn figure is named by the Prometheus series this server's GET /metrics gives it (vLLM v1's names), and
// "Load it yourself" shows the curl and openai lines that load the same engine through its OpenAI-compatible /v1.
//
// The feed (server-sent events, twice a second) is open only while the panel is on screen; it ends on the server
// after a while and is opened again if the panel is still shown. Offline (an exported copy) or with no server the
// panel says it needs the live server and opens nothing.

import { svg, h, clear } from '../lib/svg.js';
import { fetchJSON } from '../lib/api.js';
import { num, fixed, bytes, plural } from '../lib/format.js';
import { sceneStyles } from '../lib/scene-kit.js';
import { whenAttached } from '../lib/attached.js';

const WINDOW_S = 30; // lanes show the last WINDOW_S seconds
const REOPEN_MS = 1000; // after the feed ends, while the panel is shown
const MAX_FAILS = 3; // feed errors in a row with no snapshot between them: the server is gone
const QUEUE_COLS = 4;
const QUEUE_GAP = 3;
const QUEUE_HEAD = 18;
const LANE_H = 16;

/**
 * The live panel into `parent`. opts: { kind: 'lanes' | 'pages', palette: CSS custom-property prefix of the
 * chapter's request colours ('--bqr-'), colours: how many, fetchJSON: the page's (offline-aware) GET }.
 * Returns { el, stop() }; stop() closes the feed (call it when the scene unmounts).
 */
export function livePanel(parent, opts) {
  sceneStyles('engine-live');
  const el = h('section', { class: `le le-${opts.kind}`, 'aria-label': 'This server, now', 'data-secondary': '',
    'data-state': 'connecting' }, parent);
  const head = h('header', { class: 'le-head' }, el);
  h('h3', { text: 'This server, now' }, head);
  const load = h('button', { class: 'btn le-load', type: 'button', text: 'Load it', disabled: '' }, head);
  const p = {
    opts, el, load, snap: null, es: null, timer: 0, fails: 0, shown: false, stopped: false,
    seats: new Map(), // chat id -> seat, kept while the chat runs (the snapshot lists running chats in order)
    history: [], // lanes: [{ seat, id, state, t0, t1 }] segments in the last WINDOW_S seconds
    sub: h('p', { class: 'le-sub' }, el),
    picture: h('div', { class: 'le-picture' }, el),
    readouts: h('p', { class: 'le-readouts' }, el),
    metrics: h('p', { class: 'le-metrics' }, el),
    note: h('p', { class: 'le-note', role: 'status' }, el),
  };
  yourself(el);
  p.sub.textContent = opts.kind === 'lanes'
    ? 'The chats this tour’s own server is answering right now (SmolLM2 on its CPU): one lane per seat, each ' +
      'chat in its colour, pale while it reads its prompt (prefill), full while it writes (decode); the queue waits ' +
      'at the left. Other visitors’ chats show as progress only, never their words.'
    : 'The key/value pages of this tour’s own server right now (SmolLM2 on its CPU): one square per page of the ' +
      'pool, each running chat’s pages in its colour, wherever its block table put them; the last page of a chat ' +
      'is filled as far as its tokens reach.';
  load.addEventListener('click', () => demo(p));
  p.ro = new ResizeObserver(() => { if (p.snap) draw(p); });
  p.ro.observe(p.picture);
  start(p);
  // "That server, now" (attach-live.js): a server the operator attached, right after this panel; none: nothing
  const that = whenAttached(opts.fetchJSON, () => import('./attach-live.js'),
    (m, list) => m.thatServerPanel(parent, { kind: opts.kind, after: el, fetchJSON: opts.fetchJSON }, list));
  return { el, stop: () => { stop(p); that.stop(); that.current()?.stop(); } };
}

async function start(p) {
  let snap;
  try {
    snap = await p.opts.fetchJSON('/api/engine');
  } catch (err) {
    offline(p);
    return;
  }
  if (p.stopped) return;
  show(p, snap);
  p.load.disabled = false;
  p.io = new IntersectionObserver((entries) => {
    p.shown = entries.some((e) => e.isIntersecting);
    if (p.shown) open(p); else close(p);
  });
  p.io.observe(p.el);
}

function offline(p) {
  close(p);
  if (p.io) p.io.disconnect();
  p.el.dataset.state = 'offline';
  p.load.disabled = true;
  clear(p.picture);
  p.readouts.textContent = '';
  p.metrics.textContent = '';
  p.note.textContent = 'This panel shows the tour’s own server live, so it needs the live server: this copy is ' +
    'offline (or the server is not answering). Run `inside-llm serve` and open the tour there to watch it.';
}

function open(p) {
  if (p.es || p.stopped || !p.shown) return;
  clearTimeout(p.timer);
  const es = new EventSource('/api/engine/feed');
  p.es = es;
  es.addEventListener('engine', (e) => { p.fails = 0; show(p, JSON.parse(e.data)); });
  es.addEventListener('error', () => {
    if (p.es !== es) return;
    close(p);
    p.fails += 1;
    if (p.fails >= MAX_FAILS) { offline(p); return; }
    p.timer = setTimeout(() => open(p), REOPEN_MS); // the feed ended (or blinked): reopen while shown
  });
}

function close(p) {
  clearTimeout(p.timer);
  if (p.es) p.es.close();
  p.es = null;
}

function stop(p) {
  p.stopped = true;
  close(p);
  if (p.io) p.io.disconnect();
  p.ro.disconnect();
}

async function demo(p) {
  p.load.disabled = true;
  try {
    const r = await fetchJSON('/api/engine/demo', { body: {} });
    if (p.stopped) return;
    p.note.textContent = r.started
      ? `Started ${plural(r.started, 'demo chat')} (fixed questions, answered greedily; nobody reads them): ` +
        `${num(r.running)} running or waiting now. ` + (p.opts.kind === 'lanes'
          ? 'Watch the seats fill, a queue form, and each freed seat taken at the next step.'
          : `Watch each chat take a page per ${num(r.engine.page_tokens)} tokens, and its pages go back to the pool when it ends.`)
      : `The demo’s ${num(r.running)} chats are still running or waiting; press again once some have finished.`;
    show(p, r.engine);
    open(p);
  } catch (err) {
    p.note.textContent = `Could not start the demo chats: ${err.message}`;
  } finally {
    p.load.disabled = p.el.dataset.state === 'offline';
  }
}

// ---- one snapshot ------------------------------------------------------------------------------------------
function show(p, s) {
  p.snap = s;
  const now = performance.now() / 1000;
  const running = s.sequences.filter((q) => q.state !== 'waiting');
  for (const id of [...p.seats.keys()]) if (!running.some((q) => q.id === id)) p.seats.delete(id);
  for (const q of running) {
    if (p.seats.has(q.id)) continue;
    const taken = new Set(p.seats.values());
    let seat = 0;
    while (taken.has(seat)) seat++;
    p.seats.set(q.id, seat);
  }
  for (const q of running) {
    const seat = p.seats.get(q.id);
    const last = p.history.findLast((g) => g.seat === seat);
    if (last && last.id === q.id && last.state === q.state && now - last.t1 < 3) last.t1 = now;
    else p.history.push({ seat, id: q.id, state: q.state, t0: last && last.id === q.id ? last.t1 : now, t1: now });
  }
  p.history = p.history.filter((g) => now - g.t1 <= WINDOW_S);
  p.now = now;
  const d = p.el.dataset;
  Object.assign(d, { state: 'live', seats: s.seats, seatsInUse: s.seats_in_use, queued: s.queued,
    pages: s.pages, pagesInUse: s.pages_in_use, finished: s.finished });
  draw(p);
}

function draw(p) {
  const s = p.snap;
  if (p.opts.kind === 'lanes') drawLanes(p, s);
  else drawPages(p, s);
  names(p, s);
}

// ---- which /metrics series each drawn figure is ---------------------------------------------------------------
const SERIES = {
  running: 'vllm:num_requests_running', waiting: 'vllm:num_requests_waiting', kv: 'vllm:kv_cache_usage_perc',
  tokens: 'vllm:generation_tokens_total', finished: 'vllm:request_success_total',
  preempted: 'vllm:num_preemptions_total', config: 'vllm:cache_config_info',
  prefixHits: 'vllm:prefix_cache_hits_total',
};

function names(p, s) {
  const kv = s.pages ? s.pages_in_use / s.pages : 0;
  const rows = p.opts.kind === 'lanes'
    ? [['seats in use', SERIES.running, num(s.seats_in_use)], ['waiting', SERIES.waiting, num(s.queued)],
        ['chats finished', SERIES.finished, `${num(s.finished)}, summed over finished_reason`],
        ['tokens written', SERIES.tokens, num(s.tokens_written)]]
    : [['pages in use ÷ pages', SERIES.kv, fixed(kv, 3)], ['chats holding them', SERIES.running, num(s.seats_in_use)],
        ['preempted', SERIES.preempted, num(s.preempted)],
        ['prompt tokens found in the prefix cache', SERIES.prefixHits,
          `${num(s.prefix_cache_hits)} (of vllm:prefix_cache_queries_total = ${num(s.prefix_cache_queries)})`],
        ['pages, tokens per page', SERIES.config, `num_gpu_blocks="${s.pages}", block_size="${s.page_tokens}"`]];
  clear(p.metrics);
  p.metrics.append('The same figures on this server’s ');
  h('a', { href: '/metrics', text: '/metrics' }, p.metrics);
  p.metrics.append(' (Prometheus, vLLM’s names, so a Grafana board made for vLLM reads them): ');
  rows.forEach(([what, series, now], k) => {
    if (k) p.metrics.append(' · ');
    p.metrics.append(`${what} = `);
    h('code', { text: series }, p.metrics);
    p.metrics.append(` (${now})`);
  });
  p.metrics.append('.');
}

// ---- the lines a visitor can paste to load this server themselves ------------------------------------------
function yourself(el) {
  const box = h('details', { class: 'math le-yourself' }, el);
  h('summary', { text: 'Load it yourself: curl, the openai client, vllm bench' }, box);
  const origin = window.location.origin;
  const body = JSON.stringify({ model: 'smollm2', stream: true,
    messages: [{ role: 'user', content: 'What does a tokenizer do?' }] });
  const blocks = [
    ['This server speaks the OpenAI API at /v1, like vLLM, SGLang and llama.cpp’s server. A streamed chat:',
      `curl -N ${origin}/v1/chat/completions -H 'content-type: application/json' -d '${body}'`],
    ['The official Python client (pip install openai), any API key:',
      `from openai import OpenAI\nclient = OpenAI(base_url="${origin}/v1", api_key="none")\n` +
      'r = client.chat.completions.create(model="smollm2", max_tokens=64,\n' +
      '                                   messages=[{"role": "user", "content": "What does a tokenizer do?"}])\n' +
      'print(r.choices[0].message.content, r.usage)'],
    ['Eight at once, then read what the panel above draws:',
      `for i in 1 2 3 4 5 6 7 8; do curl -s ${origin}/v1/completions -H 'content-type: application/json' ` +
      `-d '{"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 64}' > /dev/null & done; ` +
      `curl -s ${origin}/metrics | grep -E 'vllm:(num_requests|kv_cache)'`],
    ['A load generator made for vLLM works unchanged (its tokenizer from Hugging Face):',
      `vllm bench serve --backend openai-chat --base-url ${origin} --endpoint /v1/chat/completions ` +
      '--model smollm2 --tokenizer HuggingFaceTB/SmolLM2-135M-Instruct --dataset-name random ' +
      '--random-input-len 64 --random-output-len 64 --num-prompts 32 --max-concurrency 8'],
  ];
  for (const [say, code] of blocks) {
    h('p', { text: say }, box);
    h('code', { text: code, class: 'le-code' }, h('pre', {}, box));
  }
  h('p', { text: 'The same fair share as the chat box: when others wait, the address with fewer chats running is ' +
    'served first; past every seat and half the queue, a 429 with Retry-After, which the openai client waits out ' +
    'and retries (a load generator counts it as a failure).' }, box);
}

const colour = (p, id) => `var(${p.opts.palette}${id % p.opts.colours})`;

// ---- chapter 7: seats as lanes over the last seconds, the queue at their left --------------------------------
function drawLanes(p, s) {
  const width = Math.max(300, Math.round(p.picture.clientWidth) || 600);
  const narrow = width < 560;
  const qW = narrow ? 62 : 104;
  const rows = Math.ceil(s.queue_limit / QUEUE_COLS);
  const size = Math.max(6, Math.min(14, (qW - (QUEUE_COLS - 1) * QUEUE_GAP) / QUEUE_COLS));
  const queueH = QUEUE_HEAD + rows * (size + QUEUE_GAP);
  const lanesH = Math.max(LANE_H * s.seats, queueH);
  const laneH = lanesH / s.seats;
  const labelW = narrow ? 0 : 150;
  const x0 = qW + 14, x1 = width - 8 - labelW, top = 4, height = top + lanesH + 22;
  const x = (t) => x1 - ((x1 - x0) * (p.now - t)) / WINDOW_S;
  clear(p.picture);
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, width: '100%', class: 'le-svg', role: 'img',
    'aria-label': `This server's ${s.seats} seats over the last ${WINDOW_S} seconds: ${s.seats_in_use} in use, ` +
      `${s.queued} chats waiting` }, p.picture);
  const lanes = svg('g', { class: 'le-lanes' }, root);
  for (let seat = 0; seat < s.seats; seat++) {
    svg('rect', { x: x0, y: top + seat * laneH + 0.5, width: x1 - x0, height: laneH - 1, class: 'bt-lane le-lane',
      'data-seat': seat }, lanes);
  }
  for (const g of p.history) {
    if (x(g.t1 + 0.5) <= x0) continue;
    const a = Math.min(x1 - 2, Math.max(x0, x(g.t0))), b = Math.min(x1, Math.max(a + 2, x(g.t1 + 0.5)));
    svg('rect', { x: a + 0.4, y: top + g.seat * laneH + 0.5, width: b - a - 0.8, height: laneH - 1,
      rx: 2, fill: colour(p, g.id), class: g.state === 'prefill' ? 'le-span le-prefill' : 'le-span',
      'data-chat': g.id }, lanes);
  }
  const running = s.sequences.filter((q) => q.state !== 'waiting');
  if (labelW) {
    for (const q of running) {
      const seat = p.seats.get(q.id);
      const text = q.state === 'prefill' ? `#${q.id} reading ${num(q.prompt_tokens)} tokens`
        : `#${q.id} wrote ${num(q.written_tokens)} of ${num(q.max_tokens)}`;
      svg('text', { x: x1 + 8, y: top + (seat + 0.5) * laneH + 4, class: 'le-label', text }, root);
    }
  }
  const waiting = s.sequences.filter((q) => q.state === 'waiting');
  const bottom = top + lanesH;
  waiting.slice(0, s.queue_limit).forEach((q, k) => {
    const col = k % QUEUE_COLS, row = Math.floor(k / QUEUE_COLS);
    svg('rect', { x: qW - (col + 1) * (size + QUEUE_GAP) + QUEUE_GAP, y: bottom - (row + 1) * (size + QUEUE_GAP) + QUEUE_GAP,
      width: size, height: size, rx: 2, class: 'bt-waiting le-waiting', fill: colour(p, q.id), 'data-chat': q.id }, root);
  });
  svg('text', { x: qW, y: top + 10, class: 'bt-qlabel', 'text-anchor': 'end', text: `${num(s.queued)} waiting` }, root);
  svg('line', { x1: x0, x2: x1, y1: bottom + 4, y2: bottom + 4, class: 'bt-axis' }, root);
  for (const [t, label] of [[WINDOW_S, `${WINDOW_S} s ago`], [0, 'now']]) {
    svg('text', { x: x(p.now - t), y: bottom + 17, class: 'bt-tick', 'text-anchor': t ? 'start' : 'end', text: label }, root);
  }
  p.readouts.textContent = `${num(s.seats_in_use)} of ${num(s.seats)} seats in use · ${num(s.queued)} waiting ` +
    `(at most ${num(s.queue_limit)}; more get “busy, retry”) · ${num(s.tokens_per_s)} tokens/s over the last ` +
    `${num(s.rate_window_s)} s · ${plural(s.finished, 'chat')} finished since the server started · ` +
    `${num(s.steps)} engine steps, each one forward pass for every seated chat.`;
}

// ---- chapter 6: the pool of pages -------------------------------------------------------------------------
function drawPages(p, s) {
  const width = Math.max(260, Math.round(p.picture.clientWidth) || 600);
  const cols = width >= 560 ? 32 : 16;
  const cell = width / cols;
  const cellH = Math.max(10, Math.min(cell, 18));
  const rows = Math.ceil(s.pages / cols);
  const height = rows * cellH;
  clear(p.picture);
  const running = s.sequences.filter((q) => q.state !== 'waiting');
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, width: '100%', class: 'le-svg', role: 'img',
    'aria-label': `This server's key/value pool: ${s.pages_in_use} of ${s.pages} pages in use by ` +
      `${plural(running.length, 'chat')}` }, p.picture);
  const owner = new Map();
  for (const q of running) {
    q.page_ids.forEach((b, j) => owner.set(b, { q, fill: Math.min(1, (q.cached_tokens - j * s.page_tokens) / s.page_tokens) }));
  }
  for (let b = 0; b < s.pages; b++) {
    const xb = (b % cols) * cell, yb = Math.floor(b / cols) * cellH;
    svg('rect', { x: xb + 0.5, y: yb + 0.5, width: cell - 1, height: cellH - 1, rx: 1.5, class: 'le-free' }, root);
    const o = owner.get(b);
    if (!o) continue;
    const f = Math.max(0.08, o.fill);
    svg('rect', { x: xb + 0.5, y: yb + 0.5, width: (cell - 1) * f, height: cellH - 1, rx: 1.5,
      fill: colour(p, o.q.id), class: 'le-page', 'data-chat': o.q.id, 'data-page': b }, root);
  }
  const page = s.page_tokens * s.bytes_per_token;
  p.readouts.textContent = `${num(s.pages_in_use)} of ${num(s.pages)} pages in use by ` +
    `${plural(running.length, 'chat')} (${num(s.queued)} waiting) · a page holds ${num(s.page_tokens)} tokens × ` +
    `${bytes(s.bytes_per_token)} per token (keys and values of every layer, float32) = ${bytes(page)} · ` +
    `${bytes(s.pages_in_use * page)} of the pool’s ${bytes(s.pages * page)} hold chats now · ` +
    `${num(s.tokens_per_s)} tokens/s · ${fixed(s.preempted, 0)} preempted so far · prefix cache: ` +
    `${num(s.prefix_cache_hits)} of ${num(s.prefix_cache_queries)} tokens of seated chats found in pages ` +
    `another chat computed (${fixed(100 * s.prefix_cache_hit_rate, 0)}%): shared, not computed again.`;
}
