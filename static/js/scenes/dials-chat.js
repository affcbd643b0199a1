// scenes/dials-chat.js: chapter 11's chat box: an answer streams one token at a time at the configuration's per-user speed.
//
// Token source: GET /api/generate (server-sent events): SmolLM2-135M-Instruct, a real chat model running on this
// server's CPU, answers the question in its chat template (greedy); without it the server's toy model continues
// the text. The server generates as fast as its CPU can; the box replays the tokens at the configuration's pace:
// after its time to first token, at tokens_per_s_per_user, and a new configuration changes the pace mid-answer
// (the stream is re-anchored, never restarted). A token not yet generated simply waits. The note under the box
// says which model wrote the words and how fast this CPU wrote them.

import { h, clear } from '../lib/svg.js';
import { num, fixed, duration } from '../lib/format.js';
import { loop } from '../lib/tween.js';

const DEFAULT_PROMPT = 'What is the capital of France?';
const MAX_TTFT_MS = 8000; // a longer prefill is shortened on screen (and the footer says so)
const MAX_TOKENS = 512; // the stream's own cap; the dials' output tokens (the readouts' answer length) caps it lower
const MODEL_NAMES = { smollm2: 'SmolLM2-135M-Instruct (135M parameters, a real chat model)' };
const TOY_NOTE = 'The words come from our tiny toy model (trained on Shakespeare, running on this server\'s CPU: ' +
  'it continues text, it cannot answer); this server has not fetched the real model (inside-llm fetch-model). ' +
  'The pace is the real per-user speed of the configuration above.';

/** Which model wrote the words, at what speed on this CPU, and that the box replays them at another pace. */
function sourceNote(model, cpuRate) {
  if (!MODEL_NAMES[model]) return TOY_NOTE;
  const measured = cpuRate ? `, ${num(cpuRate, 3)} tokens/s on this server's CPU` : ' on this server\'s CPU';
  return `Written by ${MODEL_NAMES[model]}${measured}; replayed here at the per-user speed ` +
    'of the configuration above.';
}

/**
 * Open the model's stream; onStart(start event), onToken(text) per token (partial UTF-8 already held back by
 * the server), onEnd(done event) when it is complete, onError(message) if it fails. Returns a stop() function.
 */
function openStream(prompt, maxTokens, { onStart, onToken, onEnd, onError }) {
  if (location.protocol === 'file:') {
    onError('the model\'s answer needs the live server (this is an offline copy)');
    return () => {};
  }
  const q = new URLSearchParams({ prompt, max_tokens: String(maxTokens), tokens_per_s: '0', temperature: '0' });
  const es = new EventSource(`/api/generate?${q}`);
  es.addEventListener('start', (e) => onStart(JSON.parse(e.data)));
  es.addEventListener('token', (e) => onToken(JSON.parse(e.data).text));
  es.addEventListener('done', (e) => { es.close(); onEnd(JSON.parse(e.data)); });
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
  const input = h('input', { type: 'text', maxlength: 600, 'aria-label': 'Prompt', value: ctx.question || DEFAULT_PROMPT }, form);
  h('button', { class: 'btn primary', type: 'submit', text: 'Send' }, form);
  const note = h('p', { class: 'chat-note', text: sourceNote('smollm2', null) }, box);
  form.addEventListener('submit', (ev) => { ev.preventDefault(); start(); });

  let data = null, tokens = [], shown = 0, phase = 'idle', clock = null, closeStream = null, ended = false, model = '';
  let written = ''; // request().key of the answer in `tokens`, once the server has written all of it
  let t0 = 0, ttftMs = 0, anchorCount = 0, anchorT = 0, rate = 1, blocked = false, streamS = 0, anchorS = 0;

  /** The question and the answer length the readouts assume: the key of a generated answer. */
  function request() {
    const prompt = input.value.trim() || DEFAULT_PROMPT;
    const want = Math.min(MAX_TOKENS, (data && data.params && data.params.output_tokens) || MAX_TOKENS);
    return { prompt, want, key: `${want}\u0000${prompt}` };
  }

  /** Show the answer: replay the one already written for this question, else have the server write it. */
  function start() {
    stop();
    const req = request();
    you.textContent = req.prompt;
    clear(text);
    shown = 0;
    answer.dataset.count = '0';
    if (data && !data.memory.fits) { phase = 'blocked'; return render(); }
    if (written === req.key) return replay();
    tokens = [];
    ended = false;
    written = '';
    phase = 'writing';
    foot.textContent = 'The server\'s CPU is writing the answer…';
    closeStream = openStream(req.prompt, req.want, {
      onStart: (s) => { model = s.model; note.textContent = sourceNote(model, null); },
      onToken: (t) => {
        tokens.push(t);
        foot.textContent = `The server's CPU is writing the answer: ${num(tokens.length)} tokens so far…`;
      },
      onEnd: (d) => {
        ended = true;
        written = req.key;
        closeStream = null;
        note.textContent = sourceNote(model, d.decode_tokens_per_s);
        replay();
      },
      onError: (msg) => { ended = true; phase = 'error'; foot.textContent = `No answer: ${msg}.`; stop(); },
    });
  }

  /** Stream the written answer at the configuration's pace: its time to first token, then its per-user speed. */
  function replay() {
    stop();
    clear(text);
    shown = 0;
    answer.dataset.count = '0';
    if (still()) return showAll();
    t0 = performance.now();
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
