// fit.js: make a chromeless stage fill its window (iframe, projector, presenter) without scrollbars.
//
// The root font size follows the window (CSS: html.fit, times --scale), and a fit factor --fit in
// [MIN_FIT, 1] shrinks both the type and the width of the stage's content until it fits the stage's
// height. SVG drawn at width 100% shrinks with the width; HTML shrinks with the type. When the type
// has reached MIN_FIT and the content is still too tall (large type: size=l, xl), the content's width
// is chosen alone (--fit-w, half the stage or more) with the type held: bigger type, a smaller picture,
// nothing clipped. Only then does the type go on shrinking, down to what size=m would have had at
// MIN_FIT, and below that the stage scrolls vertically rather than become unreadable.

const MIN_FIT = 0.45;
const WIDTHS = [1, 0.85, 0.7, 0.6, 0.5]; // the content's width, as a share of the stage's
const STEPS = 8; // binary-search iterations: precision (1 - MIN_FIT) / 2^8 ≈ 0.002

/** True while a chromeless frame (embed, presenter) is being fitted: scenes may draw denser then. */
export function fitted() {
  return document.documentElement.classList.contains('fit');
}

function overflows(stage) {
  const doc = document.documentElement;
  return stage.scrollHeight > stage.clientHeight + 1 || stage.scrollWidth > stage.clientWidth + 1 ||
    doc.scrollWidth > doc.clientWidth + 1 || doc.scrollHeight > doc.clientHeight + 1;
}

function setVar(name, f) {
  document.documentElement.style.setProperty(name, f.toFixed(4));
}

/** The largest value in [lo, hi] for which `set(value)` leaves no overflow (lo when none does); leaves it set. */
function largest(stage, set, lo, hi) {
  for (let i = 0; i < STEPS; i++) {
    const mid = (lo + hi) / 2;
    set(mid);
    if (overflows(stage)) hi = mid; else lo = mid;
  }
  set(lo);
  return lo;
}

/** Find the largest fit factor whose layout does not overflow; returns it (the type's factor). */
export function fitOnce(stage) {
  const root = document.documentElement;
  const setFit = (f) => setVar('--fit', f);
  const setWidth = (w) => setVar('--fit-w', w);
  stage.classList.remove('fit-scroll');
  root.style.removeProperty('--fit-w');
  setFit(1);
  if (!overflows(stage)) return 1;
  setFit(MIN_FIT);
  if (!overflows(stage)) return largest(stage, setFit, MIN_FIT, 1);
  // The type is at its floor. Give the content another width, the type held: a drawing (SVG) is shorter
  // when narrower, HTML text when wider, so try widths from the whole stage down and keep the widest that fits.
  let best = 1, tallest = Infinity, prev = null;
  for (const w of WIDTHS) {
    setWidth(w);
    if (!overflows(stage)) {
      return prev === null ? MIN_FIT : (largest(stage, setWidth, w, prev), MIN_FIT);
    }
    if (stage.scrollHeight < tallest) [best, tallest] = [w, stage.scrollHeight];
    prev = w;
  }
  // No width fits: the type shrinks too (large type only, down to what size=m has at MIN_FIT), at the best width.
  setWidth(best);
  const scale = Math.max(1, Number(getComputedStyle(root).getPropertyValue('--scale')) || 1);
  const floor = MIN_FIT / scale;
  if (floor < MIN_FIT) {
    setFit(floor);
    if (!overflows(stage)) return largest(stage, setFit, floor, MIN_FIT);
  }
  stage.classList.add('fit-scroll');
  return floor;
}

/** Keep `stage` fitted: now, on window resize, and when its content changes size. Returns {refit, stop}. */
export function autoFit(stage, scale = '1') {
  const root = document.documentElement;
  root.classList.add('fit');
  root.style.setProperty('--scale', scale || '1');
  // larger type (size=l, xl) has the room of a narrower frame: the blocks a phone frame drops go too (theme.css)
  root.classList.toggle('fit-large', Number(scale) > 1);
  let raf = 0;
  let fitting = false;
  const refit = () => {
    cancelAnimationFrame(raf);
    raf = requestAnimationFrame(() => {
      fitting = true;
      fitOnce(stage);
      fitting = false;
    });
  };
  const ro = new ResizeObserver(() => { if (!fitting) refit(); });
  const watch = () => { for (const child of stage.children) ro.observe(child); };
  const mo = new MutationObserver(() => { watch(); refit(); });
  mo.observe(stage, { childList: true });
  watch();
  addEventListener('resize', refit);
  refit();
  return {
    refit,
    stop() {
      cancelAnimationFrame(raf);
      ro.disconnect();
      mo.disconnect();
      removeEventListener('resize', refit);
      root.classList.remove('fit', 'fit-large');
      root.style.removeProperty('--fit');
      root.style.removeProperty('--fit-w');
      stage.classList.remove('fit-scroll');
    },
  };
}
