"""Types shared by the DNS layers: the ECS subnet a query carries and the answer's outcome."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

UDP_LIMIT_NO_EDNS = 512
OUR_PAYLOAD = 1232  # the EDNS UDP payload we advertise and the most we send over UDP
TCP_LIMIT = 65535


class EcsSubnet(NamedTuple):
    """An EDNS Client Subnet as sent: FAMILY (1 IPv4, 2 IPv6), SOURCE PREFIX-LENGTH and the
    ADDRESS octets as sent (``ceil(source / 8)`` of them, host bits zero)."""

    family: int
    source: int
    address: bytes

    @property
    def opted_out(self) -> bool:
        """Source prefix 0: the client asked not to be located (RFC 7871 section 7.1.2)."""
        return self.source == 0

    def packed(self) -> bytes:
        """The address padded to a full 4 or 16 octets."""
        width = 4 if self.family == 1 else 16
        return self.address + b"\x00" * (width - len(self.address))


@dataclass(frozen=True)
class Outcome:
    """What one answer was, for metrics: service ('' outside services), answered regions and
    the decision's reason ('' when no decision was made)."""

    service: str = ""
    regions: tuple[str, ...] = ()
    reason: str = ""
    cacheable: bool = True  # False: depends on more than the query (explain, admin check)
