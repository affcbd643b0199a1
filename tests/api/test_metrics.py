"""GET /metrics parsed with prometheus_client's own parser: vLLM v1's names, labels and buckets, gauges that move
with a real load (4 chats streaming through /v1 from 4 loopback addresses), no text, one registry per app."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import prometheus_client
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from inside_llm import metrics
from inside_llm.app import create_app

GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
COUNTERS = (
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:request_success",
    "vllm:num_preemptions",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
)
HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": metrics.TTFT_BUCKETS,
    "vllm:inter_token_latency_seconds": metrics.ITL_BUCKETS,
    "vllm:e2e_request_latency_seconds": metrics.REQUEST_LATENCY_BUCKETS,
    "vllm:request_queue_time_seconds": metrics.REQUEST_LATENCY_BUCKETS,
}
QUESTIONS = ["Tell me a long story about a dragon.", "Describe the ocean.", "Explain how a bicycle works.",
             "Write a poem about autumn."]  # fmt: skip


def scrape(base_url: str) -> dict:
    """({family name: family}, the text) of one scrape."""
    r = httpx.get(f"{base_url}/metrics", timeout=60)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(r.text)}, r.text


def value(fams: dict, name: str, suffix: str = "", model: str = "smollm2", **labels) -> float:
    fam = fams[name]
    hits = [
        s.value
        for s in fam.samples
        if s.name == name + suffix and s.labels.get("model_name") == model and labels.items() <= s.labels.items()
    ]
    assert hits, (name, suffix, labels)
    return sum(hits)


def test_vllm_names_types_labels_and_buckets(base_url, smollm):
    fams, _ = scrape(base_url)
    for name in GAUGES + ("vllm:cache_config_info",):
        assert fams[name].type == "gauge", name
    for name in COUNTERS:
        assert fams[name].type == "counter", name
    for name, bounds in HISTOGRAMS.items():
        fam = fams[name]
        assert fam.type == "histogram"
        les = [
            s.labels["le"] for s in fam.samples if s.name == name + "_bucket" and s.labels["model_name"] == "smollm2"
        ]
        # one series per served model, even after a test reloaded the model (engine_for replaces its engine)
        assert les == [*map(repr, map(float, bounds)), "+Inf"], name
    info = next(s for s in fams["vllm:cache_config_info"].samples if s.labels["model_name"] == "smollm2")
    assert info.labels["block_size"] == "16" and info.labels["num_gpu_blocks"] == "256" and info.value == 1
    assert info.labels["enable_prefix_caching"] == "True"
    reasons = {s.labels["finished_reason"] for s in fams["vllm:request_success"].samples}
    assert reasons == {"stop", "length", "abort", "error"}
    # --workers N: each worker process answers for its own engine, told apart by the `worker` label (its pid)
    workers = {s.labels["worker"] for f in fams.values() if f.name.startswith("vllm:") for s in f.samples}
    assert workers == {str(os.getpid())}


def test_gauges_move_with_four_streaming_chats(base_url, smollm):
    from inside_llm.api.generate import generation_model
    from inside_llm.live import engine_for

    engine, deadline = engine_for(generation_model("smollm2")), time.monotonic() + 60
    while engine.chats and time.monotonic() < deadline:  # an earlier test's cancelled chats leave at a next step
        time.sleep(0.05)
    before, _ = scrape(base_url)
    firsts, done, usage, errors = threading.Barrier(5, timeout=120), [], [], []

    def chat(k: int) -> None:
        # one loopback address per chat: 4 visitors, as the fair share sees them
        http = httpx.Client(transport=httpx.HTTPTransport(local_address=f"127.0.0.{k + 2}"), timeout=120)
        c = openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", http_client=http, max_retries=0)
        try:
            stream = c.chat.completions.create(
                model="smollm2",
                messages=[{"role": "user", "content": QUESTIONS[k]}],
                temperature=0,
                max_tokens=48,
                stream=True,
                stream_options={"include_usage": True},
            )
            it = iter(stream)
            next(it)  # the role chunk
            next(it)  # the first token: the chat is seated and decoding
            firsts.wait()
            for ch in it:
                if ch.usage:
                    usage.append(ch.usage)
            done.append(k)
        except Exception as exc:  # reported by the main thread
            errors.append(exc)
            firsts.abort()

    threads = [threading.Thread(target=chat, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    firsts.wait()
    during, text = scrape(base_url)
    for t in threads:
        t.join(timeout=180)
    assert not errors, errors
    after, _ = scrape(base_url)

    assert value(during, "vllm:num_requests_running") - value(before, "vllm:num_requests_running") >= 3
    assert value(during, "vllm:kv_cache_usage_perc") > 0
    assert value(after, "vllm:num_requests_running") == 0 and value(after, "vllm:kv_cache_usage_perc") == 0
    ttft = "vllm:time_to_first_token_seconds"
    assert value(after, ttft, "_count") - value(before, ttft, "_count") == len(done) == 4
    assert value(after, ttft, "_sum") > value(before, ttft, "_sum")
    e2e = "vllm:e2e_request_latency_seconds"
    assert value(after, e2e, "_count") - value(before, e2e, "_count") == 4
    gen = value(after, "vllm:generation_tokens", "_total") - value(before, "vllm:generation_tokens", "_total")
    assert gen == sum(u.completion_tokens for u in usage)
    prompt = value(after, "vllm:prompt_tokens", "_total") - value(before, "vllm:prompt_tokens", "_total")
    assert prompt == sum(u.prompt_tokens for u in usage)
    ok = sum(
        value(after, "vllm:request_success", "_total", finished_reason=r)
        - value(before, "vllm:request_success", "_total", finished_reason=r)
        for r in ("stop", "length")
    )
    assert ok == 4
    itl = "vllm:inter_token_latency_seconds"
    assert value(after, itl, "_count") - value(before, itl, "_count") == gen - 4  # a gap per token after the first
    assert not any(w in text.lower() for w in ("dragon", "ocean", "bicycle", "autumn"))  # no prompt text, ever


def test_prefix_cache_counters_count_the_chat_templates_page(base_url, smollm):
    """vLLM's vllm:prefix_cache_queries_total / _hits_total, in tokens: two chats one after the other, the second
    finds at least the chat template's first 16-token page, which the first left cached."""
    before, _ = scrape(base_url)
    c = openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", http_client=httpx.Client(timeout=120), max_retries=0)
    prompt = 0
    for q in QUESTIONS[:2]:
        r = c.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": q}], temperature=0, max_tokens=2
        )
        prompt += r.usage.prompt_tokens
        cache_n = r.model_extra["timings"]["cache_n"]  # llama.cpp's name for the same figure, per answer
    after, _ = scrape(base_url)
    delta = {
        k: value(after, f"vllm:prefix_cache_{k}", "_total") - value(before, f"vllm:prefix_cache_{k}", "_total")
        for k in ("queries", "hits")
    }
    assert delta["queries"] == prompt, "every seated chat's tokens are looked up (no preemption here)"
    assert cache_n >= 16 and delta["hits"] >= 16 and delta["hits"] % 16 == 0


