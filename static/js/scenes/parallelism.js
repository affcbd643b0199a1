// scenes/parallelism.js: chapter 10: an 8-GPU board with its NVSwitch chips; TP all-reduce pulses, PP stages and bubbles.

import { svg, h, clear } from '../lib/svg.js';
import { swatches } from '../lib/legend.js';
import { num, fixed, pct, duration, plural } from '../lib/format.js';
import { sceneRoot, readoutRow, widthClass, redrawOnWidth, still } from '../lib/scene-kit.js';
import { drawText } from './parallelism-text.js';
import { POOL, animateBoard, beatCount, showBeat } from './parallelism-motion.js';
import { drawLayer } from './parallelism-layer.js';

// Two drawings, px-for-px at desktop and at phone width (viewBox width = the width it is drawn for).
const VARIANTS = {
  wide: { name: 'wide', W: 960, H: 390, x0: 24, gw: 204, step: 234, gh: 116, sw: 124, sh: 40, label: 14, small: 11.5, barY: 54 },
  mid: { name: 'mid', W: 660, H: 340, x0: 12, gw: 146, step: 162, gh: 110, sw: 104, sh: 38, label: 13, small: 11, barY: 48 },
  narrow: { name: 'narrow', W: 360, H: 330, x0: 6, gw: 82, step: 88, gh: 104, sw: 76, sh: 36, label: 12, small: 10, barY: 46 },
};
const WIDTHS = { narrow: 500, mid: 840 }; // stage widths (px): a phone, the tour's stage beside its rails, a full-width slide

let view = null;

export function mount(stage, context) {
  const wrap = sceneRoot(stage, 'parallelism', 'par-scene');
  view = {
    stage, ctx: context,
    readouts: readoutRow(wrap),
    verdict: h('p', { class: 'par-verdict' }, wrap),
    layer: h('div', { class: 'par-layer' }, wrap),
    board: h('div', { class: 'par-board' }, wrap),
    legend: h('div', { class: 'legend par-legend', 'data-narrow-secondary': '' }, wrap),
    caption: h('p', { class: 'par-caption', 'aria-hidden': 'true' }, wrap),
    cards: h('div', { class: 'par-cards', 'data-secondary': '' }, wrap),
    timeline: h('div', { class: 'par-timeline' }, wrap),
    breakdown: h('div', { class: 'par-breakdown', 'data-narrow-secondary': '' }, wrap),
    sources: h('p', { class: 'par-sources', 'data-secondary': '' }, wrap),
    math: h('div', { class: 'par-math', 'data-secondary': '' }, wrap),
    data: null, params: {}, variant: null, motion: null, step: null,
  };
  view.ro = redrawOnWidth(stage, WIDTHS, () => view?.data && view.variant, drawAll);
}

export function unmount() {
  if (!view) return;
  stopMotion();
  view.ro.disconnect();
  view = null;
}

export function update(data, params) {
  if (!view) return;
  view.data = data;
  view.params = params || {};
  view.step = null; // tour.js calls showStep again after every update while a step is frozen
  drawText(view, data, phaseOf());
  drawLegend();
  drawAll();
}

function drawLegend() {
  swatches(view.legend, [
    ['k-weights', 'weights'],
    ['k-kv', 'KV cache'],
    ['k-reserve', 'runtime reserve'],
    ['k-cap', 'GPU memory'],
    ['k-tp dot', 'all-reduce traffic (size ∝ bytes)'],
    ['k-pp dot', 'activations handed to the next stage'],
  ]);
}

const phaseOf = () => (view.params.phase === 'decode' ? 'decode' : 'prefill');
const variantFor = () => widthClass(view.stage, WIDTHS);

function drawAll() {
  stopMotion();
  view.variant = variantFor();
  const d = view.data, v = VARIANTS[view.variant];
  view.ly = drawLayer(view.layer, d, v.name);
  view.drawing = drawBoard(d, v);
  view.tl = drawTimeline(d, d[phaseOf()], v);
  view.args = { d, p: d[phaseOf()], dr: view.drawing, tl: view.tl, ly: view.ly, v,
    caption: (text) => { view.caption.textContent = text; } };
  if (view.step !== null) return showBeat(view.args, view.step);
  view.motion = animateBoard({ ...view.args, frozen: still(view.ctx) });
}

