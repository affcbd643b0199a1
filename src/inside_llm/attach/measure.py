"""`inside-llm measure NAME_OR_URL`: a small, bounded load run against a serving engine's /v1/chat/completions (in
the spirit of `vllm bench serve`), printed beside the cost model's prediction for the setup the operator says the
server runs on, with the error.

    inside-llm measure vllm --concurrency 8 --requests 64 --prompt-tokens 512 --output-tokens 128 \
        --setup model=llama-3.1-8b,gpu=h100-sxm,gpus=1,tp=1,precision=bf16

The load: N requests (at most MAX_REQUESTS), C at a time (at most MAX_CONCURRENCY; each client sends its next
request when its last one ends), each streamed (`stream_options.include_usage`), its prompt about P words led by its
own number (so no two share a prefix), `max_tokens` O. Per request: time to first token (request sent → first
content), TPOT ((last token - first token) / (tokens - 1), as vllm bench defines it), tokens as the server's usage
counts them. The whole run stops at --time-cap (at most MAX_TIME_CAP_S); unfinished requests are cancelled and
counted as such. The server is named by the operator (a name from INSIDE_LLM_ATTACH, or a URL on this command line).

The prediction is `sim.cost.serving.estimate` for --setup with batch = C and the prompt and answer lengths the server
reported (mean of the finished requests), continuous batching. Exit: 0 measured, 1 no request finished, 2 refused
input (in words).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import os
import sys
import time
from dataclasses import dataclass, field

import httpx
import numpy as np

from .targets import ENV, Target, parse_target, parse_targets

MAX_REQUESTS = 256
MAX_CONCURRENCY = 64
MAX_PROMPT_TOKENS = 32_768
MAX_OUTPUT_TOKENS = 4_096
DEFAULT_TIME_CAP_S = 300.0
MAX_TIME_CAP_S = 1_800.0
READ_TIMEOUT_S = 120.0  # between two chunks of one stream
MAX_ANSWER_BYTES = 16_000_000  # read of one streamed answer at most (4,096 chunks of llama.cpp's ~1 KB with timings)
MAX_LINE_BYTES = 1_000_000  # one line of a stream at most: what a reader holds at once
SETUP_KEYS = {"model": str, "gpu": str, "gpus": int, "tp": int, "pp": int, "precision": str, "kv_precision": str,
              "engine": str}  # fmt: skip
WORDS = ("the", "cat", "sat", "on", "a", "mat", "and", "then", "it", "ran", "to", "see", "what", "was", "there")
EXIT_OK, EXIT_NONE, EXIT_REFUSED = 0, 1, 2


class Refused(ValueError):
    """Bad input to `measure`, in words."""


class TooMuch(ValueError):
    """A stream that sent more than its cap, in words."""


async def sse_data(r: httpx.Response, max_bytes: int = MAX_ANSWER_BYTES):
    """The `data:` payloads of a server-sent-event response, read as bytes: the whole body is capped at
    `max_bytes` and one line at MAX_LINE_BYTES (httpx's aiter_lines would hold a line of any length), so what
    a reader holds is bounded whatever the server sends; TooMuch past either."""
    read, buf = 0, bytearray()
    async for chunk in r.aiter_bytes():
        read += len(chunk)
        if read > max_bytes:
            raise TooMuch(f"It sent more than {max_bytes / 1e6:g} MB for one answer; reading stopped there.")
        buf += chunk
        if b"\n" not in chunk:
            if len(buf) > MAX_LINE_BYTES:
                raise TooMuch(f"It sent a line of more than {MAX_LINE_BYTES / 1e6:g} MB; reading stopped there.")
            continue
        *lines, rest = bytes(buf).split(b"\n")
        buf = bytearray(rest)
        for line in lines:
            if line.startswith(b"data:"):
                yield line[5:].strip().decode("utf-8", "replace")
    if buf.startswith(b"data:"):
        yield bytes(buf[5:]).strip().decode("utf-8", "replace")


@dataclass
class Result:
    ok: bool
    ttft_s: float | None = None
    tpot_s: float | None = None
    latency_s: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int = 0
    error: str | None = None


@dataclass
class Run:
    target: str
    base_url: str
    model: str
    requests: int
    concurrency: int
    results: list[Result] = field(default_factory=list)
    wall_s: float = 0.0
    capped: bool = False


def resolve(name_or_url: str) -> Target:
    """An attached server's name (INSIDE_LLM_ATTACH) or a URL given on the command line."""
    if "://" in name_or_url:
        try:
            t = parse_target(f"url={name_or_url}")
        except ValueError as e:
            raise Refused(str(e).replace("'url'", "the server")) from None
        return Target(t.base_url, t.base_url, t.metrics_url)  # named by its URL
    targets = {t.name: t for t in parse_targets([os.environ.get(ENV, "")])}
    if name_or_url not in targets:
        known = ", ".join(targets) or f"none ({ENV} is empty)"
        raise Refused(f"No attached server is named {name_or_url!r} (attached: {known}); give its URL instead.")
    return targets[name_or_url]


def parse_setup(text: str | None) -> dict:
    """--setup model=...,gpu=...,gpus=...,tp=...,precision=... as ServingParams fields."""
    if not text:
        return {}
    out: dict = {}
    for part in text.split(","):
        key, eq, value = part.strip().partition("=")
        key = key.strip().replace("-", "_")
        if not eq or key not in SETUP_KEYS:
            raise Refused(f"--setup takes KEY=VALUE pairs with KEY one of {', '.join(SETUP_KEYS)}; got {part!r}.")
        try:
            out[key] = SETUP_KEYS[key](value.strip())
        except ValueError:
            raise Refused(f"--setup {key} must be a whole number, not {value.strip()!r}.") from None
    if "model" not in out or "gpu" not in out:
        raise Refused("--setup needs at least model=... and gpu=... (catalog ids, see inside-llm estimate --help).")
    out.setdefault("tp", out.get("gpus", 1))
    out.setdefault("gpus", out["tp"] * out.get("pp", 1))
    return out


def check_bounds(requests: int, concurrency: int, prompt_tokens: int, output_tokens: int, time_cap_s: float) -> None:
    for name, v, lo, hi in (
        ("--requests", requests, 1, MAX_REQUESTS),
        ("--concurrency", concurrency, 1, MAX_CONCURRENCY),
        ("--prompt-tokens", prompt_tokens, 1, MAX_PROMPT_TOKENS),
        ("--output-tokens", output_tokens, 1, MAX_OUTPUT_TOKENS),
        ("--time-cap", time_cap_s, 1, MAX_TIME_CAP_S),
    ):
        if not lo <= v <= hi:
            raise Refused(f"{name} must be between {lo:g} and {hi:,g}, not {v:g}.")
    if concurrency > requests:
        raise Refused(f"--concurrency ({concurrency}) cannot exceed --requests ({requests}).")


def prompt_for(i: int, words: int) -> str:
    body = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(max(0, words - 4)))
    return f"Request {i}. Continue: {body}"