def test_each_app_has_its_own_registry():
    apps = [create_app(), create_app()]
    bodies = []
    for app in apps:
        with TestClient(app) as c:
            r = c.get("/metrics")
            assert r.status_code == 200 and "vllm:num_requests_running" in r.text
            bodies.append(r.text)
    regs = [a.state.metrics_registry for a in apps]
    assert regs[0] is not regs[1] and prometheus_client.REGISTRY not in regs
    assert "vllm:" not in prometheus_client.generate_latest(prometheus_client.REGISTRY).decode()


def test_histogram_counts_per_bucket():
    h = metrics.Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 3.0):
        h.observe(v)
    assert h.cumulative() == [("0.1", 2), ("1.0", 3), ("+Inf", 4)] and h.count == 4 and abs(h.sum - 3.65) < 1e-12


def test_two_workers_are_two_series_told_apart_by_the_worker_label():
    """`inside-llm serve --workers 2`: each process answers /metrics for its own engine; fresh connections reach
    both, and the `worker` labels are the two worker processes (children of the server), never one series."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "inside_llm.cli",
        "serve",
        "--port",
        str(port),
        "--workers",
        "2",
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, start_new_session=True)
    base, seen = f"http://127.0.0.1:{port}", set()
    try:
        deadline = time.monotonic() + 180
        while len(seen) < 2 and time.monotonic() < deadline:
            try:
                with httpx.Client() as c:  # a fresh connection each time: the kernel hands it to either worker
                    text = c.get(f"{base}/metrics", timeout=120).text
            except httpx.TransportError:
                time.sleep(0.3)
                continue
            fam = next(f for f in text_string_to_metric_families(text) if f.name == "vllm:num_requests_running")
            seen |= {smp.labels["worker"] for smp in fam.samples}
        assert len(seen) == 2, seen
        parents = {Path(f"/proc/{w}/status").read_text().split("PPid:")[1].split()[0] for w in seen}
        assert parents == {str(proc.pid)}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
