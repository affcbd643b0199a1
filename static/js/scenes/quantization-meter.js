// scenes/quantization-meter.js: chapter 8's perplexity meter: the two-needle gauge and the cards that explain
// each needle (published large model with its source; the demo model measured here).

import { svg, h, clear } from '../lib/svg.js';
import { num, fixed, pct } from '../lib/format.js';
import { tween } from '../lib/tween.js';

export const LABEL = { fp16: 'FP16', bf16: 'BF16', fp8: 'FP8', int8: 'INT8', int4: 'INT4', int3: 'INT3', int2: 'INT2', fp4: 'FP4',
  nvfp4: 'NVFP4', mxfp4: 'MXFP4' };
export const signed = (x, digits = 1) => `${x >= 0 ? '+' : '−'}${pct(Math.abs(x), digits)}`;
const GAUGE_MIN = -0.02, GAUGE_MAX = 0.12; // the meter reads −2% to +12% perplexity vs the same model at 16 bits

/** The meter in two panels; update(d) moves the needles from where they stand (a tween), stop() ends it. */
export function createMeter(gaugePanel, cardsPanel) {
  const panels = { gauge: gaugePanel, cards: cardsPanel };
  const state = { gauge: null, needles: { pub: 0, demo: 0, served: 0 }, anim: null };
  return {
    update(d) {
      drawGauge(panels, state, d);
      drawNeedleCards(panels.cards, d);
    },
    stop() {
      if (state.anim) state.anim.cancel();
    },
  };
}

const R = 120, CX = 150, CY = 140;
const angleOf = (x) => Math.PI * (1 - Math.min(1, Math.max(0, (x - GAUGE_MIN) / (GAUGE_MAX - GAUGE_MIN))));
const pt = (a, r) => [CX + r * Math.cos(a), CY - r * Math.sin(a)];

function drawGauge(panels, state, d) {
  if (!state.gauge) state.gauge = buildGauge(panels.gauge);
  const g = state.gauge;
  const pub = d.needles.published, demo = d.needles.demo;
  g.others.replaceChildren();
  // no published LLaMA-65B perplexity in this format (FP4): that needle hides and its card says so
  g.pubNeedle.style.visibility = pub ? 'visible' : 'hidden';
  for (const o of pub ? pub.others : []) {
    const a = angleOf(o.relative_change);
    const [x1, y1] = pt(a, R - 2), [x2, y2] = pt(a, R + 10);
    svg('line', { x1, y1, x2, y2, class: 'other' }, g.others).appendChild(svg('title', { text: `${o.method}, ${o.source_key}: ${o.perplexity}` }));
  }
  const served = d.needles.served;
  const from = { ...state.needles }, to = { pub: pub ? pub.relative_change : 0, demo: demo.relative_change, served: served ? served.relative_change : 0 };
  state.needles = to;
  g.pubNeedle.classList.toggle('estimate', !!pub?.estimate);
  // SmolLM2, served here, against its file's own 4-bit weights: off the scale at INT4 (re-rounded twice), said so
  g.servedNeedle.style.visibility = served ? 'visible' : 'hidden';
  g.servedNeedle.dataset.change = served ? String(served.relative_change) : '';
  const off = served && served.relative_change > GAUGE_MAX;
  g.servedOff.style.visibility = off ? 'visible' : 'hidden';
  g.servedOff.textContent = off ? `SmolLM2 ${signed(served.relative_change, 0)}, off the scale (its needle rests at the end)` : '';
  if (state.anim) state.anim.cancel();
  state.anim = tween(600, (u) => {
    setNeedle(g.pubNeedle, from.pub + (to.pub - from.pub) * u, R - 14);
    setNeedle(g.demoNeedle, from.demo + (to.demo - from.demo) * u, R - 30);
    setNeedle(g.servedNeedle, from.served + (to.served - from.served) * u, R - 46);
  });
  g.note.textContent = pub && pub.others.length ? `Grey marks: the other published ${LABEL[pub.precision]} results for ${pub.model} ` +
    `(${[...new Set(pub.others.map((o) => o.method.split(' ')[0]))].join(', ')}; one scale per row or per ${pub.group_size || 128} weights).` : '';
  g.svg.setAttribute('aria-label', `Perplexity meter: ${pub ? `published ${pub.model} ${signed(pub.relative_change)}` : `no published ${d.published_model} figure in ${LABEL[d.precision]}`}, demo model ${signed(demo.relative_change, 2)}` +
    (served ? `, SmolLM2 on this server ${signed(served.relative_change, 1)} against its file's 4-bit weights` : ''));
}

function setNeedle(line, x, len) {
  const [x2, y2] = pt(angleOf(x), len);
  line.setAttribute('x2', x2);
  line.setAttribute('y2', y2);
}

