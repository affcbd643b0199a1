// scenes/measured-panels.js: "Measured on this server" panels: fetch a /measured endpoint once, say so while the
// server's CPU measures, say why when it cannot, then draw. Labelled bars (chapters 2, 3 and 6), this CPU's own
// roofline with the served model's prefill and decode on it (chapter 5), its KV cache beside Llama 3.1 70B's (6),
// the format the engine decodes from beside float32 (8).
// Every number comes from the response.

import { svg, h, clear, root } from '../lib/svg.js';
import { num, fixed, pct } from '../lib/format.js';
import { log } from '../lib/scale.js';
import { sceneStyles, readout, widthClass, redrawOnWidth } from '../lib/scene-kit.js';

/** The model a /measured response timed, in words, capitalised (its note says why when the toy stands in). */
export function measuredWho(m) {
  const name = m.model.display_name;
  return `${name[0].toUpperCase()}${name.slice(1)}`;
}

const BUSY_RETRIES = 4; // a 429 (the server's model-work queue is full) is asked again after 3, 6, 9, 12 s
const BUSY_WAIT_MS = 3000;

/**
 * Fetch `url` once into `box` (cleared; a 429 is asked again, BUSY_RETRIES times) under `title`: a "measuring…" line first, the reason when the server
 * could not measure, else draw(m, note) where note is that line (for the drawing's own words). alive(): the
 * scene is still mounted. Returns the response, or null.
 */
export async function measuredPanel(box, { fetchJSON, url, title, alive, draw }) {
  sceneStyles('measured');
  clear(box);
  box.classList.add('mp-panel');
  h('h2', { text: title }, box);
  const note = h('p', { class: 'mp-note', 'aria-live': 'polite', text: 'Measuring on this server’s CPU… (a few seconds, once)' }, box);
  box.dataset.measured = 'pending';
  let m;
  for (let attempt = 1; ; attempt++) {
    try {
      m = await fetchJSON(url);
      break;
    } catch (err) {
      if (!alive()) return null;
      if (err.status === 429 && attempt <= BUSY_RETRIES) { // other visitors' model work is queued: wait our turn
        note.textContent = 'This server’s CPU is busy with other visitors’ model work; trying again in a few seconds…';
        await new Promise((done) => setTimeout(done, BUSY_WAIT_MS * attempt));
        if (!alive()) return null;
        continue;
      }
      note.textContent = err.status === 429 ? `Not measured now: ${err.message}`
        : `The CPU measurement needs the live server (${err.message}).`;
      box.dataset.measured = 'unavailable';
      return null;
    }
  }
  if (!alive()) return null;
  if (!m.available) {
    note.textContent = `Not measured: ${m.reason}.`;
    box.dataset.measured = 'unavailable';
    return m;
  }
  draw(m, note);
  if (m.model?.note) h('p', { class: 'mp-note', text: m.model.note }, box);
  box.dataset.measured = 'shown';
  return m;
}

/** Labelled bars to one scale: rows [{label, value, text, cls}], the longest value full width. */
export function bars(box, rows) {
  const max = Math.max(...rows.map((b) => b.value));
  const list = h('div', { class: 'mp-bars' }, box);
  for (const b of rows) {
    const row = h('div', { class: `mp-bar ${b.cls || ''}` }, list);
    h('span', { class: 'mp-bar-label', text: b.label }, row);
    h('i', {}, h('span', { class: 'mp-bar-track' }, row)).style.width = `${(100 * b.value) / max}%`;
    h('span', { class: 'mp-bar-value', text: b.text }, row);
  }
  return list;
}

/** Chapters 2 and 3: a measurement as a sentence, bars in ms per token, and a sentence after. */
export function measuredBars(ctx, box, url, title, fmt, alive) {
  return measuredPanel(box, { fetchJSON: ctx.fetchJSON, url, title, alive, draw: (m, note) => {
    const f = fmt(m);
    note.textContent = f.text;
    bars(box, f.bars.map((b) => ({ ...b, text: `${num(b.value, 3)} ms/token` })));
    if (f.after) h('p', { class: 'mp-note', text: f.after }, box);
  } });
}

// ---- chapter 5: this CPU's own roofline ---------------------------------------------------------

const gflops = (x) => `${num(x / 1e9, 3)} GFLOP/s`;
const decade = (x, up) => Math.pow(10, (up ? Math.ceil : Math.floor)(Math.log10(x)));
const WIDTHS = { narrow: 520 }; // panel width (px) under which the phone drawing is used

