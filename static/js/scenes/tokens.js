// scenes/tokens.js: chapter 1: the prompt as coloured token chips, ids, and the words-per-token readout.

import { h, clear } from '../lib/svg.js';
import { swatches } from '../lib/legend.js';
import { fixed, num } from '../lib/format.js';
import { mathDetails } from '../lib/math.js';

const MAX_CHIPS = 4000; // drawing cap; counts always cover every token
const RULE_OF_THUMB = 0.75; // OpenAI's "a token is about 3/4 of a word", cited in the response's math
let view = null;
let ctx = null;

export function mount(stage, context) {
  ctx = context;
  clear(stage);
  const wrap = h('div', { class: 'tokens-scene' }, stage);
  view = {
    readouts: h('div', { class: 'readouts', 'aria-live': 'polite' }, wrap),
    meter: h('div', { class: 'wpt' }, wrap),
    legend: h('div', { class: 'legend' }, wrap),
    chips: h('div', { class: 'chips', role: 'list', 'aria-label': 'Tokens' }, wrap),
    idsLabel: h('p', { class: 'eyebrow', text: 'What the model sees' }, wrap),
    ids: h('div', { class: 'ids', 'aria-label': 'Token ids' }, wrap),
    math: h('div', {}, wrap),
    tip: h('div', { class: 'tooltip', hidden: true }, stage),
  };
  view.chips.addEventListener('pointerover', (e) => showTip(e.target.closest('.chip')));
  view.chips.addEventListener('focusin', (e) => showTip(e.target.closest('.chip')));
  view.chips.addEventListener('pointerout', () => hideTip());
  view.chips.addEventListener('focusout', () => hideTip());
}

export function unmount() {
  view = null;
}

export function update(data, params) {
  if (!view) return;
  const chat = params.view === 'chat';
  drawReadouts(data, chat);
  drawMeter(data);
  drawLegend(chat, data);
  drawChips(chat ? data.chat.tokens : data.tokens, params.ws, chat);
  const ids = (chat ? data.chat.tokens : data.tokens).map((t) => t.id);
  view.ids.textContent = `[${ids.slice(0, MAX_CHIPS).join(', ')}${ids.length > MAX_CHIPS ? ', …' : ''}]`;
  clear(view.math).appendChild(mathDetails(data.math.words_per_token, 'How is words per token computed?'));
}

function readout(parent, label, value, unit) {
  const r = h('div', { class: 'readout' }, parent);
  h('span', { class: 'label', text: label }, r);
  const v = h('span', { class: 'value', text: value }, r);
  if (unit) h('span', { class: 'unit', text: unit }, v);
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
  readout(view.readouts, 'Words per token', d.words_per_token === null ? '–' : fixed(d.words_per_token, 2), '');
}

function drawMeter(d) {
  clear(view.meter);
  const max = 1.5;
  const label = h('p', { class: 'kbd-hint' }, view.meter);
  label.textContent = `Words per token on your text (bar) vs the ¾ rule of thumb (black mark) and ` +
    `${fixed(d.reference.words_per_token, 2)} measured on ${d.reference.samples.length} public-domain passages (${d.encoding}).`;
  const m = h('div', { class: 'meter', role: 'img', 'aria-label':
    `${fixed(d.words_per_token || 0, 2)} words per token; rule of thumb ${RULE_OF_THUMB}` }, view.meter);
  h('span', {}, m).style.width = `${Math.min(100, ((d.words_per_token || 0) / max) * 100)}%`;
  h('b', { title: 'rule of thumb: 0.75 words per token' }, m).style.left = `${(RULE_OF_THUMB / max) * 100}%`;
  const ref = h('b', { title: 'measured on reference passages' }, m);
  ref.style.left = `${(d.reference.words_per_token / max) * 100}%`;
  ref.style.background = 'var(--c-compute)';
}

function drawLegend(chat, d) {
  swatches(view.legend, [
    ['', chat ? 'your message' : 'one colour per token', 'var(--chip-0)'],
    ['', chat ? 'template tokens the chat adds (Llama 3 format)' : 'hex = part of a character split across tokens', 'var(--panel-2)'],
  ]);
  if (!chat) view.legend.append(` · ${d.encoding}`);
}

function chipText(text, ws) {
  if (!ws) return text.replace(/\n/g, '↵').replace(/\t/g, '→');
  return text.replace(/ /g, '·').replace(/\n/g, '↵').replace(/\t/g, '→');
}

function drawChips(tokens, ws, chat) {
  clear(view.chips);
  const frag = document.createDocumentFragment();
  tokens.slice(0, MAX_CHIPS).forEach((t, i) => {
    const partial = t.text === null;
    const template = t.special || t.kind === 'template'; // the chat format's own tokens, role names included
    const cls = `chip${partial ? ' partial' : ''}${template ? ' special' : ''}`;
    const chip = h('span', { class: cls, role: 'listitem', tabindex: 0 }, frag);
    chip.textContent = partial ? t.bytes : chipText(t.text, ws);
    chip.style.background = `var(--chip-${i % 6})`;
    chip.dataset.i = i;
    chip.setAttribute('aria-label', `token ${i + 1}: id ${t.id}, ${partial ? `bytes ${t.bytes}` : JSON.stringify(t.text)}`);
    if (!partial && t.text.endsWith('\n') && !t.special) h('span', { 'aria-hidden': 'true' }, frag).style.flexBasis = '100%';
  });
  if (tokens.length > MAX_CHIPS) h('span', { class: 'kbd-hint', text: `… and ${num(tokens.length - MAX_CHIPS)} more tokens` }, frag);
  view.chips.appendChild(frag);
  view.tokens = tokens;
  view.chat = chat;
}

function showTip(chip) {
  if (!chip || !view) return hideTip();
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

function hideTip() {
  if (view) view.tip.hidden = true;
}
