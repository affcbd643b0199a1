"""GET /api/speculative (+ /measured): Leviathan's numbers, the real demo run, bounds, caching."""

from __future__ import annotations

import numpy as np
import pytest
from apikit import assert_refused, assert_same_bytes_and_etag

from inside_llm.api.speculative import DEFAULT_MAX_TOKENS, MAX_ALPHA, MAX_GAMMA, facts
from inside_llm.sim.decoding import speculative as sp
from inside_llm.sim.decoding import speculative_demo as demo
from inside_llm.sim.model.transformer import KVCache


@pytest.mark.parametrize("alpha,gamma,c", [(0.8, 4, 0.1), (0.5, 2, 0.3), (0.0, 1, 1.0), (0.99, 10, 0.01)])
def test_analytic_numbers_are_leviathans(client, alpha, gamma, c):
    d = client.get("/api/speculative", params={"alpha": alpha, "gamma": gamma, "cost_ratio": c, "max_tokens": 8}).json()
    a = sp.analytic(alpha, gamma, c)
    for k in ("expected_tokens_per_pass", "speedup", "optimal_gamma", "optimal_speedup"):
        assert d[k] == pytest.approx(getattr(a, k)), k
    assert [p["gamma"] for p in d["curve"]] == [p["gamma"] for p in a.curve] == list(range(1, 11))
    for got, want in zip(d["curve"], a.curve):
        assert got == pytest.approx(want)
    assert {"expected_tokens_per_pass", "speedup", "optimal_gamma"} <= set(d["math"])
    assert d["math"]["speedup"]["formula"] and d["math"]["speedup"]["sources"]


def test_defaults_give_two_to_three_times(client):
    d = client.get("/api/speculative").json()
    assert (d["alpha"], d["gamma"], d["cost_ratio"]) == (0.8, 4, 0.1)
    assert 2 <= d["speedup"] <= 3
    f = facts()
    assert f["speedup"] == f"{d['speedup']:.1f}" and f["tokens_per_pass"] == f"{d['expected_tokens_per_pass']:.1f}"


@pytest.mark.parametrize(
    "params",
    [{}, {"gamma": 2, "max_tokens": 20}, {"gamma": 6, "prompt": "DUKE:\nGo, and be gone.\n", "max_tokens": 24}],
)
def test_demo_output_is_the_targets_greedy_output(client, params, target_greedy):
    d = client.get("/api/speculative", params={"model": "toy", **params}).json()["demo"]
    n = params.get("max_tokens", DEFAULT_MAX_TOKENS)
    want = target_greedy(params.get("prompt", demo.DEFAULT_PROMPT), n)
    assert d["matches_greedy"] is True and d["greedy_output_ids"] == want
    assert [t["id"] for t in d["output_tokens"]] == want and d["num_tokens"] == n
    assert d["output_text"] == "".join(t["text"] for t in d["output_tokens"])


def test_acceptance_rate_and_frames_agree(client):
    d = client.get("/api/speculative", params={"gamma": 5, "model": "toy"}).json()["demo"]
    frames = d["frames"]
    drafted = sum(f["num_drafted"] for f in frames)
    accepted = sum(f["num_accepted"] for f in frames)
    assert d["acceptance_rate"] == pytest.approx(accepted / drafted) and d["num_proposed"] == drafted
    assert all(len(f["proposed"]) <= f["num_drafted"] <= 5 for f in frames)
    assert d["num_target_passes"] == len(frames) and frames[0]["kind"] == "prefill"
    rejections = 0
    for f in frames:
        k, ids = f["num_accepted"], [t["id"] for t in f["proposed"]]
        assert [t["id"] for t in f["accepted"]] == ids[:k]
        if f["rejected"] is not None:
            rejections += 1
            assert f["rejected"]["id"] == ids[k] and f["replacement"] and f["replacement"]["id"] != ids[k]
        else:
            assert f["replacement"] is None
        assert f["emitted"] == f["accepted"] + [f["target_token"]]
    assert rejections == d["num_rejected"]
    emitted = [t for f in frames for t in f["emitted"]]
    assert emitted == d["output_tokens"]
    assert d["alpha_estimate"] == pytest.approx(accepted / (accepted + rejections))
    assert d["predicted_speedup_memory_bound"] == pytest.approx(
        sp.speedup(d["alpha_estimate"], 5, d["weights_cost_ratio"])
    )
    assert {"acceptance_rate", "alpha_estimate", "weights_cost_ratio", "predicted_speedup_memory_bound"} <= set(
        d["math"]
    )


