// scale.js: linear, log and band scales (domain -> range), each with ticks.

export function linear([d0, d1], [r0, r1]) {
  const f = (x) => r0 + ((x - d0) / (d1 - d0 || 1)) * (r1 - r0);
  f.invert = (y) => d0 + ((y - r0) / (r1 - r0 || 1)) * (d1 - d0);
  f.ticks = (n = 5) => Array.from({ length: n + 1 }, (_, i) => d0 + ((d1 - d0) * i) / n);
  return f;
}

export function log([d0, d1], [r0, r1], base = 10) {
  const l0 = Math.log(d0), l1 = Math.log(d1);
  const f = (x) => r0 + ((Math.log(Math.max(x, 1e-300)) - l0) / (l1 - l0)) * (r1 - r0);
  f.invert = (y) => Math.exp(l0 + ((y - r0) / (r1 - r0)) * (l1 - l0));
  f.ticks = () => {
    const out = [];
    const lo = Math.floor(Math.log(d0) / Math.log(base)), hi = Math.ceil(Math.log(d1) / Math.log(base));
    for (let e = lo; e <= hi; e++) {
      const v = Math.pow(base, e);
      if (v >= d0 * 0.999 && v <= d1 * 1.001) out.push(v);
    }
    return out;
  };
  return f;
}

/** Band scale: n equal slots across [r0, r1] with padding between (0..1). */
export function band(n, [r0, r1], padding = 0.1) {
  const step = (r1 - r0) / Math.max(n, 1);
  const f = (i) => r0 + i * step + (step * padding) / 2;
  f.bandwidth = step * (1 - padding);
  f.step = step;
  return f;
}

export const clamp = (x, lo, hi) => Math.min(hi, Math.max(lo, x));
