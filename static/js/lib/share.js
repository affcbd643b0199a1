// share.js: the stage toolbar: Share (exact-state link), Embed (iframe snippet), Download SVG/PNG, Present.

import { h, clear } from './svg.js';

const FRAME_SIZES = [['960x540', '960 × 540 (16:9)'], ['1280x720', '1280 × 720 (16:9)'],
  ['1920x1080', '1920 × 1080 (16:9)'], ['1024x768', '1024 × 768 (4:3)'], ['390x700', '390 × 700 (phone)'],
  ['custom', 'Custom…']];

/** Copy text to the clipboard; falls back to selecting `field` for a manual copy. Resolves to success. */
async function copyText(text, field) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    if (field) { field.focus(); field.select(); }
    try { return document.execCommand('copy'); } catch { return false; }
  }
}

let fieldCount = 0;
function field(parent, label, el) {
  const wrap = h('div', { class: 'tool-field' }, parent);
  el.id = `tool-field-${++fieldCount}`;
  h('label', { for: el.id, text: label }, wrap);
  wrap.appendChild(el);
  return el;
}

function select(options, value) {
  const s = h('select');
  for (const [v, label] of options) h('option', { value: v, text: label, selected: v === value }, s);
  return s;
}

function snippet(url, w, hgt, title) {
  return `<iframe src="${url.replace(/&/g, '&amp;').replace(/"/g, '&quot;')}" width="${w}" height="${hgt}" ` +
    `title="${title.replace(/"/g, '&quot;')}" style="border:0" loading="lazy" allowfullscreen></iframe>`;
}

/** The Embed panel's form; calls back with the snippet whenever a choice changes. */
function embedForm(panel, api) {
  const grid = h('div', { class: 'tool-grid' }, panel);
  const size = field(grid, 'Frame size', select(FRAME_SIZES, '1280x720'));
  const w = field(grid, 'Width (px)', h('input', { type: 'number', min: 200, max: 7680, value: 1280 }));
  const hh = field(grid, 'Height (px)', h('input', { type: 'number', min: 150, max: 4320, value: 720 }));
  const text = field(grid, 'Text size', select([['', 'Fit the frame'], ['m', 'Medium'], ['l', 'Large'], ['xl', 'Back of the room']], ''));
  const theme = field(grid, 'Theme', select([['', 'Viewer’s setting'], ['light', 'Light'], ['dark', 'Dark']], ''));
  const ctl = field(grid, 'Show controls', h('input', { type: 'checkbox' }));
  const play = field(grid, 'Animate on its own', h('input', { type: 'checkbox', checked: true }));
  const freeze = api.steps().count ? field(grid, 'Freeze at the current step', h('input', { type: 'checkbox' })) : null;
  const out = h('textarea', { class: 'snippet', rows: 3, readonly: true, 'aria-label': 'Iframe snippet', spellcheck: 'false' }, panel);
  const compute = () => {
    if (size.value !== 'custom') [w.value, hh.value] = size.value.split('x');
    const opts = { controls: ctl.checked ? '1' : '0', autoplay: play.checked ? '1' : '0' };
    if (text.value) opts.size = text.value;
    if (theme.value) opts.theme = theme.value;
    if (freeze && freeze.checked) opts.step = String(api.steps().index ?? 0);
    out.value = snippet(api.embedURL(opts), w.value, hh.value, api.title);
  };
  grid.addEventListener('input', (ev) => {
    if (ev.target === w || ev.target === hh) size.value = 'custom';
    compute();
  });
  grid.addEventListener('change', compute);
  compute();
  return out;
}

/** Wire the toolbar buttons in `bar`; `panel` hosts the Share/Embed popover. */
export function bindToolbar(bar, panel, api) {
  if (!bar) return;
  let opener = null;
  const close = () => {
    panel.hidden = true;
    clear(panel);
    bar.querySelectorAll('[aria-expanded]').forEach((b) => b.setAttribute('aria-expanded', 'false'));
    if (opener) opener.focus();
    opener = null;
  };
  const open = (btn, title) => {
    clear(panel);
    panel.hidden = false;
    panel.setAttribute('role', 'region');
    panel.setAttribute('aria-label', title);
    opener = btn;
    if (btn.hasAttribute('aria-expanded')) btn.setAttribute('aria-expanded', 'true');
    const head = h('div', { class: 'tool-head' }, panel);
    h('strong', { text: title }, head);
    h('button', { type: 'button', class: 'btn', 'aria-label': 'Close', text: '✕' }, head).addEventListener('click', close);
    return panel;
  };
  panel.addEventListener('keydown', (ev) => { if (ev.key === 'Escape') { ev.stopPropagation(); close(); } });
  const actions = {
    share: (btn) => share(open(btn, 'Link to exactly this view'), api),
    embed: (btn) => embed(open(btn, 'Embed in slides'), api),
    svg: () => saveImage(api, 'svg'),
    png: () => saveImage(api, 'png'),
    present: () => api.present(),
  };
  bar.addEventListener('click', (ev) => {
    const btn = ev.target.closest('[data-tool]');
    if (btn && actions[btn.dataset.tool]) actions[btn.dataset.tool](btn);
  });
}

async function share(panel, api) {
  const url = api.shareURL();
  const input = h('input', { type: 'text', readonly: true, value: url, 'aria-label': 'Link to this view', class: 'snippet' }, panel);
  const note = h('p', { class: 'tool-note', role: 'status' }, panel);
  input.focus();
  input.select();
  note.textContent = (await copyText(url, input)) ? 'Copied to the clipboard.' : 'Press Ctrl+C (⌘C) to copy.';
}

function embed(panel, api) {
  const out = embedForm(panel, api);
  const row = h('div', { class: 'tool-row' }, panel);
  const btn = h('button', { type: 'button', class: 'btn primary', text: 'Copy snippet' }, row);
  const note = h('span', { class: 'tool-note', role: 'status' }, row);
  btn.addEventListener('click', async () => {
    note.textContent = (await copyText(out.value, out)) ? 'Copied.' : 'Press Ctrl+C (⌘C) to copy.';
  });
  panel.querySelector('select').focus();
}

async function saveImage(api, kind) {
  api.status(`Preparing ${kind.toUpperCase()}…`);
  try {
    // loaded on the first SVG or PNG asked for: 4 KB of gzip no other visitor needs to fetch (issue 25)
    const { stageToSVG, svgToPNG, download, pngScale } = await import('./export.js');
    const { svg, width, height } = stageToSVG(api.stage, api.caption());
    const blob = kind === 'svg' ? new Blob([svg], { type: 'image/svg+xml' })
      : await svgToPNG(svg, width, height, pngScale(width));
    download(blob, api.filename(kind));
    api.status('');
  } catch (err) {
    api.status(`Could not make the ${kind.toUpperCase()}: ${err.message}`);
  }
}
