// fit.js: make a chromeless stage fill its window (iframe, projector, presenter) without scrollbars.
//
// The root font size follows the window (CSS: html.fit, times --scale), and a fit factor --fit in
// [MIN_FIT, 1] shrinks both the type and the width of the stage's content until it fits the stage's
// height. SVG drawn at width 100% shrinks with the width; HTML shrinks with the type. Below MIN_FIT
// the stage scrolls vertically rather than become unreadable.

const MIN_FIT = 0.45;
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

function setFit(f) {
  document.documentElement.style.setProperty('--fit', f.toFixed(4));
}

/** Find the largest fit factor whose layout does not overflow; returns it. */
export function fitOnce(stage) {
  stage.classList.remove('fit-scroll');
  setFit(1);
  if (!overflows(stage)) return 1;
  let lo = MIN_FIT, hi = 1;
  setFit(lo);
  if (overflows(stage)) {
    stage.classList.add('fit-scroll');
    return lo;
  }
  for (let i = 0; i < STEPS; i++) {
    const mid = (lo + hi) / 2;
    setFit(mid);
    if (overflows(stage)) hi = mid; else lo = mid;
  }
  setFit(lo);
  return lo;
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
      stage.classList.remove('fit-scroll');
    },
  };
}
