// tour.js: one page of the tour (or an embed): URL state, controls, fetching, the scene module, keys.

import { createFetcher, fetchJSON, isAbort, toQuery } from './lib/api.js';
import { announce, isEditing } from './lib/a11y.js';
import { prefersReducedMotion } from './lib/tween.js';
import { h, clear } from './lib/svg.js';
import { num } from './lib/format.js';

const state = JSON.parse(document.getElementById('page-state').textContent);
const stage = document.getElementById('stage');
const status = document.getElementById('stage-status');
const form = document.getElementById('controls');
const controls = Object.fromEntries(state.controls.map((c) => [c.name, c]));
const params = { ...state.params };
const latest = createFetcher();
let scene = null;
let lastData = null;
let timer = 0;

// ---- theme --------------------------------------------------------------------------------
const THEME_KEY = 'inside-llm-theme';
function applyTheme() {
  const forced = state.options.theme;
  const saved = forced || localStorage.getItem(THEME_KEY) || 'auto';
  document.documentElement.dataset.theme = saved;
}
applyTheme();
document.getElementById('theme-toggle')?.addEventListener('click', () => {
  const dark = document.documentElement.dataset.theme === 'dark' ||
    (document.documentElement.dataset.theme === 'auto' && matchMedia('(prefers-color-scheme: dark)').matches);
  localStorage.setItem(THEME_KEY, dark ? 'light' : 'dark');
  applyTheme();
  if (scene && lastData) scene.update(lastData, { ...params });
});

// ---- URL state ------------------------------------------------------------------------------
/** The page URL for the current params: every non-default value, plus embed options. */
function pageURL() {
  const changed = {};
  for (const [k, v] of Object.entries(params)) if (v !== state.defaults[k]) changed[k] = v;
  const q = toQuery({ ...changed, ...state.options });
  return location.pathname + (q ? `?${q}` : '');
}

function apiParams() {
  const out = {};
  for (const [k, v] of Object.entries(params)) if (controls[k].api !== false) out[k] = v;
  return out;
}

// ---- controls -----------------------------------------------------------------------------
const isLog2 = (c) => c.kind === 'range' && c.scale === 'log2';

function showValue(c) {
  const out = document.getElementById(`out-${c.name}`);
  if (out) out.textContent = `${num(params[c.name], 4)}${c.unit ? ` ${c.unit}` : ''}`;
}

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

function writeControl(c, el) {
  if (c.kind === 'toggle') el.checked = !!params[c.name];
  else if (isLog2(c)) el.value = Math.log2(params[c.name]);
  else el.value = params[c.name];
  showValue(c);
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
    const preset = state.presets ? state.presets[btn.dataset.preset] : null;
    applyPreset(preset || JSON.parse(btn.dataset.params || '{}'));
  }));
}

function applyPreset(p) {
  Object.assign(params, p.params || p);
  for (const c of state.controls) {
    const el = form && form.elements.namedItem(c.name);
    if (el) writeControl(c, el);
  }
  refresh(0);
}

/** Change one parameter (from a control or from the scene itself) and redraw/refetch. */
function setParam(name, value, delay = 0) {
  params[name] = value;
  const c = controls[name];
  if (c) showValue(c);
  const el = form && form.elements.namedItem(name);
  if (el && c && readControl(c, el) !== value) writeControl(c, el);
  history.replaceState(null, '', pageURL());
  if (c && c.api === false) {
    if (scene && lastData) scene.update(lastData, { ...params });
    return;
  }
  refresh(delay);
}

// ---- fetching -----------------------------------------------------------------------------
function refresh(delay) {
  clearTimeout(timer);
  timer = setTimeout(load, delay);
}

async function load() {
  if (!state.built || !scene) return;
  const p = apiParams();
  const q = toQuery(p);
  try {
    stage.setAttribute('aria-busy', 'true');
    const data = q.length > 6000 ? await latest(state.api, { body: p }) : await latest(`${state.api}?${q}`);
    status.textContent = '';
    lastData = data;
    scene.update(data, { ...params });
  } catch (err) {
    if (!isAbort(err)) status.textContent = `Could not update: ${err.message}`;
  } finally {
    stage.removeAttribute('aria-busy');
  }
}

// ---- scene module ---------------------------------------------------------------------------
function buildingPanel() {
  clear(stage);
  const box = h('div', { class: 'building' }, stage);
  const inner = h('div', {}, box);
  h('h2', { text: 'This stage is being built' }, inner);
  h('p', { text: 'The narration is ready; the live simulation for this chapter has not landed yet.' }, inner);
}

async function mountScene() {
  if (!state.built) return buildingPanel();
  try {
    scene = await import(`./scenes/${state.slug}.js`);
  } catch (err) {
    console.warn(`scene module for ${state.slug} not loaded`, err);
    return buildingPanel();
  }
  const ctx = {
    params, setParam, fetchJSON, announce, embed: state.embed, options: state.options,
    reducedMotion: prefersReducedMotion(), status: (msg) => { status.textContent = msg; },
  };
  scene.mount(stage, ctx);
  await load();
}

// ---- keyboard -----------------------------------------------------------------------------
document.addEventListener('keydown', (ev) => {
  if (state.embed || ev.altKey || ev.ctrlKey || ev.metaKey || isEditing(ev.target)) return;
  if (scene && scene.onKey && scene.onKey(ev)) return;
  const to = ev.key === 'ArrowRight' ? state.next : ev.key === 'ArrowLeft' ? state.prev : null;
  if (to) {
    ev.preventDefault();
    location.href = `/tour/${to}`;
  }
});

window.addEventListener('pagehide', () => { if (scene && scene.unmount) scene.unmount(); });

bindControls();
mountScene();
