"""Usage accounting per tenant, service, model, region and backend, kept in the shared state.

Each balancer records every answered request into a ``UsageLedger`` in memory and flushes it
about once a second in one pipeline:

- ``HINCRBYFLOAT`` into an hourly bucket ``{p}:usage:h:{hour}`` (kept ``KEEP_HOURS_S``) and a
  per-minute bucket ``{p}:usage:m:{minute}`` (kept ``KEEP_MINUTES_S``), field
  ``tenant|service|model|region|backend|metric``; the metrics are ``requests``,
  ``input_tokens``, ``output_tokens``, ``cancelled`` and ``gpu_seconds``;
- ``XADD`` of one entry per request to the stream ``{p}:usage:log`` (capped near
  ``LOG_MAX`` entries): the usage log a billing pipeline reads (``XRANGE``/``XREAD``).

While the state is unreachable the ledger keeps what it has not flushed (bounded by
``MAX_PENDING`` log entries; the counters are never dropped) and flushes it when it can, so
nothing is lost short of the process dying. ``usage_between`` sums the buckets of a time
range: whole hours from the hourly buckets, the minutes at either end from the minute ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from types import TracebackType

from state.aio import AsyncStateStore
from state.errors import StateError
from state.guard import describe, redis_errors
from state.tasks import cancel_and_wait

log = logging.getLogger(__name__)

METRICS = ("requests", "input_tokens", "output_tokens", "cancelled", "gpu_seconds")
KEEP_HOURS_S = 400 * 86400
KEEP_MINUTES_S = 2 * 86400
LOG_MAX = 1_000_000
MAX_PENDING = 100_000
FLUSH_S = 1.0


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


@dataclass(frozen=True)
class UsageEvent:
    """One answered request, as the usage log has it."""

    at: float  # wall clock when it ended
    key: UsageKey
    input_tokens: int
    output_tokens: int
    cancelled: bool
    gpu_seconds: float
    request_id: str = ""

    def log_fields(self) -> dict[str, str]:
        return {"at": f"{self.at:.3f}", **asdict(self.key),
                "input_tokens": str(self.input_tokens),
                "output_tokens": str(self.output_tokens),
                "cancelled": "1" if self.cancelled else "0",
                "gpu_seconds": f"{self.gpu_seconds:.6f}", "request_id": self.request_id}


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


def minute_key(store: AsyncStateStore, minute: int) -> str:
    return f"{store.keys.prefix}:usage:m:{minute}"


def hour_key(store: AsyncStateStore, hour: int) -> str:
    return f"{store.keys.prefix}:usage:h:{hour}"


def log_key(store: AsyncStateStore) -> str:
    return f"{store.keys.prefix}:usage:log"


class UsageLedger:
    """What one balancer has recorded and not yet flushed; an async context manager that
    flushes every ``flush_s`` and once more on exit."""

    def __init__(self, store: AsyncStateStore, flush_s: float = FLUSH_S) -> None:
        self.store = store
        self.flush_s = flush_s
        # (bucket key, field) -> amount not yet flushed
        self._counts: dict[tuple[str, str], float] = defaultdict(float)
        self._log: list[UsageEvent] = []
        self.dropped_log_entries = 0
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def record(self, event: UsageEvent) -> None:
        minute = int(event.at // 60)
        values = {"requests": 1.0, "input_tokens": float(event.input_tokens),
                  "output_tokens": float(event.output_tokens),
                  "cancelled": 1.0 if event.cancelled else 0.0,
                  "gpu_seconds": event.gpu_seconds}
        for bucket in (minute_key(self.store, minute), hour_key(self.store, minute // 60)):
            for metric, value in values.items():
                if value:
                    self._counts[(bucket, event.key.field(metric))] += value
        if len(self._log) < MAX_PENDING:
            self._log.append(event)
        else:
            self.dropped_log_entries += 1

    @property
    def pending(self) -> int:
        return len(self._log)

    async def flush(self) -> bool:
        """Write what is pending; False (keeping it) when the state is unreachable."""
        if not self._counts and not self._log:
            return True
        counts, events = dict(self._counts), list(self._log)
        try:
            with redis_errors(describe(self.store.client)):
                async with self.store.client.pipeline(transaction=False) as pipe:
                    for (bucket, field), value in counts.items():
                        pipe.hincrbyfloat(bucket, field, value)
                    for bucket in {bucket for bucket, _ in counts}:
                        keep = KEEP_MINUTES_S if ":usage:m:" in bucket else KEEP_HOURS_S
                        pipe.expire(bucket, keep)
                    for event in events:
                        pipe.xadd(log_key(self.store), event.log_fields(), maxlen=LOG_MAX,
                                  approximate=True)
                    await pipe.execute()
        except StateError as exc:
            if not self._failing:
                log.warning("usage: state unavailable, keeping %d requests to flush: %s",
                            len(events), exc)
            self._failing = True
            return False
        for key, value in counts.items():  # what was recorded meanwhile stays
            left = self._counts[key] - value
            if abs(left) < 1e-9:
                del self._counts[key]
            else:
                self._counts[key] = left
        del self._log[:len(events)]
        if self._failing:
            log.info("usage: state reachable again, flushed")
        self._failing = False
        return True

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.flush_s)
            await self.flush()

    async def __aenter__(self) -> UsageLedger:
        self._task = asyncio.create_task(self._run(), name="usage-ledger")
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
        with contextlib.suppress(StateError):
            await self.flush()


async def usage_between(store: AsyncStateStore, start: float, end: float,
                        tenant: str | None = None) -> list[UsageRow]:
    """Summed usage of ``[start, end)`` (wall clock seconds, whole minutes: a partial
    minute at either end counts whole), optionally of one tenant."""
    first, last = int(start // 60), math.ceil(end / 60)
    buckets: list[str] = []
    minute = first
    while minute < last:
        if minute % 60 == 0 and minute + 60 <= last:
            buckets.append(hour_key(store, minute // 60))
            minute += 60
        else:
            buckets.append(minute_key(store, minute))
            minute += 1
    rows: dict[UsageKey, UsageRow] = {}
    with redis_errors(describe(store.client)):
        async with store.client.pipeline(transaction=False) as pipe:
            for bucket in buckets:
                pipe.hgetall(bucket)
            replies = await pipe.execute()
    for reply in replies:
        for raw_field, raw_value in reply.items():
            field = raw_field.decode() if isinstance(raw_field, bytes) else str(raw_field)
            parts = field.split("|")
            if len(parts) != 6 or parts[5] not in METRICS:
                continue
            key = UsageKey(*parts[:5])
            if tenant is not None and key.tenant != tenant:
                continue
            row = rows.setdefault(key, UsageRow(key))
            setattr(row, parts[5], getattr(row, parts[5]) + float(raw_value))
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

