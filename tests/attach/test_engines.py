"""engines.py: each engine told apart by its names, and its pages mapped onto one Reading whose figures name their
metric. Pages: vLLM's and SGLang's from their own docs, the tour's own /metrics recorded from a real run
(tests/fixtures/attach, each with its source in its header), and short pages written here from each engine's
documented names (llama.cpp tools/server/README.md, TGI's metrics reference, NIM's observability page, vLLM's
gpu_ names before PR #18354); their values are made up."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from inside_llm.attach import engines
from inside_llm.attach.exposition import histogram_quantile, parse

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "attach"


def page(name: str):
    return parse((FIXTURES / name).read_text(encoding="utf-8"))


LLAMACPP = """# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 340
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 1200
llamacpp:prompt_tokens_cached_total 24
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 41.5
llamacpp:requests_processing 3
llamacpp:requests_deferred 1
llamacpp:n_tokens_max 2048
"""
TGI = """tgi_batch_current_size 4
tgi_queue_size 2
tgi_request_generated_tokens_sum 900
tgi_request_generated_tokens_count 9
tgi_request_input_length_sum 450
tgi_request_mean_time_per_token_duration_bucket{le="0.01"} 2
tgi_request_mean_time_per_token_duration_bucket{le="0.05"} 9
tgi_request_mean_time_per_token_duration_bucket{le="+Inf"} 9
"""
NIM = """num_requests_running{model_name="m"} 5
num_requests_waiting{model_name="m"} 0
gpu_cache_usage_perc{model_name="m"} 0.4
"""
LEGACY = """vllm:num_requests_running{model_name="m"} 2
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
vllm:gpu_prefix_cache_hit_rate{model_name="m"} 0.6
"""


def test_each_engine_is_told_apart_by_its_names():
    assert engines.detect(page("vllm_v1_design_doc.txt")) is engines.VLLM
    assert engines.detect(page("sglang_production_metrics_doc.txt")) is engines.SGLANG
    assert engines.detect(page("inside_llm_own.txt")) is engines.VLLM  # the tour's engine writes vLLM v1's names
    assert engines.detect(parse(LEGACY)) is engines.VLLM_LEGACY
    assert engines.detect(parse(LLAMACPP)) is engines.LLAMACPP
    assert engines.detect(parse(TGI)) is engines.TGI
    assert engines.detect(parse(NIM)) is engines.NIM
    other = parse("process_cpu_seconds_total 3\nup 1\n")
    assert engines.detect(other) is None
    with pytest.raises(LookupError, match="No known engine"):
        engines.read(other)


def test_vllm_docs_page():
    r = engines.read(page("vllm_v1_design_doc.txt"))
    assert (r.engine, r.models) == ("vllm", ["meta-llama/Llama-3.1-8B-Instruct"])
    assert (r.running.value, r.running.metric) == (8.0, "vllm:num_requests_running")
    assert r.finished_requests.value == 132.0  # stop 1 + length 131 + abort 0
    assert r.kv_usage.value is None and "vllm:kv_cache_usage_perc" in r.kv_usage.note
    # the doc's TTFT histogram stops at le=0.1: Prometheus answers NaN, and the reading says why
    assert r.ttft_p50_s.value is None and "no +Inf bucket" in r.ttft_p50_s.note
    assert r.generation_tokens_per_s.value is None and "second scrape" in r.generation_tokens_per_s.note


def test_sglang_docs_page():
    r = engines.read(page("sglang_production_metrics_doc.txt"))
    assert (r.running.value, r.waiting.value) == (162.0, 2826.0)
    assert (r.kv_usage.value, r.kv_usage.metric) == (0.28, "sglang:token_usage") and "tokens" in r.kv_usage.note
    assert r.prefix_cache_hit_rate.value == pytest.approx(0.007507552643049313)
    assert r.ttft_p50_s.value == 30.0 and "since the server started" in r.ttft_p50_s.note
    assert r.itl_p50_s.metric == "sglang:time_per_output_token_seconds"  # no inter_token histogram on this page
    assert r.preemptions.value is None and "retractions" in r.preemptions.note


def test_own_recorded_page():
    text = (FIXTURES / "inside_llm_own.txt").read_text(encoding="utf-8")
    r = engines.read(parse(text))
    assert r.models == ["smollm2"]
    finished = sum(
        float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith("vllm:request_success_total")
    )
    assert r.finished_requests.value == finished == 4.0
    assert r.kv_usage.metric == "vllm:kv_cache_usage_perc" and 0.0 <= r.kv_usage.value <= 1.0
    assert r.preemptions.value == 0.0
    # the median time to first token lies inside the bucket the page's own counts put it in
    b = [
        (float(ln.split('le="')[1].split('"')[0]), float(ln.rsplit(" ", 1)[1]))
        for ln in text.splitlines()
        if ln.startswith("vllm:time_to_first_token_seconds_bucket")
    ]
    half = b[-1][1] / 2
    i = next(i for i, (_, c) in enumerate(b) if c >= half)
    assert b[i - 1][0] <= r.ttft_p50_s.value <= b[i][0]
    assert r.ttft_p50_s.value == histogram_quantile(0.5, b)
    assert r.itl_p95_s.value >= r.itl_p50_s.value > 0
    assert r.prefix_cache_hit_rate.value is None  # the tour's engine has no prefix cache


def test_rates_and_windowed_quantiles_come_from_two_scrapes():
    def scrape(prompt, gen, fast, slow):
        return parse(
            f'vllm:num_requests_running{{model_name="m"}} 1\nvllm:kv_cache_usage_perc{{model_name="m"}} 0.5\n'
            f'vllm:prompt_tokens_total{{model_name="m"}} {prompt}\nvllm:generation_tokens_total{{model_name="m"}} {gen}\n'
            f'vllm:prefix_cache_hits_total{{model_name="m"}} {prompt // 4}\n'
            f'vllm:prefix_cache_queries_total{{model_name="m"}} {prompt}\n'
            f'vllm:time_to_first_token_seconds_bucket{{le="0.1",model_name="m"}} {fast}\n'
            f'vllm:time_to_first_token_seconds_bucket{{le="1.0",model_name="m"}} {fast + slow}\n'
            f'vllm:time_to_first_token_seconds_bucket{{le="+Inf",model_name="m"}} {fast + slow}\n'
        )

    then, now = scrape(100, 50, 10, 0), scrape(300, 450, 10, 4)
    r = engines.read(now, then, 2.0)
    assert r.window_s == 2.0
    assert r.prompt_tokens_per_s.value == 100.0 and r.generation_tokens_per_s.value == 200.0
    # the window's 4 requests were all slow: its median is in (0.1, 1], though most since start were fast
    assert r.ttft_p50_s.value == pytest.approx(0.1 + 0.9 * 2 / 4) and "previous scrape" in r.ttft_p50_s.note
    assert engines.read(now).ttft_p50_s.value == pytest.approx(0.1 * 7 / 10)
    assert r.prefix_cache_hit_rate.value == pytest.approx(50 / 200)
    # a window with no new request falls back to everything since start, and says so
    assert "since the server started" in engines.read(now, now, 1.0).ttft_p50_s.note
    # a restart between the scrapes (counters fell): the new counts are the increase
    assert engines.read(then, now, 1.0).prompt_tokens_per_s.value == 100.0


def test_llamacpp_page_says_what_it_lacks():
    r = engines.read(parse(LLAMACPP.replace("1200", "1300")), parse(LLAMACPP), 4.0)
    assert (r.running.value, r.waiting.value) == (3.0, 1.0)
    assert (
        r.generation_tokens_per_s.value == 25.0
        and r.generation_tokens_per_s.metric == "llamacpp:tokens_predicted_total"
    )
    assert "one slot's speed" in r.generation_tokens_per_s.note  # predicted_tokens_seconds (41.5) is not used
    assert r.kv_usage.value is None and "/slots" in r.kv_usage.note
    assert r.ttft_p50_s.value is None and "no latency histograms" in r.ttft_p50_s.note
    assert r.preemptions.value is None and "does not preempt" in r.preemptions.note


def test_tgi_nim_and_legacy_vllm():
    t = engines.read(parse(TGI))
    assert (t.running.value, t.waiting.value, t.kv_usage.value) == (4.0, 2.0, None)
    assert t.itl_p50_s.value == pytest.approx(0.01 + 0.04 * (4.5 - 2) / 7)
    assert "TGI publishes no time-to-first-token" in t.ttft_p50_s.note
    n = engines.read(parse(NIM))
    assert (n.engine, n.kv_usage.value, n.kv_usage.metric) == ("nim", 0.4, "gpu_cache_usage_perc")
    v = engines.read(parse(LEGACY))
    assert (v.engine, v.kv_usage.value, v.kv_usage.metric) == ("vllm-legacy", 0.25, "vllm:gpu_cache_usage_perc")
    assert v.prefix_cache_hit_rate.value == 0.6


def test_every_figure_names_its_metric_or_says_why_not():
    for text in (LLAMACPP, TGI, NIM, LEGACY):
        r = engines.read(parse(text))
        for name in ("running", "waiting", "kv_usage", "ttft_p50_s", "itl_p95_s", "preemptions"):
            f = getattr(r, name)
            assert f.note, (text[:20], name)
            assert (f.value is None) or f.metric, (text[:20], name)
            assert f.value is None or math.isfinite(f.value)
