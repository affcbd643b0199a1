"""Shared fixtures: an in-process client for API tests and a live server on a loopback port."""

from __future__ import annotations

import socket
import subprocess

import pytest
from fastapi.testclient import TestClient

from inside_llm.app import create_app
from inside_llm.headless import CHROMIUM


def pytest_report_header(config):
    """Say which browser the browser tests drive: CI upgrades Debian's chromium, so the version shows."""
    try:
        version = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        version = f"not runnable ({exc})"
    return f"browser tests: {CHROMIUM}: {version or 'no version printed'}"


@pytest.fixture(scope="session")
def app():
    return create_app()


@pytest.fixture(scope="session")
def client(app):
    with TestClient(app) as c:
        yield c


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def base_url():
    from livekit import serve_in_thread

    with serve_in_thread(create_app(), start_s=10) as url:
        yield url


# ---- the real model (SmolLM2-135M-Instruct): present (fetched by `make setup`) and absent ----


@pytest.fixture(scope="session")
def smollm():
    """The served real model. `make test` fetches it first (`inside-llm fetch-model`); a bare `pytest`
    on a machine without it skips these tests with that instruction instead of downloading in a test."""
    from inside_llm import modelfile

    m = modelfile.served_smollm()
    if m is None:
        pytest.skip(f"SmolLM2 model file absent: {modelfile.HOW_TO_FETCH}")
    return m


@pytest.fixture
def no_model(tmp_path, monkeypatch):
    """The server as on a machine that never fetched the model: INSIDE_LLM_CACHE is an empty folder."""
    from inside_llm import modelfile

    monkeypatch.setenv("INSIDE_LLM_CACHE", str(tmp_path / "empty-cache"))
    modelfile.forget_served()
    yield tmp_path / "empty-cache"
    monkeypatch.undo()
    modelfile.forget_served()


@pytest.fixture(scope="session")
def target_greedy():
    """target_greedy(prompt, n): the speculative demo's target alone, one cached forward pass per token,
    argmax each time: the reference a draft-and-verify run must equal (independent of sim/decoding/speculative.py)."""
    import numpy as np

    from inside_llm.sim.decoding import speculative_demo as demo
    from inside_llm.sim.model.transformer import KVCache

    def run(prompt: str, n: int) -> list[int]:
        target, _ = demo.demo_pair()
        cache, out = KVCache(target.config), []
        logits = target.forward(target.encode(prompt), cache).logits[-1]
        for _ in range(n):
            out.append(int(np.argmax(logits)))
            logits = target.forward(out[-1:], cache).logits[-1]
        return out

    return run
