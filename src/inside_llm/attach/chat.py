"""Chapter 11's question through an attached server: the tour's server relays one streamed chat to the server's
/v1/chat/completions, measures it as it passes (time to first token, inter-token time), and sets the cost model's
prediction for the setup the visitor says that server runs on beside it, with the error.

The server is one the operator attached (targets.py), picked by its name; the visitor sends only the question, an
answer length and the setup (cost-model inputs: catalog model and GPU, GPU count, sharding, precision), so nothing
a request carries names a network address. The model asked for is the first the server lists at /v1/models (else
the one its /metrics names).

Bounds, each said in words when reached: the question at most MAX_PROMPT_CHARS characters, at most MAX_TOKENS
tokens asked for, the whole relay within TOTAL_TIME_S (connect within CONNECT_TIMEOUT_S, READ_TIMEOUT_S at most
between two chunks), at most MAX_STREAM_BYTES read from the server, no redirect followed, no proxy from the
environment. Fair share (Shares): one relay at a time per visitor's address and PER_TARGET at a time per attached
server; more get a 429 with Retry-After at once, never a wait. Counted per worker process.

Measured at the tour's server, so the browser's own leg is not in it: TTFT from sending the request to the first
piece of content; inter-token time (last content - first content) / (tokens - 1), as `vllm bench serve` defines
TPOT, with the tokens as the server's usage counts them (a server may send several in one chunk). The prediction is
measure.predict for the setup at batch 1 (this question alone) and the prompt and answer lengths the server counted.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator

import httpx

from ..model_work import Busy
from .measure import TooMuch, chat_body, sse_data
from .measure import predict as predict_batch
from .targets import Target

MAX_PROMPT_CHARS = 2_000
MAX_TOKENS = 256
DEFAULT_TOKENS = 64
TOTAL_TIME_S = 60.0
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
MODELS_TIMEOUT_S = 3.0
MAX_MODELS_BYTES = 64 * 1024
MAX_STREAM_BYTES = 1_000_000
MAX_ERROR_BYTES = 4 * 1024
PER_CLIENT = 1
PER_TARGET = 4
RETRY_AFTER_S = 2


class Shares:
    """Relays in flight, per visitor's address and per attached server. take() refuses at once (Busy) over a
    share; the caller gives back in a finally. Only touched on the event loop, never across an await."""

    def __init__(self, per_client: int = PER_CLIENT, per_target: int = PER_TARGET):
        self.per_client, self.per_target = per_client, per_target
        self.clients: Counter = Counter()
        self.targets: Counter = Counter()

    def take(self, client: str, target: str) -> None:
        if self.clients[client] >= self.per_client:
            raise Busy(
                f"you already have {self.clients[client]} question going through an attached server (at most "
                f"{self.per_client} at a time per visitor); wait for its answer",
                RETRY_AFTER_S,
            )
        if self.targets[target] >= self.per_target:
            raise Busy(
                f"{self.targets[target]} questions are already going through '{target}' (at most "
                f"{self.per_target} at a time, from all visitors); try again in a few seconds",
                RETRY_AFTER_S,
            )
        self.clients[client] += 1
        self.targets[target] += 1

    def give(self, client: str, target: str) -> None:
        for c, k in ((self.clients, client), (self.targets, target)):
            c[k] -= 1
            if c[k] <= 0:
                del c[k]


class Failed(Exception):
    """The attached server did not give an answer; str() says why, in words."""


def _client() -> httpx.AsyncClient:
    return httpx.AsyncClient(
        follow_redirects=False,
        trust_env=False,  # no proxy or .netrc from the environment
        timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
        limits=httpx.Limits(max_connections=2, max_keepalive_connections=0),
    )


def _words(e: Exception, what: str) -> str:
    if isinstance(e, httpx.ConnectError):
        return f"Nothing answers at its address ({what}: the connection was refused or failed)."
    if isinstance(e, httpx.TimeoutException):
        return f"It went quiet: nothing came for {READ_TIMEOUT_S:g} s ({what})."
    return f"The connection failed ({what}: {type(e).__name__})."


def _their_message(status: int, body: bytes) -> str:
    """An HTTP error from the server, with its own message when it sent one (OpenAI's or FastAPI's shape)."""
    said = ""
    try:
        j = json.loads(body.decode("utf-8", errors="replace"))
        err = j.get("error") if isinstance(j, dict) else None
        said = err.get("message") if isinstance(err, dict) else err if isinstance(err, str) else None
        said = said or (j.get("detail") if isinstance(j, dict) and isinstance(j.get("detail"), str) else "")
        said = said or (j.get("message") if isinstance(j, dict) and isinstance(j.get("message"), str) else "")
    except (ValueError, AttributeError):
        said = body.decode("utf-8", errors="replace").strip()
    said = " ".join(str(said).split())[:300]
    if 300 <= status < 400:
        return f"It answered HTTP {status}, a redirect; redirects are not followed."
    return f"It answered HTTP {status}" + (f": {said}" if said else ".")


async def model_id(client: httpx.AsyncClient, target: Target, fallback: list[str] | None = None) -> str:
    """The first model the server lists at /v1/models, else the first its /metrics named; Failed otherwise."""
    try:
        async with asyncio.timeout(MODELS_TIMEOUT_S):
            async with client.stream("GET", f"{target.base_url}/v1/models") as r:
                buf = bytearray()
                async for chunk in r.aiter_bytes():
                    buf += chunk
                    if len(buf) > MAX_MODELS_BYTES:
                        break
                if r.status_code == 200 and len(buf) <= MAX_MODELS_BYTES:
                    data = json.loads(bytes(buf))["data"]
                    if data and isinstance(data[0].get("id"), str):
                        return data[0]["id"]
    except (httpx.ConnectError, httpx.ConnectTimeout) as e:  # nothing there: no fallback helps
        raise Failed(_words(e, "asking for its models")) from None
    except (TimeoutError, httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError, IndexError):
        pass
    if fallback:
        return fallback[0]
    raise Failed("It lists no model at /v1/models, and its /metrics names none, so the tour cannot ask it.")


def _stats(t0: float, arrivals: list[float], pieces: int, usage: dict | None) -> dict:
    n = int(usage["completion_tokens"]) if usage and usage.get("completion_tokens") else pieces
    first, last = arrivals[0], arrivals[-1]
    return {
        "ttft_ms": 1e3 * (first - t0),
        "itl_ms": 1e3 * (last - first) / (n - 1) if n > 1 else None,
        "output_tokens": n,
        "prompt_tokens": int(usage["prompt_tokens"]) if usage and usage.get("prompt_tokens") else None,
        "chunks": pieces,
        "total_ms": 1e3 * (last - t0),
        "tokens_from": "usage" if usage and usage.get("completion_tokens") else "chunks",
    }


async def relay(target: Target, prompt: str, max_tokens: int, fallback_models: list[str] | None = None,
                total_s: float = TOTAL_TIME_S) -> AsyncIterator[tuple[str, dict]]:  # fmt: skip
    """("start", {model}), then ("token", {text}) per piece of content as it arrives, then ("done", measured
    figures) or ("error", {detail}) in words. Never raises for anything the server does. The server is read by a
    task of its own (bounded by total_s, timed as it reads, whatever the consumer's pace); leaving early (the
    visitor went away) cancels it."""
    q: asyncio.Queue = asyncio.Queue()
    task = asyncio.create_task(_read(q.put_nowait, target, prompt, max_tokens, fallback_models, total_s))
    try:
        while True:
            event = await q.get()
            yield event
            if event[0] in ("done", "error"):
                return
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _read(put, target: Target, prompt: str, max_tokens: int, fallback_models: list[str] | None,
                total_s: float) -> None:  # fmt: skip
    try:
        async with asyncio.timeout(total_s), _client() as client:
            model = await model_id(client, target, fallback_models)
            put(("start", {"name": target.name, "model": model, "max_tokens": max_tokens}))
            body = chat_body(model, prompt, max_tokens)
            arrivals: list[float] = []
            pieces, usage, finish = 0, None, None
            t0 = time.perf_counter()
            async with client.stream("POST", f"{target.base_url}/v1/chat/completions", json=body) as r:
                if r.status_code != 200:
                    head = bytearray()
                    async for chunk in r.aiter_bytes():
                        head += chunk
                        if len(head) >= MAX_ERROR_BYTES:
                            break
                    raise Failed(_their_message(r.status_code, bytes(head[:MAX_ERROR_BYTES])))
                async for data in sse_data(r, MAX_STREAM_BYTES):
                    if data == "[DONE]":
                        break
                    try:
                        chunk = json.loads(data)
                        if chunk.get("usage"):
                            usage = chunk["usage"]
                        for choice in chunk.get("choices") or ():
                            text = (choice.get("delta") or {}).get("content")
                            finish = choice.get("finish_reason") or finish
                            if text:
                                arrivals.append(time.perf_counter())
                                pieces += 1
                                put(("token", {"text": text}))
                    except (ValueError, AttributeError, TypeError):
                        raise Failed("It answered with something that is not an OpenAI chat stream.") from None
            if not arrivals:
                raise Failed("It ended its answer without writing a token.")
            put(("done", {**_stats(t0, arrivals, pieces, usage), "finish_reason": finish, "model": model}))
    except TimeoutError:
        put(("error", {"detail": f"It did not finish its answer within {total_s:g} s; the tour stopped there."}))
    except (Failed, TooMuch) as e:
        put(("error", {"detail": str(e)}))
    except httpx.HTTPError as e:
        put(("error", {"detail": _words(e, "asking for the answer")}))
    except Exception as e:  # anything else is still this server's failure, said so, never the tour's 500
        put(("error", {"detail": f"Reading its answer failed ({type(e).__name__})."}))


def predict(setup: dict, prompt_tokens: int, output_tokens: int) -> dict:
    """The cost model's figures for this one question alone on `setup` (measure.predict at batch 1), its time per
    output token named as the inter-token time the card compares."""
    p = predict_batch(setup, 1, prompt_tokens, output_tokens)
    return {"ttft_ms": p["ttft_ms"], "itl_ms": p["tpot_ms"]} | {
        k: p[k] for k in ("fits", "not_fit_reason", "engine_profile", "batch", "prompt_tokens", "output_tokens")
    }


def compare(measured: dict, setup: dict | None) -> dict:
    """`measured` (a done event) with the prediction for `setup` and the error of each figure, in %:
    (measured - predicted) / predicted."""
    if not setup:
        return {**measured, "setup": None, "predicted": None, "error_pct": None}
    prompt = measured.get("prompt_tokens")
    if not prompt:
        why = "the server did not count the prompt's tokens (no usage in its stream), so nothing is predicted"
        return {**measured, "setup": setup, "predicted": None, "error_pct": None, "no_prediction": why}
    p = predict(setup, prompt, measured["output_tokens"])
    err = lambda m, q: None if m is None or not q else 100.0 * (m - q) / q  # noqa: E731
    return {
        **measured,
        "setup": setup,
        "predicted": p,
        "error_pct": {
            "ttft_ms": err(measured["ttft_ms"], p["ttft_ms"]),
            "itl_ms": err(measured["itl_ms"], p["itl_ms"]),
        },
    }
