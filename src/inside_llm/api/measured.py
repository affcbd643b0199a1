"""The `/measured` endpoints' one helper: a wall-clock measurement on this server's CPU, made once per
process (per key) and kept, so the chapter responses beside it stay pure functions of their URL.

Every measurement in the process runs under one lock (two at once would slow each other), and a
measurement that fails answers `available: false` with the reason instead of failing the page.
"""

from __future__ import annotations

import json
import os
import platform
import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from fastapi import Response

_LOCK = threading.RLock()


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
        self._cached = lru_cache(maxsize=keys)(self._run)

    def _run(self, *key: Any) -> bytes:
        try:
            body = self._measure(*key)
        except Exception as e:  # missing or broken weights must not take the page down: say so instead
            body = self._on_failure(f"the measurement failed ({type(e).__name__})", *key)
        return json.dumps(body, separators=(",", ":")).encode()

    lock = _LOCK  # reentrant: a caller may hold it around json() to keep its own bookkeeping in step

    def json(self, *key: Any) -> bytes:
        with _LOCK:
            return self._cached(*key)

    def response(self, *key: Any) -> Response:
        return Response(content=self.json(*key), media_type="application/json")
