"""Usage accounting per tenant, service, model, region and backend, kept in the shared state.

Each balancer records every answered request into a ``UsageLedger`` in memory and flushes it
about once a second in one atomic script, applied at most once however often a batch whose
reply was lost is sent again (``tenants.time_buckets``, ``tenants.flush_script``):

- ``HINCRBYFLOAT`` into an hourly bucket ``{p}:usage:h:{hour}`` and a per-minute bucket
  ``{p}:usage:m:{minute}`` (``tenants.time_buckets``, with their lifetimes), field
  ``tenant|service|model|region|backend|metric``; the metrics are ``requests``,
  ``input_tokens``, ``output_tokens``, ``cancelled`` and ``gpu_seconds``;
- ``XADD`` of one entry per request to the stream ``{p}:usage:log``, trimmed by age: an
  entry is kept ``LOG_RETENTION_S`` (``MINID ~`` on the server's clock), however many
  others arrive. It is the usage log a billing pipeline reads (``XRANGE``/``XREAD``, or
  ``GET /api/v1/usage/log``); a reader that falls further behind than the retention loses
  entries, which the ``director_usage_log_lag_seconds`` metric and its alert warn of
  (``tenants.usage_log``).
  An entry has one field, ``usage``: a JSON object of strings (``at``, ``kind``,
  ``tenant``, ``service``, ``model``, ``region``, ``backend``, ``input_tokens``,
  ``output_tokens``, ``cancelled``, ``gpu_seconds``, ``request_id``: the balancer's id of
  the request, never empty), one field rather than
  twelve because packing a command's arguments is most of what a request's accounting
  costs the balancer; ``read_log`` returns the object.
  An entry's ``kind`` is ``request`` (one answered request) or ``reconcile``: output tokens
  the engine generated for cancelled requests after the balancer stopped reading them,
  learned later from the engine's own counter (``regions.balancer.signals.usage_reconcile``); such
  an entry adds tokens to its key and counts no request.

While the state is unreachable the ledger keeps what it has not flushed (bounded by
``MAX_PENDING`` log entries; the counters are never dropped) and flushes it when it can, so
nothing is lost short of the process dying. ``usage_between`` sums the buckets of a time
range: whole hours from the hourly buckets, the minutes at either end from the minute ones.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from state.aio import AsyncStateStore
from state.guard import describe, redis_errors
from tenants.flush_script import Target
from tenants.time_buckets import FLUSH_S, BucketLedger, read_buckets

METRICS = ("requests", "input_tokens", "output_tokens", "cancelled", "gpu_seconds")
LOG_RETENTION_S = 86400.0  # a day: room for a billing reader's outage, bounded memory
LOG_FIELD = "usage"
MAX_PENDING = 100_000


@dataclass(frozen=True)
class UsageKey:
    tenant: str
    service: str
    model: str
    region: str
    backend: str

    def field(self, metric: str) -> str:
        return "|".join((self.tenant, self.service, self.model, self.region, self.backend,
                         metric))


REQUEST = "request"
RECONCILE = "reconcile"


@dataclass(frozen=True)
class UsageEvent:
    """One answered request (``kind`` ``REQUEST``), or tokens reconciled from the engine's
    counter onto a key (``RECONCILE``: no request of its own), as the usage log has it."""

    at: float  # wall clock when it ended
    key: UsageKey
    input_tokens: int
    output_tokens: int
    cancelled: bool
    gpu_seconds: float
    request_id: str = ""
    kind: str = REQUEST

    def log_fields(self) -> dict[str, str]:
        key = self.key
        return {"at": f"{self.at:.3f}", "kind": self.kind, "tenant": key.tenant,
                "service": key.service, "model": key.model, "region": key.region,
                "backend": key.backend, "input_tokens": str(self.input_tokens),
                "output_tokens": str(self.output_tokens),
                "cancelled": "1" if self.cancelled else "0",
                "gpu_seconds": f"{self.gpu_seconds:.6f}", "request_id": self.request_id}

    def log_entry(self) -> dict[str, str]:
        """The usage log entry's fields (see the module text)."""
        return {LOG_FIELD: json.dumps(self.log_fields(), separators=(",", ":"))}


@dataclass
class UsageRow:
    key: UsageKey
    requests: float = 0.0
    input_tokens: float = 0.0
    output_tokens: float = 0.0
    cancelled: float = 0.0
    gpu_seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self.key), "requests": int(self.requests),
                "input_tokens": int(self.input_tokens),
                "output_tokens": int(self.output_tokens), "cancelled": int(self.cancelled),
                "gpu_seconds": round(self.gpu_seconds, 6)}


