# SPDX-License-Identifier: Apache-2.0
"""Header sanitizing for both directions of the proxy.

Hop-by-hop headers (RFC 9110 §7.6.1: ``Connection`` and every header it names,
``Keep-Alive``, ``Proxy-*``, ``TE``, ``Trailer``, ``Transfer-Encoding``, ``Upgrade``) never
cross the proxy; nor do ``Host`` and ``Content-Length`` (the client library sets them for
the hop it makes) or the balancer's own ``x-director-*`` control headers. Upstream asks
for ``Accept-Encoding: identity`` so streamed chunks can be counted as they pass.
"""

from __future__ import annotations

from multidict import CIMultiDict, CIMultiDictProxy

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
REQUEST_DROP = HOP_BY_HOP | {"host", "content-length", "accept-encoding", "expect"}
RESPONSE_DROP = HOP_BY_HOP | {"content-length", "server", "date"}
CONTROL_PREFIX = "x-director-"


def _connection_tokens(headers: CIMultiDictProxy[str] | CIMultiDict[str]) -> set[str]:
    named: set[str] = set()
    for value in headers.getall("connection", ()):
        named.update(t.strip().lower() for t in value.split(",") if t.strip())
    return named


def _filtered(
    headers: CIMultiDictProxy[str] | CIMultiDict[str], drop: frozenset[str], *, control: bool
) -> CIMultiDict[str]:
    named = _connection_tokens(headers)
    dropped = drop | named if named else drop
    out: CIMultiDict[str] = CIMultiDict()
    for key, value in headers.items():
        lower = key.lower()
        if lower in dropped or (control and lower.startswith(CONTROL_PREFIX)):
            continue
        out.add(key, value)
    return out


def upstream_request_headers(
    headers: CIMultiDictProxy[str] | CIMultiDict[str],
) -> CIMultiDict[str]:
    """Client request headers as sent on to a backend."""
    out = _filtered(headers, REQUEST_DROP, control=True)
    out["Accept-Encoding"] = "identity"
    return out


def downstream_response_headers(
    headers: CIMultiDictProxy[str] | CIMultiDict[str],
) -> CIMultiDict[str]:
    """Backend response headers as sent back to the client."""
    return _filtered(headers, RESPONSE_DROP, control=True)
