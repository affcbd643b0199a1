"""Run every benchmark (bench/bench_*.py, each exposing run() -> list of rows) and print one table.

    python bench/run.py [name-filter]

A row is {"name", "value", "unit", "note"}. Benchmarks print figures; they never pass or fail.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str]) -> int:
    pattern = argv[0] if argv else ""
    rows: list[tuple[str, dict]] = []
    for path in sorted(HERE.glob("bench_*.py")):
        if pattern not in path.stem:
            continue
        t0 = time.perf_counter()
        print(f"running {path.stem} ...", file=sys.stderr, flush=True)
        for row in load(path).run():
            rows.append((path.stem.removeprefix("bench_"), row))
        print(f"  done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    width = max((len(r["name"]) for _, r in rows), default=10)
    print(f"{'suite':<14} {'benchmark':<{width}} {'value':>12}  unit         note")
    for suite, r in rows:
        v = r["value"]
        vs = f"{v:,.3f}" if isinstance(v, float) and abs(v) < 1000 else f"{v:,.0f}" if isinstance(v, (int, float)) else str(v)
        print(f"{suite:<14} {r['name']:<{width}} {vs:>12}  {r.get('unit', ''):<12} {r.get('note', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
