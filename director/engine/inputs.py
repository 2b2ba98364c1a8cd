"""What a steering method reads of the client or the state, beyond the candidates.

Each method declares it (``SteeringMethod.reads``); what a decision depends on, and so the
DNS answer memo's key, the ECS scope of an answer and the location classes of the GeoIP
database, is derived from those declarations (``director.engine.registry.inputs_of``).
"""

from __future__ import annotations

import enum


class Input(enum.Enum):
    """What of the client or the state a steering method reads, beyond the candidates."""

    COORDINATES = "coordinates"  # the client's latitude and longitude (GeoIP)
    RTT_NETWORK = "rtt network"  # the measured-RTT network holding the client, and its RTTs
    CLIENT_HASH = "client hash"  # the client's hashing key (its bucket or a random draw)


LOCATED = frozenset({Input.COORDINATES, Input.RTT_NETWORK})  # depend on where the client is