/** GET /api/roofline/measured into `box`: readouts, the CPU's two roofs with prefill and decode, the prediction. */
export function cpuRoofline(box, ctx, alive) {
  let ro = null;
  measuredPanel(box, { fetchJSON: ctx.fetchJSON, url: '/api/roofline/measured', alive,
    title: 'Measured on this server: the same two roofs, on this CPU', draw: (m, note) => {
      const r = m.roofs, who = measuredWho(m);
      note.textContent = `${who} in numpy on ${m.measured_on} (${m.cpu.name}, ${m.cpu.logical_cores} cores; BLAS on ` +
        `${r.blas_threads} thread${r.blas_threads === 1 ? '' : 's'}). Memory roof: numpy copying a ` +
        `${num(r.copy_buffer_bytes / 2 ** 20)} MiB buffer into another (bytes read + written). Compute roof: a ` +
        `${num(r.matrix_size)}³ float32 matrix multiply.`;
      const tiles = h('div', { class: 'mp-readouts' }, box);
      readout(tiles, 'Memory roof', num(r.memory_bandwidth_bytes_per_second / 1e9, 3), 'GB/s', { cls: 'mp-memory' });
      readout(tiles, 'Compute roof', num(r.matrix_multiply_flops_per_second / 1e9, 3), 'GFLOP/s', { cls: 'mp-compute' });
      readout(tiles, 'Ridge', num(r.ridge_flops_per_byte, 3), 'FLOP/byte');
      readout(tiles, 'Prefill', num(m.prefill.tokens_per_second, 3), 'tokens/s', { cls: 'mp-compute' });
      readout(tiles, m.served_decode ? 'Decode · f32' : 'Decode', num(m.decode.tokens_per_second, 3), 'tokens/s', { cls: 'mp-memory' });
      if (m.served_decode) readout(tiles, 'Decode · int8', num(m.served_decode.tokens_per_second, 3), 'tokens/s', { cls: 'mp-served' });
      const fig = h('div', { class: 'mp-figure' }, box);
      const draw = () => drawCpuRoofline(fig, m, widthClass(box, WIDTHS) === 'narrow');
      draw();
      ro = redrawOnWidth(box, WIDTHS, () => fig.dataset.variant, draw);
      const p = m.decode_prediction;
      const line = h('p', { class: 'mp-predict' }, box);
      h('strong', { text: `Decode predicted from bandwidth: ${num(p.predicted_milliseconds_per_token, 3)} ms/token; ` +
        `measured: ${num(p.measured_milliseconds_per_token, 3)} ms/token.` }, line);
      const cached = p.weights_fit_in_last_level_cache
        ? ` These ${num(p.weight_bytes_per_token / 1e6, 3)} MB of weights fit in this CPU's ` +
          `${num(r.last_level_cache_bytes / 1e6, 3)} MB last-level cache, so a step can read them without going to ` +
          'memory: here the bandwidth floor says little.'
        : '';
      line.append(` Reading ${num(p.weight_bytes_per_token / 1e6, 3)} MB of weights per token at ` +
        `${num(r.memory_bandwidth_bytes_per_second / 1e9, 3)} GB/s is the floor; the measured step takes ` +
        `${num(p.measured_over_predicted, 2)}× as long (the floor counts only the weight reads).${cached} Prefill of ` +
        `${m.prefill.tokens} tokens shares each weight read: ${num(m.prefill.arithmetic_intensity, 3)} FLOP/byte, right ` +
        `of the ridge; decode does ${num(m.decode.arithmetic_intensity, 2)}.`);
      const sv = m.served_decode;
      if (sv) {
        const served = h('p', { class: 'mp-predict mp-served-line' }, box);
        h('strong', { text: `This server decodes from int8: ${num(sv.bytes_per_token / 1e6, 3)} MB per token instead of ` +
          `${num(m.decode.bytes_per_token / 1e6, 3)} MB, ${num(sv.tokens_per_second, 3)} tokens/s instead of ` +
          `${num(m.decode.tokens_per_second, 3)} (${num(sv.tokens_per_second / m.decode.tokens_per_second, 2)}×).` }, served);
        served.append(' The same products from a quarter of the bytes (one int8 code per weight, one float32 scale per ' +
          `output row): ${num(sv.arithmetic_intensity, 3)} FLOP/byte, so its point sits right of the float32 decode, ` +
          'under a higher stretch of the memory roof.');
      }
    } });
  return { stop: () => ro && ro.disconnect() };
}

