// options.js: presentation options (controls, autoplay, theme, step, scale, present) and params read from a URL.

const SIZES = { s: 0.8, m: 1, l: 1.3, xl: 1.7 };
const CHOICES = { controls: ['0', '1'], autoplay: ['0', '1'], theme: ['light', 'dark', 'auto'], present: ['0', '1'] };
export const OPTION_KEYS = ['controls', 'autoplay', 'theme', 'step', 'scale', 'present'];

/** Validated options from a query string (same rules as pages.embed_options; invalid ones dropped). */
export function readOptions(search) {
  const q = new URLSearchParams(search);
  const out = {};
  for (const [k, ok] of Object.entries(CHOICES)) if (ok.includes(q.get(k))) out[k] = q.get(k);
  const step = q.get('step');
  if (step === 'last' || (/^\d+$/.test(step || '') && Number(step) <= 10000)) out.step = step === 'last' ? step : String(Number(step));
  const scale = q.has('scale') ? Number(q.get('scale')) : SIZES[q.get('size')];
  if (Number.isFinite(scale) && scale >= 0.25 && scale <= 4) out.scale = String(scale);
  return out;
}

/** A URL value for one control, or its default when missing or invalid (mirrors pages._coerce). */
export function coerce(c, raw) {
  if (raw === null || raw === undefined) return c.default;
  if (c.kind === 'toggle') return ['1', 'true', 'on', 'yes'].includes(raw);
  if (c.kind === 'range' || c.kind === 'number') {
    const v = Number(raw);
    if (raw.trim() === '' || !Number.isFinite(v)) return c.default;
    if ((c.min !== null && c.min !== undefined && v < c.min) || (c.max !== null && c.max !== undefined && v > c.max)) return c.default;
    return v;
  }
  if (c.kind === 'select') {
    const opt = c.options.find(([v]) => String(v) === raw);
    return opt ? opt[0] : c.default;
  }
  return raw.slice(0, 100000);
}

/** Every control's value from a query string (the offline bundle has no server to do this); a question
 * control takes the question unless the URL names it (mirrors pages.page_params). */
export function readParams(controls, search, question = null) {
  const q = new URLSearchParams(search);
  return Object.fromEntries(controls.map((c) => [c.name,
    coerce(c, c.question && question !== null && !q.has(c.name) ? question : q.get(c.name))]));
}

/** The step a URL asks for: a number, 'last', or null when the animation should run freely. */
export function requestedStep(options) {
  if (options.step === undefined) return null;
  return options.step === 'last' ? 'last' : Number(options.step);
}
