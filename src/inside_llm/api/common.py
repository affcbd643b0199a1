"""What the chapter routers share: parameter types, limits, and the one way a bad input becomes a 422.

Parameter types: the catalog's model and GPU ids, the weight and KV precisions, the request-length
workloads, and the seed field. Limits that a simulation enforces are defined in that simulation and
imported from there; this module only re-exports the ones several routers read.

422s: `unprocessable()` is the app's one handler for bad input. A simulation raises
`SimError(field, message)` (sim/core/errors.py) with the message in words; pydantic's own checks (bounds,
choices, types) are rewritten here into words that name the field and the bound. Every error keeps
FastAPI's shape (`detail: [{type, loc, msg, input, ctx}]`) and adds `field`, the parameter's name.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import AfterValidator, BaseModel, Field, ValidationInfo

from ..sim.core.derivation import Derivation
from ..sim.core.errors import SimError, words
from ..sim.hardware import catalog
from ..sim.hardware.hardware import KV_PRECISIONS, WEIGHT_PRECISIONS
from ..sim.serve.workloads import WORKLOADS

ModelId = Literal[tuple(catalog.models())]  # type: ignore[valid-type]
GpuId = Literal[tuple(catalog.gpus())]  # type: ignore[valid-type]
NodeGpu = Literal[tuple(catalog.nodes())]  # type: ignore[valid-type]
WeightPrecision = Literal[WEIGHT_PRECISIONS]  # type: ignore[valid-type]
KvPrecision = Literal[KV_PRECISIONS]  # type: ignore[valid-type]
Workload = Literal[tuple(WORKLOADS)]  # type: ignore[valid-type]
MAX_SEED = 2**31 - 1
MAX_REQUESTS = 1000  # requests in a trace a page may ask for (chapters 6 and 7; the sims take up to 10,000)


def seed_field(what: str) -> Any:
    """A seed parameter: `what` it seeds; any integer 0..2^31-1 (the same seed gives the same response)."""
    return Field(0, ge=0, le=MAX_SEED, description=f"Seed of {what} (no unit; 0-{MAX_SEED}).")


# ---- a model's decode on a tensor-parallel group (chapters 4 and 5) -----------------------------------------
TP_CHOICES = (1, 2, 4, 8)  # tensor-parallel groups within one 8-GPU node
MAX_CONTEXT = 131_072  # tokens of context; the chosen model's own window is checked too


def check_tp(tp: int) -> int:
    if tp not in TP_CHOICES:
        *most, last = map(str, TP_CHOICES)
        raise SimError("tp", f"Tensor parallel (tp) must be {', '.join(most)} or {last} GPUs, not {tp}.")
    return tp


def check_context(value: int, info: ValidationInfo) -> int:
    """Tokens of context must fit the chosen model's window (the model field is validated before this one)."""
    model_id = info.data.get("model")
    if model_id is not None:
        window = catalog.model(model_id).max_position_embeddings
        if value > window:
            raise SimError(
                info.field_name,
                f"{label(info.field_name)} must be at most {window:,} tokens, the context window of "
                f"{catalog.model(model_id).name}, not {value:,}.",
            )
    return value


# Give each its default and a description in the chapter's words: `tp: TensorParallel = Field(8, description=...)`.
TensorParallel = Annotated[int, Field(ge=1, le=8), AfterValidator(check_tp)]
ContextTokens = Annotated[int, Field(ge=1, le=MAX_CONTEXT, validate_default=True), AfterValidator(check_context)]


# ---- one computation per state: a result kept per parameter values -----------------------------------
R = TypeVar("R")


class _Values:
    """A parameter model as a cache key: its class and field values (a model that is not frozen is unhashable)."""

    __slots__ = ("key", "p")

    def __init__(self, p: BaseModel):
        self.p, self.key = p, (type(p), tuple(p.__dict__.items()))

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Values) and self.key == other.key


