// scenes/gpu-package.js: chapter 4's package drawing (HBM sites, dies, L2, SM groups) and the routes tiles follow.

import { svg, clear, root } from '../lib/svg.js';
import { num, fixed, plural } from '../lib/format.js';

// ---- the package drawing --------------------------------------------------------------------

/** Grid for n equal square cells in a w x h box: {cols, rows, cell, score}; big cells, few empty slots. */
function bestGrid(n, w, h) {
  let best = null;
  for (let cols = 1; cols <= n; cols++) {
    const rows = Math.ceil(n / cols), cell = Math.min(w / cols, h / rows);
    const score = cell * Math.pow(n / (cols * rows), 1.5);
    if (!best || score > best.score) best = { cols, rows, cell, score };
  }
  return best;
}

/** Boxes for `count` equal groups of up to nMax SMs: the column count whose SM grid scores best. */
function arrange(box, count, nMax, m, head) {
  let best = null;
  for (let gc = 1; gc <= count; gc++) {
    const gr = Math.ceil(count / gc);
    const w = (box.w - (gc - 1) * m) / gc, h = (box.h - (gr - 1) * m) / gr;
    const grid = bestGrid(nMax, w - 6, h - 6 - head);
    if (!best || grid.score > best.grid.score) best = { gc, w, h, grid };
  }
  return best;
}

function boxesIn(box, count, a, m) {
  return Array.from({ length: count }, (_, i) => ({ x: box.x + (i % a.gc) * (a.w + m),
    y: box.y + Math.floor(i / a.gc) * (a.h + m), w: a.w, h: a.h }));
}

const mid = (b) => ({ x: b.x + b.w / 2, y: b.y + b.h / 2 });
const clampTo = (x, lo, hi) => Math.min(hi, Math.max(lo, x));

/** HBM sites (or board memory) and the chip area between them. */
function placeMemory(d, v, pkg) {
  const P = d.package, m = v.gap, stacks = [];
  const active = d.layout.hbm_stacks;
  if (P.hbm_placement === 'top-bottom') {
    const chip = { x: pkg.x + m, y: pkg.y + 2 * m + v.stackH, w: pkg.w - 2 * m, h: pkg.h - 4 * m - 2 * v.stackH };
    const per = Math.ceil(P.hbm_sites / 2), w = (chip.w - (per - 1) * m) / per;
    for (let i = 0; i < P.hbm_sites; i++) {
      const top = i < per, j = top ? i : i - per;
      stacks.push({ x: chip.x + j * (w + m), y: top ? pkg.y + m : chip.y + chip.h + m, w, h: v.stackH,
        side: top ? 'top' : 'bottom', active: i < active });
    }
    return { chip, stacks };
  }
  const chip = { x: pkg.x + 2 * m + v.stackW, y: pkg.y + m, w: pkg.w - 4 * m - 2 * v.stackW, h: pkg.h - 2 * m };
  if (P.hbm_placement === 'board') {
    for (const side of ['left', 'right']) {
      stacks.push({ x: side === 'left' ? pkg.x : pkg.x + pkg.w - v.stackW, y: pkg.y + m, w: v.stackW, h: pkg.h - 2 * m,
        side, active: true, board: true });
    }
    return { chip, stacks };
  }
  const per = Math.ceil(P.hbm_sites / 2), sh = (pkg.h - 2 * m - (per - 1) * m) / per;
  for (let i = 0; i < P.hbm_sites; i++) {
    const left = i < per, j = left ? i : i - per;
    stacks.push({ x: left ? pkg.x + m : pkg.x + pkg.w - m - v.stackW, y: pkg.y + m + j * (sh + m), w: v.stackW, h: sh,
      side: left ? 'left' : 'right', active: i < active });
  }
  return { chip, stacks };
}

/** SMs of one group in a box, each with the lanes a tile follows to reach it (L2 band, then the SM). */
function placeGroup(g, box, n, label, lanesFor, v, grid) {
  const head = v.label && label ? 14 : 0;
  const inner = { x: box.x + 3, y: box.y + 3 + head, w: box.w - 6, h: box.h - 6 - head };
  const ox = inner.x + (inner.w - grid.cols * grid.cell) / 2, oy = inner.y + (inner.h - grid.rows * grid.cell) / 2;
  g.groups.push({ ...box, label });
  for (let i = 0; i < n; i++) {
    const s = grid.cell * 0.86;
    const x = ox + (i % grid.cols) * grid.cell + (grid.cell - s) / 2, y = oy + Math.floor(i / grid.cols) * grid.cell + (grid.cell - s) / 2;
    const sm = { x, y, s, cx: x + s / 2, cy: y + s / 2 };
    sm.lanes = lanesFor(sm);
    g.sms.push(sm);
  }
}

