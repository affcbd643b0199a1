"""Which engine wrote a /metrics page, and its readings mapped onto one typed snapshot.

Names per engine (sources in ../shared/reports/ecosystem.md §2.2-2.3): vLLM v1 (`vllm:kv_cache_usage_perc`,
vllm-project/vllm docs/design/metrics.md), vLLM before PR #18354 (`vllm:gpu_cache_usage_perc`), SGLang
(`sglang:`, docs/references/production_metrics.md), llama.cpp's llama-server (`llamacpp:`, tools/server/README.md),
TGI (`tgi_`, its reference/metrics page) and NIM (vLLM's old names without the prefix, at /v1/metrics). The tour's
own engine writes vLLM v1's names, so it reads as vLLM v1.

`read(now, then, dt_s)` maps the newest scrape (and an older one, `dt_s` seconds before, when there is one) to a
`Reading`: gauges as they are; counters as their increase over the wall time between the scrapes (no older scrape:
no rate); histogram quantiles over the observations between the scrapes, as
`histogram_quantile(q, rate(x_bucket[window]))` does, or since the server started when none fell in the window.
Each figure names the metric it came from and says, in words, what it means on that engine or why it is missing.
The figures from the JSON pages beside /metrics (/v1/models, llama.cpp's /slots and /props) are added by
endpoints.py. Pure: no network here (poller.py fetches).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..sim.core.result import about
from .exposition import Scrape, bucket_delta, counter_delta, histogram_quantile


@dataclass(frozen=True)
class Figure:
    """One reading of the attached server, with where it came from."""

    value: float | None = about("The reading; null when the engine does not publish it or it needs a second scrape.",
                                digits=6)  # fmt: skip
    metric: str | None = about("The metric (or metrics) it was computed from, as the engine names them.")
    note: str = about("What the figure means on this engine, or why it is missing, in words.")


@dataclass(frozen=True)
class Reading:
    """A server's /metrics, mapped onto the tour's figures."""

    engine: str = about("The engine that wrote the page: vllm, vllm-legacy, sglang, llama.cpp, tgi or nim.")
    engine_name: str = about("The engine in words.")
    models: list[str] = about("The model names its series carry (model_name label).")
    window_s: float | None = about("Seconds between the two scrapes the rates come from (null: one scrape so far).",
                                   digits=3)  # fmt: skip
    running: Figure = about("Requests in the running batch.")
    waiting: Figure = about("Requests queued, not yet running.")
    kv_usage: Figure = about("Fraction (0-1) of the KV cache in use, or what the engine offers instead.")
    prompt_tokens_per_s: Figure = about("Prompt (prefill) tokens per second over the window.")
    generation_tokens_per_s: Figure = about("Generated tokens per second over the window, the whole server's.")
    ttft_p50_s: Figure = about("Median time to first token, seconds, from the engine's histogram.")
    ttft_p95_s: Figure = about("95th-percentile time to first token, seconds.")
    itl_p50_s: Figure = about("Median inter-token time, seconds.")
    itl_p95_s: Figure = about("95th-percentile inter-token time, seconds.")
    preemptions: Figure = about("Preemptions since the server started (requests pushed out of the batch).")
    prefix_cache_hit_rate: Figure = about("Fraction (0-1) of prompt tokens found in the prefix cache.")
    finished_requests: Figure = about("Requests finished since the server started.")
    # from the JSON pages beside /metrics (endpoints.py): GET /v1/models for every engine, /slots and /props on
    # llama.cpp
    served_models: list[str] = about("The model ids GET /v1/models lists (empty until it is read).", default=())
    context_tokens: Figure = about("The longest context one request may use, tokens (GET /v1/models, or llama.cpp's "
                                   "/slots or /props: one slot's).", default=Figure(None, None, "Not read yet."))  # fmt: skip
    slots_total: Figure = about("llama.cpp: its slots, the requests it can run at once (GET /props total_slots).",
                                default=Figure(None, None, "Not read yet."))  # fmt: skip
    slots_busy: Figure = about("llama.cpp: slots working on a request now (GET /slots is_processing).",
                               default=Figure(None, None, "Not read yet."))  # fmt: skip
    build: str | None = about("The engine's build, where it says (llama.cpp's GET /props build_info).", default=None)


@dataclass(frozen=True)
class Spec:
    """One engine's names: for each figure, the candidate names (the first on the page wins) and its note."""

    id: str
    name: str
    running: tuple[str, ...]
    waiting: tuple[str, ...]
    kv: tuple[str, ...]
    kv_note: str
    prompt: tuple[str, ...]
    generation: tuple[str, ...]
    rate_note: str
    ttft: tuple[str, ...]
    itl: tuple[str, ...]
    latency_note: str
    preemptions: tuple[str, ...] = ()
    preemptions_note: str = "This engine publishes no preemption count."
    prefix_hits: tuple[str, ...] = ()  # counters, hit tokens ...
    prefix_queries: tuple[str, ...] = ()  # ... over queried tokens
    prefix_gauge: tuple[str, ...] = ()  # or the engine's own ratio
    prefix_note: str = "This engine publishes no prefix-cache hit rate."
    finished: tuple[str, ...] = ()
    kv_missing: str = "Not on this page"  # what kv_usage says when none of `kv` is on the page


