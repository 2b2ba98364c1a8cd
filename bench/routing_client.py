# SPDX-License-Identifier: Apache-2.0
"""Open-loop load for the routing benchmark: every request is sent at its trace time,
whether or not earlier ones have finished, streamed, and timed by the client.

Each request asks for ``max_tokens`` 1000 (the conversation service's cap, so the balancer
cannot read the real output length from it) and carries the trace's exact counts in the
simulator's ``x_prompt_tokens`` / ``x_output_tokens`` fields. Times are wall seconds times
``time_scale``, i.e. model seconds. TTFT is the first body chunk (the simulator sends
headers at admission, the first token later); E2E is the end of the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

import aiohttp
from routing_trace import Arrival

MODEL = "sim-model"
MAX_TOKENS = 1000


@dataclass(frozen=True)
class Outcome:
    at: float  # planned arrival, model seconds
    status: int  # HTTP status; 0: connection error or timeout
    ttft: float | None  # model seconds
    e2e: float | None  # model seconds, None unless complete
    output_tokens: int
    finished_at: float | None  # model seconds since the start of the replay


def body(a: Arrival) -> dict[str, object]:
    return {"model": MODEL, "prompt": "x", "max_tokens": MAX_TOKENS, "stream": True,
            "x_prompt_tokens": a.prompt_tokens, "x_output_tokens": a.output_tokens}


async def _one(
    session: aiohttp.ClientSession, url: str, a: Arrival, t0: float, scale: float,
    timeout: float,
) -> Outcome:
    delay = t0 + a.at / scale - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)
    sent = time.monotonic()
    ttft: float | None = None
    tokens = 0
    try:
        async with asyncio.timeout(timeout / scale), session.post(url, json=body(a)) as resp:
            if resp.status != 200:
                await resp.read()
                return Outcome(a.at, resp.status, None, None, 0, None)
            tail = b""
            while chunk := await resp.content.readany():
                if ttft is None:
                    ttft = (time.monotonic() - sent) * scale
                tokens += chunk.count(b"data: {")
                tail = (tail + chunk)[-32:]
            done = time.monotonic()
            if not tail.endswith(b"data: [DONE]\n\n"):
                return Outcome(a.at, 0, ttft, None, tokens, None)
            return Outcome(a.at, 200, ttft, (done - sent) * scale, tokens, (done - t0) * scale)
    except (aiohttp.ClientError, TimeoutError, OSError):
        return Outcome(a.at, 0, ttft, None, tokens, None)


async def run_load(
    url: str, arrivals: list[Arrival], time_scale: float, *, counted_until: float,
    timeout: float = 600.0, tail: float = 90.0,
) -> list[Outcome]:
    """Replay ``arrivals`` against ``url`` (a ``/v1/completions`` endpoint).

    Waits for every request arriving before ``counted_until`` (model seconds) to end; later
    arrivals keep the load up meanwhile (so the last counted requests see the same load as
    the others) and are cancelled then, as are counted ones still running ``tail`` model
    seconds after the last counted arrival (they come back as errors, status 0).
    Returns the outcomes of every request that ended, and of the counted ones cut short.
    ``timeout`` (model seconds) bounds every request.
    """
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=None)) as session:
        # open a connection before the clock starts
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with session.get(url.replace("/v1/completions", "/v1/models")) as r:
                await r.read()
        t0 = time.monotonic() + 0.2
        tasks = [asyncio.create_task(_one(session, url, a, t0, time_scale, timeout))
                 for a in arrivals]
        counted = [t for t, a in zip(tasks, arrivals, strict=True) if a.at < counted_until]
        deadline = t0 + (counted_until + tail) / time_scale
        try:
            await asyncio.wait(counted, timeout=max(0.0, deadline - time.monotonic()))
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        cut = [Outcome(a.at, 0, None, None, 0, None)
               for t, a in zip(tasks, arrivals, strict=True) if t.cancelled()
               and a.at < counted_until]
        return [t.result() for t in tasks if not t.cancelled()] + cut
