// scene-kit.js: the pieces every scene module shares, so that each scene holds only its own picture.
//
//   sceneLifecycle({ slug, cls, bind, build, ready?, draws, stop? })
//                                           a scene module's mount/update/unmount from its parts (see below)
//   sceneRoot(stage, slug, cls, onStyled?)  link css/scenes/<slug>.css, empty the stage, return its <div class=cls>
//   sceneStyles(slug, onStyled?)            link a stylesheet only (a second sheet, or a panel that is not a scene)
//   readoutRow(parent, cls?)                the row of readout tiles: <div class="readouts cls" aria-live=polite>
//   readout(parent, label, value, unit?, { cls, title }?)
//                                           one tile, .readout > .label + .value > .unit; returns the tile
//   widthClass(el, below)                   'narrow' | 'mid' | ... | 'wide' by el's width: the first name of
//                                           `below` ({narrow: 500, mid: 840}) whose px the width is under
//   redrawOnWidth(el, below, drawn, redraw) redraw when el is resized into another width class
//   still(ctx)                              the scene must not move by itself: reduced motion, or autoplay=0
//   transport(bar, opts)                    a ▶ Play / ❚❚ Pause button on a looping clock, with an optional
//                                           scrub range and clock <output> (see below)
//
// A scene's module still owns its `view` and its picture (docs/scene-contract.md); the kit only builds what
// several scenes build the same way. A helper one scene uses stays in that scene.

import { h, clear } from './svg.js';
import { loop } from './tween.js';

/**
 * Link /static/css/scenes/<slug>.css into the page head if it is not there yet. `onStyled`, if given, runs
 * once when a sheet that is still loading has loaded (a layout measured before the scene's CSS applies is
 * wrong: redraw then); it does not run when the sheet was already there.
 */
export function sceneStyles(slug, onStyled = null) {
  const href = new URL(`../../css/scenes/${slug}.css`, import.meta.url).href;
  if ([...document.styleSheets].some((s) => s.href === href)) return;
  let link = document.querySelector(`link[data-scene-css="${slug}"]`);
  if (!link) {
    link = document.createElement('link');
    link.rel = 'stylesheet';
    link.href = href;
    link.dataset.sceneCss = slug;
    document.head.appendChild(link);
  }
  if (onStyled && !link.sheet) link.addEventListener('load', onStyled, { once: true });
}

/** The start of every mount: the scene's stylesheet, an empty stage, and the scene's own root element in it. */
export function sceneRoot(stage, slug, cls, onStyled = null) {
  sceneStyles(slug, onStyled);
  clear(stage);
  return h('div', { class: cls }, stage);
}

/**
 * The mount/update/unmount skeleton of a scene whose view opens with a readout row, so that the module
 * writes only its own parts: `export const { mount, update, unmount } = sceneLifecycle({...})`.
 *
 *   mount(stage, ctx)  sceneRoot(stage, slug, cls), then the view: { stage, ctx, data: null,
 *                      readouts: readoutRow(root), ...build(root, ctx) } (the readout row is the root's first
 *                      child, then build's elements in the order it makes them). bind(view) hands it to
 *                      the module's own `view`; ready(view) then does what needs the view bound
 *                      (observers, panels whose callbacks read it).
 *   update(data)       nothing before mount or after unmount; else view.data = data and each of draws(data),
 *                      in order (a scene that needs the params writes its own update).
 *   unmount()          stop(view) (timers, loops, tweens), view.ro?.disconnect() (the ResizeObserver ready
 *                      set), then bind(null).
 */
export function sceneLifecycle({ slug, cls, bind, build, ready = null, draws, stop = null }) {
  let view = null;
  return {
    mount(stage, ctx) {
      const wrap = sceneRoot(stage, slug, cls);
      view = { stage, ctx, data: null, readouts: readoutRow(wrap) };
      Object.assign(view, build(wrap, ctx));
      bind(view);
      if (ready) ready(view);
    },
    update(data) {
      if (!view) return;
      view.data = data;
      for (const draw of draws) draw(data);
    },
    unmount() {
      if (!view) return;
      if (stop) stop(view);
      if (view.ro) view.ro.disconnect();
      view = null;
      bind(null);
    },
  };
}

