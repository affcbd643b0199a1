// scenes/tokens.js: chapter 1: the prompt as coloured token chips, ids, and words and characters per token.
// Hovering or focusing a token lights its characters in the text and its id in the list (and back).

import { h, clear } from '../lib/svg.js';
import { swatches } from '../lib/legend.js';
import { fixed, num, pct } from '../lib/format.js';
import { mathDetails } from '../lib/math.js';
import { sceneRoot, readoutRow, readout } from '../lib/scene-kit.js';

const MAX_CHIPS = 4000; // drawing cap (the server lists at most as many); counts always cover every token
const RULE_OF_THUMB = 0.75; // OpenAI's "a token is about 3/4 of a word", cited in the response's math
const KIND_WHY = {
  'other script': (p) => `${pct(p.non_ascii_letter_share, 0)} of its letters are not A–Z: in other scripts a token ` +
    'is often a character or less, and words may not even be separated by spaces',
  emoji: (p) => `${pct(p.symbol_share, 0)} of its characters are emoji or symbols, and each takes several tokens`,
  code: (p) => `${pct(p.code_share, 0)} of its characters are code punctuation such as ( ) = _ and brackets`,
  empty: () => 'there is no text yet',
};
let view = null;
let ctx = null;

export function mount(stage, context) {
  ctx = context;
  const wrap = sceneRoot(stage, 'tokens', 'tokens-scene');
  view = {
    readouts: readoutRow(wrap, 'tok-readouts'),
    rule: h('p', { class: 'tok-rule' }, wrap),
    meters: h('div', { class: 'tok-meters' }, wrap),
    legend: h('div', { class: 'legend' }, wrap),
    chips: h('div', { class: 'chips', role: 'list', 'aria-label': 'Tokens' }, wrap),
    sourceLabel: h('p', { class: 'eyebrow', text: 'Your text: hover a token to see the characters it covers' }, wrap),
    source: h('div', { class: 'tok-source', 'aria-hidden': 'true' }, wrap),
    idsLabel: h('p', { class: 'eyebrow', text: 'What the model sees' }, wrap),
    ids: h('div', { class: 'ids', 'aria-label': 'Token ids' }, wrap),
    math: h('div', { 'data-secondary': '' }, wrap),
    tip: h('div', { class: 'tooltip', hidden: true }, stage),
    lit: null, segs: [], segAt: new Map(), idEls: [],
  };
  const from = (sel, attr) => (e) => {
    const el = e.target.closest(sel);
    if (!el) return;
    if (attr === 'seg') lightChar(Number(el.dataset.c));
    else light(Number(el.dataset.i), sel === '.chip' ? el : null);
  };
  view.chips.addEventListener('pointerover', from('.chip'));
  view.chips.addEventListener('focusin', from('.chip'));
  view.ids.addEventListener('pointerover', from('.tok-id'));
  view.source.addEventListener('pointerover', from('.tok-seg', 'seg'));
  for (const el of [view.chips, view.ids, view.source]) {
    el.addEventListener('pointerleave', unlight);
    el.addEventListener('focusout', unlight);
  }
}

export function unmount() {
  view = null;
}

export function update(data, params) {
  if (!view) return;
  const chat = params.view === 'chat';
  const tokens = rows(chat ? data.chat.tokens : data.tokens).slice(0, MAX_CHIPS);
  const total = chat ? data.chat.num_tokens : data.num_tokens;
  unlight();
  drawReadouts(data, chat);
  drawRule(data, chat);
  drawMeters(data, chat);
  drawLegend(chat, data);
  drawChips(tokens, total, params.ws, chat);
  drawSource(chat ? null : params.text, tokens);
  drawIds(tokens, total);
  clear(view.math).appendChild(mathDetails(data.math.words_per_token, 'How is words per token computed?'));
}

/** The response lists tokens in columns ({id: [...], text: [...], ...}): one object per token for drawing. */
function rows(cols) {
  const keys = Object.keys(cols);
  return cols.id.map((_, i) => Object.fromEntries(keys.map((k) => [k, cols[k][i]])));
}