def per_params(maxsize: int = 64) -> Callable[[Callable[[Any], R]], Callable[[Any], R]]:
    """lru_cache for a pure function of one parameter model, keyed on its field values: the chapter's endpoint,
    its `facts(p)` and the page that renders the fact all read one result per state. The result is shared:
    callers must not change it."""

    def wrap(fn: Callable[[Any], R]) -> Callable[[Any], R]:
        kept = functools.lru_cache(maxsize=maxsize)(lambda v: fn(v.p))

        @functools.wraps(fn)
        def call(p: Any) -> R:
            return kept(_Values(p))

        call.cache_info = kept.cache_info  # type: ignore[attr-defined]
        call.cache_clear = kept.cache_clear  # type: ignore[attr-defined]
        return call

    return wrap


# ---- show-the-math: sim.core.derivation.Derivation is its own response model ----------------------
Math = Annotated[
    dict[str, Derivation], Field(description="Show-the-math: each headline field's name -> how it was computed.")
]


# ---- 422s in words -------------------------------------------------------------------------------

# How a parameter is called in a sentence; others read as their name with spaces ("prompt tokens").
LABELS = {
    "tp": "Tensor parallel (tp)",
    "pp": "Pipeline stages (pp)",
    "gpus": "The GPU count",
    "gpu": "The GPU",
    "model": "The model",
    "precision": "The weight precision",
    "kv_precision": "The KV-cache precision",
    "batch": "The batch",
    "prompt_tokens": "The prompt length",
    "output_tokens": "The answer length",
    "context": "The context",
    "micro_batches": "Micro-batches",
    "price_per_gpu_hour": "The price per GPU-hour",
    "rate": "The arrival rate",
    "requests": "Requests",
    "seats": "Seats",
    "seed": "The seed",
    "workload": "The workload",
    "block_size": "The block size",
    "compare": "The compared policy",
    "text": "The text",
    "cmd": "The command",
    "format": "The format",
    "x": "The swept input",
    "ask": "The question",
    "users": "The users",
    "max_ttft_ms": "The time-to-first-token limit",
    "min_tokens_per_s_per_user": "The tokens/s-per-user floor",
    "encoding": "The vocabulary",
    "prompt": "The prompt",
    "layer": "The layer",
    "alpha": "The acceptance rate (alpha)",
    "gamma": "Draft tokens per check (gamma)",
    "cost_ratio": "The draft's cost ratio",
    "max_tokens": "Tokens to write",
    "tokens_per_s": "The pace",
    "temperature": "The temperature",
    "top_k": "Top-k",
    "hidden_size": "The hidden size (hidden_size)",
    "num_hidden_layers": "Layers (num_hidden_layers)",
    "num_attention_heads": "Query heads (num_attention_heads)",
    "num_key_value_heads": "Key/value heads (num_key_value_heads)",
    "head_dim": "The head dimension (head_dim)",
    "intermediate_size": "The MLP width (intermediate_size)",
    "vocab_size": "The vocabulary size (vocab_size)",
    "max_position_embeddings": "The context window (max_position_embeddings)",
    "num_local_experts": "Experts (num_local_experts)",
    "num_experts_per_tok": "Experts per token (num_experts_per_tok)",
    "bf16_dense_tflops": "BF16 throughput",
    "fp8_dense_tflops": "FP8 throughput",
    "int8_dense_tops": "INT8 throughput",
    "hbm_capacity_gb": "Memory capacity",
    "hbm_bandwidth_tb_s": "Memory bandwidth",
    "interconnect_bandwidth_gb_s": "GPU-to-GPU bandwidth",
}


def label(field: str | None) -> str:
    if not field:
        return "The request"
    return LABELS.get(field) or field.replace("_", " ").capitalize()


