// scenes/parallelism-text.js: chapter 10's words and numbers around the board: readouts, verdict, the TP and PP
// cards, one step's time breakdown, sources and the show-the-math list.

import { h, clear } from '../lib/svg.js';
import { swatches } from '../lib/legend.js';
import { num, fixed, pct, bytes, duration, plural } from '../lib/format.js';
import { mathDetails } from '../lib/math.js';
import { readout } from '../lib/scene-kit.js';

const MATH_KEYS = [['weights_gb', 'Weights per GPU'], ['kv_cache_gb', 'KV cache per GPU'],
  ['allreduce_bytes_per_layer', 'All-reduce bytes per layer'], ['allreduce_ms', 'All-reduce time'],
  ['bubble_fraction', 'Pipeline bubble'], ['ttft_ms', 'Time to first token'], ['tokens_per_s_per_user', 'Tokens/s per chat']];

/** Fill the text containers of `els` ({readouts, verdict, cards, breakdown, sources, math}) for one phase. */
export function drawText(els, d, phase) {
  drawReadouts(els, d);
  drawVerdict(els, d);
  drawCards(els, d, phase);
  drawBreakdown(els, d, phase);
  drawSources(els, d);
  drawMath(els, d);
}

function drawReadouts(els, d) {
  const r = clear(els.readouts);
  // a pipeline's stages differ: only the first holds the embedding and only the last the LM head
  const mid = d.stages.slice(1, -1).map((s) => s.weights_gb);
  const ends = mid.length && d.weights_gb - Math.min(...mid) >= 0.05;
  readout(r, 'Weights per GPU', ends ? `${fixed(Math.min(...mid), 1)}–${fixed(d.weights_gb, 1)}` : fixed(d.weights_gb, 1), ends
    ? `GB of ${num(d.capacity_gb)}: the end stages also hold the embedding and LM head`
    : `GB of ${num(d.capacity_gb)}`);
  readout(r, 'KV cache per GPU', fixed(d.kv_cache_gb, 2), 'GB');
  readout(r, 'Fits', d.fits ? 'yes' : 'no', d.fits ? `${fixed(d.spare_gb, 0)} GB spare` : `${fixed(d.shortfall_gb, 0)} GB short`,
    { cls: d.fits ? 'ok' : 'bad' });
  readout(r, 'First token', d.fits ? duration(d.ttft_ms) : '–', d.fits ? '' : 'cannot run');
  readout(r, 'Per chat', d.fits ? num(d.tokens_per_s_per_user) : '–', d.fits ? 'tokens/s' : 'cannot run');
  readout(r, 'Prefill bubble', pct(d.bubble_fraction, 0), d.pp > 1 ? `${d.micro_batches} micro-batches` : 'no pipeline');
  if (d.nodes) {
    const n = d.nodes;
    readout(r, 'Nodes', num(n.nodes), n.spans_nodes ? 'replica spans nodes: network links' : `one ${n.gpus_per_node}-GPU NVLink domain`,
      { cls: n.spans_nodes ? 'bad' : '' });
  }
}

function drawVerdict(els, d) {
  const one = d.single_gpu;
  const split = d.replicas > 1 ? ` · ${d.replicas} replicas of ${d.tp * d.pp} GPUs` : '';
  els.verdict.textContent = `${d.model_name}: ${fixed(d.model_weights_gb, 0)} GB of weights in ${d.precision.toUpperCase()}; ` +
    `on one GPU ${one.fits ? 'it would fit' : `it would be ${fixed(one.shortfall_gb, 0)} GB short`}. ` +
    `Split: tensor ×${d.tp}, pipeline ×${d.pp} over ${plural(d.gpus, 'GPU')}${split}.`;
}

function card(parent, title, on, lines) {
  const c = h('div', { class: `par-card${on ? '' : ' off'}` }, parent);
  h('strong', { text: title }, c);
  for (const l of lines) h('p', { text: l }, c);
}

