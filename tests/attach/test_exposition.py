"""exposition.py: pages parsed with prometheus_client's parser, garbage refused in words, and histogram_quantile
computed as Prometheus' bucketQuantile does (hand-worked examples, and the recorded SGLang page)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from inside_llm.attach.exposition import Garbled, bucket_delta, counter_delta, histogram_quantile, parse

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "attach"
INF = math.inf


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_quantile_interpolates_inside_the_bucket_the_rank_falls_in():
    b = [(0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (INF, 40.0)]
    assert histogram_quantile(0.5, b) == pytest.approx(0.1 + 0.4 * (20 - 10) / (30 - 10))  # rank 20 in (0.1, 0.5]
    assert histogram_quantile(0.95, b) == pytest.approx(0.5 + 0.5 * (38 - 30) / (40 - 30))  # rank 38 in (0.5, 1]
    assert histogram_quantile(0.05, b) == pytest.approx(0.1 * 2 / 10)  # lowest bucket: from 0
    assert histogram_quantile(0.0, b) == 0.0


def test_quantile_edges_follow_prometheus():
    assert histogram_quantile(0.9, [(1.0, 5.0), (INF, 10.0)]) == 1.0  # rank in +Inf: the highest finite bound
    assert histogram_quantile(0.5, [(0.1, 1.0), (1.0, 2.0)]) is None  # no +Inf bucket: NaN in Prometheus
    assert histogram_quantile(0.5, [(INF, 3.0)]) is None  # fewer than two buckets
    assert histogram_quantile(0.5, [(1.0, 0.0), (INF, 0.0)]) is None  # no observations
    assert histogram_quantile(-0.1, [(1.0, 1.0), (INF, 1.0)]) == -INF
    assert histogram_quantile(1.5, [(1.0, 1.0), (INF, 1.0)]) == INF
    assert histogram_quantile(0.5, None) is None
    # unsorted input, and a fall in the cumulative counts, are put right first (sort, then ensureMonotonic)
    assert histogram_quantile(0.5, [(INF, 4.0), (2.0, 3.0), (1.0, 4.0)]) == pytest.approx(0.5)
    assert histogram_quantile(0.5, [(-1.0, 3.0), (1.0, 4.0), (INF, 4.0)]) == -1.0  # a non-positive lowest bound


def test_sglang_page_from_its_docs():
    page = parse(fixture("sglang_production_metrics_doc.txt"))
    assert page.total("sglang:num_running_reqs") == 162.0
    assert page.total("sglang:prompt_tokens_total") == 8.128902e06
    ttft = page.buckets("sglang:time_to_first_token_seconds")
    assert ttft[-1] == (INF, 11008.0) and len(ttft) == 21
    # 2,513 of 11,008 fall at or under 30 s: the median is in the +Inf bucket, so 30 s (the highest bound)
    assert histogram_quantile(0.5, ttft) == 30.0
    tpot = page.buckets("sglang:time_per_output_token_seconds")
    rank = 0.5 * 7.400757e06  # in (0.075, 0.1], between 433,413 and 4,950,195 observations
    assert histogram_quantile(0.5, tpot) == pytest.approx(0.075 + 0.025 * (rank - 433413) / (4.950195e06 - 433413))
    # func_latency's series carries name=, not model_name=; it is still read as its own family
    assert page.total("sglang:func_latency_seconds_count") == 14007.0


def test_series_are_summed_per_name_and_buckets_per_bound():
    page = parse(
        'x_total{m="a"} 3\nx_total{m="b"} 4\n'
        'h_bucket{le="1",m="a"} 1\nh_bucket{le="+Inf",m="a"} 2\nh_bucket{le="1",m="b"} 5\nh_bucket{le="+Inf",m="b"} 5\n'
    )
    assert page.total("x_total") == 7.0
    assert page.buckets("h") == [(1.0, 6.0), (INF, 7.0)]
    assert page.total("absent") is None and page.buckets("absent") is None
    assert page.labels("x_total", "m") == ["a", "b"]


def test_a_page_served_as_one_json_string_is_unquoted():
    """llama.cpp once served /metrics as a quoted string (ggml-org/llama.cpp#17384)."""
    page = parse('"llamacpp:requests_processing 2\\nllamacpp:requests_deferred 1\\n"')
    assert page.total("llamacpp:requests_processing") == 2.0


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "empty"),
        ("# HELP x nothing\n", "no samples"),
        ("<html><body>Not found</body></html>", "not Prometheus exposition text"),
        ('x{le="1" 3\n', "not Prometheus exposition text"),
        ("a\x00b 1\n", "NUL"),
    ],
)
def test_garbage_is_refused_in_words(text, words):
    with pytest.raises(Garbled, match=words):
        parse(text)


def test_deltas_treat_a_fall_as_a_restart():
    assert counter_delta(30.0, 10.0) == 20.0
    assert counter_delta(5.0, 10.0) == 5.0  # restarted: the new value is the increase
    assert counter_delta(None, 1.0) is None
    now, then = [(1.0, 5.0), (INF, 9.0)], [(1.0, 2.0), (INF, 3.0)]
    assert bucket_delta(now, then) == [(1.0, 3.0), (INF, 6.0)]
    assert bucket_delta(then, now) == then  # fell: restart
    assert bucket_delta(now, None) == now
