"""The live engine: the loop thread that serves every visitor's chat on the serving core (sim/serve), and the
physical pages its keys and values live in. api/generate.py, api/v1.py, api/engine.py and metrics.py use it.

engine.py: Engine (submit -> Stream; each step Scheduler.schedule -> one forward pass -> finish_step),
EngineLimits, QueueFull/ClientBusy, the snapshot /api/engine returns, engine_for/engines (one engine per served
model and process). pages.py: PagedKVStore and PagedKV (float32 pages; block tables from sim/serve/kv.py).
"""

from inside_llm.live.engine import (
    Chat,
    ChatProgress,
    ClientBusy,
    Engine,
    EngineLimits,
    EngineSnapshot,
    QueueFull,
    Stream,
    engine_for,
    engines,
    workers,
)
from inside_llm.live.pages import OutOfPages, PagedKV, PagedKVStore, prefix_hashes

__all__ = [
    "Chat",
    "ChatProgress",
    "ClientBusy",
    "Engine",
    "EngineLimits",
    "EngineSnapshot",
    "OutOfPages",
    "PagedKV",
    "PagedKVStore",
    "QueueFull",
    "Stream",
    "engine_for",
    "engines",
    "prefix_hashes",
    "workers",
]
