// export.js: the stage as it is on screen -> a standalone SVG (vector, or HTML in a foreignObject) or a PNG.

const SVG_NS = 'http://www.w3.org/2000/svg';
const SKIP_PROPS = new RegExp('^(--|transition|animation|cursor|pointer-events|will-change|user-select|-webkit-user|caret|' +
  'outline|-webkit-locale|perspective-origin|transform-origin|' + // logical duplicates of physical properties:
  'border-(block|inline)|(padding|margin)-(block|inline)|inset-|(min-|max-)?(block|inline)-size|border-(start|end)-(start|end)-radius)');
const CURRENT_COLOR = /^(column-rule-color|row-rule-color|text-emphasis-color|text-decoration-color|-webkit-text-stroke-color|-webkit-text-fill-color)$/;
const INHERITED = new Set(['color', 'font-family', 'font-size', 'font-style', 'font-variant', 'font-weight',
  'font-stretch', 'font-feature-settings', 'font-variant-numeric', 'font-kerning', 'line-height', 'letter-spacing',
  'word-spacing', 'text-align', 'text-indent', 'text-transform', 'text-shadow', 'white-space', 'white-space-collapse',
  'text-wrap', 'text-wrap-mode', 'word-break', 'overflow-wrap', 'visibility', 'direction', 'fill', 'fill-opacity',
  'fill-rule', 'stroke', 'stroke-width', 'stroke-opacity', 'stroke-dasharray', 'stroke-linecap', 'stroke-linejoin',
  'text-anchor', 'dominant-baseline', 'paint-order', 'list-style-type', 'list-style-position', 'border-collapse',
  'border-spacing', 'tab-size', 'color-scheme', 'hyphens', 'writing-mode', '-webkit-text-fill-color']);
const SVG_GEOMETRY = new Set(['d', 'x', 'y', 'cx', 'cy', 'r', 'rx', 'ry', 'width', 'height', 'transform',
  'transform-origin']); // attributes carry these; duplicating them as CSS would only confuse other editors
const CAPTION_H = 46; // px at 1x: two lines

/** UA-only default computed styles per tag, read in a blank same-origin iframe (no author CSS). */
function defaultsFor() {
  const frame = document.createElement('iframe');
  frame.setAttribute('aria-hidden', 'true');
  frame.style.cssText = 'position:absolute;width:0;height:0;border:0;visibility:hidden';
  document.body.appendChild(frame);
  const cache = new Map();
  const get = (el) => {
    const key = `${el.namespaceURI}|${el.localName}`;
    if (!cache.has(key)) {
      const doc = frame.contentDocument;
      const probe = doc.createElementNS(el.namespaceURI, el.localName);
      (el.namespaceURI === SVG_NS ? doc.body.appendChild(doc.createElementNS(SVG_NS, 'svg')) : doc.body).appendChild(probe);
      const cs = getComputedStyle(probe);
      const snap = {};
      for (let i = 0; i < cs.length; i++) snap[cs[i]] = cs.getPropertyValue(cs[i]);
      cache.set(key, snap);
    }
    return cache.get(key);
  };
  return { get, done: () => frame.remove() };
}

/** Copy the computed style of src onto dst: what differs from the UA default or from the parent. */
function inlineStyle(src, dst, parentCS, defaults, all) {
  const cs = getComputedStyle(src);
  const base = defaults.get(src);
  const decl = [];
  const svgChild = src.namespaceURI === SVG_NS && src.localName !== 'svg';
  for (let i = 0; i < cs.length; i++) {
    const p = cs[i];
    if (SKIP_PROPS.test(p) || (svgChild && SVG_GEOMETRY.has(p))) continue;
    const v = cs.getPropertyValue(p);
    if (CURRENT_COLOR.test(p) && v === cs.color) continue;
    const inherited = INHERITED.has(p);
    if (v !== base[p] || (inherited && (all || (parentCS && v !== parentCS.getPropertyValue(p))))) decl.push(`${p}:${v}`);
  }
  dst.setAttribute('style', decl.join(';'));
  return cs;
}

/** A deep clone of node with computed styles inlined; hidden elements and scripts are dropped. */
function cloneStyled(node, parentCS, defaults, all = false) {
  if (node.nodeType === Node.TEXT_NODE) return document.createTextNode(node.textContent);
  if (node.nodeType !== Node.ELEMENT_NODE || node.hidden || /^(script|style|template)$/i.test(node.localName)) return null;
  if (node.localName === 'canvas') {
    const img = document.createElement('img');
    img.src = node.toDataURL('image/png');
    inlineStyle(node, img, parentCS, defaults, all);
    return img;
  }
  const copy = node.cloneNode(false);
  for (const attr of ['id', 'tabindex', 'aria-live', 'aria-busy', 'class']) copy.removeAttribute(attr);
  const cs = inlineStyle(node, copy, parentCS, defaults, all);
  if (cs.display === 'none') return null;
  if (node.localName === 'textarea') copy.textContent = node.value;
  else if (node.localName === 'input') copy.setAttribute('value', node.value);
  for (const child of node.childNodes) {
    const c = cloneStyled(child, cs, defaults);
    if (c) copy.appendChild(c);
  }
  return copy;
}

