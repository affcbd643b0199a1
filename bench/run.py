"""Run every benchmark and print one table: `make bench`, or

    python bench/run.py [name-filter ...] [--no-load] [--markdown]

Suites: bench/bench_*.py (each exposing run() -> rows) and bench/load.py (the loopback load test, about
four minutes; `--no-load` leaves it out). A name filter keeps the suites whose name contains it.
A row is {"name", "value", "unit", "note"} plus optional "p99" and "ratio" (value / the same server's
/healthz median, in the same run). The value column is the median where a row has several samples.
Benchmarks print figures; they never pass or fail. `--markdown` prints the table for docs/benchmarks.md.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def suites(patterns: list[str], with_load: bool) -> list[Path]:
    paths = sorted(HERE.glob("bench_*.py")) + ([HERE / "load.py"] if with_load else [])
    return [p for p in paths if not patterns or any(s in p.stem for s in patterns)]


def fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}" if abs(v) < 1000 else f"{v:,.0f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def table(rows: list[tuple[str, dict]], markdown: bool) -> str:
    head = ("suite", "benchmark", "median", "p99", "unit", "x healthz", "note")
    cells = [
        (
            s,
            r["name"],
            fmt(r["value"]),
            fmt(r.get("p99")),
            r.get("unit", ""),
            fmt(r.get("ratio")) if r.get("ratio") is not None else "",
            r.get("note", ""),
        )
        for s, r in rows
    ]
    if markdown:
        lines = [
            "| " + " | ".join(head) + " |",
            "|" + "|".join(["---"] * 2 + ["---:"] * 2 + ["---", "---:", "---"]) + "|",
        ]
        return "\n".join(lines + ["| " + " | ".join(c) + " |" for c in cells])
    w = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(head[:-1])]
    out = ["  ".join(h.ljust(w[i]) if i < 2 or i == 4 else h.rjust(w[i]) for i, h in enumerate(head[:-1])) + "  note"]
    for c in cells:
        out.append("  ".join(c[i].ljust(w[i]) if i < 2 or i == 4 else c[i].rjust(w[i]) for i in range(6)) + "  " + c[6])
    return "\n".join(out)


def main(argv: list[str]) -> int:
    flags = {a for a in argv if a.startswith("--")}
    patterns = [a for a in argv if not a.startswith("--")]
    rows: list[tuple[str, dict]] = []
    for path in suites(patterns, "--no-load" not in flags):
        t0 = time.perf_counter()
        print(f"running {path.stem} ...", file=sys.stderr, flush=True)
        try:
            for row in load(path).run():
                rows.append((path.stem.removeprefix("bench_"), row))
        except Exception as e:  # one broken suite should not hide the others' figures
            rows.append(
                (
                    path.stem.removeprefix("bench_"),
                    {"name": "(failed)", "value": None, "unit": "", "note": f"{type(e).__name__}: {e}"[:200]},
                )
            )
        print(f"  done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    print(f"machine: {machine()}")
    print(table(rows, "--markdown" in flags))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
