# SPDX-License-Identifier: Apache-2.0
"""The balancer's id of a request: what its usage entry and its answer's ``x-request-id``
carry.

The client's ``X-Request-Id`` when it sent exactly one of a sane shape (1 to 128 of
``A-Z a-z 0-9 . _ : @ / + = -``), so a client can find its requests in the usage log;
otherwise one is made (``req_`` and 32 hex digits). A client chooses its own ids, so two of
its requests may share one: a billing pipeline deduplicates by the usage log entry's id,
which the idempotent flush (``tenants.time_buckets``) writes exactly once.
"""

from __future__ import annotations

import re
import uuid

from aiohttp import web

HEADER = "X-Request-Id"
REQUEST_ID = web.RequestKey("director.request_id", str)
_SANE = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")


def request_id(request: web.Request) -> str:
    """The id of ``request``, decided once (later calls return the same)."""
    found = request.get(REQUEST_ID)
    if found:
        return found
    sent = request.headers.getall(HEADER, ())
    made = sent[0] if len(sent) == 1 and _SANE.fullmatch(sent[0]) else f"req_{uuid.uuid4().hex}"
    request[REQUEST_ID] = made
    return made