function drawCpuRoofline(fig, m, narrow) {
  clear(fig);
  fig.dataset.variant = narrow ? 'narrow' : 'wide';
  const W = narrow ? 360 : 640, H = narrow ? 270 : 290, M = narrow ? { l: 46, r: 10, t: 14, b: 40 } : { l: 56, r: 16, t: 16, b: 42 };
  const r = m.roofs, bw = r.memory_bandwidth_bytes_per_second, peak = r.matrix_multiply_flops_per_second;
  const ridge = r.ridge_flops_per_byte, pre = m.prefill, dec = m.decode, sv = m.served_decode;
  const xd = [decade(Math.min(dec.arithmetic_intensity, ridge) / 2, false), decade(Math.max(pre.arithmetic_intensity, ridge) * 3, true)];
  const yd = [decade(Math.min(dec.attained_flops_per_second, xd[0] * bw) / 1.5, false), decade(peak * 2, true)];
  const s = root(fig, W, H, `This server's CPU as a roofline: memory roof ${num(bw / 1e9, 3)} GB/s, compute roof ` +
    `${gflops(peak)}, ridge ${num(ridge, 3)} FLOP/byte; ${measuredWho(m)}'s prefill at ` +
    `${num(pre.arithmetic_intensity, 3)} FLOP/byte does ${gflops(pre.attained_flops_per_second)}, decode at ` +
    `${num(dec.arithmetic_intensity, 3)} FLOP/byte does ${gflops(dec.attained_flops_per_second)}` +
    (sv ? `; decode from int8 as served, at ${num(sv.arithmetic_intensity, 3)} FLOP/byte, does ${gflops(sv.attained_flops_per_second)}.` : '.'));
  s.classList.add('mp-roofline', narrow ? 'mp-narrow' : 'mp-wide');
  const box = { x0: M.l, x1: W - M.r, y0: H - M.b, y1: M.t };
  const x = log(xd, [box.x0, box.x1]), y = log(yd, [box.y0, box.y1]);
  const g = svg('g', { class: 'mp-axes' }, s);
  for (const t of x.ticks()) {
    svg('line', { x1: x(t), x2: x(t), y1: box.y0, y2: box.y1, class: 'mp-grid' }, g);
    svg('text', { x: x(t), y: box.y0 + 14, 'text-anchor': 'middle', class: 'mp-tick mp-xtick', 'data-value': t, text: num(t) }, g);
  }
  for (const t of y.ticks()) {
    svg('line', { x1: box.x0, x2: box.x1, y1: y(t), y2: y(t), class: 'mp-grid' }, g);
    svg('text', { x: box.x0 - 5, y: y(t) + 4, 'text-anchor': 'end', class: 'mp-tick mp-ytick', 'data-value': t, text: num(t / 1e9) }, g);
  }
  svg('rect', { x: box.x0, y: box.y1, width: box.x1 - box.x0, height: box.y0 - box.y1, class: 'mp-frame' }, g);
  svg('text', { x: (box.x0 + box.x1) / 2, y: H - 6, 'text-anchor': 'middle', class: 'mp-axis-title',
    text: narrow ? 'FLOP per byte read (log)' : 'Arithmetic intensity: FLOPs per byte read from memory (log scale)' }, g);
  const ty = (box.y0 + box.y1) / 2;
  svg('text', { x: 11, y: ty, 'text-anchor': 'middle', class: 'mp-axis-title', transform: `rotate(-90 11 ${ty})`,
    text: narrow ? 'GFLOP/s (log)' : 'Math done: GFLOP/s (log scale)' }, g);
  // the two roofs: bandwidth x intensity up to the ridge, then the matrix multiply's peak
  const a = [x(xd[0]), y(xd[0] * bw)], b = [x(ridge), y(peak)], c = [x(xd[1]), y(peak)];
  svg('path', { d: `M${a}L${b}L${c}L${box.x1},${box.y0}L${box.x0},${box.y0}Z`, class: 'mp-under' }, s);
  svg('line', { x1: b[0], x2: b[0], y1: b[1], y2: box.y0, class: 'mp-ridge' }, s);
  svg('line', { x1: a[0], y1: a[1], x2: b[0], y2: b[1], class: 'mp-roof memory', 'data-roof': 'memory' }, s);
  svg('line', { x1: b[0], y1: b[1], x2: c[0], y2: c[1], class: 'mp-roof compute', 'data-roof': 'compute' }, s);
  svg('circle', { cx: b[0], cy: b[1], r: 3.5, class: 'mp-ridge-dot' }, s);
  const angle = (Math.atan2(b[1] - a[1], b[0] - a[0]) * 180) / Math.PI;
  const lx = a[0] + (b[0] - a[0]) * 0.12, ly = a[1] + (b[1] - a[1]) * 0.12 - 7;
  svg('text', { x: lx, y: ly, transform: `rotate(${angle.toFixed(2)} ${lx} ${ly})`, class: 'mp-small mp-roof-label memory',
    text: `memory · ${num(bw / 1e9, 3)} GB/s` }, s);
  svg('text', { x: box.x1 - 4, y: b[1] - 7, 'text-anchor': 'end', class: 'mp-small mp-roof-label compute',
    text: `compute · ${gflops(peak)}` }, s);
  svg('text', { x: b[0] + 5, y: box.y0 - 6, class: 'mp-small mp-ridge-label', text: `ridge ${num(ridge, 3)}` }, s);
  // the two measured points, each with its gap up to the roof above it
  const point = (p, cls, side, name = p.phase, dy = 4) => {
    // a point timed faster than its roof (the roofs were timed on a busier moment, twice) sits on the roof, said so
    const px = x(p.arithmetic_intensity), py = y(p.above_roof ? p.roof_flops_per_second : p.attained_flops_per_second);
    if (!p.above_roof) svg('line', { x1: px, x2: px, y1: py - 7, y2: y(p.roof_flops_per_second), class: 'mp-gap' }, s);
    svg('circle', { cx: px, cy: py, r: narrow ? 5.5 : 6.5, class: `mp-point bound-${p.bound} ${cls}`, 'data-phase': p.phase, 'data-weights': p.weights,
      'data-intensity': p.arithmetic_intensity, 'data-flops': p.attained_flops_per_second, 'data-above-roof': String(p.above_roof) }, s);
    const t = svg('text', { x: px + side * 10, y: py + dy, 'text-anchor': side > 0 ? 'start' : 'end', class: `mp-point-label ${cls}`,
      text: `${name} · ${num(p.tokens_per_second, 3)} tokens/s${p.above_roof ? ' (timed above its roof: drawn on it)' : ''}` }, s);
    svg('title', { text: `${gflops(p.attained_flops_per_second)} at ${num(p.arithmetic_intensity, 3)} FLOP/byte` }, t);
  };
  point(dec, 'decode', 1, sv ? (narrow ? 'f32 decode' : 'decode, float32') : 'decode');
  if (sv) point(sv, 'served', 1, narrow ? 'int8 decode' : 'decode, int8 (served)', 18); // below-right: clear of prefill's label
  point(pre, 'prefill', -1);
}

