"""A loopback HTTP server whose paths misbehave the ways an attached server can: hang, drip, send 10 MB, send a page
that is not exposition text, redirect elsewhere, answer 404. Each hold is released by `release` (an event), never
by a sleep running out; each path counts its hits."""

from __future__ import annotations

import threading
from collections import Counter
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

GOOD = (Path(__file__).resolve().parent.parent / "fixtures" / "attach" / "inside_llm_own.txt").read_bytes()
BIG = 10 * 1024 * 1024


class Hostile:
    def __init__(self):
        self.release = threading.Event()
        self.hits: Counter = Counter()
        self.pages: dict[str, bytes] = {"/ok/metrics": GOOD, "/flaky/metrics": b"<html>not metrics</html>"}
        self.url = ""


def _handler(h: Hostile):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):  # quiet
            pass

        def _send(self, status: int, body: bytes, headers: dict | None = None):
            self.send_response(status)
            for k, v in {"content-type": "text/plain; version=0.0.4", **(headers or {})}.items():
                self.send_header(k, v)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802
            path = self.path
            h.hits[path] += 1
            try:
                if path in h.pages:
                    return self._send(200, h.pages[path])
                if path == "/hang/metrics":
                    h.release.wait(120)
                    return self._send(200, GOOD)
                if path == "/drip/metrics":  # headers at once, then a byte at a time
                    self.send_response(200)
                    self.send_header("content-type", "text/plain")
                    self.end_headers()
                    while not h.release.wait(0.2):
                        self.wfile.write(b"#")
                        self.wfile.flush()
                    return None
                if path == "/big/metrics":  # 10 MB, no length said
                    self.send_response(200)
                    self.send_header("content-type", "text/plain")
                    self.end_headers()
                    line = b'vllm:num_requests_running{model_name="m"} 1\n' * 1024
                    for _ in range(BIG // len(line) + 1):
                        self.wfile.write(line)
                    return None
                if path == "/declared-big/metrics":
                    self.send_response(200)
                    self.send_header("content-length", str(BIG))
                    self.end_headers()
                    return None
                if path == "/garbage/metrics":
                    return self._send(200, b"<html><body>Welcome to nginx!</body></html>\n")
                if path == "/unknown/metrics":
                    return self._send(200, b"process_cpu_seconds_total 3\nup 1\n")
                if path == "/redirect/metrics":
                    return self._send(302, b"", {"location": "http://169.254.169.254/latest/meta-data/"})
                return self._send(404, b"not here")
            except (BrokenPipeError, ConnectionResetError):
                return None

    return Handler


@contextmanager
def hostile_server():
    h = Hostile()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(h))
    server.daemon_threads = True
    h.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield h
    finally:
        h.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
