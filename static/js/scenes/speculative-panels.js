// scenes/speculative-panels.js: chapter 9's side panels: pass ledger, speed-up vs γ curve, measured vs predicted on this CPU.

import { svg, h, clear, root } from '../lib/svg.js';
import { num, fixed, plural, pct } from '../lib/format.js';
import { mathDetails } from '../lib/math.js';
import { widthClass } from '../lib/scene-kit.js';

const CHARTS = {
  wide: { W: 480, H: 236, l: 42, r: 14, t: 22, b: 40 },
  narrow: { W: 340, H: 220, l: 36, r: 10, t: 22, b: 38 },
};
const WIDTHS = { narrow: 440 }; // px of panel width under which the chart uses the phone layout

/** True when the formula panel's width now calls for the other chart layout (the caller redraws). */
export function chartLayoutChanged(panels) {
  const box = panels.querySelector(':scope > .sp-analytic');
  return !!box && box.dataset.variant !== variant(box);
}

const variant = (box) => widthClass(box, WIDTHS);

function section(parent, cls, label) {
  return parent.querySelector(`:scope > .${cls}`) || h('section', { class: cls, 'aria-label': label }, parent);
}

// ---- GPU time: the same answer drafted three ways, and the formula, on one time axis --------------
const DRAFT_LABEL = { lookup: 'Prompt lookup', self: 'Self-draft', model: 'Draft model' };

/** A draft's row label: what drafts, in words. */
export function draftLabel(x) {
  return x.kind === 'self' ? `Self-draft: its ${x.name}` : DRAFT_LABEL[x.kind] || x.name;
}

/**
 * Rows on one axis of GPU time (unit: one big-model pass, which costs its weight reads). The big model alone:
 * one bar per token. Each draft (d.drafts: this run's, then the model drafting for itself with its first
 * layers): per check, its draft passes (c each; the kept ones green, the first miss red, the rest grey), then
 * one big-model bar split into the tokens it wrote (kept green, its own blue). Last, the formula at the
 * chosen α, γ, c: N / E checks, each γ·c + 1 long, ending at N / speed-up. The first draft's row is drawn
 * solid up to `passes` checks (the run on the bench), the rest faint.
 */