function drawReadouts(d, chat) {
  clear(view.readouts);
  if (chat) {
    readout(view.readouts, 'Tokens billed', num(d.chat.num_tokens), 'tokens');
    readout(view.readouts, 'Your text', num(d.chat.num_tokens - d.chat.num_template_tokens), 'tokens');
    readout(view.readouts, 'Hidden template', num(d.chat.num_template_tokens), 'tokens');
    return;
  }
  readout(view.readouts, 'Tokens', num(d.num_tokens), d.num_tokens === 1 ? 'token' : 'tokens');
  readout(view.readouts, '≈ Words', num(d.num_words), 'words');
  readout(view.readouts, 'Characters', num(d.num_chars), `chars · ${num(d.num_bytes)} bytes`);
  readout(view.readouts, 'Words per token', d.words_per_token === null ? '–' : fixed(d.words_per_token, 2), '')
    .classList.toggle('tok-moot', !(d.profile.rule_applies && ruleFits(d.words_per_token, d.reference.words_per_token)));
  readout(view.readouts, 'Chars per token', d.chars_per_token === null ? '–' : fixed(d.chars_per_token, 1), '');
}

/** Within this factor of the measured English figure, the rule "fits" the text's own measured ratio. */
const FIT_FACTOR = 1.5;
const ruleFits = (mine, english) => mine !== null && mine >= english / FIT_FACTOR && mine <= english * FIT_FACTOR;

/** One sentence: does "a token is about ¾ of a word" describe this text? The server says whether the text is A–Z
 * prose (from its characters); the page then judges the text's own measured words per token against English's. */
function drawRule(d, chat) {
  const p = d.profile, ref = d.reference;
  clear(view.rule);
  view.rule.hidden = chat;
  const fits = p.rule_applies && ruleFits(d.words_per_token, ref.words_per_token);
  view.rule.className = `tok-rule ${fits ? 'applies' : 'moot'}`;
  const english = `${fixed(ref.words_per_token, 2)} words per token on ${num(ref.samples.length)} short passages ` +
    `(${num(ref.words)} words), ${fixed(ref.corpus.words_per_token, 2)} on ${num(ref.corpus.words)} words of Shakespeare`;
  if (fits) {
    h('strong', { text: 'The ¾-word rule fits this text: ' }, view.rule);
    view.rule.append(`${fixed(d.words_per_token, 2)} words per token here, mostly A–Z letters. It is a rule for English prose: ${english}.`);
    return;
  }
  if (p.rule_applies && d.words_per_token !== null) {
    h('strong', { text: 'The ¾-word rule is off for this text: ' }, view.rule);
    view.rule.append(`A–Z letters, yet ${fixed(d.words_per_token, 2)} words per token here, against ${english}: ` +
      `long, rare or run-together words split into many pieces. Characters per token: ${fixed(d.chars_per_token, 1)} here, ` +
      `${fixed(ref.chars_per_token, 1)} in English prose.`);
    return;
  }
  h('strong', { text: 'The ¾-word rule does not apply here: ' }, view.rule);
  const why = (KIND_WHY[p.kind] || (() => p.kind))(p);
  if (!d.chars_per_token) { view.rule.append(`${why}.`); return; }
  const times = ref.chars_per_token / d.chars_per_token;
  view.rule.append(`${why}. Count characters per token instead: ${fixed(d.chars_per_token, 1)} here, ` +
    `${fixed(ref.chars_per_token, 1)} in English prose` +
    (times > 1.15 ? `, so each character costs about ${fixed(times, 1)}× as many tokens.` : '.'));
}