/** One NVIDIA-style die: L2 band across the middle (split in partitions), SM groups above and below. */
function placeDie(g, die, groups, parts, kind, v, first) {
  const m = v.gap * 0.6, band = v.band, l2y = die.y + die.h / 2 - band / 2;
  const pw = (die.w - 2 * m - (parts - 1) * m) / parts, l2 = [];
  for (let i = 0; i < parts; i++) l2.push({ x: die.x + m + i * (pw + m), y: l2y, w: pw, h: band });
  g.l2.push(...l2);
  const lanesFor = (sm) => {
    const near = l2.reduce((a, b) => (Math.abs(mid(b).x - sm.cx) < Math.abs(mid(a).x - sm.cx) ? b : a));
    return [{ y: l2y + band / 2, x: clampTo(sm.cx, near.x + 2, near.x + near.w - 2) }];
  };
  const halves = groups.length === 1 ? [[Math.ceil(groups[0] / 2)], [Math.floor(groups[0] / 2)]]
    : [groups.slice(0, Math.ceil(groups.length / 2)), groups.slice(Math.ceil(groups.length / 2))];
  const regions = [{ y: die.y + m, h: l2y - m - die.y - m }, { y: l2y + band + m, h: die.y + die.h - m - (l2y + band + m) }];
  const head = v.label && groups.length > 1 ? 14 : 0;
  const regionH = Math.min(regions[0].h, regions[1].h), w = die.w - 2 * m;
  const a = arrange({ w, h: regionH }, halves[0].length, Math.max(...halves.flat()), m, head);
  let k = first;
  halves.forEach((row, r) => {
    const boxes = boxesIn({ x: die.x + m, y: regions[r].y }, row.length, a, m);
    row.forEach((n, i) => placeGroup(g, boxes[i], n, groups.length > 1 ? `${kind} ${++k}` : '', lanesFor, v, a.grid));
  });
  return k;
}

/** MI300X-style: I/O dies in a 2x2 grid (Infinity Cache strip each), XCDs on top, L2 strip per XCD. */
function placeChiplets(g, chip, d, v) {
  const P = d.package, L = d.layout, m = v.gap * 0.6, band = v.band * 0.7;
  const perIod = L.sm_groups.length / P.io_dies, cols = 2, rows = Math.ceil(P.io_dies / cols);
  const iw = (chip.w - (cols - 1) * m) / cols, ih = (chip.h - (rows - 1) * m) / rows;
  let xcd = 0;
  for (let k = 0; k < P.io_dies; k++) {
    const iod = { x: chip.x + (k % cols) * (iw + m), y: chip.y + Math.floor(k / cols) * (ih + m), w: iw, h: ih };
    const facesDown = Math.floor(k / cols) < rows / 2; // top row: cache strip at the bottom, toward the centre
    const ic = { x: iod.x + m, y: facesDown ? iod.y + ih - m - band : iod.y + m, w: iw - 2 * m, h: band };
    g.dies.push({ ...iod, io: true });
    g.caches.push(ic);
    const xw = (iw - 2 * m - (perIod - 1) * m) / perIod, xh = ih - 3 * m - band;
    for (let j = 0; j < perIod; j++, xcd++) {
      const box = { x: iod.x + m + j * (xw + m), y: facesDown ? iod.y + m : ic.y + band + m, w: xw, h: xh };
      const l2 = { x: box.x + 2, y: facesDown ? box.y + xh - band * 0.8 - 2 : box.y + 2, w: xw - 4, h: band * 0.8 };
      g.l2.push(l2);
      g.xcds.push(box);
      const cuBox = { x: box.x, y: facesDown ? box.y : l2.y + l2.h, w: xw, h: xh - l2.h - 2 };
      const lanesFor = (sm) => [{ y: mid(ic).y, x: mid(l2).x }, { y: mid(l2).y, x: clampTo(sm.cx, l2.x + 2, l2.x + l2.w - 2) }];
      const head = v.label ? 14 : 0;
      const grid = bestGrid(Math.max(...L.sm_groups), cuBox.w - 6, cuBox.h - 6 - head);
      placeGroup(g, cuBox, L.sm_groups[xcd], v.label ? `XCD ${xcd + 1}` : '', lanesFor, v, grid);
    }
  }
}

