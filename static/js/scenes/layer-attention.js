// scenes/layer-attention.js: chapter 3's attention: the selected head drawn large (tokens on both axes, the
// looked-from row outlined), every head as a small map in its key/value group, and the colour key.

import { svg, h, clear, root } from '../lib/svg.js';
import { pct } from '../lib/format.js';
import { pieceLabel } from './embeddings-strips.js';

const GEOMETRY = {
  wide: { W: 820, axis: 90, top: 78, map: 470, side: 230, reading: true, thumb: 70 }, // the thumbnails sit right of the map
  narrow: { W: 360, axis: 62, top: 56, map: 292, side: 0, reading: true, thumb: 96 }, // the thumbnails sit under it
  // a slide frame (embed, presenter) is short: a smaller map with the thumbnails beside it, no reading in words
  dense: { W: 820, axis: 90, top: 70, map: 290, side: 230, reading: false, thumb: 58 },
  narrowDense: { W: 360, axis: 62, top: 56, map: 220, side: 0, reading: false, thumb: 50 },
};
const READING_ROWS = 5, READING_H = 38 + READING_ROWS * 19 + 4;
const MASKED = 'a later token: out of sight (a token never looks ahead)';

/** A token as an axis label: spaces as ·, a part of a character as its raw bytes ‹..›. */
export const tokenText = pieceLabel;

/** Query head h's key/value group: which KV head it reads, and which query heads share it. */
export const groupOf = (d, hh) => d.groups.find((g) => g.query_heads.includes(hh));

/** "brighter" or "darker": what more weight looks like on this theme's panel (from the drawn colours). */
export function moreWeightLooks(pal) {
  const lum = ([r, g, b]) => 0.2126 * r + 0.7152 * g + 0.0722 * b;
  return lum(pal.pos) > lum(pal.zero) ? 'brighter' : 'darker';
}

/** The attention section: returns {select(i), head} for the scene to drive. */
export function drawAttention(box, d, variant, pal, head, on) {
  const G = GEOMETRY[variant];
  const T = d.num_tokens, hd = d.heads[head], grp = groupOf(d, head);
  clear(box);
  const title = h('h2', { class: 'ly-h', text: `Attention: where each token looks · head ${head}` }, box);
  h('span', { class: 'ly-sub', text: ` (reads key/value head ${grp.kv_head}, shared by query heads ${list(grp.query_heads)})` }, title);
  sinkNote(box, d, head);
  const cell = G.map / T, x0 = G.axis, y0 = G.top;
  const thumbs = layoutThumbs(d, G);
  const R = G.side ? { x: thumbs.boxes[0].x, y: thumbs.bottom + 16, w: G.side } : { x: 0, y: thumbs.bottom + 16, w: G.W };
  const H = Math.max(y0 + G.map + 8, G.reading ? R.y + READING_H : thumbs.bottom);
  const s = root(box, G.W, H, `Attention weights of head ${head} in layer ${d.layer}: ${T} tokens looking (rows) at ` +
    `the tokens up to themselves (columns).`);
  s.classList.add('ly-svg', 'ly-attn-svg');
  s.setAttribute('role', 'group'); // it holds buttons (the small maps): a group, not one image
  hatch(s);
  const big = svg('g', { class: 'ly-map' }, s);
  const full = hd.weights.map((r) => r.concat(Array(T - r.length).fill(NaN)));
  svg('image', { x: x0, y: y0, width: G.map, height: G.map, preserveAspectRatio: 'none', class: 'strip-img ly-map-img',
    href: heatImage(full, pal) }, big);
  if (T > 1) svg('path', { d: staircase(x0, y0, cell, T), class: 'ly-masked' }, big);
  const font = Math.max(5.5, Math.min(variant === 'wide' ? 13 : 11, cell * 0.8));
  const yLabels = d.tokens.map((t, i) => svg('text', { x: x0 - 6, y: y0 + (i + 0.5) * cell + font * 0.35, 'text-anchor': 'end',
    class: 'ly-axis ly-axis-y', 'font-size': font.toFixed(1), text: clip(tokenText(t), variant === 'wide' ? 12 : 8) }, big));
  const xLabels = d.tokens.map((t, j) => {
    const cx = x0 + (j + 0.5) * cell + font * 0.35, cy = y0 - 6;
    return svg('text', { x: cx, y: cy, transform: `rotate(-60 ${cx} ${cy})`, class: 'ly-axis ly-axis-x',
      'font-size': font.toFixed(1), text: clip(tokenText(t), variant === 'wide' ? 10 : 7) }, big);
  });
  svg('text', { x: 2, y: 12, class: 'ly-axis-title', text: 'looking from ↓' }, big);
  svg('text', { x: x0 + G.map, y: 12, 'text-anchor': 'end', class: 'ly-axis-title', text: 'looked at →' }, big);
  const row = svg('rect', { x: x0, width: cell, height: cell, class: 'ly-map-row' }, big);
  const values = svg('g', { class: 'ly-map-values' }, big);
  const hit = svg('rect', { x: x0, y: y0, width: G.map, height: G.map, class: 'ly-hit' }, big);
  hit.addEventListener('pointermove', (e) => {
    const r = hit.getBoundingClientRect();
    on.row(Math.min(T - 1, Math.max(0, Math.floor(((e.clientY - r.top) / r.height) * T))));
  });
  const thumbRows = drawThumbs(s, d, thumbs, pal, head, on);
  const reading = svg('g', { class: 'ly-reading' }, s);
  legend(box, pal);

  function select(i) {
    row.setAttribute('y', (y0 + i * cell).toFixed(2));
    row.setAttribute('width', ((i + 1) * cell).toFixed(2));
    yLabels.forEach((el, k) => el.classList.toggle('sel', k === i));
    xLabels.forEach((el, k) => el.classList.toggle('masked', k > i));
    clear(values);
    if (cell >= 17) {
      const fs = Math.min(11, cell * 0.48);
      hd.weights[i].forEach((w, j) => svg('text', { x: x0 + (j + 0.5) * cell, y: y0 + (i + 0.5) * cell + fs * 0.36, 'text-anchor': 'middle',
        'font-size': fs.toFixed(1), class: `ly-map-value${w > 0.45 ? ' on' : ''}`, text: w >= 0.005 ? String(Math.round(w * 100)) : '' }, values));
    }
    thumbRows.forEach(({ r, y, c }) => r.setAttribute('y', (y + i * c).toFixed(2)));
    if (G.reading) drawReading(reading, R, d, hd, i);
  }
  return { select, svg: s, cell, yLabels, xLabels };
}