function buildGauge(panel) {
  const host = clear(panel);
  h('h3', { text: 'Perplexity meter' }, host);
  h('p', { class: 'q-sub', text: 'How much more surprised each model is than its own 16-bit version ' +
    '(SmolLM2: than its file’s own 4-bit weights, the most precise it ships).' }, host);
  const s = svg('svg', { viewBox: '-14 0 328 176', class: 'q-gauge-svg', width: '100%', role: 'img' }, host);
  const [ax, ay] = pt(Math.PI, R), [bx, by] = pt(0, R);
  svg('path', { d: `M ${ax} ${ay} A ${R} ${R} 0 0 1 ${bx} ${by}`, class: 'arc' }, s);
  for (let k = 0; k <= 7; k++) {
    const x = GAUGE_MIN + (k * (GAUGE_MAX - GAUGE_MIN)) / 7, a = angleOf(x);
    const zero = Math.abs(x) < 1e-9;
    const [x1, y1] = pt(a, R - (zero ? 14 : 8)), [x2, y2] = pt(a, R);
    svg('line', { x1, y1, x2, y2, class: `tick${zero ? ' zero' : ''}` }, s);
    const [tx, ty] = pt(a, R + 16);
    const label = zero ? '16-bit' : `${x > 0 ? '+' : '−'}${Math.round(Math.abs(x) * 100)}%`;
    svg('text', { x: tx, y: ty + 4, 'text-anchor': 'middle', class: 'q-small', 'font-size': 11, text: label }, s);
  }
  const others = svg('g', {}, s);
  const servedNeedle = svg('line', { x1: CX, y1: CY, x2: CX - R, y2: CY, class: 'needle served' }, s);
  const demoNeedle = svg('line', { x1: CX, y1: CY, x2: CX - R, y2: CY, class: 'needle demo' }, s);
  const pubNeedle = svg('line', { x1: CX, y1: CY, x2: CX - R, y2: CY, class: 'needle pub' }, s);
  svg('circle', { cx: CX, cy: CY, r: 6, class: 'hub' }, s);
  svg('text', { x: CX, y: CY + 28, 'text-anchor': 'middle', class: 'q-small', 'font-size': 11, text: 'change in perplexity (lower is better)' }, s);
  const servedOff = h('p', { class: 'q-sub q-served-off' }, host);
  const note = h('p', { class: 'q-sub' }, host);
  return { svg: s, pubNeedle, demoNeedle, servedNeedle, servedOff, others, note };
}

function needleCard(parent, cls, title, big, lines, badge) {
  const c = h('div', { class: `q-card ${cls}` }, parent);
  const head = h('p', { class: 'q-card-head' }, c);
  h('i', { class: `swatch ${cls}` }, head);
  head.append(title);
  if (badge) h('span', { class: 'badge', text: badge }, head);
  h('p', { class: 'q-big', text: big }, c);
  for (const l of lines) (l instanceof Node ? c.appendChild(l) : h('p', { class: 'q-line', text: l }, c));
}

