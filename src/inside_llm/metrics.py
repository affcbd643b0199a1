"""The serving engine's figures in vLLM v1's Prometheus names (GET /metrics), and what each request's timings are.

Two halves:
- `EngineStats`, one per `Engine` (live/engine.py calls its hooks with the engine's lock held): counters, and
  histograms with vLLM's own bucket boundaries, kept as plain numbers (no prometheus object per engine, so an
  engine can outlive any app that reads it).
- `EngineCollector`, registered in a `CollectorRegistry` made per app (`registry()`), never the global one, so
  tests that build several apps do not collide: at each scrape it reads every engine of the process.

Names, types and meanings are vLLM v1's (vllm-project/vllm `docs/design/metrics.md`; bucket boundaries from
`vllm/v1/metrics/loggers.py`, mirrored by llm-d-inference-sim): every series carries `model_name` (the id that
GET /v1/models lists) and `worker` (this process's id: with `inside-llm serve --workers N` each process runs its
own engine and answers /metrics for itself only, so the label keeps N workers' counters apart instead of one
series jumping between them; sum over `worker` in PromQL for the server's total). Counts and times only: no
prompt or answer text ever reaches this module.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence

from prometheus_client import CollectorRegistry, GCCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

# vLLM v1's bucket boundaries (seconds)
# fmt: off
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
)
# fmt: on
FINISHED_REASONS = ("stop", "length", "abort", "error")  # vLLM's FinishReason, lower case
_REASON = {"stop": "stop", "length": "length", "cancelled": "abort", "error": "error"}  # the engine's words -> vLLM's
TOY_ID = "toy"


def model_name(model) -> str:
    """The id a served model goes by on /v1 and in /metrics' model_name: `smollm2` for the chat model (its
    engine's name), `toy` for the demo transformer (`model=toy` on /api/generate)."""
    return model.name if hasattr(model, "chat_ids") else TOY_ID


def worker_id() -> str:
    """The `worker` label: this serving process's id."""
    return str(os.getpid())


class Histogram:
    """Observations counted per bucket (upper bounds `bounds`, then +Inf), with their sum."""

    def __init__(self, bounds: Sequence[float]):
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, v: float) -> None:
        v = max(0.0, v)
        self.counts[next((i for i, b in enumerate(self.bounds) if v <= b), len(self.bounds))] += 1
        self.sum += v

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """[(le, observations <= le)] as Prometheus writes them, +Inf last."""
        out, total = [], 0
        for b, n in zip((*map(float, self.bounds), float("inf")), self.counts):
            total += n
            out.append(("+Inf" if b == float("inf") else repr(b), total))
        return out


