# SPDX-License-Identifier: Apache-2.0
"""Tracing configured by the standard ``OTEL_*`` variables alone, in separate processes:
a simulated vLLM server exports its ``llm_request`` span to ``director traces receive``,
and ``director traces show`` prints the trace."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp

from telemetry import tracing_enabled

DIRECTOR = [sys.executable, "-m", "director"]


async def _line(stream: asyncio.StreamReader | None, pattern: str) -> re.Match[str]:
    assert stream is not None
    while True:
        line = (await asyncio.wait_for(stream.readline(), 20)).decode()
        assert line, f"the process ended before printing {pattern!r}"
        found = re.search(pattern, line)
        if found:
            return found


async def test_a_simulated_server_traces_by_the_otel_variables(tmp_path: Path) -> None:
    spans = tmp_path / "spans.jsonl"
    receiver = await asyncio.create_subprocess_exec(
        *DIRECTOR, "traces", "receive", str(spans), "--listen", "127.0.0.1:0",
        stderr=asyncio.subprocess.PIPE)
    sim = None
    try:
        endpoint = (await _line(receiver.stderr, r"on (http://\S+)/v1/traces")).group(1)
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
               "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_SERVICE_NAME": "gpu-a"}
        sim = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "regions.simulator", "--listen", "127.0.0.1:0",
            "--time-scale", "50", env=env, stdout=asyncio.subprocess.PIPE)
        url = (await _line(sim.stdout, r"listening on (\S+)")).group(1)
        trace_id = "0af7651916cd43dd8448eb211c80319c"
        async with aiohttp.ClientSession() as http:
            body = {"model": "sim-model", "prompt": "hi", "max_tokens": 5}
            async with http.post(f"{url}/v1/completions", json=body, headers={
                    "traceparent": f"00-{trace_id}-b7ad6b7169203331-01"}) as resp:
                assert resp.status == 200
        sim.send_signal(signal.SIGTERM)  # exports what it holds on the way out
        assert await asyncio.wait_for(sim.wait(), 20) == 0
        for _ in range(100):
            if spans.exists() and trace_id in spans.read_text():
                break
            await asyncio.sleep(0.1)
        shown = subprocess.run([*DIRECTOR, "traces", "show", str(spans), "--trace", trace_id],
                               capture_output=True, text=True, timeout=60, check=True).stdout
        assert f"trace {trace_id}" in shown
        assert re.search(r"^llm_request  \[gpu-a, server\]", shown, re.M), shown
        assert "gen_ai.usage.completion_tokens = 5" in shown
    finally:
        for proc in (sim, receiver):
            if proc is not None and proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), 20)


def test_an_exporter_we_cannot_provide_is_a_clear_error() -> None:
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "zipkin"}
    done = subprocess.run([sys.executable, "-m", "regions.simulator", "--listen",
                           "127.0.0.1:0"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert "OTEL_TRACES_EXPORTER='zipkin': director exports with 'otlp' or 'console'" \
        in done.stderr


def test_tracing_is_off_unless_the_variables_ask() -> None:
    assert not tracing_enabled({})
    assert not tracing_enabled({"OTEL_TRACES_EXPORTER": "none",
                                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing_enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing_enabled({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x:4318/v1/traces"})
    assert tracing_enabled({"OTEL_TRACES_EXPORTER": "console"})
    assert not tracing_enabled({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"})
