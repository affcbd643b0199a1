// scenes/parallelism-motion.js: chapter 10's motion on the board: all-reduce pulses through the switches (tensor
// parallel), activations handed from stage to stage and the timeline cursor (pipeline parallel).

import { bytes, duration } from '../lib/format.js';
import { loop } from '../lib/tween.js';

export const POOL = 40;    // travelling pulses drawn at most at once
const LAYER_MS = 1500;     // one layer of the tensor-parallel animation
const SLOT_MS = 1100;      // one pipeline slot

function pulseRadius(bytesSent, v) {
  const r = 2.5 + 1.6 * Math.log10(Math.max(bytesSent, 1e3) / 1e3);
  return Math.min(v.name === 'wide' ? 8 : 5.5, Math.max(2.5, r));
}

function place(c, a, b, u, r) {
  c.setAttribute('cx', a[0] + (b[0] - a[0]) * u);
  c.setAttribute('cy', a[1] + (b[1] - a[1]) * u);
  c.setAttribute('r', r);
  c.setAttribute('visibility', 'visible');
}

/** All-reduce among GPUs `ids` at progress u: up to the switches, then back down. Returns pulses used. */
function allReduce(dr, ids, u, r, from, cls) {
  let i = from;
  for (const g of ids) {
    for (let k = 0; k < dr.n && i < POOL; k++, i++) {
      const [gp, sp] = dr.gpus[g][`p${k}`];
      const c = dr.pulses[i];
      // Going up, each GPU's own partial result (its colour); coming back, the sum everyone shares.
      c.setAttribute('class', u < 0.5 && cls === 'tp' ? `pulse tp g-${(dr.gpus[g].m?.rank ?? 0) % 8}` : `pulse ${cls}`);
      if (u < 0.5) place(c, gp, sp, u * 2, r);
      else place(c, sp, gp, (u - 0.5) * 2, r);
    }
  }
  return i;
}

function hidePulses(dr, from) {
  for (let i = from; i < POOL; i++) dr.pulses[i].setAttribute('visibility', 'hidden');
}

function groups(d) {
  const out = new Map();
  for (const m of d.gpu_map) {
    const key = `${m.replica}:${m.stage}`;
    if (!out.has(key)) out.set(key, []);
    out.get(key).push(m.gpu);
  }
  return out;
}

function setBusy(dr, d, ids, on, label = '') {
  for (const G of dr.gpus) {
    if (!G.m) continue;
    const hit = ids.has(G.g);
    G.glow.classList.toggle('busy', on && hit);
    if (G.tag && G.m && d.replicas === 1) G.tag.textContent = hit && label ? label : '';
  }
}

/**
 * Animate the board for one phase: {d, p: d[phase], dr: the board drawing, tl: the timeline drawing, ly: the layer
 * drawing, v: the variant, caption(text), frozen}. Frozen draws the last beat. Returns {stop} (null when frozen).
 */
export function animateBoard(args) {
  const tick = args.d.pp > 1 ? pipelineTick(args) : tensorTick(args);
  if (args.frozen) { tick(null); return null; }
  return loop((ms) => tick(ms));
}

/** Beats a presenter steps through (pure in d): the tensor-parallel story, or the pipeline's slots. */
export function beatCount(d) {
  if (d.pp > 1) return 1 + Math.min(PP_BEATS, d.prefill.timeline.slots);
  return d.tp > 1 ? TP_BEATS.length : TP1_BEATS.length;
}

/** Draw beat i, still. */
export function showBeat(args, i) {
  if (args.d.pp > 1) return pipelineTick(args)(null, i);
  return tensorBeat(args, i);
}

// ---- tensor parallel --------------------------------------------------------------------------

// Each beat: the layer figure's pose, which GPUs compute, where the all-reduce traffic is (u: 0 at the GPUs,
// 0.5 at the switches, 1 back home) and what the caption says.
const TP_BEATS = [
  { cut: false }, { cut: true }, { cut: true, active: 'attention', busy: true }, { cut: true, active: 'attention', u: 0.3 },
  { cut: true, active: 'attention', u: 0.8 }, { cut: true, active: 'mlp', busy: true }, { cut: true, active: 'mlp', u: 0.45, last: true },
];
const TP1_BEATS = [{ cut: false }, { cut: true }, { cut: true, active: 'attention', busy: true }];
const PP_BEATS = 10;

