// api.js: fetch JSON from our endpoints; a Fetcher aborts the previous request so the latest wins.

export class ApiError extends Error {
  constructor(status, detail) {
    super(formatDetail(status, detail));
    this.status = status;
    this.detail = detail;
  }
}

/** A readable message from FastAPI's 422 detail list (field and bound) or any error body. */
export function formatDetail(status, detail) {
  if (Array.isArray(detail)) {
    return detail.map((d) => `${(d.loc || []).filter((x) => x !== 'query' && x !== 'body').join('.') || 'input'}: ${d.msg}`).join('; ');
  }
  return typeof detail === 'string' ? detail : `request failed (${status})`;
}

/** GET or POST JSON; throws ApiError for non-2xx, DOMException AbortError when aborted. */
export async function fetchJSON(url, { signal, body } = {}) {
  const init = body === undefined ? { signal } : {
    method: 'POST', signal, body: JSON.stringify(body), headers: { 'content-type': 'application/json' },
  };
  const res = await fetch(url, init);
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw new ApiError(res.status, data.detail);
  return data;
}

/** Latest-wins fetcher: each call aborts the one before; stale answers never arrive. */
export function createFetcher() {
  let controller = null;
  return async function latest(url, opts = {}) {
    if (controller) controller.abort();
    controller = new AbortController();
    const mine = controller;
    try {
      return await fetchJSON(url, { ...opts, signal: mine.signal });
    } finally {
      if (controller === mine) controller = null;
    }
  };
}

export function isAbort(err) {
  return err && err.name === 'AbortError';
}

/** Query string from a params object (booleans as 1/0), in the object's key order. */
export function toQuery(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null) continue;
    q.set(k, typeof v === 'boolean' ? (v ? '1' : '0') : String(v));
  }
  return q.toString();
}