/** A diagonal hatch (#ly-hatch) for the cells a token cannot see. */
function hatch(s) {
  const p = svg('pattern', { id: 'ly-hatch', width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' },
    svg('defs', {}, s));
  svg('rect', { width: 6, height: 6, class: 'ly-hatch-bg' }, p);
  svg('line', { x1: 0, y1: 0, x2: 0, y2: 6, class: 'ly-hatch-line' }, p);
}

/** The cells above the diagonal (row i, columns > i) as one path: what each token cannot see. */
function staircase(x0, y0, c, T) {
  let d = `M${x0 + c},${y0}H${x0 + T * c}V${y0 + (T - 1) * c}`;
  for (let i = T - 2; i >= 0; i--) d += `H${x0 + (i + 1) * c}V${y0 + i * c}`;
  return `${d}Z`;
}

/** A head is an attention sink here when, on average, rows after the first send over half their weight to token 1. */
const SINK = 0.5;

/** The mean share of attention that rows 2..T give the first token (row 1 can only look at itself). */
export function sinkShare(d, hh) {
  const rows = d.heads[hh].weights.slice(1);
  return rows.length ? rows.reduce((a, r) => a + r[0], 0) / rows.length : 0;
}

/** One line when the drawn head parks its attention on the first token: name the sink, point at the heads that don't. */
function sinkNote(box, d, head) {
  const share = sinkShare(d, head);
  if (share <= SINK) return;
  const others = d.heads.map((x, hh) => hh).filter((hh) => sinkShare(d, hh) <= SINK);
  const first = `“${clip(tokenText(d.tokens[0]), 12)}”`;
  const p = h('p', { class: 'ly-sink-note', 'data-sink-share': share.toFixed(3) }, box);
  h('strong', { text: 'An attention sink. ' }, p);
  p.append(`Head ${head} sends ${pct(share, 0)} of every later token’s attention to the first token, ${first}: ` +
    'a head with nothing to look for parks its weight there (Xiao et al., 2023, “attention sinks”). ' +
    (others.length ? `Head${others.length > 1 ? 's' : ''} ${others.join(', ')} of this layer look${others.length > 1 ? '' : 's'} at content instead: click ${others.length > 1 ? 'one' : 'it'} beside the map.`
      : 'Every head of this layer does so for this prompt: move the layer slider to find one that looks at content.'));
}

const list = (a) => (a.length > 2 ? `${a[0]}–${a[a.length - 1]}` : a.join(' and '));
const clip = (text, n) => (text.length > n ? `${text.slice(0, n - 1)}…` : text);

/** Thumbnail positions: one box per key/value group; right of the map (wide) or under it (narrow). */
function layoutThumbs(d, G) {
  const g = d.groups[0].query_heads.length, nG = d.groups.length;
  const avail = G.side || G.W, pad = 8;
  const size = Math.min(G.thumb, (avail - (g + 1) * pad) / g);
  const boxH = size + 40, x = G.side ? Math.min(G.W - G.side, G.axis + G.map + 30) : 0, y = G.side ? G.top - 22 : G.top + G.map + 22;
  const w = avail;
  const boxes = d.groups.map((grp, k) => ({ grp, x, y: y + k * (boxH + 10), w, h: boxH }));
  return { size, pad, boxes, bottom: y + nG * (boxH + 10) };
}

function drawThumbs(s, d, L, pal, head, on) {
  const T = d.num_tokens, out = [];
  L.boxes.forEach(({ grp, x, y, w, h: bh }, k) => {
    svg('rect', { x, y, width: w, height: bh, rx: 8, class: `ly-group-box g${k % 4}` }, s);
    svg('text', { x: x + 8, y: y + 15, class: `ly-group-label g${k % 4}`,
      text: `K/V head ${grp.kv_head}: query heads ${grp.query_heads.join(', ')}` }, s);
    grp.query_heads.forEach((hh, n) => {
      const tx = x + L.pad + n * (L.size + L.pad), ty = y + 30;
      const g = svg('g', { class: `ly-thumb${hh === head ? ' selected' : ''}`, tabindex: 0, role: 'button', 'data-head': hh,
        'aria-pressed': String(hh === head), 'aria-label': `head ${hh} (key/value head ${grp.kv_head})` }, s);
      svg('rect', { x: tx - 2, y: ty - 2, width: L.size + 4, height: L.size + 4, rx: 3, class: 'ly-thumb-frame' }, g);
      svg('rect', { x: tx, y: ty, width: L.size, height: L.size, class: 'ly-future' }, g);
      const full = d.heads[hh].weights.map((r) => r.concat(Array(T - r.length).fill(NaN)));
      svg('image', { x: tx, y: ty, width: L.size, height: L.size, preserveAspectRatio: 'none', class: 'strip-img', href: heatImage(full, pal) }, g);
      svg('text', { x: tx + L.size - 3, y: ty + 11, 'text-anchor': 'end', class: 'ly-thumb-label', text: String(hh) }, g);
      if (sinkShare(d, hh) > SINK) svg('text', { x: tx + 3, y: ty + L.size - 4, class: 'ly-thumb-label ly-thumb-sink', text: 'sink' }, g);
      out.push({ r: svg('rect', { x: tx, width: L.size, height: L.size / T, class: 'ly-thumb-row' }, g), y: ty, c: L.size / T });
      const pick = () => on.head(hh);
      g.addEventListener('click', pick);
      g.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); pick(); } });
    });
  });
  return out;
}

