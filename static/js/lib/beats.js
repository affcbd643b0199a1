// beats.js: a long simulation clock, stepped as a dozen beats a speaker can narrate (the scene contract's steps).

export const BOTH_BUSY = 8; // beats while both runs are busy
export const TAIL = 4; // beats while only the longer run is left

/** n evenly spaced positions from a to b, both included (rounded to whole frames when `whole`), no repeats. */
export function spread(a, b, n, whole = false) {
  const out = [];
  for (let k = 0; k < n; k++) {
    const x = n === 1 ? a : a + ((b - a) * k) / (n - 1);
    const v = whole ? Math.round(x) : x;
    if (out[out.length - 1] !== v) out.push(v);
  }
  return out;
}

/**
 * Beats for two policies run side by side on one clock, one finishing at `short`, the other at `long`
 * (frame indices or seconds from 0): eight beats across the shorter run, while both are busy, then four
 * more to the end of the longer one, so the stills show the race and then what is left of it.
 */
export function twoRunBeats(short, long, whole = false) {
  const [a, b] = short <= long ? [short, long] : [long, short];
  if (b - a <= b / 10) return spread(0, b, BOTH_BUSY + TAIL, whole);
  return [...spread(0, a, BOTH_BUSY, whole), ...spread(a, b, TAIL + 1, whole).slice(1)];
}

/** Beat i of a list of beats, clamped to the list. */
export function beatAt(beats, i) {
  return beats[Math.min(Math.max(0, i), beats.length - 1)];
}