export function drawLedger(box, data, written, passes) {
  const d = data.demo;
  written = written ?? d.num_tokens;
  passes = passes ?? d.frames.length;
  clear(box);
  const N = d.num_tokens, U = 10, gap = 0.12 * U;
  const formulaT = N / data.speedup;
  const W = Math.max(N, formulaT, ...d.drafts.map((x) => x.gpu_time)) * U;
  h('p', { class: 'sp-ledger-head', 'data-secondary': '', text: `The same ${plural(N, 'token')}, drafted three ways on one time axis ` +
    '(one unit = one big-model pass, which costs its weight reads; a draft pass costs c of one):' }, box);
  const row = (cls, label, sub, count, draw) => {
    const r = h('div', { class: `sp-ledger-row ${cls}` }, box);
    const l = h('span', { class: 'sp-ledger-label' }, r);
    h('b', { text: label }, l);
    if (sub) h('small', { 'data-secondary': '', text: sub }, l); // a slide keeps the rows, the page their details
    const s = svg('svg', { viewBox: `0 -4 ${W} 16`, preserveAspectRatio: 'none', class: 'sp-ledger-bar',
      role: 'img', 'aria-label': `${label}${sub ? ` (${sub})` : ''}: ${count}` }, r);
    draw(s);
    h('span', { class: 'sp-ledger-count', text: count }, r);
  };
  row('plain', 'Big model alone', `one pass per token: ${plural(N, 'pass', 'passes')}`, '1×', (s) => {
    for (let j = 0; j < N; j++) {
      svg('rect', { x: j * U + gap / 2, y: 0, width: U - gap, height: 12, class: 'pass own' }, s);
    }
  });
  d.drafts.forEach((x, i) => {
    const live = i === 0 ? passes : x.steps.length;
    row(`draft ${x.kind}`, draftLabel(x), `c = ${fixed(x.cost_ratio, 2)} · ${pct(x.acceptance_rate, 0)} of guesses kept`,
      `${fixed(x.speedup, 2)}×`, (s) => {
        let at = 0;
        x.steps.forEach((st, k) => {
          const done = k < live, w = x.cost_ratio * U;
          for (let j = 0; j < st.drafted && w > 0; j++) {
            const state = j < st.kept ? 'kept' : j === st.kept && st.missed ? 'miss' : 'dropped';
            svg('rect', { x: at + w * 0.1, y: 2, width: w * 0.8, height: 8, class: `draft ${done ? state : 'todo'}` }, s);
            at += w;
          }
          if (st.missed && done) svg('rect', { x: at, y: -4, width: U * 0.28, height: 3, class: 'miss-mark' }, s);
          const bw = (U - gap) / st.tokens;
          for (let j = 0; j < st.tokens; j++) {
            const cls = !done ? 'todo' : j < st.kept ? 'kept' : 'own';
            svg('rect', { x: at + gap / 2 + j * bw + (j ? 0.3 : 0), y: 0, width: bw - (j ? 0.3 : 0), height: 12, class: `pass ${cls}` }, s);
          }
          at += U;
        });
      });
  });
  const g = data.gamma, c = data.cost_ratio, E = data.expected_tokens_per_pass;
  row('formula', `The formula at α = ${fixed(data.alpha, 2)}`, `γ = ${g}, c = ${fixed(c, 2)}: ${fixed(E, 2)} tokens a check`,
    `${fixed(data.speedup, 2)}×`, (s) => {
      const step = (g * c + 1) * U;
      for (let at = 0, k = 0; at < formulaT * U - 1e-6; at += step, k++) {
        const left = formulaT * U - at;  // the last check is a fraction: N / E checks in all
        const f = Math.min(1, left / step);
        svg('rect', { x: at + gap / 2, y: 2, width: Math.max(0, g * c * U * f - gap / 2), height: 8, class: 'draft expected' }, s);
        svg('rect', { x: at + g * c * U * f + gap / 2, y: 0, width: Math.max(0, U * f - gap), height: 12, class: 'pass expected' }, s);
      }
    });
  const best = d.drafts.reduce((a, x) => (x.speedup > a.speedup ? x : a), d.drafts[0]);
  const selfs = d.drafts.filter((x) => x.kind === 'self');
  const slow = selfs.length > 1 && selfs.every((x) => x.speedup < 1);
  h('p', { class: 'sp-ledger-sum', 'data-secondary': '', text: 'Every row writes the same answer. ' + (best.speedup > 1.005
    ? `${draftLabel(best)} finishes first here (${fixed(best.gpu_time, 1)} pass-times against ${num(N)}).`
    : `No draft beats the big model alone on this question${d.drafts[0].kind === 'lookup' ? ': the answer does not ' +
      'repeat its words, so lookup finds little to copy' : ''} (${fixed(best.gpu_time, 1)} pass-times against ${num(N)}).`) + (slow ? ` Both self-drafts are slower than the big model ` +
    `alone: its ${selfs[0].name} cost ${fixed(selfs[0].cost_ratio, 2)} of a pass and keep ${pct(selfs[0].acceptance_rate, 0)}, ` +
    `its ${selfs[selfs.length - 1].name} keep ${pct(selfs[selfs.length - 1].acceptance_rate, 0)} but cost ` +
    `${fixed(selfs[selfs.length - 1].cost_ratio, 2)}; a model must be trained to stop early (LayerSkip) for a self-draft to pay.` : '') }, box);
}

