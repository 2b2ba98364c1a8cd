"""The DNS worker's stored-policy follower on its own thread (``PolicyFollowerThread``),
against a real Valkey: each new version is loaded through the gate there and handed to
the worker's event loop, whose thread swaps it in; a broken version is refused and the last
good one stays; an unreachable store leaves the worker serving and lets it stop."""

from __future__ import annotations

import asyncio
import socket
import threading

from director import policy_gate
from director.dns.policy_thread import PolicyFollowerThread
from policies import read_sources
from policies.model import Policy
from state import EmbeddedValkey, StateStore

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

        async with PolicyFollowerThread(url, on_policy, loop,
                                        load=policy_gate.load_record) as follower:
            thread, first = await _next(policies)
            assert thread == threading.get_ident() != follower._thread.ident
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
        assert not follower._thread.is_alive()

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
        follower = PolicyFollowerThread(f"redis://127.0.0.1:{port}/0", handed.append,
                                        asyncio.get_running_loop(),
                                        load=policy_gate.load_record)
        async with follower:
            await asyncio.sleep(1.5)  # the first look and its reconnect attempts fail
        assert not follower._thread.is_alive()

    asyncio.run(follow())
    assert handed == []