/** Presenter beats: the tensor-parallel story of one layer (whole, cut, compute, all-reduce...) or pipeline slots. */
export function numSteps(data) {
  return beatCount(data);
}

export function showStep(i) {
  if (!view || !view.data) return;
  stopMotion();
  view.step = Math.max(0, Math.min(i, numSteps(view.data) - 1));
  if (view.args) showBeat(view.args, view.step);
}

function stopMotion() {
  if (view && view.motion) view.motion.stop();
  if (view) view.motion = null;
}

// ---- the board -----------------------------------------------------------------------------------

function gpuBox(g, v) {
  const col = g % 4, top = g < 4;
  return { x: v.x0 + col * v.step, y: top ? 8 : v.H - v.gh - 8, w: v.gw, h: v.gh, port: top ? 'bottom' : 'top' };
}

function switchBox(k, n, v) {
  const cx = (v.W * (k + 0.5)) / n;
  return { x: cx - v.sw / 2, y: v.H / 2 - v.sh / 2, w: v.sw, h: v.sh };
}

function portOf(b, side) {
  if (side === 'bottom') return [b.x + b.w / 2, b.y + b.h];
  if (side === 'top') return [b.x + b.w / 2, b.y];
  if (side === 'left') return [b.x, b.y + b.h / 2];
  return [b.x + b.w, b.y + b.h / 2];
}

const opposite = { top: 'bottom', bottom: 'top', left: 'right', right: 'left' };

/** What a GPU holds, in words that fit its box: long (wide board), roomy (mid) or short (phone). */
function roleText(d, m, wide, roomy = wide) {
  const s = d.stages[m.stage];
  if (d.pp === 1) {
    if (d.tp === 1) return roomy ? `all ${d.num_layers} layers, whole` : 'all layers';
    return wide ? `1/${d.tp} of every layer (all ${d.num_layers})` : roomy ? `1/${d.tp} of every layer` : `1/${d.tp} slices`;
  }
  wide = roomy;
  const span = wide ? `layers ${s.first_layer}–${s.last_layer}` : `L${s.first_layer}–${s.last_layer}`;
  return d.tp > 1 ? `${span}${wide ? ', ' : ' · '}1/${d.tp}${wide ? ' each' : ''}` : span;
}

function memBar(g, b, d, v, used) {
  const pad = v.name === 'wide' ? 12 : 9; // clear of the slice-colour stripe
  const x = b.x + pad, y = b.y + v.barY, w = b.w - 2 * pad, hh = v.name === 'wide' ? 16 : 12;
  const total = d.weights_gb + d.kv_cache_gb + d.activations_gb + d.reserve_gb;
  const scale = w / Math.max(total, d.capacity_gb);
  svg('rect', { x, y, width: d.capacity_gb * scale, height: hh, rx: 3, class: 'mem-bg' }, g);
  let at = x;
  for (const [k, cls] of [['weights_gb', 'weights'], ['kv_cache_gb', 'kv'], ['activations_gb', 'act'], ['reserve_gb', 'reserve']]) {
    const wd = d[k] * scale;
    svg('rect', { x: at, y, width: Math.max(0, wd), height: hh, class: `mem ${cls}${used ? '' : ' unused'}` }, g);
    at += wd;
  }
  if (!d.fits) svg('rect', { x: x + d.capacity_gb * scale, y: y - 2, width: at - x - d.capacity_gb * scale, height: hh + 4, class: 'mem over' }, g);
  svg('line', { x1: x + d.capacity_gb * scale, x2: x + d.capacity_gb * scale, y1: y - 4, y2: y + hh + 4, class: 'mem-cap' }, g);
  return y + hh;
}

/** The memory of one pipeline stage's GPU: only the first holds the embedding, only the last the lm_head. */
function stageMemory(d, stage) {
  const w = d.stages[stage]?.weights_gb;
  if (w == null || d.pp === 1) return d;
  const spare = d.spare_gb + d.weights_gb - w;
  return { ...d, weights_gb: w, spare_gb: spare, fits: spare >= 0, shortfall_gb: Math.max(0, -spare) };
}

