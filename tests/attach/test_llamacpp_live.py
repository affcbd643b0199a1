"""Optional, against a real llama.cpp `llama-server`: runs only when INSIDE_LLM_LLAMA_SERVER names one
(`llama-server -m SmolLM2-135M-Instruct.Q4_1.gguf --port 8781 --metrics -np 4 -c 2048`, then
INSIDE_LLM_LLAMA_SERVER=http://127.0.0.1:8781); otherwise each test is reported skipped, with how to run it, in
the summary (pytest -ra). The tour attaches to it over real HTTP and reads it as llama.cpp, its figures agreeing
with the server's own /metrics, /slots and /props; `inside-llm measure` runs a tiny load against it."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from fastapi.testclient import TestClient

from inside_llm import cli
from inside_llm.app import create_app
from inside_llm.attach import measure
from inside_llm.attach.targets import parse_targets
from inside_llm.settings import Settings

ENV = "INSIDE_LLM_LLAMA_SERVER"
WAIT_S = 120  # the longest any state is waited for (polled, not slept through)


@pytest.fixture(scope="module")
def llama_url():
    url = os.environ.get(ENV, "").rstrip("/")
    if not url:
        pytest.skip(f"no llama-server named: start one with --metrics (docs/attach.md) and set {ENV}=http://HOST:PORT "
                    "to run this live test")  # fmt: skip
    try:
        httpx.get(url + "/health", timeout=10).raise_for_status()
    except httpx.HTTPError as e:
        pytest.fail(f"{ENV}={url} names no healthy llama-server ({type(e).__name__}: {e})")
    return url


def test_the_tour_reads_a_real_llama_server(llama_url):
    chat = openai.OpenAI(base_url=f"{llama_url}/v1", api_key="none", timeout=300, max_retries=0)
    for q in ("Hi.", "Say yes."):
        chat.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": q}], max_tokens=3)
    props = httpx.get(llama_url + "/props", timeout=30).json()
    with TestClient(create_app(Settings(attach=parse_targets([f"ll={llama_url}"])))) as c:
        end = time.monotonic() + WAIT_S
        while True:
            v = c.get("/api/attach/ll").json()
            r = v["reading"]
            pages = {p["path"]: p["status"] for p in v["pages"]}
            if v["status"] == "ok" and r["window_s"] and pages.get("/slots") == pages.get("/props") == "ok":
                break
            assert time.monotonic() < end, f"not read as llama.cpp within {WAIT_S} s: {v}"
            time.sleep(0.5)
    assert r["engine"] == "llama.cpp" and pages == {"/v1/models": "ok", "/slots": "ok", "/props": "ok"}
    assert r["running"]["metric"] == "llamacpp:requests_processing" and r["running"]["value"] >= 0
    assert r["generation_tokens_per_s"]["metric"] == "llamacpp:tokens_predicted_total"
    assert r["generation_tokens_per_s"]["value"] is not None  # two scrapes: a rate over wall time
    assert r["slots_total"]["value"] == props["total_slots"]
    assert r["context_tokens"]["value"] == props["default_generation_settings"]["n_ctx"]
    assert 0 <= r["kv_usage"]["value"] <= 1 and r["kv_usage"]["metric"] == "GET /slots: n_prompt_tokens / n_ctx"
    assert r["kv_usage"]["value"] > 0  # the two chats' tokens are still held in their slots
    assert r["served_models"] and r["build"] == props["build_info"]


def test_measure_runs_against_it(llama_url, capsys):
    argv = ["measure", llama_url, "--concurrency", "2", "--requests", "2", "--prompt-tokens", "4",
            "--output-tokens", "3", "--ignore-eos", "--json",
            "--setup", "model=llama-3.1-8b,gpu=l4,gpus=1,tp=1,precision=bf16"]  # fmt: skip
    with ThreadPoolExecutor(1) as pool:  # measure runs asyncio.run: a thread of its own
        assert pool.submit(cli.main, argv).result(timeout=600) == measure.EXIT_OK
    s = json.loads(capsys.readouterr().out)
    assert (s["finished"], s["failed"], s["unfinished"]) == (2, {}, 0)
    assert s["output_tokens_mean"] == 3  # --ignore-eos: llama-server writes every token asked for
    assert s["measured"]["ttft_ms"]["median"] > 0 and s["predicted"]["ttft_ms"] > 0
