"""The JSON pages an attached server serves beside /metrics, read into plain numbers and added to its Reading.

- `GET /v1/models` (every OpenAI-compatible engine): the model ids it serves, and the longest context one request
  may use where the engine says so (vLLM and SGLang: `max_model_len`; llama.cpp: `meta.n_ctx`, the context of one
  slot).
- `GET /slots` (llama.cpp's llama-server; on by default, `--no-slots` turns it off): one object per slot, with
  `n_ctx` (its context: ctx-size / parallel), `is_processing`, and, once it has served a request,
  `n_prompt_tokens` (the tokens held in its KV cells: the prompt and what it wrote, kept after the request ends
  so a later prompt can reuse them) and `next_token` (`n_decoded`; an object in llama.cpp's README, a list of
  one object in current builds: both are read).
- `GET /props` (llama-server): `total_slots` (`--parallel`), `default_generation_settings.n_ctx`, `model_path`,
  `build_info` (`b<build>-<commit>`).

`parse_json(text, path)` raises Garbled (in words) for a body that is not JSON; `models_page`, `slots_page` and
`props_page` raise Garbled for JSON of the wrong shape and keep only bounded, finite numbers. `apply(reading,
...)` returns the Reading with the figures these pages add, each naming the field it came from. Pure: no network
here (poller.py fetches, with the same deadline, size cap and circuit as /metrics).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

from .engines import Figure, Reading
from .exposition import Garbled

MAX_SLOTS = 4096  # a /slots list longer than this is refused (llama-server's -np is a few dozen at most)
MAX_TOKENS = 1 << 31  # a context or count past this is not a real one


@dataclass(frozen=True)
class ModelsPage:
    ids: tuple[str, ...]
    context_tokens: int | None  # max_model_len (vLLM, SGLang) or meta.n_ctx (llama.cpp)
    context_field: str | None


@dataclass(frozen=True)
class Slot:
    id: int
    n_ctx: int
    busy: bool
    tokens_held: int | None  # n_prompt_tokens: None before the slot served anything
    decoded: int | None  # next_token.n_decoded of its current (or last) request


@dataclass(frozen=True)
class SlotsPage:
    slots: tuple[Slot, ...]


@dataclass(frozen=True)
class PropsPage:
    total_slots: int | None
    n_ctx: int | None  # default_generation_settings.n_ctx: one slot's context
    model: str | None  # the file name of model_path
    build_info: str | None


def parse_json(text: str, path: str) -> object:
    """The body as JSON; Garbled in words when it is not JSON."""
    if not text.strip():
        raise Garbled(f"GET {path} answered an empty body, not JSON.")
    try:
        return json.loads(text)
    except RecursionError:
        raise Garbled(f"GET {path} answered JSON nested too deeply to read.") from None
    except ValueError as e:
        first = text.strip().splitlines()[0][:60] if text.strip() else ""
        raise Garbled(f"GET {path} did not answer JSON ({type(e).__name__}); it starts with {first!r}.") from None


def _count(obj: dict, key: str) -> int | None:
    """A whole, non-negative, bounded number at obj[key], or None (absent, a bool, a string, NaN, huge)."""
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, float) and (not math.isfinite(v) or v != int(v)):
        return None
    v = int(v)
    return v if 0 <= v < MAX_TOKENS else None


def _text(v: object, limit: int = 200) -> str | None:
    return v[:limit] if isinstance(v, str) and v else None


def models_page(obj: object) -> ModelsPage:
    """GET /v1/models: {"object": "list", "data": [{"id": ..., "max_model_len"?: n, "meta"?: {"n_ctx": n}}]}."""
    if not isinstance(obj, dict) or not isinstance(obj.get("data"), list):
        raise Garbled("GET /v1/models did not answer an OpenAI model list (an object with a 'data' list).")
    ids: list[str] = []
    context, source = None, None
    for m in obj["data"][:64]:
        if not isinstance(m, dict) or _text(m.get("id")) is None:
            continue
        ids.append(_text(m["id"]))
        if context is None:
            if (n := _count(m, "max_model_len")) is not None:
                context, source = n, "max_model_len"
            elif isinstance(m.get("meta"), dict) and (n := _count(m["meta"], "n_ctx")) is not None:
                context, source = n, "meta.n_ctx"
    if obj["data"] and not ids:
        raise Garbled("GET /v1/models listed no model with an id.")
    return ModelsPage(tuple(ids), context, source)


def _decoded(next_token: object) -> int | None:
    if isinstance(next_token, list):  # current builds: a list of one object
        next_token = next_token[0] if next_token else None
    return _count(next_token, "n_decoded") if isinstance(next_token, dict) else None


def slots_page(obj: object) -> SlotsPage:
    """GET /slots: a list of slot objects, each with at least id, n_ctx and is_processing."""
    if not isinstance(obj, list):
        raise Garbled(f"GET /slots did not answer a list of slots (it sent a JSON {type(obj).__name__}).")
    if len(obj) > MAX_SLOTS:
        raise Garbled(f"GET /slots listed more than {MAX_SLOTS:,} slots: refused as not a real server's.")
    slots = []
    for k, s in enumerate(obj):
        if not isinstance(s, dict) or _count(s, "n_ctx") is None or not isinstance(s.get("is_processing"), bool):
            raise Garbled(f"GET /slots: entry {k} is not a slot (no whole n_ctx, or is_processing not true/false).")
        sid = _count(s, "id")
        slots.append(Slot(k if sid is None else sid, _count(s, "n_ctx"), s["is_processing"],
                          _count(s, "n_prompt_tokens"), _decoded(s.get("next_token"))))  # fmt: skip
    return SlotsPage(tuple(slots))


def props_page(obj: object) -> PropsPage:
    """GET /props: llama-server's global properties."""
    if not isinstance(obj, dict):
        raise Garbled(f"GET /props did not answer a JSON object (it sent a JSON {type(obj).__name__}).")
    settings = obj.get("default_generation_settings")
    n_ctx = _count(settings, "n_ctx") if isinstance(settings, dict) else None
    path = _text(obj.get("model_path"), 400)
    model = path.replace("\\", "/").rsplit("/", 1)[-1] if path else None
    return PropsPage(_count(obj, "total_slots"), n_ctx, model, _text(obj.get("build_info"), 80))


