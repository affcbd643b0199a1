// svg.js: tiny DOM/SVG builders; every scene draws in viewBox units.

const SVG_NS = 'http://www.w3.org/2000/svg';

/** Create an SVG element with attributes, optionally appended to parent. */
export function svg(tag, attrs = {}, parent = null) {
  const node = document.createElementNS(SVG_NS, tag);
  setAttrs(node, attrs);
  if (parent) parent.appendChild(node);
  return node;
}

/** Create an HTML element with attributes (text via `text`, class via `class`). */
export function h(tag, attrs = {}, parent = null) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'text') node.textContent = v;
    else if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? '' : v);
  }
  if (parent) parent.appendChild(node);
  return node;
}

export function setAttrs(node, attrs) {
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'text') node.textContent = v;
    else if (v === undefined || v === null) node.removeAttribute(k);
    else node.setAttribute(k, v);
  }
  return node;
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

/** An <svg> root with a viewBox, scaling to its container's width. */
export function root(parent, width, height, label) {
  return svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': label,
    preserveAspectRatio: 'xMidYMid meet', width: '100%' }, parent);
}

/** Read a CSS custom property (e.g. '--c-weights') from the document. */
export function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}
