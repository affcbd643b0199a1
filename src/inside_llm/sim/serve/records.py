"""What a batching run reports, from the scheduler's step log (steplog.StepLog, and nothing else): frames for the stage, seat spans, per-request
timings, run metrics. These dataclasses are the response itself (the router serialises them as they are).

Metrics cover every step and every request; only frames are sampled. Frames are sampled on one clock
shared by the policies (at most max_frames instants from t=0 to the last finish of any policy; each
instant shows the step in progress then), so the stage can play static and continuous side by side.
A frame describes the end of its step. Lists are columns: entry i of every list belongs to frame i
(or span i, or request i), which keeps a response small and quick to write. Percentiles are numpy's
linear interpolation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from inside_llm.sim.core.derivation import derive
from inside_llm.sim.core.result import as_json
from inside_llm.sim.serve.steplog import StepLog

if TYPE_CHECKING:
    from inside_llm.sim.serve.workloads import Trace


@dataclass
class RunMetrics:
    """Throughput, latency percentiles and seat use over the whole run (first arrival to last finish)."""

    throughput_tokens_per_s: float
    requests_per_s: float
    ttft_ms_p50: float
    ttft_ms_p99: float
    tpot_ms_p50: float
    tpot_ms_p99: float
    latency_ms_p50: float
    latency_ms_p99: float
    seat_utilization: float
    mean_batch_size: float
    engine_busy_fraction: float
    num_preemptions: int
    num_steps: int
    num_output_tokens: int
    makespan_s: float


@dataclass
class BatchingFrames:
    """Sampled instants, one entry per frame in every list. The waiting queue at frame i is
    waiting_preempted_ids[i] (preempted requests, at its front) followed by the never-seated arrivals
    waiting_first_new_id[i], +1, ... up to num_waiting[i] requests in all."""

    step: list[int]
    time_s: list[float]  # start of the step in progress (s)
    duration_s: list[float]
    num_waiting: list[int]
    waiting_preempted_ids: list[list[int]]
    waiting_first_new_id: list[int]
    num_occupied_seats: list[int]
    num_prefill_tokens: list[int]
    num_decode_tokens: list[int]
    num_tokens_produced: list[int]  # in this step
    num_tokens_produced_total: list[int]
    num_finished: list[int]
    num_kv_blocks_used: list[int]
    num_preemptions_total: list[int]


@dataclass
class SeatSpans:
    """Who sat in which seat, when: one span per stay (a preempted request that returns gets another).
    start_s: start of the first step it is seated for; end_s: end of its last step in the seat (its
    finish, for the last stay); first_token_s: its first output token (before start_s after a preemption)."""

    seat: list[int]
    request_id: list[int]
    start_s: list[float]
    first_token_s: list[float]
    end_s: list[float]


@dataclass
class RequestTimes:
    """Per request (entry i is request i): when its first token came, when it finished (s), preemptions."""

    first_token_s: list[float]
    finish_s: list[float]
    num_preemptions: list[int]


@dataclass
class TraceRequests:
    """The trace every policy serves (entry i is request i): arrival (s) and lengths (tokens)."""

    arrival_s: list[float]
    num_prompt_tokens: list[int]
    num_output_tokens: list[int]


@dataclass
class PrefixCache:
    """The prefix cache over the run: at each admission of a request that begins with the shared system
    prompt, its hashed tokens are looked up (query) and those found computed are not prefilled (hit).
    """

    query_tokens: int
    hit_tokens: int
    hit_rate: float  # hit / query (0 when nothing was looked up)
    num_evictions: int  # cached pages handed out to other tokens (LRU)


@dataclass
class PolicyRun(RunMetrics):
    name: str
    num_kv_blocks: int
    prefix_cache: PrefixCache
    math: dict[str, dict]
    frames: BatchingFrames
    seat_spans: SeatSpans
    requests: RequestTimes


@dataclass
class BatchingResult:
    params: dict
    trace: dict
    requests: TraceRequests
    horizon_s: float  # last finish over every policy: the shared clock runs 0..horizon_s
    step_time: dict
    policies: list[PolicyRun]


def step_starts(log: StepLog) -> np.ndarray:
    """Start time (s) of every step: records start when planned; steps inside one run back to back."""
    d = np.frombuffer(log.durations, dtype=np.float64)
    before = np.cumsum(d) - d  # busy time before each step, as if the engine never idled
    firsts = np.array([r.first_step for r in log.records], dtype=np.int64)
    offsets = np.array([r.start_s for r in log.records]) - before[firsts]
    return before + np.repeat(offsets, [r.num_steps for r in log.records])


def sample_steps(starts: np.ndarray, horizon_s: float, max_frames: int) -> np.ndarray:
    """Indices of the steps in progress at max_frames instants spread over [0, horizon_s]."""
    if len(starts) <= max_frames:
        return np.arange(len(starts))
    idx = np.searchsorted(starts, np.linspace(0.0, horizon_s, max_frames), side="right") - 1
    return np.unique(np.clip(idx, 0, len(starts) - 1))


def frames(log: StepLog, indices: np.ndarray, starts: np.ndarray) -> BatchingFrames:
    """The frames of steps `indices` (sorted), each read from the record it belongs to."""
    firsts = [r.first_step for r in log.records]
    record_of = np.searchsorted(firsts, indices, side="right") - 1
    ends = starts[indices] + np.frombuffer(log.durations, dtype=np.float64)[indices]
    arrived = np.searchsorted(log.requests.arrival_s, ends, side="right").tolist()
    out = BatchingFrames(*([] for _ in range(14)))
    for i, k, n_arrived in zip(indices.tolist(), record_of.tolist(), arrived):
        rec = log.records[k]
        j = i - rec.first_step  # steps since the record's first; each adds a token per occupied seat
        out.step.append(i)
        out.time_s.append(round(float(starts[i]), 6))
        out.duration_s.append(round(log.durations[i], 6))
        out.num_waiting.append(len(rec.preempted_waiting_ids) + n_arrived - rec.first_new_waiting_id)
        out.waiting_preempted_ids.append(list(rec.preempted_waiting_ids))
        out.waiting_first_new_id.append(rec.first_new_waiting_id)
        out.num_occupied_seats.append(rec.num_occupied_seats)
        out.num_prefill_tokens.append(rec.num_prefill_tokens)
        out.num_decode_tokens.append(rec.num_decode_seqs)
        out.num_tokens_produced.append(rec.num_sampled_per_step)
        out.num_tokens_produced_total.append(rec.num_tokens_produced_before + (j + 1) * rec.num_sampled_per_step)
        out.num_finished.append(rec.num_finished_before + (rec.num_finished_in if j == rec.num_steps - 1 else 0))
        out.num_kv_blocks_used.append(rec.kv_blocks_used(j, log.block_size))
        out.num_preemptions_total.append(rec.num_preemptions_total)
    return out


def seat_spans(log: StepLog, starts: np.ndarray) -> SeatSpans:
    """Every stay in a seat, sorted by start then seat; exact, from every step, not from the frames.
    Records share one seat list until a seat changes, so only a record with other seats is compared seat by seat."""
    ends = (starts + np.frombuffer(log.durations, dtype=np.float64)).tolist()
    open_: list = [None] * log.seats  # per seat: (request_id, start_s) of the stay in progress
    stays, seated, last_end = [], None, 0.0  # last_end: end of the last record read
    for rec in log.records:
        ids = rec.seat_request_ids
        if ids is not seated and ids != seated:
            start = float(starts[rec.first_step])
            for seat, rid in enumerate(ids):
                cur = open_[seat]
                if cur is not None and cur[0] == rid:
                    continue
                if cur is not None:  # its last record was the one before this
                    stays.append((cur[1], seat, cur[0], last_end))
                open_[seat] = None if rid is None else (rid, start)
            seated = ids
        last_end = ends[rec.first_step + rec.num_steps - 1]
    stays += [(c[1], s, c[0], last_end) for s, c in enumerate(open_) if c]
    stays.sort(key=lambda s: (s[0], s[1]))
    first_token_s = log.requests.first_token_s.tolist()
    return SeatSpans(
        seat=[s[1] for s in stays],
        request_id=[s[2] for s in stays],
        start_s=[round(s[0], 6) for s in stays],
        first_token_s=[round(first_token_s[s[2]], 6) for s in stays],
        end_s=[round(s[3], 6) for s in stays],
    )


def request_times(log: StepLog) -> RequestTimes:
    return RequestTimes(
        first_token_s=[round(t, 6) for t in log.requests.first_token_s.tolist()],
        finish_s=[round(t, 6) for t in log.requests.finish_s.tolist()],
        num_preemptions=log.requests.preemptions.tolist(),
    )


def trace_requests(trace: Trace) -> TraceRequests:
    return TraceRequests(
        arrival_s=np.round(trace.arrival_s, 6).tolist(),
        num_prompt_tokens=trace.num_prompt_tokens.tolist(),
        num_output_tokens=trace.num_output_tokens.tolist(),
    )


def _pct(x: np.ndarray, q: float) -> float:
    return round(float(np.percentile(x, q)), 3) if len(x) else 0.0


def run_metrics(log: StepLog) -> RunMetrics:
    """TTFT = first token - arrival; TPOT = (finish - first token) / (output tokens - 1), over answers
    longer than one token; latency = finish - arrival."""
    arr = log.requests.arrival_s
    first, fin, out_tokens = log.requests.first_token_s, log.requests.finish_s, log.requests.max_tokens
    multi = out_tokens > 1
    tpot = (fin - first)[multi] / (out_tokens[multi] - 1) * 1e3
    makespan = float(fin.max() - arr.min())
    busy = float(np.sum(np.frombuffer(log.durations, dtype=np.float64)))
    return RunMetrics(
        throughput_tokens_per_s=round(float(out_tokens.sum()) / makespan, 3),
        requests_per_s=round(len(arr) / makespan, 4),
        ttft_ms_p50=_pct((first - arr) * 1e3, 50),
        ttft_ms_p99=_pct((first - arr) * 1e3, 99),
        tpot_ms_p50=_pct(tpot, 50),
        tpot_ms_p99=_pct(tpot, 99),
        latency_ms_p50=_pct((fin - arr) * 1e3, 50),
        latency_ms_p99=_pct((fin - arr) * 1e3, 99),
        seat_utilization=round(log.busy_seat_s / (log.seats * makespan), 4),
        mean_batch_size=round(log.busy_seat_s / busy, 3),
        engine_busy_fraction=round(busy / makespan, 4),
        num_preemptions=log.num_preemptions,
        num_steps=len(log.durations),
        num_output_tokens=int(out_tokens.sum()),
        makespan_s=round(makespan, 6),
    )


def metrics_math(m: RunMetrics, log: StepLog) -> dict[str, dict]:
    """Show-the-math for the headline numbers."""
    return as_json(
        {
            "throughput_tokens_per_s": derive(
                m.throughput_tokens_per_s,
                "tokens/s",
                "sum of output tokens / (last finish - first arrival)",
                {"num_output_tokens": (m.num_output_tokens, "tokens"), "makespan": (m.makespan_s, "s")},
            ),
            "seat_utilization": derive(
                m.seat_utilization,
                "fraction",
                "sum over steps of (step duration x occupied seats) / (seats x makespan)",
                {
                    "seat_seconds_used": (round(log.busy_seat_s, 6), "seat-s"),
                    "seats": (log.seats, "seats"),
                    "makespan": (m.makespan_s, "s"),
                },
                ["a seat is occupied from admission until the step that produces the request's last token"],
            ),
            "ttft_ms_p50": derive(
                m.ttft_ms_p50,
                "ms",
                "median over requests of (end of the step that samples its first token - arrival)",
                {"num_requests": (len(log.requests), "requests")},
                ["includes queueing; a prompt may be prefilled over several steps (chunked)"],
            ),
            "latency_ms_p50": derive(
                m.latency_ms_p50,
                "ms",
                "median over requests of (finish - arrival)",
                {"num_requests": (len(log.requests), "requests")},
            ),
        }
    )


def policy_run(log: StepLog, horizon_s: float, max_frames: int) -> PolicyRun:
    starts = step_starts(log)
    m = run_metrics(log)
    return PolicyRun(
        **vars(m),
        name=log.policy,
        num_kv_blocks=log.num_kv_blocks,
        prefix_cache=PrefixCache(
            query_tokens=log.prefix_query_tokens,
            hit_tokens=log.prefix_hit_tokens,
            hit_rate=round(log.prefix_hit_tokens / log.prefix_query_tokens, 4) if log.prefix_query_tokens else 0.0,
            num_evictions=log.num_prefix_evictions,
        ),
        math=metrics_math(m, log),
        frames=frames(log, sample_steps(starts, horizon_s, max_frames), starts),
        seat_spans=seat_spans(log, starts),
        requests=request_times(log),
    )