# ---- what the pages add to a Reading ----------------------------------------------------------------------
NOT_READ = "Not read yet."
NO_SLOTS = (
    "Only llama.cpp's llama-server has a fixed number of slots (-np); this engine batches requests up to its "
    "own limit (vLLM's max_num_seqs, SGLang's max_running_requests)."
)
SLOT_KV_NOTE = (
    "From GET /slots: the tokens the slots hold in their KV cells (n_prompt_tokens: each slot's prompt and what "
    "it wrote, kept after its request ends for reuse) over their context (n_ctx each, ctx-size / parallel). "
    "llama-server's /metrics has no KV-usage ratio. With a unified KV buffer (-kvu, the default when -np is not "
    "given) every slot's n_ctx is the whole shared buffer, so this reads low by the number of slots."
)


def apply(
    reading: Reading,
    models: ModelsPage | None = None,
    slots: SlotsPage | None = None,
    props: PropsPage | None = None,
    why: dict[str, str] | None = None,
) -> Reading:
    """`reading` with the figures /v1/models, /slots and /props add. `why` gives, per page ('models', 'slots',
    'props'), why it is missing (a failure in words), for the figures that would have come from it."""
    why = why or {}
    llama = reading.engine == "llama.cpp"
    out: dict = {}
    if models is not None:
        out["served_models"] = list(models.ids)
    if models is not None and models.context_tokens is not None:
        out["context_tokens"] = Figure(float(models.context_tokens), f"GET /v1/models: {models.context_field}",
                                       "The longest context (prompt + answer, tokens) one request may use."
                                       + (" On llama-server, one slot's context." if llama else ""))  # fmt: skip
    elif props is not None and props.n_ctx is not None:
        out["context_tokens"] = Figure(float(props.n_ctx), "GET /props: default_generation_settings.n_ctx",
                                       "One slot's context (tokens): ctx-size / parallel.")  # fmt: skip
    else:
        out["context_tokens"] = Figure(None, None, why.get("models") or (
            "GET /v1/models gives no context length on this engine." if models is not None else NOT_READ))  # fmt: skip
    if not llama:
        out["slots_total"] = out["slots_busy"] = Figure(None, None, NO_SLOTS)
        return replace(reading, **out)
    if props is not None and props.build_info:
        out["build"] = props.build_info
    if props is not None and props.model and not reading.models and not out.get("served_models"):
        out["served_models"] = [props.model]
    if props is not None and props.total_slots is not None:
        out["slots_total"] = Figure(float(props.total_slots), "GET /props: total_slots",
                                    "Requests it can run at once (-np, --parallel); more wait (requests_deferred).")  # fmt: skip
    elif slots is not None:
        out["slots_total"] = Figure(float(len(slots.slots)), "GET /slots: the number of slots",
                                    "Requests it can run at once (-np, --parallel).")  # fmt: skip
    else:
        out["slots_total"] = Figure(None, None, why.get("props") or why.get("slots") or NOT_READ)
    if slots is None:
        out["slots_busy"] = Figure(None, None, why.get("slots") or NOT_READ)
        return replace(reading, **out)
    busy = sum(s.busy for s in slots.slots)
    out["slots_busy"] = Figure(float(busy), "GET /slots: is_processing",
                               "Slots working on a request now (the same count as llamacpp:requests_processing, "
                               "read at a slightly different moment).")  # fmt: skip
    if "context_tokens" not in out or out["context_tokens"].value is None:
        ctx = max((s.n_ctx for s in slots.slots), default=0)
        if ctx:
            out["context_tokens"] = Figure(float(ctx), "GET /slots: n_ctx", "One slot's context (tokens).")
    room = sum(s.n_ctx for s in slots.slots)
    if reading.kv_usage.value is None and room > 0:
        held = sum(min(s.tokens_held or 0, s.n_ctx) for s in slots.slots)
        out["kv_usage"] = Figure(held / room, "GET /slots: n_prompt_tokens / n_ctx", SLOT_KV_NOTE)
    return replace(reading, **out)
