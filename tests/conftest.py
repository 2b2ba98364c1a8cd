"""Fixtures shared by every test package: example policies, GeoIP databases, and one real
Valkey server for the whole session (each test gets a key prefix, and a state store on it)."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

from director.datasets import maxmind_test_db
from state import EmbeddedValkey, StateStore

ASYNC_TEST_TIMEOUT_S = 30.0

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "policies" / "examples"
MAXMIND_TEST_CITY = maxmind_test_db("GeoIP2-City-Test")

# Hypothesis's explain phase traces every line while it re-runs a failing example; on a large
# strategy that took past the 300 s test timeout and hid the example behind a timeout.
# No deadline and no too-slow health check: these tests are about what is computed, and a
# slow or loaded machine must not fail them (speed is measured in bench/).
settings.register_profile("director", phases=[p for p in Phase if p is not Phase.explain],
                          print_blob=True, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("director")


@pytest.fixture(scope="session")
def valkey() -> Iterator[EmbeddedValkey]:
    """A real Valkey on loopback, shared by the session."""
    with EmbeddedValkey() as server:
        yield server


@pytest.fixture
def own_valkey() -> Iterator[EmbeddedValkey]:
    """A real Valkey of the test's own, for a test that must FLUSHALL or stop it."""
    with EmbeddedValkey() as server:
        yield server


@pytest.fixture
def prefix() -> str:
    """A key prefix of its own for each test, so tests share one server safely."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store(valkey: EmbeddedValkey, prefix: str) -> Iterator[StateStore]:
    """The shared state on the session's Valkey, under this test's prefix."""
    store = StateStore.from_url(valkey.url, prefix=prefix)
    yield store
    store.close()


@pytest.fixture(scope="session")
def example_policy_path() -> Path:
    return EXAMPLES / "global.dp"


@pytest.fixture(scope="session")
def example_policy(example_policy_path):
    from policies import load_policy

    return load_policy(str(example_policy_path))


@pytest.fixture(scope="session")
def maxmind_test_city() -> Path:
    if not MAXMIND_TEST_CITY.exists():
        pytest.fail(f"vendored test data missing: {MAXMIND_TEST_CITY} (see data/README.md)")
    return MAXMIND_TEST_CITY


@pytest.fixture(scope="session")
def geolite2():
    from director.geo import GeoLocator

    return GeoLocator()


@pytest.fixture(scope="session")
def maxmind_test_locator(maxmind_test_city):
    from director.geo import GeoLocator

    return GeoLocator(str(maxmind_test_city))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``long`` first, each file's tests kept together and in order: under
    xdist's ``--dist loadfile`` (``./run test``) they then run beside the short ones rather
    than last and alone."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In CI (``DIRECTOR_REQUIRE_SERVERS=1``, set by .ci/run) a skipped test is a failure:
    a missing server or tool must never pass silently."""
    import os

    outcome = yield
    report = outcome.get_result()
    if os.environ.get("DIRECTOR_REQUIRE_SERVERS") == "1" and report.skipped \
            and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, which requires every test to run: {report.longrepr}"


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run ``async def`` tests with ``asyncio.run`` on a fresh loop and a hard timeout."""
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
