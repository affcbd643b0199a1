// lib/attached.js: what only a tour with attached servers draws (scenes/attach-live.js under chapters 6 and 7,
// scenes/dials-attach.js in chapter 11) is fetched only once GET /api/attach lists a server. Most tours attach
// none, and those two modules were 11 KB of the 63-67 KB of gzipped JavaScript their pages sent (issue 25).

/**
 * Ask GET /api/attach (through `fetchJSON`, the page's own); when it names a server, `load()` (a dynamic import)
 * and then `make(module, list)`. Returns { current() → what make returned, or null until then (and for good when
 * nothing is attached, offline, or stopped first), stop() → a late answer makes nothing }.
 */
export function whenAttached(fetchJSON, load, make) {
  const w = { made: null, stopped: false };
  (async () => {
    const list = await fetchJSON('/api/attach');
    if (w.stopped || !list.servers || !list.servers.length) return;
    const mod = await load();
    if (!w.stopped) w.made = make(mod, list);
  })().catch(() => {}); // an offline copy or an older server: nothing attached, nothing drawn
  return { current: () => w.made, stop: () => { w.stopped = true; } };
}
