# SPDX-License-Identifier: Apache-2.0
"""What the regional pickers share: they choose one backend from the weighted total of the
scorers' values (``pick``); ``order`` is that choice as the routing core asks for it."""

from __future__ import annotations

from collections.abc import Sequence

from regions.balancer.types import BackendSnapshot
from routing.combine import weighted_totals
from routing.plugins import Column


class TotalsPicker:
    """A picker over weighted totals: subclasses define ``pick``."""

    def pick(self, candidates: Sequence[BackendSnapshot], scores: Sequence[float]) -> int:
        raise NotImplementedError

    def order(self, candidates: Sequence[BackendSnapshot], columns: Sequence[Column]
              ) -> tuple[int]:
        """The pick alone (nothing in the regional tier needs the rest of the order)."""
        return (self.pick(candidates, weighted_totals(columns, len(candidates))),)
