// resolve.js: a control change that would make an invalid combination moves the other controls to the
// nearest valid one, and says so in one line. Rules come from the scene's TOML ([[resolve]]):
//
//   [[resolve]]                      # tp × pp must divide gpus (the rest of the GPUs are replicas)
//   product = ["tp", "pp"]
//   divides = "gpus"
//   names = { tp = "tensor", pp = "pipeline", gpus = "GPUs" }

const choices = (c) => (c && c.kind === 'select' ? c.options.map(([v]) => v).filter((v) => typeof v === 'number') : []);

/** The option of control `name` nearest (in ratio) to its current value that makes `ok(v)` true, or null. */
function nearest(controls, params, name, ok) {
  const cur = params[name];
  const fits = choices(controls[name]).filter(ok);
  fits.sort((a, b) => Math.abs(Math.log(a / cur)) - Math.abs(Math.log(b / cur)) || b - a);
  return fits.length ? fits[0] : null;
}

function productDivides(rule, controls, params, changed) {
  const [a, b] = rule.product;
  const n = rule.divides;
  const valid = (p) => p[n] % (p[a] * p[b]) === 0;
  if (valid(params)) return null;
  const name = (k) => (rule.names && rule.names[k]) || controls[k].label;
  // adjust the members the visitor did not touch, the nearer one first; then the other if needed
  const order = changed === a ? [b] : changed === b ? [a] : [a, b];
  const next = { ...params };
  const moved = [];
  for (const k of order) {
    const other = k === a ? b : a;
    const v = nearest(controls, next, k, (x) => next[n] % (x * next[other]) === 0);
    if (v !== null && v !== next[k]) { next[k] = v; moved.push(k); }
    if (valid(next)) break;
  }
  if (!valid(next)) return null; // nothing among the options fits: the endpoint's message will say why
  const prod = next[a] * next[b];
  const why = prod === next[n] ? `= ${next[n]} ${name(n)}` : `divides ${next[n]} ${name(n)} (${next[n] / prod} replicas)`;
  const did = moved.map((k) => `${name(k)} ${next[k]}`).join(', ');
  const changes = Object.fromEntries(moved.map((k) => [k, next[k]]));
  return { changes, message: `${name(changed)} ${params[changed]} → ${did} so that ${next[a]} × ${next[b]} ${why}.` };
}

const RULES = { product: productDivides };

/** After `changed` moved: {changes, message} bringing params back to a valid combination, or null. */
export function resolve(rules, controls, params, changed) {
  for (const rule of rules || []) {
    const members = [...(rule.product || []), rule.divides];
    if (!members.includes(changed)) continue;
    const out = RULES.product(rule, controls, params, changed);
    if (out) return out;
  }
  return null;
}

/**
 * A link's settings on load (controls: the scene's list): when they cannot be drawn together, resolve them as if
 * the setting the link names last (of a rule's members) had just been changed. {changes, message, changed} with
 * the message saying so in one line, or null when the link is drawable as it is.
 */
export function resolveLink(rules, controls, params, defaults, search) {
  const byName = Object.fromEntries((controls || []).map((c) => [c.name, c]));
  const named = [...new URLSearchParams(search).keys()];
  for (const rule of rules || []) {
    const members = [...(rule.product || []), rule.divides];
    const set = named.filter((k) => members.includes(k));
    const changed = set.length ? set[set.length - 1] : members.find((k) => params[k] !== (defaults || {})[k]);
    if (!changed) continue;
    const out = resolve([rule], byName, params, changed);
    if (out) return { ...out, changed, message: `This link's settings could not be drawn together: ${out.message}` };
  }
  return null;
}