/** A bar for the visitor's value and thin marks for the rule and the two measured references. */
function meter(parent, label, value, max, marks, fmt) {
  const row = h('div', { class: 'tok-meter' }, parent);
  h('span', { class: 'tok-meter-label', text: label }, row);
  const m = h('div', { class: 'meter', role: 'img', 'aria-label': `${label}: ${value === null ? 'none' : fmt(value)}; ` +
    marks.map(([v, , name]) => `${name} ${fmt(v)}`).join('; ') }, row);
  const bar = h('span', {}, m);
  bar.style.width = `${Math.min(100, ((value || 0) / max) * 100)}%`;
  for (const [v, cls, name] of marks) {
    const b = h('b', { class: cls, title: `${name}: ${fmt(v)}` }, m);
    b.style.left = `${Math.min(100, (v / max) * 100)}%`;
  }
  h('span', { class: 'tok-meter-value', text: value === null ? '–' : fmt(value) }, row);
}

function drawMeters(d, chat) {
  clear(view.meters);
  view.meters.hidden = chat;
  if (chat) return;
  const ref = d.reference, c = ref.corpus, f2 = (v) => fixed(v, 2), f1 = (v) => fixed(v, 1);
  meter(view.meters, 'Words per token', d.words_per_token, 1.5,
    [[RULE_OF_THUMB, 'mk-rule', 'rule of thumb'], [ref.words_per_token, 'mk-prose', 'English passages'],
      [c.words_per_token, 'mk-corpus', 'Shakespeare']], f2);
  meter(view.meters, 'Characters per token', d.chars_per_token, 6,
    [[ref.chars_per_token, 'mk-prose', 'English passages'], [c.chars_per_token, 'mk-corpus', 'Shakespeare']], f1);
  const key = h('p', { class: 'tok-key' }, view.meters);
  const item = (cls, text) => { const s = h('span', {}, key); h('i', { class: cls }, s); s.append(text); };
  item('mk-bar', 'your text');
  item('mk-rule', `¾ rule of thumb`);
  item('mk-prose', `${num(ref.samples.length)} English passages (${num(ref.words)} words)`);
  item('mk-corpus', `Shakespeare shipped with this tour (${num(c.words)} words)`);
  key.append(` · ${d.encoding}`);
}

function drawLegend(chat, d) {
  swatches(view.legend, [
    ['', chat ? 'your message' : 'one colour per token', 'var(--chip-0)'],
    ['', chat ? `template tokens the chat adds (${d.chat.format})` : 'hex = part of a character split across tokens', 'var(--panel-2)'],
  ]);
}

function chipText(text, ws) {
  if (!ws) return text.replace(/\n/g, '↵').replace(/\t/g, '→');
  return text.replace(/ /g, '·').replace(/\n/g, '↵').replace(/\t/g, '→');
}

function drawChips(tokens, total, ws, chat) {
  clear(view.chips);
  const frag = document.createDocumentFragment();
  view.chipEls = [];
  tokens.forEach((t, i) => {
    const partial = t.text === null;
    const template = t.special || t.kind === 'template'; // the chat format's own tokens, role names included
    const cls = `chip${partial ? ' partial' : ''}${template ? ' special' : ''}`;
    const chip = h('span', { class: cls, role: 'listitem', tabindex: 0 }, frag);
    chip.textContent = partial ? t.bytes : chipText(t.text, ws);
    chip.style.background = `var(--chip-${i % 6})`;
    chip.dataset.i = i;
    chip.setAttribute('aria-label', `token ${i + 1}: id ${t.id}, ${partial ? `bytes ${t.bytes}` : JSON.stringify(t.text)}`);
    view.chipEls.push(chip);
    if (!partial && t.text.endsWith('\n') && !t.special) h('span', { 'aria-hidden': 'true' }, frag).style.flexBasis = '100%';
  });
  if (total > tokens.length) h('span', { class: 'kbd-hint', text: `… and ${num(total - tokens.length)} more tokens` }, frag);
  view.chips.appendChild(frag);
  view.tokens = tokens;
  view.chat = chat;
}

