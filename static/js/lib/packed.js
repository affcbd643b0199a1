// lib/packed.js: numeric arrays packed as text by the server (api/packed.py), chapters 2 and 3.
// One base-64 digit d per number: d < 62 is (d - 31) units; '+' then two digits hi, lo is (64 hi + lo - 2048)
// units; '/' then three digits is a float16's bits. Decoded once per response (kept on the object).

const DIGITS = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const DIGIT = new Int16Array(128).fill(-1);
for (let i = 0; i < 64; i++) DIGIT[DIGITS.charCodeAt(i)] = i;
const ROWS = Symbol('rows');

/** A float16's 16 bits as a number. */
function half(b) {
  const e = (b >> 10) & 31, m = b & 1023, s = b & 32768 ? -1 : 1;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

/** All the numbers of a packed array, row after row (a Float32Array of rows x cols). */
export function unpack(p) {
  const out = new Float32Array(p.rows * p.cols), t = p.text, u = p.unit;
  for (let i = 0, n = 0; i < t.length; n++) {
    const d = DIGIT[t.charCodeAt(i)];
    if (d < 62) { out[n] = (d - 31) * u; i += 1; }
    else if (d === 62) { out[n] = (DIGIT[t.charCodeAt(i + 1)] * 64 + DIGIT[t.charCodeAt(i + 2)] - 2048) * u; i += 3; }
    else { out[n] = half((DIGIT[t.charCodeAt(i + 1)] << 12) | (DIGIT[t.charCodeAt(i + 2)] << 6) | DIGIT[t.charCodeAt(i + 3)]); i += 4; }
  }
  return out;
}

/**
 * A packed array as rows (views into one Float32Array), decoded once and kept on the object; `first`: the index
 * the first row stands for (the rows before it are left empty), so rows[i] reads as the plain array did.
 * A plain array (an older body) passes through.
 */
export function rows(p, first = 0) {
  if (!p || Array.isArray(p)) return p || [];
  if (!p[ROWS]) {
    const flat = unpack(p), out = new Array(first + p.rows);
    for (let r = 0; r < p.rows; r++) out[first + r] = flat.subarray(r * p.cols, (r + 1) * p.cols);
    p[ROWS] = out;
  }
  return p[ROWS];
}
