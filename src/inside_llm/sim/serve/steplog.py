"""The step log: what a scheduler writes as it runs and the only thing records.py reads.

One StepRecord per planned step, or per run of identical pure-decode steps (the decode fast-forward);
the StepLog holds them with the per-step durations the clock gave, the requests' columns and the few
run-wide counters the reports need. Nothing here refers to the scheduler, so the reports cannot reach
into its private state (the old scheduler <-> records import circle).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np

from inside_llm.sim.serve.kv import num_blocks_for
from inside_llm.sim.serve.requests import Requests


@dataclass(slots=True)
class StepRecord:
    """The log of one planned step, or of a run of num_steps identical decode steps.

    Seat lists describe the end of the record's first step; in a decode run every occupied seat
    gains one token per step after that. Counters ending in _before count everything before it.
    """

    first_step: int  # index of its first step in StepLog.durations
    num_steps: int
    start_s: float
    seat_request_ids: list[int | None]
    seat_num_computed_tokens: list[int] | None  # only when the scheduler records seat tokens (tests)
    seat_num_output_tokens: list[int] | None
    preempted_waiting_ids: tuple[int, ...]  # the waiting queue's front, in order
    first_new_waiting_id: int  # then never-admitted arrivals, from this id on
    num_prefill_tokens: int
    num_decode_seqs: int
    num_sampled_per_step: int  # requests that sampled a token in each of its steps
    num_kv_blocks_used: int | None  # at the end of its first step (decode run: computed when asked)
    decode_computed_tokens: np.ndarray | None  # decode run: per scheduled request, tokens before the run
    num_occupied_seats: int
    num_finished_before: int
    num_finished_in: int
    num_tokens_produced_before: int
    num_preemptions_total: int

    def kv_blocks_used(self, j: int, block_size: int) -> int:
        """Blocks in use at the end of its (j+1)-th step (requests hold exactly what they computed)."""
        if self.decode_computed_tokens is None:
            return self.num_kv_blocks_used
        return int(np.sum(num_blocks_for(self.decode_computed_tokens + j + 1, block_size)))


@dataclass
class StepLog:
    """A whole run: policy and pool, the requests' columns, every step's duration (s) and its records."""

    policy: str
    seats: int
    block_size: int
    num_kv_blocks: int
    requests: Requests
    durations: array = field(default_factory=lambda: array("d"))  # seconds, one per engine step
    records: list[StepRecord] = field(default_factory=list)  # one per planned step or decode run
    busy_seat_s: float = 0.0  # sum over steps of duration * occupied seats
    num_preemptions: int = 0
    prefix_query_tokens: int = 0  # prefix cache: hashed tokens looked up at admissions
    prefix_hit_tokens: int = 0  # of those, found computed
    num_prefix_evictions: int = 0  # cached pages handed out again
