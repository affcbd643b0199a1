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
    return detail.map((d) => `${(d.loc || []).filter((x) => x !== 'query' && x !== 'body').join('.') || 'input'}: ${String(d.msg).replace(/^(Value|Assertion) error, /i, '')}`).join('; ');
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

/**
 * Latest-wins fetcher with at most one request in flight. A call made while another is in flight waits its turn;
 * a newer call replaces it before it is sent (the replaced call rejects with an AbortError). When the in-flight
 * answer arrives and a newer call is waiting, that answer is stale: its caller gets an AbortError and the newer
 * call goes out. So a hand dragging a slider sends one request at a time, never a queue of stale ones that the
 * server would still have to compute, and only the latest setting is drawn.
 */
export function createFetcher() {
  let inFlight = false;
  let waiting = null; // { url, opts, resolve, reject }: the newest call not yet sent
  const abortError = () => new DOMException('superseded by a newer request', 'AbortError');

  async function send(url, opts) {
    inFlight = true;
    try {
      const data = await fetchJSON(url, opts);
      if (waiting) throw abortError();
      return data;
    } finally {
      inFlight = false;
      if (waiting) {
        const next = waiting;
        waiting = null;
        send(next.url, next.opts).then(next.resolve, next.reject);
      }
    }
  }

  return function latest(url, opts = {}) {
    if (!inFlight) return send(url, opts);
    if (waiting) waiting.reject(abortError());
    return new Promise((resolve, reject) => { waiting = { url, opts, resolve, reject }; });
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
