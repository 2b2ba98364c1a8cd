# SPDX-License-Identifier: Apache-2.0
"""`director region serve --redis` as a subprocess: load in Valkey, drains followed."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from regions.simulator import Fleet, ServerSpec
from state import AsyncStateStore, EmbeddedValkey
from state.ports import free_port

POLICY = """
zone infer.example.com {{ ns ns1.infer.example.com 127.0.0.1 }}
region eu-west {{
    location 53.35 -6.26
    jurisdiction EU
    endpoints 127.0.0.1
    capacity 10rps
    gpu euw1-a {{ url {a}; models sim-model }}
    gpu euw1-b {{ url {b}; models sim-model }}
}}
service chat.infer.example.com {{ all-down answer-nothing }}
"""


async def eventually(check, timeout: float = 20.0):
    async with asyncio.timeout(timeout):
        while not (value := await check()):
            await asyncio.sleep(0.1)
        return value


async def run(tmp_path: Path, valkey: EmbeddedValkey, prefix: str) -> None:
    specs = [ServerSpec("euw1-a"), ServerSpec("euw1-b")]
    async with Fleet(specs, time_scale=20) as fleet, aiohttp.ClientSession() as http:
        policy = tmp_path / "p.dp"
        policy.write_text(POLICY.format(a=fleet["euw1-a"].url, b=fleet["euw1-b"].url))
        url = f"http://127.0.0.1:{free_port()}"
        admin = f"127.0.0.1:{free_port()}"
        process = subprocess.Popen(
            [sys.executable, "-m", "director", "region", "serve", "--policy", str(policy),
             "--region", "eu-west", "--listen", url.removeprefix("http://"),
             "--admin-listen", admin,
             "--redis", valkey.url, "--state-prefix", prefix],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "DIRECTOR_QUOTA_WAIT": "1.5"})
        store = AsyncStateStore.from_url(valkey.url, prefix=prefix)
        try:
            load = await eventually(lambda: store.region_load("eu-west"))
            assert load.capacity == 10.0 and abs(load.timestamp - time.time()) < 10

            await store.set_drain("eu-west", "euw1-a")

            async def drained() -> bool:
                async with http.get(f"http://{admin}/_admin/state") as resp:
                    backends = (await resp.json())["backends"]
                return backends[0]["drained_by"] == ["state"]

            await eventually(drained)
            body = {"model": "sim-model", "prompt": "hi", "max_tokens": 4, "stream": True}
            for _ in range(6):
                async with http.post(f"{url}/v1/completions", json=body) as resp:
                    await resp.read()
                    assert resp.status == 200
                    assert resp.headers["x-director-backend"] == "euw1-b"
        finally:
            await store.close()
            process.terminate()
            process.wait(timeout=10)
            stderr = process.stderr.read() if process.stderr else ""
            if process.stderr:
                process.stderr.close()
    assert "shared state redis://" in stderr
    assert "GPU eu-west/euw1-a drained" in stderr
    assert "waiting 1.5 s or more for shared quotas" in stderr  # from the environment


def test_region_serve_follows_the_shared_state(tmp_path, valkey, prefix) -> None:
    asyncio.run(run(tmp_path, valkey, prefix))


def test_region_serve_rejects_a_bad_redis_url(tmp_path) -> None:
    policy = tmp_path / "p.dp"
    policy.write_text(POLICY.format(a="http://127.0.0.1:1", b="http://127.0.0.1:2"))
    result = subprocess.run(
        [sys.executable, "-m", "director", "region", "serve", "--policy", str(policy),
         "--region", "eu-west", "--redis", "localhost:6379"],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--redis: expected redis://" in result.stderr