async def _model_id(client: httpx.AsyncClient, base: str) -> str:
    try:
        r = await client.get(f"{base}/v1/models")
        r.raise_for_status()
        return r.json()["data"][0]["id"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        raise Refused(f"{base}/v1/models did not list a model; name one with --model-id.") from None


def chat_body(model: str, prompt: str, max_tokens: int) -> dict:
    """One greedy streamed chat completion of `prompt`, its usage in the last chunk (OpenAI's request)."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def one_request(client: httpx.AsyncClient, base: str, model: str, prompt: str, output_tokens: int,
                      ignore_eos: bool) -> Result:  # fmt: skip
    body = chat_body(model, prompt, output_tokens)
    if ignore_eos:
        body["ignore_eos"] = True  # vLLM, SGLang and llama.cpp run to max_tokens with it
    t0 = time.perf_counter()
    first = last = None
    pieces, usage = 0, None
    try:
        async with client.stream("POST", f"{base}/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                return Result(False, error=f"HTTP {r.status_code}")  # its body is left unread
            async for data in sse_data(r):
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for choice in chunk.get("choices") or ():
                    if (choice.get("delta") or {}).get("content"):
                        now = time.perf_counter()
                        first = first or now
                        last = now
                        pieces += 1
    except TooMuch as e:
        return Result(False, error=str(e))
    except (httpx.HTTPError, ValueError, AttributeError, TypeError) as e:  # not an OpenAI stream
        return Result(False, error=type(e).__name__)
    if first is None:
        return Result(False, error="no tokens")
    n = int(usage["completion_tokens"]) if usage and usage.get("completion_tokens") else pieces
    return Result(
        True,
        ttft_s=first - t0,
        tpot_s=(last - first) / (n - 1) if n > 1 else None,
        latency_s=last - t0,
        prompt_tokens=int(usage["prompt_tokens"]) if usage and usage.get("prompt_tokens") else None,
        output_tokens=n,
    )


async def run_load(target: Target, requests: int, concurrency: int, prompt_tokens: int, output_tokens: int,
                   time_cap_s: float = DEFAULT_TIME_CAP_S, model: str | None = None,
                   ignore_eos: bool = False, on_result=None) -> Run:  # fmt: skip
    """The load run; on_result(Result), when given, is called as each request ends (the tour's progress bar)."""
    check_bounds(requests, concurrency, prompt_tokens, output_tokens, time_cap_s)
    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=5.0)
    limits = httpx.Limits(max_connections=concurrency + 1, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=timeout, limits=limits, trust_env=False, follow_redirects=False) as client:
        model = model or await _model_id(client, target.base_url)
        run = Run(target.name, target.base_url, model, requests, concurrency)
        queue = iter(range(requests))

        async def worker():
            for i in queue:
                res = await one_request(
                    client, target.base_url, model, prompt_for(i, prompt_tokens), output_tokens, ignore_eos
                )
                run.results.append(res)
                if on_result is not None:
                    on_result(res)

        t0 = time.perf_counter()
        tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
        done, pending = await asyncio.wait(tasks, timeout=time_cap_s)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        run.capped = bool(pending)
        run.wall_s = time.perf_counter() - t0
    return run


def _stats(values: list[float]) -> dict | None:
    if not values:
        return None
    a = np.asarray(values) * 1e3
    return {"mean": float(a.mean()), "median": float(np.median(a)), "p95": float(np.percentile(a, 95))}


def summarize(run: Run, setup: dict) -> dict:
    """The run's figures (ms, tokens/s), the cost model's for the same workload, and the error of each."""
    ok = [r for r in run.results if r.ok]
    failed: dict[str, int] = {}
    for r in run.results:
        if not r.ok:
            failed[r.error or "?"] = failed.get(r.error or "?", 0) + 1
    unfinished = run.requests - len(run.results)
    out_tokens = sum(r.output_tokens for r in ok)
    prompts = [r.prompt_tokens for r in ok if r.prompt_tokens]
    prompt_mean = float(np.mean(prompts)) if prompts else None
    output_mean = out_tokens / len(ok) if ok else None
    measured = {
        "ttft_ms": _stats([r.ttft_s for r in ok]),
        "tpot_ms": _stats([r.tpot_s for r in ok if r.tpot_s is not None]),
        "output_tokens_per_s": out_tokens / run.wall_s if run.wall_s > 0 and ok else None,
        "requests_per_s": len(ok) / run.wall_s if run.wall_s > 0 and ok else None,
    }
    summary = {
        "target": run.target,
        "base_url": run.base_url,
        "model": run.model,
        "requests": run.requests,
        "concurrency": run.concurrency,
        "finished": len(ok),
        "failed": failed,
        "unfinished": unfinished,
        "stopped_at_time_cap": run.capped,
        "wall_s": run.wall_s,
        "prompt_tokens_mean": prompt_mean,
        "output_tokens_mean": output_mean,
        "measured": measured,
        "setup": setup or None,
        "predicted": None,
        "error_pct": None,
    }
    if setup and ok:
        summary["predicted"] = predict(setup, run.concurrency, prompt_mean or 1, output_mean or 1)
        p = summary["predicted"]
        err = lambda m, q: None if m is None or not q else 100.0 * (m - q) / q  # noqa: E731
        summary["error_pct"] = {
            "ttft_ms": err((measured["ttft_ms"] or {}).get("median"), p["ttft_ms"]),
            "tpot_ms": err((measured["tpot_ms"] or {}).get("median"), p["tpot_ms"]),
            "output_tokens_per_s": err(measured["output_tokens_per_s"], p["tokens_per_s_total"]),
        }
    return summary


def predict(setup: dict, concurrency: int, prompt_tokens: float, output_tokens: float) -> dict:
    """The dials' figures for the setup at batch = concurrency and the measured lengths (continuous batching);
    SimError (naming the field) for a setup it refuses. A setup that does not fit in memory still gets its
    figures (what it would do if it could run), marked fits: false with the reason."""
    from ..sim.cost import serving

    p = serving.ServingParams(
        **setup,
        batch=concurrency,
        prompt_tokens=max(1, round(prompt_tokens)),
        output_tokens=max(1, round(output_tokens)),
        throughput_mode="continuous",
    )
    e = serving.estimate(p)
    return {
        "ttft_ms": e.ttft_ms,
        "tpot_ms": e.tpot_ms,
        "tokens_per_s_total": e.tokens_per_s_total,
        "fits": e.fits,  # when not, the figures are hypothetical: what the setup would do if it could run
        "not_fit_reason": None if e.fits else e.to_dict()["hypothetical"]["reason"],
        "engine_profile": e.engine_profile,
        "batch": concurrency,
        "prompt_tokens": p.prompt_tokens,
        "output_tokens": p.output_tokens,
    }


# ---- output -------------------------------------------------------------------------------------------------

ROWS = (
    ("Time to first token", "ms", "ttft_ms", "ttft_ms"),
    ("Time per output token", "ms", "tpot_ms", "tpot_ms"),
    ("Output throughput", "tokens/s", "output_tokens_per_s", "tokens_per_s_total"),
)


def _fmt(v, spec=",.1f") -> str:
    return "-" if v is None else format(v, spec)


def table(s: dict) -> str:
    where = s["target"] if s["target"] == s["base_url"] else f"{s['target']} ({s['base_url']})"
    head = (
        f"{where}, model {s['model']}: {s['finished']} of {s['requests']} requests finished, "
        f"{s['concurrency']} at a time, in {s['wall_s']:.1f} s"
    )
    lines = [head]
    if s["prompt_tokens_mean"] is not None or s["output_tokens_mean"] is not None:
        lines.append(
            f"  tokens per request as the server counted them: {_fmt(s['prompt_tokens_mean'])} in, "
            f"{_fmt(s['output_tokens_mean'])} out"
        )
    if s["failed"]:
        lines.append("  failed: " + ", ".join(f"{n} x {why}" for why, n in s["failed"].items()))
    if s["unfinished"]:
        lines.append(f"  {s['unfinished']} not finished (stopped at the time cap)")
    p, e = s["predicted"], s["error_pct"]
    lines.append(f"  {'':<30}{'mean':>10}{'median':>10}{'p95':>10}{'predicted':>11}{'error':>9}")
    for label, unit, mkey, pkey in ROWS:
        m = s["measured"][mkey]
        if isinstance(m, dict) or m is None:
            mean, med, p95 = (m or {}).get("mean"), (m or {}).get("median"), (m or {}).get("p95")
        else:
            mean, med, p95 = None, m, None
        pred = p[pkey] if p else None
        err = e[mkey] if e else None
        err_s = "-" if err is None else f"{err:+.0f}%"
        name = f"{label} ({unit})"
        lines.append(f"  {name:<30}{_fmt(mean):>10}{_fmt(med):>10}{_fmt(p95):>10}{_fmt(pred):>11}{err_s:>9}")
    if p:
        lines.append(
            f"  predicted: {s['setup']['model']} on {s['setup']['gpus']} x {s['setup']['gpu']} (tp "
            f"{s['setup']['tp']}), batch {p['batch']}, {p['prompt_tokens']} in / {p['output_tokens']} out, "
            f"continuous batching; {p['engine_profile']}. Error: (measured median - predicted) / predicted."
        )
    else:
        lines.append("  no prediction: give --setup model=...,gpu=...,gpus=...,tp=...,precision=...")
    return "\n".join(lines)


def to_csv(s: dict) -> str:
    row = {k: s[k] for k in ("target", "model", "requests", "concurrency", "finished", "unfinished", "wall_s",
                             "prompt_tokens_mean", "output_tokens_mean")}  # fmt: skip
    for key in ("ttft_ms", "tpot_ms"):
        for stat in ("mean", "median", "p95"):
            row[f"{key}_{stat}"] = (s["measured"][key] or {}).get(stat)
    row["output_tokens_per_s"] = s["measured"]["output_tokens_per_s"]
    for key in ("ttft_ms", "tpot_ms", "tokens_per_s_total"):
        row[f"predicted_{key}"] = (s["predicted"] or {}).get(key)
    for key in ("ttft_ms", "tpot_ms", "output_tokens_per_s"):
        row[f"error_pct_{key}"] = (s["error_pct"] or {}).get(key)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(row), lineterminator="\n")
    w.writeheader()
    w.writerow({k: "" if v is None else v for k, v in row.items()})
    return buf.getvalue()


