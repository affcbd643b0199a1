// tour.js: one page of the tour (or an embed): URL state, theme, the scene controller, toolbar, presenter, keys.

import { toQuery } from './lib/api.js';
import { isEditing } from './lib/a11y.js';
import { createController } from './lib/controller.js';
import { readOptions, readParams } from './lib/options.js';
import { resolveLink } from './lib/resolve.js';
import { loadSceneData } from './lib/offline.js';
import { autoFit } from './lib/fit.js';
import { bindToolbar } from './lib/share.js';
import { createPresenter } from './lib/presenter.js';
import { applyTheme, bindThemeToggle } from './lib/theme.js';
import { liftFromServer } from './lib/lift.js';
import { prefersReducedMotion } from './lib/tween.js';

const page = JSON.parse(document.getElementById('page-state').textContent);
page.options = readOptions(location.search); // offline pages were rendered without the query
if (page.offline) {
  const q = new URLSearchParams(location.search);
  page.question = q.has('q') ? q.get('q').slice(0, 500) : null;
  page.params = readParams(page.controls, location.search, page.question);
}
// The visitor's question (`q`): the thread through the chapters. Typing into a `question` control sets it, and
// so does chapter 11's Send (`inside-llm:question`); a preset or a demo run gives the control its own value (in
// the URL under the control's name) and never touches `q`, and the control offers "← back to your question".
let question = page.question ?? null;
const opts = { ...page.options };
// A link whose settings cannot be drawn together is resolved as a control change would be (resolve.js).
const linkFix = resolveLink(page.resolve, page.controls, page.params, page.defaults, location.search);
if (linkFix) Object.assign(page.params, linkFix.changes);
const els = {
  stage: document.getElementById('stage'),
  status: document.getElementById('stage-status'),
  form: document.getElementById('controls'),
  fact: document.getElementById('fact'),
};
// Enter in a text field must not submit the form (no inline handlers: the CSP forbids them).
els.form?.addEventListener('submit', (e) => e.preventDefault());
const hooks = { onRender };
let ctl = createController(page, els, hooks);
let fitter = null;

// ---- theme --------------------------------------------------------------------------------
bindThemeToggle(document.getElementById('theme-toggle'), () => {
  delete opts.theme;
  syncURL();
  ctl.redraw();
});

// ---- URL state ------------------------------------------------------------------------------
const isQuestion = (st, name) => st.controls.some((c) => c.name === name && c.question);

/** Query string for a state: the question, every other non-default param, then the presentation options.
 * A question control that shows something else than the question (a preset, a demo run) keeps its own value. */
function queryFor(st, params, options) {
  const changed = question === null ? {} : { q: question };
  for (const [k, v] of Object.entries(params)) {
    if (question !== null && isQuestion(st, k)) {
      if (v !== question) changed[k] = v;
    } else if (v !== st.defaults[k]) changed[k] = v;
  }
  return toQuery({ ...changed, ...options });
}

const presetValue = (st, name, v) => Object.values(st.presets || {}).some((p) => (p.params || p)[name] === v);

/** An old link with a question control's text and no `q`: that text is the question (unless a preset's). */
function adoptQuestion() {
  if (question !== null) return;
  for (const c of ctl.state.controls) {
    const v = ctl.params[c.name];
    if (c.question && v !== ctl.state.defaults[c.name] && !presetValue(ctl.state, c.name, v)) question = v;
  }
}

/** Typing into a chapter's question control makes it the question for every chapter. */
els.form?.addEventListener('input', (ev) => {
  const name = ev.target && ev.target.name;
  if (name && isQuestion(ctl.state, name)) question = ctl.params[name];
});

/** Chapter 11's Send: the question asked there becomes the question. */
document.addEventListener('inside-llm:question', (ev) => {
  question = String(ev.detail.question).slice(0, 500);
  syncURL();
  threadLinks();
});

/** A scene's own URL state changed (the dials' pin A) without a redraw. */
document.addEventListener('inside-llm:url', () => syncURL());

/** Beside a question control that shows a preset or a demo run: one button back to the visitor's question. */
function backButtons() {
  for (const c of ctl.state.controls) {
    const box = els.form && els.form.querySelector(`.control[data-name="${c.name}"]`);
    if (!c.question || !box) continue;
    let btn = box.querySelector('.back-to-question');
    const away = question !== null && ctl.params[c.name] !== question;
    if (!away) { if (btn) btn.remove(); continue; }
    if (!btn) {
      btn = document.createElement('button');
      btn.type = 'button';
      btn.className = 'btn back-to-question';
      btn.addEventListener('click', () => ctl.setParam(c.name, question));
      box.appendChild(btn);
    }
    const short = question.length > 48 ? `${question.slice(0, 47)}…` : question;
    btn.textContent = `← back to your question: “${short}”`;
  }
}