// ---- the formula: speed-up vs γ for the chosen α and c -------------------------------------------
export function drawAnalytic(panels, d, opts) {
  const box = clear(section(panels, 'sp-analytic', 'The formula'));
  h('h3', { text: `The formula: α = ${fixed(d.alpha, 2)}, c = ${fixed(d.cost_ratio, 2)}` }, box);
  const ro = h('div', { class: 'readouts', 'aria-live': 'polite' }, box);
  const r = (label, value, unit, cls = '') => {
    const el = h('div', { class: `readout ${cls}` }, ro);
    h('span', { class: 'label', text: label }, el);
    const v = h('span', { class: 'value', text: value }, el);
    h('span', { class: 'unit', text: unit }, v);
  };
  r('Tokens per check', fixed(d.expected_tokens_per_pass, 2), 'on average');
  r('Speed-up', `${fixed(d.speedup, 2)}×`, `at γ = ${d.gamma}`, 'sp-speedup');
  r('Best draft length', num(d.optimal_gamma), `tokens · ${fixed(d.optimal_speedup, 2)}×`);
  chart(box, d, opts);
  if (opts.embed) return; // a slide keeps the picture; the page keeps the words and the math
  h('p', { class: 'sp-note', text: 'Tokens per check E = (1 − α^(γ+1)) / (1 − α); speed-up = E / (γ·c + 1): γ draft ' +
    'passes at c each, then one big-model pass (Leviathan, Kalman & Matias 2023).' }, box);
  box.appendChild(mathDetails(d.math.expected_tokens_per_pass, 'Tokens per check: how?'));
  box.appendChild(mathDetails(d.math.speedup, 'Speed-up: how?'));
  box.appendChild(mathDetails(d.math.optimal_gamma, 'Best γ: how?'));
}

function chart(box, d, opts) {
  box.dataset.variant = variant(box);
  const { W, H, l, r, t, b } = CHARTS[box.dataset.variant];
  const s = root(box, W, H, `Speed-up against draft length γ from 1 to 10 for α = ${d.alpha} and c = ${d.cost_ratio}: ` +
    `${fixed(d.speedup, 2)}× at the chosen γ = ${d.gamma}; the best γ is ${d.optimal_gamma}.`);
  s.classList.add('sp-chart');
  s.setAttribute('role', 'group'); // it holds the γ dots (buttons): a group, not one image
  const top = Math.max(1.5, ...d.curve.map((p) => p.speedup)) * 1.15;
  const tick = top > 6 ? 2 : top > 3 ? 1 : 0.5;
  const yMax = Math.ceil(top / tick) * tick;
  const x = (g) => l + ((g - 1) / 9) * (W - l - r);
  const y = (v) => H - b - (v / yMax) * (H - b - t);
  for (let v = 0; v <= yMax + 1e-9; v += tick) {
    svg('line', { x1: l, x2: W - r, y1: y(v), y2: y(v), class: 'sp-grid' }, s);
    svg('text', { x: l - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'sp-tick', text: `${num(v)}×` }, s);
  }
  for (let g = 1; g <= 10; g++) svg('text', { x: x(g), y: H - b + 16, 'text-anchor': 'middle', class: 'sp-tick', text: g }, s);
  svg('text', { x: (l + W - r) / 2, y: H - 6, 'text-anchor': 'middle', class: 'sp-axis', text: 'draft tokens per check, γ' }, s);
  svg('line', { x1: l, x2: W - r, y1: y(1), y2: y(1), class: 'sp-one' }, s);
  svg('text', { x: W - r, y: y(1) - 5, 'text-anchor': 'end', class: 'sp-small', text: '1× = no gain' }, s);
  svg('path', { d: `M${d.curve.map((p) => `${x(p.gamma)},${y(p.speedup)}`).join('L')}`, class: 'sp-curve' }, s);
  for (const p of d.curve) {
    const dot = svg('circle', { cx: x(p.gamma), cy: y(p.speedup), r: p.gamma === d.gamma ? 7.5 : 4.5, tabindex: 0,
      role: 'button', 'data-gamma': p.gamma, 'aria-label': `γ = ${p.gamma}: ${fixed(p.speedup, 2)}×; choose it`,
      class: `sp-dot${p.gamma === d.gamma ? ' chosen' : ''}${p.gamma === d.optimal_gamma ? ' best' : ''}` }, s);
    const pick = () => opts.setParam('gamma', p.gamma);
    dot.addEventListener('click', pick);
    dot.addEventListener('keydown', (ev) => { if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); pick(); } });
  }
  best(s, d, x, y, W - r);
  const c = d.curve[d.gamma - 1];
  const lx = Math.min(Math.max(x(c.gamma), l + 40), W - r - 40);
  svg('text', { x: lx, y: y(c.speedup) - 14, 'text-anchor': 'middle', class: 'sp-label chosen',
    text: `γ = ${c.gamma}: ${fixed(c.speedup, 2)}×` }, s);
}

