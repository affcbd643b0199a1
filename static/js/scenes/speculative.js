// scenes/speculative.js: chapter 9: the draft's ghost guesses, one big-model pass that keeps or fixes them, pass by pass.

import { h, clear } from '../lib/svg.js';
import { swatches } from '../lib/legend.js';
import { num, pct, fixed, plural } from '../lib/format.js';
import { sceneRoot, readoutRow, readout, transport, still } from '../lib/scene-kit.js';
import { drawAnalytic, drawMeasured, drawLedger, chartLayoutChanged } from './speculative-panels.js';

const MS = { ghost: 140, gap: 220, sweep: 700, verdict: 950, settle: 320 }; // one pass, phase by phase
const END_HOLD_MS = 2600; // rest on the whole answer before looping
const STILL_STEP_MS = 2400; // reduced motion: time on each still step while playing
let view = null;
let ctx = null;

export function mount(stage, context) {
  ctx = context;
  const wrap = sceneRoot(stage, 'speculative', 'sp-scene');
  const bar = h('div', { class: 'sp-transport', role: 'group', 'aria-label': 'Passes' }, wrap);
  view = {
    wrap, data: null, key: '', step: 0, pose: '',
    first: button(bar, '|◀', 'Back to the prompt', () => showStep(0)),
    prev: button(bar, '◀', 'Previous pass', () => showStep(Math.max(0, view.step - 1))),
    transport: transport(bar, { onPlay: run, hush: () => [view.readouts] }),
    next: button(bar, '▶', 'Next pass', () => showStep(Math.min(numSteps(view.data) - 1, view.step + 1))),
    passLabel: h('span', { class: 'sp-pass-label' }, bar),
    ledger: h('section', { class: 'sp-ledger', 'aria-label': 'Three drafts, one time axis' }, wrap),
    readouts: readoutRow(wrap, 'sp-readouts'),
    bench: h('section', { class: 'sp-bench', 'aria-label': 'This pass' }, wrap),
    text: h('p', { class: 'sp-text', 'aria-label': 'Prompt and answer so far' }, wrap),
    check: h('p', { class: 'sp-check', 'data-narrow-secondary': '' }, wrap),
    other: h('p', { class: 'sp-other' }, wrap),
    legend: h('div', { class: 'legend sp-legend', 'data-secondary': '' }, wrap),
    panels: h('div', { class: 'sp-panels' }, wrap),
  };
  view.readouts.setAttribute('data-narrow-secondary', ''); // the ledger above carries the same counts
  view.benchHead = h('p', { class: 'sp-bench-head', text: 'Running the draft and the big model on this server…' }, view.bench);
  view.chips = h('div', { class: 'sp-chips' }, view.bench);
  view.passBar = h('div', { class: 'sp-passbar', 'aria-hidden': 'true' }, view.bench);
  view.passFill = h('i', {}, view.passBar);
  view.verdict = h('p', { class: 'sp-verdict' }, view.bench);
  legend();
  view.ro = new ResizeObserver(() => {
    if (view && view.data && chartLayoutChanged(view.panels)) drawAnalytic(view.panels, view.data, panelOpts());
  });
  view.ro.observe(view.panels);
}

const panelOpts = () => ({ embed: ctx.embed, fetchJSON: ctx.fetchJSON, setParam: ctx.setParam, alive: () => !!view });

export function unmount() {
  if (!view) return;
  view.transport.pause();
  view.ro.disconnect();
  view = null;
}

