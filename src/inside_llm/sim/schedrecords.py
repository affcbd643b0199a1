"""What a batching run reports: frames for the stage, per-request timings, run metrics.

Metrics cover every step and every request; only frames are sampled. Frames are sampled on one
clock shared by the policies (at most max_frames instants from t=0 to the last finish of any
policy; each instant shows the step in progress then), so the stage can play static and
continuous side by side. A frame describes the end of its step: seats still show the requests
that finished in it, with their last token. Percentiles are numpy's linear interpolation.
Also here: the bounds of simulate_batching's parameters.
"""

from __future__ import annotations

import numpy as np

from inside_llm.sim.derivation import derive
from inside_llm.sim.workloads import check_int

POLICIES = ("static", "continuous")
MAX_RATE = 1000.0  # requests/s
MAX_KV_CAPACITY_TOKENS = 4_194_304
WAITING_SHOWN = 64  # frames list at most this many waiting request ids (num_waiting counts all)


class Segment:
    """Log of one planned step, or of k identical decode steps. Seat arrays describe the end of its
    first step; in a k-step decode run every occupied seat gains one token per step after that."""

    __slots__ = ("first_step", "k", "start_s", "seat_request_ids", "seat_num_computed_tokens",
                 "seat_num_output_tokens", "front_ids", "admit_ptr", "num_prefill_tokens", "num_decode_tokens", "num_produced",
                 "num_kv_blocks", "bulk_computed", "num_occupied", "num_finished_before",
                 "num_finished_in", "num_produced_before", "num_preemptions_total")


