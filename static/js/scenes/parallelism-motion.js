// scenes/parallelism-motion.js: chapter 10's motion on the board: all-reduce pulses through the switches (tensor
// parallel), activations handed from stage to stage and the timeline cursor (pipeline parallel).

import { bytes } from '../lib/format.js';
import { loop } from '../lib/tween.js';

export const POOL = 40;    // travelling pulses drawn at most at once
const LAYER_MS = 1500;     // one layer of the tensor-parallel animation
const SLOT_MS = 1100;      // one pipeline slot

function pulseRadius(bytesSent, v) {
  const r = 2.5 + 1.6 * Math.log10(Math.max(bytesSent, 1e3) / 1e3);
  return Math.min(v.name === 'wide' ? 11 : 8, Math.max(2.5, r));
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
      c.setAttribute('class', `pulse ${cls}`);
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
 * Animate the board for one phase: {d, p: d[phase], dr: the board drawing, tl: the timeline drawing, v: the
 * variant, caption(text), frozen}. Frozen draws one still picture. Returns {stop} (null when frozen).
 */
export function animateBoard({ d, p, dr, tl, v, caption, frozen }) {
  const tick = d.pp > 1 ? pipelineTick(d, p, dr, tl, v, caption) : tensorTick(d, p, dr, v, caption);
  if (frozen) { tick(null); return null; }
  return loop((ms) => tick(ms));
}

function tensorTick(d, p, dr, v, caption) {
  const compute = p.gemm_ms + p.attention_ms;
  const share = Math.min(0.6, Math.max(0.15, p.comm_ms / (compute + p.comm_ms || 1)));
  const r = pulseRadius(p.tensor.sent_bytes_per_gpu_per_layer / 2, v);
  const grp = [...groups(d).values()];
  const all = new Set(d.gpu_map.map((m) => m.gpu));
  let last = '';
  return (ms) => {
    if (ms === null) { // still picture: traffic at the switches, every GPU lit
      setBusy(dr, d, all, true);
      let i = 0;
      if (d.tp > 1) for (const ids of grp) i = allReduce(dr, ids, 0.45, r, i, 'tp');
      hidePulses(dr, i);
      return caption(d.tp > 1 ? `After every layer's attention and MLP, the ${d.tp} GPUs of each group swap partial results through the switches.` : 'One GPU runs every layer: nothing to swap.');
    }
    const layer = Math.floor(ms / LAYER_MS) % d.num_layers;
    const u = (ms % LAYER_MS) / LAYER_MS;
    const half = u < 0.5 ? 0 : 1, w = (u % 0.5) / 0.5;
    const inComm = d.tp > 1 && w > 1 - share;
    setBusy(dr, d, all, !inComm);
    let i = 0;
    if (inComm) for (const ids of grp) i = allReduce(dr, ids, (w - (1 - share)) / share, r, i, 'tp');
    hidePulses(dr, i);
    const text = `Layer ${layer + 1} of ${d.num_layers}: ${half ? 'MLP' : 'attention'}` +
      (d.tp > 1 ? (inComm ? ` · all-reduce of ${bytes(p.tensor.message_bytes)} through the switches` : ' · each GPU computes its slice') : '');
    if (text !== last) { last = text; caption(text); }
  };
}

function pipelineTick(d, p, dr, tl, v, caption) {
  const stageIds = groups(d);
  const tpR = pulseRadius(p.tensor.sent_bytes_per_gpu_per_layer / 2, v);
  const ppR = pulseRadius(p.pipeline.activation_bytes_per_send, v);
  const bySlot = new Map();
  for (const c of tl.cells) bySlot.set(`${c.stage}:${c.slot}`, c.micro_batch);
  let last = '';
  return (ms) => {
    const slot = ms === null ? tl.slots - 1 : Math.floor(ms / SLOT_MS) % (tl.slots + 1);
    const u = ms === null ? 0.4 : (ms % SLOT_MS) / SLOT_MS;
    if (slot === tl.slots) { setBusy(dr, d, new Set(), false); hidePulses(dr, 0); tl.cursor.setAttribute('visibility', 'hidden'); return; }
    tl.cursor.setAttribute('x', tl.labelW + slot * tl.cw);
    tl.cursor.setAttribute('visibility', ms === null ? 'hidden' : 'visible');
    const lit = new Set(), busy = new Set();
    let i = 0;
    for (const [key, ids] of stageIds) {
      const st = Number(key.split(':')[1]);
      const mb = bySlot.get(`${st}:${slot}`);
      if (mb === undefined && ms !== null) continue;
      busy.add(st);
      ids.forEach((g) => lit.add(g));
      if (u < 0.72 && d.tp > 1) i = allReduce(dr, ids, (u * 3) % 1, tpR * 0.8, i, 'tp');
      if (u >= 0.72 && st < d.pp - 1) i = handOff(dr, d, ids, st, (u - 0.72) / 0.28, ppR, i);
    }
    setBusy(dr, d, lit, true, '');
    hidePulses(dr, i);
    const text = ms === null ? `Each stage holds its own layers; activations hop from stage to stage through the switches.`
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