export function update(data, params) {
  if (!view) return;
  view.data = data;
  drawAnalytic(view.panels, data, panelOpts());
  drawMeasured(view.panels, data, panelOpts());
  const key = data.demo.measured_url;
  if (key === view.key) { // alpha or c moved: the run is the same, keep its animation going; the formula row moves
    drawLedger(view.ledger, data, view.written, view.passes);
    return;
  }
  view.key = key;
  view.pose = '';
  view.benchFrame = undefined;
  drawText(data.demo);
  drawLedger(view.ledger, data);
  const d = data.demo;
  view.check.className = `sp-check ${d.matches_greedy ? 'ok' : 'bad'}`;
  view.check.textContent = d.matches_greedy
    ? `✓ Identical to the ${d.target_model.name} model’s own greedy answer, token for token (${d.num_tokens} of ` +
      `${d.num_tokens}), recomputed one pass per token.`
    : '✗ The answer differs from the target’s own greedy answer: a bug, not a property of the method.';
  drawOther(data, params);
  view.transport.restart(still(ctx), () => poseStep(numSteps(data) - 1), () => poseStep(0));
}

/** The other example run: after the one where the draft is usually right, the one where it is often wrong. */
function drawOther(data, params) {
  clear(view.other);
  const ex = data.example_prompts, prompt = (params && params.prompt) || ex.usually_right;
  const good = prompt === ex.usually_right;
  if (ctx.embed) return;
  const d = data.demo, rate = `${pct(d.acceptance_rate, 0)} of guesses kept, ${fixed(d.gpu_time.speedup, 1)}× the speed`;
  h('span', { text: good ? `This run: the draft is usually right (${rate}). ` :
    prompt === ex.often_wrong ? `This run: the draft is often wrong (${rate}). ` : `Your prompt: ${rate}. ` }, view.other);
  const b = button(view.other, good ? 'Now a run where it is often wrong →' : '← Back to a run where it is usually right', null,
    () => ctx.setParam('prompt', good ? ex.often_wrong : ''));
  b.classList.add('sp-other-btn');
}

/** Scene contract: step 0 is the prompt alone; step i is big-model pass i with its verdict. */
export function numSteps(data) {
  return data.demo.frames.length + 1;
}

export function showStep(i) {
  if (!view || !view.data) return;
  view.transport.pause();
  poseStep(Math.max(0, Math.min(i, numSteps(view.data) - 1)));
}

function button(parent, text, label, onClick) {
  const b = h('button', { class: 'btn', type: 'button', text, 'aria-label': label || undefined }, parent);
  b.addEventListener('click', onClick);
  return b;
}

// ---- clock: pass i runs ghosts, gap, sweep, verdict, settle -----------------------------------
const passMs = (f) => f.proposed.length * MS.ghost + MS.gap + MS.sweep + MS.verdict + MS.settle;

/** Play from the pass on screen (from the prompt once at the end); reduced motion plays still steps. */
function run() {
  if (!view || !view.data) return null;
  const frames = view.data.demo.frames;
  const starts = [];
  let total = 0;
  for (const f of frames) { starts.push(total); total += passMs(f); }
  const t0 = view.step > 0 && view.step < frames.length ? starts[view.step] : 0;
  if (view.step >= frames.length) poseStep(0);
  if (ctx.reducedMotion) { // no motion: one still step after another, each shown as its verdict
    const s0 = view.step;
    return (ms) => poseStep((s0 + Math.floor(Math.max(0, ms) / STILL_STEP_MS)) % (frames.length + 1));
  }
  return (ms) => {
    const u = (t0 + Math.max(0, ms)) % (total + END_HOLD_MS); // the first frame may stamp a hair before t0
    if (u >= total) return poseStep(frames.length);
    let i = starts.length - 1;
    while (starts[i] > u) i--;
    pose(i, u - starts[i]);
  };
}

/** Step s, still: s = 0 the prompt alone, else pass s - 1 at its verdict (no motion). */
function poseStep(s) {
  if (s === 0) return pose(-1, 0);
  const f = view.data.demo.frames[s - 1];
  return pose(s - 1, passMs(f) - MS.settle - 1);
}

