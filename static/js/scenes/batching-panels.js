// scenes/batching-panels.js: chapter 7's words and numbers under the lanes: the static vs continuous table, the
// simulated engine, the show-the-math list, and the demo model's batching measured on this server's CPU.

import { h, clear } from '../lib/svg.js';
import { num, pct, duration, fixed } from '../lib/format.js';
import { mathDetails } from '../lib/math.js';

export const TITLES = { static: 'Static batching', continuous: 'Continuous batching' };

/** The comparison table, the engine note and the show-the-math list, into els.{readouts, engine, math}. */
export function drawPanels(els, d) {
  const [s, c] = d.policies;
  clear(els.readouts);
  const table = h('table', { class: 'bt-table' }, els.readouts);
  const head = h('tr', {}, h('thead', {}, table));
  for (const t of ['', TITLES.static, TITLES.continuous]) h('th', { scope: 'col', text: t }, head);
  const body = h('tbody', {}, table);
  const row = (label, a, b, note = '') => {
    const tr = h('tr', {}, body);
    h('th', { scope: 'row', text: label }, tr);
    h('td', { text: a }, tr);
    const td = h('td', { text: b }, tr);
    if (note) h('span', { class: 'bt-ratio', text: note }, td);
  };
  const ratio = c.throughput_tokens_per_s / s.throughput_tokens_per_s;
  row('Throughput', `${num(s.throughput_tokens_per_s)} tokens/s`, `${num(c.throughput_tokens_per_s)} tokens/s`,
    `${fixed(ratio, 1)}×`);
  row('Time to first token, p50 / p99', `${duration(s.ttft_ms_p50)} / ${duration(s.ttft_ms_p99)}`,
    `${duration(c.ttft_ms_p50)} / ${duration(c.ttft_ms_p99)}`);
  row('Time per output token, p50 / p99', `${duration(s.tpot_ms_p50)} / ${duration(s.tpot_ms_p99)}`,
    `${duration(c.tpot_ms_p50)} / ${duration(c.tpot_ms_p99)}`);
  row('Latency, p50 / p99', `${duration(s.latency_ms_p50)} / ${duration(s.latency_ms_p99)}`,
    `${duration(c.latency_ms_p50)} / ${duration(c.latency_ms_p99)}`);
  row('Seat utilisation', pct(s.seat_utilization, 1), pct(c.seat_utilization, 1));
  row('All requests done after', duration(s.makespan_s * 1e3), duration(c.makespan_s * 1e3));
  if (d.params.shared_prefix > 0) { // the prefix cache: pages of the shared system prompt found computed
    const hits = (p) => `${pct(p.prefix_cache.hit_rate, 1)} of ${num(p.prefix_cache.query_tokens)} tokens`;
    row('Prefix cache hits', hits(s), hits(c));
  }
  const e = d.engine;
  els.engine.textContent = `Simulated engine: ${e.model} (${e.precision.toUpperCase()}) on one ${e.gpu}. Every step ` +
    `lasts what the cost model says for its batch: a decode step takes ${fixed(e.decode_step_ms_batch_1, 1)} ms for ` +
    `one chat and ${fixed(e.decode_step_ms_all_seats, 1)} ms for all ${d.params.seats} seats. A continuous step ` +
    `computes at most ${num(e.max_num_batched_tokens)} tokens, so a longer prompt is prefilled in pieces beside the ` +
    `decodes (vLLM's max_num_batched_tokens). KV pool ${num(e.kv_capacity_tokens)} tokens in ` +
    `${e.block_size}-token pages; ${num(d.params.requests)} requests arrive ` +
    `at random, ${num(d.params.rate)} per second on average.` + (d.params.shared_prefix > 0
    ? ` ${pct(d.params.shared_prefix, 0)} of them begin with one ${num(e.system_prompt_tokens)}-token ` +
      'system prompt: its full pages are hashed, and a chat that finds them cached shares them instead of ' +
      'computing them again (prefix caching, as vLLM).'
    : '');
  clear(els.math);
  const box = h('details', { class: 'math bt-mathbox' }, els.math);
  h('summary', { text: 'How are these computed?' }, box);
  for (const p of d.policies) {
    h('h4', { text: TITLES[p.name] }, box);
    for (const k of ['throughput_tokens_per_s', 'ttft_ms_p50', 'latency_ms_p50', 'seat_utilization']) {
      if (p.math[k]) box.appendChild(mathDetails(p.math[k], k.replace(/_/g, ' ')));
    }
  }
  h('h4', { text: 'The engine' }, box);
  box.appendChild(mathDetails(e.math.decode_step_ms_all_seats, 'decode step time'));
  box.appendChild(mathDetails(e.math.kv_capacity_tokens, 'KV pool size'));
}

/** Measured, not only simulated: the demo model decoding batches on this server's CPU, into `box`. */
export async function loadMeasured(box, fetchJSON, alive) {
  h('h3', { text: 'Measured, not simulated: batching on this server' }, box);
  const note = h('p', { class: 'bt-engine', text: 'Measuring the demo model on this server’s CPU…' }, box);
  let m;
  try {
    m = await fetchJSON('/api/batching/measured');
  } catch (err) {
    note.textContent = `The CPU measurement needs the live server (${err.message}).`;
    return;
  }
  if (!alive()) return;
  if (!m.available) { note.textContent = `Not measured: ${m.reason}.`; return; }
  note.textContent = `The tour’s demo transformer (${m.model.name}, ${num(m.model.num_params / 1e6, 2)} M parameters, ` +
    `${m.model.layers} layers) decoding ${m.context_tokens}-token chats in numpy on ${m.measured_on} ` +
    `(${m.cpu.name}, ${m.cpu.logical_cores} cores). One step reads every weight once, whatever the batch:`;
  const max = Math.max(...m.batches.map((b) => b.tokens_per_s));
  const list = h('div', { class: 'bt-bars', 'aria-live': 'polite' }, box);
  for (const b of m.batches) {
    const row = h('div', { class: 'bt-bar' }, list);
    h('span', { class: 'bt-bar-label', text: `batch ${b.batch_size}` }, row);
    const track = h('span', { class: 'bt-bar-track' }, row);
    h('i', {}, track).style.width = `${(100 * b.tokens_per_s) / max}%`;
    h('span', { class: 'bt-bar-value', text: `${num(b.tokens_per_s)} tokens/s · ${fixed(b.ms_per_step, 1)} ms per step` }, row);
  }
}
