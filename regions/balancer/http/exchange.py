# SPDX-License-Identifier: Apache-2.0
"""One request's way through the balancer: a chain of stages over one typed record.

Each stage is called with the ``Exchange`` and the rest of the chain (``Next``), and
answers: it may refuse (answer without calling on), fill in what it learned and call on,
or wrap the rest (count, settle or replace what comes back), the way a Starlette
middleware wraps an ASGI app. No stage calls back into the one that built the chain, and
nothing else is passed along: what one stage learns for another is a field of the
``Exchange``. The stages and their order are in ``docs/architecture.md``; the balancer
builds them from its configuration (``regions.balancer.stages``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from aiohttp import web

from policies.matching import Place
from regions.balancer.http.relay import RelayEnd
from regions.balancer.scheduling.speed import StreamMeter
from regions.balancer.types import Endpoint, RequestInfo
from tenants.identify import Identified

if TYPE_CHECKING:
    from regions.balancer.http.request_trace import RequestTrace

REQUEST_ID_HEADER = "X-Request-Id"
_SANE_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")


@dataclass(frozen=True)
class CheckedClient:
    """The client a request's residency check placed, for overflow to check siblings by."""

    place: Place
    described: str
    model: str | None


@dataclass(eq=False)
class Exchange:
    """What the stages know of one request. ``request`` is the client's (identification
    and overflow may replace it with a clone without a credential or a marker); the rest
    is filled in along the chain, in this order."""

    request: web.Request
    endpoint: Endpoint
    overflowed: bool = False  # a sibling region sent it: never sent on again
    caller: Identified | None = None  # the identified tenant, with identity on
    credentials: tuple[tuple[str, str], ...] = ()  # taken off: only a sibling gets them
    raw: bytes = b""  # the body as forwarded
    info: RequestInfo | None = None  # parsed; once admitted, as its tenant sends it
    queue_timeout_s: float = 0.0  # the most it may wait in the region queue
    client: CheckedClient | None = None  # where the residency check placed its client
    meter: StreamMeter | None = None  # a meter of the answer's stream, if a stage wants one
    ask_usage: bool = False  # ask the engine for a stream's usage (and hide it)
    extra_headers: dict[str, str] = field(default_factory=dict)  # added to the answer
    served_by: str | None = None  # the backend that answered
    bound: list[str] = field(default_factory=list)  # every backend it was bound to, in order
    relay_end: RelayEnd | None = None  # how the answer ended
    capture: Callable[[bytes], None] | None = None  # told each piece the client is sent
    walks_ladder: bool = False  # its service's degradation ladder decides its sheds
    shed: bool = False  # the region refused it for want of room (a 429 that is not a quota's)
    trace: RequestTrace | None = None  # its spans, when tracing is on and it is sampled
    traceparent: str | None = None  # sent to the GPU server when tracing is on, unsampled
    _request_id: str | None = None

    def add_capture(self, capture: Callable[[bytes], None]) -> None:
        """Tell ``capture`` too each piece the client is sent (after any already told)."""
        before = self.capture
        if before is None:
            self.capture = capture
            return

        def both(piece: bytes) -> None:
            before(piece)
            capture(piece)

        self.capture = both

    @property
    def admitted(self) -> RequestInfo | None:
        """The request as its tenant sends it, once a tenant's request is admitted."""
        return self.info if self.info is not None and self.info.tenant is not None else None

    def request_id(self) -> str:
        """What its usage entry and its answer's ``x-request-id`` carry, decided once: the
        client's ``X-Request-Id`` when it sent exactly one of a sane shape (1 to 128 of
        ``A-Z a-z 0-9 . _ : @ / + = -``), so a client can find its requests in the usage
        log; else ``req_`` and 32 hex digits. A client chooses its ids, so two of its
        requests may share one: billing deduplicates by the usage entry's own id."""
        if self._request_id is None:
            sent = list(self.request.headers.getall(REQUEST_ID_HEADER, ()))
            sane = len(sent) == 1 and _SANE_ID.fullmatch(sent[0])
            self._request_id = sent[0] if sane else f"req_{uuid.uuid4().hex}"
        return self._request_id


Next = Callable[[Exchange], Awaitable[web.StreamResponse]]


class Stage(Protocol):
    """One step of a request's way: answer, or call ``call_next`` with the exchange."""

    async def __call__(self, exchange: Exchange, call_next: Next) -> web.StreamResponse: ...


def chain(stages: Sequence[Stage], last: Next) -> Next:
    """``stages`` in order, each wrapping the rest, ``last`` answering at the end."""
    call: Next = last
    for stage in reversed(stages):
        call = _bound(stage, call)
    return call


def _bound(stage: Stage, call_next: Next) -> Next:
    async def run(exchange: Exchange) -> web.StreamResponse:
        return await stage(exchange, call_next)

    return run
