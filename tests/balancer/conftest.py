# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the balancer tests: ``async def`` tests run on a fresh event loop each."""

from __future__ import annotations

import asyncio
import inspect

import pytest

ASYNC_TEST_TIMEOUT_S = 30.0


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run coroutine tests with ``asyncio.run`` and a hard timeout (no plugin needed)."""
    func = pyfuncitem.obj
    if not inspect.iscoroutinefunction(func):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}

    async def run() -> None:
        async with asyncio.timeout(ASYNC_TEST_TIMEOUT_S):
            await func(**kwargs)

    asyncio.run(run())
    return True
