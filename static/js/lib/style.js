// style.js: a scene's own stylesheet (static/css/scenes/<slug>.css), linked once when the scene mounts.

/** Link /static/css/scenes/<slug>.css into the page head if it is not there yet. */
export function sceneStyles(slug) {
  const href = new URL(`../../css/scenes/${slug}.css`, import.meta.url).href;
  if ([...document.styleSheets].some((s) => s.href === href)) return;
  if (document.querySelector(`link[data-scene-css="${slug}"]`)) return;
  const link = document.createElement('link');
  link.rel = 'stylesheet';
  link.href = href;
  link.dataset.sceneCss = slug;
  document.head.appendChild(link);
}
