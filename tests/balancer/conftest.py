"""Fixtures for the balancer tests: a real Valkey on loopback, one key prefix per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from director.state import EmbeddedValkey


@pytest.fixture(scope="session")
def valkey() -> Iterator[EmbeddedValkey]:
    with EmbeddedValkey() as server:
        yield server


@pytest.fixture
def prefix() -> str:
    """A key prefix of its own for each test, so tests share one server safely."""
    return f"test-{uuid.uuid4().hex[:12]}"
