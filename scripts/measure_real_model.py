"""Measure the real model offline and store the result with its provenance (chapter 8).

    python scripts/measure_real_model.py [--windows 8] [--out src/inside_llm/demo/smollm2_quality.json]

Loads SmolLM2-135M-Instruct the way the server does (inside_llm.modelfile.served_smollm: the fetched
GGUF, checked by size and sha256, dequantized to float32), measures the held-out perplexity of its own
weights and of each further quantization (sim.quant.real_quality), and writes the JSON the chapter serves.
tests/sim/quant/test_real_quality.py recomputes a subset to prove the stored numbers are real.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from inside_llm import modelfile
from inside_llm.sim.quant import real_quality

OUT = Path(__file__).resolve().parent.parent / "src" / "inside_llm" / "demo" / "smollm2_quality.json"
DRAFTS = OUT.with_name("smollm2_drafts.json")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--windows", type=int, default=real_quality.NUM_WINDOWS)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--drafts-only", action="store_true", help="only chapter 9's draft comparison")
    ap.add_argument(
        "--served", action="store_true", help="only the served int8 form's perplexity, paired with the stored baseline"
    )
    args = ap.parse_args()
    model = modelfile.served_smollm()
    if model is None:
        sys.exit(f"SmolLM2 is not installed: {modelfile.HOW_TO_FETCH}")
    if args.drafts_only:
        return drafts(model)
    if args.served:
        return served(model)
    t0 = time.perf_counter()
    data = real_quality.build(
        model,
        {
            "file": modelfile.FILE_NAME,
            "file_sha256": modelfile.SHA256,
            "package": modelfile.PACKAGE,
            "command": "python scripts/measure_real_model.py"
            + (f" --windows {args.windows}" if args.windows != real_quality.NUM_WINDOWS else ""),
        },
        num_windows=args.windows,
    )
    data["measured_s"] = round(time.perf_counter() - t0, 1)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out} in {data['measured_s']} s")
    drafts(model)


def served(model, out: Path = OUT) -> None:
    """The served int8 form (sim/model/q8.py, what the engine decodes from) on the stored file's windows, paired window
    by window with its float32 baseline; stored as the file's `served` (chapter 8's "this server, now")."""
    import math

    import numpy as np

    stored = json.loads(out.read_text()) if out.exists() else sys.exit("no stored measurement to pair with")
    t0 = time.perf_counter()
    nll = real_quality.window_nll(
        model.served_form, real_quality.text_ids(model), stored["windows"], stored["window_tokens"]
    )
    base = np.array(stored["variants"][0]["window_nll"])
    d = nll - base
    ppl, ppl0 = math.exp(nll.mean()), math.exp(base.mean())
    form = model.served_form
    stored["served"] = {
        "format": "int8",
        "method": "INT8, symmetric, one float32 scale per output row, every layer matrix and the tied head "
        "(sim/model/q8.py: what the engine decodes from)",
        "bits_per_weight": 8 * form.bytes_per_token / sum(int(m.size) for m in _served_matrices(form)),
        "bytes_per_token": form.bytes_per_token,
        "perplexity": ppl,
        "baseline_perplexity": ppl0,
        "relative_change": ppl / ppl0 - 1,
        "delta_nll": float(d.mean()),
        "delta_nll_se": float(d.std(ddof=1) / math.sqrt(len(d))),
        "window_nll": [round(float(x), 6) for x in nll],
        "command": "python scripts/measure_real_model.py --served",
        "measured_s": round(time.perf_counter() - t0, 1),
    }
    out.write_text(json.dumps(stored, indent=1) + "\n")
    print(
        f"served int8: perplexity {ppl:.3f} vs {ppl0:.3f} float32 ({ppl / ppl0 - 1:+.2%}); "
        f"NLL {d.mean():+.4f} +- {stored['served']['delta_nll_se']:.4f} nats/token over {len(d)} windows; wrote {out}"
    )


def _served_matrices(form) -> list:
    return [m for w in form.layers for m in (w.qkv, w.wo, w.gu, w.w2)] + [form.unembed]


def drafts(model) -> None:
    """Chapter 9: prompt lookup against early exit as SmolLM2's draft, on its two example prompts."""
    from inside_llm.sim.decoding import speculative_demo as demo

    rows = demo.compare_drafts(demo.real_setup(model))
    for r in rows:
        print(
            f"{r['draft']:>28}  c = {r['cost_ratio']:.2f}  "
            + "  ".join(f"kept {x['acceptance_rate']:.0%} GPU time {x['gpu_time_speedup']:.2f}x" for x in r["runs"])
        )
    DRAFTS.write_text(
        json.dumps(
            {
                "model": model.name,
                "file_sha256": modelfile.SHA256,
                "gamma": 4,
                "max_tokens": 24,
                "command": "python scripts/measure_real_model.py --drafts-only",
                "drafts": rows,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {DRAFTS}")


if __name__ == "__main__":
    main()
