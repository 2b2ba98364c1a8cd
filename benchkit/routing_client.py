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

Prompts (``prepare``): ``counts`` sends ``"x"`` and the count in ``x_prompt_tokens``;
``shared`` sends the text ``shared_prompts`` builds from the request's ``hash_ids`` (no
``x_prompt_tokens``: the text sets the count), so requests sharing a prefix share its text.
The API is ``completions`` (``prompt``) or ``chat`` (``messages``; its stream opens with a
role chunk, not counted as a token). Request bodies are serialised before the replay starts
(a shared-prompt body is 30-60 KB of JSON, too much to build on the clock on two cores).
With ``sessions`` each shared-prompt request also names its conversation (its first block
after the shared system prompt, ``hash_ids[1]``) in ``x-director-session`` and
``X-SMG-Routing-Key`` (smg's ``consistent_hashing`` hashes it; without it, it picks at random).

Times are wall seconds times ``time_scale``, i.e. model seconds. TTFT is the first body
chunk (the simulator sends headers at admission, the first token later); E2E is the end of
the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from benchkit.routing_trace import Arrival
from benchkit.shared_prompts import chat_messages, prompt_text

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


def body(a: Arrival, max_tokens: int | None = MAX_TOKENS, prompts: str = "counts",
         api: str = "completions") -> dict[str, object]:
    """The request for ``a``; ``max_tokens`` None: the trace's exact output length;
    ``prompts`` ``counts`` or ``shared``, ``api`` ``completions`` or ``chat`` (see above)."""
    cap = max(1, a.output_tokens) if max_tokens is None else max_tokens
    request: dict[str, object] = {"model": MODEL}
    if prompts == "shared":
        if api == "chat":
            request["messages"] = chat_messages(a.hash_ids, a.prompt_tokens)
        else:
            request["prompt"] = prompt_text(a.hash_ids, a.prompt_tokens)
    elif prompts == "counts":
        if api == "chat":
            request["messages"] = [{"role": "user", "content": "x"}]
        else:
            request["prompt"] = "x"
    else:
        raise ValueError(f"prompts: expected counts or shared, got {prompts!r}")
    request |= {"max_tokens": cap, "stream": True}
    if prompts == "counts":
        request["x_prompt_tokens"] = a.prompt_tokens
    request["x_output_tokens"] = a.output_tokens
    return request


@dataclass(frozen=True)
class Prepared:
    """One request, serialised before the replay."""

    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    chat: bool = False  # the stream opens with a role chunk that is not a token


def prepare(arrivals: Sequence[Arrival], max_tokens: int | None = MAX_TOKENS,
            prompts: str = "counts", api: str = "completions",
            sessions: bool = False) -> list[Prepared]:
    """Every request of ``arrivals``, serialised (see ``body``)."""
    out = []
    for a in arrivals:
        headers: tuple[tuple[str, str], ...] = ()
        if sessions and prompts == "shared" and len(a.hash_ids) > 1:
            key = str(a.hash_ids[1])
            headers = (("x-director-session", key), ("X-SMG-Routing-Key", key))
        data = json.dumps(body(a, max_tokens, prompts, api), separators=(",", ":")).encode()
        out.append(Prepared(data, headers, api == "chat"))
    return out


def path_of(api: str) -> str:
    return "/v1/chat/completions" if api == "chat" else "/v1/completions"


async def _one(
    session: aiohttp.ClientSession,
    url: str,
    a: Arrival,
    request: Prepared,
    t0: float,
    scale: float,
    timeout: float,
) -> Outcome:
    delay = t0 + a.at / scale - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)
    sent = time.monotonic()
    ttft: float | None = None
    tokens = 0
    try:
        headers = {"Content-Type": "application/json", **dict(request.headers)}
        async with asyncio.timeout(timeout / scale), \
                session.post(url, data=request.body, headers=headers) as resp:
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
            if request.chat and tokens:
                tokens -= 1  # the role chunk
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
    requests: Sequence[Prepared] | None = None,
) -> list[Outcome]:
    """Replay ``arrivals`` against ``url`` (a ``/v1/completions`` or
    ``/v1/chat/completions`` endpoint), each as ``requests`` (``prepare``) has it, or as
    ``body`` makes it with ``max_tokens`` when None.

    Waits for every request arriving before ``counted_until`` (model seconds) to end; later
    arrivals keep the load up meanwhile (so the last counted requests see the same load as
    the others) and are cancelled then, as are counted ones still running ``tail`` model
    seconds after the last counted arrival (they come back as errors, status 0).
    Returns the outcomes of every request that ended, and of the counted ones cut short.
    ``timeout`` (model seconds) bounds every request.
    """
    if requests is None:
        requests = prepare(arrivals, max_tokens)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=None)
    ) as session:
        # open a connection before the clock starts
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with session.get(url.partition("/v1/")[0] + "/v1/models") as r:
                await r.read()
        t0 = time.monotonic() + 0.2
        tasks = [
            asyncio.create_task(_one(session, url, a, r, t0, time_scale, timeout))
            for a, r in zip(arrivals, requests, strict=True)
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