def add_subcommand(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser(
        "measure",
        help="a small load run against a serving engine, beside the cost model's prediction",
        description="Stream N chat completions, C at a time, from an OpenAI-compatible server (vLLM, SGLang, "
        "llama.cpp, TGI, NIM, this tour) and print measured TTFT, TPOT and throughput beside the cost model's "
        "prediction for --setup, with the error. Exit 0: measured; 1: no request finished; 2: refused input.",
    )
    m.add_argument("target", metavar="NAME_OR_URL", help=f"an attached server's name ({ENV}) or its base URL")
    m.add_argument("--concurrency", type=int, default=4, help=f"requests at a time (1-{MAX_CONCURRENCY}, default 4)")
    m.add_argument("--requests", type=int, default=16, help=f"requests in all (1-{MAX_REQUESTS}, default 16)")
    m.add_argument("--prompt-tokens", type=int, default=128, help="about this many words of prompt (default 128)")
    m.add_argument("--output-tokens", type=int, default=64, help="max_tokens of each answer (default 64)")
    m.add_argument("--setup", default=None, help="what the server runs on: model=ID,gpu=ID,gpus=N,tp=N,precision=P")
    m.add_argument("--model-id", default=None, help="the served model's id (default: the first of /v1/models)")
    m.add_argument("--ignore-eos", action="store_true", help="ask the server to write all --output-tokens")
    m.add_argument("--time-cap", type=float, default=DEFAULT_TIME_CAP_S,
                   help=f"seconds before the run stops (at most {MAX_TIME_CAP_S:g}, default {DEFAULT_TIME_CAP_S:g})")  # fmt: skip
    out = m.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON")
    out.add_argument("--csv", action="store_true", help="print CSV: a header and one row")
    m.set_defaults(func=main)


def main(a: argparse.Namespace) -> int:
    from ..sim.core.errors import SimError

    try:
        target = resolve(a.target)
        setup = parse_setup(a.setup)
        check_bounds(a.requests, a.concurrency, a.prompt_tokens, a.output_tokens, a.time_cap)
        if setup:
            predict(setup, a.concurrency, a.prompt_tokens, a.output_tokens)  # a bad setup is refused before the run
        run = asyncio.run(
            run_load(
                target,
                a.requests,
                a.concurrency,
                a.prompt_tokens,
                a.output_tokens,
                a.time_cap,
                a.model_id,
                a.ignore_eos,
            )  # fmt: skip
        )
    except (Refused, SimError) as e:
        field = getattr(e, "field", "")
        print(f"inside-llm measure: {field + ': ' if field else ''}{getattr(e, 'message', e)}", file=sys.stderr)
        return EXIT_REFUSED
    s = summarize(run, setup)
    if a.json:
        print(json.dumps(s, indent=2))
    elif a.csv:
        sys.stdout.write(to_csv(s))
    else:
        print(table(s))
    return EXIT_OK if s["finished"] else EXIT_NONE
