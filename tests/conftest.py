"""Shared fixtures: an in-process client for API tests."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from inside_llm.app import create_app


@pytest.fixture(scope="session")
def app():
    return create_app()


@pytest.fixture(scope="session")
def client(app):
    with TestClient(app) as c:
        yield c
