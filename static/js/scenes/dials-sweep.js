// scenes/dials-sweep.js: chapter 11's sweep chart (an output against batch, context, GPUs or precision, with the
// memory knee and the current setup marked; GET /api/dials/sweep) and its solver (GET /api/dials/solve), whose answer
// is marked on the sweep of its own input (the chart switches to that input), with the limit drawn when it is the y.

import { h, svg, clear } from '../lib/svg.js';
import { num, usd } from '../lib/format.js';
import { toQuery } from '../lib/api.js';
import { ensureToolStyles } from './dials-tools-css.js';

const XS = [['batch', 'Batch (chats at once)'], ['prompt_tokens', 'Prompt length (tokens)'], ['gpus', 'GPUs'],
  ['precision', 'Weight precision']];
const YS = [['tokens_per_s_total', 'Tokens/s, all GPUs', (v) => num(v, 3)],
  ['tokens_per_s_per_user', 'Tokens/s per user', (v) => num(v, 3)], ['ttft_ms', 'Time to first token, ms', (v) => num(v, 3)],
  ['cost_per_million_tokens_usd', 'Cost per million tokens', usd], ['spare_gb', 'Spare memory per GPU, GB', (v) => num(v, 3)]];
const W = 640, H = 260, M = { l: 64, r: 16, t: 16, b: 40 };
const ASKS = [['batch', 'Largest batch within the limits'], ['context', 'Longest prompt that fits at this batch'],
  ['gpus', 'Fewest GPUs for N users']];

function select(parent, id, label, options) {
  const wrap = h('label', { class: 'tools-field' }, parent);
  h('span', { text: label }, wrap);
  const el = h('select', { id }, wrap);
  for (const [v, t] of options) h('option', { value: v, text: t }, el);
  return el;
}
function numberField(parent, id, label, value) {
  const wrap = h('label', { class: 'tools-field' }, parent);
  h('span', { text: label }, wrap);
  return h('input', { id, type: 'number', min: '0', step: 'any', value: String(value) }, wrap);
}

const AXIS = { batch: 'batch', context: 'prompt_tokens', gpus: 'gpus' }; // the input each ask moves
const LIMITS = { ttft_ms: ['solve-ttft', 'TTFT limit'], tokens_per_s_per_user: ['solve-tps', 'per-user floor'] };

/** Where value v sits among the swept xs (powers of two): a fractional index, log-interpolated, clamped to the ends. */
export function fractionalIndex(xs, v) {
  if (!xs.length) return 0;
  if (v <= xs[0]) return 0;
  for (let i = 0; i + 1 < xs.length; i++) {
    if (v <= xs[i + 1]) return i + Math.log(v / xs[i]) / Math.log(xs[i + 1] / xs[i]);
  }
  return xs.length - 1;
}