/** The row the readout tiles go in; its numbers are announced when they change. */
export function readoutRow(parent, cls = '') {
  return h('div', { class: cls ? `readouts ${cls}` : 'readouts', 'aria-live': 'polite' }, parent);
}

/** One readout tile: a label, a value and (optionally) its unit; opts.cls adds a class, opts.title a tooltip. */
export function readout(parent, label, value, unit = '', { cls = '', title } = {}) {
  const tile = h('div', { class: cls ? `readout ${cls}` : 'readout', title }, parent);
  h('span', { class: 'label', text: label }, tile);
  const v = h('span', { class: 'value', text: value }, tile);
  if (unit) h('span', { class: 'unit', text: unit }, v);
  return tile;
}

/**
 * Which drawing fits `el`: the first name in `below` ({name: px}, smallest first) whose px its width is
 * under, else 'wide'. Before layout (width 0) it is 'wide'.
 */
export function widthClass(el, below) {
  const w = el.clientWidth;
  if (w) for (const [name, px] of Object.entries(below)) if (w < px) return name;
  return 'wide';
}

/**
 * Narrow/wide switching: call redraw() when `el` is resized into a width class other than drawn(), the one
 * on screen (falsy while nothing is drawn). Returns the ResizeObserver: disconnect it on unmount.
 */
export function redrawOnWidth(el, below, drawn, redraw) {
  const ro = new ResizeObserver(() => {
    const shown = drawn();
    if (shown && widthClass(el, below) !== shown) redraw();
  });
  ro.observe(el);
  return ro;
}

/** True when the scene should draw its end state and not start moving: reduced motion, or autoplay=0 (a step). */
export function still(ctx) {
  return !!(ctx.reducedMotion || ctx.options?.autoplay === '0');
}

const PLAY = '▶ Play';
const PAUSE = '❚❚ Pause';

/**
 * A transport in `bar`: a play/pause button (aria-pressed while playing), then, if opts.scrub is given, a
 * range input, and, if opts.clock is given, an <output> for the time on the clock. opts.button, opts.scrub
 * and opts.clock are extra attributes for each (scrub: min 0, max 0, step 1 unless given).
 *
 * Hooks: onPlay() runs on play and returns tick(ms), called every frame with the ms since play until paused
 * (return null to stay paused, e.g. before data); onSeek(value) runs when the visitor moves the scrub (the
 * clock pauses first). hush() returns the elements whose aria-live is
 * 'off' while playing and 'polite' when paused, so a running clock is not a stream of announcements.
 *
 * Returns { button, scrub, clock, play(), pause(), restart(frozen, stillFrame, firstFrame) }.
 */
export function transport(bar, opts) {
  const button = h('button', { class: 'btn', type: 'button', 'aria-pressed': 'false', text: PLAY, ...opts.button }, bar);
  const scrub = opts.scrub ? h('input', { type: 'range', min: 0, max: 0, value: 0, step: 1, ...opts.scrub }, bar) : null;
  const clock = opts.clock ? h('output', opts.clock, bar) : null;
  let running = null;

  function show(playing) {
    button.textContent = playing ? PAUSE : PLAY;
    button.setAttribute('aria-pressed', String(playing));
    for (const el of opts.hush ? opts.hush() : []) el.setAttribute('aria-live', playing ? 'off' : 'polite');
  }

  function play() {
    if (running) return;
    const tick = opts.onPlay();
    if (!tick) return;
    show(true);
    running = loop(tick);
  }

  function pause() {
    if (running) running.stop();
    running = null;
    show(false);
  }

  button.addEventListener('click', () => (running ? pause() : play()));
  if (scrub) scrub.addEventListener('input', () => { pause(); opts.onSeek(Number(scrub.value)); });
  return {
    button, scrub, clock, play, pause,
    /** A new run: pause, then pose stillFrame() when frozen (see still(ctx)), else firstFrame() and play. */
    restart(frozen, stillFrame, firstFrame) {
      pause();
      if (frozen) stillFrame();
      else { firstFrame(); play(); }
    },
  };
}
