"""The `/measured` endpoints' one helper: a wall-clock measurement on this server's CPU, made once per
process (per key) and kept, so the chapter responses beside it stay pure functions of their URL.

Every measurement is a model job (model_work.WORK): one at a time on its one worker thread, never during an
engine step (two at once would slow each other), from a bounded queue (over it: 429 with Retry-After, in
words). A request awaits its measurement on the event loop, holding no thread and no lock, and one that
leaves before its measurement started drops it. A measurement that fails answers `available: false` with
the reason instead of failing the page.
"""

from __future__ import annotations

import json
import os
import platform
import threading
from collections.abc import Callable
from typing import Any

from fastapi import Request, Response
from pydantic import BaseModel, Field

from ..model_work import WORK, Kept


def cpu_info() -> dict:
    """This server's CPU: its model name and logical cores (what every measurement was measured on)."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), name)
    except OSError:
        pass
    return {"name": name, "logical_cores": os.cpu_count()}


def unavailable(reason: str, *key: Any) -> dict:
    """The default answer when a measurement cannot be made."""
    return {"available": False, "reason": reason, "cpu": cpu_info()}


class Measured:
    """measure(*key) -> the figures (a dict), run at most once per key (up to `keys` kept).

    `on_failure(reason, *key)` says what to answer when measure raises (default: `unavailable`).
    """

    def __init__(
        self, measure: Callable[..., dict], keys: int = 1, on_failure: Callable[..., dict] = unavailable
    ) -> None:
        self._measure, self._on_failure = measure, on_failure
        self._kept = Kept(keys)

    def _run(self, *key: Any) -> bytes:
        try:
            body = self._measure(*key)
        except Exception as e:  # missing or broken weights must not take the page down: say so instead
            body = self._on_failure(f"the measurement failed ({type(e).__name__})", *key)
        return json.dumps(body, separators=(",", ":")).encode()

    def json(self, *key: Any) -> bytes:
        """The body, for a caller off the event loop (its thread waits for the model job)."""
        return WORK.call((id(self), *key), lambda: self._run(*key), self._kept)

    async def json_async(self, request: Request, *key: Any) -> bytes:
        """The body, awaited on the event loop; ClientGone (nothing is sent) when the client leaves first."""
        return await WORK.run((id(self), *key), lambda: self._run(*key), self._kept, request.receive)

    async def respond(self, request: Request, *key: Any) -> Response:
        return Response(content=await self.json_async(request, *key), media_type="application/json")


# ---- the served model, measured once: figures two chapters show ------------------------------
PROMPT_TOKENS = 64  # the prompt every served-model timing reads (a fixed passage, so only the clock varies)
_SHARED: dict[tuple, dict] = {}


_SHARED_LOCK = threading.Lock()  # guards the dict only, never held while measuring


def shared(key: tuple, measure: Callable[[], dict]) -> dict:
    """measure() once per process per key. Two endpoints that show the same measurement (chapter 2's prefill
    vs decode is chapter 5's; chapter 3's cache vs recompute is chapter 6's) get the same numbers; a
    measurement that raises is not kept (the endpoint answers available: false). Called from a model job, so
    measurements never overlap (there is one worker)."""
    with _SHARED_LOCK:
        if key in _SHARED:
            return _SHARED[key]
    value = measure()
    with _SHARED_LOCK:
        return _SHARED.setdefault(key, value)


def served():
    """The model these measurements time: SmolLM2 when its file is on this server, else the toy (and why)."""
    from .demo_model import served_model

    return served_model("smollm2")


async def served_async():
    """served(), from the event loop: the first call loads the model, in a worker thread."""
    import anyio

    return await anyio.to_thread.run_sync(served)


class MeasuredHeader(BaseModel):
    """The fields every /measured response opens with (a response model adds its own after them)."""

    available: bool
    measured_on: str = "this server's CPU"
    reason: str | None = Field(None, description="Why nothing was measured (when available is false).")
    cpu: dict = Field(description="name and logical_cores of this server's CPU.")


def served_header(s) -> dict:
    """MeasuredHeader's fields for a measurement of the served model `s`, plus which model that was."""
    return {"available": True, "measured_on": "this server's CPU", "cpu": cpu_info(), "model": served_model_info(s)}


def served_model_info(s) -> dict:
    """model_info plus which model was asked for, which one was measured, its name in words, and why the toy
    stands in when it does."""
    from .demo_model import model_info, served_name

    return model_info(s.model) | {
        "requested": s.requested,
        "served": s.served,
        "display_name": served_name(s),
        "note": s.note,
    }


def prompt_ids(s) -> list[int]:
    from ..sim.measure import demo_timing

    return demo_timing.default_prompt_ids(s.model, PROMPT_TOKENS)


def prefill_decode(s) -> dict:
    """sim.measure.demo_timing.time_prefill_decode of the served model (once per process per model)."""
    from ..sim.measure import demo_timing

    return shared(("prefill-decode", s.served), lambda: demo_timing.time_prefill_decode(s.model, prompt_ids(s)))


def served_prefill_decode(s) -> dict | None:
    """prefill_decode of the form the engine decodes from (SmolLM2's int8 `served_form`), None for a model
    served as it is (the toy); once per process per model."""
    from ..sim.measure import demo_timing

    form = getattr(s.model, "served_form", None)
    if form is None:
        return None
    return shared(("prefill-decode-served", s.served), lambda: demo_timing.time_prefill_decode(form, prompt_ids(s)))


def cache_vs_recompute(s) -> dict:
    """sim.measure.demo_timing.time_kv_cache of the served model (once per process per model)."""
    from ..sim.measure import demo_timing

    return shared(("cache-vs-recompute", s.served), lambda: demo_timing.time_kv_cache(s.model, prompt_ids(s)))


def machine_roofs() -> dict:
    """This CPU's memory roof, compute roof and ridge (sim.measure.cpu_measure.machine_roofs, once per process)."""
    from ..sim.measure import cpu_measure

    return shared(("roofs",), cpu_measure.machine_roofs)


def sig4(x: float) -> float:
    """A measured float to 4 significant digits (the clock is not more precise than that)."""
    return float(f"{x:.4g}")