function tpText(d, p, b) {
  const t = p.tensor, n = d.node.nvswitch_chips, ly = d.layer;
  if (!b.cut) return `One layer of ${d.num_layers}: ${bytes(ly.layer_bytes)} of weights, ${bytes(ly.attention_bytes)} for attention and ${bytes(ly.mlp_bytes)} for the MLP.`;
  if (d.tp === 1) return b.busy ? 'One GPU runs every layer: nothing to swap.' : `One GPU holds every layer whole (${bytes(ly.layer_bytes)} each).`;
  if (b.u === undefined && !b.busy) return `Cut ${d.tp} ways: each GPU keeps a ${bytes(ly.slice_bytes)} slice of every layer, in its colour.`;
  const part = b.active === 'mlp' ? 'MLP' : 'attention';
  if (b.busy) return `${part === 'MLP' ? 'MLP' : 'Attention'}: all ${d.tp} GPUs multiply by their own slice at once; each ends with a partial result.`;
  const per = t.sent_bytes_per_gpu_per_layer / 2;
  if (b.last) return `Then layer 2 of ${d.num_layers}: ${d.num_layers} layers × 2 all-reduces = ${duration(t.allreduce_ms_per_step)} of the ${duration(p.step_ms)} step.`;
  if (b.u < 0.5) return `All-reduce after the ${part}: each GPU sends ${bytes(per)} through the ${n} NVSwitches (${bytes(per / n)} through each).`;
  return `The switches pass the sums back: every GPU now has the full ${bytes(t.message_bytes)} result and the layer can go on.`;
}

function tensorBeat({ d, p, dr, ly, v, caption }, i) {
  const beats = d.tp > 1 ? TP_BEATS : TP1_BEATS;
  const beat = beats[Math.max(0, Math.min(i, beats.length - 1))];
  const all = new Set(d.gpu_map.map((m) => m.gpu));
  ly.setPose(beat);
  setBusy(dr, d, all, !!beat.busy);
  let used = 0;
  if (beat.u !== undefined) for (const ids of groups(d).values()) used = allReduce(dr, ids, beat.u, tpRadius(p, v), used, 'tp');
  hidePulses(dr, used);
  showSwitchBytes(dr, d, p, beat.u !== undefined);
  caption(tpText(d, p, beat));
}

const tpRadius = (p, v) => pulseRadius(p.tensor.sent_bytes_per_gpu_per_layer / 2, v);

/** Under each switch, during an all-reduce: the bytes each GPU sends through it. */
function showSwitchBytes(dr, d, p, on) {
  const per = p.tensor.sent_bytes_per_gpu_per_layer / 2 / dr.n;
  const show = on && d.tp > 1;
  for (const { name, val, cy, fs } of dr.switchBytes) {
    val.setAttribute('visibility', show ? 'visible' : 'hidden');
    val.textContent = `${d.tp} × ${bytes(per)}`;
    name.setAttribute('y', (show ? cy - 2 : cy + fs * 0.35).toFixed(1));
  }
}

function tensorTick(args) {
  const { d, p, dr, ly, v, caption } = args;
  const compute = p.gemm_ms + p.attention_ms;
  const share = Math.min(0.6, Math.max(0.15, p.comm_ms / (compute + p.comm_ms || 1)));
  const r = tpRadius(p, v);
  const grp = [...groups(d).values()];
  const all = new Set(d.gpu_map.map((m) => m.gpu));
  let last = '';
  return (ms) => {
    if (ms === null) return tensorBeat(args, beatCount(d) - 1);
    const layer = Math.floor(ms / LAYER_MS) % d.num_layers;
    const u = (ms % LAYER_MS) / LAYER_MS;
    const half = u < 0.5 ? 0 : 1, w = (u % 0.5) / 0.5;
    const inComm = d.tp > 1 && w > 1 - share;
    ly.setPose({ cut: true, active: half ? 'mlp' : 'attention' });
    setBusy(dr, d, all, !inComm);
    let i = 0;
    if (inComm) for (const ids of grp) i = allReduce(dr, ids, (w - (1 - share)) / share, r, i, 'tp');
    hidePulses(dr, i);
    showSwitchBytes(dr, d, p, inComm);
    const text = `Layer ${layer + 1} of ${d.num_layers}: ${half ? 'MLP' : 'attention'}` +
      (d.tp > 1 ? (inComm ? ` · all-reduce of ${bytes(p.tensor.message_bytes)} through the switches` : ' · each GPU computes its slice') : '');
    if (text !== last) { last = text; caption(text); }
  };
}

