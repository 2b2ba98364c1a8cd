# SPDX-License-Identifier: Apache-2.0
"""What a drill records: every request with its attempts, the faults, status samples.

Times are seconds on the drill clock (t0 = the load's start). A request is one logical call
of a client (one idempotency key); each try is an ``Attempt``: a DNS query (with ECS for
the client's subnet), then the HTTP request to the answered address. The attempt's
``outcome`` says how it ended; ``accounting`` turns attempts into the request's outcome.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class AttemptOutcome(enum.Enum):
    COMPLETED = "completed"        # 200 and the stream's terminal event ([DONE])
    SHED = "shed"                  # 429 or 503 with Retry-After
    REFUSED = "refused"            # 451: the balancer's residency re-check refused it
    DNS_REFUSED = "dns_refused"    # the DNS answer held no address (fail closed)
    DNS_TIMEOUT = "dns_timeout"    # no DNS answer at all
    CONNECT_ERROR = "connect_error"  # connection refused or not established
    NO_RESPONSE = "no_response"    # connected, but no response headers in time
    RESET = "reset"                # connection reset or closed before a response
    HTTP_5XX = "http_5xx"          # a 5xx without Retry-After
    HTTP_4XX = "http_4xx"          # another 4xx: the drill's request was wrong
    STREAM_CUT = "stream_cut"      # the stream ended (EOF or reset) before [DONE]
    STREAM_STALL = "stream_stall"  # no chunk within the stall timeout, or past the total
    CANCELLED = "cancelled"        # the drill stopped before the attempt ended

    @property
    def retryable(self) -> bool:
        """Safe for a client to try again: nothing was generated, or the server said so."""
        return self in _RETRYABLE


_RETRYABLE = frozenset({AttemptOutcome.SHED, AttemptOutcome.DNS_TIMEOUT,
                        AttemptOutcome.CONNECT_ERROR, AttemptOutcome.NO_RESPONSE,
                        AttemptOutcome.RESET})


@dataclass
class DnsAnswer:
    t: float
    server: str
    rcode: str                     # NOERROR, NXDOMAIN, REFUSED, SERVFAIL, ... or TIMEOUT
    addresses: tuple[str, ...] = ()
    ttl: int | None = None
    scope: int | None = None       # ECS scope prefix of the answer
    cached: bool = False
    error: str | None = None


@dataclass
class Attempt:
    n: int
    t_start: float
    dns: DnsAnswer | None = None
    address: str | None = None
    region: str | None = None          # the region the answered address belongs to
    status: int | None = None
    served_region: str | None = None   # the x-director-region response header
    backend: str | None = None         # the x-director-backend response header
    retry_after: float | None = None
    t_headers: float | None = None
    t_first_token: float | None = None
    t_end: float | None = None
    chunks: int = 0
    done: bool = False
    error: str | None = None
    outcome: AttemptOutcome | None = None

    @property
    def ttft(self) -> float | None:
        if self.t_first_token is None:
            return None
        return self.t_first_token - self.t_start

    @property
    def answered_region(self) -> str | None:
        """Where the request was served or answered: the header, else the address's region."""
        return self.served_region or self.region


@dataclass
class RequestRecord:
    id: str
    seq: int
    cohort: str
    subnet: str
    client_ip: str
    t_issue: float
    prompt_tokens: int
    output_tokens: int
    attempts: list[Attempt] = field(default_factory=list)
    finished: bool = False
    t_end: float | None = None
    not_sent: bool = False             # the generator was at max_in_flight: never sent
    tenant: str | None = None          # whose API key it carried (None: no credential)

    @property
    def final(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def first(self) -> Attempt | None:
        return self.attempts[0] if self.attempts else None


@dataclass
class FaultRecord:
    """One injected fault, as the runner saw it: what it hit and every admin API call."""

    id: str
    type: str
    planned_start: float
    planned_end: float
    t_start: float | None = None       # when the injection call was sent (on from then)
    t_applied: float | None = None     # when it returned: surely on by then
    t_end: float | None = None         # when it was restored
    regions: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()         # "region/gpu"
    processes: tuple[str, ...] = ()
    ttl: float | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    restored: bool = False
    restore_error: str | None = None


@dataclass
class StatusSample:
    t: float
    reachable: bool
    regions: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None
    rollouts: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> status, step


def to_json(value: Any) -> Any:
    """Records (dataclasses, enums, tuples) as plain JSON values."""
    if isinstance(value, enum.Enum):
        return value.value
    if hasattr(value, "__dataclass_fields__"):
        return {k: to_json(v) for k, v in asdict(value).items()}
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    return value
