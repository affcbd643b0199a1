"""Measure the real model offline and store the result with its provenance (chapter 8).

    python scripts/measure_real_model.py [--windows 8] [--out src/inside_llm/demo/smollm2_quality.json]

Loads SmolLM2-135M-Instruct the way the server does (inside_llm.modelfile.served_smollm: the fetched
GGUF, checked by size and sha256, dequantized to float32), measures the held-out perplexity of its own
weights and of each further quantization (sim.real_quality), and writes the JSON the chapter serves.
tests/sim/test_real_quality.py recomputes a subset to prove the stored numbers are real.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from inside_llm import modelfile
from inside_llm.sim import real_quality

OUT = Path(__file__).resolve().parent.parent / "src" / "inside_llm" / "demo" / "smollm2_quality.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--windows", type=int, default=real_quality.NUM_WINDOWS)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    model = modelfile.served_smollm()
    if model is None:
        sys.exit(f"SmolLM2 is not installed: {modelfile.HOW_TO_FETCH}")
    t0 = time.perf_counter()
    data = real_quality.build(model, {"file": modelfile.FILE_NAME, "file_sha256": modelfile.SHA256,
                                      "package": modelfile.PACKAGE,
                                      "command": "python scripts/measure_real_model.py"
                                                 + (f" --windows {args.windows}" if args.windows != real_quality.NUM_WINDOWS else "")},
                              num_windows=args.windows)
    data["measured_s"] = round(time.perf_counter() - t0, 1)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out} in {data['measured_s']} s")


if __name__ == "__main__":
    main()
