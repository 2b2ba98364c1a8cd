# SPDX-License-Identifier: Apache-2.0
"""One client request, as an SDK would make it: resolve, stream, retry what is safe.

Each attempt: a DNS query with ECS for the client's subnet, then an OpenAI-compatible
streaming completion (SSE) to the answered address on the balancer port, with ``Host``
set to the service's name and ``X-Director-Client-IP`` to an address in the subnet (the
balancer's residency re-check believes it from a trusted edge such as loopback); a
tenant's request carries its API key (``Authorization: Bearer``). What is recorded: the
DNS answer, the ``x-director-region`` / ``x-director-backend`` headers, the status,
Retry-After, the time to the first token and whether the stream reached
``data: [DONE]``.

Retries (at most ``client.retries``, each with a fresh DNS answer, after an exponential
backoff as the OpenAI SDKs do: ``backoff * 2**n`` capped by ``max_backoff``, with +-25%
jitter seeded by the request's id) happen only when no token was produced: no DNS answer,
a refused or failed connection, no response headers in ``first_byte_timeout``, a reset
before the response, and a 429/503 with Retry-After (after waiting it, capped by
``max_retry_after``). A 5xx without Retry-After and a stream cut or stalled before its end
are final: they are what the accounting calls lost.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

from drills.dnsclient import DnsClient
from drills.model import ClientSpec, RequestSpec
from drills.records import Attempt, AttemptOutcome, RequestRecord
from drills.topology import Topology

CLIENT_IP_HEADER = "X-Director-Client-IP"
REGION_HEADER = "x-director-region"
BACKEND_HEADER = "x-director-backend"
MAX_ERROR_BODY = 16384

Observer = Callable[[str, RequestRecord, Attempt], None]


def request_body(spec: RequestSpec, prompt_tokens: int, output_tokens: int) -> dict[str, Any]:
    """An OpenAI-compatible streaming body; ``x_*`` fields pin the simulator's counts."""
    body: dict[str, Any] = {"model": spec.model, "max_tokens": output_tokens, "stream": True,
                            "x_prompt_tokens": prompt_tokens, "x_output_tokens": output_tokens}
    text = "Summarise the drill so far."
    if spec.route.endswith("/chat/completions"):
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    return body


def backoff(spec: ClientSpec, n: int, key: str) -> float:
    """The wait before retry ``n + 1`` of a request (deterministic per request id)."""
    jitter = 0.75 + 0.5 * random.Random(f"{key}:{n}").random()
    return min(spec.max_backoff, spec.backoff * 2.0 ** n) * jitter


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value.strip()))
    except ValueError:
        return None


def _token_in(event: bytes) -> bool:
    """Whether one SSE data payload carries generated text."""
    try:
        data = json.loads(event)
    except (ValueError, UnicodeDecodeError):
        return False
    for choice in data.get("choices") or ():
        if (choice.get("delta") or {}).get("content") or choice.get("text"):
            return True
    return False