def log_segment(engine, step, produced: int, num_done: int) -> None:
    """Append the Segment for a finished step (or decode run), before its finished requests leave."""
    seg, k = Segment(), step.k
    seg.first_step, seg.k, seg.start_s = len(engine.durations), k, step.start_s
    engine.durations.extend(step.durations)
    occ = engine.seat_req
    seg.seat_request_ids = [r.request_id if r else None for r in occ]
    seg.seat_num_computed_tokens = [r.num_computed_tokens - k + 1 if r else 0 for r in occ]
    seg.seat_num_output_tokens = [r.num_output_tokens - k + 1 if r else 0 for r in occ]
    seg.front_ids, seg.admit_ptr = tuple(r.request_id for r in engine.front), engine.admit_ptr
    seg.num_prefill_tokens, seg.num_decode_tokens = step.num_prefill_tokens, step.num_decode_seqs
    seg.num_produced, seg.num_kv_blocks = produced, engine.kv.pool.num_used_blocks
    seg.bulk_computed = None
    if k > 1:
        seg.bulk_computed = np.array([r.num_computed_tokens - k for r, _ in step.sched], dtype=np.int64)
        seg.num_kv_blocks = int(np.sum(-(-(seg.bulk_computed + 1) // engine.block_size)))
    seg.num_occupied = len(engine.running)
    seg.num_finished_before, seg.num_finished_in = engine.num_finished, num_done
    seg.num_produced_before, seg.num_preemptions_total = engine.num_produced, engine.num_preemptions
    engine.num_produced += produced * k
    engine.busy_seat_s += len(engine.running) * sum(step.durations)
    engine.segments.append(seg)


def step_starts(engine) -> np.ndarray:
    """Start time (s) of every step: segments start when planned; steps inside one run back to back."""
    d = np.frombuffer(engine.durations, dtype=np.float64)
    before = np.cumsum(d) - d  # busy time before each step, as if the engine never idled
    firsts = np.array([s.first_step for s in engine.segments], dtype=np.int64)
    offsets = np.array([s.start_s for s in engine.segments]) - before[firsts]
    return before + np.repeat(offsets, [s.k for s in engine.segments])


def sample_steps(starts: np.ndarray, horizon_s: float, max_frames: int) -> np.ndarray:
    """Indices of the steps in progress at max_frames instants spread over [0, horizon_s]."""
    if len(starts) <= max_frames:
        return np.arange(len(starts))
    idx = np.searchsorted(starts, np.linspace(0.0, horizon_s, max_frames), side="right") - 1
    return np.unique(np.clip(idx, 0, len(starts) - 1))


def frame(engine, seg, i: int, start_s: float) -> dict:
    j = i - seg.first_step  # steps since the segment's first; each adds a token per occupied seat
    end_s = start_s + engine.durations[i]
    arrived = int(np.searchsorted(engine.arrival_s, end_s, side="right"))
    waiting = list(seg.front_ids[:WAITING_SHOWN])
    waiting += range(seg.admit_ptr, min(arrived, seg.admit_ptr + WAITING_SHOWN - len(waiting)))
    blocks = seg.num_kv_blocks if j == 0 else int(np.sum(-(-(seg.bulk_computed + j + 1) // engine.block_size)))
    ids = seg.seat_request_ids
    return {
        "step": i, "time_s": round(start_s, 6), "duration_s": round(engine.durations[i], 6),
        "seat_request_ids": list(ids),
        "seat_num_computed_tokens": [n + j if r is not None else 0
                                     for r, n in zip(ids, seg.seat_num_computed_tokens)],
        "seat_num_output_tokens": [n + j if r is not None else 0 for r, n in zip(ids, seg.seat_num_output_tokens)],
        "waiting_request_ids": waiting, "num_waiting": len(seg.front_ids) + arrived - seg.admit_ptr,
        "num_prefill_tokens": seg.num_prefill_tokens, "num_decode_tokens": seg.num_decode_tokens,
        "num_tokens_produced": seg.num_produced,
        "num_tokens_produced_total": seg.num_produced_before + (j + 1) * seg.num_produced,
        "num_kv_blocks_used": blocks, "num_occupied_seats": seg.num_occupied,
        "num_finished": seg.num_finished_before + (seg.num_finished_in if j == seg.k - 1 else 0),
        "num_preemptions_total": seg.num_preemptions_total,
    }


def frames(engine, indices: np.ndarray, starts: np.ndarray) -> list[dict]:
    firsts = [s.first_step for s in engine.segments]
    seg_of = np.searchsorted(firsts, indices, side="right") - 1
    return [frame(engine, engine.segments[s], int(i), float(starts[i])) for i, s in zip(indices, seg_of)]


def seat_spans(engine, starts: np.ndarray) -> list[dict]:
    """Who sat in which seat, when: one span per stay (a preempted request that returns gets another).

    start_s: start of the first step the request is seated for; end_s: end of its last such step
    (for a finished request, its finish time). Exact, from every step, not from the sampled frames.
    """
    ends = starts + np.frombuffer(engine.durations, dtype=np.float64)
    open_: list = [None] * engine.seats  # per seat: [request_id, start_s, end_s] of the stay in progress
    out = []
    for seg in engine.segments:
        last_end = float(ends[seg.first_step + seg.k - 1])
        for seat, rid in enumerate(seg.seat_request_ids):
            cur = open_[seat]
            if cur is not None and cur[0] == rid:
                cur[2] = last_end
                continue
            if cur is not None:
                out.append({"seat": seat, "request_id": cur[0], "start_s": cur[1], "end_s": cur[2]})
            open_[seat] = None if rid is None else [rid, float(starts[seg.first_step]), last_end]
    out += [{"seat": s, "request_id": c[0], "start_s": c[1], "end_s": c[2]} for s, c in enumerate(open_) if c]
    out.sort(key=lambda d: (d["start_s"], d["seat"]))
    return [{**d, "start_s": round(d["start_s"], 6), "end_s": round(d["end_s"], 6)} for d in out]


def request_records(engine) -> list[dict]:
    """Per request: arrival, first token, finish (s); TTFT, TPOT, latency (ms); preemptions.
    TPOT = (finish - first token) / (output tokens - 1); None for one-token answers."""
    out = []
    for r in engine.reqs:
        tpot = (r.finish_s - r.first_token_s) / (r.max_tokens - 1) * 1e3 if r.max_tokens > 1 else None
        out.append({
            "request_id": r.request_id, "arrival_s": round(r.arrival_s, 6),
            "first_token_s": round(r.first_token_s, 6), "finish_s": round(r.finish_s, 6),
            "num_prompt_tokens": r.num_prompt_tokens, "num_output_tokens": r.max_tokens,
            "ttft_ms": round((r.first_token_s - r.arrival_s) * 1e3, 3),
            "tpot_ms": None if tpot is None else round(tpot, 3),
            "latency_ms": round((r.finish_s - r.arrival_s) * 1e3, 3), "num_preemptions": r.num_preemptions,
        })
    return out


def _pct(x: np.ndarray, q: float) -> float:
    return round(float(np.percentile(x, q)), 3) if len(x) else 0.0


def run_metrics(engine) -> dict:
    """Throughput, latency percentiles and seat use over the whole run (first arrival to last finish)."""
    arr = np.array([r.arrival_s for r in engine.reqs])
    first = np.array([r.first_token_s for r in engine.reqs])
    fin = np.array([r.finish_s for r in engine.reqs])
    out_tokens = np.array([r.max_tokens for r in engine.reqs])
    multi = out_tokens > 1
    tpot = (fin - first)[multi] / (out_tokens[multi] - 1) * 1e3
    makespan = float(fin.max() - arr.min())
    busy = float(np.sum(np.frombuffer(engine.durations, dtype=np.float64)))
    return {
        "throughput_tokens_per_s": round(float(out_tokens.sum()) / makespan, 3),
        "requests_per_s": round(len(arr) / makespan, 4),
        "ttft_ms_p50": _pct((first - arr) * 1e3, 50), "ttft_ms_p99": _pct((first - arr) * 1e3, 99),
        "tpot_ms_p50": _pct(tpot, 50), "tpot_ms_p99": _pct(tpot, 99),
        "latency_ms_p50": _pct((fin - arr) * 1e3, 50), "latency_ms_p99": _pct((fin - arr) * 1e3, 99),
        "seat_utilization": round(engine.busy_seat_s / (engine.seats * makespan), 4),
        "mean_batch_size": round(engine.busy_seat_s / busy, 3), "engine_busy_fraction": round(busy / makespan, 4),
        "num_preemptions": engine.num_preemptions, "num_steps": len(engine.durations),
        "num_output_tokens": int(out_tokens.sum()), "makespan_s": round(makespan, 6),
    }


def metrics_math(m: dict, engine) -> dict:
    """Show-the-math for the headline numbers."""
    return {
        "throughput_tokens_per_s": derive(
            m["throughput_tokens_per_s"], "tokens/s", "sum of output tokens / (last finish - first arrival)",
            {"num_output_tokens": (m["num_output_tokens"], "tokens"), "makespan": (m["makespan_s"], "s")}).to_dict(),
        "seat_utilization": derive(
            m["seat_utilization"], "fraction",
            "sum over steps of (step duration x occupied seats) / (seats x makespan)",
            {"seat_seconds_used": (round(engine.busy_seat_s, 6), "seat-s"), "seats": (engine.seats, "seats"),
             "makespan": (m["makespan_s"], "s")},
            ["a seat is occupied from admission until the step that produces the request's last token"]).to_dict(),
        "ttft_ms_p50": derive(
            m["ttft_ms_p50"], "ms",
            "median over requests of (end of the step that samples its first token - arrival)",
            {"num_requests": (len(engine.reqs), "requests")},
            ["includes queueing; a prompt may be prefilled over several steps (chunked)"]).to_dict(),
        "latency_ms_p50": derive(
            m["latency_ms_p50"], "ms", "median over requests of (finish - arrival)",
            {"num_requests": (len(engine.reqs), "requests")}).to_dict(),
    }


def validate_batching(rate: float, seats: int, kv_capacity_tokens: int, block_size: int, max_frames: int,
                      max_num_batched_tokens: int, max_seq_len: int, step_time, policies: tuple[str, ...]) -> None:
    """ValueError naming the parameter and its bound (routers map these to 422)."""
    if isinstance(rate, bool) or not (isinstance(rate, (int, float)) and 0 < rate <= MAX_RATE):
        raise ValueError(f"rate must be in (0, {MAX_RATE}] requests/s, got {rate!r}")
    check_int("seats", seats, 1, 256)
    check_int("block_size", block_size, 1, 256)
    check_int("max_seq_len", max_seq_len, 16, 32_768)
    check_int("kv_capacity_tokens", kv_capacity_tokens, max_seq_len, MAX_KV_CAPACITY_TOKENS)
    if (kv_capacity_tokens // block_size) * block_size < max_seq_len:
        raise ValueError(f"kv_capacity_tokens must hold max_seq_len={max_seq_len} tokens in whole blocks "
                         f"of {block_size}, got {kv_capacity_tokens}")
    check_int("max_frames", max_frames, 1, 2000)
    check_int("max_num_batched_tokens", max_num_batched_tokens, 1, 65_536)
    if step_time is not None and not callable(step_time):
        raise ValueError("step_time must be callable (num_prefill_tokens, num_decode_seqs, decode_context_tokens)")
    if not policies or any(p not in POLICIES for p in policies):
        raise ValueError(f"policies must be a non-empty subset of {POLICIES}, got {policies!r}")
