// presenter.js: presenter mode: the stage fills the window, arrow keys step the animation, then the scenes.

import { h } from './svg.js';
import { autoFit } from './fit.js';
import { announce } from './a11y.js';

const NEXT_KEYS = ['ArrowRight', 'ArrowDown', 'PageDown', ' '];
const PREV_KEYS = ['ArrowLeft', 'ArrowUp', 'PageUp'];

function hudButton(parent, text, label, onClick) {
  const b = h('button', { type: 'button', class: 'btn', text, 'aria-label': label }, parent);
  b.addEventListener('click', onClick);
  return b;
}

/**
 * host: {stage, ctl() -> controller, swapTo(slug, step) -> Promise, onChange(), onExit(), scale}.
 * The host owns navigation and the URL; the presenter owns layout, the HUD and the keys.
 */
export function createPresenter(host) {
  let active = false, fitter = null, hud = null, label = null, busy = false;

  function buildHUD() {
    hud = h('div', { class: 'presenter-hud', role: 'group', 'aria-label': 'Presenter controls' }, document.body);
    hudButton(hud, '←', 'Previous step or scene', () => prev());
    label = h('span', { class: 'presenter-label', 'aria-live': 'polite' }, hud);
    hudButton(hud, '→', 'Next step or scene', () => next());
    hudButton(hud, 'Full screen', 'Full screen (F)', () => toggleFullscreen());
    hudButton(hud, 'Esc', 'Leave presenter mode (Escape)', () => exit());
  }

  function update() {
    if (!active || !label) return;
    const c = host.ctl();
    const { count, index } = c.steps();
    const st = c.state;
    label.textContent = `${st.number}/${st.count} · ${st.title}${count ? ` · step ${(index ?? 0) + 1} of ${count}` : ''}`;
    if (fitter) fitter.refit();
  }

  function enter() {
    if (active) return;
    active = true;
    document.body.classList.add('presenting');
    buildHUD();
    fitter = autoFit(host.stage, host.scale);
    const c = host.ctl();
    if (c.steps().index === null) c.showStep(0);
    host.stage.focus({ preventScroll: true });
    update();
    host.onChange();
    announce('Presenter mode. Arrow keys step through, Shift with an arrow skips to the next scene; Escape leaves.');
  }

  function exit() {
    if (!active) return;
    active = false;
    document.body.classList.remove('presenting');
    if (fitter) fitter.stop();
    if (hud) hud.remove();
    fitter = hud = label = null;
    if (document.fullscreenElement) document.exitFullscreen().catch(() => {});
    host.onExit();
  }

  async function go(slug, step) {
    if (!slug || busy) return;
    busy = true;
    try {
      await host.swapTo(slug, step);
    } finally {
      busy = false;
      update();
    }
  }

  function next() {
    const c = host.ctl();
    const { count, index } = c.steps();
    if (count && index !== null && index < count - 1) {
      c.showStep(index + 1);
      host.onChange();
      return update();
    }
    return go(c.state.next, 0);
  }

  function prev() {
    const c = host.ctl();
    const { count, index } = c.steps();
    if (count && index !== null && index > 0) {
      c.showStep(index - 1);
      host.onChange();
      return update();
    }
    return go(c.state.prev, 'last');
  }

  function toggleFullscreen() {
    if (document.fullscreenElement) return document.exitFullscreen().catch(() => {});
    return document.documentElement.requestFullscreen?.().catch(() => {});
  }

  /** First or last step of this scene (Home / End). */
  function edge(last) {
    const c = host.ctl();
    const { count } = c.steps();
    if (!count) return;
    c.showStep(last ? count - 1 : 0);
    host.onChange();
    update();
  }

  /** Handle a keydown while presenting; returns true when the key was used. */
  function key(ev) {
    if (!active) return false;
    const k = ev.key;
    const c = host.ctl();
    if (ev.shiftKey && k === 'ArrowRight') go(c.state.next, 0);      // skip the rest of this scene
    else if (ev.shiftKey && k === 'ArrowLeft') go(c.state.prev, 0);
    else if (NEXT_KEYS.includes(k)) next();
    else if (PREV_KEYS.includes(k)) prev();
    else if (k === 'Home' || k === 'End') edge(k === 'End');
    else if (k === 'Escape') exit();
    else if (k === 'f' || k === 'F') toggleFullscreen();
    else return false;
    ev.preventDefault();
    return true;
  }

  return { enter, exit, key, update, next, prev, isActive: () => active };
}
