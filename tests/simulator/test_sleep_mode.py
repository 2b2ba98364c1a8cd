# SPDX-License-Identifier: Apache-2.0
"""The simulator's sleep mode as vLLM's (POST /sleep, POST /wake_up, GET /is_sleeping), a
wake time and a cold start, over real HTTP."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from regions.simulator.fleet import Fleet, ServerSpec

SCALE = 20.0  # model seconds per wall second
BODY = {"model": "sim-model", "prompt": "hi", "max_tokens": 4}


async def test_a_standby_server_sleeps_until_woken_and_wakes_in_its_wake_time() -> None:
    spec = ServerSpec("gpu0", asleep=True, wake_s=10.0)  # half a wall second
    async with Fleet([spec], time_scale=SCALE) as fleet, aiohttp.ClientSession() as http:
        url = fleet["gpu0"].url
        async with http.get(f"{url}/is_sleeping") as resp:
            assert await resp.json() == {"is_sleeping": True}
        async with http.get(f"{url}/health") as resp:
            assert resp.status == 200  # asleep, vLLM's /health still answers
        async with http.post(f"{url}/v1/completions", json=BODY) as resp:
            assert resp.status == 503
            assert "asleep" in (await resp.json())["error"]["message"]
        start = time.monotonic()
        async with http.post(f"{url}/wake_up") as resp:
            assert resp.status == 200 and (await resp.json()) == {"status": "awake"}
        took = time.monotonic() - start
        assert 10.0 / SCALE * 0.9 <= took <= 10.0 / SCALE + 0.5
        async with http.get(f"{url}/is_sleeping") as resp:
            assert await resp.json() == {"is_sleeping": False}
        async with http.post(f"{url}/v1/completions", json=BODY) as resp:
            assert resp.status == 200


async def test_sleep_aborts_what_runs_and_a_level_2_sleep_wakes_in_the_cold_start() -> None:
    spec = ServerSpec("gpu0", wake_s=2.0, cold_start_s=12.0)
    async with Fleet([spec], time_scale=SCALE) as fleet, aiohttp.ClientSession() as http:
        url = fleet["gpu0"].url
        async with http.get(f"{url}/health") as resp:
            assert resp.status == 503  # loading its weights: the cold start
        await asyncio.sleep(12.0 / SCALE + 0.1)
        async with http.get(f"{url}/health") as resp:
            assert resp.status == 200
        long = {**BODY, "max_tokens": 5000, "stream": True}
        async with http.post(f"{url}/v1/completions", json=long) as streaming:
            await streaming.content.readany()
            async with http.post(f"{url}/sleep?level=2") as resp:
                assert (await resp.json()) == {"status": "sleeping", "level": 2,
                                               "mode": "abort"}
            with pytest.raises(aiohttp.ClientPayloadError):  # cut: the request was aborted
                await streaming.read()
        async with http.post(f"{url}/sleep?level=3") as resp:
            assert resp.status == 400
        start = time.monotonic()
        async with http.post(f"{url}/wake_up") as resp:
            assert resp.status == 200
        assert time.monotonic() - start >= 12.0 / SCALE * 0.9  # level 2: the weights again
        async with http.get(f"{url}/_sim/state") as resp:
            sleep = (await resp.json())["sleep"]
        assert sleep["asleep"] is False and sleep["wakes"] == 1
