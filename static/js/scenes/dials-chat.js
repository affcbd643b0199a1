// scenes/dials-chat.js: chapter 11's chat box: an answer streams one token at a time at the configuration's per-user speed.
//
// Token source: the demo model's GET /api/generate (server-sent events) is not in this build yet, so the
// answer is the prompt's own tokens (GET /api/tokens, Llama 3 vocabulary), said so on screen. The pacing is
// ours either way: after the configuration's time to first token, tokens appear at tokens_per_s_per_user,
// and a new configuration changes the pace mid-answer (the stream is re-anchored, never restarted).

import { h, clear } from '../lib/svg.js';
import { num, fixed, duration } from '../lib/format.js';
import { loop } from '../lib/tween.js';

const DEFAULT_PROMPT = 'To be, or not to be, that is the question: whether \'tis nobler in the mind to suffer ' +
  'the slings and arrows of outrageous fortune, or to take arms against a sea of troubles, and by opposing ' +
  'end them. To die: to sleep; no more; and by a sleep to say we end the heart-ache and the thousand natural ' +
  'shocks that flesh is heir to.';
const MAX_TTFT_MS = 8000; // a longer prefill is shortened on screen (and the footer says so)
const MAX_TOKENS = 400; // drawing cap for one answer
const SOURCE_NOTE = 'Demo model not yet available: the answer streams your prompt\'s own tokens back, ' +
  'at exactly the speed this configuration gives each user.';

/** Tokens of the answer: the prompt's own pieces (Llama 3 vocabulary) until the demo model's stream lands. */
async function answerTokens(ctx, prompt, signal) {
  const url = `/api/tokens?${new URLSearchParams({ text: prompt, encoding: 'llama3' })}`;
  const d = await ctx.fetchJSON(url, { signal });
  return d.tokens.map((t) => t.bytes);
}

/** '54 6F' -> Uint8Array [0x54, 0x6f] (the tokens API writes a piece's bytes as spaced hex). */
function hexBytes(hex) {
  return Uint8Array.from(hex.trim().split(/\s+/).filter(Boolean), (b) => parseInt(b, 16));
}