def test_same_url_same_bytes_and_etag(client):
    spelled_out = f"/api/speculative?alpha=0.8&gamma=4&cost_ratio=0.1&max_tokens={DEFAULT_MAX_TOKENS}&prompt="
    a = assert_same_bytes_and_etag(client, "/api/speculative", spelled_out)
    assert a.status_code == 200
    for key in ("wall_time_s", "target_s", "draft_s"):
        assert f'"{key}"' not in a.text, f"{key} is a clock value; it belongs at /api/speculative/measured"
    assert len(a.content) < 100_000


def test_demo_carries_the_measured_speedup_of_the_measured_endpoint(client):
    """demo.measured_speedup is the /measured figure once it has run in this process, null before: the
    chapter endpoint never waits for a wall-clock measurement."""
    q = {"prompt": "KING HENRY:\nWhat say you, lords?\n", "max_tokens": 8, "gamma": 3, "model": "toy"}
    assert client.get("/api/speculative", params=q).json()["demo"]["measured_speedup"] is None
    d = client.get("/api/speculative", params=q).json()["demo"]
    m = client.get(d["measured_url"]).json()
    after = client.get("/api/speculative", params=q).json()["demo"]
    assert m["available"] and after["measured_speedup"] == m["measured_speedup"] > 0


def test_alpha_and_cost_ratio_leave_the_demo_alone(client):
    a = client.get("/api/speculative").json()["demo"]
    b = client.get("/api/speculative", params={"alpha": 0.3, "cost_ratio": 0.5}).json()["demo"]
    assert a == b


@pytest.mark.parametrize(
    "name,value,bound",
    [
        ("alpha", MAX_ALPHA + 0.01, f"{MAX_ALPHA}"),
        ("alpha", -0.1, "0"),
        ("gamma", 0, "1"),
        ("gamma", MAX_GAMMA + 1, f"{MAX_GAMMA}"),
        ("cost_ratio", 0, "0"),
        ("cost_ratio", 1.5, "1"),
        ("max_tokens", 0, "1"),
        ("max_tokens", demo.MAX_NEW_TOKENS + 1, f"{demo.MAX_NEW_TOKENS}"),
        ("prompt", "x" * 4001, "4,000"),
        ("prompt", " the" * 300, f"{demo.MAX_PROMPT_TOKENS}"),
    ],
)
def test_out_of_bounds_gets_422_naming_field_and_bound(client, name, value, bound):
    assert_refused(client, "/api/speculative", {"model": "toy", name: value}, name, bound)


def test_unknown_names_get_422(client):
    assert client.get("/api/speculative", params={"temperature": 1}).status_code == 422
    assert client.get("/api/speculative/measured", params={"alpha": 0.5}).status_code == 422


def test_measured_on_this_cpu_beside_the_prediction(client):
    main = client.get("/api/speculative", params={"gamma": 3, "max_tokens": 12, "model": "toy"}).json()["demo"]
    r = client.get(main["measured_url"])
    assert r.status_code == 200
    m = r.json()
    assert m["measured_on"] == "this server's CPU" and m["cpu"]["logical_cores"] >= 1
    assert m["available"], m["reason"]
    assert (m["gamma"], m["max_tokens"], m["num_tokens"]) == (3, 12, 12)
    assert m["matches_greedy"] is True and m["acceptance_rate"] == pytest.approx(main["acceptance_rate"])
    assert m["measured_speedup"] == pytest.approx(m["greedy_wall_s"] / m["speculative_wall_s"])
    assert m["predicted_speedup"] == pytest.approx(sp.speedup(m["alpha_estimate"], 3, m["measured_cost_ratio"]))
    assert m["verify_cost_steps"] > 0 and "more than one decode step" in m["note"]
    assert client.get(main["measured_url"]).content == r.content, "measured once per process, then cached"


