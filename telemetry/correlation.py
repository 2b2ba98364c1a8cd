# SPDX-License-Identifier: Apache-2.0
"""The correlation id that ties a DNS answer to the HTTP requests that follow it.

Both tiers compute it from what each sees, with no state shared: the service's name (the
DNS question; the HTTP ``Host``) and the client's network at the width DNS decisions are
shared at (``/24`` for IPv4, ``/56`` for IPv6: the ECS subnet a resolver sends, the
client's address at the balancer), hashed: ``sha256("<name>|<network>")``, its first 16
hex digits. A DNS decision span and the request spans of the same clients carry it as
``director.correlation_id``: search a trace store by it to see the answer a request
followed. Where the two sides cannot see the same network (a resolver without ECS, a
client behind a proxy), the client or its edge may send the id it wants in
``x-director-correlation`` (``CORRELATION_HEADER``; any 1 to 64 of ``A-Z a-z 0-9 - _``),
e.g. the one ``director dns explain``'s TXT answer gives for its network.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re

CORRELATION_HEADER = "x-director-correlation"
NETWORK_PREFIX = {4: 24, 6: 56}
_SANE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def correlation_id(name: str, address: str | ipaddress.IPv4Address | ipaddress.IPv6Address
                   ) -> str | None:
    """The id for clients in ``address``'s network asking for ``name`` (None when
    ``address`` is not an IP address)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    network = ipaddress.ip_network((int(ip), NETWORK_PREFIX[ip.version]), strict=False)
    key = f"{service_name(name)}|{network}".encode()
    return hashlib.sha256(key).hexdigest()[:16]


def service_name(host: str) -> str:
    """A DNS name or an HTTP ``Host`` as the service's name: lower case, without a port
    or a trailing dot."""
    host = host.strip().lower()
    if host.startswith("["):  # an IPv6 literal with a port
        return host.split("]", 1)[0] + "]"
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def sent_correlation(value: str | None) -> str | None:
    """The id a client sent in ``CORRELATION_HEADER``, if of a sane shape."""
    if value is None:
        return None
    value = value.strip()
    return value if _SANE.fullmatch(value) else None
