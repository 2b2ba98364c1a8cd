"""The stored policy is followed: a new version swaps in, a broken one never does."""

from __future__ import annotations

import asyncio
from pathlib import Path

from director import policy_gate
from policies import load_policy, load_policy_text, read_sources
from state import AsyncStateStore, EmbeddedValkey, StateStore
from state.policy_follower import PolicyFollower

EXAMPLE = Path(__file__).resolve().parents[2] / "policies" / "examples" / "global.dp"


def test_new_versions_swap_in_and_broken_ones_are_rejected(
    valkey: EmbeddedValkey, store: StateStore
) -> None:
    sources = read_sources(str(EXAMPLE))
    seen: list[tuple[int, str]] = []

    def swap(policy, version: int) -> None:
        seen.append((version, policy.region("eu-central").endpoints_v4[0]))

    async def scenario() -> None:
        aio = AsyncStateStore.from_url(valkey.url, prefix=store.keys.prefix)
        follower = PolicyFollower(aio, swap, load=policy_gate.load_record, interval=0.05)
        assert await follower.check() is None  # nothing stored yet

        store.set_policy(sources.text, name=sources.name, files=sources.files)
        assert await follower.check() == 1
        assert seen == [(1, "127.0.3.1")]
        assert await follower.check() is None  # same version: no reload

        text = sources.text.replace("endpoints 127.0.3.1", "endpoints 127.0.3.9")
        store.set_policy("region {", name=sources.name, files=sources.files)  # version 2: broken
        assert await follower.check() is None
        assert follower.rejected == 2 and follower.version == 1
        store.set_policy(text, name=sources.name, files=sources.files)
        async with follower:
            for _ in range(100):
                if follower.version == 3:
                    break
                await asyncio.sleep(0.02)
        assert seen == [(1, "127.0.3.1"), (3, "127.0.3.9")]
        await aio.close()

    asyncio.run(scenario())


def test_a_published_policy_is_followed_without_waiting_for_the_poll(
    valkey: EmbeddedValkey, store: StateStore
) -> None:
    """The poll is an hour apart here: only the change channel can bring version 2."""
    sources = read_sources(str(EXAMPLE))
    seen: list[int] = []

    async def scenario() -> None:
        aio = AsyncStateStore.from_url(valkey.url, prefix=store.keys.prefix)
        store.set_policy(sources.text, name=sources.name, files=sources.files)
        follower = PolicyFollower(aio, lambda _p, version: seen.append(version),
                                  load=policy_gate.load_record, interval=3600)
        async with follower:
            for _ in range(250):  # the first check and the subscription
                if seen == [1]:
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)  # subscribed by now (it checks again once it is)
            store.set_policy(sources.text.replace("ttl 30s", "ttl 31s", 1), name=sources.name,
                             files=sources.files)
            for _ in range(250):
                if seen == [1, 2]:
                    break
                await asyncio.sleep(0.02)
        assert seen == [1, 2]
        await aio.close()

    asyncio.run(scenario())


def test_stored_sources_load_like_the_file() -> None:
    sources = read_sources(str(EXAMPLE))
    assert sources.name == "global.dp"
    assert set(sources.files) == {f"regions/{r}.dp" for r in
                                  ("us-east", "eu-west", "eu-central", "ap-south")}
    assert load_policy_text(sources.text, sources.name, sources.files) == load_policy(str(EXAMPLE))
