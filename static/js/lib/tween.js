// tween.js: requestAnimationFrame tweens that respect prefers-reduced-motion (then they jump to the end).

export function prefersReducedMotion() {
  return window.matchMedia && window.matchMedia('(prefers-reduced-motion: reduce)').matches;
}

export const ease = {
  linear: (t) => t,
  inOut: (t) => (t < 0.5 ? 2 * t * t : 1 - Math.pow(-2 * t + 2, 2) / 2),
  out: (t) => 1 - Math.pow(1 - t, 3),
};

/** Animate t from 0 to 1 over ms, calling onFrame(eased t); returns {cancel, done: Promise}. */
export function tween(ms, onFrame, easing = ease.inOut) {
  let raf = 0;
  let cancelled = false;
  const done = new Promise((resolve) => {
    if (ms <= 0 || prefersReducedMotion()) {
      onFrame(1);
      resolve(true);
      return;
    }
    const t0 = performance.now();
    const step = (now) => {
      if (cancelled) return resolve(false);
      const t = Math.max(0, Math.min(1, (now - t0) / ms)); // a frame stamped before t0 is not before the start
      onFrame(easing(t));
      if (t < 1) raf = requestAnimationFrame(step);
      else resolve(true);
    };
    raf = requestAnimationFrame(step);
  });
  return { cancel() { cancelled = true; cancelAnimationFrame(raf); }, done };
}

export const lerp = (a, b, t) => a + (b - a) * t;

/** A looping clock: calls onTick(elapsed ms) every frame until stopped; paused while reduced motion. */
export function loop(onTick) {
  let raf = 0;
  let running = true;
  const t0 = performance.now();
  const step = (now) => {
    if (!running) return;
    onTick(now - t0);
    raf = requestAnimationFrame(step);
  };
  raf = requestAnimationFrame(step);
  return { stop() { running = false; cancelAnimationFrame(raf); } };
}
