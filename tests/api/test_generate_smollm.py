"""GET /api/generate with the real model (SmolLM2-135M-Instruct) and without it (the toy serves)."""

from __future__ import annotations

from test_generate import events


def test_default_model_answers_the_capital_of_france_greedily(client, smollm):
    r = client.get(
        "/api/generate", params={"prompt": "What is the capital of France?", "temperature": 0, "max_tokens": 32}
    )
    assert r.status_code == 200, r.text
    ev = events(r.text)
    start, toks, done = ev[0][1], [d for e, d in ev if e == "token"], ev[-1][1]
    assert start["model"] == "smollm2" and start["num_prompt_tokens"] == 37
    assert start["template"].endswith(
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    )
    answer = "".join(t["text"] for t in toks)
    assert "Paris" in answer and "<|im_end|>" not in answer
    assert done["finish_reason"] == "stop" and done["num_tokens"] == len(toks) < 32
    assert all(t["cl100k_id"] is None for t in toks)


def test_prompt_over_the_window_gets_422_in_words(client, smollm):
    r = client.get("/api/generate", params={"prompt": "Paris " * 300, "model": "smollm2"})
    assert r.status_code == 422
    err = r.json()["detail"][0]
    assert err["loc"][-1] == "prompt" and "chat template" in err["msg"] and "at most 256 tokens" in err["msg"]


def test_without_the_file_the_toy_serves_and_smollm2_is_a_422(client, no_model):
    r = client.get("/api/generate", params={"prompt": "ROMEO:", "max_tokens": 2})
    assert r.status_code == 200 and events(r.text)[0][1]["model"] in ("main", "draft")
    r = client.get("/api/generate", params={"prompt": "ROMEO:", "max_tokens": 2, "model": "smollm2"})
    assert r.status_code == 422
    err = r.json()["detail"][0]
    assert err["loc"][-1] == "model" and "not installed" in err["msg"] and "fetch-model" in err["msg"]


def test_a_long_prefill_is_read_in_pieces_and_gives_the_same_tokens(smollm):
    ids = smollm.chat_ids("Explain, in two sentences, why the sky is blue and why sunsets are red. " * 2)
    assert len(ids) > 64
    whole = list(smollm.generate(ids, 6))
    pieces = list(smollm.generate(ids, 6, prefill_chunk=32))
    assert pieces.count(None) == (len(ids) - 1) // 32 and [t for t in pieces if t is not None] == whole