/** The visitor's text cut at every token boundary, so a token's characters can be lit (and hovered). */
function drawSource(text, tokens) {
  clear(view.source);
  view.segs = [];
  view.segAt = new Map();
  const shown = tokens;
  const end = shown.length ? shown[shown.length - 1].char_end : 0;
  const chars = typeof text === 'string' ? Array.from(text) : []; // code points, as the server counts them
  const ok = shown.length && shown[0].char_start !== undefined && end <= chars.length;
  view.source.hidden = view.sourceLabel.hidden = !ok;
  if (!ok) return;
  const cuts = [...new Set(shown.flatMap((t) => [t.char_start, t.char_end]))].sort((a, b) => a - b);
  const frag = document.createDocumentFragment();
  for (let k = 0; k + 1 < cuts.length; k++) {
    const seg = h('span', { class: 'tok-seg', text: chars.slice(cuts[k], cuts[k + 1]).join('') }, frag);
    seg.dataset.c = cuts[k];
    view.segAt.set(cuts[k], k);
    view.segs.push(seg);
  }
  if (end < chars.length) h('span', { class: 'kbd-hint', text: ' …' }, frag);
  view.source.appendChild(frag);
}

function drawIds(tokens, total) {
  clear(view.ids);
  const frag = document.createDocumentFragment();
  view.idEls = [];
  frag.append('[');
  tokens.forEach((t, i) => {
    if (i) frag.append(', ');
    const el = h('span', { class: 'tok-id', text: String(t.id) }, frag);
    el.dataset.i = i;
    view.idEls.push(el);
  });
  frag.append(total > tokens.length ? ', …]' : ']');
  view.ids.appendChild(frag);
}

// ---- linked highlight: chip, characters, id ---------------------------------------------------

function light(i, chip) {
  if (!view || !view.tokens || !(i >= 0)) return;
  unlight();
  const t = view.tokens[i];
  const els = [view.chipEls[i], view.idEls[i]];
  if (t.char_start !== undefined && view.segs.length) {
    for (let k = view.segAt.get(t.char_start); k !== undefined && k < view.segs.length && Number(view.segs[k].dataset.c) < t.char_end; k++) {
      els.push(view.segs[k]);
    }
  }
  for (const el of els) if (el) el.classList.add('lit');
  view.lit = els;
  if (view.idEls[i]) keepInView(view.ids, view.idEls[i]);
  showTip(chip || view.chipEls[i]);
}

/** Hovering a character lights the tokens that cover it (several when a character is split into bytes). */
function lightChar(c) {
  if (!view || !view.tokens) return;
  const hits = [];
  view.tokens.forEach((t, i) => { if (t.char_start <= c && c < t.char_end) hits.push(i); });
  if (!hits.length) return;
  light(hits[0], null);
  for (const i of hits.slice(1)) for (const el of [view.chipEls[i], view.idEls[i]]) if (el) { el.classList.add('lit'); view.lit.push(el); }
}

function unlight() {
  if (!view) return;
  if (view.lit) for (const el of view.lit) el.classList.remove('lit');
  view.lit = null;
  view.tip.hidden = true;
}

function keepInView(box, el) {
  const top = el.offsetTop - box.offsetTop;
  if (top < box.scrollTop || top > box.scrollTop + box.clientHeight - el.offsetHeight) box.scrollTop = top - box.clientHeight / 2;
}

function showTip(chip) {
  if (!chip || !view) return;
  const t = view.tokens[Number(chip.dataset.i)];
  const lines = [`token ${Number(chip.dataset.i) + 1}  id ${t.id}`, `bytes ${t.bytes}`];
  if (t.char_start !== undefined) lines.push(`chars ${t.char_start}–${t.char_end}  bytes ${t.byte_start}–${t.byte_end}`);
  if (t.text === null) lines.push('part of a character split across tokens');
  if (t.special) lines.push('special template token');
  else if (t.kind === 'template') lines.push('added by the chat template');
  view.tip.textContent = lines.join('\n');
  view.tip.hidden = false;
  const s = view.tip.parentElement.getBoundingClientRect();
  const c = chip.getBoundingClientRect();
  const left = Math.min(c.left - s.left, s.width - view.tip.offsetWidth - 8);
  view.tip.style.left = `${Math.max(4, left)}px`;
  view.tip.style.top = `${c.bottom - s.top + 6}px`;
}
