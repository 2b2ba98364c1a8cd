"""One bounded HTTP GET for probes (stdlib ``http.client``: no pool, no retries, no redirects)."""

from __future__ import annotations

import http.client
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_BODY = 4 * 1024 * 1024  # a /metrics page of a busy multi-engine server stays well under this


@dataclass(frozen=True)
class HttpResult:
    """``status`` None means no HTTP answer at all (refused, timed out, reset); see ``error``."""

    status: int | None
    body: bytes
    elapsed_ms: float
    error: str = ""


def http_get(url: str, *, timeout: float) -> HttpResult:
    """GET ``url`` within ``timeout`` seconds (connect and each read); never raises for I/O."""
    parts = urlsplit(url)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    started = time.perf_counter()
    conn = cls(parts.hostname or "", parts.port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"User-Agent": "director-probe/1"})
        response = conn.getresponse()
        body = response.read(MAX_BODY)
        return HttpResult(response.status, body, _ms(started))
    except (OSError, http.client.HTTPException) as exc:
        return HttpResult(None, b"", _ms(started), f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0
