// scenes/dials-chat.js: chapter 11's chat box: an answer streams one token at a time at the configuration's per-user speed.
//
// Token source: the demo model (GET /api/generate, server-sent events), a real transformer running on this
// server's CPU; it sends as fast as it can and the box paces the tokens itself: after the configuration's time
// to first token, tokens appear at tokens_per_s_per_user, and a new configuration changes the pace mid-answer
// (the stream is re-anchored, never restarted). A token not yet generated simply waits.

import { h, clear } from '../lib/svg.js';
import { num, fixed, duration } from '../lib/format.js';
import { loop } from '../lib/tween.js';

const DEFAULT_PROMPT = 'ROMEO: But soft, what light through yonder window breaks?';
const MAX_TTFT_MS = 8000; // a longer prefill is shortened on screen (and the footer says so)
const MAX_TOKENS = 200; // one demo answer (the stream allows 512; the dials' output_tokens caps it lower)
const SOURCE_NOTE = 'The words come from our tiny demo model (trained on Shakespeare, running on this server\'s ' +
  'CPU); the pace is the real per-user speed of the configuration above.';

/**
 * Open the demo model's stream; onToken(text) per token (partial UTF-8 already held back by the server),
 * onEnd() when it is complete, onError(message) if it fails. Returns a stop() function.
 */
function openStream(prompt, maxTokens, { onToken, onEnd, onError }) {
  if (location.protocol === 'file:') {
    onError('the demo model\'s answer needs the live server (this is an offline copy)');
    return () => {};
  }
  const q = new URLSearchParams({ prompt, max_tokens: String(maxTokens), tokens_per_s: '0' });
  const es = new EventSource(`/api/generate?${q}`);
  es.addEventListener('token', (e) => onToken(JSON.parse(e.data).text));
  es.addEventListener('done', () => { es.close(); onEnd(); });
  es.addEventListener('error', (e) => {
    es.close();
    let detail = 'the stream failed (a prompt of at most 256 tokens is accepted)';
    try { if (e.data) detail = JSON.parse(e.data).detail; } catch { /* keep the generic message */ }
    onError(detail);
  });
  return () => es.close();
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
  const input = h('input', { type: 'text', maxlength: 600, 'aria-label': 'Prompt', value: DEFAULT_PROMPT }, form);
  h('button', { class: 'btn primary', type: 'submit', text: 'Send' }, form);
  h('p', { class: 'chat-note', text: SOURCE_NOTE }, box);
  form.addEventListener('submit', (ev) => { ev.preventDefault(); start(); });

  let data = null, tokens = [], shown = 0, phase = 'idle', clock = null, closeStream = null, ended = false;
  let t0 = 0, ttftMs = 0, anchorCount = 0, anchorT = 0, rate = 1, blocked = false, streamS = 0, anchorS = 0;

  function start() {
    stop();
    const prompt = input.value.trim() || DEFAULT_PROMPT;
    you.textContent = prompt;
    clear(text);
    shown = 0;
    tokens = [];
    ended = false;
    answer.dataset.count = '0';
    if (data && !data.memory.fits) { phase = 'blocked'; return render(); }
    const want = Math.min(MAX_TOKENS, (data && data.params && data.params.output_tokens) || MAX_TOKENS);
    closeStream = openStream(prompt, want, {
      onToken: (t) => { tokens.push(t); },
      onEnd: () => { ended = true; if (still()) showAll(); },
      onError: (msg) => { ended = true; phase = 'error'; foot.textContent = `No answer: ${msg}.`; stop(); },
    });
    t0 = performance.now();
    if (still()) { phase = 'loading'; foot.textContent = 'Generating the answer…'; return; }
    phase = 'prefill';
    ttftMs = Math.min(data ? data.ttft_ms : 0, MAX_TTFT_MS);
    prefill.hidden = false;
    clock = loop(tick);
  }

  /** Slides and exports (autoplay=0) show the whole answer at once instead of streaming it. */
  function still() {
    return !!(ctx.options && ctx.options.autoplay === '0');
  }

  function showAll() {
    emit(tokens.length);
    streamS = Math.max(0, tokens.length - 1) / (rate || 1);
    done();
    render();
  }

  function stop() {
    if (clock) clock.stop();
    if (closeStream) closeStream();
    clock = null;
    closeStream = null;
  }

  function emit(n) {
    const frag = document.createDocumentFragment();
    text.querySelectorAll('.new').forEach((el) => el.classList.remove('new'));
    for (; shown < n; shown++) {
      h('span', { class: 'tok new', text: tokens[shown] }, frag);
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
      if (ended && shown >= tokens.length) done();
    }
    render();
  }

  function done() {
    phase = 'done';
    if (clock) clock.stop();
    clock = null;
    if (closeStream) closeStream();
    closeStream = null;
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
      foot.textContent = `${num(shown)} of ${ended ? num(tokens.length) : '…'} tokens · ${fixed(Math.max(0, streamS), 1)} s ` +
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
