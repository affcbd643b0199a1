"""`inside-llm estimate` and `inside-llm explain`: the dials and the launch-command explainer in a terminal.

Exit codes: 0 the setup fits (or the ask is feasible), 1 it does not fit (or the ask is infeasible; for a
sweep: no point fits), 2 the input is refused (the message names the field, as the API's 422 does).

    inside-llm estimate --model llama-3.1-70b --gpu h100-sxm --gpus 8 --tp 8 --batch 64 --prompt-tokens 2048 --output-tokens 256 --csv
    inside-llm estimate --model llama-3.1-8b --gpu l4 --tp 1 --sweep batch=1,2,4,8,16,32 --csv
    inside-llm estimate --model llama-3.1-70b --tp 4 --solve batch --max-ttft-ms 2000 --min-tokens-per-s-per-user 20
    inside-llm explain --gpu h100-sxm -- vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32768
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import replace
from typing import Any

EXIT_FITS, EXIT_NO_FIT, EXIT_REFUSED = 0, 1, 2
SWEEPABLE = {
    "batch": int,
    "prompt_tokens": int,
    "output_tokens": int,
    "gpus": int,
    "tp": int,
    "pp": int,
    "price_per_gpu_hour": float,
    "precision": str,
    "kv_precision": str,
    "gpu": str,
    "model": str,
}
SHOWN = (
    ("ttft_ms", "Time to first token", "ms", ",.0f"),
    ("tokens_per_s_per_user", "Tokens/s per user", "tokens/s", ",.1f"),
    ("tokens_per_s_total", "Tokens/s, all GPUs", "tokens/s", ",.0f"),
    ("cost_per_million_tokens_usd", "Cost per million tokens", "USD", ",.2f"),
)


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    """Register `estimate` and `explain` on the CLI's subparsers."""
    from .sim.cost import serving
    from .sim.hardware import catalog

    d = serving.ServingParams()
    e = sub.add_parser(
        "estimate",
        help="the dials in a terminal: TTFT, tokens/s, cost and memory of one setup (or a sweep, or a solve)",
        description="Estimate one serving setup (the dials' model). Exit 0: fits; 1: does not fit; 2: bad input.",
    )
    e.add_argument("--model", default=d.model, help=f"catalog model id (default {d.model}; see /api/catalog)")
    e.add_argument("--gpu", default=d.gpu, help=f"catalog GPU id (default {d.gpu})")
    e.add_argument("--gpus", type=int, default=None, help="GPUs in the server (default: tp x pp, or 8)")
    e.add_argument("--tp", type=int, default=None, help="tensor-parallel GPUs per replica (default: min(gpus, 8))")
    e.add_argument("--pp", type=int, default=1, help="pipeline stages per replica (default 1)")
    e.add_argument("--precision", default=d.precision, help="weight precision: bf16|fp16|fp8|int8|int4|nvfp4|mxfp4")
    e.add_argument("--kv-precision", default=d.kv_precision, help="KV-cache precision: bf16|fp8|int8|int4")
    e.add_argument("--batch", type=int, default=d.batch, help=f"requests run together per replica (default {d.batch})")
    e.add_argument("--prompt-tokens", type=int, default=d.prompt_tokens, help=f"default {d.prompt_tokens}")
    e.add_argument("--output-tokens", type=int, default=d.output_tokens, help=f"default {d.output_tokens}")
    e.add_argument(
        "--price",
        dest="price_per_gpu_hour",
        metavar="PRICE",
        type=float,
        default=d.price_per_gpu_hour,
        help="USD per GPU-hour (default 3)",
    )
    e.add_argument(
        "--mode",
        dest="throughput_mode",
        choices=serving.THROUGHPUT_MODES,
        default=d.throughput_mode,
        help="batching assumed",
    )
    e.add_argument("--engine", default=d.engine, help="engine profile: auto|tensorrt-llm|vllm|sglang (default auto)")
    out = e.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON (the API's figures)")
    out.add_argument("--csv", action="store_true", help="print CSV: a header and one row per setup")
    e.add_argument("--sweep", metavar="FIELD=V1,V2,...", help=f"one row per value of a field ({', '.join(SWEEPABLE)})")
    e.add_argument(
        "--solve",
        choices=("batch", "context", "gpus"),
        help="batch: the largest batch within the limits; context: the longest prompt that fits at --batch; "
        "gpus: the fewest GPUs for --users concurrent users",
    )
    e.add_argument("--max-ttft-ms", type=float, default=None, help="--solve batch|gpus: time-to-first-token limit")
    e.add_argument("--min-tokens-per-s-per-user", type=float, default=None, help="--solve batch|gpus: speed floor")
    e.add_argument("--users", type=int, default=None, help="--solve gpus: concurrent users to serve")
    e.set_defaults(func=_estimate)

    x = sub.add_parser(
        "explain",
        help="explain a launch command: vllm serve / llama-server / python -m sglang.launch_server",
        description="Where each GiB of a launch command goes and what the engine will print. "
        "Put the command after `--`. Exit 0: it starts; 1: it will not; 2: the command is refused.",
    )
    x.add_argument("--gpu", default=catalog.DEFAULT_GPU, help=f"catalog GPU id (default {catalog.DEFAULT_GPU})")
    x.add_argument("--model", default=None, help="catalog model id, when the command's model name is not known")
    x.add_argument("--json", action="store_true", help="print JSON (as GET /api/explain)")
    x.add_argument("words", nargs=argparse.REMAINDER, help="the launch command, after --")
    x.set_defaults(func=_explain)


def _refused(what: str, err: Exception) -> int:
    field = getattr(err, "field", "")
    print(f"inside-llm {what}: {field + ': ' if field else ''}{getattr(err, 'message', err)}", file=sys.stderr)
    return EXIT_REFUSED


def _params(a: argparse.Namespace) -> Any:
    from .sim.cost import serving

    tp, gpus = a.tp, a.gpus
    if tp is None:
        tp = min(gpus, 8) if gpus else 8
    if gpus is None:
        gpus = tp * a.pp
    return serving.params_from(a, gpus=gpus, tp=tp)


def _human(r: dict[str, Any]) -> str:
    lines = [
        f"{r['model']} on {r['gpus']} x {r['gpu']} (tp {r['tp']}, pp {r['pp']}, {r['precision']}), batch {r['batch']}, "
        f"{r['prompt_tokens']} in / {r['output_tokens']} out"
    ]
    for key, label, unit, fmt in SHOWN:
        v = r[key]
        lines.append(f"  {label:<26} {format(v, fmt) + ' ' + unit if v is not None else '-'}")
    spare = r["memory_spare_gb"]
    lines.append(f"  {'Spare memory per GPU':<26} {spare:,.1f} GB of {r['memory_capacity_gb']:,.0f} GB")
    lines.append(f"  {'Largest batch that fits':<26} {r['max_batch']:,}")
    lines.append("  fits" if r["fits"] else f"  DOES NOT FIT: each GPU is {r['memory_shortfall_gb']:,.1f} GB short")
    return "\n".join(lines)


def _print_rows(a: argparse.Namespace, rows: list[dict[str, Any]], data: Any = None) -> None:
    from .sim.cost import table

    if a.csv:
        sys.stdout.write(table.to_csv(rows))
    elif a.json:
        print(json.dumps(data if data is not None else rows, indent=2))
    else:
        print("\n\n".join(_human(r) for r in rows))


def _sweep_values(spec: str) -> tuple[str, list[Any]]:
    from .sim.core.errors import SimError

    field, eq, raw = spec.partition("=")
    field = field.strip().replace("-", "_")
    if not eq or field not in SWEEPABLE:
        raise SimError(
            "sweep", f"--sweep takes FIELD=V1,V2,... with FIELD one of {', '.join(SWEEPABLE)}; got {spec!r}."
        )
    kind = SWEEPABLE[field]
    values = []
    for v in raw.split(","):
        try:
            values.append(kind(v.strip()))
        except ValueError:
            raise SimError("sweep", f"--sweep {field}: {v.strip()!r} is not a {kind.__name__}.") from None
    if not 1 <= len(values) <= 64:
        raise SimError("sweep", f"--sweep takes 1 to 64 values, not {len(values)}.")
    return field, values


def _estimate(a: argparse.Namespace) -> int:
    from .sim.core.errors import SimError
    from .sim.cost import serving, solve, table

    try:
        p = _params(a)
        if a.sweep:
            field, values = _sweep_values(a.sweep)
            rows = []
            for v in values:
                q = replace(p, **{field: v})
                if field in ("tp", "pp") and a.gpus is None:
                    q = replace(q, gpus=q.tp * q.pp)
                rows.append(table.estimate_row(q))
            _print_rows(a, rows)
            return EXIT_FITS if any(r["fits"] for r in rows) else EXIT_NO_FIT
        if a.solve:
            if a.solve == "batch":
                s = solve.largest_batch(p, a.max_ttft_ms, a.min_tokens_per_s_per_user)
            elif a.solve == "context":
                s = solve.longest_context(p)
            else:
                if a.users is None:
                    raise SimError("users", "--solve gpus needs --users N (concurrent users to serve).")
                s = solve.fewest_gpus(p, a.users, a.max_ttft_ms, a.min_tokens_per_s_per_user)
            rows = [table.estimate_row(s.params)] if s.params else []
            data = {
                "ask": s.ask,
                "feasible": s.feasible,
                "value": s.value,
                "binding": s.binding,
                "text": s.text,
                "setup": rows[0] if rows else None,
            }
            if a.csv or a.json:
                _print_rows(a, rows, data)
            else:
                print(s.text)
                if rows:
                    print(_human(rows[0]))
            if not a.csv and not a.json and not s.feasible:
                print(f"binding constraint: {s.binding}", file=sys.stderr)
            return EXIT_FITS if s.feasible else EXIT_NO_FIT
        row = table.estimate_row(p)
        _print_rows(a, [row], {"params": serving.params_dict(p), **serving.estimate(p).to_dict()} if a.json else None)
        return EXIT_FITS if row["fits"] else EXIT_NO_FIT
    except SimError as err:
        return _refused("estimate", err)


def _explain(a: argparse.Namespace) -> int:
    from .sim.core.errors import SimError
    from .sim.cost import launch

    words = a.words[1:] if a.words[:1] == ["--"] else a.words
    if not words:
        print(
            "inside-llm explain: put the launch command after --, e.g. `inside-llm explain -- vllm serve ...`",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    try:
        e = launch.explain(shlex.join(words), a.gpu, a.model)
    except SimError as err:
        return _refused("explain", err)
    if a.json:
        print(json.dumps(e.to_dict(), indent=2))
        return EXIT_FITS if e.fits else EXIT_NO_FIT
    print(f"{e.engine}: {e.model_name} on {e.gpus} x {e.gpu_name} ({e.capacity_gib:.2f} GiB visible per GPU)")
    print(e.verdict)
    if e.memory:
        print("\nOne GPU's memory:")
        for s in e.memory:
            print(f"  {s.label:<34} {s.gib:9.2f} GiB  {s.note}")
    print(f"\nWhat {e.engine} will print at start-up (predicted):")
    for line in e.log_lines:
        print(f"  {line}")
    if e.suggestions:
        print("\nFlags to change:")
        for s in e.suggestions:
            print(f"  {s.goal}: {s.change}  ({s.effect})")
    if e.ignored:
        print(f"\nRead but not modelled: {', '.join(e.ignored)}")
    return EXIT_FITS if e.fits else EXIT_NO_FIT
