// controller.js: one scene on the stage: params, controls, latest-wins fetching, the module, and its steps.

import { createFetcher, fetchJSON, isAbort, toQuery } from './api.js';
import { createOfflineFetcher, offlineFetchJSON } from './offline.js';
import { announce } from './a11y.js';
import { prefersReducedMotion } from './tween.js';
import { h, clear } from './svg.js';
import { num, unitFor } from './format.js';
import { requestedStep } from './options.js';
import { resolve } from './resolve.js';

const isLog2 = (c) => c.kind === 'range' && c.scale === 'log2';

function readControl(c, el) {
  if (c.kind === 'toggle') return el.checked;
  if (isLog2(c)) return Math.round(2 ** Number(el.value));
  if (c.kind === 'range' || c.kind === 'number') return Number(el.value);
  if (c.kind === 'select') {
    const opt = c.options.find(([v]) => String(v) === el.value);
    return opt ? opt[0] : el.value;
  }
  return el.value;
}

/** A validator's message without its machinery ("Value error, " and the like). */
export function plainMessage(msg) {
  return String(msg || '').replace(/^(Value|Assertion) error, /i, '');
}

function buildingPanel(stage) {
  clear(stage);
  const inner = h('div', {}, h('div', { class: 'building' }, stage));
  h('h2', { text: 'This stage is being built' }, inner);
  h('p', { text: 'The narration is ready; the live simulation for this chapter has not landed yet.' }, inner);
}

let renders = 0; // page-wide count of draws: <html data-rendered="n">, for tests and tools to await

/**
 * Run one scene. state: the page-state object; els: {stage, status, form (may be null), fact (may be null)}.
 * hooks.onRender() runs after every draw (so the URL follows drawn states only). Each draw also fires
 * `inside-llm:rendered` on document ({slug, count}) and counts up <html data-rendered>.
 */
