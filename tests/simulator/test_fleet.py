# SPDX-License-Identifier: Apache-2.0
"""Fleets in one process, stop/start (connection refused), and the one-server entry point."""

from __future__ import annotations

import asyncio
import signal
import sys

import aiohttp
import pytest

from regions.simulator import Fault, FaultMode, Fleet, ServerSpec
from regions.simulator.__main__ import main
from regions.simulator.errors import SimConfigError
from regions.simulator.fleet import parse_listen


async def test_fleet_runs_servers_on_their_own_addresses() -> None:
    specs = [
        ServerSpec("h100", "127.0.0.1", 0, ("llama",), speed=1.0),
        ServerSpec("a100", "127.0.1.11", 0, ("llama", "llama:sql-lora"), speed=0.6),
        ServerSpec("slow", "127.0.1.12", 0, ("mistral",), speed=0.4),
    ]
    async with Fleet(specs, time_scale=50) as fleet, aiohttp.ClientSession() as http:
        assert len(fleet) == 3
        assert fleet["a100"].url.startswith("http://127.0.1.11:")
        for spec in specs:
            server = fleet[spec.name]
            async with http.get(f"{server.url}/v1/models") as resp:
                assert [m["id"] for m in (await resp.json())["data"]] == list(spec.models)
            async with http.get(f"{server.url}/_sim/state") as resp:
                state = await resp.json()
            assert (state["name"], state["speed"]) == (spec.name, spec.speed)
        fleet["slow"].set_fault(Fault(FaultMode.FAIL))
        async with http.get(f"{fleet['slow'].url}/health") as resp:
            assert resp.status == 503
        async with http.get(f"{fleet['h100'].url}/health") as resp:
            assert resp.status == 200


async def test_stopped_server_refuses_connections_and_comes_back_on_its_port() -> None:
    async with Fleet([ServerSpec("one")], time_scale=50) as fleet, aiohttp.ClientSession() as http:
        server = fleet["one"]
        url = server.url
        await server.stop()
        with pytest.raises(aiohttp.ClientConnectorError):
            await http.get(f"{url}/health")
        await server.start()
        assert server.url == url
        async with http.get(f"{url}/health") as resp:
            assert resp.status == 200


def test_fleet_rejects_duplicate_names_and_bad_specs() -> None:
    with pytest.raises(SimConfigError, match="duplicate server name 'a'"):
        Fleet([ServerSpec("a"), ServerSpec("a")])
    with pytest.raises(SimConfigError, match="server b: models: at least one"):
        ServerSpec("b", models=())
    with pytest.raises(SimConfigError, match=r"server c: engine\.speed: must be > 0"):
        _ = ServerSpec("c", speed=0).engine_config


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.1.11:8000", ("127.0.1.11", 8000)), ("[::1]:0", ("::1", 0))],
    ids=["v4", "v6"],
)
def test_parse_listen(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


def test_parse_listen_error() -> None:
    with pytest.raises(SimConfigError, match=r"listen: expected HOST:PORT .*, got '8000'"):
        parse_listen("8000")


async def test_module_entry_point_serves_one_server() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "regions.simulator", "--listen", "127.0.0.1:0",
        "--model", "m1", "--model", "m2", "--speed", "0.6", "--time-scale", "50",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 10)).decode().strip()
        assert line.startswith("listening on http://127.0.0.1:")
        url = line.removeprefix("listening on ")
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/v1/models") as resp:
                assert [m["id"] for m in (await resp.json())["data"]] == ["m1", "m2"]
            body = {"model": "m2", "prompt": "hi", "max_tokens": 3}
            async with http.post(f"{url}/v1/completions", json=body) as resp:
                assert resp.status == 200
            async with http.get(f"{url}/_sim/state") as resp:
                assert (await resp.json())["speed"] == 0.6
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0


def test_module_entry_point_passes_chunked_prefill_to_the_engine(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--chunked-prefill", "16", "--max-num-seqs", "16"]) == 2
    assert "engine.max_prefill_tokens: 16 leaves no room" in capsys.readouterr().err
