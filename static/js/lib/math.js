// math.js: "show the math": renders a Derivation {value, unit, formula, inputs, assumptions, sources}.

import { h } from './svg.js';
import { num } from './format.js';

function fmtValue(v) {
  return typeof v === 'number' ? num(v, 4) : String(v);
}

/** Text that may wrap only where a reader would break it: after _ . / ? & = in identifiers and URLs
 * (a <wbr> there), never inside a number (numbers are their own nowrap cells). */
function breakable(parent, text) {
  const parts = String(text).split(/(?<=[_/?&=])|(?<=\.)(?=[A-Za-z])/);
  parts.forEach((p, i) => {
    parent.appendChild(document.createTextNode(p));
    if (i < parts.length - 1) parent.appendChild(document.createElement('wbr'));
  });
  return parent;
}

/** A <details> element that opens to the formula, its inputs with units, assumptions and sources. */
export function mathDetails(d, summary = 'How is this computed?') {
  const box = h('details', { class: 'math' });
  h('summary', { text: summary }, box);
  const f = h('p', {}, box);
  breakable(h('code', {}, f), d.formula);
  h('span', { text: ` = ${fmtValue(d.value)} ${d.unit || ''}` }, f);
  if (d.inputs && d.inputs.length) {
    const table = h('table', {}, box);
    for (const i of d.inputs) {
      const tr = h('tr', {}, table);
      breakable(h('td', { class: 'name' }, tr), i.name);
      h('td', { class: 'num', text: `${fmtValue(i.value)} ${i.unit || ''}` }, tr);
      breakable(h('td', { class: 'source' }, tr), i.source || '');
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
  for (const it of items) breakable(h('li', {}, ul), it);
}
