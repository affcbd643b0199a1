// docs.js: a readable, offline rendering of /openapi.json (no CDN): endpoints, parameters, bounds.

import { h, clear } from './lib/svg.js';

function bounds(s) {
  const parts = [];
  if (s.minimum !== undefined) parts.push(`≥ ${s.minimum}`);
  if (s.exclusiveMinimum !== undefined) parts.push(`> ${s.exclusiveMinimum}`);
  if (s.maximum !== undefined) parts.push(`≤ ${s.maximum}`);
  if (s.maxLength !== undefined) parts.push(`≤ ${s.maxLength} chars`);
  if (s.enum) parts.push(`one of ${s.enum.join(', ')}`);
  return parts.join(', ');
}

function resolve(spec, s) {
  if (s && s.$ref) return spec.components.schemas[s.$ref.split('/').pop()];
  if (s && s.anyOf) return s.anyOf.find((x) => x.type !== 'null') || s;
  return s || {};
}

async function main() {
  const box = document.getElementById('api-docs');
  const spec = await (await fetch('/openapi.json')).json();
  clear(box);
  for (const [path, ops] of Object.entries(spec.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      const sec = h('section', { class: 'fact' }, box);
      h('h2', { text: `${method.toUpperCase()} ${path}` }, sec);
      if (op.description || op.summary) h('p', { text: op.description || op.summary }, sec);
      const ps = op.parameters || [];
      if (!ps.length) continue;
      const table = h('table', {}, h('details', { class: 'math', open: true }, sec));
      for (const p of ps) {
        const s = resolve(spec, p.schema);
        const tr = h('tr', {}, table);
        h('td', {}, tr).appendChild(h('code', { text: p.name }));
        h('td', { text: `${s.type || ''} ${bounds(s)}`.trim() }, tr);
        h('td', { text: p.description || s.description || '' }, tr);
      }
    }
  }
}

main();