_RATE = "from the counter's increase over the wall time between two scrapes"
VLLM = Spec(
    id="vllm",
    name="vLLM (v1 metric names)",
    running=("vllm:num_requests_running",),
    waiting=("vllm:num_requests_waiting",),
    kv=("vllm:kv_cache_usage_perc",),
    kv_note="The fraction of the KV-cache blocks in use. vLLM reserves its block pool at start-up "
    "(--gpu-memory-utilization), so 1.0 means the pool is full, not the GPU's memory.",
    prompt=("vllm:prompt_tokens_total",),
    generation=("vllm:generation_tokens_total",),
    rate_note=_RATE + ".",
    ttft=("vllm:time_to_first_token_seconds",),
    itl=("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    latency_note="",
    preemptions=("vllm:num_preemptions_total",),
    preemptions_note="A preempted request gives back its KV blocks and is computed again later.",
    prefix_hits=("vllm:prefix_cache_hits_total",),
    prefix_queries=("vllm:prefix_cache_queries_total",),
    prefix_note="Prompt tokens found in the prefix cache over tokens looked up (hits/queries; vllm PR #14136 "
    "prints it upside down).",
    finished=("vllm:request_success_total",),
)
VLLM_LEGACY = replace(
    VLLM,
    id="vllm-legacy",
    name="vLLM (older names, before vLLM PR #18354)",
    kv=("vllm:gpu_cache_usage_perc",),
    kv_note="The fraction of GPU KV-cache blocks in use (vllm:gpu_cache_usage_perc, renamed "
    "vllm:kv_cache_usage_perc by vLLM PR #18354).",
    itl=("vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds"),
    prefix_gauge=("vllm:gpu_prefix_cache_hit_rate",),
    prefix_note="vLLM's own hit-rate gauge (older builds), or hits over queries where the counters exist.",
)
SGLANG = Spec(
    id="sglang",
    name="SGLang",
    running=("sglang:num_running_reqs",),
    waiting=("sglang:num_queue_reqs",),
    kv=("sglang:token_usage",),
    kv_note="sglang:token_usage: the fraction of SGLang's token pool (max_total_num_tokens) in use. SGLang "
    "counts tokens, not blocks.",
    prompt=("sglang:prompt_tokens_total",),
    generation=("sglang:generation_tokens_total",),
    rate_note=_RATE + " (sglang:gen_throughput is SGLang's own last-interval figure; not used).",
    ttft=("sglang:time_to_first_token_seconds",),
    itl=("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
    latency_note="",
    preemptions_note="SGLang's documented metrics list no preemption count (it calls them retractions).",
    prefix_gauge=("sglang:cache_hit_rate",),
    prefix_note="SGLang's own radix-cache hit-rate gauge.",
)
LLAMACPP = Spec(
    id="llama.cpp",
    name="llama.cpp (llama-server --metrics)",
    running=("llamacpp:requests_processing",),
    waiting=("llamacpp:requests_deferred",),
    kv=("llamacpp:kv_cache_usage_ratio",),
    kv_note="llamacpp:kv_cache_usage_ratio (older llama-server builds): the fraction of KV cells in use.",
    prompt=("llamacpp:prompt_tokens_total",),
    generation=("llamacpp:tokens_predicted_total",),
    rate_note=_RATE + ". llama-server adds a request's tokens to the counter when the request ends, so the rate "
    "lags and comes in steps. llamacpp:predicted_tokens_seconds is one slot's speed, not the server's, so it is "
    "not used.",
    ttft=(),
    itl=(),
    latency_note="llama-server publishes no latency histograms (only total seconds spent on prompts and on "
    "predicting).",
    preemptions_note="llama-server does not preempt: each request holds its slot until it ends.",
    kv_missing="llama-server's current /metrics has no KV usage ratio (older builds had "
    "llamacpp:kv_cache_usage_ratio); each slot's context is fixed at ctx-size / parallel, see GET /slots.",
    prefix_note="llama-server counts reused prompt tokens (llamacpp:prompt_tokens_cached_total) but not what "
    "they were out of, so no rate is computed.",
)
TGI = Spec(
    id="tgi",
    name="Text Generation Inference (TGI)",
    running=("tgi_batch_current_size",),
    waiting=("tgi_queue_size",),
    kv=(),
    kv_note="TGI publishes no KV-cache usage.",
    prompt=("tgi_request_input_length_sum",),
    generation=("tgi_request_generated_tokens_sum",),
    rate_note="From TGI's per-request histograms' sums, which grow when a request ends, so the rate lags.",
    ttft=(),
    itl=("tgi_request_mean_time_per_token_duration",),
    latency_note="TGI publishes no time-to-first-token histogram (tgi_request_duration is the whole request).",
    finished=("tgi_request_success_total", "tgi_request_success"),
)
NIM = Spec(
    id="nim",
    name="NVIDIA NIM (vLLM's old names, unprefixed)",
    running=("num_requests_running",),
    waiting=("num_requests_waiting",),
    kv=("gpu_cache_usage_perc",),
    kv_note="The fraction of GPU KV-cache blocks in use.",
    prompt=("prompt_tokens_total",),
    generation=("generation_tokens_total",),
    rate_note=_RATE + ".",
    ttft=("time_to_first_token_seconds",),
    itl=("time_per_output_token_seconds",),
    latency_note="",
    preemptions=("num_preemptions_total",),
    finished=("request_success_total",),
)
SPECS = (VLLM, VLLM_LEGACY, SGLANG, LLAMACPP, TGI, NIM)
PREFIXES = {"sglang:": SGLANG, "llamacpp:": LLAMACPP, "tgi_": TGI}


def detect(scrape: Scrape) -> Spec | None:
    """The engine whose names the page carries, or None (no known engine's series)."""
    names = scrape.names
    if any(n.startswith("vllm:") for n in names):
        if "vllm:kv_cache_usage_perc" not in names and "vllm:gpu_cache_usage_perc" in names:
            return VLLM_LEGACY
        return VLLM
    for prefix, spec in PREFIXES.items():
        if any(n.startswith(prefix) for n in names):
            return spec
    if "num_requests_running" in names or "gpu_cache_usage_perc" in names:
        return NIM
    return None


def _first(scrape: Scrape, names: tuple[str, ...], suffix: str = "") -> str | None:
    return next((n for n in names if scrape.has(n + suffix)), None)


def _gauge(scrape: Scrape, names: tuple[str, ...], note: str, missing: str = "Not on this page") -> Figure:
    name = _first(scrape, names)
    if name is None:
        return Figure(None, None, missing if missing.endswith(".") else f"{missing} (no {' or '.join(names)}).")
    return Figure(scrape.total(name), name, note)


def _rate(now: Scrape, then: Scrape | None, dt_s: float | None, names: tuple[str, ...], note: str) -> Figure:
    name = _first(now, names)
    if name is None:
        what = " or ".join(names) if names else "a counter for it"
        return Figure(None, None, f"Not on this page (no {what}).")
    if then is None or not dt_s or dt_s <= 0:
        return Figure(None, name, "Needs a second scrape: a rate is an increase over time.")
    inc = counter_delta(now.total(name), then.total(name))
    return Figure(None if inc is None else inc / dt_s, name, note)


def _quantiles(now: Scrape, then: Scrape | None, names: tuple[str, ...], why_none: str) -> tuple[Figure, Figure]:
    name = _first(now, names, "_bucket")
    if name is None:
        note = why_none or f"Not on this page (no {' or '.join(names)} histogram)."
        return Figure(None, None, note), Figure(None, None, note)
    cum = now.buckets(name)
    window = bucket_delta(cum, then.buckets(name) if then is not None else None)
    n_window = window[-1][1] if window else 0.0
    if then is not None and window is not cum and n_window > 0:
        basis, buckets = f"over the {n_window:,.0f} observations since the previous scrape", window
    else:
        n = cum[-1][1] if cum else 0.0
        basis, buckets = f"over all {n:,.0f} observations since the server started", cum
    out = []
    for q in (0.5, 0.95):
        v = histogram_quantile(q, buckets)
        if v is None:
            has_inf = bool(buckets) and buckets[-1][0] == float("inf")
            why = "no observations yet" if has_inf else "the histogram has no +Inf bucket"
            out.append(Figure(None, name, f"No quantile: {why} (Prometheus' histogram_quantile gives NaN)."))
        else:
            note = f"Interpolated in the histogram's buckets as histogram_quantile({q}) does, {basis}."
            out.append(Figure(v, name, note))
    return out[0], out[1]


def _prefix(now: Scrape, then: Scrape | None, spec: Spec) -> Figure:
    hits, queries = _first(now, spec.prefix_hits), _first(now, spec.prefix_queries)
    if hits and queries:
        h, q = now.total(hits), now.total(queries)
        basis = "since the server started"
        if then is not None:
            dh, dq = counter_delta(h, then.total(hits)), counter_delta(q, then.total(queries))
            if dq:
                h, q, basis = dh, dq, "since the previous scrape"
        metric = f"{hits} / {queries}"
        if not q:
            return Figure(None, metric, "No prefix-cache lookups yet.")
        return Figure(h / q, metric, f"{spec.prefix_note} Tokens {basis}.")
    gauge = _first(now, spec.prefix_gauge)
    if gauge:
        return Figure(now.total(gauge), gauge, spec.prefix_note)
    return Figure(None, None, spec.prefix_note if not spec.prefix_hits else "This server publishes no prefix-cache "
                  "counters (prefix caching may be off).")  # fmt: skip


def read(now: Scrape, then: Scrape | None = None, dt_s: float | None = None, spec: Spec | None = None) -> Reading:
    """The newest scrape (and one `dt_s` seconds older, for rates and windowed quantiles) as a Reading.
    Raises LookupError (in words) when no known engine wrote the page."""
    spec = spec or detect(now)
    if spec is None:
        sample = ", ".join(sorted(now.names)[:3])
        raise LookupError(f"No known engine's metrics on the page (it has {sample}, ...): not vLLM, SGLang, "
                          "llama.cpp, TGI or NIM.")  # fmt: skip
    models = next((now.labels(n, "model_name") for n in (*spec.running, *spec.generation) if now.has(n)), [])
    ttft50, ttft95 = _quantiles(now, then, spec.ttft, spec.latency_note if not spec.ttft else "")
    itl50, itl95 = _quantiles(now, then, spec.itl, spec.latency_note if not spec.itl else "")
    preempt = _first(now, spec.preemptions)
    finished = _first(now, spec.finished)
    return Reading(
        engine=spec.id,
        engine_name=spec.name,
        models=models,
        window_s=dt_s if then is not None else None,
        running=_gauge(now, spec.running, "Requests in the running batch."),
        waiting=_gauge(now, spec.waiting, "Requests queued for a place in the batch."),
        kv_usage=_gauge(now, spec.kv, spec.kv_note, spec.kv_note if not spec.kv else spec.kv_missing),
        prompt_tokens_per_s=_rate(now, then, dt_s, spec.prompt, spec.rate_note),
        generation_tokens_per_s=_rate(now, then, dt_s, spec.generation, spec.rate_note),
        ttft_p50_s=ttft50,
        ttft_p95_s=ttft95,
        itl_p50_s=itl50,
        itl_p95_s=itl95,
        preemptions=Figure(now.total(preempt), preempt, spec.preemptions_note)
        if preempt
        else Figure(None, None, spec.preemptions_note if not spec.preemptions else "Not on this page."),
        prefix_cache_hit_rate=_prefix(now, then, spec),
        finished_requests=Figure(now.total(finished), finished, "Requests that ended, any reason.")
        if finished
        else Figure(None, None, "This engine publishes no count of finished requests."),
    )