function geometry(d, v) {
  const board = d.package.hbm_placement === 'board';
  const pkg = { x: v.pad, y: v.pad, w: v.W - 2 * v.pad, h: v.H - 2 * v.pad };
  const { chip, stacks } = placeMemory(d, v, pkg);
  const g = { v, pkg: board ? { x: chip.x - v.gap, y: pkg.y, w: chip.w + 2 * v.gap, h: pkg.h } : pkg,
    chip, stacks, active: stacks.filter((s) => s.active), dies: [], l2: [], caches: [], xcds: [], groups: [], sms: [] };
  const L = d.layout, P = d.package;
  if (P.io_dies > 0) {
    placeChiplets(g, chip, d, v);
  } else if (L.die_count > 1) {
    const seam = v.gap * 0.5, dw = (chip.w - (L.die_count - 1) * seam) / L.die_count;
    const per = Math.ceil(L.sm_groups.length / L.die_count);
    let k = 0;
    for (let i = 0; i < L.die_count; i++) {
      const die = { x: chip.x + i * (dw + seam), y: chip.y, w: dw, h: chip.h };
      g.dies.push(die);
      const groups = L.sm_groups.slice(i * per, (i + 1) * per);
      k = placeDie(g, die, groups, Math.max(1, P.l2_partitions / L.die_count), L.sm_group_kind, v, k);
    }
  } else {
    g.dies.push({ ...chip });
    placeDie(g, chip, L.sm_groups, P.l2_partitions, L.sm_group_kind, v, 0);
  }
  return g;
}

function text(parent, x, y, str, cls, anchor = 'middle') {
  return svg('text', { x, y, class: cls, 'text-anchor': anchor, 'dominant-baseline': 'middle', text: str }, parent);
}

/** A label on an opaque pill, drawn above the travelling tiles so they pass under it and never hide it. */
function pill(parent, x, y, str, charW, h, cls) {
  const w = str.length * charW + 12;
  const grp = svg('g', { class: cls }, parent);
  svg('rect', { x: x - w / 2, y: y - h / 2, width: w, height: h, rx: h / 2, class: 'pill' }, grp);
  text(grp, x, y + 0.5, str, 'gpu-small');
  return grp;
}

/** The paths weights take: from each active stack across the die edge and along its L2 band (flow marks move). */
function drawLanes(g, layer) {
  for (const st of g.active) {
    const side = st.side === 'left' || st.side === 'right';
    const c = mid(st);
    const sx = side ? (st.side === 'left' ? st.x + st.w - 4 : st.x + 4) : c.x;
    const sy = side ? c.y : (st.side === 'top' ? st.y + st.h - 4 : st.y + 4);
    const ex = st.side === 'left' ? g.chip.x : st.side === 'right' ? g.chip.x + g.chip.w : sx;
    const ey = st.side === 'top' ? g.chip.y : st.side === 'bottom' ? g.chip.y + g.chip.h : sy;
    const near = g.l2.reduce((a, b) => (Math.hypot(mid(b).x - ex, mid(b).y - ey) < Math.hypot(mid(a).x - ex, mid(a).y - ey) ? b : a));
    const ly = mid(near).y, far = st.side === 'right' ? near.x + 6 : near.x + near.w - 6;
    const pts = side ? [[sx, sy], [ex, sy], [ex, ly], [far, ly]] : [[sx, sy], [sx, ly], [far, ly]];
    svg('polyline', { points: pts.map((p) => p.map((n) => n.toFixed(1)).join(',')).join(' '), class: 'gpu-lane' }, layer);
  }
}

const FLOW = { left: 'weights →', right: '← weights', top: 'weights ↓', bottom: 'weights ↑' };