# ---- the real model: SmolLM2 as target, drafted by prompt lookup (with and without the file) ----------


def test_real_model_speculative_equals_its_own_greedy_output(client, smollm):
    d = client.get("/api/speculative").json()
    run = d["demo"]
    assert run["target_model"]["name"] == smollm.name and run["draft_model"]["name"] == "prompt lookup"
    assert run["target_model"]["weights"] == "q8"  # the served path: int8 matrices, as the chat serves
    assert run["weights_cost_ratio"] == 0 and run["draft_model"]["num_params"] == 0
    served = smollm.served_form
    ids = served.chat_ids(d["example_prompts"]["usually_right"])
    cache, want = KVCache(served.config), []
    logits = served.forward(ids, cache).logits[-1]
    while len(want) < run["num_tokens"]:  # its own greedy answer, one pass per token, the whole prompt at once
        want.append(int(np.argmax(logits)))
        logits = served.forward(want[-1:], cache).logits[-1]
    assert run["matches_greedy"] and [t["id"] for t in run["output_tokens"]] == want == run["greedy_output_ids"]
    # the example where lookup is usually right: most guesses kept, the GPU time at least halved (c = 0)
    assert run["acceptance_rate"] >= 0.6 and run["gpu_time"]["speedup"] >= 2
    assert run["gpu_time"]["speculative"] == run["num_target_passes"]
    bad = client.get("/api/speculative", params={"prompt": d["example_prompts"]["often_wrong"]}).json()["demo"]
    assert bad["matches_greedy"] and bad["acceptance_rate"] < 0.3 and bad["gpu_time"]["speedup"] < 1.5
    assert run["check"]["agree"] == run["check"]["positions"] == run["num_tokens"]


def test_real_model_work_is_bounded_per_prompt_and_shared_by_every_gamma(client, smollm):
    """The real model writes at most REAL_MAX_NEW_TOKENS however many are asked (each is one of its decode steps),
    a prompt over its bound is a 422 naming it, and a new gamma on the same prompt reuses its one answer."""
    q = {"prompt": "Name three colours of the rainbow.", "max_tokens": demo.MAX_NEW_TOKENS, "gamma": 10}
    before = demo.answer.cache_info()
    runs = [client.get("/api/speculative", params={**q, "gamma": g}).json()["demo"] for g in (10, 3, 1)]
    after = demo.answer.cache_info()
    assert after.misses - before.misses == 1 and after.hits - before.hits == 2
    assert {r["num_tokens"] for r in runs} == {demo.REAL_MAX_NEW_TOKENS} == {r["max_new_tokens"] for r in runs}
    assert len({tuple(r["greedy_output_ids"]) for r in runs}) == 1
    assert [r["num_target_passes"] for r in runs][-1] <= demo.REAL_MAX_NEW_TOKENS
    long = "please " * (demo.REAL_MAX_PROMPT_TOKENS + 1)
    assert_refused(client, "/api/speculative", {"prompt": long}, "prompt", f"{demo.REAL_MAX_PROMPT_TOKENS}")


def test_without_the_model_file_the_toy_pair_serves(client, no_model):
    d = client.get("/api/speculative", params={"max_tokens": 8}).json()
    assert d["demo"]["draft_model"]["name"] == "draft" and d["example_prompts"]["usually_right"] == demo.DEFAULT_PROMPT
    r = client.get("/api/speculative", params={"model": "smollm2"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "model"
    assert "fetch-model" in r.json()["detail"][0]["msg"]
