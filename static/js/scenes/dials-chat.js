// scenes/dials-chat.js: chapter 11's chat box: the answer streams as the server writes it, at the slower of the
// server's pace and the configuration's per-user speed.
//
// Token source: GET /api/generate (server-sent events): SmolLM2-135M-Instruct, a real chat model running on this
// server's CPU, answers the question in its chat template (greedy, with a chat UI's repetition penalty and
// no-repeat n-gram, CHAT_SETTINGS); without it the server's toy model continues the text. Each token is shown
// as soon as both (a) it has arrived and (b) the configuration allows it: the first after the configuration's
// time to first token (shortened past MAX_TTFT_MS), each next one 1 / tokens_per_s_per_user after the last one
// shown. So a fast configuration waits on this CPU and a slow one holds tokens back; the foot says which binds.
// A new configuration changes the pace mid-answer (never restarts it); a finished answer is replayed with its
// recorded arrival times. Offline (an exported bundle) the answers precomputed by `inside-llm export` are played.
// The box sends `inside-llm:question` on document when Send asks a new question (tour.js writes it to `q`).

import { h, clear } from '../lib/svg.js';
import { num, fixed, duration } from '../lib/format.js';
import { loop } from '../lib/tween.js';
import { offlineData } from '../lib/offline.js';

const DEFAULT_PROMPT = 'What is the capital of France?';
const MAX_TTFT_MS = 3000; // a longer prefill is shortened on screen (and the foot says so)
const CHAT_MAX_TOKENS = 128; // a chat UI's default answer length; the dials' answer length caps it lower
// the decoding settings a chat UI ships with (llama.cpp and Ollama: repeat_penalty 1.1 over the last 64 tokens)
export const CHAT_SETTINGS = { temperature: 0, repetition_penalty: 1.1, no_repeat_ngram: 4 };
const MODEL_NAMES = { smollm2: 'SmolLM2-135M-Instruct (135M parameters, a real chat model)' };
const TOY_NOTE = 'The words come from our tiny toy model (trained on Shakespeare, running on this server\'s CPU: ' +
  'it continues text, it cannot answer); this server has not fetched the real model (inside-llm fetch-model). ' +
  'The pace is the real per-user speed of the configuration above.';

/** Which model wrote the words, and that the box shows them at the per-user speed (or this CPU's, if slower). */
function sourceNote(model, cpuRate) {
  if (model && !MODEL_NAMES[model]) return TOY_NOTE;
  const measured = cpuRate ? `, ${num(cpuRate, 3)} tokens/s on this server's CPU` : ' on this server\'s CPU';
  return `Written by ${MODEL_NAMES.smollm2}${measured}; shown as it is written, at the per-user speed ` +
    'above or this CPU\'s, whichever is slower.';
}

/** The answers an offline bundle carries (inside-llm export): {prompt, max_tokens, model, tokens, …}. */
function offlineAnswer(prompt) {
  const list = (offlineData().dials && offlineData().dials.answers) || [];
  return list.find((a) => a.prompt === prompt) || null;
}

/**
 * Open the model's stream; onStart(start event), onToken(text) per token (partial UTF-8 already held back by
 * the server), onEnd(done event) when it is complete, onError(message) if it fails. Returns a stop() function.
 */
