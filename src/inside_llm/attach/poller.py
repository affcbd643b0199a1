"""Polls each attached server's /metrics about once a second, never letting a bad one stall anything.

One asyncio task per app (started with the app, or by the first GET /api/attach) polls every target on its own
schedule, side by side: a target in flight up to its deadline never delays the others. Each fetch is bounded: one deadline of FETCH_TIMEOUT_S for connecting and reading the whole page,
at most MAX_PAGE_BYTES read (after any gzip decoding, so a small compressed bomb is stopped too), no redirect
followed, no proxy from the environment. Parsing (prometheus_client, up to 1 MB of text) runs on a worker thread,
off the event loop. A request to /api/attach only reads the state kept here: it never waits for the network.

A target that fails (nothing answers, too slow, an HTTP error or a redirect, a page that is not exposition text or
from no known engine) is marked with what went wrong, in words, and its circuit opens: the next try waits
POLL_INTERVAL_S x 2^failures, at most MAX_BACKOFF_S; one good page closes it. The last good reading stays
(marked stale) so a page can show what the server said before it went quiet.

After a good /metrics page, the JSON pages beside it are read the same way (the same deadline, size cap, no
redirect), side by side: GET /v1/models from every engine, GET /slots and /props from llama.cpp's llama-server.
/slots is read on every poll, /v1/models and /props every PAGE_REFRESH_S (they change only on a restart). Each has
its own circuit (interval x 2^failures, at most MAX_BACKOFF_S) and its own status and error in words; a page that
fails never fails the target (its /metrics reading stands), and the figures it would have given say why they are
missing. endpoints.py maps them onto the Reading.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

import httpx

from . import endpoints
from .engines import Reading, read
from .exposition import Garbled, Scrape, parse
from .targets import Target

POLL_INTERVAL_S = 1.0
FETCH_TIMEOUT_S = 2.0  # connect + read the whole page
MAX_PAGE_BYTES = 1 << 20
MAX_BACKOFF_S = 30.0
WINDOW_S = 10.0  # rates and windowed quantiles: the newest scrape against the oldest within this many seconds
STATUSES = ("waiting", "ok", "down", "slow", "refused", "garbled", "unknown")
PAGES = {"models": "/v1/models", "slots": "/slots", "props": "/props"}  # beside /metrics
LLAMACPP_PAGES = ("slots", "props")  # read only from llama.cpp
PAGE_REFRESH_S = {"models": 30.0, "props": 30.0, "slots": 0.0}  # 0: every poll
READERS = {"models": endpoints.models_page, "slots": endpoints.slots_page, "props": endpoints.props_page}


class TargetError(Exception):
    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@dataclass
class PageState:
    """One JSON page beside /metrics (GET /v1/models, /slots, /props): its own status, error and circuit."""

    key: str
    path: str
    status: str = "waiting"
    error: str | None = "Not read yet."
    failures: int = 0
    next_try: float = 0.0
    last_try: float | None = None
    last_ok: float | None = None
    data: object = None  # the last good page, read (endpoints.ModelsPage, SlotsPage, PropsPage)

    def view(self, now: float) -> dict:
        age = lambda t: None if t is None else round(now - t, 3)  # noqa: E731
        return {
            "path": self.path,
            "status": self.status,
            "error": self.error,
            "failures": self.failures,
            "checked_s_ago": age(self.last_try),
            "last_ok_s_ago": age(self.last_ok),
            "retry_in_s": round(max(0.0, self.next_try - now), 3) if self.failures else None,
        }

    def why(self) -> str | None:
        """Why its figures are missing, in words (None when it is fine or not tried yet)."""
        if self.status in ("ok", "waiting"):
            return None
        return f"GET {self.path} failed ({self.status}): {self.error}"


def _pages() -> dict[str, PageState]:
    return {k: PageState(k, path) for k, path in PAGES.items()}


@dataclass
class TargetState:
    target: Target
    status: str = "waiting"
    error: str | None = "Not polled yet."
    failures: int = 0
    polls: int = 0
    next_try: float = 0.0
    last_try: float | None = None
    last_ok: float | None = None
    reading: Reading | None = None
    history: deque = field(default_factory=deque)  # (monotonic time, Scrape), oldest first
    pages: dict[str, PageState] = field(default_factory=_pages)

    def view(self, now: float) -> dict:
        age = lambda t: None if t is None else round(now - t, 3)  # noqa: E731
        return {
            "name": self.target.name,
            "status": self.status,
            "error": self.error,
            "stale": self.status != "ok" and self.reading is not None,
            "polls": self.polls,
            "failures": self.failures,
            "checked_s_ago": age(self.last_try),
            "last_ok_s_ago": age(self.last_ok),
            "retry_in_s": round(max(0.0, self.next_try - now), 3) if self.failures else None,
            "reading": self.reading,
            "pages": [p.view(now) for p in self.pages.values() if p.last_try is not None],
        }


async def fetch_page(client: httpx.AsyncClient, url: str, timeout_s: float = FETCH_TIMEOUT_S,
                     max_bytes: int = MAX_PAGE_BYTES, what: str = "its metrics",
                     accept: str = "text/plain") -> str:  # fmt: skip
    """The page at `url` as text, within `timeout_s` and `max_bytes`; TargetError (status, words) otherwise.
    `what` names the page in the words of an error ("its metrics", "GET /slots")."""
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("GET", url, headers={"accept": accept}) as r:
                if r.is_redirect:
                    raise TargetError(
                        "refused",
                        f"It answered HTTP {r.status_code}, a redirect to another address; redirects are not "
                        "followed (the operator names the exact URL).",
                    )
                if r.status_code != 200:
                    raise TargetError("refused", f"It answered HTTP {r.status_code} instead of {what}.")
                declared = r.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > max_bytes:
                    raise TargetError("garbled", _too_big(max_bytes, what))
                buf = bytearray()
                async for chunk in r.aiter_bytes():
                    buf += chunk
                    if len(buf) > max_bytes:
                        raise TargetError("garbled", _too_big(max_bytes, what))
    except TimeoutError:
        raise TargetError("slow", f"It did not send its whole page within {timeout_s:g} s.") from None
    except httpx.ConnectError:
        raise TargetError("down", "Nothing answers at its address (the connection was refused or failed).") from None
    except httpx.TimeoutException:
        raise TargetError("slow", f"It did not send its whole page within {timeout_s:g} s.") from None
    except httpx.HTTPError as e:
        raise TargetError("down", f"The connection failed ({type(e).__name__}).") from None
    return buf.decode("utf-8", errors="replace")


def _too_big(max_bytes: int, what: str = "its metrics") -> str:
    return f"It sent more than {max_bytes / 1e6:g} MB for {what}; reading stopped there."


def _digest(text: str) -> Scrape:
    try:
        return parse(text)
    except Garbled as e:
        raise TargetError("garbled", str(e)) from None


def _json_page(key: str, path: str, text: str) -> object:
    try:
        return READERS[key](endpoints.parse_json(text, path))
    except Garbled as e:
        raise TargetError("garbled", str(e)) from None


def _read(now_scrape: Scrape, then: tuple[float, Scrape] | None, t: float) -> Reading:
    try:
        if then is None:
            return read(now_scrape)
        return read(now_scrape, then[1], t - then[0])
    except LookupError as e:
        raise TargetError("unknown", str(e)) from None


class Poller:
    """The state of every attached server, and the task that keeps it fresh."""

    def __init__(self, targets: tuple[Target, ...], interval_s: float = POLL_INTERVAL_S,
                 timeout_s: float = FETCH_TIMEOUT_S, max_bytes: int = MAX_PAGE_BYTES):  # fmt: skip
        self.interval_s, self.timeout_s, self.max_bytes = interval_s, timeout_s, max_bytes
        self.states = {t.name: TargetState(t) for t in targets}
        self._task: asyncio.Task | None = None
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def names(self) -> list[str]:
        return list(self.states)

    def views(self) -> list[dict]:
        now = time.monotonic()
        return [s.view(now) for s in self.states.values()]

    def view(self, name: str) -> dict | None:
        s = self.states.get(name)
        return None if s is None else s.view(time.monotonic())

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                follow_redirects=False,
                trust_env=False,  # no proxy or .netrc from the environment
                timeout=httpx.Timeout(self.timeout_s),
                limits=httpx.Limits(
                    max_connections=2 * len(self.states) + 2, max_keepalive_connections=len(self.states)
                ),
            )
        return self._client

    async def poll_target(self, s: TargetState) -> None:
        """One bounded try at one target; its state says how it went."""
        t0 = time.monotonic()
        s.polls += 1
        s.last_try = t0
        s.next_try = t0 + 2 * self.timeout_s + self.interval_s  # in flight: not due (set again when it ends)
        try:
            text = await fetch_page(self.client(), s.target.metrics_url, self.timeout_s, self.max_bytes)
            scrape = await asyncio.to_thread(_digest, text)
            t = time.monotonic()
            while s.history and t - s.history[0][0] > WINDOW_S:
                s.history.popleft()
            then = s.history[0] if s.history else None
            reading = await asyncio.to_thread(_read, scrape, then, t)
            reading = await self.read_pages(s, reading)
        except Exception as e:  # TargetError in words; anything else is still this target's failure, never the loop's
            if not isinstance(e, TargetError):
                e = TargetError("unknown", f"Reading its page failed ({type(e).__name__}).")
            s.failures += 1
            s.status, s.error = e.status, e.message
            s.next_try = time.monotonic() + min(self.interval_s * 2**s.failures, MAX_BACKOFF_S)
            return
        s.history.append((t, scrape))
        s.status, s.error, s.failures, s.reading, s.last_ok = "ok", None, 0, reading, t
        s.next_try = t0 + self.interval_s

    async def read_pages(self, s: TargetState, reading: Reading) -> Reading:
        """The JSON pages beside /metrics that are due, side by side, each bounded; the reading with what they add.
        A page that fails says why in its own state and in the figures it would have given."""
        keys = [k for k in PAGES if k not in LLAMACPP_PAGES or reading.engine == "llama.cpp"]
        now = time.monotonic()
        due = [s.pages[k] for k in keys if s.pages[k].next_try <= now]
        if due:
            await asyncio.gather(*(self.read_page(s, p) for p in due))
        pages = {k: s.pages[k] for k in keys}
        why = {k: w for k, p in pages.items() if (w := p.why())}
        data = {k: p.data for k, p in pages.items()}
        fresh_slots = "slots" in pages and pages["slots"].status == "ok"  # /slots is "now": a stale one is not shown
        return endpoints.apply(reading, data["models"], data.get("slots") if fresh_slots else None,
                               data.get("props"), why)  # fmt: skip

    async def read_page(self, s: TargetState, p: PageState) -> None:
        t0 = time.monotonic()
        p.last_try = t0
        try:
            text = await fetch_page(self.client(), s.target.base_url + p.path, self.timeout_s, self.max_bytes,
                                    f"the JSON of GET {p.path}", "application/json")  # fmt: skip
            data = await asyncio.to_thread(_json_page, p.key, p.path, text)
        except Exception as e:  # a page's failure is its own, never the target's
            if not isinstance(e, TargetError):
                e = TargetError("garbled", f"Reading GET {p.path} failed ({type(e).__name__}).")
            p.failures += 1
            p.status, p.error = e.status, e.message
            p.next_try = time.monotonic() + min(self.interval_s * 2**p.failures, MAX_BACKOFF_S)
            return
        p.data, p.status, p.error, p.failures, p.last_ok = data, "ok", None, 0, time.monotonic()
        p.next_try = t0 + PAGE_REFRESH_S[p.key]

    async def poll_once(self) -> None:
        """Every target that is due, side by side."""
        now = time.monotonic()
        due = [s for s in self.states.values() if s.next_try <= now]
        if due:
            await asyncio.gather(*(self.poll_target(s) for s in due))

    async def run(self) -> None:
        """Each target on its own schedule: a slow one (in flight up to its deadline) never delays the others."""
        inflight: dict[str, asyncio.Task] = {}
        try:
            while True:
                now = time.monotonic()
                for name, s in self.states.items():
                    task = inflight.get(name)
                    if (task is None or task.done()) and s.next_try <= now:
                        inflight[name] = asyncio.create_task(self.poll_target(s), name=f"attach-poll-{name}")
                wake = min(s.next_try for s in self.states.values())
                await asyncio.sleep(min(max(0.05, wake - time.monotonic()), self.interval_s))
        finally:
            for task in inflight.values():
                task.cancel()
            await asyncio.gather(*inflight.values(), return_exceptions=True)

    def ensure_started(self) -> None:
        """Start the polling task on the running loop, once (the app's startup, or the first request)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new loop (a test client's): the old task and connections died with the old one
            self._loop, self._task, self._client = loop, None, None
        if self.states and (self._task is None or self._task.done()):
            self._task = loop.create_task(self.run(), name="attach-poller")

    async def ensure_started_async(self) -> None:  # the app's startup hook
        self.ensure_started()

    async def stop(self) -> None:
        if self._loop is not asyncio.get_running_loop():  # started on another loop, gone with it
            self._loop, self._task, self._client = None, None, None
            return
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None