/** Draw pass i at t ms into its animation (i = -1: nothing has run yet). */
function pose(i, t) {
  const d = view.data.demo;
  const f = i >= 0 ? d.frames[i] : null;
  const g = f ? f.proposed.length : 0;
  const tSweep = t - g * MS.ghost - MS.gap;
  const p = f ? Math.max(0, Math.min(1, tSweep / MS.sweep)) : 0; // sweep progress of the big model's pass
  const judged = f && tSweep >= MS.sweep;
  const settled = f && tSweep >= MS.sweep + MS.verdict;
  const key = `${i}|${Math.min(g, Math.floor(t / MS.ghost) + 1)}|${Math.floor(p * (g + 1))}|${judged}|${settled}`;
  view.step = i + 1;
  view.passFill.style.width = `${p * 100}%`;
  if (key === view.pose) return;
  view.pose = key;
  drawBench(f, t, p, judged);
  const written = f ? f.start + (judged ? f.emitted.length : 0) : 0;
  showText(written, f && judged && !settled ? f : null);
  view.written = written;
  view.passes = judged ? i + 1 : Math.max(0, i);
  drawLedger(view.ledger, view.data, written, view.passes);
  drawReadouts(d, judged ? i + 1 : Math.max(0, i), written);
  view.passLabel.textContent = f ? `Pass ${num(i + 1)} of ${num(d.frames.length)}` : `Prompt · ${num(d.frames.length)} passes ahead`;
}

// ---- the bench: this pass's guesses and the big model's verdict --------------------------------
function drawBench(f, t, p, judged) {
  if (view.benchFrame !== f) buildBench(f);
  if (!f) return;
  const g = f.proposed.length;
  const shown = Math.min(g, Math.floor(t / MS.ghost) + 1);
  view.chipEls.forEach((el, j) => {
    el.hidden = j >= shown;
    const scanned = p * (g + 1) > j + 0.5;
    const state = !scanned ? 'ghost' : j < f.num_accepted ? 'kept' : j === f.num_accepted ? 'rejected' : 'dropped';
    el.className = `sp-chip ${state}`;
    el.title = `token ${f.proposed[j].id}: ${state}`;
  });
  view.ownEl.hidden = !judged;
  view.verdict.textContent = judged ? verdict(f) : g && p === 0 ? 'The draft model writes its guesses, one quick pass each…'
    : 'The big model scores every position in a single pass…';
}

/** The chips of pass f, built once per pass (so a ghost pops in once), then restyled as the pass runs. */
function buildBench(f) {
  view.benchFrame = f;
  clear(view.chips);
  view.bench.classList.toggle('idle', !f);
  view.chipEls = [];
  if (!f) {
    view.benchHead.textContent = 'Ready: the prompt is in, nothing is written yet.';
    view.verdict.textContent = 'Next, the big model reads the whole prompt in one pass (prefill) and writes the first token.';
    return;
  }
  const g = f.proposed.length;
  view.benchHead.textContent = f.kind === 'prefill' ? `Pass ${f.pass} · prefill: the big model reads the prompt`
    : g ? `Pass ${f.pass} · the draft guesses ${g === 1 ? '1 token' : `${g} tokens`}, then the big model checks ` +
      `${g === 1 ? 'it' : 'them'} in one pass` : lastPass(f) ? `Pass ${f.pass} · one token left: a plain pass, nothing to guess`
      : `Pass ${f.pass} · no guess: the text so far holds no earlier match for its last words, so a plain pass`;
  view.chipEls = f.proposed.map((tok) => chip(view.chips, tok, 'ghost'));
  view.ownEl = chip(view.chips, f.target_token, f.kind === 'bonus' ? 'own bonus' : 'own');
}

const lastPass = (f) => f.start + f.emitted.length >= view.data.demo.num_tokens;