function drawGpu(parent, d, g, v) {
  const m = d.gpu_map[g];
  const b = gpuBox(g, v);
  const used = !!m;
  const grp = svg('g', { class: `gpu${used ? '' : ' unused'}` }, parent);
  const glow = svg('rect', { x: b.x, y: b.y, width: b.w, height: b.h, rx: 10, class: 'gpu-box' }, grp);
  const wide = v.name === 'wide';
  if (m && d.tp > 1) svg('rect', { x: b.x + 1.5, y: b.y + 8, width: wide ? 7 : 5, height: b.h - 16, rx: 2.5, class: `slice-mark g-${m.rank % 8}` }, grp);
  const tx = b.x + (wide ? 12 : 9);
  svg('text', { x: tx, y: b.y + (wide ? 22 : 18), class: 'lbl', 'font-size': v.label, text: `GPU ${g}` }, grp);
  if (!used) {
    svg('text', { x: tx, y: b.y + (wide ? 42 : 34), class: 'sm muted', 'font-size': v.small, text: 'not used' }, grp);
    return { g, b, glow, tag: null };
  }
  const tag = svg('text', { x: b.x + b.w - (wide ? 10 : 6), y: b.y + (wide ? 22 : 18), class: 'sm tag', 'text-anchor': 'end', 'font-size': v.small }, grp);
  if (d.replicas > 1) tag.textContent = wide ? `replica ${m.replica + 1}` : `R${m.replica + 1}`;
  svg('text', { x: tx, y: b.y + (wide ? 42 : 34), class: 'sm', 'font-size': v.small, text: roleText(d, m, wide, v.name !== 'narrow') }, grp);
  d = stageMemory(d, m.stage);
  const below = memBar(grp, b, d, v, used);
  const memText = wide ? `${fixed(d.weights_gb, 1)} GB weights + ${fixed(d.kv_cache_gb, 1)} GB KV` : `${fixed(d.weights_gb, 1)} + ${fixed(d.kv_cache_gb, 1)} GB`;
  svg('text', { x: tx, y: below + (wide ? 18 : 15), class: 'sm', 'font-size': v.small, text: memText }, grp);
  const free = d.fits ? `${fixed(d.spare_gb, 0)} GB free${wide ? ` of ${num(d.capacity_gb)}` : ''}` : `${fixed(d.shortfall_gb, 0)} GB over${wide ? ` ${num(d.capacity_gb)}` : ''}`;
  svg('text', { x: tx, y: below + (wide ? 35 : 29), class: `sm ${d.fits ? 'muted' : 'bad'}`, 'font-size': v.small, text: free }, grp);
  return { g, b, glow, tag, m };
}

function drawBoard(d, v) {
  const host = clear(view.board);
  const n = d.node.nvswitch_chips;
  const s = svg('svg', { viewBox: `0 0 ${v.W} ${v.H}`, class: `par-svg ${v.name}`, role: 'img', width: '100%',
    'aria-label': `${d.node.name}: ${d.gpus} of 8 GPUs used, tensor parallel ${d.tp}, pipeline ${d.pp}, through ${n} NVSwitch chips` }, host);
  svg('rect', { x: 0, y: 0, width: v.W, height: v.H, rx: 14, class: 'board' }, s);
  const links = svg('g', { class: 'links' }, s);
  const switches = [...Array(n).keys()].map((k) => switchBox(k, n, v));
  const gpus = [...Array(8).keys()].map((g) => drawGpu(s, d, g, v));
  for (const G of gpus) {
    for (const [k, sb] of switches.entries()) {
      const [x1, y1] = portOf(G.b, G.b.port);
      const [x2, y2] = portOf(sb, opposite[G.b.port]);
      svg('line', { x1, y1, x2, y2, class: `link${G.m ? '' : ' unused'}` }, links);
      G[`p${k}`] = [[x1, y1], [x2, y2]];
    }
  }
  const pulses = [...Array(POOL)].map(() => svg('circle', { r: 0, class: 'pulse', visibility: 'hidden' }, s));
  const switchBytes = [];
  for (const sb of switches) { // over the pulses: traffic passes under the switch and never hides its bytes
    svg('rect', { x: sb.x, y: sb.y, width: sb.w, height: sb.h, rx: 6, class: 'switch' }, s);
    const name = svg('text', { x: sb.x + sb.w / 2, y: sb.y + sb.h / 2 + 4, 'text-anchor': 'middle', class: 'sm sw-lbl',
      'font-size': v.small, text: 'NVSwitch' }, s);
    const val = svg('text', { x: sb.x + sb.w / 2, y: sb.y + sb.h / 2 + v.small, 'text-anchor': 'middle', class: 'sm sw-bytes',
      'font-size': v.small - 1, visibility: 'hidden' }, s);
    switchBytes.push({ name, val, cy: sb.y + sb.h / 2, fs: v.small });
  }
  return { svg: s, gpus, switches, pulses, n, switchBytes, narrow: v.name === 'narrow' };
}

