// offline.js: in an exported bundle, answer API calls from precomputed responses instead of the network.

import { ApiError } from './api.js';

const DATA_KEY = 'insideLLMOffline'; // the one global, written only by the bundle's data/<slug>.js files

/** The precomputed data registered by data/<slug>.js classic scripts: {slug: {state, responses}}. */
export function offlineData() {
  return globalThis[DATA_KEY] || {};
}

/** Load another scene's data file (classic <script>, which works from file:// where fetch does not). */
export function loadSceneData(root, slug) {
  if (offlineData()[slug]) return Promise.resolve(offlineData()[slug]);
  return new Promise((resolve, reject) => {
    const s = document.createElement('script');
    s.src = `${root}/data/${slug}.js`;
    s.onload = () => (offlineData()[slug] ? resolve(offlineData()[slug]) : reject(new Error(`no data for ${slug}`)));
    s.onerror = () => reject(new Error(`${slug} is not in this offline bundle`));
    document.head.appendChild(s);
  });
}

const norm = (v) => (typeof v === 'boolean' ? (v ? '1' : '0') : String(v));

function sameParams(a, b) {
  const ka = Object.keys(a), kb = Object.keys(b);
  return ka.length === kb.length && ka.every((k) => k in b && norm(a[k]) === norm(b[k]));
}

/** Find the precomputed response for a path and params, or undefined. */
function lookup(path, params) {
  for (const scene of Object.values(offlineData())) {
    for (const r of scene.responses || []) if (r.path === path && sameParams(r.params, params)) return r.data;
  }
  return undefined;
}

// ---- values the page can compute itself: a precomputed answer, re-derived for a closed-form parameter ----

/** Speculative decoding, analytically (Leviathan et al., Theorem 3.8): tokens per target pass and speed-up. */
function analytic(alpha, gamma, c) {
  const E = alpha >= 1 ? gamma + 1 : (1 - alpha ** (gamma + 1)) / (1 - alpha);
  return { E, speedup: E / (gamma * c + 1) };
}

function setInput(derivation, name, value) {
  for (const i of (derivation && derivation.inputs) || []) if (i.name === name) i.value = value;
}

const DERIVED = {
  // α and c enter only the closed formulas; the demo run (γ, prompt, length) is reused as it is
  '/api/speculative': { keys: ['alpha', 'cost_ratio'], derive(d, p) {
    const alpha = Number(p.alpha), c = Number(p.cost_ratio), g = d.gamma;
    const a = analytic(alpha, g, c);
    Object.assign(d, { alpha, cost_ratio: c, expected_tokens_per_pass: a.E, speedup: a.speedup });
    d.curve = d.curve.map((pt) => {
      const x = analytic(alpha, pt.gamma, c);
      return { ...pt, expected_tokens_per_pass: x.E, speedup: x.speedup };
    });
    let best = 1;
    for (let k = 1; k <= 64; k++) if (analytic(alpha, k, c).speedup > analytic(alpha, best, c).speedup) best = k;
    d.optimal_gamma = best;
    d.optimal_speedup = analytic(alpha, best, c).speedup;
    const m = d.math || {};
    if (m.expected_tokens_per_pass) { m.expected_tokens_per_pass.value = a.E; setInput(m.expected_tokens_per_pass, 'alpha', alpha); }
    if (m.speedup) {
      m.speedup.value = a.speedup;
      setInput(m.speedup, 'E', a.E); setInput(m.speedup, 'alpha', alpha); setInput(m.speedup, 'c', c);
    }
    if (m.optimal_gamma) { m.optimal_gamma.value = best; setInput(m.optimal_gamma, 'alpha', alpha); setInput(m.optimal_gamma, 'c', c); }
    return d;
  } },
  // the price multiplies: dollars per million tokens = GPUs × price / 3600 / tokens per second × 1e6
  '/api/dials': { keys: ['price_per_gpu_hour'], derive(d, p) {
    const price = Number(p.price_per_gpu_hour), was = d.params.price_per_gpu_hour;
    if (!(was > 0)) return undefined;
    d.params.price_per_gpu_hour = price;
    d.cost_per_million_tokens_usd *= price / was;
    const m = d.math && d.math.cost_per_million_tokens_usd;
    if (m) {
      m.value = d.cost_per_million_tokens_usd;
      setInput(m, 'price_per_gpu_hour', price);
      m.assumptions = (m.assumptions || []).map((s) => s.replace(/^\$[\d.]+ per GPU-hour/, `$${price} per GPU-hour`));
    }
    return d;
  } },
};

/** A precomputed response for the same params except closed-form ones, re-derived; or undefined. */
function derived(path, params) {
  const rule = DERIVED[path];
  if (!rule) return undefined;
  const rest = (p) => Object.fromEntries(Object.entries(p).filter(([k]) => !rule.keys.includes(k)));
  for (const scene of Object.values(offlineData())) {
    for (const r of scene.responses || []) {
      if (r.path === path && sameParams(rest(r.params), rest(params))) return rule.derive(structuredClone(r.data), params);
    }
  }
  return undefined;
}

/** Same signature as api.fetchJSON; rejects with a readable 'needs the live server' ApiError on a miss. */
export async function offlineFetchJSON(url, { body } = {}) {
  const u = new URL(url, 'http://offline.invalid/');
  const params = body !== undefined ? body : Object.fromEntries(u.searchParams);
  const found = lookup(u.pathname, params);
  const data = found !== undefined ? structuredClone(found) : derived(u.pathname, params);
  if (data === undefined) {
    throw new ApiError(503, 'This view was not precomputed in the offline copy; it needs the live server ' +
      '(try a preset or the defaults).');
  }
  return data;
}

/** Latest-wins wrapper, matching api.createFetcher (offline answers are synchronous, so nothing to abort). */
export function createOfflineFetcher() {
  return (url, opts = {}) => offlineFetchJSON(url, opts);
}
