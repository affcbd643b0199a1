"""A client that reads part of a streamed response through ASGI, then disconnects, and times how the app ends.

Used by the fuzz test (any generated query) and the security test (every stream at its largest request);
`get_scope` and `receive_then_leave` also by the bounds test.
"""

from __future__ import annotations

from urllib.parse import urlencode

import anyio


def get_scope(path: str, query: dict | None) -> dict:
    """The ASGI scope of GET path?query from a loopback client (no client-side limit on the query's length)."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "query_string": urlencode(query or {}, doseq=True).encode(),
        "headers": [],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
        "scheme": "http",
        "root_path": "",
    }


def receive_then_leave(gone: anyio.Event):
    """An ASGI `receive`: the (empty) request once, then a disconnect as soon as `gone` is set."""
    first = [True]

    async def receive():
        if first[0]:
            first[0] = False
            return {"type": "http.request", "body": b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    return receive


def read_then_leave(
    app, path: str, query: dict | None, events: int = 1, stop_within_s: float = 5.0
) -> tuple[int, bytes, float]:
    """GET path?query, read `events` server-sent events (a whole non-stream body ends the call), then disconnect.

    Returns (status, body, seconds the app ran after the client left; 0 if it never left). Fails when the app runs
    on for more than `stop_within_s` after the disconnect, or for over 60 s in all.
    """
    scope = get_scope(path, query)
    qs = scope["query_string"].decode()
    out = {"status": 0, "body": b"", "left_at": None, "ended_at": None}

    async def main():
        gone, ended = anyio.Event(), anyio.Event()
        receive = receive_then_leave(gone)

        async def send(message):
            if message["type"] == "http.response.start":
                out["status"] = message["status"]
                return
            out["body"] += message.get("body", b"")
            if out["body"].count(b"\n\n") >= events and not gone.is_set():
                out["left_at"] = anyio.current_time()
                gone.set()

        async def run():
            await app(scope, receive, send)
            out["ended_at"] = anyio.current_time()
            ended.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            with anyio.fail_after(60):
                while not (gone.is_set() or ended.is_set()):
                    await anyio.sleep(0.01)
            if not ended.is_set():
                with anyio.move_on_after(stop_within_s):
                    await ended.wait()
            tg.cancel_scope.cancel()

    anyio.run(main)
    if out["left_at"] is None:
        return out["status"], out["body"], 0.0
    assert out["ended_at"] is not None, f"{path}?{qs[:200]} kept running {stop_within_s} s after a disconnect"
    return out["status"], out["body"], out["ended_at"] - out["left_at"]