/** The one line saying how a link's settings were resolved, beside the control the link set; it goes with the
 * next change. */
function sayLinkFix() {
  if (!linkFix || !els.form) return;
  const box = els.form.querySelector(`.control[data-name="${linkFix.changed}"]`);
  const line = document.createElement('p');
  line.className = 'control-note link-fix';
  line.setAttribute('role', 'status');
  line.textContent = linkFix.message;
  (box || els.form).appendChild(line);
  const drop = () => { line.remove(); els.form.removeEventListener('input', drop); els.form.removeEventListener('change', drop); };
  els.form.addEventListener('input', drop);
  els.form.addEventListener('change', drop);
}

/** Every link to another step (and the embed link) carries the question. */
function threadLinks() {
  const tail = question === null ? '' : `?${toQuery({ q: question })}`;
  for (const a of document.querySelectorAll('a[data-step]')) {
    a.href = a.href.split('?')[0] + tail;
  }
}

function currentOptions() {
  const o = { ...opts };
  const { index } = ctl.steps();
  if (index !== null && index !== undefined) o.step = String(index);
  return o;
}

function pagePath(st) {
  return `${page.embed ? st.urls.embed : st.urls.tour}${st.slug}${st.urls.suffix}`;
}

function syncURL(push = false) {
  const scene = ctl.scene(); // a scene may keep state of its own in the URL (the dials' pinned setup A: `a`)
  const own = scene && typeof scene.urlParams === 'function' ? scene.urlParams() : {};
  const q = queryFor(ctl.state, { ...ctl.params, ...own }, currentOptions());
  const url = (ctl.state === page ? location.pathname : pagePath(ctl.state)) + (q ? `?${q}` : '');
  try {
    history[push ? 'pushState' : 'replaceState'](null, '', url);
  } catch {
    // file:// pages may not rewrite their path: after the presenter moves scenes, the address stays put
  }
}

function absolute(path, query) {
  return new URL(path + (query ? `?${query}` : ''), location.href).href;
}

// ---- toolbar --------------------------------------------------------------------------------
function paramText(c, v) {
  if (c.kind === 'toggle') return v ? 'on' : 'off';
  if (c.kind === 'select') return String((c.options.find(([x]) => x === v) || [v, v])[1]);
  if (typeof v === 'string') return `“${v.length > 40 ? `${v.slice(0, 39)}…` : v}”`.replace(/\s+/g, ' ');
  return `${v}${c.unit ? ` ${c.unit}` : ''}`;
}

function caption() {
  const st = ctl.state;
  const parts = st.controls.map((c) => `${c.label}: ${paramText(c, ctl.params[c.name])}`);
  const { count, index } = ctl.steps();
  if (count && index !== null) parts.push(`step ${index + 1} of ${count}`);
  return { title: `${st.number}. ${st.title} · Inside LLM Inference`, detail: parts.join(' · ') || 'defaults' };
}

const toolbarAPI = {
  stage: els.stage,
  title: page.title,
  steps: () => ctl.steps(),
  status: (msg) => { els.status.textContent = msg; },
  shareURL: () => { syncURL(); return location.href; },
  embedURL: (o) => absolute(`${page.urls.embed}${page.slug}${page.urls.suffix}`, queryFor(page, ctl.params, o)),
  caption,
  filename: (ext) => `inside-llm-${String(ctl.state.number).padStart(2, '0')}-${ctl.state.slug}.${ext}`,
  present: () => presenter.enter(),
};
bindToolbar(document.querySelector('.stage-tools'), document.getElementById('tool-panel'), toolbarAPI);

// ---- presenter ----------------------------------------------------------------------------
/** The page-state of another scene: parsed from its embed page, or from the offline bundle's data file. */
async function stateOf(slug) {
  if (page.offline) return (await loadSceneData(page.urls.root, slug)).state;
  const res = await fetch(`${page.urls.embed}${slug}${question === null ? '' : `?${toQuery({ q: question })}`}`);
  if (!res.ok) throw new Error(`${slug}: ${res.status}`);
  const doc = new DOMParser().parseFromString(await res.text(), 'text/html');
  return JSON.parse(doc.getElementById('page-state').textContent);
}