// ---- the timeline (pipeline) ---------------------------------------------------------------------

function drawTimeline(d, p, v) {
  const host = clear(view.timeline);
  if (d.pp === 1) return null;
  const tl = p.timeline;
  const labelW = v.name === 'wide' ? 150 : 74, rowH = v.name === 'wide' ? 24 : 20, W = v.W;
  const cw = (W - labelW - 4) / tl.slots;
  const H = d.pp * rowH + 26;
  h('p', { class: 'par-bar-label', text: tl.phase === 'prefill'
    ? `Pipeline timeline, one prefill: ${plural(d.micro_batches, 'micro-batch', 'micro-batches')} through ${d.pp} stages take ${tl.slots} slots of ${duration(p.slot_ms)}`
    : `Pipeline timeline, decoding: two rounds of ${Math.max(d.pp, d.micro_batches)} slots of ${duration(p.slot_ms)}` }, host);
  const s = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'tl-svg', width: '100%', role: 'img',
    'aria-label': `Pipeline timeline: ${pct(tl.idle_fraction, 0)} of stage time idle (bubbles)` }, host);
  const busy = new Set(tl.cells.map((c) => `${c.stage}:${c.slot}`));
  for (let st = 0; st < d.pp; st++) {
    const y = st * rowH;
    const sg = d.stages[st];
    svg('text', { x: 0, y: y + rowH * 0.68, class: 'sm', 'font-size': v.small,
      text: v.name === 'wide' ? `Stage ${st + 1} · layers ${sg.first_layer}–${sg.last_layer}` : `S${st + 1} · L${sg.first_layer}–${sg.last_layer}` }, s);
    for (let t = 0; t < tl.slots; t++) {
      if (!busy.has(`${st}:${t}`)) svg('rect', { x: labelW + t * cw + 1, y: y + 2, width: cw - 2, height: rowH - 4, rx: 3, class: 'cell idle' }, s);
    }
  }
  for (const c of tl.cells) {
    const x = labelW + c.slot * cw + 1, y = c.stage * rowH + 2;
    svg('rect', { x, y, width: cw - 2, height: rowH - 4, rx: 3, class: 'cell busy' }, s);
    if (cw > 22) svg('text', { x: x + (cw - 2) / 2, y: y + rowH * 0.58, 'text-anchor': 'middle', class: 'sm cell-lbl', 'font-size': v.small - 1, text: `${c.micro_batch + 1}` }, s);
  }
  const cursor = svg('rect', { x: labelW, y: 0, width: cw, height: d.pp * rowH, class: 'tl-cursor', visibility: 'hidden' }, s);
  const ly = d.pp * rowH + 18;
  svg('rect', { x: labelW, y: ly - 10, width: 12, height: 12, rx: 2, class: 'cell busy' }, s);
  const wide = v.name === 'wide', gap = wide ? 220 : 100;
  svg('text', { x: labelW + 18, y: ly, class: 'sm', 'font-size': v.small, text: wide ? 'busy (micro-batch number)' : 'busy' }, s);
  svg('rect', { x: labelW + gap, y: ly - 10, width: 12, height: 12, rx: 2, class: 'cell idle' }, s);
  svg('text', { x: labelW + gap + 18, y: ly, class: 'sm', 'font-size': v.small, text: `idle: bubble ${pct(tl.idle_fraction, 0)}` }, s);
  return { cursor, labelW, cw, slots: tl.slots, cells: tl.cells };
}
