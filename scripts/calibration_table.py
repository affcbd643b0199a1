"""Write docs/calibration.md: the cost model's efficiency factors and predicted vs measured.

    python scripts/calibration_table.py           # rewrite docs/calibration.md
    python scripts/calibration_table.py --check   # exit 1 if the file is out of date

Everything in the document is computed here from the simulations and the catalogs, so it cannot
drift from the code: the references come from data/references.toml, the predictions from
sim.cost.serving.predict, the factors from sim.cost.costmodel.Efficiency.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from inside_llm.sim.cost import calibration, engines, roofline, serving
from inside_llm.sim.cost.costmodel import DEFAULT_EFFICIENCY, EngineConfig, memory_per_gpu
from inside_llm.sim.hardware import catalog

OUT = Path(__file__).resolve().parents[1] / "docs" / "calibration.md"

SOURCE_KEYS = [
    (
        "TRTLLM-0.6.1",
        "NVIDIA TensorRT-LLM `docs/source/performance.md` at v0.6.1: 'Peak Throughput' (H100 FP8 in "
        "output tokens/s per GPU; A100 FP16; L40S FP8 data from v0.5) and 'Low Latency' (batch 1, data from v0.5). "
        "Static batching (gptSessionBenchmark), FP8 engines built with --enable_fp8 --fp8_kv_cache; 'LLaMA 7B/70B' "
        "are Llama 2. https://github.com/NVIDIA/TensorRT-LLM/blob/v0.6.1/docs/source/performance.md",
    ),
    (
        "TRTLLM-H200",
        "TensorRT-LLM release/0.5.0 `docs/source/blogs/H200launch.md`, 'H200 FP8 Max throughput' "
        "(TensorRT-LLM v0.5.0, TensorRT 9.1.0.4). "
        "https://github.com/NVIDIA/TensorRT-LLM/blob/release/0.5.0/docs/source/blogs/H200launch.md",
    ),
    (
        "TRTLLM-1.0",
        "TensorRT-LLM performance overview (v1.0): trtllm-bench throughput, PyTorch backend, "
        "ModelOpt FP8 checkpoints, uniform ISL/OSL at an infinite request rate. "
        "https://nvidia.github.io/TensorRT-LLM/performance/perf-overview.html",
    ),
    (
        "TRTLLM-0.9",
        "NVIDIA TensorRT-LLM `docs/source/performance.md` at v0.9.0: 'Peak Throughput' (static batches, "
        "out tok/s per GPU, FP8 engines with FP8 KV cache) and 'Low Latency' (batch 1 first-token latency). "
        "https://github.com/NVIDIA/TensorRT-LLM/blob/v0.9.0/docs/source/performance.md",
    ),
    (
        "TRTLLM-2025",
        "TensorRT-LLM `docs/source/developer-guide/perf-overview.md` (2025): trtllm-bench under maximum "
        "load with in-flight batching, PyTorch backend, ModelOpt NVFP4/FP8 checkpoints, output tokens/s per GPU. "
        "https://nvidia.github.io/TensorRT-LLM/developer-guide/perf-overview.html",
    ),
    (
        "TORCHAO",
        "PyTorch torchao `torchao/quantization/README.md`, Benchmarks: one A100, batch 1, gpt-fast "
        "generate.py with torch.compile, BF16 vs INT4 weight-only (group 64). "
        "https://github.com/pytorch/ao/blob/main/torchao/quantization/README.md",
    ),
    (
        "VLLM-BK",
        "vLLM performance-benchmark CI, Buildkite build 9515, latency tests on H200 (input 32, output 128, "
        "batch 8, BF16). https://buildkite.com/vllm/performance-benchmark/builds/9515",
    ),
    (
        "NIM",
        "NVIDIA NIM LLM benchmarking guide 1.0.0, Performance, Llama-3.3-70b-instruct, NIM 1.8.0, 2x H100 "
        "fp8 TP2, AIPerf. https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance",
    ),
    (
        "OCI-MI300X",
        "Oracle Cloud Infrastructure blog, 'Serving Llama 3.1 405B model with AMD Instinct MI300X Accelerators' "
        "(Oct 10, 2024): one BM.GPU.MI300X.8, Llama 3.1 405B FP8 on all eight GPUs, vLLM benchmark_latency.py "
        "(input 128 / output 128) and benchmark_throughput.py. "
        "https://blogs.oracle.com/cloud-infrastructure/post/serving-llama-31-405b-model-with-amd-mi300x-gpus",
    ),
    (
        "AMD-PERF",
        "AMD ROCm developer hub, 'Performance results', vLLM 0.9.1 (docker rocm/vllm:rocm6.4.1_vllm_0.9.1_20250715), "
        "8 x MI300X, Latency Measurements. "
        "https://www.amd.com/en/developer/resources/rocm-hub/dev-ai/performance-results.html",
    ),
    (
        "MLPERF-4.0",
        "MLCommons inference_results_v4.0, closed/NVIDIA/results/DGX-H100_H100-SXM-80GBx8_TRT/"
        "llama2-70b-99.9/Offline/performance/run_1/mlperf_log_summary.txt and closed/NVIDIA/configs/llama2-70b/"
        "Offline/__init__.py. https://github.com/mlcommons/inference_results_v4.0",
    ),
]

FACTORS = [
    (
        "gemm_compute_bf16",
        lambda e: f"{e.gemm('bf16'):.2f}",
        "fraction of dense BF16/FP16 tensor peak reached by the model's GEMMs",
        "A100 FP16 time-to-first-token at 2,048 tokens (Llama 2 7B, 70B TP4); vLLM BF16 rows",
    ),
    (
        "gemm_compute_fp8",
        lambda e: f"{e.gemm('fp8'):.2f}",
        "fraction of dense FP8 peak reached by FP8 GEMMs (FP8 kernels reach a smaller share of their doubled peak)",
        "H100 FP8 time-to-first-token at 2,048 tokens; large-batch throughput (TensorRT-LLM 0.6.1 and 1.0)",
    ),
    ("gemm_compute_int8", lambda e: f"{e.gemm('int8'):.2f}", "same for INT8 W8A8", "no reference: assumed 0.45"),
    (
        "gemm_compute_fp4",
        lambda e: f"{e.gemm('fp4'):.2f}",
        "fraction of dense FP4 peak reached by NVFP4/MXFP4 GEMMs on Blackwell",
        "Llama 3.3 70B NVFP4 max-load rows on B200 and GB200 (TensorRT-LLM 2025)",
    ),
    (
        "moe_expert_compute",
        lambda e: f"{e.moe_expert_compute:.2f}",
        "share of the GEMM efficiency that routed-expert GEMMs reach in FP8/FP4 (ragged per-expert slices, routing)",
        "Mixtral 8x7B FP8 first-token latency and max-throughput rows on H100/H200 (TensorRT-LLM 0.9); FP16 on A100 "
        "needs no discount",
    ),
    (
        "fine_moe_stream",
        lambda e: f"{e.fine_moe_stream:.2f}",
        f"fine-grained MoE (experts narrower than {DEFAULT_EFFICIENCY.fine_moe_width:,}): share of the HBM efficiency "
        "its routed-expert weights stream at (~20 tokens per expert slice at full load)",
        "TensorRT-LLM 2025 max-load rows of Qwen3 30B-A3B (B200, GB200) and gpt-oss-120b (GB200)",
    ),
    (
        "fine_moe_compute",
        lambda e: f"{e.fine_moe_compute:.2f}",
        "fine-grained MoE: share of the expert GEMM efficiency its expert FLOPs reach, on any math path "
        "(gpt-oss's MXFP4 weights with BF16 math included)",
        "same rows",
    ),
    (
        "roofline_blend",
        lambda e: f"{e.roofline_blend:g}",
        "a kernel near the ridge takes (compute^p + memory^p)^(1/p) instead of max(): loads and math overlap imperfectly",
        "batch-1 128-token prefills (70B TP4 on A100 and H100), which sit at the ridge",
    ),
    (
        "prefill_pass_overhead_s",
        lambda e: f"{e.prefill_pass_overhead_s * 1e3:.1f} ms",
        "fixed cost of a pure prefill pass (context-phase setup, input preparation, first sampling)",
        "batch-1 TTFT of 128-token prompts (TensorRT-LLM 0.5 and 0.9, Llama 2 7B/70B, A100/H100/L40S)",
    ),
    (
        "scaleout_busbw_fraction",
        lambda e: f"{e.scaleout_busbw_fraction:.2f}",
        "achievable all-reduce bandwidth / NIC line rate across nodes",
        "assumed: NCCL over 400 Gb/s InfiniBand reaches ~90% of line rate at large messages; no cross-node reference yet",
    ),
    (
        "scaleout_latency_s",
        lambda e: f"{e.scaleout_latency_s * 1e6:.0f} us",
        "extra latency of an all-reduce or pipeline hand-off that crosses the network",
        "assumed; no cross-node reference yet",
    ),
    (
        "attention_compute",
        lambda e: f"{e.attention_compute:.2f}",
        "fraction of BF16 peak reached by attention math",
        "FlashAttention-2 reaches ~35% and FlashAttention-3 up to ~75% of H100 BF16 peak "
        "(Shah et al. 2024, arXiv:2407.08608); matters only for long prompts",
    ),
    (
        "hbm",
        lambda e: f"{e.hbm:.2f}",
        "fraction of peak HBM bandwidth reached when streaming weights and KV cache",
        "one-user inter-token latency (NIM 1.8, Llama 3.3 70B FP8 TP2) and batch-8 vLLM latency on H200",
    ),
    (
        "weight_only_4bit_stream",
        lambda e: f"{e.weight_only_4bit_stream:.2f}",
        "share of the HBM efficiency that weight-only 4-bit GEMMs (INT4 W4A16; FP4 without FP4 tensor cores) stream at",
        "batch-1 decode, INT4 weight-only vs BF16, Llama 2 7B and Llama 3 8B on one A100 (torchao)",
    ),
    (
        "per_layer_overhead_s",
        lambda e: f"{e.per_layer_overhead_s * 1e6:.0f} us",
        "kernel launches, norms, rotary, activation kernels: per layer per step",
        "same low-batch latency rows",
    ),
    (
        "step_overhead_s",
        lambda e: f"{e.step_overhead_s * 1e3:.1f} ms",
        "scheduler, sampling, host round trip: once per step",
        "same low-batch latency rows",
    ),
    (
        "allreduce_latency_s",
        lambda e: f"{e.allreduce_latency_s * 1e6:.0f} us",
        "fixed cost of one tensor-parallel all-reduce (two per layer)",
        "TP2/TP4 latency rows",
    ),
    (
        "allreduce_busbw_fraction",
        lambda e: f"{e.allreduce_busbw_fraction:.3f}",
        "achievable all-reduce bus bandwidth / one-direction link rate",
        "NCCL maintainer: 370 GB/s effective of 450 GB/s NVLink line rate on H100 (NVIDIA/nccl-tests#212)",
    ),
    (
        "runtime_reserve_fraction",
        lambda e: f"{e.runtime_reserve_fraction:.2f}",
        "memory held back for CUDA context, NCCL/cuBLAS workspaces, CUDA graphs, fragmentation",
        "vLLM's default gpu_memory_utilization = 0.9",
    ),
    (
        "prefill_chunk_tokens",
        lambda e: f"{e.prefill_chunk_tokens}",
        "largest prefill chunk per step (sizes activation buffers, not time)",
        "vLLM / TensorRT-LLM default max_num_batched_tokens / max_num_tokens = 8192",
    ),
]


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def _fmt(v: float) -> str:
    return f"{v:,.1f}" if v < 1000 else f"{v:,.0f}"


def _reference_rows() -> tuple[list[str], list[float]]:
    lines, errors = [], []
    for i, row in enumerate(calibration.table(), 1):
        ref, pred, err = row.ref, row.predicted, row.error
        if ref.in_scope:
            errors.append(abs(err))
        used = serving.reference_params(ref).batch
        batch = used if ref.batch is not None else f"{used} (largest that fits, cap {ref.max_batch})"
        setup = (
            f"{ref.model}, {ref.gpus}x {ref.gpu}, TP{ref.tp}, {ref.precision}/{ref.kv_precision} KV, "
            f"{ref.batching} batch {batch}, {ref.prompt_tokens} in / {ref.output_tokens} out"
        )
        flag = "" if ref.in_scope else " (not bounded)"
        profile = serving.resolve(serving.reference_params(ref))[0].efficiency.profile
        lines.append(
            f"| {i} | {ref.engine} | `{profile}` | {setup} | {ref.metric} | {_fmt(ref.measured)} | {_fmt(pred)} | "
            f"{err:+.1%}{flag} | {row.held_out_error:+.1%} | {_cell(ref.source)} |"
        )
    return lines, errors


def _source_rows() -> list[str]:
    """Per source: rows in scope, in-sample and held-out median |error|."""
    out = []
    rows = [r for r in calibration.table() if r.ref.in_scope]
    for src in sorted({r.source for r in rows}):
        mine = [r for r in rows if r.source == src]
        ins = statistics.median(abs(r.error) for r in mine)
        held = statistics.median(abs(r.held_out_error) for r in mine)
        worst = max(mine, key=lambda r: abs(r.held_out_error))
        out.append(f"| {src} | {len(mine)} | {ins:.1%} | {held:.1%} | {worst.held_out_error:+.1%} (`{worst.ref.id}`) |")
    return out


def _profile_rows() -> list[str]:
    out = []
    for p in engines.profiles().values():
        changes = "; ".join(p.factor_lines())
        out.append(
            f"| `{p.id}` | {p.label()} | {p.versions} | {'yes' if p.default else ''} | {_cell(changes)} | "
            f"{_cell(p.sources.get('fit', ''))} |"
        )
    return out


def counts() -> dict[str, int]:
    """How many references of each kind the calibration holds (the issue's targets)."""
    refs = catalog.references()
    return {
        "references": len(refs),
        "in scope": sum(r.in_scope for r in refs),
        "2025-26": sum(r.year >= 2025 for r in refs),
        "AMD": sum(catalog.gpu(r.gpu).vendor == "AMD" for r in refs),
        "fine-grained MoE / MLA": sum(calibration.is_fine_grained(r) or catalog.model(r.model).is_mla for r in refs),
    }


def _guide_figures() -> list[str]:
    h100, m70 = catalog.gpu("h100-sxm"), catalog.model("llama-3.1-70b")
    fp16 = memory_per_gpu(EngineConfig(m70, h100, precision="fp16"), 0, 0)
    dec = roofline.roofline().decode
    est = serving.estimate()
    node = catalog.node("h100-sxm")
    return [
        f"- Llama 3.1 70B weights at FP16: **{fp16.weights_gb:.0f} GB** (more than one {h100.hbm_capacity_gb} GB GPU)",
        f"- 70B shape: **{m70.hidden_size:,} numbers per token, {m70.num_hidden_layers} layers**",
        f"- H100 SXM: **{h100.hbm_capacity_gb} GB at {h100.hbm_bandwidth_tb_s} TB/s**, {h100.sm_count} SMs x "
        f"{h100.tensor_cores_per_sm} tensor cores, {h100.l2_cache_mb} MB L2",
        f"- Decoding one chat (70B, 8x H100, BF16): **{dec.share_of_peak:.2%} of the math** used "
        f"(intensity {dec.arithmetic_intensity:.2f} FLOP/byte vs ridge {roofline.roof(h100).ridge_flops_per_byte:.0f})",
        f"- NVLink: **{h100.interconnect_bandwidth_gb_s:.0f} GB/s per GPU** (both directions), "
        f"{node.nvswitch_chips} NVSwitch chips per 8-GPU node",
        f"- Dials default (8x H100, TP8, BF16, batch {serving.ServingParams().batch}, $3/GPU-hour): "
        f"TTFT {est.ttft_ms:.0f} ms, {est.tokens_per_s_per_user:.0f} tokens/s per user, "
        f"{est.tokens_per_s_total:,.0f} tokens/s total, ${est.cost_per_million_tokens_usd:.2f} per million output tokens",
    ]


def render() -> str:
    """The whole document as text."""
    eff = DEFAULT_EFFICIENCY
    ref_lines, errors = _reference_rows()
    in_med, held_med = calibration.medians()
    parts = [
        "# Cost-model calibration: predicted vs measured",
        "",
        "Generated by `scripts/calibration_table.py` from `src/inside_llm/data/references.toml` and the",
        "simulations; do not edit by hand. `tests/sim/cost/test_calibration.py` holds every in-scope row to",
        "+-25%, the in-sample median error at or below 8% and the leave-one-source-out median at or below 12%.",
        "",
        "## How a prediction is made",
        "",
        "Each reference's conditions (model, GPU, GPU count, tensor/pipeline split, weight and KV precision,",
        "batch, input and output tokens) are fed to `sim.cost.serving.estimate`. Static batches run from prefill to",
        "their last token: TTFT is the prefill of the whole batch, TPOT the decode step at the mean context,",
        "throughput = replicas x batch x output / (TTFT + (output - 1) x TPOT). Each step is a per-kernel roofline",
        "(`sim.cost.costmodel.step_time`): GEMMs take max(FLOPs / achievable FLOP/s, weight bytes / achievable",
        "bandwidth), attention the same with KV bytes, then tensor-parallel all-reduces and fixed overheads add.",
        "Where an engine chose its own batch (max-throughput runs) the prediction uses the largest batch our",
        "memory model fits, capped at the engine's limit; runs with in-flight batching (`continuous` in the setup)",
        "are predicted in continuous-batching steady state: every step decodes the whole batch and prefills",
        "batch / output new prompts (`sim.cost.serving.continuous_step`).",
        "",
        "## Efficiency factors",
        "",
        "| factor | value | meaning | calibrated on / source |",
        "|---|---|---|---|",
        *[f"| `{name}` | {val(eff)} | {meaning} | {src} |" for name, val, meaning, src in FACTORS],
        "",
        "## Engine profiles",
        "",
        "The engine (and the GPU vendor's software stack) selects a profile (`data/engines.toml`, `sim.cost.engines`): "
        "scales of the efficiencies above and replacements of the fixed costs, each fitted on the named rows. "
        "`engine = auto` (the dials' default) picks the best published engine for the GPU's vendor.",
        "",
        "| profile | engine | versions | default | factors | fitted on |",
        "|---|---|---|---|---|---|",
        *_profile_rows(),
        "",
        "## References",
        "",
        f"In scope: {len(errors)} measurements ({sum(r.in_scope and r.year >= 2025 for r in catalog.references())} "
        f"published in 2025-26). In-sample median |error| **{in_med:.1%}**, max **{max(errors):.1%}**. "
        f"Leave-one-source-out median |error| **{held_med:.1%}**: each source's rows predicted by factors refitted "
        "without any of that source's rows (`sim.cost.calibration`), the figure to expect on a source the model has "
        "never seen. Error = predicted / measured - 1. "
        f"Counts: {', '.join(f'{v} {k}' for k, v in counts().items())}. Not yet covered: a measurement across "
        "nodes or on a 72-GPU NVLink domain, SGLang, and batch-1 decode at 8-way tensor parallelism on NVIDIA GPUs.",
        "",
        "### By source",
        "",
        "| source | rows in scope | in-sample median | held-out median | worst held-out |",
        "|---|---|---|---|---|",
        *_source_rows(),
        "",
        "A source that is the only one of its engine or model family is predicted, when held out, by factors "
        "that never saw it: with DSTACK-R1 held out, SGLang's profiles and every profile's MoE routing costs reset "
        "to the base (no other source measures them) and DeepSeek-R1 is priced as TensorRT-LLM would run it, so "
        "its held-out error is what the model says about an engine and a model it has no measurement of.",
        "",
        "### Every reference",
        "",
        "| # | engine | profile | setup | metric | measured | predicted | error | held out | source |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *ref_lines,
        "",
        "Source keys:",
        "",
        *[f"- **{key}**: {text}" for key, text in SOURCE_KEYS],
        "",
        "### Rows not held to the bound",
        "",
        *[f"- `{r.id}`: {r.out_of_scope_reason}" for r in catalog.references() if not r.in_scope],
        "",
        "## The guide's figures, as the simulations produce them",
        "",
        *_guide_figures(),
        "",
    ]
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = OUT.read_text() if OUT.is_file() else ""
        if current != text:
            print(f"{OUT} is out of date: run python scripts/calibration_table.py", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
