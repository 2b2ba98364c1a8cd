# SPDX-License-Identifier: Apache-2.0
"""The bounded-load cap the affinity scorers respect (consistent hashing with bounded
loads, Mirrokni, Thorup and Zadimoghaddam, 2018).

With ``n`` candidates holding ``total`` requests in flight, placing one more request on
backend ``b`` is within the bound when::

    in_flight_b + 1 <= ceil(factor * (total + 1) / n)

that is, after taking it ``b`` holds at most ``factor`` times the mean load (rounded up).
Some candidate is always within the bound when ``factor >= 1`` (the least loaded one), so
affinity can steer requests but never pile them onto one backend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from regions.balancer.types import BackendSnapshot


def load_cap(candidates: Sequence[BackendSnapshot], factor: float) -> int:
    """The most requests in flight a candidate may hold after taking one more."""
    total = sum(b.in_flight for b in candidates)
    return math.ceil(factor * (total + 1) / max(len(candidates), 1))


def within_bound(backend: BackendSnapshot, cap: int) -> bool:
    return backend.in_flight + 1 <= cap