class EngineStats:
    """One engine's request counters and latency histograms. The hooks are called with the engine's lock held;
    `view()` copies them under this object's own lock for a scrape. Times are time.perf_counter() seconds, set
    on the chat itself (arrived_at when it is queued, then scheduled_at, first_token_at, last_token_at)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.success = dict.fromkeys(FINISHED_REASONS, 0)
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(REQUEST_LATENCY_BUCKETS)
        self.queue = Histogram(REQUEST_LATENCY_BUCKETS)

    def scheduled(self, seq, now: float) -> None:
        """The chat took a seat; the first time only, its wait in the queue is observed."""
        if seq.scheduled_at:
            return  # back after a preemption: it was scheduled once already
        seq.scheduled_at = now
        with self._lock:
            self.queue.observe(now - seq.arrived_at)

    def token(self, seq, now: float) -> None:
        """The engine wrote one token for the chat (its stop token included, as vLLM counts it)."""
        with self._lock:
            self.generation_tokens += 1
            if not seq.first_token_at:
                seq.first_token_at = now
                self.prompt_tokens += len(seq.prompt)
                self.ttft.observe(now - seq.arrived_at)
            else:
                self.itl.observe(now - seq.last_token_at)
        seq.last_token_at = now

    def finished(self, seq, reason: str, now: float) -> None:
        """The chat ended: counted under its reason; a chat that ran to its end (stop or length) observes e2e."""
        seq.finished_at = now
        reason = "stop" if reason == "cancelled" and seq.stopped_by_text else _REASON.get(reason, "error")
        with self._lock:
            self.success[reason] += 1
            if reason in ("stop", "length"):
                self.e2e.observe(now - seq.arrived_at)

    def view(self) -> dict:
        with self._lock:
            return {
                "prompt_tokens": self.prompt_tokens,
                "generation_tokens": self.generation_tokens,
                "success": dict(self.success),
                **{k: (getattr(self, k).cumulative(), getattr(self, k).sum) for k in ("ttft", "itl", "e2e", "queue")},
            }


def request_timings(seq, completion_tokens: int) -> dict:
    """One finished chat's timings in both engines' spellings: vLLM's per-request `metrics` (its
    --enable-per-request-metrics; time to first token counted from when the chat was scheduled, as vLLM's doc
    says) and llama.cpp's `timings` (prompt_* for reading the prompt, predicted_* for writing; cache_n: prompt
    tokens found in the prefix cache, not computed). Milliseconds, rounded to 0.01."""
    ms = lambda s: round(1e3 * max(0.0, s), 2)  # noqa: E731
    sched = seq.scheduled_at or seq.arrived_at
    first, last = seq.first_token_at, seq.last_token_at
    decode_s = last - first if first else 0.0
    prefill_s = first - sched if first else 0.0
    per_s = lambda n, s: round(n / s, 2) if s > 0 else None  # noqa: E731
    decode_rate = per_s(completion_tokens - 1, decode_s) if completion_tokens > 1 else None
    return {
        "metrics": {
            "time_to_first_token_ms": ms(prefill_s) if first else None,
            "generation_time_ms": ms(decode_s),
            "queue_time_ms": ms(sched - seq.arrived_at),
            "mean_itl_ms": ms(decode_s / (completion_tokens - 1)) if completion_tokens > 1 else None,
            "tokens_per_second": decode_rate,
        },
        "timings": {
            "cache_n": getattr(seq, "prefix_hit_tokens", 0),
            "prompt_n": len(seq.prompt),
            "prompt_ms": ms(prefill_s),
            "prompt_per_second": per_s(len(seq.prompt), prefill_s),
            "predicted_n": completion_tokens,
            "predicted_ms": ms(decode_s),
            "predicted_per_second": decode_rate,
        },
    }


# ---- the exposition -----------------------------------------------------------------------------------------


# vLLM v1's series: key, family, name, help, labels beyond (model_name, worker). Names and help texts are vLLM's
# (vllm/v1/metrics/loggers.py); a counter's name is written without `_total`, which the client adds.
SERIES = [
    ("running", GaugeMetricFamily, "vllm:num_requests_running", "Number of requests in model execution batches.", ()),
    ("waiting", GaugeMetricFamily, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", ()),
    ("kv", GaugeMetricFamily, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", ()),
    (
        "cache",
        GaugeMetricFamily,
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        ("block_size", "num_gpu_blocks", "cache_dtype", "enable_prefix_caching"),
    ),
    ("prompt", CounterMetricFamily, "vllm:prompt_tokens", "Number of prefill tokens processed.", ()),
    ("gen", CounterMetricFamily, "vllm:generation_tokens", "Number of generation tokens processed.", ()),
    (
        "success",
        CounterMetricFamily,
        "vllm:request_success",
        "Count of successfully processed requests.",
        ("finished_reason",),
    ),
    ("preempt", CounterMetricFamily, "vllm:num_preemptions", "Cumulative number of preemption from the engine.", ()),
    (
        "pc_queries",
        CounterMetricFamily,
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        (),
    ),
    (
        "pc_hits",
        CounterMetricFamily,
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        (),
    ),
    (
        "ttft",
        HistogramMetricFamily,
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        (),
    ),
    (
        "itl",
        HistogramMetricFamily,
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        (),
    ),
    (
        "e2e",
        HistogramMetricFamily,
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        (),
    ),
    (
        "queue",
        HistogramMetricFamily,
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        (),
    ),
]
HISTOGRAMS = [key for key, family, *_ in SERIES if family is HistogramMetricFamily]


class EngineCollector(Collector):
    """vLLM v1's series (`SERIES`) for every engine `engines()` returns, read at scrape time."""

    def __init__(self, engines: Callable[[], Iterable]):
        self.engines = engines

    def collect(self):
        labels = ["model_name", "worker"]
        f = {key: family(name, text, labels=[*labels, *extra]) for key, family, name, text, extra in SERIES}
        for eng in self.engines():
            snap, stats = eng.snapshot(), eng.stats.view()
            lv = [model_name(eng.model), str(snap.get("worker", worker_id()))]
            f["running"].add_metric(lv, snap["seats_in_use"])
            f["waiting"].add_metric(lv, snap["queued"])
            f["kv"].add_metric(lv, snap["pages_in_use"] / snap["pages"] if snap["pages"] else 0.0)
            f["cache"].add_metric(
                [*lv, str(snap["page_tokens"]), str(snap["pages"]), "float32", str(snap["prefix_caching"])], 1.0
            )
            f["prompt"].add_metric(lv, stats["prompt_tokens"])
            f["gen"].add_metric(lv, stats["generation_tokens"])
            for reason, n in stats["success"].items():
                f["success"].add_metric([*lv, reason], n)
            f["preempt"].add_metric(lv, snap["preempted"])
            f["pc_queries"].add_metric(lv, snap["prefix_cache_queries"])
            f["pc_hits"].add_metric(lv, snap["prefix_cache_hits"])
            for key in HISTOGRAMS:
                buckets, total = stats[key]
                f[key].add_metric(lv, buckets, total)
        yield from f.values()


def registry(engines: Callable[[], Iterable]) -> CollectorRegistry:
    """A fresh registry (one per app) holding the engines' series and this process's own (memory, CPU, GC)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(EngineCollector(engines))
    ProcessCollector(registry=reg)
    GCCollector(registry=reg)
    return reg