/** Attention weights as pixels: 0 -> the panel, 1 -> --c-tokens (a square root lifts the small ones); NaN -> transparent. */
export function heatImage(rows, pal) {
  const c = document.createElement('canvas');
  c.width = c.height = rows.length;
  const g = c.getContext('2d'), img = g.createImageData(rows.length, rows.length);
  rows.forEach((r, i) => r.forEach((w, j) => {
    if (Number.isNaN(w)) return;
    const o = (i * rows.length + j) * 4, t = Math.sqrt(Math.min(1, w));
    for (let k = 0; k < 3; k++) img.data[o + k] = pal.zero[k] + (pal.pos[k] - pal.zero[k]) * t;
    img.data[o + 3] = 255;
  }));
  g.putImageData(img, 0, 0);
  return c.toDataURL('image/png');
}

/** The looked-from row in words: the tokens this head gives the most weight, largest first, with bars. */
function drawReading(g, R, d, hd, i) {
  clear(g);
  const w = hd.weights[i], order = w.map((x, j) => j).sort((a, b) => w[b] - w[a]).slice(0, READING_ROWS);
  svg('text', { x: R.x, y: R.y + 12, class: 'ly-reading-title', text: `From ${clip(tokenText(d.tokens[i]), 10)}, token ${i + 1} of ${d.num_tokens},` }, g);
  svg('text', { x: R.x, y: R.y + 28, class: 'ly-reading-title', text: `head ${hd.head} looks most at:` }, g);
  const lx = R.x + 76, bw = R.w - 76 - 92;
  order.forEach((j, k) => {
    const y = R.y + 38 + k * 19;
    svg('text', { x: lx - 8, y: y + 11, 'text-anchor': 'end', class: 'ly-reading-token', text: clip(tokenText(d.tokens[j]), 9) }, g);
    svg('rect', { x: lx, y: y + 2, width: bw, height: 11, rx: 3, class: 'ly-reading-track' }, g);
    svg('rect', { x: lx, y: y + 2, width: Math.max(1, bw * w[j]), height: 11, rx: 3, class: 'ly-reading-bar' }, g);
    svg('text', { x: lx + bw + 6, y: y + 11, class: 'ly-reading-value', text: `${pct(w[j], 0)} · #${j + 1}` }, g);
  });
}

function legend(box, pal) {
  const more = moreWeightLooks(pal);
  const lg = h('p', { class: 'legend ly-attn-legend', 'data-more': more }, box);
  const a = h('span', {}, lg);
  h('i', { class: 'ly-heat-key', 'aria-hidden': 'true' }, a);
  a.append(`0% → 100% of a row’s attention: ${more} = more weight (each row shares out 100%; numbers in the outlined row are %)`);
  const b = h('span', {}, lg);
  h('i', { class: 'ly-masked-key', 'aria-hidden': 'true' }, b);
  b.append(MASKED);
}
