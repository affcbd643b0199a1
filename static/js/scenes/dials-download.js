// scenes/dials-download.js: chapter 11's "take the numbers away": this setup as CSV or JSON (GET /api/dials?format=csv),
// and the pinned setup A's beside it while one is pinned.

import { h } from '../lib/svg.js';
import { toQuery } from '../lib/api.js';
import { ensureToolStyles } from './dials-tools-css.js';

export function createDownload(parent) {
  ensureToolStyles();
  const box = h('p', { class: 'dials-download', id: 'dials-download' }, parent);
  h('span', { text: 'Take these numbers away: ' }, box);
  const csv = h('a', { class: 'btn', download: 'dials.csv', text: 'Download CSV', id: 'dials-csv' }, box);
  const json = h('a', { class: 'linkish', download: 'dials.json', text: 'JSON', id: 'dials-json' }, box);
  const csvA = h('a', { class: 'linkish', download: 'dials-a.csv', text: "A's CSV", id: 'dials-csv-a', hidden: true }, box);
  const jsonA = h('a', { class: 'linkish', download: 'dials-a.json', text: "A's JSON", id: 'dials-json-a', hidden: true }, box);
  h('span', { class: 'card-note', text: ' · or from a terminal: inside-llm estimate --csv' }, box);
  const offline = typeof location !== 'undefined' && location.protocol === 'file:';
  if (offline) box.hidden = true; // the offline bundle has no API to ask
  return {
    /** a: the pinned setup A's params (null: none pinned). */
    update(params, a = null) {
      const q = toQuery(params);
      csv.href = `/api/dials?${q}&format=csv`;
      json.href = `/api/dials?${q}`;
      csvA.hidden = jsonA.hidden = !a;
      if (a) {
        csvA.href = `/api/dials?${toQuery(a)}&format=csv`;
        jsonA.href = `/api/dials?${toQuery(a)}`;
      }
    },
  };
}
