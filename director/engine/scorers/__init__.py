"""Scorers: plugins that rank candidate regions with scores in [0, 1] (higher is better).

A scorer returns ``None`` when it has no data for this client (no measured latency, no
coordinates); the ranking then falls through to the next steering method.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scores:
    values: dict[str, float]
    note: str
    scope_prefix: int  # the client network these scores depend on (0: not on the client)
