# SPDX-License-Identifier: Apache-2.0
"""`director region serve --redis` follows the stored policy without being asked: after a
new version is stored, the balancer enforces its residency rules and routes to its new GPU
server, and ``/healthz`` names the version and digest it serves. ``--no-follow-policy``
keeps the file."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from director import policy_gate
from regions.simulator import Fleet, ServerSpec
from state import EmbeddedValkey, StateStore
from state.policy_identity import policy_digest
from state.ports import free_port
from tests.balancer.helpers import completion, stream_completion

POLICY = """
zone infer.example.com {{ ns ns1.infer.example.com 127.0.0.1 }}
jurisdiction EU {{ countries SE FR DE }}
jurisdiction NA {{ countries US CA }}
region eu-west {{
    location 53.3 -6.2
    jurisdiction EU
    endpoints 127.0.0.1
    capacity 10rps
{gpus}
}}
region us-east {{ location 38.9 -77.0; jurisdiction NA; endpoints 127.0.1.1; capacity 10rps }}
service chat.infer.example.com {{
{rules}
    all-down answer-nothing
}}
"""
CHAT = "chat.infer.example.com"
US = {"Host": CHAT, "X-Director-Client-Country": "US"}
DE = {"Host": CHAT, "X-Director-Client-Country": "DE"}
NA_STAYS = """    residency na { clients jurisdiction NA; allow us-east; all-down answer-allowed }
    unknown-location refuse"""


def policy_text(gpus: dict[str, str], rules: str = "") -> str:
    lines = "\n".join(f"    gpu {n} {{ url {u}; models sim-model }}" for n, u in gpus.items())
    return POLICY.format(gpus=lines, rules=rules)


@asynccontextmanager
async def region_serve(policy: Path, valkey: EmbeddedValkey, prefix: str,
                       *extra: str) -> AsyncIterator[aiohttp.ClientSession]:
    port = free_port()
    argv = [sys.executable, "-m", "director", "region", "serve", "--policy", str(policy),
            "--region", "eu-west", "--listen", f"127.0.0.1:{port}", "--redis", valkey.url,
            "--state-prefix", prefix, "--trusted-network", "127.0.0.0/8", *extra]
    log = (policy.parent / f"balancer-{port}.log").open("w")
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
    try:
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{port}") as client:
            await eventually(lambda: health_ok(client))
            yield client
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


async def health(client: aiohttp.ClientSession) -> dict[str, Any]:
    async with client.get("/healthz") as resp:
        body: dict[str, Any] = await resp.json()
        return body


async def health_ok(client: aiohttp.ClientSession) -> bool:
    try:
        async with client.get("/healthz") as resp:
            return resp.status == 200
    except aiohttp.ClientError:
        return False


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.1)


async def served_by(client: aiohttp.ClientSession, headers: dict[str, str],
                    n: int = 6) -> tuple[set[int], set[str]]:
    statuses, backends = set(), set()
    for _ in range(n):
        status, backend, _ = await stream_completion(client, completion(2), headers)
        statuses.add(status)
        backends.add(backend)
    return statuses, backends - {""}


def file_digest(path: Path) -> str:
    sources = policy_gate.accept(str(path)).sources()
    return policy_digest(sources.name, sources.text, sources.files)


def test_region_serve_with_redis_follows_the_stored_policy_by_default(
        tmp_path: Path, valkey: EmbeddedValkey, prefix: str) -> None:
    asyncio.run(follows_by_default(tmp_path, valkey, prefix))


async def follows_by_default(tmp_path: Path, valkey: EmbeddedValkey, prefix: str) -> None:
    async with Fleet([ServerSpec("a"), ServerSpec("b")], time_scale=20) as fleet:
        path = tmp_path / "p.dp"
        path.write_text(policy_text({"a": fleet["a"].url}))
        store = StateStore.from_url(valkey.url, prefix=prefix)
        try:
            async with region_serve(path, valkey, prefix) as client:
                policy = (await health(client))["policy"]
                assert policy == {"version": None, "digest": file_digest(path), "epoch": "",
                                  "following": True, "refused": 0}
                assert await served_by(client, US) == ({200}, {"a"})

                text = policy_text({"a": fleet["a"].url, "b": fleet["b"].url}, NA_STAYS)
                version, epoch = store.write_policy(text)
                digest = policy_digest("policy.dp", text, {})

                async def serving_it() -> bool:
                    return (await health(client))["policy"]["version"] == version

                await eventually(serving_it)
                assert (await health(client))["policy"] == {
                    "version": version, "digest": digest, "epoch": epoch,
                    "following": True, "refused": 0}
                statuses, _ = await served_by(client, US, 2)
                assert statuses == {451}  # the new rule: North American clients stay there
                backends: set[str] = set()
                for _ in range(10):  # b joins in slow start
                    statuses, seen = await served_by(client, DE, 4)
                    assert statuses == {200}
                    backends |= seen
                    if backends == {"a", "b"}:
                        break
                    await asyncio.sleep(0.3)
                assert backends == {"a", "b"}
        finally:
            store.close()


def test_no_follow_policy_serves_the_file_only(
        tmp_path: Path, valkey: EmbeddedValkey, prefix: str) -> None:
    asyncio.run(serves_the_file(tmp_path, valkey, prefix))


async def serves_the_file(tmp_path: Path, valkey: EmbeddedValkey, prefix: str) -> None:
    async with Fleet([ServerSpec("a")], time_scale=20) as fleet:
        path = tmp_path / "p.dp"
        path.write_text(policy_text({"a": fleet["a"].url}))
        store = StateStore.from_url(valkey.url, prefix=prefix)
        try:
            store.write_policy(policy_text({"a": fleet["a"].url}, NA_STAYS))
            async with region_serve(path, valkey, prefix, "--no-follow-policy") as client:
                await asyncio.sleep(1.0)  # several reads of a follower, were there one
                policy = (await health(client))["policy"]
                assert (policy["version"], policy["following"]) == (None, False)
                assert await served_by(client, US, 2) == ({200}, {"a"})
        finally:
            store.close()
