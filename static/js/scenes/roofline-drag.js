// scenes/roofline-drag.js: chapter 5's draggable points: drag along a dotted path, or step it with the keyboard.

function nearest(pts, px, py) {
  let best = 0, bestD = Infinity;
  pts.forEach(([cx, cy], i) => {
    const dd = (cx - px) ** 2 + (cy - py) ** 2;
    if (dd < bestD) { bestD = dd; best = i; }
  });
  return best;
}

function toSvg(c, ev) {
  const r = c.s.getBoundingClientRect();
  return [((ev.clientX - r.left) / r.width) * c.v.W, ((ev.clientY - r.top) / r.height) * c.v.H];
}

/**
 * Dragging `dot` picks the stop (p.values()) nearest the pointer on its drawn path (p.pts()) and calls p.set(value);
 * arrow keys step one stop from p.now(), Home/End jump to the ends. `c` is the chart ({s: svg root, v: {W, H}}).
 */
export function bindDrag(c, dot, p) {
  const { values, pts, set } = p;
  let dragging = false;
  const pick = (ev) => set(values()[nearest(pts(), ...toSvg(c, ev))]);
  dot.addEventListener('pointerdown', (ev) => { dragging = true; dot.setPointerCapture(ev.pointerId); dot.focus(); ev.preventDefault(); });
  dot.addEventListener('pointermove', (ev) => { if (dragging) pick(ev); });
  dot.addEventListener('pointerup', () => { dragging = false; });
  dot.addEventListener('lostpointercapture', () => { dragging = false; });
  dot.addEventListener('keydown', (ev) => {
    const delta = { ArrowRight: 1, ArrowUp: 1, ArrowLeft: -1, ArrowDown: -1 }[ev.key];
    const ends = { Home: -Infinity, End: Infinity }[ev.key];
    const cur = p.now();
    if ((!delta && !ends) || cur === undefined) return;
    ev.preventDefault();
    ev.stopPropagation();
    const vals = values(), now = vals.indexOf(cur);
    const i = ends ? (ends < 0 ? 0 : vals.length - 1)
      : Math.min(vals.length - 1, Math.max(0, (now < 0 ? nearestIndex(vals, cur) : now) + delta));
    set(vals[i]);
  });
}

function nearestIndex(vals, v) {
  return nearest(vals.map((x) => [Math.log(x), 0]), Math.log(v), 0);
}
