"""The HTTP/1.1 protocol `inside-llm serve` runs: uvicorn's h11 protocol with a deadline on each request head.

uvicorn closes a keep-alive connection only when it sends nothing for `timeout_keep_alive` seconds, and any
byte resets that clock: a client that sends one header byte every few seconds holds its connection (and a
file descriptor) for as long as it likes (issue 23, L6: 500 such connections all stayed open). Here every
connection must send a whole request head (request line and headers) within HEADER_TIMEOUT_S of opening, or
of the end of its previous response; else it is closed. A request that is being answered (a stream included)
is never cut: the deadline only closes a connection whose next request head is still incomplete.
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 10.0  # a browser sends its whole head in one packet; 10 s is generous for a slow phone


class HeaderTimeoutProtocol(H11Protocol):
    """H11Protocol that closes a connection whose request head is not complete within header_timeout_s."""

    header_timeout_s = HEADER_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._arm_head_timer()

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        timer, self._head_timer = getattr(self, "_head_timer", None), None
        if timer is not None:
            timer.cancel()

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()  # no whole request head in time: nothing is being answered on it

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm_head_timer()  # the head is in; the app's own pace applies from here

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)