function drawCards(els, d, phase) {
  const c = clear(els.cards);
  const p = d[phase], t = p.tensor, pl = p.pipeline;
  const what = phase === 'prefill' ? `${num(t.tokens)} prompt tokens` : `${num(t.tokens)} new tokens`;
  card(c, `Tensor parallel ×${d.tp}`, d.tp > 1, d.tp > 1 ? [
    `Every layer: 2 all-reduces of ${bytes(t.message_bytes)} (${what} × ${num(d.hidden_size)} numbers × 2 bytes).`,
    `Ring all-reduce: each GPU sends ${bytes(t.sent_bytes_per_gpu_per_layer)} per layer; ${duration(t.allreduce_ms)} each ` +
      `at ${num(t.busbw_gb_s)} GB/s achieved (${duration(t.allreduce_ms_line_rate)} at the ${num(t.line_rate_gb_s)} GB/s line rate).`,
    `All ${d.num_layers} layers: ${duration(t.allreduce_ms_per_step)} of the ${duration(p.step_ms)} step.`,
  ] : ['One GPU per layer: no all-reduce.']);
  card(c, `Pipeline ×${d.pp}`, d.pp > 1, d.pp > 1 ? [
    `Each stage holds ${layerCounts(d)} and hands on ${bytes(pl.activation_bytes_per_send)} ` +
      `of activations per micro-batch (${duration(pl.send_ms)}).`,
    phase === 'prefill'
      ? `Bubble: (pp − 1) / (micro-batches + pp − 1) = ${d.pp - 1}/${d.micro_batches + d.pp - 1} = ${pct(d.bubble_fraction, 0)} of each GPU's time idle.`
      : `Decoding, a micro-batch returns every ${Math.max(d.pp, d.micro_batches)} slots: GPUs idle ${pct(p.timeline.idle_fraction, 0)}.`,
  ] : ['All layers on every GPU of the group: no hand-offs, no bubble.']);
}

function layerCounts(d) {
  const n = d.stages.map((s) => s.num_layers);
  return n.every((x) => x === n[0]) ? `${n[0]} layers` : `${n.join(' / ')} layers`;
}

function drawBreakdown(els, d, phase) {
  const b = clear(els.breakdown);
  const p = d[phase];
  const label = phase === 'prefill' ? `One prefill step: ${plural(p.tokens, 'token')} through all ${d.num_layers} layers`
    : `One decode step: ${plural(p.tokens, 'chat')} × 1 token through all ${d.num_layers} layers`;
  h('p', { class: 'par-bar-label', text: `${label}${d.pp > 1 ? ' (one micro-batch)' : ''}: ${duration(p.step_ms)}` }, b);
  const bar = h('div', { class: 'par-bar', role: 'img', 'aria-label': `${label}: ${duration(p.step_ms)}` }, b);
  // memory-bound GEMMs spend their time reading the weights (chapter 4's stream), not multiplying
  // (drawn in the weights' colour, as chapter 4's stream)
  const memoryBound = p.bound === 'memory';
  const gemm = memoryBound ? 'reading the weights (GEMMs)' : 'matrix math (GEMMs)';
  const parts = [['gemm_ms', gemm, memoryBound ? 'weights' : 'compute'], ['attention_ms', 'attention', 'attention'],
    ['comm_ms', 'NVLink traffic', 'memory'], ['overhead_ms', 'launch overhead', 'idle']];
  const shown = parts.filter(([k]) => p[k]);
  for (const [k, name, cls] of shown) {
    const tip = k === 'overhead_ms' && p.overhead_note ? `${name}: ${duration(p[k])} (${p.overhead_note})` : `${name}: ${duration(p[k])}`;
    const seg = h('span', { class: `seg ${cls}`, title: tip }, bar);
    seg.style.width = `${(p[k] / p.step_ms) * 100}%`;
  }
  swatches(h('div', { class: 'legend' }, b), shown.map(([k, name, cls]) => [cls, `${name} ${duration(p[k])}`]));
  if (p.overhead_note) h('p', { class: 'par-bar-note', text: `Launch overhead: ${p.overhead_note}.` }, b);
}

function shortSource(s) {
  return (s || '').split(' - http')[0].split(':')[0];
}

function drawSources(els, d) {
  const s = d.node.sources, p = clear(els.sources);
  const part = (text, src) => { h('span', { text, title: src || '' }, p); };
  part(`Sources: ${d.node.name}, ${d.node.nvswitch_chips} NVSwitch chips (${shortSource(s.nvswitch_chips)}); `);
  part(`NVLink ${num(d.node.nvlink_bandwidth_gb_s)} GB/s per GPU, both directions (${shortSource(s.nvlink_bandwidth_gb_s)}); `, s.nvlink_bandwidth_gb_s);
  part(`all-reduce bus bandwidth ${num(d.prefill.tensor.busbw_gb_s)} GB/s (${shortSource(s.allreduce_bus_bandwidth_gb_s) ||
    'cost model: a fixed fraction of the line rate'}).`, s.allreduce_bus_bandwidth_gb_s);
}

function drawMath(els, d) {
  const m = clear(els.math);
  for (const [k, label] of MATH_KEYS) if (d.math[k]) m.appendChild(mathDetails(d.math[k], label));
}
