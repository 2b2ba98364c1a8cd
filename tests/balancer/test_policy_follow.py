# SPDX-License-Identifier: Apache-2.0
"""A balancer following the policy stored in a real Valkey: GPU servers added, removed
(drained first) and replaced live; a version that does not load changes nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from director import policy_gate
from director.up.plan import UpOptions, balancer_child
from policies import load_policy_text
from regions.balancer import (
    Balancer,
    BalancerConfig,
    OutlierConfig,
    SharedStateConfig,
    build_balancer,
)
from regions.balancer.signals.policy_follow import FollowPolicy
from regions.balancer.signals.pool_update import POLICY
from regions.simulator import Fault, FaultMode, Fleet, ServerSpec
from state import EmbeddedValkey, StateStore
from state.ports import free_port
from tests.balancer.helpers import completion, stream_completion
from tests.run_clock import eventually

POLICY_TEXT = """
zone infer.example.com {{ ns ns1.infer.example.com 127.0.0.1 }}
region eu-west {{
    location 53.35 -6.26
    jurisdiction EU
    endpoints 127.0.0.1
    capacity 10rps
{gpus}
}}
service chat.infer.example.com {{ all-down answer-nothing }}
"""


def policy_text(gpus: Mapping[str, str]) -> str:
    lines = "\n".join(f"    gpu {n} {{ url {u}; models sim-model }}" for n, u in gpus.items())
    return POLICY_TEXT.format(gpus=lines)


@asynccontextmanager
async def following(
    valkey: EmbeddedValkey, prefix: str, servers: str, names: tuple[str, ...]
) -> AsyncIterator[tuple[Fleet, Balancer, aiohttp.ClientSession]]:
    """Simulated GPU servers (one per letter of ``servers``) and a balancer started from a
    policy listing ``names`` of them, following the stored policy."""
    async with Fleet([ServerSpec(n) for n in servers], time_scale=20) as fleet:
        policy = load_policy_text(policy_text({n: fleet[n].url for n in names}))
        state = SharedStateConfig(valkey.url, prefix=prefix, read_every_s=0.1, publish_every_s=0.2)
        config = BalancerConfig(outliers=OutlierConfig(slow_start_s=30.0))
        balancer = build_balancer(
            "eu-west",
            policy.region("eu-west").gpus,
            dataclasses.replace(
                config,
                shared_state=state,
                follow_policy=FollowPolicy(state, policy_gate.load_record),
            ),
        )
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            yield fleet, balancer, client


def names(balancer: Balancer) -> list[str]:
    return [b.name for b in balancer.pool]


async def served_by(client: aiohttp.ClientSession, n: int = 6) -> set[str]:
    backends = set()
    for _ in range(n):
        status, backend, body = await stream_completion(client, completion(2))
        assert status == 200 and body.endswith(b"data: [DONE]\n\n")
        backends.add(backend)
    return backends


async def finished(sim: aiohttp.ClientSession, url: str) -> int:
    async with sim.get(f"{url}/_sim/state") as resp:
        return int((await resp.json())["counters"]["finished"])


async def test_an_added_gpu_server_joins_in_slow_start_and_takes_traffic(
    valkey: EmbeddedValkey, prefix: str, store: StateStore
) -> None:
    async with following(valkey, prefix, "abc", ("a", "b")) as (fleet, balancer, client):
        assert await served_by(client) <= {"a", "b"}
        version = store.set_policy(policy_text({n: fleet[n].url for n in "abc"}))
        await eventually(lambda: names(balancer) == ["a", "b", "c"])
        assert balancer.state()["policy_version"] == version
        view = {b.name: b for b in balancer.pool.snapshot().backends}
        assert view["c"].cap < view["a"].cap  # slow start: ramps up from 1
        balancer.drain("a")
        balancer.drain("b")
        assert await served_by(client) == {"c"}
        balancer.undrain("a")
        balancer.undrain("b")
        # the shared-state link now follows the new GPU server's probe health too
        store.record_probe("eu-west", "c", ok=False, rise=1, fall=1)
        await eventually(lambda: not balancer.pool["c"].healthy)
        assert "c" not in await served_by(client)


async def test_a_removed_gpu_server_drains_its_streams_then_leaves(
    valkey: EmbeddedValkey, prefix: str, store: StateStore
) -> None:
    async with following(valkey, prefix, "ab", ("a", "b")) as (fleet, balancer, client):
        store.record_probe("eu-west", "b", ok=True, rise=1, fall=1)  # a record stays
        fleet["b"].set_fault(Fault(FaultMode.HANG))
        balancer.drain("a")
        held = await client.post("/v1/completions", json=completion(5))
        assert held.status == 200 and held.headers["x-director-backend"] == "b"
        balancer.undrain("a")

        store.set_policy(policy_text({"a": fleet["a"].url}))
        await eventually(lambda: POLICY in balancer.pool["b"].drains)
        assert await served_by(client) == {"a"}
        assert names(balancer) == ["a", "b"] and balancer.pool["b"].in_flight == 1

        fleet["b"].set_fault(Fault())
        assert (await held.read()).endswith(b"data: [DONE]\n\n")  # the stream finished
        await eventually(lambda: names(balancer) == ["a"])
        assert "b" not in balancer.connections.sessions
        assert "b" not in balancer.connections.upstreams
        # the state link was rebuilt without b: a drain set in the state still applies
        store.set_drain("eu-west", "a")
        await eventually(lambda: balancer.pool["a"].drains == {"state"})
        store.set_drain("eu-west", "a", draining=False)
        await eventually(lambda: not balancer.pool["a"].drains)
        assert await served_by(client) == {"a"}


async def test_a_changed_url_replaces_the_backend(
    valkey: EmbeddedValkey, prefix: str, store: StateStore
) -> None:
    async with following(valkey, prefix, "abc", ("a", "b")) as (fleet, balancer, client):
        store.set_policy(policy_text({"a": fleet["a"].url, "b": fleet["c"].url}))
        await eventually(lambda: balancer.pool["b"].spec.url == fleet["c"].url)
        await eventually(lambda: names(balancer) == ["a", "b"])  # b~1 drained and left
        balancer.drain("a")
        async with aiohttp.ClientSession() as sim:
            before = await finished(sim, fleet["c"].url)
            assert await served_by(client) == {"b"}
            assert await finished(sim, fleet["c"].url) == before + 6  # on c's server


async def test_a_version_that_does_not_apply_changes_nothing(
    valkey: EmbeddedValkey, prefix: str, store: StateStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with following(valkey, prefix, "ab", ("a", "b")) as (fleet, balancer, client):
        follower = balancer.policy_follow.follower
        assert follower is not None
        bad = store.set_policy("region {")
        await eventually(lambda: follower.rejected == bad)
        elsewhere = store.set_policy(
            policy_text({"a": fleet["a"].url}).replace("eu-west", "us-east")
        )
        await eventually(lambda: follower.version == elsewhere)
        assert names(balancer) == ["a", "b"] and not balancer.pool["b"].drains
        assert await served_by(client, 8) == {"a", "b"}
        assert f"stored policy version {bad} rejected" in caplog.text
        assert f"policy version {elsewhere} has no region eu-west" in caplog.text
        good = store.set_policy(policy_text({"a": fleet["a"].url}))
        await eventually(lambda: balancer.state()["policy_version"] == good)
        await eventually(lambda: names(balancer) == ["a"])


async def test_apply_policy_without_gpu_servers_changes_nothing() -> None:
    async with Fleet([ServerSpec("a")], time_scale=20) as fleet:
        policy = load_policy_text(policy_text({"a": fleet["a"].url}))
        balancer = build_balancer("eu-west", policy.region("eu-west").gpus)
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            assert balancer.policy_follow.follower is None  # not following: nothing polls
            assert balancer.apply_policy(load_policy_text(policy_text({}))) is None
            assert names(balancer) == ["a"] and await served_by(client, 2) == {"a"}


async def region_serve_follows(tmp_path: Path, valkey: EmbeddedValkey, prefix: str) -> None:
    async with Fleet([ServerSpec("a"), ServerSpec("b")], time_scale=20) as fleet:
        path = tmp_path / "p.dp"
        path.write_text(policy_text({"a": fleet["a"].url}))
        port, admin_port = free_port(), free_port()
        options = UpOptions(path, tmp_path, valkey.url, balancer_port=port,
                            balancer_admin_port=admin_port)
        argv = [
            *balancer_child(path, "eu-west", "127.0.0.1", options).argv,
            "--state-prefix",
            prefix,
        ]
        assert "--follow-policy" in argv  # as `director up` runs it
        process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        store = StateStore.from_url(valkey.url, prefix=prefix)
        try:
            async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{port}") as client, \
                    aiohttp.ClientSession(base_url=f"http://127.0.0.1:{admin_port}") as admin:
                await wait_serving(client)
                assert await served_by(client, 2) == {"a"}
                store.set_policy(policy_text({"b": fleet["b"].url}))

                async def only_b() -> bool:
                    async with admin.get("/_admin/state") as resp:
                        backends = (await resp.json())["backends"]
                    return [b["name"] for b in backends] == ["b"]

                await eventually_async(only_b)
                assert await served_by(client, 2) == {"b"}
        finally:
            store.close()
            process.terminate()
            process.wait(timeout=10)
            stderr = process.stderr.read() if process.stderr else ""
            if process.stderr:
                process.stderr.close()
    assert "following the stored policy" in stderr
    assert "GPU server a drained and removed" in stderr


def test_region_serve_follows_the_stored_policy(
    tmp_path: Path, valkey: EmbeddedValkey, prefix: str
) -> None:
    asyncio.run(region_serve_follows(tmp_path, valkey, prefix))


async def wait_serving(client: aiohttp.ClientSession) -> None:
    async def up() -> bool:
        try:
            async with client.get("/healthz") as resp:
                return resp.status == 200
        except aiohttp.ClientError:
            return False

    await eventually_async(up)


async def eventually_async(check: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.1)
