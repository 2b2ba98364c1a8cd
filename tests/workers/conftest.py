"""Fixtures for the worker tests: a real Valkey, a fake GPU server, one key prefix per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fake_gpu import FakeGpu

from director.state import EmbeddedValkey, StateStore


@pytest.fixture(scope="session")
def valkey() -> Iterator[EmbeddedValkey]:
    with EmbeddedValkey() as server:
        yield server


@pytest.fixture
def store(valkey: EmbeddedValkey) -> Iterator[StateStore]:
    store = StateStore.from_url(valkey.url, prefix=f"test-{uuid.uuid4().hex[:12]}")
    yield store
    store.close()


@pytest.fixture
def fake_gpu() -> Iterator[FakeGpu]:
    server = FakeGpu().start()
    yield server
    server.stop()
