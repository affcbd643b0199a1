"""`inside-llm measure`: bounds and setups refused in words, and a tiny real run (a few tokens) against the tour's
own server over HTTP, with the cost model's prediction and the error beside it, as a table, JSON and CSV."""

from __future__ import annotations

import csv
import io
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from inside_llm import cli
from inside_llm.attach import measure

BOUND_S = 600  # the longest a tiny run may take on a loaded machine before the test gives up


def cli_in_thread(argv: list[str]) -> int:
    """cli.main on a thread of its own (measure runs asyncio.run; a browser test may leave a loop in this one)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(cli.main, argv).result(timeout=BOUND_S)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--requests", "257"], "--requests must be between 1 and 256, not 257"),
        (["--concurrency", "65", "--requests", "100"], "--concurrency must be between 1 and 64"),
        (["--concurrency", "8", "--requests", "4"], "cannot exceed --requests"),
        (["--time-cap", "4000"], "--time-cap must be between 1 and 1,800"),
        (["--setup", "model=llama-3.1-8b"], "needs at least model=... and gpu=..."),
        (["--setup", "model=llama-3.1-8b,gpu=l4,colour=red"], "KEY one of model, gpu"),
        (["--setup", "model=llama-3.1-8b,gpu=l4,tp=two"], "tp must be a whole number"),
        (["--setup", "model=no-such-model,gpu=l4"], "model"),
    ],
)
def test_bad_input_is_refused_in_words_before_any_request(argv, words, capsys):
    # the URL is a closed port: a refusal must come before anything is sent
    assert cli.main(["measure", "http://127.0.0.1:9", *argv]) == measure.EXIT_REFUSED
    assert words in capsys.readouterr().err


def test_names_come_from_the_operator(monkeypatch, capsys):
    monkeypatch.setenv("INSIDE_LLM_ATTACH", "vllm=http://127.0.0.1:8000")
    assert measure.resolve("vllm").metrics_url == "http://127.0.0.1:8000/metrics"
    assert cli.main(["measure", "sglang"]) == measure.EXIT_REFUSED
    assert "No attached server is named 'sglang' (attached: vllm)" in capsys.readouterr().err
    assert cli.main(["measure", "ftp://h"]) == measure.EXIT_REFUSED


def test_a_tiny_run_against_the_tour_itself(base_url, smollm, capsys):
    setup = "model=llama-3.1-8b,gpu=l4,gpus=1,tp=1,precision=bf16"
    argv = ["measure", base_url, "--concurrency", "2", "--requests", "3", "--prompt-tokens", "4",
            "--output-tokens", "3", "--model-id", "smollm2", "--setup", setup]  # fmt: skip
    assert cli_in_thread([*argv, "--json"]) == measure.EXIT_OK
    s = json.loads(capsys.readouterr().out)
    assert (s["finished"], s["failed"], s["unfinished"], s["model"]) == (3, {}, 0, "smollm2")
    assert 1 <= s["output_tokens_mean"] <= 3 and s["prompt_tokens_mean"] > 4  # the chat template adds tokens
    m, p, e = s["measured"], s["predicted"], s["error_pct"]
    assert 0 < m["ttft_ms"]["median"] <= m["ttft_ms"]["p95"] and m["output_tokens_per_s"] > 0
    assert (p["batch"], p["prompt_tokens"]) == (2, round(s["prompt_tokens_mean"]))
    assert e["ttft_ms"] == pytest.approx(100 * (m["ttft_ms"]["median"] - p["ttft_ms"]) / p["ttft_ms"])
    assert e["output_tokens_per_s"] == pytest.approx(
        100 * (m["output_tokens_per_s"] - p["tokens_per_s_total"]) / p["tokens_per_s_total"]
    )
    assert cli_in_thread([*argv, "--csv"]) == measure.EXIT_OK
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 1 and rows[0]["finished"] == "3" and float(rows[0]["predicted_ttft_ms"]) > 0
    assert cli_in_thread(argv) == measure.EXIT_OK
    text = capsys.readouterr().out
    assert "3 of 3 requests finished" in text and "Time to first token (ms)" in text and "predicted" in text


def test_nothing_finished_is_exit_1(base_url, capsys):
    """A model the server does not serve: every request fails, and the run says how."""
    argv = ["measure", base_url, "--requests", "2", "--concurrency", "1", "--output-tokens", "1", "--model-id", "nope"]
    assert cli_in_thread(argv) == measure.EXIT_NONE
    assert "0 of 2 requests finished" in capsys.readouterr().out


def _streamed(body: bytes, piece: int = 7):
    """An httpx client whose every POST answers 200 with `body`, sent in pieces of `piece` bytes."""
    import httpx

    class Pieces(httpx.AsyncByteStream):
        async def __aiter__(self):
            for i in range(0, len(body), piece):
                yield body[i : i + piece]

    return httpx.AsyncClient(transport=httpx.MockTransport(lambda _: httpx.Response(200, stream=Pieces())))


def _data(body: bytes, piece: int = 7, max_bytes: int = measure.MAX_ANSWER_BYTES) -> list[str]:
    import asyncio

    async def read():
        async with _streamed(body, piece) as client, client.stream("POST", "http://t/x") as r:
            return [d async for d in measure.sse_data(r, max_bytes)]

    return asyncio.run(read())


def test_sse_data_reads_payloads_split_anywhere_and_bounds_what_it_holds():
    body = b'data: {"a": 1}\r\n\n: a comment\ndata: [DONE]\n\ndata:last'
    for piece in (1, 3, 7, len(body)):
        assert _data(body, piece) == ['{"a": 1}', "[DONE]", "last"], piece
    line = b"data: " + b"x" * (measure.MAX_LINE_BYTES + 10)  # no newline: httpx's aiter_lines would hold it all
    with pytest.raises(measure.TooMuch, match="a line of more than 1 MB"):
        _data(line, 64 * 1024)
    with pytest.raises(measure.TooMuch, match="more than 0.001 MB for one answer"):
        _data(b"data: x\n" * 200, 64, max_bytes=1000)


def test_one_request_over_its_line_cap_fails_in_words():
    import asyncio

    async def ask():
        async with _streamed(b"data: " + b"y" * (measure.MAX_LINE_BYTES + 1), 64 * 1024) as client:
            return await measure.one_request(client, "http://t", "m", "Hi", 4, False)

    r = asyncio.run(ask())
    assert not r.ok and "a line of more than 1 MB" in r.error
