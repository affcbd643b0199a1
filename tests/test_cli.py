"""`inside-llm estimate` and `inside-llm explain`: CSV parsed back equals the simulation, JSON, sweeps, solves, exit codes."""

from __future__ import annotations

import csv
import io
import json

import pytest

from inside_llm.cli import main
from inside_llm.clitools import EXIT_FITS, EXIT_NO_FIT, EXIT_REFUSED
from inside_llm.sim.cost import launch, serving, solve, table

SETUP = [
    "--model",
    "llama-3.1-70b",
    "--gpu",
    "h100-sxm",
    "--gpus",
    "8",
    "--tp",
    "8",
    "--batch",
    "64",
    "--prompt-tokens",
    "2048",
    "--output-tokens",
    "256",
]
PARAMS = serving.ServingParams(gpus=8, tp=8, batch=64, prompt_tokens=2048, output_tokens=256)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def parse(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_csv_parses_back_to_the_estimate(capsys):
    code, out, _ = run(capsys, "estimate", *SETUP, "--csv")
    assert code == EXIT_FITS
    (row,) = parse(out)
    assert list(row) == list(table.COLUMNS)
    e = serving.estimate(PARAMS)
    assert float(row["ttft_ms"]) == pytest.approx(e.ttft_ms)
    assert float(row["tokens_per_s_total"]) == pytest.approx(e.tokens_per_s_total)
    assert float(row["memory_spare_gb"]) == pytest.approx(e.memory.spare_gb, abs=5e-4)  # 3 decimals, as the JSON
    assert row["fits"] == "true" and row["model"] == "llama-3.1-70b" and row["batch"] == "64"


def test_json_is_the_apis_figures(capsys):
    code, out, _ = run(capsys, "estimate", *SETUP, "--json")
    d = json.loads(out)
    assert code == EXIT_FITS
    assert d["ttft_ms"] == pytest.approx(serving.estimate(PARAMS).ttft_ms)
    assert d["params"]["tp"] == 8 and d["fits"] is True


def test_does_not_fit_exits_1_with_empty_figures(capsys):
    code, out, _ = run(capsys, "estimate", "--model", "llama-3.1-70b", "--gpus", "1", "--csv")
    (row,) = parse(out)
    assert code == EXIT_NO_FIT
    assert row["fits"] == "false" and row["ttft_ms"] == "" and float(row["memory_shortfall_gb"]) > 0
    code, out, _ = run(capsys, "estimate", "--model", "llama-3.1-70b", "--gpus", "1")
    assert code == EXIT_NO_FIT and "DOES NOT FIT" in out


def test_bad_input_exits_2_naming_the_field(capsys):
    code, _, err = run(capsys, "estimate", "--batch", "0")
    assert code == EXIT_REFUSED and "batch: The batch must be between 1 and 4,096" in err
    code, _, err = run(capsys, "estimate", "--sweep", "colour=red")
    assert code == EXIT_REFUSED and "--sweep takes FIELD=V1,V2" in err


def test_sweep_gives_one_row_per_value(capsys):
    code, out, _ = run(capsys, "estimate", "--model", "llama-3.1-8b", "--tp", "1", "--sweep", "batch=1,2,4,8", "--csv")
    rows = parse(out)
    assert code == EXIT_FITS
    assert [r["batch"] for r in rows] == ["1", "2", "4", "8"]
    for r in rows:
        p = serving.ServingParams(model="llama-3.1-8b", gpus=1, tp=1, batch=int(r["batch"]))
        assert float(r["tokens_per_s_total"]) == pytest.approx(serving.estimate(p).tokens_per_s_total)
    code, out, _ = run(capsys, "estimate", "--model", "llama-3.1-70b", "--sweep", "tp=1,2", "--csv")
    assert code == EXIT_NO_FIT  # 70B in BF16 fits neither one nor two 80 GB GPUs
    assert [r["gpus"] for r in parse(out)] == ["1", "2"]


def test_solve_batch_and_gpus(capsys):
    code, out, _ = run(capsys, "estimate", "--tp", "4", "--solve", "batch", "--max-ttft-ms", "2000", "--json")
    d = json.loads(out)
    s = solve.largest_batch(serving.ServingParams(gpus=4, tp=4), max_ttft_ms=2000)
    assert code == EXIT_FITS and d["value"] == s.value and d["binding"] == "ttft"
    assert d["setup"]["ttft_ms"] <= 2000
    code, out, err = run(capsys, "estimate", "--solve", "batch", "--max-ttft-ms", "1")
    assert code == EXIT_NO_FIT and "Infeasible" in out and "binding constraint: ttft" in err
    code, out, _ = run(capsys, "estimate", "--solve", "gpus", "--users", "100", "--csv")
    (row,) = parse(out)
    assert code == EXIT_FITS and int(row["gpus"]) * int(row["batch"]) >= 100 * int(row["tp"])
    code, _, err = run(capsys, "estimate", "--solve", "gpus")
    assert code == EXIT_REFUSED and "--users" in err


def test_explain_after_double_dash(capsys):
    code, out, _ = run(capsys, "explain", "--gpu", "h100-sxm", "--", "vllm", "serve", "meta-llama/Meta-Llama-3-8B")
    assert code == EXIT_FITS
    for line in launch.explain("vllm serve meta-llama/Meta-Llama-3-8B").log_lines:
        assert line in out
    code, out, _ = run(capsys, "explain", "--json", "--", "llama-server", "-m", "x.gguf", "-c", "1024", "-np", "4")
    assert code == EXIT_FITS and json.loads(out)["facts"]["n_ctx_slot"] == 256
    code, out, _ = run(capsys, "explain", "--", "vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct")
    assert code == EXIT_NO_FIT and "OutOfMemoryError" in out
    code, _, err = run(capsys, "explain", "--", "vllm", "serve", "Qwen/Qwen3-32B", "-tp", "two")
    assert code == EXIT_REFUSED and "cmd: -tp takes a whole number, not 'two'" in err
    code, _, err = run(capsys, "explain")
    assert code == EXIT_REFUSED and "after --" in err
