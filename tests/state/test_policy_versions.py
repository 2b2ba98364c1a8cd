"""Policy versions never go back: the store checks a writer's expected version in the same
step as the write, names an epoch per record, and a follower refuses what a store that lost
its data holds (a lower version, or another policy under the number it serves).

The reset is real: a Valkey of the test's own (``own_valkey``), FLUSHALLed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from director import policy_gate
from policies import read_sources
from state import AsyncStateStore, EmbeddedValkey, StateStore
from state.errors import PolicyVersionMismatch
from state.policy_follower import PolicyFollower
from state.policy_identity import Order, PolicyIdentity, compare, policy_digest

EXAMPLE = Path(__file__).resolve().parents[2] / "policies" / "examples" / "global.dp"


def test_the_digest_names_the_sources_not_where_they_live() -> None:
    one = policy_digest("/etc/director/global.dp", "include r.dp", {"/etc/director/r.dp": "x"})
    two = policy_digest("/srv/p/global.dp", "include r.dp", {"/srv/p/r.dp": "x"})
    assert one == two
    assert one != policy_digest("/srv/p/global.dp", "include r.dp", {"/srv/p/r.dp": "y"})
    assert one != policy_digest("/srv/p/global.dp", "include r.dp ", {"/srv/p/r.dp": "x"})


def test_the_rule_a_follower_moves_only_forward() -> None:
    served = PolicyIdentity(7, "a" * 64, "epoch-a")
    assert compare(served, 8, "b" * 64) is Order.NEWER
    assert compare(served, 7, "a" * 64) is Order.SAME
    assert compare(served, 7, None) is Order.SAME  # digest not read yet
    assert compare(served, 3, "c" * 64) is Order.OLDER
    assert compare(served, 7, "c" * 64) is Order.CONFLICT
    assert compare(PolicyIdentity(None, "f" * 64), 1, "c" * 64) is Order.NEWER  # a file
    assert compare(None, 1, None) is Order.NEWER


def test_a_write_expecting_another_version_is_refused_and_changes_nothing(
    store: StateStore,
) -> None:
    version, epoch = store.write_policy("zone a {}", expect=0)  # none stored: expected
    assert version == 1 and epoch
    with pytest.raises(PolicyVersionMismatch) as caught:
        store.write_policy("zone b {}", expect=0)
    assert (caught.value.version, caught.value.expected) == (1, 0)
    record = store.policy()
    assert record is not None and (record.text, record.version) == ("zone a {}", 1)
    assert caught.value.digest == record.digest

    assert store.write_policy("zone b {}", expect=1, expect_digest=record.digest[:16]) \
        == (2, epoch)
    with pytest.raises(PolicyVersionMismatch):  # the right number, another policy's digest
        store.write_policy("zone c {}", expect=2, expect_digest=record.digest[:16])
    with pytest.raises(PolicyVersionMismatch):
        store.write_policy("zone c {}", expect=1)
    stored = store.policy()
    assert stored is not None and (stored.text, stored.version, stored.epoch) \
        == ("zone b {}", 2, epoch)


def test_a_writer_numbers_above_what_it_knows_and_a_reset_store_starts_a_new_epoch(
    own_valkey: EmbeddedValkey,
) -> None:
    store = StateStore.from_url(own_valkey.url, prefix="p")
    try:
        assert store.write_policy("zone a {}", at_least=7)[0] == 7
        version, epoch_a = store.write_policy("zone b {}", at_least=3)
        assert version == 8  # at_least never lowers the next number
        store.client.flushall()
        version, epoch_b = store.write_policy("zone b {}", at_least=8)
        assert version == 8 and epoch_b != epoch_a
        record = store.policy()
        assert record is not None and record.identity == PolicyIdentity(
            8, policy_digest("policy.dp", "zone b {}", {}), epoch_b)
    finally:
        store.close()


def test_a_follower_never_takes_what_a_flushed_store_numbers_again(
    own_valkey: EmbeddedValkey,
) -> None:
    """A follower serving version 7 of epoch A: after FLUSHALL a writer without history
    stores "version 1" and "version 7" of other sources (epoch B); the follower refuses
    both, counted and logged once each, and takes version 8, which a writer that knows the
    fleet's history stores above them."""
    sources = read_sources(str(EXAMPLE))
    ours = sources.text
    other = ours.replace("ttl 30s", "ttl 31s", 1)
    seen: list[int] = []

    async def scenario() -> None:
        store = StateStore.from_url(own_valkey.url, prefix="p")
        aio = AsyncStateStore.from_url(own_valkey.url, prefix="p")
        follower = PolicyFollower(aio, lambda _p, version: seen.append(version),
                                  load=policy_gate.load_record, interval=3600)
        try:
            _, epoch_a = store.write_policy(ours, name=sources.name, files=sources.files,
                                            at_least=7)
            assert await follower.check() == 7
            served = follower.served
            assert served is not None and (served.version, served.epoch) == (7, epoch_a)

            store.client.flushall()
            _, epoch_b = store.write_policy(other, name=sources.name, files=sources.files)
            assert epoch_b != epoch_a
            assert await follower.check() is None  # version 1 < 7: older
            assert await follower.check() is None
            assert follower.refused == 1 and follower.version == 7

            for _ in range(6):  # numbered up to 7, with other sources: a conflict
                store.write_policy(other, name=sources.name, files=sources.files)
            assert await follower.check() is None
            assert follower.refused == 2 and follower.served == served

            store.write_policy(other, name=sources.name, files=sources.files, at_least=8)
            assert await follower.check() == 8
            assert seen == [7, 8]
            assert follower.served is not None and follower.served.epoch == epoch_b
        finally:
            await aio.close()
            store.close()

    asyncio.run(scenario())


def test_the_same_policy_stored_again_after_a_reset_is_no_change(
    own_valkey: EmbeddedValkey,
) -> None:
    """What the admin API stores after a reset: its own version, same number, same sources,
    a new epoch. A follower serving it loads nothing again."""
    sources = read_sources(str(EXAMPLE))
    seen: list[int] = []

    async def scenario() -> None:
        store = StateStore.from_url(own_valkey.url, prefix="p")
        aio = AsyncStateStore.from_url(own_valkey.url, prefix="p")
        follower = PolicyFollower(aio, lambda _p, version: seen.append(version),
                                  load=policy_gate.load_record, interval=3600)
        try:
            store.write_policy(sources.text, name=sources.name, files=sources.files,
                               at_least=7)
            assert await follower.check() == 7
            store.client.flushall()
            store.write_policy(sources.text, name=sources.name, files=sources.files,
                               at_least=7)
            assert await follower.check() is None
            assert seen == [7] and follower.refused == 0
        finally:
            await aio.close()
            store.close()

    asyncio.run(scenario())