def _got(value: Any) -> str:
    """ ", not 999" for a short input a visitor can recognise; nothing for long or structured ones."""
    if isinstance(value, bool) or value is None or isinstance(value, (dict, list)):
        return ""
    text = str(value)
    if not text or len(text) > 40:
        return ""
    try:
        number = float(text)  # a query string's number arrives as text
    except ValueError:
        return f", not '{text}'"
    return f", not {words(number)}" if math.isfinite(number) and abs(number) < 1e15 else ""


def _choices(expected: str) -> str:
    """pydantic's "'a', 'b' or 'c'" as "a, b or c"."""
    return expected.replace("'", "")


def in_words(err: dict) -> tuple[str, str | None, tuple[str, ...]]:
    """(message, field, fields) for one pydantic error, in words that name the field and the bound."""
    loc = [x for x in err.get("loc", ()) if x not in ("query", "body", "path")]
    field = next((x for x in reversed(loc) if isinstance(x, str)), None)
    t, ctx, got = err.get("type", ""), err.get("ctx") or {}, _got(err.get("input"))
    cause = ctx.get("error")
    if isinstance(cause, SimError):
        return cause.message, field or cause.field, cause.fields
    name = label(field)
    bound = next((ctx[k] for k in ("le", "ge", "lt", "gt") if k in ctx), None)
    text = {
        "less_than_equal": lambda: f"{name} must be at most {words(bound)}{got}.",
        "greater_than_equal": lambda: f"{name} must be at least {words(bound)}{got}.",
        "less_than": lambda: f"{name} must be less than {words(bound)}{got}.",
        "greater_than": lambda: f"{name} must be more than {words(bound)}{got}.",
        "string_too_short": lambda: (
            f"{name} must not be empty."
            if ctx.get("min_length") == 1
            else f"{name} must be at least {words(ctx['min_length'])} characters long."
        ),
        "string_too_long": lambda: f"{name} must be at most {words(ctx['max_length'])} characters long.",
        "literal_error": lambda: f"{name} must be one of {_choices(ctx.get('expected', ''))}{got}.",
        "enum": lambda: f"{name} must be one of {_choices(ctx.get('expected', ''))}{got}.",
        "int_parsing": lambda: f"{name} must be a whole number{got}.",
        "int_from_float": lambda: f"{name} must be a whole number{got}.",
        "int_type": lambda: f"{name} must be a whole number{got}.",
        "float_parsing": lambda: f"{name} must be a number{got}.",
        "float_type": lambda: f"{name} must be a number{got}.",
        "finite_number": lambda: f"{name} must be a finite number{got}.",
        "bool_parsing": lambda: f"{name} must be true or false{got}.",
        "bool_type": lambda: f"{name} must be true or false{got}.",
        "string_type": lambda: f"{name} must be text.",
        "string_unicode": lambda: (
            f"{name} holds a lone surrogate (such as \\ud800, half of a UTF-16 pair): not a character. "
            "Send the text as valid Unicode."
        ),
        "missing": lambda: f"{name} is required." if field else "The request body is missing.",
        "extra_forbidden": lambda: f"'{field}' is not a setting of this endpoint.",
        "json_invalid": lambda: "The request body is not valid JSON.",
        "dict_type": lambda: f"{name} must be a JSON object." if field else "The request body must be a JSON object.",
        "model_attributes_type": lambda: "The request body must be a JSON object.",
    }.get(t)
    if text is not None:
        return text(), field, (field,) if field else ()
    msg = str(err.get("msg", "")).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if t == "value_error":
        return (msg[:1].upper() + msg[1:]).rstrip(".") + ".", field, (field,) if field else ()
    return f"{name} is not valid{got}.", field, (field,) if field else ()


def _entry(
    where: str, t: str, message: str, field: str | None, fields: tuple[str, ...], value: Any, extra: dict | None = None
) -> dict:
    err: dict = {"type": t, "loc": [where, field] if field else [where], "field": field, "msg": message, "input": value}
    ctx = {**(extra or {}), **({"fields": list(fields)} if fields else {})}  # every field the limit joins
    if ctx:
        err["ctx"] = ctx
    return err


