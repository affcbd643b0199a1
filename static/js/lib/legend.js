// legend.js: a scene's colour key: one swatch and a few words per item, in a `.legend` box.

import { h, clear } from './svg.js';

/**
 * Fill `box` with items, each [swatch class, text] or [swatch class, text, swatch background]; falsy items are
 * skipped, so a conditional one reads `cond && [...]`. Returns the box.
 */
export function swatches(box, items) {
  clear(box);
  for (const item of items) {
    if (!item) continue;
    const [cls, text, background] = item;
    const s = h('span', {}, box);
    const i = h('i', { class: cls || undefined }, s);
    if (background) i.style.background = background;
    s.append(text);
  }
  return box;
}
