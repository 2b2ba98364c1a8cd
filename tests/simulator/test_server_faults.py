# SPDX-License-Identifier: Apache-2.0
"""Fault switches over HTTP: fail, slow, hang, error5xx, and malformed switch bodies."""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

import aiohttp
import pytest

from .helpers import completion, eventually, running_server


async def set_fault(http: aiohttp.ClientSession, **body: Any) -> dict[str, Any]:
    async with http.post("/_sim/fault", json=body) as resp:
        assert resp.status == 200
        return await resp.json()


async def sim_state(http: aiohttp.ClientSession) -> dict[str, Any]:
    async with http.get("/_sim/state") as resp:
        return await resp.json()


async def test_fail_answers_503_everywhere_and_cuts_in_flight_streams() -> None:
    async with running_server() as (_, http):
        stream = await http.post("/v1/completions", json=completion(10, 10_000, stream=True))
        await stream.content.readuntil(b"\n\n")
        await set_fault(http, mode="fail")
        with pytest.raises(aiohttp.ClientPayloadError):
            await stream.read()
        for method, path in [("GET", "/health"), ("GET", "/v1/models"), ("GET", "/metrics"),
                             ("POST", "/v1/completions")]:  # fmt: skip
            async with http.request(method, path, json=completion()) as resp:
                assert resp.status == 503, path
        state = await sim_state(http)
        assert state["fault"]["mode"] == "fail" and state["running"] == 0
        await set_fault(http, mode="none")
        async with http.get("/health") as resp:
            assert resp.status == 200


async def test_slow_multiplies_step_time() -> None:
    # 1,600-token prefill (0.1 s) + 50 decode steps (0.6 s) = 0.7 model s, 14 ms wall at x50
    async with running_server(time_scale=50) as (_, http):
        await set_fault(http, mode="slow", factor=10)
        start = time.monotonic()
        async with http.post("/v1/completions", json=completion(1600, 51)) as resp:
            assert resp.status == 200
        assert time.monotonic() - start >= 10 * 0.7 / 50 * 0.95
        assert (await sim_state(http))["fault"] == {
            "mode": "slow", "factor": 10.0, "rate": 1.0, "status": None, "ttl": None
        }  # fmt: skip


async def test_hang_accepts_but_never_produces_a_token_while_health_stays_200() -> None:
    async with running_server() as (_, http):
        await set_fault(http, mode="hang")
        resp = await http.post("/v1/completions", json=completion(10, 5, stream=True))
        assert resp.status == 200  # headers arrive: a gray failure
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):  # 15 model seconds; TTFT would be ~1 ms
                await resp.content.readuntil(b"\n\n")
        async with http.get("/health") as health:
            assert health.status == 200
        assert (await sim_state(http))["counters"]["generation_tokens"] == 0
        await set_fault(http, mode="none")
        assert (await resp.read()).endswith(b"data: [DONE]\n\n")


async def test_error5xx_pinned_status_at_full_rate() -> None:
    async with running_server() as (_, http):
        await set_fault(http, mode="error5xx", rate=1.0, status=503)
        for _ in range(5):
            async with http.post("/v1/completions", json=completion()) as resp:
                assert resp.status == 503
                assert (await resp.json())["error"]["type"] == "server_error"
        async with http.get("/health") as resp:
            assert resp.status == 200
        assert (await sim_state(http))["counters"]["finished"] == 0


async def test_error5xx_partial_rate_is_seeded_and_mixes_codes() -> None:
    async def statuses() -> list[int]:
        async with running_server(seed=7) as (_, http):
            await set_fault(http, mode="error5xx", rate=0.5)
            out = []
            for _ in range(40):
                async with http.post("/v1/completions", json=completion(10, 1)) as resp:
                    out.append(resp.status)
            return out

    first = await statuses()
    assert first == await statuses()
    counts = collections.Counter(first)
    assert set(counts) == {200, 500, 503} and 10 <= counts[200] <= 30


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"mode": "hnag"}, "fault.mode: unknown mode 'hnag' (expected one of none, fail"),
        ({"mode": "slow", "factor": 0}, "fault.factor: must be > 0"),
        ({"mode": "error5xx", "rate": 2}, "fault.rate: must be within [0, 1]"),
        ({"mode": "error5xx", "status": 404}, "fault.status: must be 500 or 503"),
        ({"mode": "slow", "factor": "x"}, "fault.factor: expected a number"),
        ([], "fault: expected a JSON object"),
    ],
    ids=["mode", "factor", "rate", "status", "factor-type", "not-object"],
)
async def test_malformed_fault_bodies_are_400_naming_the_field(body: Any, message: str) -> None:
    async with running_server() as (_, http), http.post("/_sim/fault", json=body) as resp:
        assert resp.status == 400
        assert (await resp.json())["error"]["message"].startswith(message)


async def test_switching_back_to_none_restores_service() -> None:
    async with running_server() as (_, http):
        await set_fault(http, mode="error5xx", rate=1.0)
        await set_fault(http, mode="none")

        async def ok() -> bool:
            async with http.post("/v1/completions", json=completion()) as resp:
                return resp.status == 200

        assert await eventually(ok)


async def test_a_fault_with_a_ttl_reverts_by_itself_unless_replaced_first() -> None:
    async with running_server() as (_, http):
        await set_fault(http, mode="fail", ttl=0.3)
        async with http.get("/health") as resp:
            assert resp.status == 503

        async def healthy() -> bool:
            async with http.get("/health") as resp:
                return resp.status == 200

        await eventually(healthy, timeout=5)
        assert (await sim_state(http))["fault"]["mode"] == "none"

        # A fault set before the ttl replaces the pending revert: no early end for it.
        await set_fault(http, mode="hang", ttl=0.2)
        await set_fault(http, mode="slow", factor=2)
        await asyncio.sleep(0.4)
        assert (await sim_state(http))["fault"]["mode"] == "slow"

        for bad in (0, -1, "soon", 86_401):
            async with http.post("/_sim/fault", json={"mode": "fail", "ttl": bad}) as resp:
                assert resp.status == 400
                assert "fault.ttl" in (await resp.json())["error"]["message"]
        assert (await sim_state(http))["fault"]["mode"] == "slow"


async def test_short_cuts_answers_to_a_share_of_their_tokens_ending_stop() -> None:
    async with running_server() as (_, http):
        async with http.post("/v1/completions", json=completion(10, 20)) as resp:
            whole = await resp.json()
        assert (whole["usage"]["completion_tokens"], whole["choices"][0]["finish_reason"]) == (
            20, "length")
        assert (await set_fault(http, mode="short"))["factor"] == 0.3
        async with http.post("/v1/completions", json=completion(10, 20)) as resp:
            short = await resp.json()
        assert (short["usage"]["completion_tokens"], short["choices"][0]["finish_reason"]) == (
            6, "stop")
        async with http.post("/_sim/fault", json={"mode": "short", "factor": 2}) as resp:
            assert resp.status == 400 and "<= 1" in (await resp.json())["error"]["message"]
