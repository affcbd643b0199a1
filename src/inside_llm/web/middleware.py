"""Pure ASGI middleware: security headers, CORS for public reads, URL and request-body caps, ETag/Cache-Control/gzip
for JSON and pages, HEAD wherever GET is, and redirects that never name a host.

Pure ASGI (not BaseHTTPMiddleware) so server-sent event streams pass through unbuffered.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import OrderedDict
from urllib.parse import urlsplit

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..settings import Settings


def _csp(frame_ancestors: str) -> str:
    return (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data: blob:; connect-src 'self'; font-src 'self'; object-src 'none'; "
        f"base-uri 'none'; form-action 'self'; frame-ancestors {frame_ancestors}"
    )


# `*` matches every http(s) page but not the file: scheme; a slide deck opened from disk frames embeds too.
EMBED_FRAME_ANCESTORS = "* file:"


def security_headers(path: str, settings: Settings) -> list[tuple[bytes, bytes]]:
    """The headers every response gets (also the 500s built outside the middleware stack)."""
    embed = path.startswith("/embed/")
    ancestors = EMBED_FRAME_ANCESTORS if embed else settings.frame_ancestors
    extra = [
        (b"content-security-policy", _csp(ancestors).encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"strict-origin-when-cross-origin"),
    ]
    if not embed and ancestors == "'self'":
        extra.append((b"x-frame-options", b"SAMEORIGIN"))
    return extra


class SecurityHeaders:
    """CSP with no inline script, nosniff, a referrer policy; only /embed may be framed anywhere."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app, self.settings = app, settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        extra = security_headers(scope["path"], self.settings)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + extra
            await send(message)

        await self.app(scope, receive, send_with_headers)


PUBLIC_READ_PREFIXES = ("/static/", "/embed/", "/api/")
PUBLIC_READ_PATHS = ("/oembed",)


def is_public_read(method: str, path: str) -> bool:
    """A GET (or HEAD) of what any page may read: the static files, the embeds, the API, oEmbed."""
    return method in ("GET", "HEAD") and (path.startswith(PUBLIC_READ_PREFIXES) or path in PUBLIC_READ_PATHS)


