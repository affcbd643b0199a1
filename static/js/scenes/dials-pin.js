// scenes/dials-pin.js: chapter 11's compare: pin the setup as A, change the dials (B), and every card shows A beside B.
// A travels in the URL as `a`: its differences from B, `field.value` pairs joined by spaces (a '+' in the address),
// e.g. `?batch=64&a=batch.16+precision.fp8`; `a=` alone is A pinned equal to B. The code is bounded (PIN_MAX_CHARS,
// one pair per dials field at most) and checked here for its shape; A's values are then checked by GET /api/dials
// itself, whose 422 names the field and its bound, said beside the pin button, and the link's A is dropped.

import { toQuery } from '../lib/api.js';

export const PIN_PARAM = 'a';
export const PIN_MAX_CHARS = 1500;
const VALUE = /^[A-Za-z0-9._-]{1,40}$/;

const str = (v) => (typeof v === 'boolean' ? (v ? '1' : '0') : String(v));

/** The URL code of A against B: the fields where A differs, in B's field order ('' when A equals B). */
export function encodePin(a, b) {
  return Object.keys(b).filter((k) => k in a && str(a[k]) !== str(b[k])).map((k) => `${k}.${str(a[k])}`).join(' ');
}

/** A's params from a URL code and B's params (B's fields give the kinds); throws an Error in words on a bad code. */
export function decodePin(code, b) {
  const text = String(code).trim();
  if (text.length > PIN_MAX_CHARS) throw new Error(`a: the pinned setup's code is ${text.length} characters; at most ${PIN_MAX_CHARS}.`);
  const a = { ...b };
  const seen = new Set();
  for (const pair of text ? text.split(/\s+/) : []) {
    const dot = pair.indexOf('.');
    const k = dot > 0 ? pair.slice(0, dot) : pair;
    const v = dot > 0 ? pair.slice(dot + 1) : '';
    if (!Object.prototype.hasOwnProperty.call(b, k)) throw new Error(`a: “${k.slice(0, 40)}” is not one of the dials' fields.`);
    if (seen.has(k)) throw new Error(`a: ${k} is given twice.`);
    seen.add(k);
    if (!VALUE.test(v)) throw new Error(`a: ${k} needs a value after a dot (letters, digits, . _ -; at most 40), as in ${k}.${str(b[k])}.`);
    if (typeof b[k] === 'number') {
      const n = Number(v);
      if (!Number.isFinite(n)) throw new Error(`a: ${k} must be a number, not “${v}”.`);
      a[k] = n;
    } else if (typeof b[k] === 'boolean') {
      if (v !== '0' && v !== '1') throw new Error(`a: ${k} must be 0 or 1, not “${v}”.`);
      a[k] = v === '1';
    } else a[k] = v;
  }
  return a;
}

/**
 * The pin: A's params and A's GET /api/dials answer. onChange() runs when A is pinned, unpinned, or its answer arrives.
 * From a link: fromURL(search, b) decodes `a` (a refusal is kept in `error` and A is dropped).
 */
export function createPin(ctx, onChange) {
  const pin = { params: null, data: null, error: '', seq: 0 };
  async function fetchA() {
    const mine = ++pin.seq;
    try {
      const d = await ctx.fetchJSON(`/api/dials?${toQuery(pin.params)}`);
      if (mine !== pin.seq) return;
      pin.data = d;
    } catch (err) {
      if (mine !== pin.seq) return;
      pin.error = `Pin A was not drawn: ${err.message}`;
      pin.params = null;
      pin.data = null;
    }
    onChange();
  }
  return {
    get params() { return pin.params; },
    get data() { return pin.data; },
    get error() { return pin.error; },
    set(a) {
      pin.params = { ...a };
      pin.data = null;
      pin.error = '';
      onChange();
      fetchA();
    },
    clear() {
      pin.seq++;
      pin.params = null;
      pin.data = null;
      pin.error = '';
      onChange();
    },
    fromURL(search, b) {
      const q = new URLSearchParams(search);
      if (!q.has(PIN_PARAM)) return false;
      try {
        this.set(decodePin(q.get(PIN_PARAM), b));
        return true;
      } catch (err) {
        pin.error = `The link's pin A was not used: ${err.message}`;
        return false;
      }
    },
    /** The URL's part for A against B's params (an empty object when nothing is pinned). */
    query(b) { return pin.params ? { [PIN_PARAM]: encodePin(pin.params, b) } : {}; },
  };
}
