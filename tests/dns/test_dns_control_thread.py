"""A DNS worker's control plane on threads of their own (``control_thread``), against a
real Valkey. The stored-policy follower (``policy_follower_thread``) loads each new version
through the gate and hands it to the worker's event loop, whose thread swaps it in; a
broken version is refused and the last good one stays; an unreachable store leaves the
worker serving and lets it stop. The state refresher keeps ``current`` fresh from there.
A context that cannot be entered is a clear error."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from director import policy_gate
from director.dns import control_thread
from director.dns.control_thread import ControlThread
from director.dns.policy_thread import policy_follower_thread
from director.refresh.refresher import SnapshotRefresher
from policies import read_sources
from policies.model import Policy
from state import EmbeddedValkey, StateStore
from state.aio import AsyncStateStore

CHAT_TTL = "    ttl 5s  #"


async def _next(policies: asyncio.Queue, timeout: float = 10.0) -> tuple[int, Policy]:
    return await asyncio.wait_for(policies.get(), timeout)


def test_new_versions_reach_the_loop_thread_and_a_broken_one_is_refused(
        example_policy_path) -> None:
    sources = read_sources(str(example_policy_path))
    assert CHAT_TTL in sources.text

    async def follow(url: str, store: StateStore) -> None:
        loop = asyncio.get_running_loop()
        policies: asyncio.Queue = asyncio.Queue()

        def on_policy(policy: Policy) -> None:
            policies.put_nowait((threading.get_ident(), policy))

        control = policy_follower_thread(url, on_policy, loop, load=policy_gate.load_record)
        async with control:
            thread, first = await _next(policies)
            assert thread == threading.get_ident() != control.thread.ident
            assert first.service("chat.infer.example.com").ttl == 5
            await asyncio.to_thread(store.set_policy, "zone {", name=sources.name,
                                    files=sources.files)
            edited = sources.text.replace(CHAT_TTL, "    ttl 17s  #")
            await asyncio.sleep(0.5)  # the broken version is seen and refused first
            assert policies.empty()
            await asyncio.to_thread(store.set_policy, edited, name=sources.name,
                                    files=sources.files)
            thread, second = await _next(policies)
            assert thread == threading.get_ident()
            assert second.service("chat.infer.example.com").ttl == 17
        assert not control.thread.is_alive()

    with EmbeddedValkey() as valkey:
        store = StateStore.from_url(valkey.url)
        try:
            store.set_policy(sources.text, name=sources.name, files=sources.files)
            asyncio.run(follow(valkey.url, store))
        finally:
            store.close()


def test_an_unreachable_store_hands_over_nothing_and_stops() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    handed: list[Policy] = []

    async def follow() -> None:
        control = policy_follower_thread(f"redis://127.0.0.1:{port}/0", handed.append,
                                         asyncio.get_running_loop(),
                                         load=policy_gate.load_record)
        async with control:
            await asyncio.sleep(1.5)  # the first look and its reconnect attempts fail
        assert not control.thread.is_alive()

    asyncio.run(follow())
    assert handed == []


def test_the_refresher_on_its_thread_keeps_the_snapshot_current(example_policy) -> None:
    """A probe result written to the store reaches ``current``, read on the serving thread,
    while the refresher's tasks run on the control thread; a new policy reaches the
    refresher through ``call``."""

    async def follow(url: str, store: StateStore) -> None:
        refresher = SnapshotRefresher(AsyncStateStore.from_url(url), example_policy)
        control = ControlThread("state-refresher", lambda: refresher)
        async with control as source:
            assert source is refresher
            await asyncio.to_thread(store.record_probe, "eu-west", None, ok=False, rise=1,
                                    fall=1)
            deadline = time.monotonic() + 10
            while source.current.region("eu-west").healthy:
                assert time.monotonic() < deadline, "the probe result never arrived"
                await asyncio.sleep(0.01)
            control.call(refresher.set_policy, example_policy)
        assert not control.thread.is_alive()

    with EmbeddedValkey() as valkey:
        store = StateStore.from_url(valkey.url)
        try:
            asyncio.run(follow(valkey.url, store))
        finally:
            store.close()


def test_a_context_that_fails_to_enter_is_a_clear_error() -> None:
    class Broken:
        async def __aenter__(self) -> None:
            raise OSError("no such store")

        async def __aexit__(self, *exc: object) -> None:
            return None

    async def enter() -> None:
        with pytest.raises(RuntimeError, match="broken: did not start"):
            async with ControlThread("broken", Broken):
                pass

    asyncio.run(enter())


def test_a_context_still_entering_at_the_timeout_is_left_once_entered(monkeypatch) -> None:
    monkeypatch.setattr(control_thread, "START_TIMEOUT", 0.2)
    left = threading.Event()

    class Slow:
        async def __aenter__(self) -> str:
            await asyncio.sleep(0.5)  # a store slow to answer the first read
            return "entered"

        async def __aexit__(self, *exc: object) -> None:
            left.set()

    async def enter() -> ControlThread:
        control = ControlThread("slow", Slow)
        with pytest.raises(RuntimeError, match="slow: did not start"):
            async with control:
                pass
        return control

    control = asyncio.run(enter())
    assert left.is_set() and not control.thread.is_alive()
