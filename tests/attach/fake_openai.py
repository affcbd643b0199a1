"""A loopback OpenAI-compatible stub for the relay and measure-run tests: /v1/models and a streamed
/v1/chat/completions, under a path prefix per behaviour (the attached URL is http://127.0.0.1:PORT/PREFIX):
- /ok: "one two three" in three chunks, then usage and [DONE];
- /held: the same, but each request first waits for `release` (an event, never a sleep running out), and says it
  arrived through `arrived` (a semaphore: one release per request);
- /missing: HTTP 404 with OpenAI's error body; /garbage: a 200 stream that is not JSON;
- /huge: a stream of more than 1 MB of content; /nomodel: lists no model (and 404s the chat).
`hits` counts each path."""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler

from hostile import serve_in_thread

PIECES = ["one", " two", " three"]


class Fake:
    def __init__(self):
        self.release = threading.Event()
        self.arrived = threading.Semaphore(0)
        self.hits: Counter = Counter()
        self.bodies: list[dict] = []
        self.url = ""


def _chunk(content: str | None = None, finish: str | None = None, usage: dict | None = None) -> bytes:
    choices = [] if usage else [{"index": 0, "delta": {"content": content} if content else {}, "finish_reason": finish}]
    body = {"id": "c", "object": "chat.completion.chunk", "model": "fake-model", "choices": choices}
    if usage:
        body["usage"] = usage
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _handler(f: Fake):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):  # quiet
            pass

        def _send(self, status: int, body: bytes, ctype: str = "application/json"):
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _stream_head(self):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            self.close_connection = True

        def do_GET(self):  # noqa: N802
            f.hits[self.path] += 1
            if self.path.endswith("/v1/models"):
                data = [] if self.path.startswith("/nomodel") else [{"id": "fake-model", "object": "model"}]
                return self._send(200, json.dumps({"object": "list", "data": data}).encode())
            return self._send(404, b'{"detail": "Not Found"}')

        def do_POST(self):  # noqa: N802
            f.hits[self.path] += 1
            n = int(self.headers.get("content-length") or 0)
            try:
                f.bodies.append(json.loads(self.rfile.read(n)))
            except ValueError:
                pass
            prefix = self.path.split("/")[1]
            try:
                if prefix in ("missing", "nomodel"):
                    err = {"error": {"message": "The model `fake-model` does not exist.", "type": "NotFoundError"}}
                    return self._send(404, json.dumps(err).encode())
                if prefix == "held":
                    f.arrived.release()
                    f.release.wait(120)
                self._stream_head()
                if prefix == "garbage":
                    self.wfile.write(b"data: <html>oops</html>\n\n")
                    return None
                if prefix == "huge":
                    piece = "x" * 1000
                    for _ in range(1200):
                        self.wfile.write(_chunk(piece))
                    return None
                for p in PIECES:
                    self.wfile.write(_chunk(p))
                    self.wfile.flush()
                self.wfile.write(_chunk(finish="stop"))
                usage = {"prompt_tokens": 12, "completion_tokens": len(PIECES), "total_tokens": 12 + len(PIECES)}
                self.wfile.write(_chunk(usage=usage))
                self.wfile.write(b"data: [DONE]\n\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
            return None

    return Handler


def fake_openai():
    f = Fake()
    return serve_in_thread(f, _handler(f))