/** pin: the dials' pin (dials-pin.js; null in an embed): its A is the dashed line. */
export function createSweep(parent, ctx, pin = null) {
  ensureToolStyles();
  const box = h('details', { class: 'dials-tools', id: 'dials-tools' }, parent);
  h('summary', { text: 'Sweep and solve: how the figures move, and the setup that meets your limits' }, box);
  const row = h('div', { class: 'tools-row' }, box);
  const xSel = select(row, 'sweep-x', 'Sweep', XS);
  const ySel = select(row, 'sweep-y', 'Show', YS.map(([k, t]) => [k, t]));
  const chart = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'sweep-chart', role: 'img', id: 'sweep-chart' }, box);
  const note = h('p', { class: 'card-note sweep-note', 'aria-live': 'polite' }, box);
  const pinRow = h('div', { class: 'tools-row' }, box);
  const pinBtn = h('button', { type: 'button', class: 'btn', id: 'sweep-pin', text: 'Pin this setup as A' }, pinRow);
  const unpinBtn = h('button', { type: 'button', class: 'btn', id: 'sweep-unpin', text: 'Unpin A', hidden: true }, pinRow);
  h('span', { class: 'card-note', text: 'then change the dials: A stays as a dashed line beside B, the setup now, and on every card' }, pinRow);
  pinRow.hidden = !pin;

  const form = h('form', { class: 'tools-row solve-form' }, box);
  const ask = select(form, 'solve-ask', 'Solve', ASKS);
  const ttft = numberField(form, 'solve-ttft', 'TTFT at most (ms, 0 = any)', 2000);
  const tps = numberField(form, 'solve-tps', 'Tokens/s per user at least (0 = any)', 20);
  const users = numberField(form, 'solve-users', 'Users (for GPUs)', 100);
  h('button', { type: 'submit', class: 'btn primary', text: 'Solve' }, form);
  const answer = h('p', { class: 'solve-answer', id: 'solve-answer', 'aria-live': 'polite' }, box);
  const adoptBtn = h('button', { type: 'button', class: 'btn', text: 'Adopt this setup', id: 'solve-adopt', hidden: true }, box);
  let params = null, last = '', adopt = null, seq = 0, solved = null;
  const pinnedA = () => (pin ? pin.params : null);

  async function draw() {
    if (!params) return;
    const pinned = pinnedA();
    unpinBtn.hidden = !pinned;
    pinBtn.hidden = !!pinned;
    if (!box.open) return;
    const q = `${toQuery(params)}&x=${xSel.value}`;
    const qa = pinned ? `${toQuery(pinned)}&x=${xSel.value}` : '';
    if (`${q}|${qa}` === last) return;
    last = `${q}|${qa}`;
    const mine = ++seq;
    try {
      const [d, a] = await Promise.all([ctx.fetchJSON(`/api/dials/sweep?${q}`),
        qa ? ctx.fetchJSON(`/api/dials/sweep?${qa}`) : Promise.resolve(null)]);
      if (mine === seq) plot(d, a);
    } catch (err) {
      note.textContent = `No sweep: ${err.message}`;
    }
  }
  function plot(d, a) {
    clear(chart);
    const [yKey, yLabel, fmt] = YS.find(([k]) => k === ySel.value);
    const toPts = (s) => s.points.map((p, i) => ({ i, x: p.x, y: yKey === 'spare_gb' ? p.spare_gb : p[yKey], fits: p.fits }));
    const pts = toPts(d);
    const ptsA = a ? toPts(a) : [];
    const ys = [...pts, ...ptsA].filter((p) => p.y !== null && p.fits).map((p) => p.y);
    const yMax = Math.max(1e-9, ...ys, yKey === 'spare_gb' ? 0 : 0);
    const yMin = yKey === 'spare_gb' ? Math.min(0, ...pts.map((p) => p.y)) : 0;
    const sx = (i) => M.l + (i * (W - M.l - M.r)) / Math.max(1, pts.length - 1);
    const sy = (v) => H - M.b - ((v - yMin) * (H - M.t - M.b)) / (yMax - yMin || 1);
    for (let k = 0; k <= 4; k++) {
      const v = yMin + ((yMax - yMin) * k) / 4;
      svg('line', { class: 'grid', x1: M.l, x2: W - M.r, y1: sy(v), y2: sy(v) }, chart);
      svg('text', { x: M.l - 6, y: sy(v), 'text-anchor': 'end', dy: '0.32em', text: fmt(v) }, chart);
    }
    pts.forEach((p) => svg('text', { x: sx(p.i), y: H - M.b + 16, 'text-anchor': 'middle', text: String(p.x) }, chart));
    svg('text', { class: 'axis-label', x: (M.l + W - M.r) / 2, y: H - 4, 'text-anchor': 'middle',
      text: XS.find(([k]) => k === d.x)[1] }, chart);
    svg('text', { class: 'axis-label', x: M.l + 4, y: M.t - 4, text: yLabel }, chart);
    const knee = pts.findIndex((p) => !p.fits);
    if (knee >= 0) {
      const kx = knee > 0 ? (sx(knee - 1) + sx(knee)) / 2 : sx(0);
      svg('rect', { class: 'sweep-nofit', x: kx, y: M.t, width: W - M.r - kx, height: H - M.t - M.b }, chart);
      const left = kx > W * 0.6; // near the right edge the label sits left of the knee
      svg('text', { class: 'sweep-knee', x: left ? kx - 4 : kx + 4, y: H - M.b - 8, 'text-anchor': left ? 'end' : 'start',
        text: `memory runs out at ${d.knee}` }, chart);
    }
    const lineA = ptsA.filter((p) => p.fits && p.y !== null);
    if (lineA.length) {
      svg('path', { class: 'sweep-line a', d: lineA.map((p, j) => `${j ? 'L' : 'M'}${sx(p.i)},${sy(p.y)}`).join('') }, chart);
      for (const p of lineA) svg('circle', { class: 'sweep-dot a', cx: sx(p.i), cy: sy(p.y), r: 3, 'data-x': String(p.x), 'data-y': String(p.y) }, chart);
    }
    const line = pts.filter((p) => p.fits && p.y !== null);
    if (line.length) svg('path', { class: 'sweep-line', d: line.map((p, j) => `${j ? 'L' : 'M'}${sx(p.i)},${sy(p.y)}`).join('') }, chart);
    for (const p of line) {
      svg('circle', { class: `sweep-dot${String(p.x) === String(d.current) ? ' current' : ''}`, cx: sx(p.i), cy: sy(p.y),
        r: String(p.x) === String(d.current) ? 6 : 3.5, 'data-x': String(p.x), 'data-y': String(p.y) }, chart);
    }
    const cur = pts.find((p) => String(p.x) === String(d.current));
    note.textContent = `${yLabel} against ${XS.find(([k]) => k === d.x)[1].toLowerCase()}; the large dot is the dials' setup` +
      `${cur ? '' : ' (between the swept values)'}${knee >= 0 ? `; from ${d.knee} on, it does not fit in memory.` : '.'}`;
    if (a) {
      const at = (list) => list.find((p) => String(p.x) === String(d.current));
      const b0 = at(pts), a0 = at(ptsA);
      const diff = b0 && a0 && b0.y !== null && a0.y !== null && a0.y !== 0 ? ` At ${d.current}: B ${fmt(b0.y)} vs A ${fmt(a0.y)} ` +
        `(${b0.y >= a0.y ? '+' : '−'}${num(Math.abs(100 * (b0.y / a0.y - 1)), 2)}%).` : '';
      note.textContent += ` Dashed: A, the pinned setup.${diff}`;
    }
    markSolved(d, pts, sx, sy, yKey, yMin, yMax, fmt);
    chart.setAttribute('aria-label', `${yLabel}: ${line.map((p) => `${p.x} ${fmt(p.y)}`).join(', ')}` +
      (chart.querySelector('.sweep-solve') ? `; solved: ${solved.value}` : ''));
  }

  /** The solver's answer on the sweep of its input (for these dials only): a dashed upright at its x, a ring at its
   * figure, and the limit when the y is the limited figure. */
  function markSolved(d, pts, sx, sy, yKey, yMin, yMax, fmt) {
    if (!solved || solved.key !== toQuery(params) || solved.axis !== d.x || !pts.length) return;
    const x = sx(fractionalIndex(pts.map((p) => Number(p.x)), solved.value));
    const y = solved.figures[yKey];
    const g = svg('g', { class: 'sweep-solved' }, chart);
    svg('line', { class: 'sweep-solve-line', x1: x, x2: x, y1: M.t, y2: H - M.b }, g);
    const limit = LIMITS[yKey] && Number(solved.limits[yKey]);
    if (limit > 0 && limit >= yMin && limit <= yMax) {
      svg('line', { class: 'sweep-limit', x1: M.l, x2: W - M.r, y1: sy(limit), y2: sy(limit), 'data-y': String(limit) }, g);
      svg('text', { class: 'sweep-limit-label', x: M.l + 4, y: sy(limit) - 5, // left: the knee's words sit at the right
        text: `${LIMITS[yKey][1]} ${fmt(limit)}` }, g);
    }
    if (y !== null && y !== undefined && y >= yMin && y <= yMax) {
      svg('circle', { class: 'sweep-solve', cx: x, cy: sy(y), r: 7, 'data-x': String(solved.value), 'data-y': String(y) }, g);
    }
    const left = x > W * 0.6;
    svg('text', { class: 'sweep-solve-label', x: left ? x - 6 : x + 6, y: M.t + 12, 'text-anchor': left ? 'end' : 'start',
      text: `solved: ${num(solved.value)}` }, g);
    note.textContent += ` The ring is the solver's answer (${num(solved.value)}).`;
  }

  async function solveIt() {
    const q = new URLSearchParams(toQuery(params));
    q.set('ask', ask.value);
    q.set('max_ttft_ms', ttft.value || '0');
    q.set('min_tokens_per_s_per_user', tps.value || '0');
    q.set('users', users.value || '1');
    q.set('within', 'dials'); // an answer the controls can show (and a link can keep)
    answer.textContent = 'Solving…';
    adoptBtn.hidden = true;
    try {
      const s = await ctx.fetchJSON(`/api/dials/solve?${q}`);
      answer.textContent = s.text;
      answer.dataset.value = s.value ?? '';
      answer.dataset.binding = s.binding;
      adopt = s.adopt;
      adoptBtn.hidden = !adopt;
      solved = s.feasible && s.value !== null ? { key: toQuery(params), axis: AXIS[s.ask], value: s.value, figures: s.figures,
        limits: { ttft_ms: ttft.value, tokens_per_s_per_user: tps.value } } : null;
      if (solved && xSel.value !== solved.axis) xSel.value = solved.axis; // the answer is drawn on its own input
      last = '';
      draw();
    } catch (err) {
      answer.textContent = `Could not solve it: ${err.message}`;
    }
  }
  form.addEventListener('submit', (ev) => { ev.preventDefault(); solveIt(); });
  adoptBtn.addEventListener('click', () => {
    if (!adopt) return;
    for (const [k, v] of Object.entries(adopt)) if (ctx.params[k] !== v) ctx.setParam(k, v);
  });
  pinBtn.addEventListener('click', () => pin && pin.set(params));
  unpinBtn.addEventListener('click', () => pin && pin.clear());
  box.addEventListener('toggle', draw);
  xSel.addEventListener('change', draw);
  ySel.addEventListener('change', () => { last = ''; draw(); });
  return {
    update(p) { params = { ...p }; draw(); },
    refresh() { last = ''; draw(); }, // the pin changed
  };
}
