"""sim/measure/cpu_measure.py: this CPU's roofs (units, sane ranges) and the model's traffic computed from its arrays."""

from __future__ import annotations

import numpy as np
import pytest

from inside_llm.sim.hardware import catalog
from inside_llm.sim.measure import cpu_measure, demo_timing
from inside_llm.sim.model.models import kv_bytes_per_token
from inside_llm.sim.model.transformer import load_model

MIB = 1 << 20


def test_memory_bandwidth_counts_bytes_read_and_written():
    r = cpu_measure.memory_bandwidth(buffer_bytes=16 * MIB, rounds=2)
    assert r["buffer_bytes"] == 16 * MIB and r["bytes_moved"] == 32 * MIB  # source read + destination written
    assert r["bytes_per_s"] == pytest.approx(r["bytes_moved"] / r["seconds"])
    # any machine this runs on moves between 0.1 GB/s and 10 TB/s: a unit slip (bits, MiB, ms) falls outside
    assert 1e8 < r["bytes_per_s"] < 1e13


def test_default_copy_is_larger_than_the_last_level_cache(monkeypatch):
    monkeypatch.setattr(cpu_measure, "last_level_cache_bytes", lambda: 6 * MIB)
    monkeypatch.setattr(cpu_measure, "COPY_MIN_BYTES", MIB)  # a small machine, so the test stays small
    monkeypatch.setattr(cpu_measure, "best_seconds", lambda fn, rounds: 1.0)  # the size is the point here
    r = cpu_measure.memory_bandwidth(rounds=1)
    assert r["last_level_cache_bytes"] == 6 * MIB
    assert r["buffer_bytes"] == 6 * MIB * cpu_measure.COPY_CACHE_MULTIPLE // 2
    assert 2 * r["buffer_bytes"] >= cpu_measure.COPY_CACHE_MULTIPLE * 6 * MIB > 6 * MIB
    assert r["bytes_per_s"] == 2 * r["buffer_bytes"]


def test_last_level_cache_reads_the_largest_level(tmp_path):
    for i, (level, size) in enumerate([(1, "48K"), (2, "2048K"), (3, "480M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "size").write_text(f"{size}\n")
    assert cpu_measure.last_level_cache_bytes(tmp_path) == 480 * MIB
    assert cpu_measure.last_level_cache_bytes(tmp_path / "missing") is None


def test_matmul_throughput_in_flops_per_second():
    r = cpu_measure.matmul_throughput(n=256, rounds=2)
    assert r["flops"] == 2 * 256**3 and r["flops_per_s"] == pytest.approx(r["flops"] / r["seconds"])
    assert 1e8 < r["flops_per_s"] < 1e14


def test_weight_bytes_are_the_sum_of_the_models_matrices():
    m = load_model("draft")
    fields = ("wq", "wk", "wv", "wo", "w1", "w2", "w3")
    expected = sum(np.asarray(getattr(layer, f)).nbytes for layer in m.layers for f in fields)
    expected += m.tok_emb.nbytes  # the tied unembedding: the embedding matrix read once more, transposed
    assert cpu_measure.weight_bytes_per_token(m) == expected
    assert cpu_measure.matrix_params(m) * 4 == expected  # float32


def test_kv_formula_equals_the_bytes_the_cache_holds():
    m = load_model("draft")
    c = m.config
    ids = demo_timing.default_prompt_ids(m, 12)
    per_token = 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4
    assert cpu_measure.kv_values_per_token(m) * 4 == per_token
    assert cpu_measure.cache_bytes_held(m, ids) == 12 * per_token


def test_smollm2_and_llama_kv_bytes_per_token(smollm):
    assert cpu_measure.kv_values_per_token(smollm) * 4 == 2 * 30 * 3 * 64 * 4 == 46_080  # float32, as served
    assert cpu_measure.cache_bytes_held(smollm, smollm.encode("The capital of France is")) == 5 * 46_080
    assert kv_bytes_per_token(catalog.model("llama-3.1-70b"), 2) == 327_680  # BF16


def test_smollm2_weight_bytes_include_the_tied_unembedding(smollm):
    c = smollm.config
    per_layer = c.dim * (2 * c.n_heads * c.head_dim + 2 * c.n_kv_heads * c.head_dim) + 3 * c.dim * c.ffn_dim
    assert cpu_measure.weight_bytes_per_token(smollm) == 4 * (c.n_layers * per_layer + c.dim * c.vocab_size)


def test_points_and_prediction_follow_from_the_timing():
    m = load_model("draft")
    timing = {"prompt_tokens": 64, "decode_tokens": 8, "prefill_ms_per_token": 0.5, "decode_ms_per_token": 2.0}
    pts = cpu_measure.measured_points(m, timing)
    w, params = cpu_measure.weight_bytes_per_token(m), cpu_measure.matrix_params(m)
    dec, pre = pts["decode"], pts["prefill"]
    assert dec["bytes_per_token"] > w and dec["flops_per_token"] > 2 * params  # plus the cache and attention
    assert dec["flops_per_s"] == pytest.approx(dec["flops_per_token"] / 2e-3)
    assert pre["arithmetic_intensity"] > 30 * dec["arithmetic_intensity"]  # 64 tokens share each weight read
    assert pre["tokens_per_s"] == pytest.approx(2000)
    p = cpu_measure.decode_prediction(m, 1e9, 2.0)
    assert p["predicted_ms_per_token"] == pytest.approx(1e3 * w / 1e9)
    assert p["measured_over_predicted"] == pytest.approx(2.0 / p["predicted_ms_per_token"])


def test_machine_roofs_ridge_is_compute_over_memory(monkeypatch):
    monkeypatch.setattr(cpu_measure, "memory_bandwidth", lambda rounds: {"bytes_per_s": 2e10})
    monkeypatch.setattr(cpu_measure, "matmul_throughput", lambda rounds: {"flops_per_s": 1e11})
    r = cpu_measure.machine_roofs()
    assert r["ridge_flops_per_byte"] == 5 and r["blas_threads"] >= 1