function verdict(f) {
  const g = f.proposed.length, k = f.num_accepted, tok = (x) => `“${show(x.text)}”`;
  const n = f.emitted.length;
  if (f.kind === 'prefill') return `Its first token: ${tok(f.target_token)}.`;
  if (f.kind === 'plain') return `It writes ${tok(f.target_token)}: 1 token from 1 pass.`;
  if (f.kind === 'bonus') {
    return `${g === 1 ? 'The guess is' : `All ${g} guesses are`} kept, plus a free token of its own, ${tok(f.bonus)}: ` +
      `${n} tokens from 1 pass.`;
  }
  const kept = k ? `Kept ${k} of ${g}; ` : `Kept none of ${g}; `;
  return `${kept}guess ${k + 1}, ${tok(f.rejected)}, is not what it would write: it writes ${tok(f.replacement)} instead` +
    `${g - k === 2 ? ' and drops the guess after it' : g - k > 2 ? ` and drops the ${g - k - 1} after it` : ''}. ` +
    `${plural(n, 'token')} from 1 pass.`;
}

const show = (s) => s.replace(/\n/g, '↵').replace(/\t/g, '⇥');

function chip(parent, tok, state) {
  return h('span', { class: `sp-chip ${state}`, text: show(tok.text), title: `token ${tok.id}: ${state}` }, parent);
}

// ---- the running text: prompt, then the answer coloured by who wrote each token -----------------
function drawText(d) {
  clear(view.text);
  // a chat template's system turn is context, not the question: secondary (hidden in embeds and presenter mode)
  const pt = d.prompt_tokens;
  let user = 0;
  pt.forEach((t, i) => { if (t.text === '<|im_start|>' && pt[i + 1] && pt[i + 1].text === 'user') user = i; });
  pt.forEach((t, i) => { const s = token(view.text, t, 'prompt'); if (i < user) s.setAttribute('data-secondary', ''); });
  view.out = [];
  for (const f of d.frames) {
    f.emitted.forEach((t, j) => view.out.push(token(view.text, t, j < f.num_accepted ? 'kept' : 'own')));
  }
}

function token(parent, t, cls) {
  const parts = t.text.split('\n');
  const s = h('span', { class: `sp-tok ${cls}` }, parent);
  parts.forEach((part, j) => {
    if (j) { s.append('↵'); h('br', {}, s); }
    s.append(part);
  });
  return s;
}

function showText(written, fresh) {
  const from = fresh ? fresh.start : written;
  view.out.forEach((s, j) => {
    s.hidden = j >= written;
    s.classList.toggle('fresh', j >= from && j < written);
  });
}

// ---- readouts and legend -----------------------------------------------------------------------
function drawReadouts(d, passes, written) {
  clear(view.readouts);
  const r = (label, value, unit) => readout(view.readouts, label, value, unit);
  const drafts = d.frames.slice(0, passes).reduce((a, x) => a + x.num_drafted, 0);
  const kept = d.frames.slice(0, passes).reduce((a, x) => a + x.num_accepted, 0);
  r('Big-model passes', num(passes), `for ${plural(written, 'token')}`);
  r('Tokens per pass', passes ? fixed(written / passes, 2) : '–', `plain decoding: 1`);
  r('Draft guesses kept', drafts ? pct(kept / drafts, 0) : '–', `${num(kept)} of ${num(drafts)}`);
  r('Draft passes', num(drafts), d.draft_model.num_params === 0 ? `${d.draft_model.name}, no model` : 'small model');
}

function legend() {
  swatches(view.legend, [
    ['sw-ghost', 'draft guess, not yet checked'],
    ['sw-kept', 'guess the big model agrees with: kept'],
    ['sw-rejected', 'first mistake: rejected'],
    ['sw-dropped', 'guesses after the mistake: thrown away'],
    ['sw-own', 'the big model’s own token (the fix, or a free bonus)'],
    ['sw-draft', 'one draft pass (in the time axis: c of a big-model pass)'],
    ['sw-miss', 'a check’s first miss (tick above its pass)'],
    ['sw-expected', 'the formula’s average check (dashed)'],
  ]);
}
