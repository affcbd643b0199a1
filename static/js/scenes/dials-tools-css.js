// scenes/dials-tools-css.js: the practitioner panels' stylesheet (css/scenes/dials-tools.css), linked once beside
// the chapter's own (a <link>, not an @import: resolved from this module's URL, online and in the offline bundle).

export function ensureToolStyles() {
  if (typeof document === 'undefined' || document.getElementById('dials-tools-css')) return;
  const link = document.createElement('link');
  link.rel = 'stylesheet';
  link.id = 'dials-tools-css';
  link.href = new URL('../../css/scenes/dials-tools.css', import.meta.url).href;
  document.head.append(link);
}