def log_key(store: AsyncStateStore) -> str:
    return f"{store.keys.prefix}:usage:log"


class UsageLedger(BucketLedger):
    """What one balancer has recorded and not yet flushed (the buckets and the log); an
    async context manager that flushes every ``flush_s`` and once more on exit."""

    noun = "requests"

    def __init__(self, store: AsyncStateStore, flush_s: float = FLUSH_S,
                 log_retention_s: float = LOG_RETENTION_S) -> None:
        super().__init__(store, "usage", flush_s)
        self.log_retention_s = log_retention_s
        self._log: list[UsageEvent] = []
        self.dropped_log_entries = 0

    def record(self, event: UsageEvent) -> None:
        values = {"requests": 1.0 if event.kind == REQUEST else 0.0,
                  "input_tokens": float(event.input_tokens),
                  "output_tokens": float(event.output_tokens),
                  "cancelled": 1.0 if event.cancelled else 0.0,
                  "gpu_seconds": event.gpu_seconds}
        for metric, value in values.items():
            if value:
                self.add(event.at, event.key.field(metric), value)
        if self.pending < MAX_PENDING:
            self._log.append(event)
        else:
            self.dropped_log_entries += 1

    @property
    def pending(self) -> int:
        return len(self._log) + (len(self._batch.entries) if self._batch is not None else 0)

    def _take_entries(self, limit: int) -> list[str]:
        taken, self._log = self._log[:limit], self._log[limit:]
        return [event.log_entry()[LOG_FIELD] for event in taken]

    def _target(self) -> Target:
        return Target(self._mark(), log_key(self.store), LOG_FIELD, self.log_retention_s)


async def usage_between(store: AsyncStateStore, start: float, end: float,
                        tenant: str | None = None) -> list[UsageRow]:
    """Summed usage of ``[start, end)`` (wall clock seconds, whole minutes: a partial
    minute at either end counts whole), optionally of one tenant."""
    rows: dict[UsageKey, UsageRow] = {}
    for field, value in await read_buckets(store, "usage", start, end):
        parts = field.split("|")
        if len(parts) != 6 or parts[5] not in METRICS:
            continue
        key = UsageKey(*parts[:5])
        if tenant is not None and key.tenant != tenant:
            continue
        row = rows.setdefault(key, UsageRow(key))
        setattr(row, parts[5], getattr(row, parts[5]) + value)
    return sorted(rows.values(), key=lambda r: (r.key.tenant, r.key.service, r.key.model,
                                                 r.key.region, r.key.backend))


async def read_log(store: AsyncStateStore, after: str = "-", count: int = 1000,
                   ) -> list[tuple[str, dict[str, str]]]:
    """Usage log entries after id ``after`` (exclusive; "-": from the start), oldest first."""
    start = "-" if after == "-" else f"({after}"
    with redis_errors(describe(store.client)):
        entries = await store.client.xrange(log_key(store), start, "+", count=count)
    out = []
    for entry_id, fields in entries:
        decoded = {(k.decode() if isinstance(k, bytes) else k):
                   (v.decode() if isinstance(v, bytes) else v) for k, v in fields.items()}
        if set(decoded) == {LOG_FIELD}:
            with contextlib.suppress(ValueError, AttributeError):  # not ours: as stored
                decoded = {str(k): str(v) for k, v in json.loads(decoded[LOG_FIELD]).items()}
        out.append((entry_id.decode() if isinstance(entry_id, bytes) else entry_id, decoded))
    return out


def rows_csv(rows: Iterable[UsageRow]) -> str:
    """The rows as CSV, with a header line."""
    lines = ["tenant,service,model,region,backend,requests,input_tokens,output_tokens,"
             "cancelled,gpu_seconds"]
    for row in rows:
        data = row.as_dict()
        lines.append(",".join(_csv_cell(data[name]) for name in (
            "tenant", "service", "model", "region", "backend", "requests", "input_tokens",
            "output_tokens", "cancelled", "gpu_seconds")))
    return "\n".join(lines) + "\n"


def _csv_cell(value: object) -> str:
    text = str(value)
    if any(c in text for c in ',"\n'):
        return '"' + text.replace('"', '""') + '"'
    return text

