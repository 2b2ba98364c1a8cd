# SPDX-License-Identifier: Apache-2.0
"""How long a client may keep the balancer's work waiting.

- ``stall_s``: an answer the client takes no byte of for this long (its TCP window full) is
  cut, and its GPU slot and tenant concurrency freed (``relay``).
"""

from __future__ import annotations

from dataclasses import dataclass

from regions.balancer.relay import DEFAULT_STALL_S


@dataclass(frozen=True)
class ClientTimeouts:
    """The deadlines a client's connection is held to (seconds, each above zero)."""

    stall_s: float = DEFAULT_STALL_S

    def __post_init__(self) -> None:
        for name in ("stall_s",):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"client timeout {name} must be above zero, not {value}")