export function createController(state, els, hooks = {}) {
  const { stage, status, form, fact } = els;
  const controls = Object.fromEntries(state.controls.map((c) => [c.name, c]));
  const params = { ...state.params };
  const latest = state.offline ? createOfflineFetcher() : createFetcher();
  let scene = null, lastData = null, timer = 0, alive = true;
  let step = requestedStep(state.options);

  function rendered() {
    stage.dataset.drawn = ''; // shown from the first draw on (theme.css): the skeleton mount() built never moves on screen
    if (hooks.onRender) hooks.onRender();
    renders += 1;
    document.documentElement.dataset.rendered = String(renders);
    document.dispatchEvent(new CustomEvent('inside-llm:rendered', { detail: { slug: state.slug, count: renders } }));
  }

  /** "The number": the sentence the chapter's answer carries (`facts`) for the params just drawn, or hidden
   * when it has none. It travels in the same response: one request per state. */
  function showFacts() {
    if (!fact) return;
    const text = fact.querySelector('.fact-text');
    const f = lastData && lastData.facts;
    fact.hidden = !(f && f.text);
    if (f && f.text && text) text.textContent = f.text;
  }

  function showValue(c) {
    const out = form && form.querySelector(`#out-${c.name}`);
    if (out) out.textContent = `${num(params[c.name], 4)}${c.unit ? ` ${unitFor(params[c.name], c.unit)}` : ''}`;
  }

  function writeControl(c, el) {
    if (c.kind === 'toggle') el.checked = !!params[c.name];
    else if (isLog2(c)) el.value = Math.log2(params[c.name]);
    else el.value = params[c.name];
    showValue(c);
  }

  function writeAll() {
    for (const c of state.controls) {
      const el = form && form.elements.namedItem(c.name);
      if (el) writeControl(c, el);
    }
  }

  function apiParams() {
    const out = {};
    for (const [k, v] of Object.entries(params)) if (controls[k].api !== false) out[k] = v;
    return out;
  }

  // One line beside a control: how a change was resolved (or, after a refusal, the endpoint's words).
  const note = h('p', { class: 'control-note', role: 'status', 'aria-live': 'polite' });
  function say(name, text, problem = false) {
    const box = form && form.querySelector(`.control[data-name="${name}"]`);
    for (const el of form ? form.querySelectorAll('[aria-invalid]') : []) el.removeAttribute('aria-invalid');
    if (!box || !text) { note.remove(); note.textContent = ''; return false; }
    note.textContent = text;
    note.classList.toggle('problem', problem);
    box.appendChild(note);
    if (problem) form.elements.namedItem(name)?.setAttribute('aria-invalid', 'true');
    return true;
  }

  /** Change one parameter (from a control or from the scene itself) and redraw/refetch. An invalid
   * combination is resolved: the other controls move to the nearest valid one and a line says so. */
  function setParam(name, value, delay = 0) {
    params[name] = value;
    const c = controls[name];
    const el = form && form.elements.namedItem(name);
    if (c) (el && readControl(c, el) !== value ? writeControl(c, el) : showValue(c));
    const fixed = resolve(state.resolve, controls, params, name);
    if (fixed) {
      Object.assign(params, fixed.changes);
      writeAll();
    }
    say(name, fixed ? fixed.message : '');
    if (c && c.api === false) return redraw();
    refresh(delay);
  }

  function applyPreset(p) {
    Object.assign(params, p.params || p);
    writeAll();
    refresh(0);
  }

  function bindControls() {
    if (!form) return;
    for (const c of state.controls) {
      const el = form.elements.namedItem(c.name);
      if (!el) continue;
      if (isLog2(c)) Object.assign(el, { min: Math.log2(c.min), max: Math.log2(c.max), step: 1 });
      writeControl(c, el);
      const typing = c.kind === 'text' || c.kind === 'textarea';
      el.addEventListener(c.kind === 'select' || c.kind === 'toggle' ? 'change' : 'input',
        () => setParam(c.name, readControl(c, el), typing ? 150 : 0));
    }
    form.querySelectorAll('.preset').forEach((btn) => btn.addEventListener('click', () => {
      applyPreset(state.presets[btn.dataset.preset] || {});
    }));
  }

  function refresh(delay) {
    clearTimeout(timer);
    timer = setTimeout(load, delay);
  }

  /** Start the chapter's one request for the current params (GET, or POST for a long query such as typed
   * text); its answer carries the fact sentence too. */
  function request() {
    const p = apiParams();
    const q = toQuery(p);
    const data = q.length > 6000 ? latest(state.api, { body: p }) : latest(`${state.api}?${q}`);
    data.catch(() => {}); // awaited in load(); a rejection before then is not "unhandled"
    return data;
  }

  /** Fetch (or take the request mount() already started) and draw. */
  async function load(started = null) {
    if (!scene || !alive) return;
    try {
      stage.setAttribute('aria-busy', 'true');
      const data = await (started || request());
      if (!alive) return;
      status.textContent = '';
      lastData = data;
      draw();
    } catch (err) {
      if (isAbort(err) || !alive) return;
      // a refusal in words goes beside the control it names; the picture keeps the last state that drew
      const d = Array.isArray(err.detail) ? err.detail[0] : null;
      const field = d && (d.loc || []).filter((x) => x !== 'query' && x !== 'body').pop();
      const shown = field && controls[field] && say(field, plainMessage(d.msg), true);
      status.textContent = shown ? `Not drawn: ${plainMessage(d.msg)}` : `Could not update: ${err.message}`;
      stage.dataset.drawn = ''; // nothing drew: what mount() built is all there is to show
    } finally {
      stage.removeAttribute('aria-busy');
    }
  }

  /** Number of animation steps the scene declares for its current data (0: no steps). */
  function numSteps() {
    if (!scene || !lastData || typeof scene.numSteps !== 'function' || typeof scene.showStep !== 'function') return 0;
    return Math.max(0, Math.floor(scene.numSteps(lastData)) || 0);
  }

  function stepIndex() {
    const n = numSteps();
    if (step === null || n === 0) return null;
    return step === 'last' ? n - 1 : Math.min(Math.max(0, step), n - 1);
  }

  function draw() {
    scene.update(lastData, { ...params });
    const i = stepIndex();
    if (i !== null) scene.showStep(i);
    showFacts();
    rendered();
  }

  function redraw() {
    if (scene && lastData) draw();
  }

  /** Freeze at step i (clamped); null lets the scene animate again. Returns the index shown or null. */
  function showStep(i) {
    step = i;
    if (i === null) { redraw(); return null; }
    const j = stepIndex();
    if (j !== null) { scene.showStep(j); rendered(); }
    return j;
  }

  async function mount() {
    // the chapter's data is asked for while its scene module loads, not after (no request waits on the import)
    const started = request();
    try {
      scene = await import(`../scenes/${state.slug}.js`);
    } catch (err) {
      console.warn(`scene module for ${state.slug} not loaded`, err);
      buildingPanel(stage);
      rendered();
      return;
    }
    if (!alive) return;
    const frozen = step !== null || state.options.autoplay === '0';
    const ctx = {
      params, setParam, announce, embed: state.embed,
      fetchJSON: state.offline ? offlineFetchJSON : fetchJSON,
      options: { ...state.options, autoplay: frozen ? '0' : '1' },
      question: state.question ?? null,
      reducedMotion: prefersReducedMotion(), status: (msg) => { status.textContent = msg; },
    };
    scene.mount(stage, ctx);
    if (!alive) return;
    await load(timer ? null : started); // a param the scene set while mounting asks again (latest wins)
  }

  function destroy() {
    alive = false;
    clearTimeout(timer);
    if (scene && scene.unmount) scene.unmount();
    scene = null;
    clear(stage);
  }

  bindControls();
  return {
    state, params, apiParams, setParam, applyPreset, redraw, showStep, destroy,
    start: mount,
    scene: () => scene,
    steps: () => ({ count: numSteps(), index: stepIndex() }),
    onKey: (ev) => !!(scene && scene.onKey && scene.onKey(ev)),
  };
}
