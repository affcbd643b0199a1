"""The parsers against pages recorded from a real llama.cpp `llama-server` (tests/fixtures/attach/llamacpp/, its
version and the exact commands in README.md and recorded.json): our SmolLM2 GGUF on 4 slots, idle and while 8
streamed chats shared them. Detection says llama.cpp; running and waiting come from requests_processing and
requests_deferred; tokens/s is the counter's increase over the wall time between two scrapes, not llama.cpp's
predicted_tokens_seconds (one slot's speed); /slots and /props add the slots, their context and what stands in for a
KV-usage ratio; and `measure` reads its streamed completion (raw SSE bytes as served)."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hostile import hostile_server

from inside_llm.attach import endpoints, engines, measure
from inside_llm.attach.exposition import parse
from inside_llm.attach.targets import parse_target

PAGES = Path(__file__).resolve().parent.parent / "fixtures" / "attach" / "llamacpp"
META = json.loads((PAGES / "recorded.json").read_text(encoding="utf-8"))


def text(name: str) -> str:
    return (PAGES / name).read_text(encoding="utf-8")


def value(page: str, name: str) -> float:
    """A sample's value read straight off the page's text (no parser), to hold the parser's reading against."""
    return next(float(ln.split()[-1]) for ln in page.splitlines() if ln.startswith(name + " "))


def page_json(name: str):
    return endpoints.parse_json(text(name), "/" + name)


def test_recorded_pages_read_as_llamacpp():
    for name in ("metrics_idle.txt", "metrics_busy_1.txt", "metrics_busy_2.txt", "metrics_after.txt"):
        assert engines.detect(parse(text(name))) is engines.LLAMACPP, name
    idle = engines.read(parse(text("metrics_idle.txt")))
    assert (idle.running.value, idle.waiting.value) == (0.0, 0.0)
    assert idle.models == []  # llama-server's series carry no labels: the model comes from /v1/models


def test_busy_pages_running_waiting_and_tokens_per_s_over_wall_time():
    one, two = text("metrics_busy_1.txt"), text("metrics_busy_2.txt")
    dt = META["load"]["busy_dt_s"]
    r = engines.read(parse(two), parse(one), dt)
    assert (r.running.value, r.running.metric) == (4.0, "llamacpp:requests_processing")  # all 4 slots
    assert r.waiting.metric == "llamacpp:requests_deferred"
    assert r.waiting.value == value(two, "llamacpp:requests_deferred") >= 1  # 8 chats, 4 slots: some waited
    made = value(two, "llamacpp:tokens_predicted_total") - value(one, "llamacpp:tokens_predicted_total")
    assert made > 0 and r.generation_tokens_per_s.value == pytest.approx(made / dt)
    # llama.cpp's own gauge is a slot's speed: with 4 slots busy the server writes more than one slot does
    slot_speed = value(two, "llamacpp:predicted_tokens_seconds")
    assert r.generation_tokens_per_s.value != pytest.approx(slot_speed, rel=0.05)
    assert "one slot's speed" in r.generation_tokens_per_s.note
    assert r.kv_usage.value is None and "/slots" in r.kv_usage.note  # no KV ratio on the page
    assert r.ttft_p50_s.value is None and "no latency histograms" in r.ttft_p50_s.note
    assert r.prefix_cache_hit_rate.value is None and "prompt_tokens_cached_total" in r.prefix_cache_hit_rate.note


def test_slots_props_and_models_add_what_metrics_lacks():
    slots = endpoints.slots_page(page_json("slots_busy.json"))
    props = endpoints.props_page(page_json("props.json"))
    models = endpoints.models_page(page_json("v1_models.json"))
    raw_slots = page_json("slots_busy.json")
    assert len(slots.slots) == props.total_slots == 4
    assert all(s.busy for s in slots.slots) and {s.n_ctx for s in slots.slots} == {props.n_ctx}
    assert props.n_ctx == 2048 // 4  # -c 2048 over -np 4
    assert isinstance(raw_slots[0]["next_token"], list)  # current builds: a list of one object (README: an object)
    assert all(s.decoded is not None and s.tokens_held for s in slots.slots)
    assert models.ids == (props.model,) == ("SmolLM2-135M-Instruct.Q4_1.gguf",)
    assert models.context_tokens == props.n_ctx and models.context_field == "meta.n_ctx"
    r = endpoints.apply(engines.read(parse(text("metrics_busy_1.txt"))), models, slots, props)
    assert (r.slots_total.value, r.slots_busy.value, r.context_tokens.value) == (4.0, 4.0, 512.0)
    assert r.slots_busy.value == r.running.value  # /slots and /metrics recorded a moment apart, both busy
    held = sum(min(s["n_prompt_tokens"], s["n_ctx"]) for s in raw_slots)
    assert r.kv_usage.value == pytest.approx(held / (4 * 512)) and 0 < r.kv_usage.value <= 1
    assert r.build == props.build_info and r.served_models == ["SmolLM2-135M-Instruct.Q4_1.gguf"]
    idle = endpoints.slots_page(page_json("slots_idle.json"))
    assert not any(s.busy for s in idle.slots) and all(s.tokens_held is None for s in idle.slots)  # never used yet


def test_the_recorded_stream_and_measure_reads_it():
    """The raw SSE as llama-server streamed it: a role chunk, content chunks, a finish_reason, then a chunk with no
    choices carrying usage and llama.cpp's timings, then [DONE]. measure, pointed at a loopback server replaying
    those bytes, counts the tokens the server's usage says."""
    raw = (PAGES / "chat_stream.sse").read_bytes()
    events = [ln[5:].strip() for ln in raw.decode().splitlines() if ln.startswith("data:")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"].get("role") == "assistant"
    last = chunks[-1]
    assert last["choices"] == [] and last["usage"]["completion_tokens"] >= 1 and "timings" in last
    usage = last["usage"]
    with hostile_server() as h:
        h.posts["/llama-ok/v1/chat/completions"] = raw

        async def go():
            return await measure.run_load(parse_target(f"ll={h.url}/llama-ok"), requests=2, concurrency=1,
                                          prompt_tokens=4, output_tokens=8, time_cap_s=120)  # fmt: skip

        with ThreadPoolExecutor(1) as pool:
            run = pool.submit(asyncio.run, go()).result(timeout=300)
    assert run.model == "SmolLM2-135M-Instruct.Q4_1.gguf"  # from the recorded /v1/models
    assert [(r.ok, r.output_tokens, r.prompt_tokens) for r in run.results] == [
        (True, usage["completion_tokens"], usage["prompt_tokens"])
    ] * 2