function best(s, d, x, y, right) {
  if (d.optimal_gamma > 10) {
    svg('text', { x: right, y: y(d.curve[9].speedup) + 22, 'text-anchor': 'end', class: 'sp-label best',
      text: `best γ = ${d.optimal_gamma} →` }, s);
    return;
  }
  const p = d.curve[d.optimal_gamma - 1];
  svg('path', { d: `M${x(p.gamma)},${y(p.speedup) + 11} l-5,8 h10 z`, class: 'sp-best-mark' }, s);
  if (p.gamma !== d.gamma) {
    svg('text', { x: x(p.gamma), y: y(p.speedup) + 32, 'text-anchor': 'middle', class: 'sp-label best', text: 'best' }, s);
  }
}

// ---- measured on this server's CPU, beside the predictions --------------------------------------
export async function drawMeasured(panels, d, opts) {
  const box = section(panels, 'sp-measured', 'Measured on this server');
  const url = d.demo.measured_url;
  if (box.dataset.url === url) return;
  box.dataset.url = url;
  clear(box);
  const dm = d.demo;
  h('h3', { text: 'The real thing, measured on this server’s CPU' }, box);
  const mp = (m) => `${m.name} (${num(m.num_params / 1e6, 2)} M parameters, ${m.layers} layers)`;
  const gamma = dm.frames.length > 1 ? Math.max(...dm.frames.map((f) => f.proposed.length)) : '–';
  if (!opts.embed) h('p', { class: 'sp-note', text: dm.same_model
    ? `Only the ${dm.draft_model.name} demo model is installed here, so it checks its own guesses (every guess is kept).`
    : dm.draft_model.num_params === 0
      ? `${mp(dm.target_model)} checks guesses from ${dm.draft_model.name}: ${dm.draft_model.kind}, no draft model at all ` +
        `(no smaller model shares its vocabulary here). γ up to ${gamma}, ${dm.num_tokens} tokens, greedy.`
      : `The demo model ${mp(dm.target_model)} checks guesses from ${mp(dm.draft_model)}: γ = ${gamma}, ${dm.num_tokens} tokens, greedy.` }, box);
  if (!opts.embed && dm.draft_choice) whyThisDraft(box, dm.draft_choice);
  const bars = h('div', { class: 'sp-bars', 'aria-live': 'polite' }, box);
  const pending = h('p', { class: 'sp-note', text: 'Measuring on this server’s CPU…' }, box);
  let m = null;
  try {
    m = await opts.fetchJSON(url);
  } catch (err) { // offline copies have no server CPU to time
    pending.textContent = 'The wall-clock measurement runs only on the live server.';
  }
  if (!opts.alive() || box.dataset.url !== url) return;
  if (m && !m.available) pending.textContent = `Not measured: ${m.reason}.`;
  else if (m) pending.remove();
  const ok = m && m.available;
  const rows = [];
  if (ok) {
    rows.push(['measured', 'Measured: greedy time ÷ speculative time', m.measured_speedup]);
    rows.push(['predicted', `Predicted at the measured α = ${fixed(m.alpha_estimate, 2)}, c = ${fixed(m.measured_cost_ratio, 2)}`,
      m.predicted_speedup]);
    rows.push(['cpu', `… with this CPU’s cost of one check: ${fixed(m.verify_cost_steps, 1)} decode steps`,
      m.predicted_speedup_with_verify_cost]);
  }
  rows.push(['gpu', `If a pass cost its weight reads (memory-bound, as on a GPU): c = ${fixed(dm.weights_cost_ratio, 2)}`,
    dm.predicted_speedup_memory_bound]);
  barRows(bars, rows);
  if (opts.embed) return;
  if (ok) {
    h('p', { class: 'sp-caveat', text: `On a CPU, checking γ + 1 tokens in one pass costs more than one decode step ` +
      `(here ${fixed(m.verify_cost_steps, 1)}×): every extra token is extra arithmetic, so the measured speed-up can fall ` +
      `below the prediction. On a GPU a decode step is memory-bound: the check reads the weights once, like one step, ` +
      `as the formula assumes. ${m.cpu.name}, ${m.cpu.logical_cores} cores, fastest of ${m.rounds} rounds.` }, box);
  }
  if (dm.predicted_speedup_memory_bound < 1) {
    h('p', { class: 'sp-note', text: `At α = ${fixed(dm.alpha_estimate, 2)} this tiny draft is wrong too often to pay ` +
      'even where a check costs one step: every rejected guess wastes a draft pass. The formula shows what a draft ' +
      'that agrees more often gives.' }, box);
  }
  const alpha = Math.min(0.99, Math.round(dm.alpha_estimate * 100) / 100);
  const use = h('button', { class: 'btn', type: 'button', text: `Use the demo’s α = ${fixed(alpha, 2)} in the formula` }, box);
  use.addEventListener('click', () => opts.setParam('alpha', alpha));
  box.appendChild(mathDetails(dm.math.alpha_estimate, 'The demo’s α: how?'));
  box.appendChild(mathDetails(dm.math.predicted_speedup_memory_bound, 'Memory-bound prediction: how?'));
  if (ok) {
    box.appendChild(mathDetails(m.math.measured_speedup, 'Measured speed-up: how?'));
    box.appendChild(mathDetails(m.math.predicted_speedup, 'Predicted speed-up: how?'));
    box.appendChild(mathDetails(m.math.predicted_speedup_with_verify_cost, 'With the check’s cost: how?'));
  }
}