def _plain(v: Any) -> Any:
    """ctx values as JSON (pydantic puts the exception object itself under ctx.error)."""
    return v if isinstance(v, (str, int, float, bool, type(None))) else str(v)


async def unprocessable(request: Request, exc: Exception) -> JSONResponse:
    """The one 422 handler: a SimError from a simulation, or pydantic's validation, in words."""
    where = "query" if request.method in ("GET", "HEAD") else "body"
    if isinstance(exc, RequestValidationError):
        detail = []
        for e in exc.errors():
            message, field, fields = in_words(e)
            ctx = {k: _plain(v) for k, v in (e.get("ctx") or {}).items() if k != "error"}
            loc = e.get("loc") or (where,)
            err = _entry(str(loc[0]), e.get("type", "value_error"), message, field, fields, e.get("input"), ctx)
            detail.append(err)
        return JSONResponse(status_code=422, content={"detail": _jsonable(detail)})
    if isinstance(exc, SimError):
        err = _entry(where, "value_error", exc.message, exc.field, exc.fields, None)
    elif isinstance(exc, UnicodeError):  # e.g. a lone surrogate ("\\ud800") in JSON text: never the codec's words
        err = _entry(where, "value_error", _unicode_in_words(exc), None, (), None)
    else:  # a simulation that refused its input with a plain ValueError: still a 422, but it names no field
        err = _entry(where, "value_error", str(exc), None, (), None)
    return JSONResponse(status_code=422, content={"detail": [err]})


def _unicode_in_words(exc: UnicodeError) -> str:
    """What a UnicodeError means for the visitor: which character of their text could not be read, in words."""
    bad, start = getattr(exc, "object", None), getattr(exc, "start", None)
    ch = bad[start] if isinstance(bad, str) and isinstance(start, int) and start < len(bad) else None
    if ch is not None and 0xD800 <= ord(ch) <= 0xDFFF:
        return (
            f"The text holds a lone surrogate (U+{ord(ch):04X}): half of a UTF-16 pair, not a character. "
            "Send the text as valid Unicode."
        )
    return "The text is not valid Unicode. Send it as UTF-8."


BUSY = {429: {"description": "Too much of this work is in progress: a sentence, and Retry-After (seconds)."}}


async def too_busy(request: Request, exc: Exception) -> JSONResponse:
    """The one 429 for expensive work over its bound (model_work.Busy): a sentence and Retry-After."""
    wait = getattr(exc, "retry_after_s", 2)
    return JSONResponse(
        status_code=429, content={"detail": f"The server is busy: {exc}"}, headers={"retry-after": str(wait)}
    )


async def model_loading(request: Request, exc: Exception) -> JSONResponse:
    """The one 503 while the real model loads at start-up (modelfile.ModelLoading): a sentence and Retry-After."""
    wait = getattr(exc, "retry_after_s", 10)
    return JSONResponse(status_code=503, content={"detail": str(exc)}, headers={"retry-after": str(wait)})


async def client_gone(request: Request, exc: Exception) -> Response:
    """The client left while its work waited: nothing is sent (no one reads it)."""
    return Response(status_code=499)


def _jsonable(x: Any) -> Any:
    from fastapi.encoders import jsonable_encoder

    return _utf8(jsonable_encoder(x))


def _utf8(x: Any) -> Any:
    """The echoed input with any lone surrogate written as \\udXXX text, so the 422 itself can be sent."""
    if isinstance(x, str):
        return x if x.isascii() else x.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(x, list):
        return [_utf8(v) for v in x]
    if isinstance(x, dict):
        return {k: _utf8(v) for k, v in x.items()}
    return x


def counted(n: int, noun: str) -> str:
    """A count in a fact's words: '1 token', '17 tokens', '1,024 words' (a plain plural noun)."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"
