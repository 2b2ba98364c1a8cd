"""`director region serve` as a subprocess, streaming a completion to a simulated GPU server."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from regions.simulator import Fleet, ServerSpec
from state.ports import free_port

POLICY = """
zone infer.example.com {{ ns ns1.infer.example.com 127.0.0.1 }}
region eu-west {{
    location 53.35 -6.26
    jurisdiction EU
    endpoints 127.0.0.1
    capacity 10rps
    gpu euw1-a {{ url {url}; models sim-model }}
}}
service chat.infer.example.com {{ all-down answer-nothing }}
"""


async def wait_ready(url: str, deadline: float) -> None:
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(f"{url}/healthz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"balancer at {url} did not come up")


async def stream_through(tmp_path: Path) -> list[str]:
    async with Fleet([ServerSpec("euw1-a")], time_scale=20) as fleet:
        policy = tmp_path / "p.dp"
        policy.write_text(POLICY.format(url=fleet["euw1-a"].url))
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "director", "region", "serve", "--policy", str(policy),
             "--region", "eu-west", "--listen", f"127.0.0.1:{port}",
             "--admin-listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            url = f"http://127.0.0.1:{port}"
            await wait_ready(url, time.monotonic() + 30)
            body = {"model": "sim-model", "prompt": "hello", "max_tokens": 8, "stream": True}
            async with aiohttp.ClientSession() as session, session.post(
                    f"{url}/v1/completions", json=body) as response:
                assert response.status == 200
                assert response.headers["x-director-region"] == "eu-west"
                return [line.decode().strip() async for line in response.content
                        if line.strip()]
        finally:
            process.terminate()
            process.wait(timeout=10)


def test_region_serve_streams_a_completion(tmp_path):
    lines = asyncio.run(stream_through(tmp_path))
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert len(chunks) >= 8
    assert all(chunk["object"] == "text_completion" for chunk in chunks)


def test_region_serve_unknown_region_is_a_clear_error(tmp_path):
    policy = Path(__file__).resolve().parents[2] / "policies" / "examples" / "global.dp"
    result = subprocess.run([sys.executable, "-m", "director", "region", "serve", "--policy",
                             str(policy), "--region", "eu-wst"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert "no region 'eu-wst'" in result.stderr