// ---- chapter 8: this server, now: the format the engine decodes from, measured ----------------------

/**
 * GET /api/roofline/measured (chapter 5's measurement, the same one) into `box`: SmolLM2's decode from its served
 * int8 form beside float32 on this CPU, with `served` (demo/smollm2_quality.json's perplexity of that form).
 */
export function servedNow(box, ctx, alive, served) {
  return measuredPanel(box, { fetchJSON: ctx.fetchJSON, url: '/api/roofline/measured', alive,
    title: 'This server, now: SmolLM2 served from INT8', draw: (m, note) => {
      const sv = m.served_decode, f32 = m.decode;
      if (!sv) {
        note.textContent = `${measuredWho(m)} serves here; it has no int8 form, so there is nothing to set beside float32.`;
        return;
      }
      note.textContent = `The engine decodes from ${served.method.split(' (')[0]}: ${fixed(served.bits_per_weight, 2)} bits ` +
        `per weight with its scales. Timed now on ${m.measured_on} (${m.cpu.name}), the same measurement as chapter 5's roofline.`;
      const tiles = h('div', { class: 'mp-readouts' }, box);
      readout(tiles, 'Decode · int8', num(sv.tokens_per_second, 3), 'tokens/s', { cls: 'mp-served' });
      readout(tiles, 'Decode · f32', num(f32.tokens_per_second, 3), 'tokens/s', { cls: 'mp-memory' });
      readout(tiles, 'Perplexity', signed(served.relative_change, 2), `vs float32`);
      bars(box, [
        { label: 'float32, bytes per token', value: f32.bytes_per_token, text: `${num(f32.bytes_per_token / 1e6, 3)} MB`, cls: 'mp-f32' },
        { label: 'int8 as served', value: sv.bytes_per_token, text: `${num(sv.bytes_per_token / 1e6, 3)} MB`, cls: 'mp-int8' },
      ]);
      const threads = m.roofs.blas_threads;
      h('p', { class: 'mp-note', text: `Fewer bits, fewer bytes, faster: ${num(sv.tokens_per_second / f32.tokens_per_second, 2)}× the ` +
        `float32 decode from ${num(f32.bytes_per_token / sv.bytes_per_token, 2)}× fewer bytes (the int8 kernel also runs on all ` +
        `${m.cpu.logical_cores} cores, the float32 reference on ${threads} BLAS thread${threads === 1 ? '' : 's'}; on a busy ` +
        `machine the two timings scatter). Perplexity ${fixed(served.perplexity, 2)} ` +
        `vs ${fixed(served.baseline_perplexity, 2)} (NLL ${served.delta_nll >= 0 ? '+' : '−'}${fixed(Math.abs(served.delta_nll), 4)} ± ` +
        `${fixed(served.delta_nll_se, 4)} nats/token), measured offline by ` +
        `\`${served.command}\` on the held-out text above.` }, box);
    } });
}

