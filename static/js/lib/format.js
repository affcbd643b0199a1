// format.js: numbers with units, always shown; tabular digits come from CSS.

const nf = (digits) => new Intl.NumberFormat('en-US', { maximumFractionDigits: digits, minimumFractionDigits: 0 });

/** Significant-digit formatting that keeps integers whole: 1234 -> "1,234", 0.01234 -> "0.0123". */
export function num(x, sig = 3) {
  if (x === null || x === undefined || Number.isNaN(x)) return '–';
  if (!Number.isFinite(x)) return x > 0 ? '∞' : '−∞';
  const ax = Math.abs(x);
  if (ax >= 10 ** (sig - 1) || Number.isInteger(x)) return nf(0).format(Math.round(x));
  const digits = Math.max(0, sig - 1 - Math.floor(Math.log10(ax || 1)));
  return nf(Math.min(digits, 6)).format(x);
}

/** Fixed decimals with thousands separators. */
export function fixed(x, digits = 2) {
  if (x === null || x === undefined || Number.isNaN(x)) return '–';
  return new Intl.NumberFormat('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }).format(x);
}

export function pct(frac, digits = 1) {
  if (frac === null || frac === undefined) return '–';
  const p = frac * 100;
  return `${p !== 0 && Math.abs(p) < 0.1 ? num(p, 2) : fixed(p, digits)}%`;
}

/** Bytes with binary-free SI units as vendors quote them (GB = 1e9 bytes). */
export function bytes(b) {
  const units = ['B', 'KB', 'MB', 'GB', 'TB', 'PB'];
  let i = 0;
  let v = b;
  while (Math.abs(v) >= 1000 && i < units.length - 1) { v /= 1000; i++; }
  return `${num(v, 3)} ${units[i]}`;
}

/** Milliseconds to a readable duration. */
export function duration(ms) {
  if (ms === null || ms === undefined) return '–';
  if (ms < 1) return `${num(ms * 1000, 3)} µs`;
  if (ms < 1000) return `${num(ms, 3)} ms`;
  if (ms < 60000) return `${num(ms / 1000, 3)} s`;
  return `${num(ms / 60000, 3)} min`;
}

/** SI prefix for large rates: 989e12 FLOP/s -> "989 TFLOP/s". */
export function si(x, unit = '') {
  const prefixes = [['P', 1e15], ['T', 1e12], ['G', 1e9], ['M', 1e6], ['k', 1e3]];
  for (const [p, v] of prefixes) if (Math.abs(x) >= v) return `${num(x / v, 3)} ${p}${unit}`;
  return `${num(x, 3)} ${unit}`.trim();
}

export function usd(x) {
  if (x === null || x === undefined) return '–';
  return `$${x >= 100 ? nf(0).format(x) : fixed(x, x < 1 ? 3 : 2)}`;
}

/** The unit beside n: a plain plural word loses its s at exactly 1 (unitFor(1, 'chats') -> 'chat'); a unit that
 *  is not one plain plural word ('requests/s', 'USD') stays. The same rule as scenes.py `singular_unit`. */
export function unitFor(n, unit) {
  return Number(n) === 1 && /^[A-Za-z]+s$/.test(unit) ? unit.slice(0, -1) : unit;
}

/** A count with its word: plural(1, 'token') -> "1 token", plural(1200, 'token') -> "1,200 tokens". */
export function plural(n, one, many = `${one}s`) {
  return `${num(n)} ${n === 1 ? one : many}`;
}
