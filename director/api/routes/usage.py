"""Usage per tenant from the shared state (``tenants.usage``): summed over a time range by
tenant, service, model, region and backend, as JSON or CSV, and the per-request usage log a
billing pipeline reads page by page."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import PlainTextResponse, Response

from director.api.deps import Reader, Runtime
from director.api.errors import ApiError
from tenants.usage import read_log, rows_csv, usage_between
from tenants.usage_log import record_position

router = APIRouter(prefix="/api/v1/usage", tags=["usage"])
MAX_RANGE_S = 400 * 86400


@router.get("", summary="Usage summed over a time range", response_model=None)
async def get_usage(
    runtime: Runtime, _who: Reader,
    tenant: str | None = Query(None, description="One tenant (default: all)"),
    start: float | None = Query(None, alias="from",
                                description="Unix seconds (default: 24 hours ago)"),
    end: float | None = Query(None, alias="to", description="Unix seconds (default: now)"),
    format: str = Query("json", pattern="^(json|csv)$"),
) -> Response | dict[str, Any]:
    """Requests, input and output tokens, cancelled requests and estimated GPU-seconds per
    tenant, service, model, region and backend, in whole minutes of ``[from, to)``."""
    until = time.time() if end is None else end
    since = until - 86400 if start is None else start
    if not since < until or until - since > MAX_RANGE_S:
        raise ApiError(f"'from' must be before 'to', at most {MAX_RANGE_S // 86400} days",
                       status=422)
    rows = await usage_between(runtime.store, since, until, tenant)
    if format == "csv":
        return PlainTextResponse(rows_csv(rows), media_type="text/csv")
    return {"from": since, "to": until, "tenant": tenant,
            "rows": [row.as_dict() for row in rows]}


@router.get("/log", summary="The per-request usage log, oldest first")
async def get_usage_log(
    runtime: Runtime, _who: Reader,
    after: str = Query("-", description="The last entry id already read ('-': the start)"),
    count: int = Query(1000, ge=1, le=10_000),
    consumer: str | None = Query(None, description="The reader's name (e.g. billing): "
                                 "'after' is then recorded as how far it has read, which "
                                 "director_usage_log_lag_seconds{consumer} follows"),
) -> dict[str, Any]:
    """Entries after ``after``. An entry is kept a day (``LOG_RETENTION_S``): a reader
    further behind loses entries, so a billing reader names itself and is alerted on."""
    if consumer is not None:  # from the start: behind by the whole log
        try:
            await record_position(runtime.store, consumer, "0-0" if after == "-" else after,
                                  time.time())
        except ValueError as exc:
            raise ApiError(str(exc), status=422) from None
    entries = await read_log(runtime.store, after, count)
    return {"entries": [{"id": entry_id, **fields} for entry_id, fields in entries],
            "next": entries[-1][0] if entries else after}