/** Presenter moves to another scene in place (full screen survives); the narration is reloaded on exit. */
async function swapTo(slug, step) {
  let st;
  try {
    st = await stateOf(slug);
  } catch (err) {
    els.status.textContent = `Could not open ${slug}: ${err.message}`;
    return;
  }
  st.embed = false;
  st.options = { ...opts, step: String(step) };
  document.title = `${st.number}. ${st.title} · Inside LLM Inference`;
  ctl.destroy();
  els.stage.dataset.slug = slug;
  ctl = createController(st, { ...els, form: null, fact: null }, hooks);
  await ctl.start();
  syncURL(true);
}

const presenter = createPresenter({
  stage: els.stage, scale: opts.scale,
  ctl: () => ctl,
  swapTo,
  onChange: () => { opts.present = '1'; syncURL(); },
  onExit: () => { // leaving: the page as it was before presenting, at its chapter, without present= or step=
    delete opts.present;
    delete opts.step;
    if (ctl.state !== page) {
      location.assign(absolute(pagePath(ctl.state), queryFor(ctl.state, ctl.params, opts)));
      return;
    }
    ctl.showStep(null);
    syncURL();
  },
});
addEventListener('popstate', () => location.reload());

// ---- render hook, keys ----------------------------------------------------------------------
function onRender() {
  adoptQuestion();
  syncURL();
  threadLinks();
  backButtons();
  if (fitter) fitter.refit();
  presenter.update();
}

function go(to) {
  if (to) location.href = `${page.urls.tour}${to}${page.urls.suffix}${question === null ? '' : `?${toQuery({ q: question })}`}`;
}

/** Embeds take arrow keys only to step a scene's animation (never to leave the scene). */
function embedKey(ev) {
  const { count, index } = ctl.steps();
  const delta = ev.key === 'ArrowRight' ? 1 : ev.key === 'ArrowLeft' ? -1 : 0;
  if (!count || !delta) return;
  ev.preventDefault();
  ctl.showStep(Math.min(count - 1, Math.max(0, (index ?? -1) + delta)));
  syncURL();
}

document.addEventListener('keydown', (ev) => {
  if (ev.altKey || ev.ctrlKey || ev.metaKey || isEditing(ev.target)) return;
  if (presenter.key(ev) || ctl.onKey(ev)) return;
  if (page.embed) return embedKey(ev);
  if (ev.key === 'p' || ev.key === 'P') return presenter.enter();
  if (page.standalone) return; // the /dials page is not a step of the tour
  const to = ev.key === 'ArrowRight' ? page.next : ev.key === 'ArrowLeft' ? page.prev : null;
  if (to) {
    ev.preventDefault();
    go(to);
  }
});

window.addEventListener('pagehide', () => { const s = ctl.scene(); if (s && s.unmount) s.unmount(); });
window.addEventListener('pageshow', (ev) => { if (ev.persisted) location.reload(); });

// ---- controls rail: on a phone, a bottom bar with the main control; "All controls" opens the rest ----
const rail = document.getElementById('rail');
const railToggle = document.getElementById('rail-toggle');
railToggle?.addEventListener('click', () => {
  const open = rail.classList.toggle('open');
  railToggle.setAttribute('aria-expanded', String(open));
  railToggle.textContent = open ? 'Fewer controls' : 'All controls';
});
if (rail) { // the page keeps room under the stage for the bar, however tall it is
  new ResizeObserver(() => {
    document.documentElement.style.setProperty('--rail-h', `${rail.offsetHeight}px`);
  }).observe(rail);
}

// The skip link (the first Tab stop) puts the focus on the main control itself, not only the scroll.
document.querySelector('.skip-link')?.addEventListener('click', (ev) => {
  const target = document.querySelector(ev.currentTarget.getAttribute('href'));
  if (!target) return;
  ev.preventDefault();
  target.focus();
});

// ---- start --------------------------------------------------------------------------------
applyTheme(opts.theme);
if (page.embed) {
  const panel = document.getElementById('embed-controls');
  if (panel) panel.hidden = opts.controls !== '1';
  fitter = autoFit(els.stage, opts.scale);
}
// Chapter 4 opens by lifting one GPU out of the server (not in slides, frozen steps or reduced motion).
const lifts = page.slug === 'gpu' && !page.embed && !opts.present && opts.step === undefined && opts.autoplay !== '0' &&
  !prefersReducedMotion();
ctl.start().then(() => {
  sayLinkFix();
  if (!page.embed && opts.present === '1') presenter.enter();
  else if (lifts) liftFromServer(els.stage);
});