function openStream(prompt, maxTokens, { onStart, onToken, onEnd, onError }) {
  if (location.protocol === 'file:' || offlineData().dials) { // an exported bundle, from disk or a static host
    const a = offlineAnswer(prompt);
    if (!a) {
      onError('the model\'s answer needs the live server (this offline copy holds the answers to the default ' +
        'question and the questions it was exported with)');
      return () => {};
    }
    // the recorded answer arrives with its recorded timing, as the live stream did
    const timers = [];
    const t = a.arrivals_ms || a.tokens.map((_, i) => 250 + i * 40);
    timers.push(setTimeout(() => onStart({ model: a.model, ...a.settings, offline: true }), 0));
    a.tokens.slice(0, maxTokens).forEach((tok, i) => timers.push(setTimeout(() => onToken(tok), t[i])));
    const n = Math.min(maxTokens, a.tokens.length);
    timers.push(setTimeout(() => onEnd({ ...a.done, num_tokens: n }), (t[n - 1] || 0) + 1));
    return () => timers.forEach(clearTimeout);
  }
  const q = new URLSearchParams({ prompt, max_tokens: String(maxTokens), tokens_per_s: '0',
    ...Object.fromEntries(Object.entries(CHAT_SETTINGS).map(([k, v]) => [k, String(v)])) });
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

/** "How was this written?": the model, its template, and the decoding settings, from the stream's own start. */
function howPanel(parent) {
  const det = h('details', { class: 'chat-how' }, parent);
  h('summary', { text: 'How was this written?' }, det);
  const list = h('ul', {}, det);
  return {
    el: det,
    show(start, done) {
      clear(list);
      const s = start || {};
      const rows = [
        `Model: ${MODEL_NAMES[s.model] || (s.model ? 'the toy demo model (it continues text)' : '…')}, on this server's CPU.`,
        s.temperature === 0 || s.temperature === undefined ? 'Greedy decoding: always the likeliest next token (temperature 0).'
          : `Sampled at temperature ${s.temperature}, among the ${s.top_k} likeliest tokens (seed ${s.seed}).`,
        `Repetition penalty ${s.repetition_penalty ?? CHAT_SETTINGS.repetition_penalty}: a token among the last 64 has its logit divided by it ` +
          '(CTRL; llama.cpp and Ollama ship 1.1).',
        `No repeated ${s.no_repeat_ngram ?? CHAT_SETTINGS.no_repeat_ngram}-gram: a token that would repeat 4 tokens already written is never chosen. ` +
          'Without these two, a 135M model loops on many questions until its length cap.',
        `At most ${num(s.max_tokens || CHAT_MAX_TOKENS)} new tokens (a chat UI's default, capped by the dials' answer length); ` +
          'it stops earlier at the end of its turn (<|im_end|>).',
      ];
      if (s.num_prompt_tokens) rows.push(`It read ${num(s.num_prompt_tokens)} tokens: your question inside its chat template (the system and user turns).`);
      if (done) {
        rows.push(`It wrote ${num(done.num_tokens)} tokens (${done.finish_reason === 'stop' ? 'it ended its turn' : 'it reached the cap'})` +
          (done.ttft_ms ? `, its first after ${duration(done.ttft_ms)}` : '') +
          (done.decode_tokens_per_s ? `, then ${num(done.decode_tokens_per_s, 3)} tokens/s` : '') +
          (s.offline ? ' (recorded when this copy was exported).' : '.'));
      }
      for (const r of rows) h('li', { text: r }, list);
    },
  };
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
  const input = h('input', { type: 'text', maxlength: 600, 'aria-label': 'Your question', value: ctx.question || DEFAULT_PROMPT }, form);
  h('button', { class: 'btn primary', type: 'submit', text: 'Send' }, form);
  const note = h('p', { class: 'chat-note', text: sourceNote(null, null) }, box);
  const how = howPanel(box);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const q = input.value.trim();
    if (q) document.dispatchEvent(new CustomEvent('inside-llm:question', { detail: { question: q } }));
    start();
  });

  let data = null, phase = 'idle', clock = null, closeStream = null, blocked = false;
  // the answer: its tokens, when each arrived (ms after the stream opened), and the stream's start/done events
  let tokens = [], arrivals = [], startEv = null, doneEv = null, ended = false, written = '';
  // this showing: when it began (t0, performance.now()), when the first token arrived, when the last was shown
  let t0 = 0, openedAt = 0, ttftMs = 0, shown = 0, lastShownAt = 0, firstShownAt = 0, firstDueAt = 0, rate = 1;

  /** The question and the answer length: the key of a written answer. */
  function request() {
    const prompt = input.value.trim() || DEFAULT_PROMPT;
    const want = Math.min(CHAT_MAX_TOKENS, (data && data.params && data.params.output_tokens) || CHAT_MAX_TOKENS);
    return { prompt, want, key: `${want}\u0000${prompt}` };
  }

  function resetShown() {
    clear(text);
    shown = 0;
    firstShownAt = 0;
    firstDueAt = 0;
    answer.dataset.count = '0';
    delete box.dataset.firstShownMs;
    delete box.dataset.firstArrivedMs;
  }

  /** Show the answer for the question: replay the one already written, else stream it as the server writes it. */
  function start() {
    stop();
    const req = request();
    you.textContent = req.prompt;
    resetShown();
    if (data && !data.memory.fits) { phase = 'blocked'; return render(); }
    if (written === req.key) return play(true);
    tokens = [];
    arrivals = [];
    ended = false;
    written = '';
    doneEv = null;
    startEv = null;
    openedAt = performance.now();
    phase = 'opening';
    closeStream = openStream(req.prompt, req.want, {
      onStart: (s) => { startEv = s; note.textContent = sourceNote(s.model, null); how.show(startEv, null); },
      onToken: (t) => {
        if (!tokens.length) box.dataset.firstArrivedMs = String(Math.round(performance.now() - t0));
        tokens.push(t);
        arrivals.push(performance.now() - openedAt);
      },
      onEnd: (d) => {
        ended = true;
        written = req.key;
        doneEv = d;
        closeStream = null;
        note.textContent = sourceNote(startEv && startEv.model, d.decode_tokens_per_s);
        how.show(startEv, d);
        if (still()) showAll();
      },
      onError: (msg) => { ended = true; phase = 'error'; stop(); prefill.hidden = true; foot.textContent = `No answer: ${msg}.`; },
    });
    if (phase !== 'error') play(false); // an offline copy without this answer says so at once
  }

  /** Start showing: the configuration's prefill first, then each token when it has arrived and is due. */
  function play(replaying) {
    if (clock) clock.stop();
    clock = null;
    t0 = performance.now();
    box.dataset.startedAt = String(Math.round(t0));
    if (replaying) openedAt = t0; // the recorded arrivals, from now
    if (still()) { // slides and frozen steps (autoplay=0) show the whole answer at once, once it is written
      if (replaying || ended) return showAll();
      phase = 'writing';
      foot.textContent = 'The server\'s CPU is writing the answer…';
      return undefined;
    }
    phase = 'prefill';
    ttftMs = Math.min(data ? data.ttft_ms : 0, MAX_TTFT_MS);
    box.dataset.ttftShownMs = String(ttftMs);
    prefill.hidden = false;
    clock = loop(tick);
  }

  function still() {
    return !!(ctx.options && ctx.options.autoplay === '0');
  }

  function showAll() {
    emit(tokens.length);
    phase = 'done';
    done();
    render();
  }

  function stop() {
    if (clock) clock.stop();
    if (closeStream) closeStream();
    clock = null;
    closeStream = null;
  }

  /** Show tokens up to n; each span keeps when it arrived, was due and was shown (ms after this showing began). */
  function emit(n, dues = []) {
    const frag = document.createDocumentFragment();
    const now = performance.now(), ms = (t) => String(Math.round(10 * (t - t0)) / 10);
    text.querySelectorAll('.new').forEach((el) => el.classList.remove('new'));
    for (let i = 0; shown < n; shown++, i++) {
      const tok = h('span', { class: 'tok new', text: tokens[shown] }, frag);
      if (dues[i] === undefined) continue;
      Object.assign(tok.dataset, { arrived: ms(openedAt + arrivals[shown]), due: ms(dues[i]), shown: ms(now) });
    }
    text.appendChild(frag);
    answer.dataset.count = String(shown);
  }

  /** When token i may be shown: after it arrived, and one per-user interval after the last (first: the TTFT). */
  function dueAt(i) {
    const arrived = openedAt + arrivals[i];
    const allowed = i === 0 ? t0 + ttftMs : lastShownAt + 1000 / (rate || 1);
    return { at: Math.max(arrived, allowed) };
  }

  function tick() {
    const now = performance.now();
    if (phase === 'prefill') {
      const f = ttftMs ? (now - t0) / ttftMs : 1;
      prefillBar.style.width = `${Math.min(100, 100 * f)}%`;
      if (f < 1 || !tokens.length) { if (f >= 1) prefillBar.style.width = '100%'; return render(); }
      prefill.hidden = true;
      phase = 'stream';
    }
    if (phase === 'stream') {
      let n = shown;
      const dues = [];
      while (n < tokens.length) {
        const d = dueAt(n);
        if (d.at > now) break;
        lastShownAt = d.at;
        dues.push(d.at);
        if (n === 0) { firstShownAt = now; firstDueAt = d.at; }
        n += 1;
      }
      if (n > shown) {
        emit(n, dues);
        if (!box.dataset.firstShownMs) box.dataset.firstShownMs = String(Math.round(firstShownAt - t0));
      }
      if (ended && shown >= tokens.length) { phase = 'done'; done(); }
    }
    render();
  }

  function done() {
    if (clock) clock.stop();
    clock = null;
    setTimeout(() => text.querySelectorAll('.new').forEach((el) => el.classList.remove('new')), 400);
    if (ctx.announce) ctx.announce(`Answer complete: ${num(shown)} tokens.`);
  }

  /** This CPU's writing speed so far (tokens/s between the first and the last arrival), or null. */
  function cpuRate() {
    if (doneEv && doneEv.decode_tokens_per_s) return doneEv.decode_tokens_per_s;
    const n = arrivals.length;
    return n > 4 ? (n - 1) / ((arrivals[n - 1] - arrivals[0]) / 1000) : null;
  }

  /** Which pace binds: this CPU (tokens waited on it) or the configuration (tokens waited on it). */
  function binds() {
    const cpu = cpuRate();
    if (cpu === null) return null;
    return cpu < rate ? 'server' : 'configuration';
  }

  function render() {
    const b = binds();
    box.dataset.binds = b || '';
    if (phase === 'blocked') {
      foot.textContent = 'This configuration does not fit in memory, so no answer comes back. Change a dial.';
    } else if (phase === 'error') {
      // the message stays
    } else if (phase === 'prefill') {
      const shortened = data && data.ttft_ms > MAX_TTFT_MS ? ` (shown shortened to ${duration(MAX_TTFT_MS)})` : '';
      const waiting = performance.now() - t0 >= ttftMs && !tokens.length ? '; waiting for this CPU\'s first token' : '';
      foot.textContent = `Prefilling the batch's prompts… first token after ${duration(data ? data.ttft_ms : 0)}${shortened}${waiting}`;
    } else if (phase === 'stream' || phase === 'done') {
      const s = Math.max(0, (lastShownAt - firstDueAt) / 1000);
      const cpu = cpuRate();
      const pace = b === 'server'
        ? `shown as this CPU writes them, ${num(cpu, 3)} tokens/s: slower than this configuration's ${num(rate, 3)} per user`
        : b === 'configuration'
          ? `paced at this configuration's ${num(rate, 3)} tokens/s per user (this CPU writes ${num(cpu, 3)})`
          : `at most ${num(rate, 3)} tokens/s per user`;
      foot.textContent = `${num(shown)} of ${ended ? num(tokens.length) : '…'} tokens · ${fixed(s, 1)} s after a ` +
        `${duration(data ? data.ttft_ms : 0)} first token · ${pace}`;
    }
  }

  /** A new estimate: keep showing at the new per-user speed; replay a finished answer. */
  function update(d) {
    if (d === data) return; // a redraw (theme change), not a new configuration
    const wasBlocked = blocked;
    data = d;
    blocked = !d.memory.fits;
    rate = d.memory.fits ? d.tokens_per_s_per_user : 0;
    box.dataset.rate = String(rate);
    rateEl.textContent = d.memory.fits ? `${num(d.tokens_per_s_per_user, 3)} tokens/s per user` : 'does not fit';
    box.classList.toggle('blocked', blocked);
    if (blocked) {
      stop();
      phase = 'blocked';
      prefill.hidden = true;
      you.textContent = input.value.trim() || DEFAULT_PROMPT;
      resetShown();
      h('span', { class: 'no-answer', text: 'No answer: this server cannot hold the model and its chats.' }, text);
      return render();
    }
    if (phase === 'idle' || phase === 'done' || wasBlocked) start();
  }

  function destroy() {
    stop();
    phase = 'idle';
  }

  return { update, destroy, count: () => shown, question: () => input.value.trim() || DEFAULT_PROMPT };
}
