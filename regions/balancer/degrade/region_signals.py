# SPDX-License-Identifier: Apache-2.0
"""The region's state that a degradation ladder's triggers read, for one model.

- ``queue-wait``: how long the oldest request for the model in the region queue has
  waited, which is about what a request arriving now would wait;
- ``saturation``: requests in flight on the model's usable servers plus those queued for
  the model, over those servers' capacity (``cap``: pinned, learned, or the region's
  guess while unknown; 1 is full, 3 is three times what the servers run at once);
- ``error-rate``: the model's servers' errors over their answers in the last ten seconds
  (``scheduling.error_rate``), once they have given ``MIN_ANSWERS``.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.model import DegradeTrigger
from regions.balancer.scheduling.admission import Dispatcher

MIN_ANSWERS = 20


@dataclass(frozen=True)
class Signals:
    queue_wait_s: float
    saturation: float
    error_rate: float | None  # None: too few answers to say

    def value(self, trigger: DegradeTrigger) -> float | None:
        if trigger is DegradeTrigger.QUEUE_WAIT:
            return self.queue_wait_s
        if trigger is DegradeTrigger.SATURATION:
            return self.saturation
        return self.error_rate

    def holds(self, trigger: DegradeTrigger, threshold: float) -> bool:
        value = self.value(trigger)
        return value is not None and value >= threshold

    def to_json(self) -> dict[str, float | None]:
        return {"queue-wait": round(self.queue_wait_s, 3),
                "saturation": round(self.saturation, 3),
                "error-rate": None if self.error_rate is None else round(self.error_rate, 3)}


def read_signals(dispatcher: Dispatcher, model: str) -> Signals:
    """The region's signals now, for requests of ``model``."""
    pool = dispatcher.pool
    now = pool.clock()
    slots = busy = errors = answers = 0
    for view in pool.snapshot().backends:
        if model not in view.models or not view.usable:
            continue
        slots += view.cap
        busy += view.in_flight
    for backend in pool.backends:
        if model in backend.models:
            e, t = backend.error_rate.counts(now)
            errors, answers = errors + e, answers + t
    queued, waited = dispatcher.queued_for(model)
    saturation = (busy + queued) / slots if slots else (float("inf") if queued else 0.0)
    return Signals(waited, saturation, errors / answers if answers >= MIN_ANSWERS else None)
