// scenes/roofline-labels.js: chapter 5's label placement. Each label tries spots around its anchor in order and
// takes the one that overlaps least with the points, lines and labels already placed; an optional label that
// cannot find a clean spot is hidden rather than drawn on top of something.

const SPOTS = {
  r: (g, fs) => [g, fs * 0.35, 'start'],
  l: (g, fs) => [-g, fs * 0.35, 'end'],
  t: (g) => [0, -g, 'middle'],
  b: (g, fs) => [0, g + fs * 0.8, 'middle'],
  tr: (g) => [g * 0.75, -g * 0.75, 'start'],
  br: (g, fs) => [g * 0.75, g * 0.75 + fs * 0.75, 'start'],
  tl: (g) => [-g * 0.75, -g * 0.75, 'end'],
  bl: (g, fs) => [-g * 0.75, g * 0.75 + fs * 0.75, 'end'],
};
const PAD = 2;

/** Width of an SVG text element in user units (measured when drawn, estimated otherwise). */
export function textWidth(el, fs) {
  let w = 0;
  try { w = el.getComputedTextLength(); } catch { w = 0; }
  return w > 0 ? w : el.textContent.length * fs * 0.58;
}

function boxAt(x, y, w, fs, anchor) {
  const x0 = anchor === 'start' ? x : anchor === 'end' ? x - w : x - w / 2;
  return { x0: x0 - PAD, x1: x0 + w + PAD, y0: y - fs * 0.82 - PAD, y1: y + fs * 0.22 + PAD };
}

const overlap = (a, b) => Math.max(0, Math.min(a.x1, b.x1) - Math.max(a.x0, b.x0)) *
  Math.max(0, Math.min(a.y1, b.y1) - Math.max(a.y0, b.y0));

/** Obstacle set: boxes ({x0, y0, x1, y1, weight}) and polylines sampled every few units ({pts, weight, width}). */
export function obstacles() {
  const boxes = [], samples = [];
  return {
    boxes, samples,
    box(b, weight = 1) { boxes.push({ ...b, weight }); },
    point(x, y, r, weight = 4) { boxes.push({ x0: x - r, x1: x + r, y0: y - r, y1: y + r, weight }); },
    line(pts, weight = 1, width = 3) {
      for (let i = 1; i < pts.length; i++) {
        const [ax, ay] = pts[i - 1], [bx, by] = pts[i];
        const n = Math.max(1, Math.ceil(Math.hypot(bx - ax, by - ay) / 3));
        for (let k = 0; k <= n; k++) samples.push([ax + ((bx - ax) * k) / n, ay + ((by - ay) * k) / n, width / 2, weight]);
      }
    },
  };
}

function cost(b, obs, bounds) {
  let c = 0;
  const out = Math.max(0, bounds.x0 - b.x0) + Math.max(0, b.x1 - bounds.x1) + Math.max(0, bounds.y0 - b.y0) + Math.max(0, b.y1 - bounds.y1);
  c += out * 400;
  for (const o of obs.boxes) c += overlap(b, o) * o.weight;
  for (const [x, y, r, w] of obs.samples) if (x > b.x0 - r && x < b.x1 + r && y > b.y0 - r && y < b.y1 + r) c += 6 * w;
  return c;
}

/**
 * Place labels in order. Each: {el, x, y, fs, gap, spots: ['r', 'l', ...], optional, tolerance}. The chosen box
 * joins the obstacles, so later labels avoid it. Returns [{el, spot, cost, box}] (spot null when hidden).
 */
export function placeLabels(labels, obs, bounds) {
  const placed = [];
  for (const L of labels) {
    const w = textWidth(L.el, L.fs);
    let best = null;
    for (const s of L.spots) {
      const [dx, dy, anchor] = SPOTS[s](L.gap, L.fs);
      const b = boxAt(L.x + dx, L.y + dy, w, L.fs, anchor);
      const c = cost(b, obs, bounds);
      if (!best || c < best.c - 1e-9) best = { s, c, b, x: L.x + dx, y: L.y + dy, anchor };
    }
    if (L.optional && best.c > (L.tolerance ?? 0)) {
      L.el.setAttribute('visibility', 'hidden');
      placed.push({ el: L.el, spot: null, cost: best.c, box: null });
      continue;
    }
    L.el.setAttribute('visibility', 'visible');
    L.el.setAttribute('x', best.x.toFixed(1));
    L.el.setAttribute('y', best.y.toFixed(1));
    L.el.setAttribute('text-anchor', best.anchor);
    obs.box(best.b, 60);
    placed.push({ el: L.el, spot: best.s, cost: best.c, box: best.b });
  }
  return placed;
}
