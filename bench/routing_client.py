# SPDX-License-Identifier: Apache-2.0
"""Open-loop load for the routing benchmark: every request is sent at its trace time,
whether or not earlier ones have finished, streamed, and timed by the client.

Each request carries the trace's exact counts in the simulator's ``x_prompt_tokens`` /
``x_output_tokens`` fields (which no proxy reads) and asks for ``max_tokens``, in one of two
modes (``max_tokens``):

- a number (default 1000, the conversation service's cap): the same cap on every request, so
  the balancer cannot read the real output length from it (a chat service's usual traffic);
- ``None`` (``--max-tokens exact``): ``max_tokens`` = the trace's output length, as vLLM's
  ``benchmark_serving`` replays a trace (``max_tokens`` = output length with ``ignore_eos``):
  the bound is tight, so a balancer may place by it.

Times are wall seconds times ``time_scale``, i.e. model seconds. TTFT is the first body
chunk (the simulator sends headers at admission, the first token later); E2E is the end of
the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

import aiohttp
from routing_trace import Arrival

MODEL = "sim-model"
MAX_TOKENS = 1000  # the hidden-length mode's cap


@dataclass(frozen=True)
class Outcome:
    at: float  # planned arrival, model seconds
    status: int  # HTTP status; 0: connection error or timeout
    ttft: float | None  # model seconds
    e2e: float | None  # model seconds, None unless complete
    output_tokens: int
    finished_at: float | None  # model seconds since the start of the replay
    prompt_tokens: int = 0  # the trace's
    backend: str = ""  # x-director-backend (our balancer only)


def body(a: Arrival, max_tokens: int | None = MAX_TOKENS) -> dict[str, object]:
    """The request for ``a``; ``max_tokens`` None: the trace's exact output length."""
    cap = max(1, a.output_tokens) if max_tokens is None else max_tokens
    return {
        "model": MODEL,
        "prompt": "x",
        "max_tokens": cap,
        "stream": True,
        "x_prompt_tokens": a.prompt_tokens,
        "x_output_tokens": a.output_tokens,
    }


async def _one(
    session: aiohttp.ClientSession,
    url: str,
    a: Arrival,
    t0: float,
    scale: float,
    timeout: float,
    max_tokens: int | None,
) -> Outcome:
    delay = t0 + a.at / scale - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)
    sent = time.monotonic()
    ttft: float | None = None
    tokens = 0
    try:
        request = body(a, max_tokens)
        async with asyncio.timeout(timeout / scale), session.post(url, json=request) as resp:
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
            e2e = (done - sent) * scale
            backend = resp.headers.get("x-director-backend", "")
            return Outcome(
                a.at, 200, ttft, e2e, tokens, (done - t0) * scale, a.prompt_tokens, backend
            )
    except (aiohttp.ClientError, TimeoutError, OSError):
        return Outcome(a.at, 0, ttft, None, tokens, None)


async def run_load(
    url: str,
    arrivals: list[Arrival],
    time_scale: float,
    *,
    counted_until: float,
    timeout: float = 600.0,
    tail: float = 90.0,
    max_tokens: int | None = MAX_TOKENS,
) -> list[Outcome]:
    """Replay ``arrivals`` against ``url`` (a ``/v1/completions`` endpoint).

    Waits for every request arriving before ``counted_until`` (model seconds) to end; later
    arrivals keep the load up meanwhile (so the last counted requests see the same load as
    the others) and are cancelled then, as are counted ones still running ``tail`` model
    seconds after the last counted arrival (they come back as errors, status 0).
    Returns the outcomes of every request that ended, and of the counted ones cut short.
    ``timeout`` (model seconds) bounds every request; ``max_tokens``: see the module
    docstring (None: exact).
    """
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=None)
    ) as session:
        # open a connection before the clock starts
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with session.get(url.replace("/v1/completions", "/v1/models")) as r:
                await r.read()
        t0 = time.monotonic() + 0.2
        tasks = [
            asyncio.create_task(_one(session, url, a, t0, time_scale, timeout, max_tokens))
            for a in arrivals
        ]
        counted = [t for t, a in zip(tasks, arrivals, strict=True) if a.at < counted_until]
        deadline = t0 + (counted_until + tail) / time_scale
        try:
            await asyncio.wait(counted, timeout=max(0.0, deadline - time.monotonic()))
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        cut = [
            Outcome(a.at, 0, None, None, 0, None)
            for t, a in zip(tasks, arrivals, strict=True)
            if t.cancelled() and a.at < counted_until
        ]
        return [t.result() for t in tasks if not t.cancelled()] + cut