export function createChat(parent, ctx) {
  const box = h('section', { class: 'dials-card dials-chat', 'aria-labelledby': 'dials-chat-title' }, parent);
  const head = h('div', { class: 'card-head' }, box);
  h('h3', { id: 'dials-chat-title', text: 'Chat at this speed' }, head);
  const rateEl = h('span', { class: 'chat-rate' }, head);
  const log_ = h('div', { class: 'chat-log' }, box);
  const you = h('p', { class: 'bubble you' }, log_);
  const answer = h('div', { class: 'bubble bot', 'data-count': '0' }, log_);
  const prefill = h('div', { class: 'prefill', hidden: true, 'aria-hidden': 'true' }, answer);
  const prefillBar = h('span', {}, prefill);
  const text = h('span', { class: 'answer-text' }, answer);
  const foot = h('p', { class: 'chat-foot' }, box); // not live: it ticks every frame; done() announces once
  const form = h('form', { class: 'chat-ask' }, box);
  const input = h('input', { type: 'text', maxlength: 2000, 'aria-label': 'Prompt', value: DEFAULT_PROMPT }, form);
  h('button', { class: 'btn primary', type: 'submit', text: 'Send' }, form);
  h('p', { class: 'chat-note', text: SOURCE_NOTE }, box);
  form.addEventListener('submit', (ev) => { ev.preventDefault(); start(); });

  let data = null, tokens = [], shown = 0, phase = 'idle', clock = null, aborter = null, decoder = null;
  let t0 = 0, ttftMs = 0, anchorCount = 0, anchorT = 0, rate = 1, blocked = false, streamS = 0, anchorS = 0;

  async function start() {
    stop();
    const prompt = input.value.trim() || DEFAULT_PROMPT;
    you.textContent = prompt;
    clear(text);
    shown = 0;
    answer.dataset.count = '0';
    decoder = new TextDecoder();
    const mine = aborter = new AbortController();
    phase = 'loading';
    foot.textContent = 'Sending…';
    let got;
    try {
      got = await answerTokens(ctx, prompt, mine.signal);
    } catch (err) {
      if (err.name !== 'AbortError' && mine === aborter) { phase = 'idle'; foot.textContent = `Could not get tokens: ${err.message}`; }
      return;
    }
    if (mine !== aborter) return; // a newer start() owns the box
    tokens = got.slice(0, MAX_TOKENS);
    if (data && !data.memory.fits) { phase = 'blocked'; return render(); }
    t0 = performance.now();
    if (ctx.options && ctx.options.autoplay === '0') { // a still (slides, export): the whole answer at once
      emit(tokens.length);
      streamS = Math.max(0, tokens.length - 1) / rate;
      done();
      return render();
    }
    phase = 'prefill';
    ttftMs = Math.min(data ? data.ttft_ms : 0, MAX_TTFT_MS);
    prefill.hidden = false;
    clock = loop(tick);
  }

  function stop() {
    if (clock) clock.stop();
    if (aborter) aborter.abort();
    clock = null;
    aborter = null;
  }

  function emit(n) {
    const frag = document.createDocumentFragment();
    text.querySelectorAll('.new').forEach((el) => el.classList.remove('new'));
    for (; shown < n; shown++) {
      const piece = decoder.decode(hexBytes(tokens[shown]), { stream: shown + 1 < tokens.length });
      h('span', { class: 'tok new', text: piece }, frag);
    }
    text.appendChild(frag);
    answer.dataset.count = String(shown);
  }

  function tick() {
    const now = performance.now();
    if (phase === 'prefill') {
      const f = ttftMs ? (now - t0) / ttftMs : 1;
      prefillBar.style.width = `${Math.min(100, 100 * f)}%`;
      if (f < 1) return render();
      prefill.hidden = true;
      phase = 'stream';
      anchorCount = 0;
      anchorS = 0;
      anchorT = now;
    }
    if (phase === 'stream') {
      const due = Math.min(tokens.length, Math.floor(1 + anchorCount + ((now - anchorT) / 1000) * rate));
      if (due > shown) emit(due);
      streamS = (now - anchorT) / 1000 + anchorS;
      if (shown >= tokens.length) done();
    }
    render();
  }

  function done() {
    phase = 'done';
    if (clock) clock.stop();
    clock = null;
    setTimeout(() => text.querySelectorAll('.new').forEach((el) => el.classList.remove('new')), 400);
    if (ctx.announce) ctx.announce(`Answer complete: ${num(shown)} tokens at ${num(rate, 3)} tokens per second.`);
  }

  function render() {
    if (phase === 'blocked') {
      foot.textContent = 'This configuration does not fit in memory, so no answer comes back. Change a dial.';
    } else if (phase === 'prefill') {
      const shortened = data && data.ttft_ms > MAX_TTFT_MS ? ` (shown shortened to ${duration(MAX_TTFT_MS)})` : '';
      foot.textContent = `Prefilling the batch's prompts… first token after ${duration(data ? data.ttft_ms : 0)}${shortened}`;
    } else if (phase === 'stream' || phase === 'done') {
      foot.textContent = `${num(shown)} of ${num(tokens.length)} tokens · ${fixed(Math.max(0, streamS), 1)} s ` +
        `after a ${duration(data ? data.ttft_ms : 0)} first token`;
    }
  }

  /** A new estimate: keep streaming at the new per-user speed (re-anchored); replay a finished answer. */
  function update(d) {
    if (d === data) return; // a redraw (theme change), not a new configuration
    const wasBlocked = blocked;
    data = d;
    blocked = !d.memory.fits;
    const now = performance.now();
    if (phase === 'stream') {
      anchorCount = Math.max(0, shown - 1);
      anchorS = streamS;
      anchorT = now;
    }
    rate = d.memory.fits ? d.tokens_per_s_per_user : 0;
    rateEl.textContent = d.memory.fits ? `${num(d.tokens_per_s_per_user, 3)} tokens/s per user` : 'does not fit';
    box.classList.toggle('blocked', blocked);
    if (blocked) {
      stop();
      phase = 'blocked';
      prefill.hidden = true;
      you.textContent = input.value.trim() || DEFAULT_PROMPT;
      clear(text);
      h('span', { class: 'no-answer', text: 'No answer: this server cannot hold the model and its chats.' }, text);
      shown = 0;
      answer.dataset.count = '0';
      return render();
    }
    if (phase === 'idle' || phase === 'done' || wasBlocked) start();
  }

  function destroy() {
    stop();
    phase = 'idle';
  }

  return { update, destroy, count: () => shown };
}
