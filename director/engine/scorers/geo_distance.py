"""Geo scorer: prefer regions nearest to the client by great-circle distance.

Reads: the client's coordinates (GeoIP) and each region's ``location``. Score =
1 - distance / 20,037.5 km (half the Earth's circumference), so the nearest region scores
highest. Returns None when the client has no coordinates. Scope: the client's database
block. Parameters: none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from director.engine.context import DecisionContext
from director.engine.inputs import Input
from director.engine.scorers import Scores

EARTH_RADIUS_KM = 6371.0088
HALF_CIRCUMFERENCE_KM = math.pi * EARTH_RADIUS_KM


def great_circle_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Haversine distance in kilometres."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(a)))


class GeoScorer:
    name = "geo"
    reads = frozenset({Input.COORDINATES})

    def score(self, request: DecisionContext, candidates: Sequence[str]) -> Scores | None:
        location = request.client.location
        if location is None or location.latitude is None or location.longitude is None:
            return None
        values: list[float] = []
        parts = []
        for name in candidates:
            region = request.policy.region(name)
            km = great_circle_km(location.latitude, location.longitude,
                                 region.latitude, region.longitude)
            values.append(max(0.0, 1.0 - km / HALF_CIRCUMFERENCE_KM))
            parts.append(f"{name} {km:,.0f}km")
        where = f"({location.latitude:.2f}, {location.longitude:.2f})"
        # Scope 0 of its own: it reads coordinates, so the handler scopes the answer to the
        # client's location network already (and keeps that apart from scope_floor).
        return Scores(values, f"distance from {where}: " + ", ".join(parts), 0)