function drawNeedleCards(panel, d) {
  const host = clear(panel);
  const p = d.needles.published, m = d.needles.demo, info = d.demo_info;
  if (p) {
    const src = h('p', { class: 'q-line' });
    src.append('Source: ');
    h('a', { href: p.url, text: p.source, rel: 'noopener', target: '_blank' }, src);
    const base = h('p', { class: `q-line q-baseline${Math.abs(p.baseline - p.reference_baseline) > 1e-9 ? ' differs' : ''}`, text: p.baseline_note });
    needleCard(host, 'pub', `${p.model}, WikiText-2 (published)`,
      `${fixed(p.baseline, 2)} → ${fixed(p.perplexity, 2)}  (${signed(p.relative_change)})`,
      [`${LABEL[p.precision] || p.precision}: ${p.method}${p.group_size ? `, groups of ${p.group_size}` : ''}`, base, src], p.estimate ? 'estimate' : '');
  } else {
    // the nearest published FP4 rows (the table below) use one scale per row, far coarser than these blocks
    const near = d.published.filter((r) => r.precision === 'fp4' && r.method.includes('E2M1'));
    needleCard(host, 'pub q-pub-none', `${d.published_model}, WikiText-2 (published)`, 'not published',
      [`No table this chapter cites measured ${d.published_model} in ${LABEL[d.precision]}, so that needle rests; ` +
        'the demo model below is measured here with its weights really rounded to it.',
      ...near.map((r) => `Nearest published: ${r.model}, ${r.method.split(',')[0]} with ${r.group_size ? `a scale per ${r.group_size}` : 'one scale per row'}: ` +
        `${fixed(r.baseline, 2)} → ${fixed(r.perplexity, 2)} (${signed(r.relative_change)}; ${r.source.split(',')[0]}).`)]);
  }
  const all = [...d.demo, ...d.demo_extra.filter((x) => x.variant !== 'int4_per_channel')];
  const demoRows = h('p', { class: 'q-line q-demo-rows' });
  demoRows.textContent = all.map((x) => `${LABEL[x.variant] || x.variant.toUpperCase()} ${fixed(x.perplexity, 1)}`).join(' · ');
  const pc = d.demo_extra.find((x) => x.variant === 'int4_per_channel');
  const change = (x) => x.perplexity / m.baseline - 1;
  const mild = Math.max(...all.filter((x) => ['fp8', 'int8', 'int4', 'int3'].includes(x.variant)).map((x) => Math.abs(change(x))));
  const int2 = all.find((x) => x.variant === 'int2');
  const why = h('p', { class: 'q-line' });
  why.textContent = `A tiny model shrugs off rounding: 8, 4, even 3 bits move its perplexity by at most ${pct(mild, 1)} ` +
    `(INT4 with one scale per column: ${fixed(pc.perplexity, 1)}).` +
    (int2 ? ` At 2 bits it breaks: ${signed(change(int2), 0)}.` : '') +
    ' Large models are more sensitive, which is why methods such as GPTQ and AWQ choose their roundings with care.';
  if (d.real) realCard(host, d);
  needleCard(host, 'demo', 'Our demo model, held-out Shakespeare (measured)',
    `${fixed(m.baseline, 1)} → ${fixed(m.perplexity, 1)}  (${signed(m.relative_change, 2)} ± ${pct(m.relative_change_se, 2)})`,
    [`${m.method}; ${num(info.tokens)} tokens, ${num(info.params)} parameters, weights really rounded.`, demoRows, why]);
}

const REAL_LABEL = { file_q4_1: 'Q4_1 (the file)', int8: 'INT8 per column', int4: 'INT4 g128', int3: 'INT3 g128', int2: 'INT2 g128' };
const big = (x) => (x >= 1e4 ? x.toExponential(1).replace('e+', '×10^') : x >= 100 ? num(x, 0) : fixed(x, 1));

/** The real model on this server, measured offline: its file's 4-bit weights are the baseline (there is no FP16). */
function realCard(host, d) {
  const r = d.real, base = r.rows[0];
  const c = h('div', { class: 'q-card real', 'data-secondary': '' }, host);
  const head = h('p', { class: 'q-card-head' }, c);
  h('i', { class: 'swatch real' }, head);
  head.append('SmolLM2, the model on this server (measured offline)');
  h('p', { class: 'q-line', text: `Baseline ${fixed(base.perplexity, 1)}: the file's own Q4_1 weights ` +
    `(${fixed(base.bits_per_weight, 0)} bits per weight with scales), dequantized. The file holds no FP16, so nothing here is a 16-bit baseline.` }, c);
  const list = h('div', { class: 'q-real-rows' }, c);
  const top = Math.log10(Math.max(...r.rows.map((x) => x.perplexity)));
  const bottom = Math.log10(base.perplexity) - 0.15;
  for (const x of r.rows) {
    const row = h('div', { class: `q-real-row${x.variant === 'file_q4_1' ? ' base' : ''}${x.variant === d.precision ? ' on' : ''}`,
      'data-variant': x.variant }, list);
    h('b', { text: REAL_LABEL[x.variant] || x.variant }, row);
    const track = h('span', { class: 'q-speed-track' }, row);
    h('span', { class: 'q-real-bar' }, track).style.width = `${(100 * (Math.log10(x.perplexity) - bottom)) / (top - bottom)}%`;
    h('span', { class: 'q-speed-val', text: `${big(x.perplexity)}${x.variant === 'file_q4_1' ? '' : ` (${x.relative_change < 10 ? signed(x.relative_change, 1) : `×${big(1 + x.relative_change)}`})`}` }, row);
  }
  const i8 = r.rows.find((x) => x.variant === 'int8'), i4 = r.rows.find((x) => x.variant === 'int4');
  h('p', { class: 'q-line', text: `Perplexity on a log scale; ${num(r.tokens)} tokens of held-out Shakespeare (${r.windows} windows of ` +
    `${r.window_tokens}). INT8 costs ${signed(i8.relative_change, 1)}; re-rounding the 4-bit weights onto another 4-bit grid ` +
    `(symmetric, groups of 128 instead of the file's 32 with a minimum) adds a second rounding error: ${signed(i4.relative_change, 0)}.` }, c);
  h('p', { class: 'q-line q-prov', text: `Measured by \`${r.command}\` on ${r.file} (sha256 ${r.file_sha256.slice(0, 12)}…); a test recomputes two of the numbers.` }, c);
}
