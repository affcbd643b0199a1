// math.js: "show the math": renders a Derivation {value, unit, formula, inputs, assumptions, sources}.

import { h } from './svg.js';
import { num } from './format.js';

function fmtValue(v) {
  return typeof v === 'number' ? num(v, 4) : String(v);
}

/** A <details> element that opens to the formula, its inputs with units, assumptions and sources. */
export function mathDetails(d, summary = 'How is this computed?') {
  const box = h('details', { class: 'math' });
  h('summary', { text: summary }, box);
  const f = h('p', {}, box);
  h('code', { text: d.formula }, f);
  h('span', { text: ` = ${fmtValue(d.value)} ${d.unit || ''}` }, f);
  if (d.inputs && d.inputs.length) {
    const table = h('table', {}, box);
    for (const i of d.inputs) {
      const tr = h('tr', {}, table);
      h('td', { text: i.name }, tr);
      h('td', { text: `${fmtValue(i.value)} ${i.unit || ''}` }, tr);
      h('td', { text: i.source || '' }, tr);
    }
  }
  listOf(box, 'Assumptions', d.assumptions);
  listOf(box, 'Sources', d.sources);
  return box;
}

function listOf(parent, title, items) {
  if (!items || !items.length) return;
  h('strong', { text: title }, parent);
  const ul = h('ul', {}, parent);
  for (const it of items) h('li', { text: it }, ul);
}