const signed = (x, d) => `${x >= 0 ? '+' : '−'}${pct(Math.abs(x), d)}`;

// ---- chapter 6: the served model's KV cache, weighed ---------------------------------------------

const formula = (k) => `2 × ${k.layers} layers × ${k.key_value_heads} KV heads × ${k.head_size} × ${k.bytes_per_value} bytes`;

/** GET /api/kv-cache/measured into `box`: bytes per token beside Llama 3.1 70B's, the cache weighed, cached vs recompute. */
export function kvMeasured(box, ctx, alive) {
  return measuredPanel(box, { fetchJSON: ctx.fetchJSON, url: '/api/kv-cache/measured', alive,
    title: 'Measured on this server: one token’s keys and values', draw: (m, note) => {
      const small = m.served_bf16, big = m.large_model, stored = m.served_as_stored, t = m.decode;
      note.textContent = `Bytes one token keeps in the KV cache, both at BF16 as a GPU server holds them:`;
      bars(box, [
        { label: small.model, value: small.bytes_per_token, text: `${num(small.bytes_per_token)} bytes`, cls: 'mp-small' },
        { label: big.model, value: big.bytes_per_token, text: `${num(big.bytes_per_token)} bytes`, cls: 'mp-big' },
      ]).classList.add('mp-kv-bars');
      h('p', { class: 'mp-note', text: `${big.model} keeps ${num(m.large_over_served, 3)}× as much per token: ` +
        `${formula(big)}, vs ${formula(small)}.` }, box);
      const check = h('p', { class: 'mp-note mp-check' }, box);
      h('strong', { text: m.matches_formula ? 'Weighed here: ' : 'Weighed here (does not match the formula): ' }, check);
      check.append(`after ${m.measured_cache_tokens} tokens this server’s cache held ${num(m.measured_cache_bytes)} bytes, ` +
        `${num(m.measured_bytes_per_token)} per token at float32: ${formula(stored)} = ${num(stored.bytes_per_token)}.`);
      h('p', { class: 'mp-note', text: `Decoding ${t.new_tokens} tokens after a ${t.prompt_tokens}-token prompt on ` +
        `${m.measured_on} (${m.cpu.name}), time per token:` }, box);
      bars(box, [
        { label: 'with KV cache', value: t.cached_milliseconds_per_token, text: `${num(t.cached_milliseconds_per_token, 3)} ms/token`, cls: 'cached' },
        { label: 'recompute', value: t.recompute_milliseconds_per_token, text: `${num(t.recompute_milliseconds_per_token, 3)} ms/token`, cls: 'recompute' },
      ]).classList.add('mp-time-bars');
      h('p', { class: 'mp-note', text: `${num(t.speedup, 3)}× faster with the cache` +
        `${t.same_tokens ? ', and the same tokens either way' : ''}: ${measuredWho(m)} rereads the prefix’s kept ` +
        'keys and values instead of running every earlier token through all its layers again.' }, box);
    } });
}
