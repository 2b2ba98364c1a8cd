"""A balancer started while the shared state is unreachable: with the key table it saved
earlier (ids and digests, mode 0600) it serves valid keys; without one it answers 503
``state_unavailable`` with Retry-After, never 401, until the state is back and the table
loads. Real balancers, a real Valkey stopped and started again."""

from __future__ import annotations

import dataclasses
import json
import stat
from pathlib import Path

import aiohttp
import pytest

from policies.model import Identity, Policy, Tenant
from regions.balancer import SharedStateConfig
from state import AsyncStateStore, EmbeddedValkey
from state.errors import StateError
from tenants.api_keys import KeysUnknown, KeyTable, new_key, store_key
from tenants.key_table_file import KEY_TABLE_FILE, KeyTableFileError, load_table
from tests.balancer.helpers import completion, stack
from tests.run_clock import eventually

BAD_KEY = "dk_0123456789ab_" + "x" * 43


def keyed_policy(base: Policy) -> Policy:
    return dataclasses.replace(base, identity=Identity(api_keys=True),
                               tenants=(Tenant("acme"),))


async def post(client: aiohttp.ClientSession, token: str) -> tuple[int, dict, dict[str, str]]:
    async with client.post("/v1/completions", json=completion(3),
                           headers={"Authorization": f"Bearer {token}"}) as resp:
        body = await resp.read()
        data = json.loads(body) if resp.content_type == "application/json" else {}
        return resp.status, data, dict(resp.headers)


async def add_key(url: str, prefix: str, made) -> None:
    admin = AsyncStateStore.from_url(url, prefix=prefix)
    await store_key(admin, made.stored)
    await admin.close()


async def test_a_balancer_started_during_an_outage_serves_the_saved_table(
        example_policy: Policy, prefix: str, tmp_path: Path) -> None:
    policy = keyed_policy(example_policy)
    made = new_key("acme")
    saved = tmp_path / "balancer" / KEY_TABLE_FILE
    server = EmbeddedValkey().start()
    try:
        await add_key(server.url, prefix, made)
        shared = SharedStateConfig(server.url, prefix=prefix, key_table_file=saved)
        async with stack(shared_state=shared, policy=policy) as (_, _, client):
            assert (await post(client, made.token))[0] == 200
        # what the file holds: ids and digests, never a key, readable by its owner only
        assert stat.S_IMODE(saved.stat().st_mode) == 0o600
        text = saved.read_text()
        assert made.stored.key_id in text and made.stored.digest in text
        assert made.token not in text and made.token.rsplit("_", 1)[1] not in text
        server.stop()

        async with stack(shared_state=shared, policy=policy) as (_, balancer, client):
            assert balancer.link is not None and balancer.link.reachable is not True
            status, _, _ = await post(client, made.token)
            assert status == 200
            assert (await post(client, BAD_KEY))[0] == 401  # a table is known: refused

        without = dataclasses.replace(shared, key_table_file=tmp_path / "none" / "keys.json")
        async with stack(shared_state=without, policy=policy) as (_, balancer, client):
            status, body, headers = await post(client, made.token)
            assert status == 503, body
            assert body["error"]["code"] == "state_unavailable"
            assert int(headers["Retry-After"]) > 0
            assert "WWW-Authenticate" not in headers
            assert (await post(client, BAD_KEY))[0] == 503  # nor is this one known bad
            assert balancer.metrics.auth_refused.labels("state_unavailable")._value.get() == 2

            server.start()  # the same address and password, empty: the key is stored again
            await add_key(server.url, prefix, made)
            assert balancer.tenancy.keys is not None
            await eventually(lambda: balancer.tenancy.keys.loaded, timeout=15)
            assert (await post(client, made.token))[0] == 200
            assert (await post(client, BAD_KEY))[0] == 401
    finally:
        server.stop()


async def test_the_table_is_saved_when_it_changes_and_a_bad_file_is_not_served(
        valkey: EmbeddedValkey, prefix: str, tmp_path: Path) -> None:
    path = tmp_path / KEY_TABLE_FILE
    store = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    first, second = new_key("acme"), new_key("acme")
    await store_key(store, first.stored)
    table = KeyTable(store, refresh_s=30, file=path)
    assert await table.refresh()
    written = path.stat().st_mtime_ns
    assert list(load_table(path)[0]) == [first.stored.key_id]
    assert await table.refresh()  # unchanged: not written again
    assert path.stat().st_mtime_ns == written
    await store_key(store, second.stored)
    assert await table.refresh()
    assert sorted(load_table(path)[0]) == sorted([first.stored.key_id, second.stored.key_id])
    await store.close()

    down = AsyncStateStore.from_url("redis://127.0.0.1:1/0", prefix=prefix, timeout=0.2)
    from_file = KeyTable(down, file=path)
    assert not await from_file.refresh() and from_file.load_file()
    assert from_file.source == "file" and from_file.check(first.token) == first.stored
    path.write_text("{not json")
    with pytest.raises(KeyTableFileError):
        load_table(path)
    broken = KeyTable(down, file=path)
    assert not broken.load_file()
    with pytest.raises(KeysUnknown):
        broken.check(first.token)
    with pytest.raises(StateError):
        await down.ping()
    await down.close()
