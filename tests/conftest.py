"""Shared fixtures: an in-process client for API tests and a live server on a loopback port."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time

import pytest
import uvicorn
from fastapi.testclient import TestClient

from inside_llm.app import create_app


def pytest_report_header(config):
    """Say which browser the browser tests drive: CI upgrades Debian's chromium, so the version shows."""
    chromium = os.environ.get("INSIDE_LLM_CHROMIUM", "/usr/bin/chromium")
    try:
        version = subprocess.run([chromium, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        version = f"not runnable ({exc})"
    return f"browser tests: {chromium}: {version or 'no version printed'}"


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
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=5)
