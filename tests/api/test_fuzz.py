"""Fuzz every operation from the app's own OpenAPI schema with schemathesis (in-process ASGI).

Valid and invalid inputs alike: no 500s, the status code and content type are declared, every JSON response
fits its declared schema, invalid input is refused with a 4xx, and no response takes TIMEOUT_S or more (issue
23: 0 server errors, 0 network errors, 0 timeouts over 10 s). Every operation in /openapi.json is fuzzed (a test
checks that none is skipped). Bounded and reproducible for CI (derandomized, MAX_EXAMPLES per operation and
generation mode, each case under TIMEOUT_S). Streams (text/event-stream) are read with a deadline and only
checked for status: their bodies are events, not one JSON document. Demo chats a case starts are cancelled
after it, so they never slow the cases that follow. KNOWN_SLOW lists the operations whose time is not held to
TIMEOUT_S yet, and why (everything else about them is checked).

Checks left out, and why:
- positive_data_acceptance: some limits join two fields (tp x pp must divide gpus, prompt + output <= the
  model's context, micro_batches <= batch); such inputs fit the schema yet get a 422 that names the fields.
- allow_header_conformance, unsupported_method: GET and POST /api/tokens are two routes on one path, and
  Starlette's 405 for OPTIONS lists only the first route's method.
"""

from __future__ import annotations

import json
import os
import time

import schemathesis
from asgi_stream import read_then_leave
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi import checks as openapi_checks

from inside_llm.api import engine as engine_api
from inside_llm.app import create_app

MAX_EXAMPLES = 20
STOP_SECONDS = 5.0  # after a client disconnects, a stream must end within this
TIMEOUT_S = 10.0  # a response that takes this long (on a core of its own: see _time_budget) counts as a timeout
# Operations still over TIMEOUT_S, checked for everything but time until the change that bounds them lands.
# None now: /api/speculative/measured took 11-12 s on an idle core (issue 23, H2); bounded to ~3 s of CPU per new
# prompt (the real model writes at most 16 tokens, one round, one shared prefill: sim/decoding/speculative_demo.py).
KNOWN_SLOW: set[str] = set()

APP = create_app()
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
schema.config.generation.update(modes=["positive", "negative"], max_examples=MAX_EXAMPLES, deterministic=True)
# A URL longer than the server reads (a GET whose text is over its length) is refused with a documented 414, and a
# body over the server's cap (web/middleware.py: 1,000,000 bytes; a generated text over its length can be) with 413.
_rejection = schema.config.checks.negative_data_rejection
_rejection.expected_statuses = [*_rejection.expected_statuses, "413", "414"]
EXCLUDED = [
    openapi_checks.positive_data_acceptance,
    openapi_checks.allow_header_conformance,
    openapi_checks.unsupported_method,
]


def _is_stream(case) -> bool:
    content = case.operation.definition.raw.get("responses", {}).get("200", {}).get("content", {})
    return "text/event-stream" in content


def test_every_operation_is_fuzzed():
    spec = APP.openapi()
    declared = {(path, method.upper()) for path, ops in spec["paths"].items() for method in ops}
    fuzzed = {(op.ok().path, op.ok().method.upper()) for op in schema.get_all_operations()}
    assert declared == fuzzed, declared ^ fuzzed
    assert len(declared) >= 40


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_holds_under_generated_input(case):
    t0 = time.perf_counter()
    try:
        if _is_stream(case):
            # read the first event, disconnect: the app must stop within STOP_SECONDS
            status, body, _ = read_then_leave(APP, case.formatted_path, case.query, stop_within_s=STOP_SECONDS)
            assert status < 500, (case.query, status, body[:300])
            if status != 200:
                assert json.loads(body)["detail"], body[:300]
        else:
            # schemathesis' own 10 s read timeout is not stretched by the machine's load: the time is held
            # below by _time_budget instead, which says which case took how long
            case.call_and_validate(excluded_checks=EXCLUDED, timeout=300)
    finally:
        if case.operation.path == "/api/engine/demo":
            _cancel_demo()
    if case.operation.path in KNOWN_SLOW:
        return
    took, budget = time.perf_counter() - t0, _time_budget()
    assert took < budget, (
        f"{case.operation.method.upper()} {case.formatted_path} took {took:.1f} s (limit {budget:.0f})"
    )


def _time_budget() -> float:
    """TIMEOUT_S on a machine with a core to spare, stretched by how many runnable tasks share each core now
    (a hang detector, not a speed test: on a shared 2-core machine at load 28 each task gets 1/14 of a core)."""
    return TIMEOUT_S * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def _cancel_demo() -> None:
    from inside_llm.api.demo_model import served_model
    from inside_llm.engine import engine_for

    engine_for(served_model("smollm2").model).cancel_client(engine_api.DEMO_CLIENT)
