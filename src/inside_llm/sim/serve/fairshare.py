"""The fair share of a server shared by clients (issue 23): the Scheduler's `queue` hook for the live engine.

The core's waiting queue is "preempted requests at the front (most recently preempted first), then arrivals
by id". A server that many visitors share needs two more things, and this queue holds both:
- the waiting order: the head is the waiting request whose client has the fewest requests running, ties
  broken by queue order (the core's: preempted ones at the front, then arrivals in arrival order), so a lone
  visitor is seated before one client's twentieth chat. Request ids may arrive in any order (the live engine
  reuses a fixed set of ids).
- the seat swap: when every seat is taken and the head's client has at least `gap` (2) requests fewer
  running than the busiest client, that client's newest admitted request is named to be preempted
  (Scheduler.rebalance does it: recompute, to the front of the queue) so the head takes its seat in the same
  step. Each swap lowers the sum over clients of (requests running)^2 by at least 2 (busiest c_b -> c_b - 1,
  head's c_w <= c_b - 2 -> c_w + 1), so between two finishes or arrivals there are finitely many swaps: the
  swaps cannot livelock (tests/live/test_engine.py runs a pool too small for the load and sees every chat end).

`client_of(request_id)` names a request's client (any hashable).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence


class FairShare:
    """The waiting queue by fair share, with the seat swap. `order`: waiting request ids, front first."""

    def __init__(self, client_of: Callable[[int], Hashable], gap: int = 2):
        self.client_of, self.gap = client_of, gap
        self.order: list[int] = []
        self._head: int | None = None

    def __len__(self) -> int:
        return len(self.order)

    def __iter__(self):
        return iter(self.order)

    def __contains__(self, request_id: int) -> bool:
        return request_id in self.order

    def running_counts(self, running: Sequence[int]) -> dict[Hashable, int]:
        counts: dict[Hashable, int] = {}
        for rid in running:
            c = self.client_of(rid)
            counts[c] = counts.get(c, 0) + 1
        return counts

    # -- the queue interface the Scheduler calls --
    def arrive(self, request_id: int) -> None:
        self.order.append(request_id)

    def head(self, running: Sequence[int]) -> int | None:
        """The waiting request whose client has the fewest running, then the first in queue order."""
        if not self.order:
            self._head = None
            return None
        counts = self.running_counts(running)
        self._head = min(self.order, key=lambda r: counts.get(self.client_of(r), 0))  # min keeps the first of ties
        return self._head

    def pop_head(self) -> None:
        self.order.remove(self._head)
        self._head = None

    def push_front(self, request_id: int) -> None:
        self.order.insert(0, request_id)

    def withdraw(self, request_id: int) -> None:
        self.order.remove(request_id)

    def seat_swap(self, running: Sequence[int], head: int) -> int | None:
        """With every seat taken: the busiest client's newest admitted request, if head's client has at least
        `gap` fewer running; else None. running: in admission order."""
        counts = self.running_counts(running)
        if not counts:
            return None
        busiest = max(counts, key=lambda c: (counts[c], str(c)))
        if counts[busiest] < counts.get(self.client_of(head), 0) + self.gap:
            return None
        return next(r for r in reversed(running) if self.client_of(r) == busiest)
