"""endpoints.py: the JSON pages beside /metrics (GET /v1/models, llama.cpp's /slots and /props) read into plain
numbers, garbage refused in words, and what they add to a Reading: served models, context, slots, and for
llama.cpp the slots' tokens held as what it offers instead of a KV-usage ratio."""

from __future__ import annotations

import json

import pytest
from hostile import LLAMA_METRICS, LLAMA_PAGES

from inside_llm.attach import endpoints, engines
from inside_llm.attach.exposition import Garbled, parse

SLOTS = json.loads(LLAMA_PAGES["/slots"])
PROPS = json.loads(LLAMA_PAGES["/props"])
MODELS = json.loads(LLAMA_PAGES["/v1/models"])
VLLM_MODELS = {"object": "list", "data": [{"id": "meta-llama/Llama-3.1-8B-Instruct", "object": "model",
                                           "owned_by": "vllm", "max_model_len": 131072}]}  # fmt: skip


def llama_reading():
    return engines.read(parse(LLAMA_METRICS.decode()))


def test_pages_are_read_in_both_shapes_of_next_token():
    s = endpoints.slots_page(SLOTS)
    assert [(x.id, x.n_ctx, x.busy, x.tokens_held, x.decoded) for x in s.slots] == [
        (0, 2048, True, 512, 24),
        (1, 2048, False, None, None),
    ]
    as_object = [{**SLOTS[0], "next_token": {"n_decoded": 136}}]  # the README's shape: one object, not a list
    assert endpoints.slots_page(as_object).slots[0].decoded == 136
    p = endpoints.props_page(PROPS)
    assert (p.total_slots, p.n_ctx, p.model, p.build_info) == (
        2,
        2048,
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "b1234-abcdef0",
    )
    m = endpoints.models_page(MODELS)
    assert (m.ids, m.context_tokens, m.context_field) == (("SmolLM2-135M-Instruct.Q4_1.gguf",), 2048, "meta.n_ctx")
    v = endpoints.models_page(VLLM_MODELS)
    assert (v.context_tokens, v.context_field) == (131072, "max_model_len")


@pytest.mark.parametrize(
    "reader, text, words",
    [
        ("slots", "", "empty body"),
        ("slots", '[{"id": 0, "n_ctx": 2048, "is_proc', "did not answer JSON"),
        ("slots", "<html>Welcome to nginx!</html>", "it starts with '<html>"),
        ("slots", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ("slots", '{"slots": []}', "not answer a list of slots (it sent a JSON dict)"),
        ("slots", '[{"id": 0, "n_ctx": "big", "is_processing": true}]', "entry 0 is not a slot"),
        ("slots", '[{"id": 0, "n_ctx": 1e300, "is_processing": true}]', "entry 0 is not a slot"),
        ("slots", '[{"id": 0, "n_ctx": 2048, "is_processing": 1}]', "is_processing not true/false"),
        ("slots", "[" + ",".join(['{"n_ctx": 1, "is_processing": false}'] * 5000) + "]", "more than 4,096 slots"),
        ("props", "[1, 2]", "not answer a JSON object"),
        ("models", '{"data": "all"}', "OpenAI model list"),
        ("models", '{"data": [{"name": "x"}]}', "no model with an id"),
    ],
)
def test_garbage_is_refused_in_words(reader, text, words):
    read = {"slots": endpoints.slots_page, "props": endpoints.props_page, "models": endpoints.models_page}[reader]
    with pytest.raises(Garbled) as e:
        read(endpoints.parse_json(text, "/" + reader))
    assert words in str(e.value)


def test_odd_numbers_are_dropped_not_shown():
    p = endpoints.props_page({"total_slots": float("nan"), "default_generation_settings": {"n_ctx": -4},
                              "model_path": 7, "build_info": True})  # fmt: skip
    assert p == endpoints.PropsPage(None, None, None, None)
    s = endpoints.slots_page([{"id": True, "n_ctx": 2048.0, "is_processing": False, "n_prompt_tokens": 2.5}])
    assert (s.slots[0].id, s.slots[0].n_ctx, s.slots[0].tokens_held) == (0, 2048, None)


def test_llamacpp_gains_slots_context_and_what_it_has_instead_of_kv_usage():
    before = llama_reading()
    assert before.kv_usage.value is None and before.models == [] and before.slots_total.note == "Not read yet."
    r = endpoints.apply(before, endpoints.models_page(MODELS), endpoints.slots_page(SLOTS),
                        endpoints.props_page(PROPS))  # fmt: skip
    assert r.served_models == ["SmolLM2-135M-Instruct.Q4_1.gguf"] and r.build == "b1234-abcdef0"
    assert (r.slots_total.value, r.slots_total.metric) == (2.0, "GET /props: total_slots")
    assert (r.slots_busy.value, r.slots_busy.metric) == (1.0, "GET /slots: is_processing")
    assert (r.context_tokens.value, r.context_tokens.metric) == (2048.0, "GET /v1/models: meta.n_ctx")
    assert "one slot's context" in r.context_tokens.note
    # llama.cpp's /metrics has no KV ratio: the slots' held tokens over their context stand in, and say so
    assert r.kv_usage.value == pytest.approx(512 / (2 * 2048))
    assert r.kv_usage.metric == "GET /slots: n_prompt_tokens / n_ctx" and "no KV-usage ratio" in r.kv_usage.note
    assert r.running == before.running and r.generation_tokens_per_s == before.generation_tokens_per_s


def test_missing_pages_say_why_and_other_engines_have_no_slots():
    why = {"slots": "GET /slots failed (refused): It answered HTTP 501 instead of the JSON of GET /slots."}
    r = endpoints.apply(llama_reading(), None, None, None, why)
    assert r.slots_busy.value is None and "HTTP 501" in r.slots_busy.note and "HTTP 501" in r.slots_total.note
    assert r.kv_usage.value is None and "/slots" in r.kv_usage.note  # the /metrics note stands
    assert r.context_tokens.note == "Not read yet."
    # /props alone still gives the slots and their context
    r = endpoints.apply(llama_reading(), None, None, endpoints.props_page(PROPS), why)
    assert (r.slots_total.value, r.context_tokens.metric) == (2.0, "GET /props: default_generation_settings.n_ctx")
    assert r.served_models == ["SmolLM2-135M-Instruct.Q4_1.gguf"]  # from model_path: /metrics names no model
    v = endpoints.apply(engines.read(parse('vllm:num_requests_running{model_name="m"} 1\n')),
                        endpoints.models_page(VLLM_MODELS))  # fmt: skip
    assert (v.context_tokens.value, v.context_tokens.metric) == (131072.0, "GET /v1/models: max_model_len")
    assert v.slots_total.value is None and "Only llama.cpp" in v.slots_total.note
    assert v.served_models == ["meta-llama/Llama-3.1-8B-Instruct"] and v.build is None