class PublicCors:
    """`Access-Control-Allow-Origin: *` on public read-only responses (is_public_read), nothing else.

    An embed framed with `sandbox="allow-scripts"` (how WordPress frames every oEmbed) runs with an opaque
    origin, `null`: its ES modules and its fetches to this server are then cross-origin, and Chromium
    refuses them without this header. Safe because those responses are public and the same for everyone:
    no cookies, no sessions, no credentials exist on this server, and the header is `*` (which browsers
    never combine with credentials), on GET and HEAD only. A preflighted request (POST with JSON) still
    gets no CORS header, so another origin can read but never send work with a body.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_public_read(scope["method"], scope["path"]):
            return await self.app(scope, receive, send)

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"access-control-allow-origin", b"*")]
            await send(message)

        await self.app(scope, receive, send_with_cors)


class StaticCache:
    """/static/**: gzip for text files and `Cache-Control: no-cache` (reuse after an ETag revalidation).

    StaticFiles sends ETag and Last-Modified and answers If-None-Match with 304, but no Cache-Control and
    nothing compressed (a page's 84-147 KB of ES modules went uncompressed). The URLs are not content-hashed
    (an ES module imports its neighbours by plain relative paths), so a cached file is reused only after the
    server says it is unchanged: no-cache, with the modulepreload list (pages.preloads) making those checks
    parallel. A gzipped body is another representation, so its ETag gets "-gzip" inside the quotes (and
    `Vary: Accept-Encoding`); an If-None-Match carrying it is handed to StaticFiles without the suffix.
    Compressed bodies are memoized per (path, ETag): a file is compressed once per release.
    """

    TYPES = (b"text/", b"application/javascript", b"application/json", b"image/svg+xml")
    GZIP_MIN_BYTES = 512
    MAX_BODY = 4 << 20
    MEMO = 256

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.gzipped: OrderedDict[tuple[str, bytes], bytes] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in ("GET", "HEAD")
            or not scope["path"].startswith("/static/")
        ):
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        accepts_gzip = b"gzip" in headers.get(b"accept-encoding", b"").lower()
        inm = headers.get(b"if-none-match")
        if inm and b"-gzip" in inm:
            plain = inm.replace(b'-gzip"', b'"')
            scope = {**scope, "headers": [(k, plain if k == b"if-none-match" else v) for k, v in scope["headers"]]}
        state: dict = {}

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                hs = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"cache-control"]
                hs.append((b"cache-control", b"no-cache"))
                ctype = dict(hs).get(b"content-type", b"")
                if message["status"] in (200, 304) and accepts_gzip and ctype.startswith(self.TYPES):
                    hs.append((b"vary", b"Accept-Encoding"))
                if message["status"] == 200 and accepts_gzip and ctype.startswith(self.TYPES):
                    state["start"], state["body"] = {**message, "headers": hs}, b""
                    return
                if message["status"] == 304 and accepts_gzip:
                    hs = [(k, _gzip_etag(v) if k.lower() == b"etag" else v) for k, v in hs]
                return await send({**message, "headers": hs})
            if "start" not in state:
                return await send(message)
            state["body"] += message.get("body", b"")
            if len(state["body"]) > self.MAX_BODY:  # not worth holding: send as it is
                start, body = state.pop("start"), state.pop("body")
                await send(start)
                return await send({**message, "body": body})
            if not message.get("more_body", False):
                await self._finish(send, scope["path"], state["start"], state["body"], scope["method"] == "HEAD")

        await self.app(scope, receive, wrapped)

    async def _finish(self, send: Send, path: str, start: Message, body: bytes, head: bool) -> None:
        headers = dict(start["headers"])
        etag = headers.get(b"etag", b"")
        if len(body) >= self.GZIP_MIN_BYTES or head:
            key = (path, etag)
            out = self.gzipped.get(key)
            if out is None and not head:
                out = self.gzipped[key] = gzip.compress(body, compresslevel=6, mtime=0)
                if len(self.gzipped) > self.MEMO:
                    self.gzipped.popitem(last=False)
            elif out is not None:
                self.gzipped.move_to_end(key)
            if out is not None:
                hs = [(k, v) for k, v in start["headers"] if k.lower() not in (b"content-length", b"etag")]
                hs += [(b"content-encoding", b"gzip"), (b"content-length", str(len(out)).encode())]
                hs += [(b"etag", _gzip_etag(etag))] if etag else []
                await send({**start, "headers": hs})
                await send({"type": "http.response.body", "body": b"" if head else out})
                return
        await send(start)
        await send({"type": "http.response.body", "body": body})


def _gzip_etag(etag: bytes) -> bytes:
    return etag[:-1] + b'-gzip"' if etag.endswith(b'"') and b"-gzip" not in etag else etag


class UrlLimit:
    """Refuse a URL (path + query string, in bytes as sent) over max_url_bytes with 414 and a short JSON body."""

    def __init__(self, app: ASGIApp, max_url_bytes: int) -> None:
        self.app, self.limit = app, max_url_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            size = len(scope.get("raw_path") or scope["path"].encode()) + len(scope.get("query_string", b""))
            if size > self.limit:
                return await _reply(
                    send,
                    414,
                    {
                        "detail": f"The URL is {size:,} bytes; this server reads at most "
                        f"{self.limit:,}. Send long text in a POST body instead "
                        "(e.g. POST /api/tokens)."
                    },
                )
        await self.app(scope, receive, send)


class BodyLimit:
    """Refuse request bodies over max_body_bytes with 413 (by Content-Length, or while streaming)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app, self.limit = app, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return await _reply(send, 413, {"detail": f"request body over {self.limit} bytes"})
        seen, over, replied = 0, False, False

        async def counting_receive() -> Message:
            nonlocal seen, over
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                over = True
                raise _TooLarge()
            return message

        async def refusing_send(message: Message) -> None:
            """The app may turn the interrupted read into its own 400: answer 413 instead."""
            nonlocal replied
            if not over:
                return await send(message)
            if message["type"] == "http.response.start" and not replied:
                replied = True
                await _reply(send, 413, {"detail": f"request body over {self.limit} bytes"})

        try:
            await self.app(scope, counting_receive, refusing_send)
        except _TooLarge:
            if not replied:
                await _reply(send, 413, {"detail": f"request body over {self.limit} bytes"})


class _TooLarge(Exception):
    pass


async def _reply(send: Send, status: int, body: dict, headers: list | None = None) -> None:
    raw = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
            + (headers or []),
        }
    )
    await send({"type": "http.response.body", "body": raw})


class ETagCache:
    """GET JSON and HTML responses get a content ETag and Cache-Control; If-None-Match hits get 304.

    Valid because every endpoint is a pure function of its URL (fixed seeds), so the same URL
    always gives the same bytes: JSON may be reused for max_age_s. Pages say no-cache (reuse only
    after a 304), since the unversioned /static files they load may change with a new release.
    Other types (static files carry their own ETag, streams), a response that sets its own Cache-Control (a live
    reading such as GET /api/attach: no-store) and other methods pass through, except that a POST's JSON answer is
    gzipped too (without an ETag).

    Bodies of at least GZIP_MIN_BYTES go out gzipped to clients that accept it. The gzipped bytes are a
    different representation, so they carry their own ETag (the plain one with "-gzip" inside the quotes)
    and `Vary: Accept-Encoding`; If-None-Match accepts either tag. Compressed bodies are memoized per
    ETag (the same URL always gives the same bytes), so a repeated request costs no compression.
    """

    GZIP_MIN_BYTES = 1024
    GZIP_MEMO = 128

    def __init__(self, app: ASGIApp, max_age_s: int) -> None:
        self.app, self.max_age = app, max_age_s
        self.gzipped: OrderedDict[str, bytes] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            return await self._post(scope, receive, send)
        if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        inm = headers.get(b"if-none-match", b"").decode("latin-1")
        accepts_gzip = b"gzip" in headers.get(b"accept-encoding", b"").lower()
        state: dict = {}

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers", []))
                ctype = headers.get(b"content-type", b"")
                own = b"cache-control" in headers  # a live answer (GET /api/attach) says no-store itself
                if message["status"] == 200 and ctype.startswith((b"application/json", b"text/html")) and not own:
                    state["start"], state["body"] = message, b""
                    state["cache"] = (
                        f"public, max-age={self.max_age}" if ctype.startswith(b"application/json") else "no-cache"
                    ).encode()
                    return
                return await send(message)
            if "start" not in state:
                return await send(message)
            state["body"] += message.get("body", b"")
            if not message.get("more_body", False):
                await self._finish(send, state["start"], state["body"], inm, state["cache"], accepts_gzip)

        await self.app(scope, receive, wrapped)

    async def _post(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A POST's JSON answer is gzipped too (a long text's tokens compress about 5x), with no ETag: a POST
        is never answered from a cache."""
        if b"gzip" not in dict(scope["headers"]).get(b"accept-encoding", b"").lower():
            return await self.app(scope, receive, send)
        state: dict = {}

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                ctype = dict(message.get("headers", [])).get(b"content-type", b"")
                if ctype.startswith(b"application/json"):
                    state["start"], state["body"] = message, b""
                    return
                return await send(message)
            if "start" not in state:
                return await send(message)
            state["body"] += message.get("body", b"")
            if message.get("more_body", False):
                return
            start, body = state["start"], state["body"]
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in (b"content-length", b"vary")]
            if len(body) >= self.GZIP_MIN_BYTES:
                body = gzip.compress(body, compresslevel=4, mtime=0)
                headers.append((b"content-encoding", b"gzip"))
            headers += [(b"content-length", str(len(body)).encode()), (b"vary", b"Accept-Encoding")]
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, wrapped)

    async def _finish(
        self, send: Send, start: Message, body: bytes, inm: str, cache_control: bytes, accepts_gzip: bool
    ) -> None:
        digest = hashlib.sha256(body).hexdigest()[:32]
        compress = accepts_gzip and len(body) >= self.GZIP_MIN_BYTES
        etag = f'"{digest}-gzip"' if compress else f'"{digest}"'
        cache = [(b"etag", etag.encode()), (b"cache-control", cache_control), (b"vary", b"Accept-Encoding")]
        tags = [t.strip() for t in inm.split(",")]
        if f'"{digest}"' in tags or f'"{digest}-gzip"' in tags or inm.strip() == "*":
            await send({"type": "http.response.start", "status": 304, "headers": cache})
            await send({"type": "http.response.body", "body": b""})
            return
        if compress:
            body = self._gzip(digest, body)
            cache.append((b"content-encoding", b"gzip"))
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in (b"content-length", b"vary")]
        headers += [(b"content-length", str(len(body)).encode())] + cache
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _gzip(self, digest: str, body: bytes) -> bytes:
        out = self.gzipped.get(digest)
        if out is None:
            # level 4: most of level 6's ratio, 5x faster
            out = self.gzipped[digest] = gzip.compress(body, compresslevel=4, mtime=0)
            if len(self.gzipped) > self.GZIP_MEMO:
                self.gzipped.popitem(last=False)
        else:
            self.gzipped.move_to_end(digest)
        return out


class HeadAsGet:
    """HEAD is answered wherever GET is (FastAPI routes otherwise answer 405): the app runs the GET and only its
    status and headers go out, Content-Length and ETag those of the GET. A stream (server-sent events) is
    told that its client left as soon as its headers are sent, so it stops (a HEAD /api/generate writes
    nothing)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            return await self.app(scope, receive, send)
        started, first = anyio.Event(), True

        async def head_receive() -> Message:
            nonlocal first
            if first:  # the (empty) request body
                first = False
                return await receive()
            got: Message = {"type": "http.disconnect"}
            if started.is_set():
                return got
            async with anyio.create_task_group() as tg:  # the client leaving, or the headers going out

                async def real() -> None:
                    nonlocal got
                    got = await receive()
                    tg.cancel_scope.cancel()

                async def headers_sent() -> None:
                    await started.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(real)
                tg.start_soon(headers_sent)
            return got

        ended = False

        async def head_send(message: Message) -> None:
            nonlocal ended
            if message["type"] == "http.response.start":
                await send(message)
                started.set()
            elif message["type"] == "http.response.body":
                if not message.get("more_body", False) and not ended:
                    ended = True
                    await send({"type": "http.response.body", "body": b""})
            else:
                await send(message)

        await self.app({**scope, "method": "GET"}, head_receive, head_send)
        if started.is_set() and not ended:  # a stream that stopped when told its client left
            await send({"type": "http.response.body", "body": b""})


class HostlessRedirects:
    """A redirect's Location never names a host taken from the request: Starlette builds the trailing-slash
    redirects (/tour/tokens/ -> /tour/tokens, /static -> /static/) as absolute URLs from the Host header, so
    a forged Host would put its own site into a cached 307. An absolute Location on the request's own Host is
    sent as its path and query alone (a relative reference, RFC 9110 10.2.2), which browsers resolve against
    the address they asked."""

    REDIRECTS = (301, 302, 303, 307, 308)

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        host = dict(scope["headers"]).get(b"host", b"").decode("latin-1").lower()

        async def hostless_send(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] in self.REDIRECTS:
                message = {**message, "headers": [_hostless(k, v, host) for k, v in message.get("headers", [])]}
            await send(message)

        await self.app(scope, receive, hostless_send)


def _hostless(name: bytes, value: bytes, host: str) -> tuple[bytes, bytes]:
    if name.lower() != b"location":
        return name, value
    url = urlsplit(value.decode("latin-1"))
    if not url.netloc or url.netloc.lower() != host:
        return name, value
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    return name, ("/" + path.lstrip("/")).encode("latin-1")  # never '//host', a scheme-relative URL
