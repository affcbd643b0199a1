"""targets.py: the operator's NAME=URL list, refused in words when it is not one."""

from __future__ import annotations

import os

import pytest

from inside_llm.attach.targets import MAX_TARGETS, parse_measure, parse_target, parse_targets


def test_urls_become_base_and_metrics_urls():
    t = parse_target("vllm=http://127.0.0.1:8000/")
    assert (t.name, t.base_url, t.metrics_url) == ("vllm", "http://127.0.0.1:8000", "http://127.0.0.1:8000/metrics")
    nim = parse_target("nim=https://nim.example:8000/v1/metrics")
    assert (nim.base_url, nim.metrics_url) == ("https://nim.example:8000", "https://nim.example:8000/v1/metrics")
    ts = parse_targets(["a=http://h:1, b=http://h:2", "c=http://h:3"])
    assert [t.name for t in ts] == ["a", "b", "c"]
    assert parse_targets([""]) == ()


@pytest.mark.parametrize(
    "entry, words",
    [
        ("http://127.0.0.1:8000", "NAME=URL"),
        ("-x=http://h", "must be 1-32 letters"),
        ("a=file:///etc/passwd", "http:// or https://"),
        ("a=gopher://h", "http:// or https://"),
        ("a=http://", "names no host"),
        ("a=http://u:p@h", "credentials"),
        ("a=http://h/?x=1", "no query"),
        ("a=http://h:99999", "port out of range"),
    ],
)
def test_bad_entries_are_refused_in_words(entry, words):
    with pytest.raises(ValueError, match=words):
        parse_targets([entry])


def test_duplicates_and_too_many():
    with pytest.raises(ValueError, match="Two attached servers are named 'a'"):
        parse_targets(["a=http://h:1 a=http://h:2"])
    with pytest.raises(ValueError, match=f"At most {MAX_TARGETS}"):
        parse_targets([" ".join(f"s{i}=http://h:{i + 1}" for i in range(MAX_TARGETS + 1))])


def test_which_servers_the_tour_may_measure():
    targets = parse_targets(["a=http://h:1 b=http://h:2"])
    assert parse_measure(None, targets) == parse_measure("", targets) == ()
    assert parse_measure("*", targets) == ("a", "b")  # the flag alone: every attached server
    assert parse_measure("b, b", targets) == ("b",)
    with pytest.raises(
        ValueError, match=r"--attach-measure names 'c', which is not an attached server \(attached: a, b\)"
    ):
        parse_measure("c", targets)


def test_serve_refuses_an_unknown_measure_name_before_starting(capsys, monkeypatch):
    from inside_llm import cli

    monkeypatch.delenv("INSIDE_LLM_ATTACH", raising=False)
    monkeypatch.delenv("INSIDE_LLM_ATTACH_MEASURE", raising=False)
    for key in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "INSIDE_LLM_PRELOAD_MODEL", "INSIDE_LLM_WORKERS"):
        monkeypatch.setenv(key, os.environ.get(key, ""))  # what `serve` sets first is put back after the test
    assert cli.main(["serve", "--attach", "a=http://127.0.0.1:9", "--attach-measure", "zz"]) == 2
    assert "--attach-measure names 'zz'" in capsys.readouterr().err
