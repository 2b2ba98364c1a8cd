"""Fixtures for the worker tests: a fake GPU server (Valkey and the store: tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_gpu import FakeGpu


@pytest.fixture
def fake_gpu() -> Iterator[FakeGpu]:
    server = FakeGpu().start()
    yield server
    server.stop()