function drawStacks(g, d, layer) {
  const L = d.layout, v = g.v;
  for (const s of g.stacks) {
    const c = mid(s);
    const edgeX = s.side === 'left' ? g.chip.x : s.side === 'right' ? g.chip.x + g.chip.w : c.x;
    if (s.active) {
      const bus = s.side === 'left' || s.side === 'right'
        ? { x: Math.min(s.x + s.w, edgeX), y: c.y - s.h * 0.22, w: Math.abs(edgeX - (s.side === 'left' ? s.x + s.w : s.x)), h: s.h * 0.44 }
        : { x: c.x - s.w * 0.3, y: Math.min(s.y + s.h, g.chip.y + g.chip.h), w: s.w * 0.6,
          h: s.side === 'top' ? g.chip.y - s.y - s.h : s.y - g.chip.y - g.chip.h };
      if (s.side === 'right') bus.x = edgeX;
      svg('rect', { ...bus, class: 'gpu-bus' }, layer);
    }
    svg('rect', { x: s.x, y: s.y, width: s.w, height: s.h, rx: 4, class: s.active ? 'gpu-hbm' : 'gpu-hbm inactive' }, layer);
    const lines = !s.active ? [[v.label ? 'unused site' : '–', 'gpu-small muted']]
      : s.board ? [[L.memory_type, 'gpu-label'], [`${num(L.hbm_capacity_gb)} GB`, 'gpu-small'], ...(v.label ? [['on the board', 'gpu-small muted']] : [])]
        : s.w > 60 && s.h > 48 ? [[L.memory_type, 'gpu-label'], [`${num(L.hbm_gb_per_stack)} GB`, 'gpu-small'],
          [`${fixed(L.hbm_tb_s_per_stack, 2)} TB/s`, 'gpu-small muted'],
          ...(s.h > 90 ? [[FLOW[s.side], 'gpu-small gpu-flow-label']] : [])]
          : [[L.memory_type, 'gpu-label'], [`${num(L.hbm_gb_per_stack)} GB`, 'gpu-small']];
    const step = v.label ? 15 : 12;
    lines.forEach(([str, cls], i) => text(layer, c.x, c.y + (i - (lines.length - 1) / 2) * step, str, cls));
  }
}

function drawChip(g, d, layer, labels) {
  const L = d.layout, P = d.package, v = g.v;
  for (const die of g.dies) svg('rect', { x: die.x, y: die.y, width: die.w, height: die.h, rx: 6, class: die.io ? 'gpu-iod' : 'gpu-die' }, layer);
  for (const c of g.caches) {
    svg('rect', { x: c.x, y: c.y, width: c.w, height: c.h, rx: 3, class: 'gpu-cache' }, layer);
    if (v.label) pill(labels, mid(c).x, mid(c).y, `Infinity Cache ${num(L.infinity_cache_mb / P.io_dies)} MB`, 6.4, Math.min(c.h - 3, 17), 'gpu-l2-pill');
  }
  for (const x of g.xcds) svg('rect', { x: x.x, y: x.y, width: x.w, height: x.h, rx: 3, class: 'gpu-xcd' }, layer);
  g.l2.forEach((b) => {
    svg('rect', { x: b.x, y: b.y, width: b.w, height: b.h, rx: 3, class: 'gpu-l2' }, layer);
    if (b.w < 40) return;
    const long = v.label ? `L2${P.io_dies ? '' : ' cache'} · ${num(P.l2_mb_per_partition)} MB` : `L2 ${num(P.l2_mb_per_partition)} MB`;
    const label = b.w > long.length * 6.8 + 12 ? long : 'L2';
    pill(labels, mid(b).x, mid(b).y, label, v.label ? 6.6 : 5.4, Math.min(b.h - 4, v.label ? 18 : 13), 'gpu-l2-pill');
  });
  for (const gr of g.groups) {
    svg('rect', { x: gr.x, y: gr.y, width: gr.w, height: gr.h, rx: 4, class: 'gpu-group' }, layer);
    if (gr.label && v.label) text(layer, gr.x + 6, gr.y + 9, gr.label, 'gpu-small muted', 'start');
  }
}

function drawSMs(g, layer) {
  const frag = document.createDocumentFragment();
  const els = [];
  for (const sm of g.sms) {
    const grp = svg('g', { class: 'sm', transform: `translate(${sm.x.toFixed(1)} ${sm.y.toFixed(1)})` }, frag);
    const s = sm.s;
    svg('rect', { width: s, height: s, rx: Math.min(3, s * 0.12), class: 'sm-body' }, grp);
    const mem = svg('rect', { x: s * 0.1, y: s * 0.08, width: s * 0.8, height: s * 0.2, class: 'sm-mem' }, grp);
    const t = s * 0.32, gap = s * 0.08;
    for (let i = 0; i < 4; i++) {
      svg('rect', { x: s * 0.1 + (i % 2) * (t + gap), y: s * 0.36 + Math.floor(i / 2) * (t + gap), width: t, height: t, class: 'tc' }, grp);
    }
    els.push(mem);
  }
  layer.appendChild(frag);
  return els;
}