/** True when everything visible is SVG: then the export stays pure vector (opens in any editor). */
function isVectorStage(stage) {
  if (!stage.querySelector('svg')) return false;
  const walk = (el) => {
    if (el.localName === 'svg') return true;
    const cs = getComputedStyle(el);
    if (el.hidden || cs.display === 'none' || cs.visibility === 'hidden') return true;
    if (el !== stage) {
      const boxed = cs.backgroundColor !== 'rgba(0, 0, 0, 0)' || cs.backgroundImage !== 'none' ||
        ['Top', 'Right', 'Bottom', 'Left'].some((s) => parseFloat(cs[`border${s}Width`]) > 0);
      if (boxed) return false;
    }
    const ownText = [...el.childNodes].some((n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim());
    return !ownText && [...el.children].every(walk);
  };
  return walk(stage);
}

function esc(s) {
  return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

function fitText(text, width, px) {
  const max = Math.max(20, Math.floor(width / (px * 0.56)));
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** Two caption lines under the stage: the scene's title, then its parameters. */
function captionSVG(caption, y, width, cs) {
  const font = `font-family="${esc(cs.fontFamily)}"`;
  return `<g class="caption"><rect x="0" y="${y}" width="${width}" height="${CAPTION_H}" fill="${esc(cs.backgroundColor)}"/>` +
    `<line x1="0" x2="${width}" y1="${y + 0.5}" y2="${y + 0.5}" stroke="${esc(cs.borderTopColor)}"/>` +
    `<text x="12" y="${y + 19}" ${font} font-size="13" font-weight="700" fill="${esc(cs.color)}">${esc(fitText(caption.title, width, 13))}</text>` +
    `<text x="12" y="${y + 37}" ${font} font-size="12" fill="${esc(cs.color)}" fill-opacity="0.75">${esc(fitText(caption.detail, width, 12))}</text></g>`;
}

function vectorBody(stage, defaults) {
  const box = stage.getBoundingClientRect();
  const ser = new XMLSerializer();
  return [...stage.querySelectorAll('svg')].filter((s) => !s.parentElement.closest('svg')).map((s) => {
    const r = s.getBoundingClientRect();
    const copy = cloneStyled(s, getComputedStyle(s.parentElement), defaults, true);
    if (!copy) return '';
    Object.entries({ x: r.left - box.left, y: r.top - box.top, width: r.width, height: r.height })
      .forEach(([k, v]) => copy.setAttribute(k, v.toFixed(2)));
    return ser.serializeToString(copy);
  }).join('');
}

function htmlBody(stage, width, height, defaults) {
  const copy = cloneStyled(stage, null, defaults, true);
  copy.style.margin = '0';
  copy.style.width = `${width}px`;
  copy.style.height = `${height}px`;
  copy.style.boxShadow = 'none';
  copy.setAttribute('xmlns', 'http://www.w3.org/1999/xhtml');
  return `<foreignObject x="0" y="0" width="${width}" height="${height}">${new XMLSerializer().serializeToString(copy)}</foreignObject>`;
}

/**
 * The stage as a standalone SVG document string, with a caption band below.
 * caption: {title, detail}. Returns {svg, width, height, vector}.
 */
export function stageToSVG(stage, caption) {
  const width = Math.ceil(stage.getBoundingClientRect().width);
  const height = Math.ceil(stage.getBoundingClientRect().height);
  const cs = getComputedStyle(stage);
  const defaults = defaultsFor();
  try {
    const vector = isVectorStage(stage);
    const body = vector ? vectorBody(stage, defaults) : htmlBody(stage, width, height, defaults);
    const total = height + CAPTION_H;
    const svg = `<svg xmlns="${SVG_NS}" width="${width}" height="${total}" viewBox="0 0 ${width} ${total}">` +
      `<title>${esc(`${caption.title} — ${caption.detail}`)}</title><rect width="${width}" height="${height}" fill="${esc(cs.backgroundColor)}"/>` +
      `${body}${captionSVG(caption, height, width, cs)}</svg>`;
    return { svg: `<?xml version="1.0" encoding="UTF-8"?>\n${svg}`, width, height: total, vector };
  } finally {
    defaults.done();
  }
}

/** Rasterise an SVG string at `scale` × its size; resolves to a PNG Blob. */
export async function svgToPNG(svg, width, height, scale) {
  const img = new Image();
  img.src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(svg)}`;
  await img.decode();
  const canvas = document.createElement('canvas');
  canvas.width = Math.round(width * scale);
  canvas.height = Math.round(height * scale);
  const g = canvas.getContext('2d');
  g.scale(scale, scale);
  g.drawImage(img, 0, 0, width, height);
  return new Promise((resolve, reject) => canvas.toBlob((b) => (b ? resolve(b) : reject(new Error('PNG encoding failed'))), 'image/png'));
}

/** Offer a Blob as a file download. */
export function download(blob, filename) {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = filename;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

/** PNG scale: at least 2×, more on dense screens, at most 8192 px wide. */
export function pngScale(width) {
  return Math.max(1, Math.min(Math.max(2, 2 * (window.devicePixelRatio || 1)), 8192 / Math.max(1, width)));
}