class Client:
    """Makes requests against the system; shares one HTTP session and DNS client."""

    def __init__(self, topology: Topology, request: RequestSpec, spec: ClientSpec,
                 dns_client: DnsClient, session: aiohttp.ClientSession,
                 clock: Callable[[], float], observe: Observer | None = None,
                 deadline: float | None = None, keys: Mapping[str, str] | None = None,
                 ) -> None:
        self.topology = topology
        self.request = request
        self.spec = spec
        self.dns = dns_client
        self.session = session
        self.clock = clock
        self.observe = observe or (lambda kind, record, attempt: None)
        self.deadline = deadline  # drill clock: no retry starts after it
        self.keys = keys or {}    # tenant -> API key

    async def run(self, record: RequestRecord) -> None:
        """Make the request with its retries; the record is filled in as it goes."""
        body = request_body(self.request, record.prompt_tokens, record.output_tokens)
        try:
            for n in range(self.spec.retries + 1):
                attempt = Attempt(n, self.clock())
                record.attempts.append(attempt)
                await self._attempt(record, attempt, body)
                self.observe("attempt", record, attempt)
                outcome = attempt.outcome
                if outcome is None or not outcome.retryable or n == self.spec.retries:
                    break
                wait = backoff(self.spec, n, record.id)
                if outcome is AttemptOutcome.SHED:
                    wait = min(attempt.retry_after or 1.0, self.spec.max_retry_after)
                if self.deadline is not None and self.clock() + wait > self.deadline:
                    break
                await asyncio.sleep(wait)
        except asyncio.CancelledError:
            last = record.final
            if last is not None and last.outcome is None:
                last.outcome = AttemptOutcome.CANCELLED
                last.t_end = self.clock()
            raise
        finally:
            record.finished = True
            record.t_end = self.clock()

    async def _attempt(self, record: RequestRecord, attempt: Attempt,
                       body: dict[str, Any]) -> None:
        answer = await self.dns.resolve(self.topology.service, record.subnet)
        attempt.dns = answer
        if answer.rcode in ("TIMEOUT", "ERROR"):
            return self._end(attempt, AttemptOutcome.DNS_TIMEOUT, answer.error)
        self.observe("dns", record, attempt)
        if not answer.addresses:
            return self._end(attempt, AttemptOutcome.DNS_REFUSED, answer.rcode)
        address = answer.addresses[record.seq % len(answer.addresses)]
        attempt.address = address
        attempt.region = self.topology.region_of(address)
        port = self.topology.port_for(address)
        url = f"http://{address}:{port}{self.request.route}"
        headers = {"Host": self.topology.service, CLIENT_IP_HEADER: record.client_ip,
                   "Idempotency-Key": record.id, "Accept": "text/event-stream"}
        key = self.keys.get(record.tenant) if record.tenant is not None else None
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        try:
            async with asyncio.timeout(self.spec.total_timeout):
                await self._http(url, headers, body, record, attempt)
        except TimeoutError:
            if attempt.outcome is None:
                self._end(attempt, AttemptOutcome.STREAM_STALL if attempt.t_headers
                          else AttemptOutcome.NO_RESPONSE, "total timeout")

    async def _http(self, url: str, headers: dict[str, str], body: dict[str, Any],
                    record: RequestRecord, attempt: Attempt) -> None:
        try:
            async with asyncio.timeout(self.spec.first_byte_timeout):
                response = await self.session.post(url, json=body, headers=headers)
        except TimeoutError:
            return self._end(attempt, AttemptOutcome.NO_RESPONSE, "no response headers in "
                             f"{self.spec.first_byte_timeout:g}s")
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            return self._end(attempt, AttemptOutcome.CONNECT_ERROR, _describe(exc))
        except (aiohttp.ClientError, OSError) as exc:
            return self._end(attempt, AttemptOutcome.RESET, _describe(exc))
        async with response:
            attempt.t_headers = self.clock()
            attempt.status = response.status
            attempt.served_region = response.headers.get(REGION_HEADER)
            attempt.backend = response.headers.get(BACKEND_HEADER)
            attempt.retry_after = _retry_after(response.headers.get("Retry-After"))
            self.observe("response", record, attempt)
            if response.status != 200:
                await self._error_body(response, attempt)
                return None
            await self._stream(response, attempt)
        return None

    async def _error_body(self, response: aiohttp.ClientResponse, attempt: Attempt) -> None:
        status = response.status
        try:
            async with asyncio.timeout(self.spec.stall_timeout):
                text = (await response.content.read(MAX_ERROR_BODY)).decode("utf-8", "replace")
        except (TimeoutError, aiohttp.ClientError, OSError):
            text = ""
        detail = text.strip()[:300] or None
        if status in (429, 503) and attempt.retry_after is not None:
            self._end(attempt, AttemptOutcome.SHED, detail)
        elif status == 451:
            self._end(attempt, AttemptOutcome.REFUSED, detail)
        elif status >= 500:
            self._end(attempt, AttemptOutcome.HTTP_5XX, detail)
        else:
            self._end(attempt, AttemptOutcome.HTTP_4XX, detail)

    async def _stream(self, response: aiohttp.ClientResponse, attempt: Attempt) -> None:
        buffer = b""
        try:
            while True:
                async with asyncio.timeout(self.spec.stall_timeout):
                    chunk = await response.content.readany()
                if not chunk:
                    break
                attempt.chunks += 1
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    line = line.strip()
                    if not line.startswith(b"data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        attempt.done = True
                    elif attempt.t_first_token is None and _token_in(payload):
                        attempt.t_first_token = self.clock()
                if attempt.done:
                    break
        except TimeoutError:
            return self._end(attempt, AttemptOutcome.STREAM_STALL,
                             f"no chunk in {self.spec.stall_timeout:g}s")
        except (aiohttp.ClientError, OSError) as exc:
            return self._end(attempt, AttemptOutcome.STREAM_CUT, _describe(exc))
        if attempt.done:
            return self._end(attempt, AttemptOutcome.COMPLETED)
        return self._end(attempt, AttemptOutcome.STREAM_CUT, "stream ended before [DONE]")

    def _end(self, attempt: Attempt, outcome: AttemptOutcome, error: str | None = None) -> None:
        attempt.outcome = outcome
        attempt.error = error
        attempt.t_end = self.clock()


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def monotonic_clock(t0: float) -> Callable[[], float]:
    """The drill clock: seconds since ``t0`` on the monotonic clock."""
    return lambda: time.monotonic() - t0
