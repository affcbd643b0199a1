// scenes/parallelism-layer.js: chapter 10's "one layer, cut into slices" picture. One transformer layer's weights
// as two matrices side by side (attention, MLP; widths in proportion to their weights unless the slices' numbers
// need more room), cut into tp column slices, one colour per GPU rank: the same colour marks the GPU on the board that
// holds the slice.

import { svg, clear } from '../lib/svg.js';
import { bytes } from '../lib/format.js';

const LAYOUT = {
  wide: { W: 960, H: 118, x0: 12, top: 30, h: 62, gap: 4, split: 22, font: 12.5, small: 11 },
  mid: { W: 660, H: 118, x0: 8, top: 30, h: 60, gap: 3, split: 18, font: 12, small: 10.5 },
  narrow: { W: 360, H: 118, x0: 4, top: 32, h: 58, gap: 2, split: 14, font: 10.5, small: 9.5 },
};

/** Draw the layer into host; returns {setPose({cut, active}), slices: {attention: [...], mlp: [...]}}. */
export function drawLayer(host, d, variant) {
  const L = LAYOUT[variant] || LAYOUT.wide, ly = d.layer, tp = d.tp, narrow = variant === 'narrow';
  const s = svg('svg', { viewBox: `0 0 ${L.W} ${L.H}`, class: `par-layer-svg ${variant}`, width: '100%',
    role: 'img', 'aria-label': `One layer's weights, ${bytes(ly.layer_bytes)}: attention ${bytes(ly.attention_bytes)} and MLP ` +
      `${bytes(ly.mlp_bytes)}, cut into ${tp} slice${tp === 1 ? '' : 's'} of ${bytes(ly.slice_bytes)}, one per GPU` }, clear(host));
  const avail = L.W - 2 * L.x0 - L.split;
  const minW = tp * (narrow ? 12 : 11) + (tp - 1) * L.gap; // room for each slice's number
  const attName = narrow ? 'attention' : 'Attention';
  const aw = Math.max(minW, (avail * ly.attention_params) / (ly.attention_params + ly.mlp_params));
  const blocks = [
    { key: 'attention', x: L.x0, w: aw, name: attName, b: ly.attention_bytes },
    { key: 'mlp', x: L.x0 + aw + L.split, w: avail - aw, b: ly.mlp_bytes,
      name: narrow ? (ly.num_experts > 1 ? `MLP (${ly.num_experts} experts)` : 'MLP')
        : `MLP (gate, up, down${ly.num_experts > 1 ? ` × ${ly.num_experts} experts` : ''})` },
  ];
  const slices = {};
  for (const B of blocks) {
    // attention's name starts at its left edge, the MLP's ends at its right edge: a narrow attention block
    // may lend its name the room above the MLP
    const right = B.key === 'mlp';
    svg('text', { x: right ? B.x + B.w : B.x, y: L.top - 9, 'text-anchor': right ? 'end' : 'start', class: 'ly-name',
      'font-size': L.font, text: `${B.name} · ${bytes(B.b)}` }, s);
    svg('rect', { x: B.x - 2, y: L.top - 2, width: B.w + 4, height: L.h + 4, rx: 5, class: 'ly-frame' }, s);
    const g = svg('g', { class: `ly-block ${B.key}` }, s);
    slices[B.key] = [...Array(tp).keys()].map((k) => {
      const r = svg('rect', { y: L.top, height: L.h, rx: 2, class: `ly-slice g-${k % 8}` }, g);
      const t = svg('text', { y: L.top + L.h / 2 + 4, 'text-anchor': 'middle', class: 'ly-lbl', 'font-size': L.small,
        text: tp === 1 ? 'GPU 0' : (B.w / tp > (narrow ? 30 : 46) ? `GPU ${k}` : String(k)) }, g);
      return { r, t, k, B };
    });
  }
  const note = svg('text', { x: L.x0, y: L.top + L.h + 19, class: 'ly-note', 'font-size': L.small }, s);
  const place = (cut) => {
    for (const list of Object.values(slices)) {
      for (const sl of list) {
        const gap = cut ? L.gap : 0, w = (sl.B.w - (tp - 1) * gap) / tp, x = sl.B.x + sl.k * (w + gap);
        sl.r.setAttribute('x', x.toFixed(1));
        sl.r.setAttribute('width', Math.max(1, w).toFixed(1));
        sl.t.setAttribute('x', (x + w / 2).toFixed(1));
      }
    }
  };
  const rows = narrow ? `${ly.hidden_size.toLocaleString('en-US')} rows` : `${ly.hidden_size.toLocaleString('en-US')} rows: one per number of a token's vector`;
  return {
    svg: s, slices,
    /** cut: slices apart and coloured by GPU; active: 'attention' | 'mlp' | null lights that block's slices. */
    setPose({ cut, active }) {
      place(cut && tp > 1);
      s.classList.toggle('cut', !!cut && tp > 1);
      for (const [key, list] of Object.entries(slices)) for (const sl of list) sl.r.classList.toggle('active', active === key);
      note.textContent = !cut ? `One layer of ${d.num_layers}: ${bytes(ly.layer_bytes)} of weights · ${rows}`
        : tp === 1 ? `Not cut: each layer sits whole on one GPU${d.pp > 1 ? ', the GPU of its pipeline stage' : ''} (${bytes(ly.layer_bytes)} per layer)`
          : `${tp} slices of ${bytes(ly.slice_bytes)}: each GPU holds the slice in its colour, in every layer` +
            (d.pp > 1 ? ' of its stage' : '');
    },
  };
}
