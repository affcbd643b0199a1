// scenes/dials-explain.js: chapter 11's "Explain my launch command": paste vllm serve / llama-server / SGLang,
// see one GPU's memory part by part (chapter 4's bar) and the lines the engine will print (GET /api/explain).

import { h, clear } from '../lib/svg.js';
import { num } from '../lib/format.js';
import { ensureToolStyles } from './dials-tools-css.js';

export const EXAMPLES = [
  ['vLLM', 'vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32768 --gpu-memory-utilization 0.9'],
  ['llama.cpp', 'llama-server -m Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf -c 8192 -np 4 -ngl 99'],
  ['SGLang', 'python -m sglang.launch_server --model-path Qwen/Qwen3-32B --tp 2 --mem-fraction-static 0.85'],
];
const CLS = { weights: 'weights', kv: 'kv', activations: 'act', runtime: 'runtime', reserved: 'reserve', free: 'spare' };
const SHORT = { weights: 'Weights', kv: 'KV cache', activations: 'Act.', runtime: '', reserved: 'Headroom', free: 'Free' };
const gib = (x) => `${num(x, 3)} GiB`;
const MIN_GIB = 0.01; // parts smaller than this (rounding) are not drawn

/** The panel; `gpuOf()` says which catalog GPU the dials are on (a custom GPU falls back to H100 SXM). */
export function createExplain(parent, ctx, gpuOf) {
  ensureToolStyles();
  const box = h('details', { class: 'dials-explain', id: 'dials-explain' }, parent);
  h('summary', { text: 'Explain my launch command: paste vllm serve, llama-server or an SGLang launch' }, box);
  const form = h('form', { class: 'explain-form' }, box);
  const area = h('textarea', { rows: 3, spellcheck: 'false', id: 'explain-cmd', 'aria-label': 'Launch command',
    placeholder: EXAMPLES[0][1] }, form);
  const row = h('div', { class: 'explain-row' }, form);
  h('button', { type: 'submit', class: 'btn primary', text: 'Explain' }, row);
  const onGpu = h('span', { class: 'explain-gpu' }, row);
  const examples = h('span', { class: 'explain-examples' }, row);
  h('span', { text: 'Examples: ' }, examples);
  for (const [name, cmd] of EXAMPLES) {
    const b = h('button', { type: 'button', class: 'linkish', text: name, 'data-example': name }, examples);
    b.addEventListener('click', () => { area.value = cmd; run(); });
  }
  const status = h('p', { class: 'explain-status', role: 'status', 'aria-live': 'polite' }, box);
  const out = h('div', { class: 'explain-out', hidden: true }, box);

  function gpu() {
    const g = gpuOf();
    return g && g !== 'custom' ? g : 'h100-sxm';
  }
  let shownName = null; // the GPU's name once an answer came back for it
  function showGpu() {
    const id = gpu();
    onGpu.textContent = `on ${shownName && shownName[0] === id ? shownName[1] : id} (the dials' GPU)`;
  }

  async function run() {
    const cmd = area.value.trim();
    if (!cmd) { status.textContent = 'Paste a launch command first.'; return; }
    status.textContent = 'Reading the command…';
    try {
      const q = new URLSearchParams({ cmd, gpu: gpu() });
      const d = await ctx.fetchJSON(`/api/explain?${q}`);
      status.textContent = '';
      draw(d);
    } catch (err) {
      out.hidden = true;
      status.textContent = `Could not explain it: ${String(err.message).replace(/^cmd: /, '')}`;
    }
  }
  form.addEventListener('submit', (ev) => { ev.preventDefault(); run(); });

  function draw(d) {
    clear(out);
    out.hidden = false;
    out.dataset.engine = d.engine;
    shownName = [d.gpu, d.gpu_name];
    showGpu();
    h('p', { class: `explain-verdict ${d.fits ? 'fits' : 'no-fit'}`, text: d.verdict }, out);
    h('p', { class: 'card-note', text: `${d.engine} · ${d.model_name} · ${d.gpus > 1 ? `${d.gpus} × ` : ''}${d.gpu_name}, ` +
      `${gib(d.capacity_gib)} visible to CUDA per GPU` }, out);
    if (d.memory.length) {
      const bar = h('div', { class: 'explain-bar', role: 'img',
        'aria-label': d.memory.map((s) => `${s.label} ${gib(s.gib)}`).join(', ') }, out);
      const parts = d.memory.filter((s) => s.gib >= MIN_GIB);
      const total = parts.reduce((a, s) => a + s.gib, 0) || 1;
      const legend = h('ul', { class: 'explain-legend' }, out);
      for (const s of parts) {
        const w = (100 * s.gib) / total;
        const seg = h('div', { class: `xseg ${CLS[s.key]}`, title: `${s.label}: ${gib(s.gib)} (${s.note})`,
          'data-key': s.key, 'data-gib': String(s.gib) }, bar);
        seg.style.width = `${w}%`;
        const text = `${SHORT[s.key]} ${num(s.gib, 3)}`.trim();
        if ((w / 100) * bar.clientWidth > text.length * 7.5 + 16) h('span', { text }, seg); // a label only where it fits
        const li = h('li', { 'data-key': s.key }, legend);
        h('i', { class: CLS[s.key] }, li);
        h('span', { text: `${s.label} ` }, li);
        h('b', { text: gib(s.gib) }, li);
        h('small', { text: ` ${s.note}` }, li);
      }
    }
    h('h4', { text: `What ${d.engine} will print at start-up (predicted)` }, out);
    h('pre', { class: 'explain-log', text: d.log_lines.join('\n') }, out);
    if (d.suggestions.length) {
      h('h4', { text: 'Flags to change' }, out);
      const ul = h('ul', { class: 'explain-tips' }, out);
      for (const s of d.suggestions) {
        const li = h('li', {}, ul);
        h('span', { text: `${s.goal}: ` }, li);
        h('code', { text: s.change }, li);
        h('span', { text: ` (${s.effect})` }, li);
      }
    }
    h('p', { class: 'card-note explain-ignored', text: d.ignored.length
      ? `Read but not modelled (no effect on memory here): ${d.ignored.join(', ')}` : 'Every flag was read.' }, out);
    const more = h('details', { class: 'explain-assume' }, out);
    h('summary', { text: 'Assumptions' }, more);
    const al = h('ul', {}, more);
    for (const a of d.assumptions) h('li', { text: a }, al);
  }

  showGpu();
  return { update: showGpu, run, element: box };
}