function barRows(parent, rows) {
  const max = Math.max(2, ...rows.map((r) => r[2])) * 1.05;
  for (const [cls, label, v] of rows) {
    const row = h('div', { class: `sp-bar ${cls}` }, parent);
    h('span', { class: 'sp-bar-label', text: label }, row);
    const track = h('span', { class: 'sp-bar-track' }, row);
    h('i', {}, track).style.width = `${(100 * v) / max}%`;
    h('b', { class: 'sp-bar-one', title: '1×: no gain' }, track).style.left = `${100 / max}%`;
    h('span', { class: 'sp-bar-value', text: `${fixed(v, 2)}×` }, row);
  }
}

/** Why prompt lookup: each candidate draft on the real model's two examples (kept share, c, GPU-time speed-up). */
function whyThisDraft(box, dc) {
  const fmt = (r) => `${r.draft} (c = ${fixed(r.cost_ratio, 2)}): kept ${r.runs.map((x) => `${Math.round(100 * x.acceptance_rate)}%`).join(' / ')}, ` +
    `GPU time ${r.runs.map((x) => `${fixed(x.gpu_time_speedup, 1)}×`).join(' / ')}`;
  const p = h('p', { class: 'sp-note sp-why' }, box);
  p.append('Why prompt lookup, measured on the two example runs (usually right / often wrong): ');
  const ul = h('ul', { class: 'sp-why-list' }, box);
  for (const r of dc.drafts) h('li', { text: fmt(r) }, ul);
}
