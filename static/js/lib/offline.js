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

/** Same signature as api.fetchJSON; rejects with a readable 'needs the live server' ApiError on a miss. */
export async function offlineFetchJSON(url, { body } = {}) {
  const u = new URL(url, 'http://offline.invalid/');
  const params = body !== undefined ? body : Object.fromEntries(u.searchParams);
  const data = lookup(u.pathname, params);
  if (data === undefined) {
    throw new ApiError(503, 'This view was not precomputed in the offline copy; it needs the live server ' +
      '(try a preset or the defaults).');
  }
  return structuredClone(data);
}

/** Latest-wins wrapper, matching api.createFetcher (offline answers are synchronous, so nothing to abort). */
export function createOfflineFetcher() {
  return (url, opts = {}) => offlineFetchJSON(url, opts);
}