/** Draw the package into fig; returns the geometry, a fixed pool of `poolSize` tile elements and each SM's memory strip. */
export function drawPackage(fig, d, v, poolSize) {
  clear(fig);
  const L = d.layout, P = d.package;
  const label = `${d.gpu.name}: ${L.hbm_stacks ? `${L.hbm_stacks} ${L.memory_type} stacks` : L.memory_type} ` +
    `(${num(L.hbm_capacity_gb)} GB), ${num(L.l2_cache_mb)} MB L2 in ${plural(P.l2_partitions, 'part')}, ` +
    `${L.sm_count} ${L.sm_label}s in ${plural(L.sm_groups.length, L.sm_group_kind)}, ` +
    `${L.tensor_cores_per_sm} ${L.matrix_unit || 'tensor core'}s each`;
  const s = root(fig, v.W, v.H, label);
  s.classList.add('gpu-svg', `gpu-${v.name}`);
  const g = geometry(d, v);
  svg('rect', { x: g.pkg.x, y: g.pkg.y, width: g.pkg.w, height: g.pkg.h, rx: 10, class: 'gpu-package' }, s);
  const base = svg('g', {}, s);
  drawStacks(g, d, base);
  const smLayer = svg('g', {}, s);
  const lanes = svg('g', { class: 'gpu-lanes', 'aria-hidden': 'true' }, s);
  const tiles = svg('g', { class: 'gpu-tiles', 'aria-hidden': 'true' }, s);
  drawChip(g, d, base, svg('g', {}, s));
  drawLanes(g, lanes);
  const smMem = drawSMs(g, smLayer);
  if (v.label) {
    const arch = d.gpu.architecture ? ` · ${d.gpu.architecture}` : '';
    text(s, g.pkg.x + 10, g.pkg.y + g.pkg.h - 2, `${d.gpu.name}${arch}`, 'gpu-small muted', 'start').setAttribute('dominant-baseline', 'auto');
  }
  const pool = [];
  for (let i = 0; i < poolSize; i++) {
    pool.push({ el: svg('rect', { width: v.tile, height: v.tile, x: -v.tile / 2, y: -v.tile / 2, rx: v.tile * 0.18, class: 'tile', visibility: 'hidden' }, tiles), shown: false, kv: false });
  }
  return { g, pool, smMem, hot: new Map() };
}

// ---- routes ---------------------------------------------------------------------------------

/** A tile's route: stack -> die edge -> along the L2 (and cache) lanes -> its SM. Deterministic in n. */
export function route(g, n) {
  const stacks = g.active;
  const st = stacks[n % stacks.length];
  const smIndex = (n * 7919 + Math.floor(n / stacks.length) * 104729) % g.sms.length;
  const sm = g.sms[smIndex];
  const jitter = ((n * 2654435761) % 1000) / 1000 - 0.5;
  const side = st.side === 'left' || st.side === 'right';
  const inner = { left: st.x + st.w - 6, right: st.x + 6, top: st.y + st.h - 6, bottom: st.y + 6 }[st.side];
  const sx = side ? inner : mid(st).x + jitter * st.w * 0.6, sy = side ? mid(st).y + jitter * st.h * 0.6 : inner;
  const ex = st.side === 'left' ? g.chip.x : st.side === 'right' ? g.chip.x + g.chip.w : sx;
  const ey = st.side === 'top' ? g.chip.y : st.side === 'bottom' ? g.chip.y + g.chip.h : sy;
  const pts = [[sx, sy], [ex, ey]];
  let x = ex;
  for (const lane of sm.lanes) {
    pts.push([x, lane.y], [lane.x, lane.y]);
    x = lane.x;
  }
  pts.push([sm.cx, pts[pts.length - 1][1]], [sm.cx, sm.cy]);
  return { pts, sm: smIndex };
}

export function along(pts, t) {
  let total = 0;
  const seg = [];
  for (let i = 1; i < pts.length; i++) {
    const l = Math.abs(pts[i][0] - pts[i - 1][0]) + Math.abs(pts[i][1] - pts[i - 1][1]);
    seg.push(l);
    total += l;
  }
  let left = t * total;
  for (let i = 0; i < seg.length; i++) {
    if (left <= seg[i] || i === seg.length - 1) {
      const f = seg[i] ? Math.min(1, left / seg[i]) : 1;
      return [pts[i][0] + (pts[i + 1][0] - pts[i][0]) * f, pts[i][1] + (pts[i + 1][1] - pts[i][1]) * f];
    }
    left -= seg[i];
  }
  return pts[pts.length - 1];
}