// ---- pipeline parallel ------------------------------------------------------------------------

function pipelineTick({ d, p, dr, tl, ly, v, caption }) {
  const stageIds = groups(d);
  ly.setPose({ cut: true, active: null });
  showSwitchBytes(dr, d, p, false);
  const tpR = pulseRadius(p.tensor.sent_bytes_per_gpu_per_layer / 2, v);
  const ppR = pulseRadius(p.pipeline.activation_bytes_per_send, v);
  const bySlot = new Map();
  for (const c of tl.cells) bySlot.set(`${c.stage}:${c.slot}`, c.micro_batch);
  let last = '';
  // beat (when still): 0 = the stages, before anything runs; 1.. = slots spread over the timeline.
  return (ms, beat = null) => {
    const still = ms === null, beats = beatCount(d) - 1;
    if (still && beat === 0) {
      setBusy(dr, d, new Set(), false); hidePulses(dr, 0); tl.cursor.setAttribute('visibility', 'hidden');
      return caption(`${d.pp} stages: each holds ${d.stages.length > 1 ? `${d.stages[0].num_layers} consecutive layers` : 'its layers'}; the batch goes through in ${d.micro_batches} micro-batch${d.micro_batches === 1 ? '' : 'es'}.`);
    }
    const slot = !still ? Math.floor(ms / SLOT_MS) % (tl.slots + 1)
      : beat === null ? tl.slots - 1 : Math.round(((beat - 1) * (tl.slots - 1)) / Math.max(1, beats - 1));
    const u = still ? 0.4 : (ms % SLOT_MS) / SLOT_MS;
    if (slot === tl.slots) { setBusy(dr, d, new Set(), false); hidePulses(dr, 0); tl.cursor.setAttribute('visibility', 'hidden'); return; }
    tl.cursor.setAttribute('x', tl.labelW + slot * tl.cw);
    tl.cursor.setAttribute('visibility', still && beat === null ? 'hidden' : 'visible');
    const lit = new Set(), busy = new Set();
    let i = 0;
    for (const [key, ids] of stageIds) {
      const st = Number(key.split(':')[1]);
      const mb = bySlot.get(`${st}:${slot}`);
      if (mb === undefined && (ms !== null || beat !== null)) continue;
      busy.add(st);
      ids.forEach((g) => lit.add(g));
      if (u < 0.72 && d.tp > 1) i = allReduce(dr, ids, (u * 3) % 1, tpR * 0.8, i, 'tp');
      if (u >= 0.72 && st < d.pp - 1) i = handOff(dr, d, ids, st, (u - 0.72) / 0.28, ppR, i);
    }
    setBusy(dr, d, lit, true, '');
    hidePulses(dr, i);
    const text = still && beat === null ? `Each stage holds its own layers; activations hop from stage to stage through the switches.`
      : `Slot ${slot + 1} of ${tl.slots}: ${busy.size} of ${d.pp} stages busy` +
        `${busy.size < d.pp ? `, ${d.pp - busy.size} waiting (bubble)` : ''}${d.replicas > 1 ? ` in each of ${d.replicas} replicas` : ''}`;
    if (text !== last) { last = text; caption(text); }
  };
}

/** Activation hand-off from stage st's GPUs to the same ranks of stage st + 1, via switch rank % n. */
function handOff(dr, d, ids, st, u, r, from) {
  let i = from;
  for (const g of ids) {
    if (i >= POOL) break;
    const m = d.gpu_map[g];
    const next = d.gpu_map.find((x) => x.replica === m.replica && x.stage === st + 1 && x.rank === m.rank);
    if (!next) continue;
    const k = m.rank % dr.n;
    const [a, s1] = dr.gpus[g][`p${k}`];
    const [b] = dr.gpus[next.gpu][`p${k}`];
    const c = dr.pulses[i++];
    c.setAttribute('class', 'pulse pp');
    if (u < 0.5) place(c, a, s1, u * 2, r);
    else place(c, s1, b, (u - 0.5) * 2, r);
  }
  return i;
}
