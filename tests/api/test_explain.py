"""GET /api/explain: equals the simulation, 422s in words on the command's word, caching."""

from __future__ import annotations

import pytest
from apikit import assert_refused, assert_same_bytes_and_etag, get_json

from inside_llm.sim.cost.launch import explain

VLLM = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32768 --port 8000"


def test_equals_the_simulation(client):
    d = get_json(client, "/api/explain", cmd=VLLM, gpu="h100-sxm")
    assert d == explain(VLLM, "h100-sxm").to_dict()
    assert d["engine"] == "vllm" and d["ignored"] == ["--port 8000"]
    assert any(line.startswith("GPU KV cache size: ") for line in d["log_lines"])
    assert sum(s["gib"] for s in d["memory"]) == pytest.approx(d["capacity_gib"], abs=0.01)


def test_the_three_engines(client):
    for cmd, engine in (
        ("llama-server -m Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf -c 8192 -np 4", "llama.cpp"),
        ("python -m sglang.launch_server --model-path Qwen/Qwen3-32B --tp 2", "sglang"),
    ):
        d = get_json(client, "/api/explain", cmd=cmd, gpu="l40s")
        assert d["engine"] == engine and d["gpu"] == "l40s"


def test_model_override_for_an_unknown_name(client):
    d = get_json(client, "/api/explain", cmd="vllm serve /models/my-finetune", model="qwen3-32b")
    assert d["model"] == "qwen3-32b"


@pytest.mark.parametrize(
    ("query", "field", "words"),
    [
        ({"cmd": "vllm serve Qwen/Qwen3-32B -tp two"}, "cmd", "-tp takes a whole number, not 'two' (word 5"),
        ({"cmd": "vllm serve Qwen/Qwen3-32B --block-size"}, "cmd", "--block-size needs a value"),
        ({"cmd": "ollama run llama3"}, "cmd", "must start with `vllm serve`"),
        ({"cmd": "vllm serve some/unknown-model"}, "cmd", "not one this page knows"),
        ({"cmd": ""}, "cmd", "The command must not be empty"),
        ({"cmd": "x" * 4001}, "cmd", "The command must be at most 4,000 characters long"),
        ({"cmd": VLLM, "gpu": "tpu"}, "gpu", "The GPU must be one of"),
        ({"cmd": VLLM, "model": "gpt-5"}, "model", "The model must be one of"),
        ({"cmd": VLLM, "batch": "4"}, "batch", "not a setting of this endpoint"),
    ],
)
def test_refusals_in_words(client, query, field, words):
    assert_refused(client, "/api/explain", query, field, words)


def test_same_url_same_bytes(client):
    assert_same_bytes_and_etag(client, "/api/explain?cmd=llama-server%20-c%201024%20-np%204")
